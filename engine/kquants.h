// GGUF "K-quant" super-block formats (256 weights per block) that published
// models mostly use. hearth does not run them natively: at load they are
// dequantized and re-quantized to a native layout (see engine/weights.h), so
// only the scalar decoders and simple reference encoders live here.
//
//   Q4_K: fp16 d, fp16 dmin, 12 bytes of 6-bit sub-block scales/mins, 128 bytes of nibbles  (144 B)
//   Q5_K: as Q4_K plus 32 bytes of fifth bits                                                  (176
//   B) Q6_K: 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 sub-block scales, fp16 d (210 B)
#pragma once

#include <cstddef>
#include <cstdint>

namespace hearth::engine {

inline constexpr std::size_t kSuperBlock = 256;

struct BlockQ4_K {
  std::uint16_t d, dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  std::uint16_t d, dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[32];
  std::uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  std::uint8_t ql[128];
  std::uint8_t qh[64];
  std::int8_t scales[16];
  std::uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// n is a multiple of 256.
void dequantize_row_q4_k(const BlockQ4_K* in, float* out, std::size_t n);
void dequantize_row_q5_k(const BlockQ5_K* in, float* out, std::size_t n);
void dequantize_row_q6_k(const BlockQ6_K* in, float* out, std::size_t n);

// Simple round-to-nearest encoders (min/max per sub-block, no search). They
// write valid blocks for tests, synthetic models and `hearth-model`; they are
// not tuned for quality like the reference implementation's encoders.
void quantize_row_q4_k(const float* x, BlockQ4_K* out, std::size_t n);
void quantize_row_q5_k(const float* x, BlockQ5_K* out, std::size_t n);
void quantize_row_q6_k(const float* x, BlockQ6_K* out, std::size_t n);

}  // namespace hearth::engine
