// Per-element decoders of GGUF's K-quant blocks for tests, written from the
// format's description (GGML's layout), independently of kernels/: so a test
// comparing the kernels with these does not compare the kernels' decoding
// with itself.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/fp16.h"
#include "kernels/gguf_kquants.h"

namespace hearth::testing {

// Q4_K: sub-block j's (0..7) 6-bit scale (min: false) or min (true): j < 4
// in the low 6 bits of bytes j (scale) and j + 4 (min); j >= 4 in the
// nibbles of byte j + 4 and the top 2 bits of bytes j - 4 (scale) and j (min).
template <typename Block>  // BlockQ4_K or BlockQ5_K: the same 12 bytes of scales
inline int q4_k_six_bits(const Block& b, std::size_t j, bool min) {
  const std::uint8_t* q = b.scales;
  if (j < 4) return q[j + (min ? 4 : 0)] & 63;
  const int low = min ? q[j + 4] >> 4 : q[j + 4] & 15;
  return low | (q[min ? j : j - 4] >> 6) << 4;
}

// Q4_K element e's (0..255) q: sub-block j = e / 32 has its q in the low
// (even j) or high (odd j) nibbles of qs[32 (j / 2) + e % 32].
inline int q4_k_q(const kernels::BlockQ4_K& b, std::size_t e) {
  const std::size_t j = e / 32;
  const std::uint8_t byte = b.qs[32 * (j / 2) + e % 32];
  return j % 2 == 0 ? byte & 15 : byte >> 4;
}

// Q6_K element e's unsigned q (0..63): in each half of 128, quarter k's
// element l has its low 4 bits in ql[64 half + 32 (k % 2) + l] (low nibble
// for k < 2) and its top 2 in bits 2k of qh[32 half + l].
inline int q6_k_q(const kernels::BlockQ6_K& b, std::size_t e) {
  const std::size_t half = e / 128, k = e % 128 / 32, l = e % 32;
  const std::uint8_t low = b.ql[64 * half + 32 * (k % 2) + l];
  return (k < 2 ? low & 15 : low >> 4) | ((b.qh[32 * half + l] >> (2 * k)) & 3) << 4;
}

// Q5_K element e's q (0..31): Q4_K's nibble with bit j = e / 32 of
// qh[e % 32] as its fifth.
inline int q5_k_q(const kernels::BlockQ5_K& b, std::size_t e) {
  const std::size_t j = e / 32;
  const std::uint8_t byte = b.qs[32 * (j / 2) + e % 32];
  return (j % 2 == 0 ? byte & 15 : byte >> 4) | ((b.qh[e % 32] >> j) & 1) << 4;
}

// The element's value, in the float operations GGML's decoders use.
inline float q4_k_value(const kernels::BlockQ4_K& b, std::size_t e) {
  const std::size_t j = e / 32;
  const float scale = kernels::fp16_to_f32(b.d) * static_cast<float>(q4_k_six_bits(b, j, false));
  const float min = kernels::fp16_to_f32(b.dmin) * static_cast<float>(q4_k_six_bits(b, j, true));
  return scale * static_cast<float>(q4_k_q(b, e)) - min;
}
inline float q5_k_value(const kernels::BlockQ5_K& b, std::size_t e) {
  const std::size_t j = e / 32;
  const float scale = kernels::fp16_to_f32(b.d) * static_cast<float>(q4_k_six_bits(b, j, false));
  const float min = kernels::fp16_to_f32(b.dmin) * static_cast<float>(q4_k_six_bits(b, j, true));
  return scale * static_cast<float>(q5_k_q(b, e)) - min;
}
inline float q6_k_value(const kernels::BlockQ6_K& b, std::size_t e) {
  return kernels::fp16_to_f32(b.d) * static_cast<float>(b.scales[e / 16]) *
         static_cast<float>(q6_k_q(b, e) - 32);
}

}  // namespace hearth::testing
