#include "kernels/gguf_blocks.h"

#include <cmath>

#include "kernels/fp16.h"

namespace hearth::kernels {

namespace {

// std::lround of a code (|v| <= 127 up to rounding), inline: adding 0.5 - 2^-25
// with v's sign and truncating rounds every finite float as lround does
// (halves away from zero; the sum's own rounding cannot cross an integer),
// without a libm call per weight (docs/performance.md, "Model load").
inline std::int8_t round_code(float v) {
  if (std::isnan(v)) return 0;
  return static_cast<std::int8_t>(static_cast<int>(v + std::copysign(0.49999997f, v)));
}

}  // namespace

void quantize_row_q8_0(const float* x, BlockQ8_0* out, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, x += kQuantGroup) {
    float amax = 0.0f;  // NaN weights are passed over, as std::fmax would
    for (std::size_t i = 0; i < kQuantGroup; ++i) {
      const float a = std::fabs(x[i]);
      amax = a > amax ? a : amax;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = f32_to_fp16(d);
    for (std::size_t i = 0; i < kQuantGroup; ++i) out[b].qs[i] = round_code(x[i] * id);
  }
}

void dequantize_row_q8_0(const BlockQ8_0* in, float* y, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b) {
    const float d = fp16_to_f32(in[b].d);
    for (std::size_t i = 0; i < kQuantGroup; ++i) *y++ = d * static_cast<float>(in[b].qs[i]);
  }
}

float signed_absmax(const float* x, std::size_t n) {
  float amax = 0.0f, max = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

void quantize_row_q4_0(const float* x, BlockQ4_0* out, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, x += kQuantGroup) {
    // The signed value of largest magnitude maps to -8.
    const float d = signed_absmax(x, kQuantGroup) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = f32_to_fp16(d);
    for (std::size_t j = 0; j < kQuantGroup / 2; ++j) {
      const float x0 = x[j] * id + 8.5f;
      const float x1 = x[j + kQuantGroup / 2] * id + 8.5f;
      const auto q0 = static_cast<std::uint8_t>(
          std::fmin(15.0f, static_cast<float>(static_cast<std::int8_t>(x0))));
      const auto q1 = static_cast<std::uint8_t>(
          std::fmin(15.0f, static_cast<float>(static_cast<std::int8_t>(x1))));
      out[b].qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
    }
  }
}

void dequantize_row_q4_0(const BlockQ4_0* in, float* y, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, y += kQuantGroup) {
    const float d = fp16_to_f32(in[b].d);
    for (std::size_t j = 0; j < kQuantGroup / 2; ++j) {
      y[j] = d * static_cast<float>((in[b].qs[j] & 0x0f) - 8);
      y[j + kQuantGroup / 2] = d * static_cast<float>((in[b].qs[j] >> 4) - 8);
    }
  }
}

}  // namespace hearth::kernels
