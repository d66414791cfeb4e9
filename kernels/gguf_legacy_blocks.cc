#include "kernels/gguf_legacy_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/fp16.h"

namespace hearth::kernels {
namespace {

constexpr std::size_t kHalf = kQuantGroup / 2;

// A block's q (0..levels) for x, as (x - lo) / d rounded to nearest and
// clamped; id = 1 / d, or 0 for a constant block.
std::uint8_t level(float x, float lo, float id, int levels) {
  return static_cast<std::uint8_t>(std::min(levels, static_cast<int>((x - lo) * id + 0.5f)));
}

// A block's 32 q (q[j] for weight j) into its qs, and for the 5-bit types
// its qh: the inverse of five_bit_codes (Q4_1: the nibbles alone).
template <typename Block>
void store_codes(const std::uint8_t q[kQuantGroup], Block& out) {
  std::uint32_t qh = 0;
  for (std::size_t j = 0; j < kHalf; ++j) {
    out.qs[j] = static_cast<std::uint8_t>((q[j] & 0x0f) | (q[j + kHalf] & 0x0f) << 4);
    qh |= static_cast<std::uint32_t>(q[j] >> 4) << j | static_cast<std::uint32_t>(q[j + kHalf] >> 4)
                                                           << (j + kHalf);
  }
  if constexpr (requires { out.qh; }) std::memcpy(out.qh, &qh, sizeof qh);  // little-endian
}

// Q4_1 and Q5_1: m = the block's minimum, d = its range / levels.
template <typename Block>
void quantize_min_range(const float* x, Block* out, std::size_t n, int levels) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, x += kQuantGroup) {
    const auto [lo, hi] = std::minmax_element(x, x + kQuantGroup);
    const float d = (*hi - *lo) / static_cast<float>(levels);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = f32_to_fp16(d);
    out[b].m = f32_to_fp16(*lo);
    std::uint8_t q[kQuantGroup];
    for (std::size_t j = 0; j < kQuantGroup; ++j) q[j] = level(x[j], *lo, id, levels);
    store_codes(q, out[b]);
  }
}

}  // namespace

void five_bit_codes(const std::uint8_t qs[kQuantGroup / 2], const std::uint8_t qh[4],
                    std::uint8_t q[kQuantGroup]) {
  std::uint32_t h;
  std::memcpy(&h, qh, sizeof h);  // GGUF is little-endian, as every x86 host
  for (std::size_t j = 0; j < kHalf; ++j) {
    q[j] = static_cast<std::uint8_t>((qs[j] & 0x0f) | ((h >> j) & 1u) << 4);
    q[j + kHalf] = static_cast<std::uint8_t>((qs[j] >> 4) | ((h >> (j + kHalf)) & 1u) << 4);
  }
}

void quantize_row_q4_1(const float* x, BlockQ4_1* out, std::size_t n) {
  quantize_min_range(x, out, n, 15);
}

void quantize_row_q5_1(const float* x, BlockQ5_1* out, std::size_t n) {
  quantize_min_range(x, out, n, 31);
}

void quantize_row_q5_0(const float* x, BlockQ5_0* out, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, x += kQuantGroup) {
    // The signed value of largest magnitude maps to q = 0 (-16 d).
    const float d = signed_absmax(x, kQuantGroup) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = f32_to_fp16(d);
    // x / d + 16 = (x - (-16 d)) / d: level() with lo = -16 d.
    std::uint8_t q[kQuantGroup];
    for (std::size_t j = 0; j < kQuantGroup; ++j) q[j] = level(x[j], -16.0f * d, id, 31);
    store_codes(q, out[b]);
  }
}

void dequantize_row_q4_1(const BlockQ4_1* in, float* y, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, y += kQuantGroup) {
    const float d = fp16_to_f32(in[b].d), m = fp16_to_f32(in[b].m);
    for (std::size_t j = 0; j < kHalf; ++j) {
      y[j] = static_cast<float>(in[b].qs[j] & 0x0f) * d + m;
      y[j + kHalf] = static_cast<float>(in[b].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_row_q5_0(const BlockQ5_0* in, float* y, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, y += kQuantGroup) {
    const float d = fp16_to_f32(in[b].d);
    std::uint8_t q[kQuantGroup];
    five_bit_codes(in[b].qs, in[b].qh, q);
    for (std::size_t j = 0; j < kQuantGroup; ++j) y[j] = static_cast<float>(q[j] - 16) * d;
  }
}

void dequantize_row_q5_1(const BlockQ5_1* in, float* y, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, y += kQuantGroup) {
    const float d = fp16_to_f32(in[b].d), m = fp16_to_f32(in[b].m);
    std::uint8_t q[kQuantGroup];
    five_bit_codes(in[b].qs, in[b].qh, q);
    for (std::size_t j = 0; j < kQuantGroup; ++j) y[j] = static_cast<float>(q[j]) * d + m;
  }
}

void dequantize_row_iq4_nl(const BlockIQ4_NL* in, float* y, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, y += kQuantGroup) {
    const float d = fp16_to_f32(in[b].d);
    for (std::size_t j = 0; j < kHalf; ++j) {
      y[j] = d * static_cast<float>(kIq4NlValues[in[b].qs[j] & 0x0f]);
      y[j + kHalf] = d * static_cast<float>(kIq4NlValues[in[b].qs[j] >> 4]);
    }
  }
}

}  // namespace hearth::kernels
