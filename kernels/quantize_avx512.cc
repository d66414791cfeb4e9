// AVX-512 paths of the quantization family (kernels/quantize.h) and Linear's
// AVX-512 activation quantizer (the VNNI path's too):
// kernels/quantize_simd_body.h over the 16-lane primitives of
// kernels/simd_avx512.h and the int32-code primitives below, where vpmovsdb
// narrows codes straight to int8 and masks store the tails.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/linear_impl.h"
#include "kernels/quantize_impl.h"
#include "kernels/simd_avx512.h"

namespace hearth::kernels::internal {
namespace {

using namespace avx512;  // float primitives of kernels/quantize_simd_body.h

inline void store_codes(std::int8_t* q, IVec v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(v));
}
inline void store_codes_first(std::int8_t* q, IVec v, std::size_t n) {
  _mm512_mask_cvtsepi32_storeu_epi8(q, tail_mask(n), v);
}
inline void store_block_codes(std::int8_t* q, const IVec* v) {
  store_codes(q, v[0]);
  store_codes(q + 16, v[1]);
}

#include "kernels/quantize_simd_body.h"

}  // namespace

const QuantizeKernels kQuantizeAvx512 = kQuantizeKernels;

void quantize_activations_avx512(const float* x, std::size_t t0, std::size_t t1,
                                 std::int32_t bias_c, const QuantizedActivations& a) {
  quantize_activations(x, t0, t1, bias_c, a);
}

}  // namespace hearth::kernels::internal
