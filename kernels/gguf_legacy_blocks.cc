#include "kernels/gguf_legacy_blocks.h"

#include <cstring>

#include "kernels/fp16.h"

namespace hearth::kernels {
namespace {

constexpr std::size_t kHalf = kQuantGroup / 2;

std::uint32_t high_bits(const std::uint8_t qh[4]) {
  std::uint32_t h;
  std::memcpy(&h, qh, sizeof h);
  return h;  // GGUF is little-endian, as every x86 host
}

// Weight j's and weight j + 16's 5-bit codes.
int low_code(const std::uint8_t* qs, std::uint32_t qh, std::size_t j) {
  return (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
}
int high_code(const std::uint8_t* qs, std::uint32_t qh, std::size_t j) {
  return (qs[j] >> 4) | static_cast<int>(((qh >> (j + kHalf)) & 1u) << 4);
}

}  // namespace

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
    const std::uint32_t qh = high_bits(in[b].qh);
    for (std::size_t j = 0; j < kHalf; ++j) {
      y[j] = static_cast<float>(low_code(in[b].qs, qh, j) - 16) * d;
      y[j + kHalf] = static_cast<float>(high_code(in[b].qs, qh, j) - 16) * d;
    }
  }
}

void dequantize_row_q5_1(const BlockQ5_1* in, float* y, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, y += kQuantGroup) {
    const float d = fp16_to_f32(in[b].d), m = fp16_to_f32(in[b].m);
    const std::uint32_t qh = high_bits(in[b].qh);
    for (std::size_t j = 0; j < kHalf; ++j) {
      y[j] = static_cast<float>(low_code(in[b].qs, qh, j)) * d + m;
      y[j + kHalf] = static_cast<float>(high_code(in[b].qs, qh, j)) * d + m;
    }
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

void convert_row_q5_0_to_q8_0(const BlockQ5_0* in, BlockQ8_0* out, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b) {
    const std::uint32_t qh = high_bits(in[b].qh);
    out[b].d = in[b].d;
    for (std::size_t j = 0; j < kHalf; ++j) {
      out[b].qs[j] = static_cast<std::int8_t>(low_code(in[b].qs, qh, j) - 16);
      out[b].qs[j + kHalf] = static_cast<std::int8_t>(high_code(in[b].qs, qh, j) - 16);
    }
  }
}

void convert_row_iq4_nl_to_q8_0(const BlockIQ4_NL* in, BlockQ8_0* out, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b) {
    out[b].d = in[b].d;
    for (std::size_t j = 0; j < kHalf; ++j) {
      out[b].qs[j] = kIq4NlValues[in[b].qs[j] & 0x0f];
      out[b].qs[j + kHalf] = kIq4NlValues[in[b].qs[j] >> 4];
    }
  }
}

}  // namespace hearth::kernels
