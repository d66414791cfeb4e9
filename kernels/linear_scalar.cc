// The scalar reference of the quantized linear layer: plain loops over the
// packed layout (kernels/linear_impl.h). Every SIMD path must reproduce these
// results bit for bit, so the float operations here are the specification:
// per block, an exact int32 dot product, then one fused multiply-add into the
// row's accumulator (and for Q4_K a second one, for the block's mins), blocks
// in increasing order.
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

template <WeightFormat kF>
void matmul(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0, std::size_t g1,
            std::size_t t0, std::size_t t1, float* y, std::size_t ldy) {
  constexpr bool kNibbles = kF != WeightFormat::kQ8_0;
  constexpr bool kFive = kF == WeightFormat::kQ5_K;
  constexpr bool kSuper = kF == WeightFormat::kQ4_K || kFive;
  const std::size_t block_bytes = kFive ? kQ5BlockBytes : kNibbles ? kQ4BlockBytes : kQ8BlockBytes;
  for (std::size_t g = g0; g < g1; ++g) {
    const std::uint8_t* group = w.data + g * w.group_stride;
    const std::uint8_t* scales = group + w.scales_offset;
    const std::size_t rows =
        w.n_out - g * kGroupRows < kGroupRows ? w.n_out - g * kGroupRows : kGroupRows;
    for (std::size_t t = t0; t < t1; ++t) {
      const TokenSlot pos = token_slot(a, t);
      float acc[kGroupRows] = {};
      for (std::size_t b = 0; b < a.blocks; ++b) {
        const std::uint8_t* wb = group + b * block_bytes;
        // Input i of the block: qb[i / 4 * pos.step + i % 4].
        const std::int8_t* qb = pos.q + b * (kQuantGroup / 4) * pos.step;
        auto x = [&](std::size_t i) -> std::int32_t { return qb[i / 4 * pos.step + i % 4]; };
        const std::int32_t bias = a.bias[pos.meta + b * pos.n];
        std::int32_t dot[kGroupRows];
        // Q4_K's q carry no bias: bias is -sum(q) for its mins instead.
        for (std::size_t r = 0; r < kGroupRows; ++r) dot[r] = kSuper ? 0 : bias;
        if constexpr (kNibbles) {
          for (std::size_t c = 0; c < 4; ++c)
            for (std::size_t r = 0; r < kGroupRows; ++r)
              for (std::size_t j = 0; j < 4; ++j) {
                const std::uint8_t byte = wb[c * 64 + r * 4 + j];
                // Q5_K: the fifth bits, inputs 4c + j at bit c, 16 + 4c + j at 4 + c.
                const int top = kFive ? wb[kQ5HighOffset + r * 4 + j] : 0;
                const int lo = (byte & 0x0f) | ((top >> c) & 1) << 4;
                const int hi = (byte >> 4) | ((top >> (4 + c)) & 1) << 4;
                dot[r] += lo * x(4 * c + j) + hi * x(16 + 4 * c + j);
              }
        } else {
          for (std::size_t s = 0; s < 8; ++s)
            for (std::size_t r = 0; r < kGroupRows; ++r)
              for (std::size_t j = 0; j < 4; ++j)
                dot[r] += static_cast<std::int32_t>(wb[s * 64 + r * 4 + j]) * x(4 * s + j);
        }
        const float dx = a.per_token ? a.d[t] : a.d[pos.meta + b * pos.n];
        // Q4_K's mins: the token's factor, as token_min() in linear_tile_body.h.
        const float xmin = a.per_token ? static_cast<float>(bias) : dx * static_cast<float>(bias);
        const std::uint8_t* sb = scales + (b / kBlocksPerSuper) * kQ4KSuperScaleBytes;
        const std::size_t sub = b % kBlocksPerSuper;
        for (std::size_t r = 0; r < kGroupRows; ++r) {
          // |dot| <= 32 * 255 * 127 < 2^24: the conversion is exact.
          const float fdot = static_cast<float>(dot[r]);
          float dw;
          if constexpr (kSuper) {
            dw = f16_at(sb + 2 * r) * static_cast<float>(sb[kQ4KScOffset + kGroupRows * sub + r]);
          } else {
            dw = f16_at(scales + b * kScaleBytes + 2 * r);
          }
          acc[r] = a.per_token ? std::fma(fdot, dw, acc[r]) : std::fma(fdot, dw * dx, acc[r]);
          if constexpr (kSuper) {
            const float dmin = f16_at(sb + kQ4KDminOffset + 2 * r) *
                               static_cast<float>(sb[kQ4KMinOffset + kGroupRows * sub + r]);
            acc[r] = std::fma(dmin, xmin, acc[r]);
          }
        }
      }
      float* yt = y + t * ldy + g * kGroupRows;
      for (std::size_t r = 0; r < rows; ++r) yt[r] = a.per_token ? acc[r] * a.d[t] : acc[r];
    }
  }
}

