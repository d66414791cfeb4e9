// Private to kernels/linear*.cc: the packed weight layout, the quantized
// activation buffers, and the per-ISA entry points Linear dispatches to.
//
// This header is included by files compiled with AVX2 / AVX-512 flags, so it
// declares only: no inline functions, no templates (see kernels/CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include <pthreadpool.h>

#include "absl/status/status.h"
#include "kernels/gguf_blocks.h"
#include "kernels/linear.h"

struct xnn_operator;

namespace hearth::kernels::internal {

// Output rows per row group: one zmm of int32 / float lanes.
inline constexpr std::size_t kGroupRows = 16;
// Bytes of integer weights per (row group, block of 32 inputs).
inline constexpr std::size_t kQ8BlockBytes = kGroupRows * kQuantGroup;      // 512
inline constexpr std::size_t kQ4BlockBytes = kGroupRows * kQuantGroup / 2;  // 256
// The widest activation tile (QuantizedActivations::tile_tokens) of each
// path: the token width of its widest GEMM register tile.
inline constexpr std::size_t kTileTokensScalar = 1;
inline constexpr std::size_t kTileTokensAvx2 = 8;
inline constexpr std::size_t kTileTokensAvx512 = 4;
inline constexpr std::size_t kTileTokensAvx512Vnni = 6;
// Bytes of fp16 scales per (row group, block).
inline constexpr std::size_t kScaleBytes = kGroupRows * 2;  // 32
// The unsigned bias of stored weights: stored = w + C.
inline constexpr std::int32_t kQ8Bias = 128;
inline constexpr std::int32_t kQ4Bias = 8;
// Q4_K stores the unsigned q itself and subtracts its mins (dmin * m) from
// the float sum instead; its activations' bias is -sum(q) (C = 1), the sum
// the mins multiply.
inline constexpr std::int32_t kQ4KBias = 1;
// Q5_0 stores its unsigned 5-bit q (w = d * (q - 16)): C = 16.
inline constexpr std::int32_t kQ5Bias = 16;

// The integer formats of the packed layout, as template arguments of the
// per-ISA matmuls.
enum class WeightFormat { kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K, kIQ4_NL, kQ5_0, kQ4_1, kQ5_1 };

// Q4_1 and Q5_1 (w = d * q + m, per block): q unsigned as Q4_K's and Q5_K's
// (C = kQ4KBias), and a block's scales region holds d[16] fp16, then -m[16]
// fp16 (kBlockMinScaleBytes per block, row r at 2r): the min enters as Q4_K's
// does, dmin = -m (exact) times -sum(q_x).
inline constexpr std::size_t kBlockMinScaleBytes = 64;
constexpr bool block_mins(WeightFormat f) {
  return f == WeightFormat::kQ4_1 || f == WeightFormat::kQ5_1;
}
// Q4_K and Q5_K: d and dmin per super-block, 6-bit scales and mins per
// block (the layout below).
constexpr bool super_mins(WeightFormat f) {
  return f == WeightFormat::kQ4_K || f == WeightFormat::kQ5_K;
}
// Formats whose blocks subtract a min in float (their stored q carry no bias).
constexpr bool has_mins(WeightFormat f) { return super_mins(f) || block_mins(f); }
// Formats whose q are 5 bits wide, in Q5_K's five steps (kQ5BlockBytes).
constexpr bool five_bit(WeightFormat f) {
  return f == WeightFormat::kQ5_K || f == WeightFormat::kQ5_0 || f == WeightFormat::kQ5_1;
}

// IQ4_NL: its blocks are stored as Q4_0's (the GGUF nibbles, fp16 d), each
// nibble an index into kIq4NlValues (kernels/gguf_legacy_blocks.h). The
// kernels look each nibble up as the byte kIq4NlValues[nibble] + 128 and
// from there on treat the block as Q8_0's (stored = w + 128, C = kQ8Bias).
inline constexpr std::uint8_t kIq4NlStored[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                                  129, 141, 153, 166, 181, 197, 217, 241};

// Q4_K (super-blocks of 256 inputs = 8 blocks): the blocks' nibbles are laid
// out as Q4_0's (kQ4BlockBytes per block, the sub-block's q in GGUF Q4_0's
// pairing), and the scales region holds, per super-block s, at
// scales_offset + s * kQ4KSuperScaleBytes (the file's 16 bytes per row):
//   d[16] fp16 at +0, dmin[16] fp16 at +kQ4KDminOffset,
//   sc[8][16] at +kQ4KScOffset: sub-block j's 6-bit sc in bits 0-5 and its
//     m's bits 4-5 in bits 6-7,
//   m4[4][16] at +kQ4KMinOffset: the low 4 bits of m of sub-blocks k (bits
//     0-3) and k + 4 (bits 4-7)
// (row r of the group at index r; sub-block j's at [j][r]), so that a
// super-block's 16 rows unpack with a mask, a shift and an or per vector
// (k_scale and k_min read one). Block b's row scale is d * sc[b % 8] and its
// min dmin * m[b % 8], both exact in float.
inline constexpr std::size_t kBlocksPerSuper = 8;
inline constexpr std::size_t kQ4KSuperScaleBytes = 256;
inline constexpr std::size_t kQ4KDminOffset = 32;
inline constexpr std::size_t kQ4KScOffset = 64;
inline constexpr std::size_t kQ4KMinOffset = 192;

// Q4_K / Q5_K: sub-block j's 6-bit scale and min of row r in the
// super-block's scales at sb (the layout above).
inline int k_scale(const std::uint8_t* sb, std::size_t j, std::size_t r) {
  return sb[kQ4KScOffset + kGroupRows * j + r] & 0x3f;
}
inline int k_min(const std::uint8_t* sb, std::size_t j, std::size_t r) {
  const int low = sb[kQ4KMinOffset + kGroupRows * (j % 4) + r] >> (j < 4 ? 0 : 4) & 0x0f;
  return (sb[kQ4KScOffset + kGroupRows * j + r] >> 6) << 4 | low;
}

// Q5_K: as Q4_K (scales, mins, kQ4KBias), its q 5 bits wide, in 5 steps of
// 64 bytes, byte r * 4 + k of each for row r. With L_c = q[4c + k] and
// H_c = q[16 + 4c + k] (c = 0..3), steps 0-4 hold L_0, L_1, H_0, L_2, L_3 in
// bits 0-4, and their bits 5-7 the rest: H_1 bits 0-2 (step 0) and 3-4
// (step 1, bits 5-6), H_2 bits 0-2 (step 2) and 3-4 (step 3, bits 5-6), H_3
// bits 0-2 (step 4), 3 (step 3, bit 7) and 4 (step 1, bit 7). So five
// q-vectors take one mask each, and three are gathered (q5_k_code reads one
// q).
inline constexpr std::size_t kQ5BlockBytes = 320;

// Q5_0 and Q5_1 keep their 5-bit q in the same five steps, with Q4_0's
// (Q5_0) or Q4_1's per-block scales.
//
// Q5_K, Q5_0, Q5_1: the q of input i (0..31) of row r in the packed block at `block`.
inline int q5_k_code(const std::uint8_t* block, std::size_t r, std::size_t i) {
  const std::uint8_t* s = block + r * 4 + i % 4;  // step n's byte at s[64 * n]
  const std::size_t c = (i % 16) / 4;
  if (i < 16) return s[64 * (c < 2 ? c : c + 1)] & 0x1f;
  switch (c) {
    case 0:
      return s[128] & 0x1f;
    case 1:
      return s[0] >> 5 | (s[64] >> 5 & 3) << 3;
    case 2:
      return s[128] >> 5 | (s[192] >> 5 & 3) << 3;
    default:
      return s[256] >> 5 | (s[192] >> 7) << 3 | (s[64] >> 7) << 4;
  }
}

// Q6_K (super-blocks of 256 inputs, a signed 8-bit scale per 16): a block of
// 32 inputs keeps its unsigned 6-bit q (w = d * sc * (q - 32)) in 6 steps of
// 64 bytes, byte r * 4 + k of each for row r. Two triples of steps, t = 0 and
// 1, each serve the q-vectors of inputs 8t + k and 8t + 4 + k (the low half)
// and 16 + 8t + k and 16 + 8t + 4 + k (the high half): step 3t holds
// q[8t + k], step 3t + 1 q[8t + 4 + k], step 3t + 2 q[16 + 8t + k], each in
// bits 0-5, and their bits 6-7 hold q[16 + 8t + 4 + k]'s bits 0-1, 2-3 and
// 4-5. So three q-vectors of a triple take one mask each, and the fourth is
// gathered from the three steps' top bits (q6_k_code reads one q). That
// takes fewer vector operations than nibbles and a plane of top bits
// (docs/performance.md). The scales region holds, per super-block s, at
// scales_offset + s * kQ6KSuperScaleBytes: d[16] fp16 at +0 and sc[16][16]
// int8 at +kQ6KScOffset (sub-block k of 16 inputs, row r at [k][r]).
// Activations are quantized with C = kQ6KBias, and their low_sum holds each
// block's first 16 codes' sum: the two sums the -32 offsets multiply.
inline constexpr std::size_t kQ6BlockBytes = 384;
inline constexpr std::size_t kQ6KSuperScaleBytes = 288;
inline constexpr std::size_t kQ6KScOffset = 32;
inline constexpr std::int32_t kQ6KBias = 1;

// Q6_K: the q of input i (0..31) of row r in the packed block at `block`.
inline int q6_k_code(const std::uint8_t* block, std::size_t r, std::size_t i) {
  const std::size_t t = (i % 16) / 8;
  const bool high = i >= 16, second = i % 8 >= 4;
  const std::uint8_t* triple = block + 3 * 64 * t + r * 4 + i % 4;
  if (high && second) return triple[0] >> 6 | (triple[64] >> 6) << 2 | (triple[128] >> 6) << 4;
  return triple[64 * (high ? 2 : second ? 1 : 0)] & 0x3f;
}

// The packed weights of a quantized Linear (layout in kernels/linear.h):
//   group g starts at data + g * group_stride;
//   block b's integer weights at + b * (kQ8BlockBytes | kQ4BlockBytes):
//     Q8_0: byte s * 64 + r * 4 + j = w[row 16g + r][input 32b + 4s + j] + 128, s = 0..7
//     Q4_0: byte c * 64 + r * 4 + j = the GGUF byte qs[4c + j] of row 16g + r, c = 0..3
//           (low nibble: input 4c + j; high nibble: input 16 + 4c + j; each = w + 8)
//     IQ4_NL: as Q4_0, each nibble an index into kIq4NlValues (above)
//     Q4_1: as Q4_0 (w = d * q + m); Q5_0, Q5_1: Q5_K's steps (above)
//   block b's scales at + scales_offset + b * 32: 16 fp16, row r at 2r
//     (Q4_1, Q5_1: at + b * kBlockMinScaleBytes, d then -m).
// Rows >= n_out of the last group hold w = 0 and scale 0.
struct PackedWeights {
  const std::uint8_t* data;
  std::size_t group_stride;   // bytes, a multiple of 64
  std::size_t scales_offset;  // bytes from a group's start, a multiple of 64
  std::size_t blocks;         // n_in / 32
  std::size_t n_out;
};

// Quantized activations of m tokens (written by quantize_activations_*),
// packed in token tiles the way the weights are packed in row groups, so that
// a register tile of T tokens reads its activations from one pointer:
//   tokens are split into tiles of tile_tokens (TT) tokens; tile p holds
//   tokens [p * TT, p * TT + n) with n = min(TT, m - p * TT) (only the last
//   tile may be short);
//   q: tile p starts at q + p * q_tile_stride; within it, input k of the
//     tile's token j is at byte (k / 4) * 4n + 4j + k % 4: each 4-input step
//     holds the n tokens' 4 bytes side by side. Values are in [-127, 127].
//     With TT = 1 this is plain row-major with row stride q_tile_stride.
//   bias and d (kPerGroup32): the value of block b of the tile's token j is at
//     [p * TT * blocks + b * n + j];
//     bias = -C * (sum of that block's q), where C is the weight format's
//     unsigned bias (kQ8Bias, kQ4Bias or kQ5Bias): the int32 that starts each
//     block's dot product on the stored unsigned weights, so that
//     sum(stored_w * q) + bias = sum(w * q) (paths that recover the signed
//     weights, Q8_0 without VNNI, ignore it); for the formats with mins and
//     Q6_K, C = 1 and bias = -sum(q), the sum their offsets multiply;
//     d = the block's float scale.
//   d (kPerToken): d[t], one scale per token.
struct QuantizedActivations {
  std::int8_t* q;
  float* d;
  std::int32_t* bias;
  std::int32_t* low_sum;      // per block as bias: the sum of its first 16 codes
  std::size_t m;              // tokens
  std::size_t blocks;         // n_in / 32
  std::size_t tile_tokens;    // TT
  std::size_t q_tile_stride;  // bytes, a multiple of 64, >= TT * n_in
  bool per_token;
  // Whether one-token tiles fetch their weight blocks ahead themselves
  // (kernels/cpu_features.h decode_prefetch(); the results are the same).
  bool decode_prefetch = true;
};

// Where token t's values live in `a`: input k at q[(k / 4) * step + k % 4],
// the bias and d of block b at [meta + b * n]. Defined in linear_scalar.cc.
struct TokenSlot {
  std::int8_t* q;
  std::size_t step;  // 4 * n
  std::size_t meta;
  std::size_t n;  // tokens in t's tile
};
TokenSlot token_slot(const QuantizedActivations& a, std::size_t t);

// Quantizes tokens [t0, t1) of x (row-major, n_in = 32 * a.blocks per row)
// into `a` (see above) with the symmetric rule of kernels/quantize.h (d =
// scale = amax / 127, q = round_half_even(x * (1 / d)), 0 for an amax below
// kTinyRange), amax per block, or per row when a.per_token. `bias_c` is C.
// Any token range may be given (threads quantize disjoint ranges). Defined by
// the quantization family (quantize.cc, quantize_avx2.cc, quantize_avx512.cc):
// every path gives the same bytes.
using QuantizeFn = void (*)(const float* x, std::size_t t0, std::size_t t1, std::int32_t bias_c,
                            const QuantizedActivations& a);
void quantize_activations_scalar(const float* x, std::size_t t0, std::size_t t1,
                                 std::int32_t bias_c, const QuantizedActivations& a);
void quantize_activations_avx2(const float* x, std::size_t t0, std::size_t t1, std::int32_t bias_c,
                               const QuantizedActivations& a);
void quantize_activations_avx512(const float* x, std::size_t t0, std::size_t t1,
                                 std::int32_t bias_c, const QuantizedActivations& a);

// Float weights stored as halves (IEEE fp16, or bfloat16): row groups of
// kGroupRows rows, input i of group g's rows at data[g * group_stride + i *
// kGroupRows + r] (group_stride = n_in * kGroupRows halves, rounded up to 32
// so groups stay 64-byte aligned); the padding rows of the last group hold
// +0. Every HalfMatmulFn computes, for each row r < n_out of groups [g0, g1)
// and each of the m tokens of x (row-major, n_in floats per token):
//   acc = 0; acc = fma(float(w[r][i]), x[t][i], acc) for i = 0, 1, ..., n_in - 1;
//   y[t * n_out + r] = acc
// one correctly rounded fma per input, in input order, so every path gives
// bit-identical results.
struct HalfWeights {
  const std::uint16_t* data;
  std::size_t group_stride;  // halves
  std::size_t n_in;
  std::size_t n_out;
};
using HalfMatmulFn = void (*)(const HalfWeights& w, const float* x, std::size_t m, std::size_t g0,
                              std::size_t g1, float* y);

// y[t * ldy + 16g + r] for row groups [g0, g1) and tokens [t0, t1) (rows >=
// w.n_out are not written), accumulated in the order documented in
// kernels/linear.h, is what every MatmulFn computes (the type is declared in
// kernels/linear.h). Every implementation gives bit-identical results. t0 must
// be a multiple of a.tile_tokens, and a.tile_tokens at most the ISA's own
// (Linear balances the tiles of m tokens), since a register tile covers
// exactly one token tile.
//
// One ISA's linear kernels (the dispatch idiom of kernels/cpu_features.h):
// its activation layout, its quantizer, a matmul per weight format and
// activation granularity (a.per_token must match the entry called), and the
// half-weight matmuls.
struct LinearKernels {
  std::size_t tile_tokens;  // kTileTokens* of the ISA
  QuantizeFn quantize;
  MatmulFn q8_0_per_group, q8_0_per_token;
  MatmulFn q4_0_per_group, q4_0_per_token;
  MatmulFn q4_k_per_group, q4_k_per_token;
  MatmulFn q5_k_per_group, q5_k_per_token;
  MatmulFn q6_k_per_group, q6_k_per_token;
  MatmulFn iq4_nl_per_group, iq4_nl_per_token;
  MatmulFn q5_0_per_group, q5_0_per_token;
  MatmulFn q4_1_per_group, q4_1_per_token;
  MatmulFn q5_1_per_group, q5_1_per_token;
  HalfMatmulFn f16, bf16;
};
extern const LinearKernels kLinearScalar;
extern const LinearKernels kLinearAvx2;
extern const LinearKernels kLinearAvx512;
extern const LinearKernels kLinearAvx512Vnni;

// XNNPACK's fully-connected operator for the float path (linear_xnnpack.cc).
// The operator holds the pointers of its last setup, so setup + run happen
// under `mu`.
struct XnnpackFullyConnected {
  XnnpackFullyConnected() = default;
  ~XnnpackFullyConnected();
  XnnpackFullyConnected(const XnnpackFullyConnected&) = delete;
  XnnpackFullyConnected& operator=(const XnnpackFullyConnected&) = delete;

  xnn_operator* op = nullptr;
  std::mutex mu;
};

// Creates the operator for row-major w (n_out x n_in, copied and packed by
// XNNPACK) into `out`. Initialises XNNPACK on first use.
absl::Status xnnpack_create(const float* w, std::size_t n_out, std::size_t n_in,
                            XnnpackFullyConnected& out);
// y = x W^T for m rows; `threadpool` may be nullptr.
absl::Status xnnpack_run(XnnpackFullyConnected& fc, const float* x, std::size_t m, float* y,
                         pthreadpool_t threadpool);

}  // namespace hearth::kernels::internal
