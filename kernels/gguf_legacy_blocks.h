// The older GGUF block formats (common in files made before K-quants, and
// llama.cpp's fallback where a K-quant's 256 does not divide a row), which
// hearth runs natively (kernels/linear.h, kernels/embedding.h): their
// layouts, encoders (hearth-model quantize) and scalar decoders.
//
//   Q4_1:   32 weights = fp16 d, fp16 m, 16 bytes of nibbles;   w = d * q + m
//   Q5_0:   32 weights = fp16 d, 32 high bits, 16 bytes;        w = d * (q - 16)
//   Q5_1:   32 weights = fp16 d, fp16 m, 32 high bits, 16 bytes; w = d * q + m
//   IQ4_NL: 32 weights = fp16 d, 16 bytes of nibbles;          w = d * kIq4NlValues[q]
//
// As in Q4_0, byte j holds weight j in its low nibble and weight j + 16 in
// its high one; the 5-bit types take weight j's fifth bit from bit j of the
// 32-bit word qh (little-endian).
//
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gguf_blocks.h"

namespace hearth::kernels {

struct BlockQ4_1 {
  std::uint16_t d, m;  // fp16
  std::uint8_t qs[kQuantGroup / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
  std::uint16_t d;  // fp16
  std::uint8_t qh[4];
  std::uint8_t qs[kQuantGroup / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  std::uint16_t d, m;  // fp16
  std::uint8_t qh[4];
  std::uint8_t qs[kQuantGroup / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

struct BlockIQ4_NL {
  std::uint16_t d;  // fp16
  std::uint8_t qs[kQuantGroup / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// IQ4_NL's 16 levels (a non-uniform grid fitted to weight distributions).
inline constexpr std::int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                 1,    13,   25,  38,  53,  69,  89,  113};

// n must be a multiple of 32. The encoders use the format's usual rule (as
// llama.cpp's reference quantizer): Q4_1 and Q5_1 map the block's minimum to
// q = 0 (m) and its range onto 15 or 31 steps (d), rounding to nearest; Q5_0
// maps the value of largest magnitude to q = 0 (d = that value / -16) and
// rounds the rest to nearest, clamped to 31.
// The 32 q of a Q5_0 or Q5_1 block, q[j] for weight j: its nibble of qs
// with bit j of qh as bit 4 (the layout above).
void five_bit_codes(const std::uint8_t qs[kQuantGroup / 2], const std::uint8_t qh[4],
                    std::uint8_t q[kQuantGroup]);

void quantize_row_q4_1(const float* x, BlockQ4_1* out, std::size_t n);
void quantize_row_q5_0(const float* x, BlockQ5_0* out, std::size_t n);
void quantize_row_q5_1(const float* x, BlockQ5_1* out, std::size_t n);
void dequantize_row_q4_1(const BlockQ4_1* in, float* y, std::size_t n);
void dequantize_row_q5_0(const BlockQ5_0* in, float* y, std::size_t n);
void dequantize_row_q5_1(const BlockQ5_1* in, float* y, std::size_t n);
void dequantize_row_iq4_nl(const BlockIQ4_NL* in, float* y, std::size_t n);

}  // namespace hearth::kernels
