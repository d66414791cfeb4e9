// AVX2 quantized linear layer (its activations are quantized by
// quantize_avx2.cc).
//
// A row group (16 rows) is two ymm halves of 8 rows. The u8 x s8 products go
// through vpmaddubsw as on the AVX-512 path without VNNI (see linear_avx512.cc
// for why nothing saturates): Q8_0 multiplies |w| by x carrying w's sign
// (vpsignb), Q4_0 multiplies the nibble by x and widens once per block.
//
// Register tiles. One token (decode) streams the weights: 3 row groups x 1
// token for Q8_0 and Q4_0, 2 for the K-quants (as many streams in flight as
// their registers allow). Several tokens reuse each weight from registers:
// Q4_0 and the K-quants unpack a half's whole block once (8 registers of q)
// and run it against every token of an activation tile (up to
// kTileTokensAvx2 = 8), so unpacking, not multiplying, is what the tile
// amortizes; Q8_0 has no unpacking to amortize
// but needs its sign registers, so it runs 1 row group x 2 tokens at a time
// within a tile.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/linear_impl.h"
#include "kernels/simd_avx2.h"

namespace hearth::kernels::internal {
namespace {

using namespace avx2;  // float primitives of kernels/linear_tile_body.h

// The dot core of kernels/linear_tile_body.h: vpmaddubsw's u8 x s8 pairs.
// Q4_0, Q4_1 and Q4_K sum int16 pairs over the whole block and widen them
// once (Q4_0 adding its bias); Q8_0 recovers signed weights, so it has no
// bias to remove.
template <WeightFormat kF>
inline IVec block_start(const std::int32_t*) {
  return _mm256_setzero_si256();
}
inline IVec q4_products(IVec acc, IVec lo, IVec hi, IVec xlo, IVec xhi) {
  acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(lo, xlo));
  return _mm256_add_epi16(acc, _mm256_maddubs_epi16(hi, xhi));
}
template <WeightFormat kF>
inline IVec block_finish(IVec acc, const std::int32_t* bias) {
  if constexpr (kF == WeightFormat::kQ8_0 || kF == WeightFormat::kIQ4_NL) return acc;
  const IVec wide = _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
  if constexpr (kF == WeightFormat::kQ4_0) return _mm256_add_epi32(_mm256_set1_epi32(*bias), wide);
  return wide;
}
// Q6_K: two steps' int16 pairs summed (at most 2 x 2 x 63 x 127), widened once.
inline IVec pair_products(IVec acc, IVec q0, IVec x0, IVec q1, IVec x1) {
  const IVec p = _mm256_add_epi16(_mm256_maddubs_epi16(q0, x0), _mm256_maddubs_epi16(q1, x1));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
// Q8_0: |w| (a valid u8 even for w = -128) times x carrying w's sign.
struct Q8Unit {
  IVec signed_w, abs_w;
};
inline Q8Unit q8_unit(IVec stored) {
  const IVec ws = _mm256_xor_si256(stored, _mm256_set1_epi8(static_cast<char>(0x80)));
  return {ws, _mm256_abs_epi8(ws)};
}
inline IVec q8_products(IVec acc, const Q8Unit& u, IVec x) {
  const IVec p = _mm256_maddubs_epi16(u.abs_w, _mm256_sign_epi8(x, u.signed_w));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
constexpr std::size_t kQ4DecodePrefetchBlocks = 8;
constexpr std::size_t kWideDecodePrefetchBlocks = 4;

#include "kernels/linear_tile_body.h"

// Float weights stored as halves (kernels/linear_half_body.h).
constexpr std::size_t kHalfGemvGroups = 2;
constexpr std::size_t kHalfGemmGroups = 1;
constexpr int kHalfGemmTokens = 6;
#include "kernels/linear_half_body.h"

// Int4 and K-quants: one half (8 rows) of row group g x all T tokens of
// token tile `tile` (T is the tile's width). The half's block is unpacked
// once into 8 registers of q (u[c]: inputs 4c..4c+3, u[c + 4]: inputs
// 16+4c..+3) and run against every token, so the unpacking (for Q5_K and
// Q6_K, of their top bits too) is paid once per T tokens. Each token's
// products are summed in int16 as far as they fit (Q4_0 / Q4_K all 8: 8 x 2
// x 15 x 127 = 30480; Q5_K each half's 4: 4 x 2 x 31 x 127; Q6_K pairs:
// 2 x 2 x 63 x 127), widened, and accumulated in float as on every path.
template <WeightFormat kF, int T, bool kPerToken>
void half_tile(const PackedWeights& w, const QuantizedActivations& a, std::size_t g,
               std::size_t half, std::size_t tile, float* y, std::size_t ldy) {
  constexpr bool kWide = five_bit(kF) || kF == WeightFormat::kQ6_K;
  constexpr bool kMins = has_mins(kF);
  constexpr bool kSuperMins = super_mins(kF);
  constexpr std::size_t kBlockBytes = kF == WeightFormat::kQ6_K ? kQ6BlockBytes
                                      : five_bit(kF)            ? kQ5BlockBytes
                                                                : kQ4BlockBytes;
  const std::size_t first = tile * a.tile_tokens;
  const std::uint8_t* wp = w.data + g * w.group_stride + 32 * half;
  const std::uint8_t* sp = w.data + g * w.group_stride + w.scales_offset;
  const std::int8_t* xp = a.q + tile * a.q_tile_stride;
  const std::int32_t* bp = a.bias + first * a.blocks;
  const std::int32_t* lp = a.low_sum + first * a.blocks;
  const float* dp = a.d + (kPerToken ? first : first * a.blocks);
  const IVec ones = _mm256_set1_epi16(1);
  Vec facc[T];
#pragma GCC unroll 8
  for (int j = 0; j < T; ++j) facc[j] = zero();
  Vec d_super[1], dmin_super[1];
  d_super[0] = dmin_super[0] = zero();
  alignas(32) std::uint8_t k_scales[kSuperMins ? kUnpackedKScaleBytes : 32];

  for (std::size_t b = 0; b < a.blocks; ++b) {
    load_super_scales<kF, 1>(sp + 2 * kLanes * half, 0, b, d_super, dmin_super);
    unpack_super_scales<kF, 1>(sp, 0, b, k_scales);
    IVec u[8];
    if constexpr (kWide) {
      wide_steps<kF, 0>(wp, u[0], u[1], u[4], u[5]);
      wide_steps<kF, 2>(wp, u[2], u[3], u[6], u[7]);
    } else {
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const IVec raw = load_aligned(wp + 64 * c);
        u[c] = low_nibbles(raw);
        u[c + 4] = high_nibbles(raw);
      }
    }
    [[maybe_unused]] Vec dw, dmin;       // Q6_K: dw is the rows' d
    [[maybe_unused]] IVec sc_lo, sc_hi;  // Q6_K: the sc of the low and high 16 inputs
    if constexpr (kF == WeightFormat::kQ6_K) {
      q6_k_scales(sp, half, b, dw, sc_lo, sc_hi);
    } else {
      unit_scales<kF>(sp, k_scales, static_cast<int>(half), b, d_super[0], dmin_super[0], dw, dmin);
    }
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      IVec p[8];
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s)
        p[s] = _mm256_maddubs_epi16(u[s], broadcast4(xp + 4 * T * s + 4 * j));
      auto widen = [&](IVec v) { return _mm256_madd_epi16(v, ones); };
      if constexpr (kF == WeightFormat::kQ6_K) {
        const IVec lo = _mm256_add_epi32(widen(_mm256_add_epi16(p[0], p[1])),
                                         widen(_mm256_add_epi16(p[2], p[3])));
        const IVec hi = _mm256_add_epi32(widen(_mm256_add_epi16(p[4], p[5])),
                                         widen(_mm256_add_epi16(p[6], p[7])));
        facc[j] = finish_q6_k<kPerToken>(lo, hi, dw, sc_lo, sc_hi, bp + j, lp + j, dp + j, facc[j]);
        continue;
      }
      const IVec lo16 =
          _mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3]));
      const IVec hi16 =
          _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]), _mm256_add_epi16(p[6], p[7]));
      IVec dot;
      if constexpr (kWide) {
        dot = _mm256_add_epi32(widen(lo16), widen(hi16));
        if constexpr (kF == WeightFormat::kQ5_0)
          dot = _mm256_add_epi32(dot, _mm256_set1_epi32(bp[j]));
      } else {
        dot = block_finish<kF>(_mm256_add_epi16(lo16, hi16), bp + j);
      }
      const Vec fdot = to_float(dot);
      if constexpr (kPerToken) {
        facc[j] = fmadd(fdot, dw, facc[j]);
      } else {
        facc[j] = fmadd(fdot, mul(dw, set1(dp[j])), facc[j]);
      }
      if constexpr (kMins) facc[j] = fmadd(dmin, set1(token_min<kPerToken>(dp[j], bp[j])), facc[j]);
    }
    wp += kBlockBytes;
    if constexpr (kF == WeightFormat::kQ6_K) {
      if ((b + 1) % kBlocksPerSuper == 0) sp += kQ6KSuperScaleBytes;
    } else {
      sp = next_scales<kF>(sp, b);
    }
    xp += 4 * T * 8;
    bp += T;
    lp += T;
    if constexpr (!kPerToken) dp += T;
  }

  const std::size_t row0 = g * kGroupRows + 8 * half;
  const std::size_t rows = w.n_out - row0 >= 8 ? 8 : w.n_out - row0;
