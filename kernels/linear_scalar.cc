// The scalar reference of the quantized linear layer: plain loops over the
// packed layout (kernels/linear_impl.h). Every SIMD path must reproduce these
// results bit for bit, so the float operations here are the specification:
// per block, an exact int32 dot product, then one fused multiply-add into the
// row's accumulator, blocks in increasing order.
#include <cmath>
#include <cstring>

#include "kernels/fp16.h"
#include "kernels/linear_impl.h"

namespace hearth::kernels::internal {
namespace {

template <bool kQ4>
void matmul(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0, std::size_t g1,
            std::size_t t0, std::size_t t1, float* y, std::size_t ldy) {
  const std::size_t block_bytes = kQ4 ? kQ4BlockBytes : kQ8BlockBytes;
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
        std::int32_t dot[kGroupRows];
        for (std::size_t r = 0; r < kGroupRows; ++r) dot[r] = a.bias[pos.meta + b * pos.n];
        if constexpr (kQ4) {
          for (std::size_t c = 0; c < 4; ++c)
            for (std::size_t r = 0; r < kGroupRows; ++r)
              for (std::size_t j = 0; j < 4; ++j) {
                const std::uint8_t byte = wb[c * 64 + r * 4 + j];
                dot[r] += static_cast<std::int32_t>(byte & 0x0f) * x(4 * c + j) +
                          static_cast<std::int32_t>(byte >> 4) * x(16 + 4 * c + j);
              }
        } else {
          for (std::size_t s = 0; s < 8; ++s)
            for (std::size_t r = 0; r < kGroupRows; ++r)
              for (std::size_t j = 0; j < 4; ++j)
                dot[r] += static_cast<std::int32_t>(wb[s * 64 + r * 4 + j]) * x(4 * s + j);
        }
        const float dx = a.per_token ? a.d[t] : a.d[pos.meta + b * pos.n];
        for (std::size_t r = 0; r < kGroupRows; ++r) {
          std::uint16_t h;
          std::memcpy(&h, scales + b * kScaleBytes + 2 * r, 2);
          const float dw = fp16_to_f32(h);
          // |dot| <= 32 * 255 * 127 < 2^24: the conversion is exact.
          const float fdot = static_cast<float>(dot[r]);
          acc[r] = a.per_token ? std::fma(fdot, dw, acc[r]) : std::fma(fdot, dw * dx, acc[r]);
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

const LinearKernels kLinearScalar = {
    kTileTokensScalar, quantize_activations_scalar,
    // per group, per token (the scalar loop reads a.per_token itself)
    matmul<false>, matmul<false>, matmul<true>, matmul<true>};

}  // namespace hearth::kernels::internal
