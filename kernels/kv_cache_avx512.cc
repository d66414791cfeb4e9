// AVX-512 row quantization for the int8 KV cache (kernels/kv_cache.h).
// Bit-identical to kv_cache.cc's scalar quantize_row: the same row parameters
// (kv_row_params), the same multiply by inv, round-half-even conversion and
// integer add of the zero point; tails use masked loads and stores.
#include <immintrin.h>

#include <cstring>

#include "kernels/sdpa_impl.h"
#include "kernels/simd_avx512.h"

namespace hearth::kernels::internal {
namespace {

using avx512::tail_mask;

// 16 floats -> int8 codes round(x * inv) + zero in [-128, 127] (lanes of m).
void store_q8(__m512 x, __m512 inv, __m512i zero, std::int8_t* q, __mmask16 m) {
  __m512i r = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x, inv)), zero);
  r = _mm512_max_epi32(_mm512_min_epi32(r, _mm512_set1_epi32(127)), _mm512_set1_epi32(-128));
  _mm512_mask_cvtsepi32_storeu_epi8(q, m, r);
}

KvRowQuantization quantize_row(const float* x, std::size_t n, std::int8_t* q) {
  __m512 vmin = _mm512_setzero_ps(), vmax = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    vmin = _mm512_min_ps(vmin, v);
    vmax = _mm512_max_ps(vmax, v);
  }
  if (i < n) {  // masked-off lanes load as 0, which leaves min(0, .) and max(0, .) unchanged
    const __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
    vmin = _mm512_min_ps(vmin, v);
    vmax = _mm512_max_ps(vmax, v);
  }
  const KvRowParams p = kv_row_params(_mm512_reduce_min_ps(vmin), _mm512_reduce_max_ps(vmax));
  if (p.inv == 0.0f) {
    std::memset(q, 0, n);
    return {};
  }
  const __m512 inv = _mm512_set1_ps(p.inv);
  const __m512i zero = _mm512_set1_epi32(p.zero_point);
  for (i = 0; i + 16 <= n; i += 16) store_q8(_mm512_loadu_ps(x + i), inv, zero, q + i, 0xffff);
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    store_q8(_mm512_maskz_loadu_ps(m, x + i), inv, zero, q + i, m);
  }
  return {p.scale, static_cast<std::int8_t>(p.zero_point)};
}

}  // namespace

const KvCacheKernels kKvCacheAvx512 = {quantize_row};

}  // namespace hearth::kernels::internal