#pragma GCC unroll 8
  for (int j = 0; j < T; ++j) {
    __m256 v = facc[j];
    if constexpr (kPerToken) v = _mm256_mul_ps(v, _mm256_set1_ps(dp[j]));
    float* out = y + (first + j) * ldy + row0;
    if (rows == 8) {
      _mm256_storeu_ps(out, v);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, v);
      for (std::size_t r = 0; r < rows; ++r) out[r] = tmp[r];
    }
  }
}

static_assert(kTileTokensAvx2 == 8, "half_tiles() covers tiles of 1..8 tokens");
// Widest token tile that still runs as pair tiles (int4 and K-quants).
constexpr std::size_t kPairTileMaxTokens = 2;

// Int4 and K-quants, row group g x token tile p of n tokens (1..8).
template <WeightFormat kF, bool kPerToken>
void half_tiles(const PackedWeights& w, const QuantizedActivations& a, std::size_t g, std::size_t p,
                std::size_t n, float* y, std::size_t ldy) {
  using Fn = void (*)(const PackedWeights&, const QuantizedActivations&, std::size_t, std::size_t,
                      std::size_t, float*, std::size_t);
  static constexpr Fn kByWidth[] = {half_tile<kF, 1, kPerToken>, half_tile<kF, 2, kPerToken>,
                                    half_tile<kF, 3, kPerToken>, half_tile<kF, 4, kPerToken>,
                                    half_tile<kF, 5, kPerToken>, half_tile<kF, 6, kPerToken>,
                                    half_tile<kF, 7, kPerToken>, half_tile<kF, 8, kPerToken>};
  // A half whose rows are all padding (the last group of n_out % 16 <= 8) is skipped.
  const std::size_t halves = w.n_out - g * kGroupRows > 8 ? 2 : 1;
  for (std::size_t h = 0; h < halves; ++h) kByWidth[n - 1](w, a, g, h, p, y, ldy);
}

