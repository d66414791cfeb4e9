// Element types of tensors the kernels read.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hearth::kernels {

enum class DType : int {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // blocks of 32: fp16 scale + 32 int8 (kernels/gguf_blocks.h)
  kQ4_0,  // blocks of 32: fp16 scale + 16 bytes of nibbles
  kQ4_K,  // super-blocks of 256 (kernels/gguf_kquants.h)
  kQ5_K,
  kQ6_K,
  kIQ4_NL,  // blocks of 32: fp16 scale + 16 bytes of indices (kernels/gguf_legacy_blocks.h)
  kQ4_1,    // blocks of 32 (kernels/gguf_legacy_blocks.h)
  kQ5_0,
  kQ5_1,
};

const char* dtype_name(DType t);

// Bytes of one row of `n` elements (n a multiple of 32 for block types, of
// 256 for the K-quants).
constexpr std::size_t row_bytes(DType t, std::size_t n) {
  switch (t) {
    case DType::kF32:
      return n * 4;
    case DType::kF16:
    case DType::kBF16:
      return n * 2;
    case DType::kQ8_0:
      return n / 32 * 34;
    case DType::kQ4_0:
    case DType::kIQ4_NL:
      return n / 32 * 18;
    case DType::kQ4_1:
      return n / 32 * 20;
    case DType::kQ5_0:
      return n / 32 * 22;
    case DType::kQ5_1:
      return n / 32 * 24;
    case DType::kQ4_K:
      return n / 256 * 144;
    case DType::kQ5_K:
      return n / 256 * 176;
    case DType::kQ6_K:
      return n / 256 * 210;
  }
  return 0;
}

}  // namespace hearth::kernels
