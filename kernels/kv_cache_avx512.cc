// AVX-512 row quantization for the int8 KV cache (kernels/kv_cache.h).
// Bit-identical to quantize_kv_row_scalar: the same multiply by 127 / amax and
// round-half-even conversion; tails use masked loads and stores.
#include <immintrin.h>

#include <cstring>

#include "kernels/sdpa_impl.h"

namespace hearth::kernels::sdpa_detail {
namespace {

__mmask16 tail_mask(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

void store_q8(__m512 x, __m512 inv, std::int8_t* q, __mmask16 m) {
  __m512i r = _mm512_cvtps_epi32(_mm512_mul_ps(x, inv));
  r = _mm512_max_epi32(_mm512_min_epi32(r, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
  _mm512_mask_cvtsepi32_storeu_epi8(q, m, r);
}

}  // namespace

float quantize_kv_row_avx512(const float* x, std::size_t n, std::int8_t* q) {
  __m512 vmax = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  if (i < n)
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(tail_mask(n - i), x + i)));
  const float amax = _mm512_reduce_max_ps(vmax);
  if (amax == 0.0f) {
    std::memset(q, 0, n);
    return 0.0f;
  }
  const __m512 inv = _mm512_set1_ps(127.0f / amax);
  for (i = 0; i + 16 <= n; i += 16) store_q8(_mm512_loadu_ps(x + i), inv, q + i, 0xffff);
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    store_q8(_mm512_maskz_loadu_ps(m, x + i), inv, q + i, m);
  }
  return amax / 127.0f;
}

}  // namespace hearth::kernels::sdpa_detail