// Row group g x token tile p of n tokens, 2 tokens at a time: Q8_0 always,
// the others when the tile is too narrow for unpacking once to pay (measured
// with bench_batched_step: 2 tokens run faster as one 16-row tile).
template <WeightFormat kF, bool kPerToken>
void pair_tiles(const PackedWeights& w, const QuantizedActivations& a, std::size_t g, std::size_t p,
                std::size_t n, float* y, std::size_t ldy) {
  std::size_t j = 0;
  for (; j + 2 <= n; j += 2) tile<1, 2, kF, kPerToken>(w, a, g, p, j, n, y, ldy);
  if (j < n) tile<1, 1, kF, kPerToken>(w, a, g, p, j, n, y, ldy);
}

template <WeightFormat kF, bool kPerToken>
void run(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0, std::size_t g1,
         std::size_t t0, std::size_t t1, float* y, std::size_t ldy) {
  const std::size_t tt = a.tile_tokens;
  const std::size_t p0 = t0 / tt, p1 = (t1 + tt - 1) / tt;
  auto tokens = [&](std::size_t p) { return a.m - p * tt < tt ? a.m - p * tt : tt; };
  std::size_t g = g0;
  if (a.m == 1) {  // decode: the streaming GEMV tile
    // Q8_0 and Q4_0 read three row groups side by side: cores that read
    // faster with more streams in flight decode faster so. The K-quant
    // tiles need their registers for scales and are bound by their
    // instructions, so a third group gained them nothing
    // (docs/performance.md).
    if constexpr (kF == WeightFormat::kQ8_0 || kF == WeightFormat::kQ4_0)
      for (; g + 3 <= g1; g += 3) tile<3, 1, kF, kPerToken, 1>(w, a, g, 0, 0, 1, y, ldy);
    for (; g + 2 <= g1; g += 2) tile<2, 1, kF, kPerToken, 1>(w, a, g, 0, 0, 1, y, ldy);
    if (g < g1) tile<1, 1, kF, kPerToken, 1>(w, a, g, 0, 0, 1, y, ldy);
    return;
  }
  for (; g < g1; ++g)
    for (std::size_t p = p0; p < p1; ++p) {
      const std::size_t n = tokens(p);
      // IQ4_NL's looked-up bytes are Q8_0's: half_tile multiplies nibbles.
      if constexpr (kF == WeightFormat::kQ8_0 || kF == WeightFormat::kIQ4_NL) {
        pair_tiles<kF, kPerToken>(w, a, g, p, n, y, ldy);
      } else if (n > kPairTileMaxTokens) {
        half_tiles<kF, kPerToken>(w, a, g, p, n, y, ldy);
      } else {
        pair_tiles<kF, kPerToken>(w, a, g, p, n, y, ldy);
      }
    }
}

#include "kernels/linear_kernels_simd_body.h"

}  // namespace

constinit const LinearKernels kLinearAvx2 =
    simd_linear_kernels(kTileTokensAvx2, quantize_activations_avx2);

}  // namespace hearth::kernels::internal
