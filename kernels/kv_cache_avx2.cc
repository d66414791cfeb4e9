// AVX2 row quantization for the int8 KV cache (kernels/kv_cache.h).
// Bit-identical to quantize_kv_row_scalar: the same multiply by 127 / amax and
// round-half-even conversion; the tail goes through a zero-padded vector.
#include <immintrin.h>

#include <cstring>

#include "kernels/sdpa_impl.h"

namespace hearth::kernels::sdpa_detail {
namespace {

float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// 8 floats -> 8 int8 in [-127, 127].
void store_q8(__m256 x, __m256 inv, std::int8_t* q, std::size_t n) {
  __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(x, inv));
  r = _mm256_max_epi32(_mm256_min_epi32(r, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
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

__m256 load_tail(const float* x, std::size_t n) {
  alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(tmp, x, n * sizeof(float));
  return _mm256_load_ps(tmp);
}

}  // namespace

float quantize_kv_row_avx2(const float* x, std::size_t n, std::int8_t* q) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vmax = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    vmax = _mm256_max_ps(vmax, _mm256_and_ps(abs_mask, _mm256_loadu_ps(x + i)));
  if (i < n) vmax = _mm256_max_ps(vmax, _mm256_and_ps(abs_mask, load_tail(x + i, n - i)));
  const float amax = hmax8(vmax);
  if (amax == 0.0f) {
    std::memset(q, 0, n);
    return 0.0f;
  }
  const __m256 inv = _mm256_set1_ps(127.0f / amax);
  for (i = 0; i + 8 <= n; i += 8) store_q8(_mm256_loadu_ps(x + i), inv, q + i, 8);
  if (i < n) store_q8(load_tail(x + i, n - i), inv, q + i, n - i);
  return amax / 127.0f;
}

}  // namespace hearth::kernels::sdpa_detail
