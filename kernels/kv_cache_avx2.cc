// AVX2 row quantization for the int8 KV cache (kernels/kv_cache.h).
// Bit-identical to kv_cache.cc's scalar quantize_row: the same row parameters
// (kv_row_params), the same multiply by inv, round-half-even conversion and
// integer add of the zero point; the tail goes through a padded vector.
#include <immintrin.h>

#include <cstring>

#include "kernels/sdpa_impl.h"
#include "kernels/simd_avx2.h"

namespace hearth::kernels::internal {
namespace {

// 8 floats -> 8 int8 codes round(x * inv) + zero in [-128, 127].
void store_q8(__m256 x, __m256 inv, __m256i zero, std::int8_t* q, std::size_t n) {
  __m256i r = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(x, inv)), zero);
  r = _mm256_max_epi32(_mm256_min_epi32(r, _mm256_set1_epi32(127)), _mm256_set1_epi32(-128));
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  const __m128i b = _mm_packs_epi16(w, w);
  if (n == 8) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q), b);
  } else {
    alignas(16) std::int8_t tmp[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b);
    std::memcpy(q, tmp, n);
  }
}

// The n < 8 floats at x, padded with zeros (which leave min(0, .) and
// max(0, .) unchanged).
__m256 load_tail(const float* x, std::size_t n) {
  alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(tmp, x, n * sizeof(float));
  return _mm256_load_ps(tmp);
}

KvRowQuantization quantize_row(const float* x, std::size_t n, std::int8_t* q) {
  __m256 vmin = _mm256_setzero_ps(), vmax = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    vmin = _mm256_min_ps(vmin, v);
    vmax = _mm256_max_ps(vmax, v);
  }
  if (i < n) {
    const __m256 v = load_tail(x + i, n - i);
    vmin = _mm256_min_ps(vmin, v);
    vmax = _mm256_max_ps(vmax, v);
  }
  const KvRowParams p = kv_row_params(avx2::hmin(vmin), avx2::hmax(vmax));
  if (p.inv == 0.0f) {
    std::memset(q, 0, n);
    return {};
  }
  const __m256 inv = _mm256_set1_ps(p.inv);
  const __m256i zero = _mm256_set1_epi32(p.zero_point);
  for (i = 0; i + 8 <= n; i += 8) store_q8(_mm256_loadu_ps(x + i), inv, zero, q + i, 8);
  if (i < n) store_q8(load_tail(x + i, n - i), inv, zero, q + i, n - i);
  return {p.scale, static_cast<std::int8_t>(p.zero_point)};
}

}  // namespace

const KvCacheKernels kKvCacheAvx2 = {quantize_row};

}  // namespace hearth::kernels::internal