// Q6_K: per block, the low and the high 16 inputs' dot products, each less
// 32 times its codes' sum, each with its own scale d * sc (linear_impl.h).
void matmul_q6_k(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0,
                 std::size_t g1, std::size_t t0, std::size_t t1, float* y, std::size_t ldy) {
  for (std::size_t g = g0; g < g1; ++g) {
    const std::uint8_t* group = w.data + g * w.group_stride;
    const std::uint8_t* scales = group + w.scales_offset;
    const std::size_t rows =
        w.n_out - g * kGroupRows < kGroupRows ? w.n_out - g * kGroupRows : kGroupRows;
    for (std::size_t t = t0; t < t1; ++t) {
      const TokenSlot pos = token_slot(a, t);
      float acc[kGroupRows] = {};
      for (std::size_t b = 0; b < a.blocks; ++b) {
        const std::uint8_t* wb = group + b * kQ6BlockBytes;
        const std::int8_t* qb = pos.q + b * (kQuantGroup / 4) * pos.step;
        auto x = [&](std::size_t i) -> std::int32_t { return qb[i / 4 * pos.step + i % 4]; };
        const std::int32_t bias = a.bias[pos.meta + b * pos.n];
        const std::int32_t low_sum = a.low_sum[pos.meta + b * pos.n];
        const float dx = a.per_token ? a.d[t] : a.d[pos.meta + b * pos.n];
        const std::uint8_t* sb = scales + (b / kBlocksPerSuper) * kQ6KSuperScaleBytes;
        const std::size_t sub = 2 * (b % kBlocksPerSuper);
        for (std::size_t r = 0; r < kGroupRows; ++r) {
          std::int32_t lo = -32 * low_sum, hi = 32 * (bias + low_sum);
          for (std::size_t c = 0; c < 4; ++c)
            for (std::size_t k = 0; k < 4; ++k) {
              const std::uint8_t nib = wb[c * 64 + r * 4 + k];
              const int top_lo = (wb[kQ6HighOffset + r * 4 + k] >> (2 * c)) & 3;
              const int top_hi = (wb[kQ6HighOffset + 64 + r * 4 + k] >> (2 * c)) & 3;
              lo += ((nib & 0x0f) | top_lo << 4) * x(4 * c + k);
              hi += ((nib >> 4) | top_hi << 4) * x(16 + 4 * c + k);
            }
          const float d = f16_at(sb + 2 * r);
          const float d_lo =
              d *
              static_cast<float>(static_cast<std::int8_t>(sb[kQ6KScOffset + kGroupRows * sub + r]));
          const float d_hi = d * static_cast<float>(static_cast<std::int8_t>(
                                     sb[kQ6KScOffset + kGroupRows * (sub + 1) + r]));
          if (a.per_token) {
            acc[r] = std::fma(static_cast<float>(lo), d_lo, acc[r]);
            acc[r] = std::fma(static_cast<float>(hi), d_hi, acc[r]);
          } else {
            acc[r] = std::fma(static_cast<float>(lo), d_lo * dx, acc[r]);
            acc[r] = std::fma(static_cast<float>(hi), d_hi * dx, acc[r]);
          }
        }
      }
      float* yt = y + t * ldy + g * kGroupRows;
      for (std::size_t r = 0; r < rows; ++r) yt[r] = a.per_token ? acc[r] * a.d[t] : acc[r];
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
const LinearKernels kLinearScalar = {kTileTokensScalar, quantize_activations_scalar,
                                     matmul<kQ8_0>,     matmul<kQ8_0>,
                                     matmul<kQ4_0>,     matmul<kQ4_0>,
                                     matmul<kQ4_K>,     matmul<kQ4_K>,
                                     matmul<kQ5_K>,     matmul<kQ5_K>,
                                     matmul_q6_k,       matmul_q6_k};

}  // namespace hearth::kernels::internal
