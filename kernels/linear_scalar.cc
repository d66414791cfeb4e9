// The scalar reference of the quantized and half-precision linear layers:
// plain loops over the packed layouts (kernels/linear_impl.h). Every SIMD
// path must reproduce these results bit for bit, so the float operations
// here are the specification: per block, an exact int32 dot product, then
// one fused multiply-add into the row's accumulator (and for Q4_K a second
// one, for the block's mins), blocks in increasing order; for halves, one
// fused multiply-add per input, inputs in increasing order.
#include <cmath>
#include <cstring>

#include "kernels/fp16.h"
#include "kernels/linear_impl.h"

namespace hearth::kernels::internal {
namespace {

float f16_at(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_f32(h);
}

// One block of one token, as the scalar loops hand it to a format's block
// function: its inputs (input i at q[i / 4 * step + i % 4]), their bias
// (-C * sum) and first half's sum, and its scale (per token: the token's).
struct BlockInputs {
  const std::int8_t* q;
  std::size_t step;
  std::int32_t bias, low_sum;
  float dx;
  bool per_token;
  std::int32_t x(std::size_t i) const { return q[i / 4 * step + i % 4]; }
  // acc = fma(dot, scale (* dx), acc): the accumulation every format shares.
  float add(float acc, std::int32_t dot, float scale) const {
    // |dot| < 2^24 for every format: the conversion is exact.
    return per_token ? std::fma(static_cast<float>(dot), scale, acc)
                     : std::fma(static_cast<float>(dot), scale * dx, acc);
  }
};

// The loops every scalar matmul shares: row groups x tokens x blocks in
// increasing order; `block(group, scales, b, in, acc)` adds block b's terms
// to the group's 16 accumulators, and the rows are written (per token, times
// the token's scale).
template <typename Block>
void for_each_block(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0,
                    std::size_t g1, std::size_t t0, std::size_t t1, float* y, std::size_t ldy,
                    Block block) {
  for (std::size_t g = g0; g < g1; ++g) {
    const std::uint8_t* group = w.data + g * w.group_stride;
    const std::uint8_t* scales = group + w.scales_offset;
    const std::size_t rows =
        w.n_out - g * kGroupRows < kGroupRows ? w.n_out - g * kGroupRows : kGroupRows;
    for (std::size_t t = t0; t < t1; ++t) {
      const TokenSlot pos = token_slot(a, t);
      float acc[kGroupRows] = {};
      for (std::size_t b = 0; b < a.blocks; ++b) {
        const std::size_t meta = pos.meta + b * pos.n;
        const BlockInputs in{
            pos.q + b * (kQuantGroup / 4) * pos.step, pos.step,   a.bias[meta], a.low_sum[meta],
            a.per_token ? a.d[t] : a.d[meta],         a.per_token};
        block(group, scales, b, in, acc);
      }
      float* yt = y + t * ldy + g * kGroupRows;
      for (std::size_t r = 0; r < rows; ++r) yt[r] = a.per_token ? acc[r] * a.d[t] : acc[r];
    }
  }
}

// Every format but Q6_K: one int32 dot product per block and row (and for
// the formats with mins, their term).
template <WeightFormat kF>
void matmul(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0, std::size_t g1,
            std::size_t t0, std::size_t t1, float* y, std::size_t ldy) {
  constexpr bool kNibbles = kF != WeightFormat::kQ8_0;
  constexpr bool kFive = five_bit(kF);
  constexpr bool kSuper = super_mins(kF);
  // IQ4_NL's nibbles are indices: its stored bytes are looked up (C = 128).
  auto stored = [](int nibble) {
    return kF == WeightFormat::kIQ4_NL ? static_cast<int>(kIq4NlStored[nibble]) : nibble;
  };
  const std::size_t block_bytes = kFive ? kQ5BlockBytes : kNibbles ? kQ4BlockBytes : kQ8BlockBytes;
  for_each_block(
      w, a, g0, g1, t0, t1, y, ldy,
      [&](const std::uint8_t* group, const std::uint8_t* scales, std::size_t b,
          const BlockInputs& in, float* acc) {
        const std::uint8_t* wb = group + b * block_bytes;
        std::int32_t dot[kGroupRows];
        // The q of formats with mins carry no bias: theirs is -sum(q), for the mins.
        for (std::size_t r = 0; r < kGroupRows; ++r) dot[r] = has_mins(kF) ? 0 : in.bias;
        if constexpr (kNibbles) {
          for (std::size_t c = 0; c < 4; ++c)
            for (std::size_t r = 0; r < kGroupRows; ++r)
              for (std::size_t j = 0; j < 4; ++j) {
                const std::size_t i = 4 * c + j;
                const int lo = kFive ? q5_k_code(wb, r, i) : stored(wb[c * 64 + r * 4 + j] & 0x0f);
                const int hi =
                    kFive ? q5_k_code(wb, r, 16 + i) : stored(wb[c * 64 + r * 4 + j] >> 4);
                dot[r] += lo * in.x(4 * c + j) + hi * in.x(16 + 4 * c + j);
              }
        } else {
          for (std::size_t s = 0; s < 8; ++s)
            for (std::size_t r = 0; r < kGroupRows; ++r)
              for (std::size_t j = 0; j < 4; ++j)
                dot[r] += static_cast<std::int32_t>(wb[s * 64 + r * 4 + j]) * in.x(4 * s + j);
        }
        // The mins' token factor, as token_min() in linear_tile_body.h.
        const float xmin =
            in.per_token ? static_cast<float>(in.bias) : in.dx * static_cast<float>(in.bias);
        const std::uint8_t* sb = scales + (b / kBlocksPerSuper) * kQ4KSuperScaleBytes;
        const std::size_t sub = b % kBlocksPerSuper;
        for (std::size_t r = 0; r < kGroupRows; ++r) {
          if constexpr (kSuper) {
            const float dw = f16_at(sb + 2 * r) * static_cast<float>(k_scale(sb, sub, r));
            const float dmin =
                f16_at(sb + kQ4KDminOffset + 2 * r) * static_cast<float>(k_min(sb, sub, r));
            acc[r] = std::fma(dmin, xmin, in.add(acc[r], dot[r], dw));
          } else if constexpr (block_mins(kF)) {  // d, then -m
            const std::uint8_t* bs = scales + b * kBlockMinScaleBytes;
            acc[r] = std::fma(f16_at(bs + kScaleBytes + 2 * r), xmin,
                              in.add(acc[r], dot[r], f16_at(bs + 2 * r)));
          } else {
            acc[r] = in.add(acc[r], dot[r], f16_at(scales + b * kScaleBytes + 2 * r));
          }
        }
      });
}

// Q6_K: per block, the low and the high 16 inputs' dot products, each less
// 32 times its codes' sum (C = 1: bias = -sum), times its own int8 sc and
// summed in int32 (exact), then scaled by d (kernels/linear_impl.h).
void matmul_q6_k(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0,
                 std::size_t g1, std::size_t t0, std::size_t t1, float* y, std::size_t ldy) {
  for_each_block(w, a, g0, g1, t0, t1, y, ldy,
                 [&](const std::uint8_t* group, const std::uint8_t* scales, std::size_t b,
                     const BlockInputs& in, float* acc) {
                   const std::uint8_t* wb = group + b * kQ6BlockBytes;
                   const std::uint8_t* sb = scales + (b / kBlocksPerSuper) * kQ6KSuperScaleBytes;
                   const std::size_t sub = 2 * (b % kBlocksPerSuper);
                   auto sc = [&](std::size_t k, std::size_t r) {
                     return static_cast<std::int32_t>(
                         static_cast<std::int8_t>(sb[kQ6KScOffset + kGroupRows * k + r]));
                   };
                   for (std::size_t r = 0; r < kGroupRows; ++r) {
                     std::int32_t lo = -32 * in.low_sum, hi = 32 * (in.bias + in.low_sum);
                     for (std::size_t i = 0; i < 16; ++i) {
                       lo += q6_k_code(wb, r, i) * in.x(i);
                       hi += q6_k_code(wb, r, 16 + i) * in.x(16 + i);
                     }
                     acc[r] =
                         in.add(acc[r], lo * sc(sub, r) + hi * sc(sub + 1, r), f16_at(sb + 2 * r));
                   }
                 });
}

// Half weights (HalfMatmulFn): one std::fma per input, in input order.
template <bool kBf16>
void matmul_half(const HalfWeights& w, const float* x, std::size_t m, std::size_t g0,
                 std::size_t g1, float* y) {
  for (std::size_t g = g0; g < g1; ++g) {
    const std::uint16_t* group = w.data + g * w.group_stride;
    const std::size_t row0 = g * kGroupRows;
    const std::size_t rows = w.n_out - row0 < kGroupRows ? w.n_out - row0 : kGroupRows;
    for (std::size_t t = 0; t < m; ++t)
      for (std::size_t r = 0; r < rows; ++r) {
        float acc = 0.0f;
        for (std::size_t i = 0; i < w.n_in; ++i) {
          const std::uint16_t h = group[i * kGroupRows + r];
          acc = std::fma(kBf16 ? bf16_to_f32(h) : fp16_to_f32(h), x[t * w.n_in + i], acc);
        }
        y[t * w.n_out + row0 + r] = acc;
      }
  }
}

}  // namespace

TokenSlot token_slot(const QuantizedActivations& a, std::size_t t) {
  const std::size_t tile = t / a.tile_tokens, j = t % a.tile_tokens;
  const std::size_t first = tile * a.tile_tokens;
  const std::size_t n = a.m - first < a.tile_tokens ? a.m - first : a.tile_tokens;
  return {a.q + tile * a.q_tile_stride + 4 * j, 4 * n, first * a.blocks + j, n};
}

// Per group and per token alike (the scalar loop reads a.per_token itself).
using enum WeightFormat;
const LinearKernels kLinearScalar = {kTileTokensScalar,  quantize_activations_scalar,
                                     matmul<kQ8_0>,      matmul<kQ8_0>,
                                     matmul<kQ4_0>,      matmul<kQ4_0>,
                                     matmul<kQ4_K>,      matmul<kQ4_K>,
                                     matmul<kQ5_K>,      matmul<kQ5_K>,
                                     matmul_q6_k,        matmul_q6_k,
                                     matmul<kIQ4_NL>,    matmul<kIQ4_NL>,
                                     matmul<kQ5_0>,      matmul<kQ5_0>,
                                     matmul<kQ4_1>,      matmul<kQ4_1>,
                                     matmul<kQ5_1>,      matmul<kQ5_1>,
                                     matmul_half<false>, matmul_half<true>};

}  // namespace hearth::kernels::internal
