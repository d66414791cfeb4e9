// AVX-512 (F/BW, without VNNI) quantized linear layer (its activations, and
// the VNNI path's, are quantized by quantize_avx512.cc).
//
// Without vpdpbusd the u8 x s8 products go through vpmaddubsw, whose int16
// pair sums saturate. So:
//  - Q8_0 recovers the signed weight (stored ^ 0x80) and multiplies |w| (a
//    valid u8 even for w = -128) by x carrying w's sign: each product is at
//    most 128 * 127 and a pair 32512 < 32767, so nothing saturates, and the
//    int32 sums equal the VNNI path's exactly.
//  - Q4_0 multiplies the unsigned nibble (0..15) by x directly: a pair is at
//    most 2 * 15 * 127 = 3810, so the 8 pair sums of a block fit in int16
//    (30480) and are widened once per block.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/linear_impl.h"
#include "kernels/simd_avx512.h"

namespace hearth::kernels::internal {
namespace {

using namespace avx512;  // float primitives of kernels/linear_tile_body.h

// The dot core of kernels/linear_tile_body.h: vpmaddubsw's u8 x s8 pairs
// (see above for why nothing saturates).
template <WeightFormat kF>
inline IVec block_start(const std::int32_t*) {
  return _mm512_setzero_si512();
}
inline IVec q4_products(IVec acc, IVec lo, IVec hi, IVec xlo, IVec xhi) {
  acc = _mm512_add_epi16(acc, _mm512_maddubs_epi16(lo, xlo));
  return _mm512_add_epi16(acc, _mm512_maddubs_epi16(hi, xhi));
}
template <WeightFormat kF>
inline IVec block_finish(IVec acc, const std::int32_t* bias) {
  if constexpr (kF == WeightFormat::kQ8_0 || kF == WeightFormat::kIQ4_NL) return acc;
  const IVec wide = _mm512_madd_epi16(acc, _mm512_set1_epi16(1));
  if constexpr (kF == WeightFormat::kQ4_0) return _mm512_add_epi32(_mm512_set1_epi32(*bias), wide);
  return wide;
}
// Q6_K: two steps' int16 pairs summed (at most 2 x 2 x 63 x 127), widened once.
inline IVec pair_products(IVec acc, IVec q0, IVec x0, IVec q1, IVec x1) {
  const IVec p = _mm512_add_epi16(_mm512_maddubs_epi16(q0, x0), _mm512_maddubs_epi16(q1, x1));
  return _mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_set1_epi16(1)));
}
// Q8_0: |w| times x negated where w < 0 (no vpsignb on zmm: a masked
// subtraction instead).
struct Q8Unit {
  IVec abs_w;
  __mmask64 negative;
};
inline Q8Unit q8_unit(IVec stored) {
  const IVec ws = _mm512_xor_si512(stored, _mm512_set1_epi8(static_cast<char>(0x80)));
  return {_mm512_abs_epi8(ws), _mm512_movepi8_mask(ws)};
}
inline IVec q8_products(IVec acc, const Q8Unit& u, IVec x) {
  const IVec xs = _mm512_mask_sub_epi8(x, u.negative, _mm512_setzero_si512(), x);
  return _mm512_add_epi32(
      acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u.abs_w, xs), _mm512_set1_epi16(1)));
}
constexpr std::size_t kQ4DecodePrefetchBlocks = 8;
constexpr std::size_t kWideDecodePrefetchBlocks = 4;

#include "kernels/linear_tile_body.h"

// Float weights stored as halves (kernels/linear_half_body.h).
constexpr std::size_t kHalfGemvGroups = 4;
constexpr std::size_t kHalfGemmGroups = 4;
constexpr int kHalfGemmTokens = 6;
#include "kernels/linear_half_body.h"

template <WeightFormat kF, bool kPerToken>
void run(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0, std::size_t g1,
         std::size_t t0, std::size_t t1, float* y, std::size_t ldy) {
  run_in_group_pairs<kF, kPerToken, static_cast<int>(kTileTokensAvx512), false>(w, a, g0, g1, t0,
                                                                                t1, y, ldy);
}

#include "kernels/linear_kernels_simd_body.h"

}  // namespace

constinit const LinearKernels kLinearAvx512 =
    simd_linear_kernels(kTileTokensAvx512, quantize_activations_avx512);

}  // namespace hearth::kernels::internal
