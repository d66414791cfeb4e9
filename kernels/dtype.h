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
};

const char* dtype_name(DType t);

// Bytes of one row of `n` elements (n a multiple of 32 for block types).
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
      return n / 32 * 18;
  }
  return 0;
}

}  // namespace hearth::kernels
