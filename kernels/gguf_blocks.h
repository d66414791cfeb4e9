// The quantized block formats of GGUF files that hearth runs natively, and
// their scalar reference quantisation (bit-compatible with the reference
// implementation's, so files written by hearth-model quantize load anywhere).
//
//   Q8_0: 32 weights = fp16 scale d + 32 x int8 q;         w = d * q
//   Q4_0: 32 weights = fp16 scale d + 16 bytes of nibbles;  w = d * (q - 8)
//         byte j holds weight j in its low nibble and weight j + 16 in its high nibble.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hearth::kernels {

inline constexpr std::size_t kQuantGroup = 32;

struct BlockQ8_0 {
  std::uint16_t d;  // fp16
  std::int8_t qs[kQuantGroup];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  std::uint16_t d;  // fp16
  std::uint8_t qs[kQuantGroup / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// n must be a multiple of 32. Q8_0 as llama.cpp's reference encodes it: per
// block d = max |x| / 127 and codes lround(x * (1 / d)), halves away from zero (a
// code of NaN, from an inf or NaN weight, is 0).
void quantize_row_q8_0(const float* x, BlockQ8_0* out, std::size_t n);
void dequantize_row_q8_0(const BlockQ8_0* in, float* y, std::size_t n);
void quantize_row_q4_0(const float* x, BlockQ4_0* out, std::size_t n);
void dequantize_row_q4_0(const BlockQ4_0* in, float* y, std::size_t n);

// The value of largest magnitude among x[0..n), with its sign (the first of
// equal magnitudes; 0 for none): Q4_0 and Q5_0 map it to their lowest code,
// so its sign sets d's.
float signed_absmax(const float* x, std::size_t n);

}  // namespace hearth::kernels
