// GGUF "K-quant" super-block formats (256 weights per block), which most
// published models use, with their scalar decoders and simple reference
// encoders. All three run natively (kernels/linear.h: Linear::from_q4_k,
// from_q5_k and from_q6_k repack them).
//
//   Q4_K: fp16 d, fp16 dmin, 12 bytes of 6-bit sub-block scales/mins, 128 bytes of nibbles
//         (144 B); sub-block j (32 weights) is w = d * sc_j * q - dmin * m_j, and
//         its q are the low nibbles of qs[32 (j / 2) .. +32) for even j, the high
//         nibbles for odd j.
//   Q5_K: as Q4_K plus 32 bytes of fifth bits (176 B).
//   Q6_K: 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 sub-block scales,
//         fp16 d (210 B).
#pragma once

#include <cstddef>
#include <cstdint>

namespace hearth::kernels {

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

// Sub-block j's (0..7) 6-bit scale and min from a Q4_K / Q5_K block's 12
// packed bytes.
void k_scale_min(int j, const std::uint8_t* scales, std::uint8_t* sc, std::uint8_t* m);

// A super-block's 256 unsigned q, element e at q[e] (the packers read each
// block once through these).
// Q4_K: sub-block j (32 elements) has its q in the low nibbles of
// qs[32 (j / 2) ..] for even j, the high nibbles for odd j (0..15).
void q4_k_values(const BlockQ4_K& block, std::uint8_t* q);
// Q5_K: as Q4_K, with the fifth bit of sub-block j's element l in bit j of
// qh[l] (0..31).
void q5_k_values(const BlockQ5_K& block, std::uint8_t* q);
// Q6_K (0..63; w = d * scales[e / 16] * (q - 32)): in each half of 128,
// quarter k's element l has its low 4 bits in ql[64 half + 32 (k % 2) + l]
// (low nibble for k < 2) and its top 2 in bits 2k, 2k + 1 of qh[32 half + l].
void q6_k_values(const BlockQ6_K& block, std::uint8_t* q);

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

}  // namespace hearth::kernels
