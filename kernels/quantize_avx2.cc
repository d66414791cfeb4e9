// AVX2 paths of the quantization family (kernels/quantize.h) and Linear's
// AVX2 activation quantizer: kernels/quantize_simd_body.h over the 8-lane
// primitives of kernels/simd_avx2.h and the int32-code primitives below.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/linear_impl.h"
#include "kernels/quantize_impl.h"
#include "kernels/simd_avx2.h"

namespace hearth::kernels::internal {
namespace {

using namespace avx2;  // float primitives of kernels/quantize_simd_body.h

// The codes are in [-128, 127], so the saturating packs only narrow.
inline __m128i pack_codes(IVec v) {
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return _mm_packs_epi16(w, w);
}
inline void store_codes(std::int8_t* q, IVec v) {
  _mm_storel_epi64(reinterpret_cast<__m128i*>(q), pack_codes(v));
}
inline void store_codes_first(std::int8_t* q, IVec v, std::size_t n) {
  alignas(16) std::int8_t tmp[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(tmp), pack_codes(v));
  std::memcpy(q, tmp, n);
}
inline void store_block_codes(std::int8_t* q, const IVec* v) {
  // The packs work within 128-bit lanes; the permute restores element order.
  const __m256i ab = _mm256_packs_epi32(v[0], v[1]);
  const __m256i cd = _mm256_packs_epi32(v[2], v[3]);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), order));
}

#include "kernels/quantize_simd_body.h"

}  // namespace

const QuantizeKernels kQuantizeAvx2 = kQuantizeKernels;

void quantize_activations_avx2(const float* x, std::size_t t0, std::size_t t1, std::int32_t bias_c,
                               const QuantizedActivations& a) {
  quantize_activations(x, t0, t1, bias_c, a);
}

}  // namespace hearth::kernels::internal
