// Q5_0 and IQ4_NL blocks written as Q8_0 blocks of the same values, for
// tests that compare a model or layer in those types with its Q8_0 twin.
// Both are Q8_0 blocks in disguise (an fp16 scale times an integer in
// [-127, 127]), so the copy is exact: it decodes to the same floats bit for
// bit (checked against llama.cpp's values in k_quants_llama_cpp_test).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gguf_blocks.h"
#include "kernels/gguf_legacy_blocks.h"

namespace hearth::testing {

// n weights (a multiple of 32).
inline void q5_0_to_q8_0(const kernels::BlockQ5_0* in, kernels::BlockQ8_0* out, std::size_t n) {
  for (std::size_t b = 0; b < n / 32; ++b) {
    out[b].d = in[b].d;
    std::uint8_t q[32];
    kernels::five_bit_codes(in[b].qs, in[b].qh, q);
    for (std::size_t j = 0; j < 32; ++j) out[b].qs[j] = static_cast<std::int8_t>(q[j] - 16);
  }
}

inline void iq4_nl_to_q8_0(const kernels::BlockIQ4_NL* in, kernels::BlockQ8_0* out, std::size_t n) {
  for (std::size_t b = 0; b < n / 32; ++b) {
    out[b].d = in[b].d;
    for (std::size_t j = 0; j < 16; ++j) {
      out[b].qs[j] = kernels::kIq4NlValues[in[b].qs[j] & 0x0f];
      out[b].qs[j + 16] = kernels::kIq4NlValues[in[b].qs[j] >> 4];
    }
  }
}

}  // namespace hearth::testing
