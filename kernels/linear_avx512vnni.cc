// AVX-512 VNNI quantized linear layer: vpdpbusd multiplies the unsigned
// stored weights (w + C) by the signed int8 activations, 64 bytes (4 inputs x
// 16 rows) per instruction; each block's accumulator starts at -C * sum(x),
// which removes the bias exactly.
//
// Register tiles: G row groups (16 rows each) x T tokens, every weight load
// feeding T instructions. The GEMM tile is 2 x 6 (24 accumulators: 12 int32
// per block, 12 float across blocks); decode (one token) uses 4 x 1 so that
// four independent chains hide vpdpbusd's latency.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/linear_impl.h"
#include "kernels/simd_avx512.h"

namespace hearth::kernels::internal {
namespace {

using namespace avx512;  // float primitives of kernels/linear_tile_body.h

// Broadcast of a memory int32, as a load-port-only instruction. The compiler
// would broadcast once and copy the register for each accumulator, and the
// copies compete with vpdpbusd for the vector ports.
inline __m512i load_broadcast(const std::int32_t* p) {
  __m512i v;
  asm volatile("vpbroadcastd %1, %0" : "=v"(v) : "m"(*p));
  return v;
}

// The dot core of kernels/linear_tile_body.h: vpdpbusd on the stored
// (unsigned) weights, each block's accumulator starting at its bias.
// Q4_K's and Q4_1's stored q carry no bias (their mins are subtracted in
// float).
template <WeightFormat kF>
inline IVec block_start(const std::int32_t* bias) {
  if constexpr (has_mins(kF)) return _mm512_setzero_si512();
  return load_broadcast(bias);
}
inline IVec q4_products(IVec acc, IVec lo, IVec hi, IVec xlo, IVec xhi) {
  return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, lo, xlo), hi, xhi);
}
template <WeightFormat kF>
inline IVec block_finish(IVec acc, const std::int32_t*) {
  return acc;
}
inline IVec pair_products(IVec acc, IVec q0, IVec x0, IVec q1, IVec x1) {
  return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, q0, x0), q1, x1);
}
using Q8Unit = IVec;
inline Q8Unit q8_unit(IVec stored) { return stored; }
inline IVec q8_products(IVec acc, Q8Unit w, IVec x) { return _mm512_dpbusd_epi32(acc, w, x); }
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
  run_in_group_pairs<kF, kPerToken, static_cast<int>(kTileTokensAvx512Vnni), true>(w, a, g0, g1, t0,
                                                                                   t1, y, ldy);
}

#include "kernels/linear_kernels_simd_body.h"

}  // namespace

// Activations are quantized as on the AVX-512 path (quantize_avx512.cc).
constinit const LinearKernels kLinearAvx512Vnni =
    simd_linear_kernels(kTileTokensAvx512Vnni, quantize_activations_avx512);

}  // namespace hearth::kernels::internal
