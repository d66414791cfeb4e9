#include "kernels/embedding.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/activation_ops.h"
#include "kernels/activation_ops_impl.h"
#include "kernels/gguf_blocks.h"
#include "kernels/gguf_kquants.h"
#include "kernels/gguf_legacy_blocks.h"

namespace hearth::kernels {

absl::Status embedding_lookup(const void* table, DType type, std::size_t vocab, std::size_t dim,
                              const std::int32_t* ids, std::size_t n, float* out,
                              ThreadPool* pool) {
  if (n == 0) return absl::OkStatus();
  if (table == nullptr || ids == nullptr || out == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("embedding_lookup: null ",
                                                   table == nullptr ? "table"
                                                   : ids == nullptr ? "ids"
                                                                    : "out",
                                                   " with n = ", n));
  const bool blocks_of_32 = type == DType::kQ8_0 || type == DType::kQ4_0 ||
                            type == DType::kIQ4_NL || type == DType::kQ4_1 ||
                            type == DType::kQ5_0 || type == DType::kQ5_1;
  const bool k_quant = type == DType::kQ4_K || type == DType::kQ5_K || type == DType::kQ6_K;
  if (type != DType::kF32 && type != DType::kF16 && type != DType::kBF16 && !blocks_of_32 &&
      !k_quant)
    return absl::InvalidArgumentError(
        absl::StrCat("embedding_lookup: unknown table type ", static_cast<int>(type)));
  if (type != DType::kF32 && reinterpret_cast<std::uintptr_t>(table) % 2 != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("embedding_lookup: ", dtype_name(type), " table at an odd address"));
  if (dim == 0) return absl::InvalidArgumentError("embedding_lookup: dim is 0");
  if (blocks_of_32 && dim % kQuantGroup != 0)
    return absl::InvalidArgumentError(absl::StrCat("embedding_lookup: dim = ", dim,
                                                   " is not a multiple of ", kQuantGroup, " for a ",
                                                   dtype_name(type), " table"));
  if (k_quant && dim % kSuperBlock != 0)
    return absl::InvalidArgumentError(absl::StrCat("embedding_lookup: dim = ", dim,
                                                   " is not a multiple of ", kSuperBlock, " for a ",
                                                   dtype_name(type), " table"));
  for (std::size_t t = 0; t < n; ++t) {
    if (ids[t] < 0 || static_cast<std::size_t>(ids[t]) >= vocab)
      return absl::OutOfRangeError(absl::StrCat("embedding_lookup: ids[", t, "] = ", ids[t],
                                                " is outside the vocabulary [0, ", vocab, ")"));
  }

  const internal::ActivationOpsKernels& k = internal::activation_ops_kernels();
  const std::size_t stride = row_bytes(type, dim);
  const auto* base = static_cast<const std::byte*>(table);
  auto rows = [&](std::size_t b, std::size_t e) {
    for (std::size_t t = b; t < e; ++t) {
      const std::byte* row = base + static_cast<std::size_t>(ids[t]) * stride;
      float* y = out + t * dim;
      switch (type) {
        case DType::kF32:
          std::memcpy(y, row, dim * sizeof(float));
          break;
        case DType::kF16:
          k.dequant_f16(reinterpret_cast<const std::uint16_t*>(row), y, dim);
          break;
        case DType::kBF16:
          k.dequant_bf16(reinterpret_cast<const std::uint16_t*>(row), y, dim);
          break;
        case DType::kQ8_0:
          k.dequant_q8_0(reinterpret_cast<const BlockQ8_0*>(row), y, dim);
          break;
        case DType::kQ4_0:
          k.dequant_q4_0(reinterpret_cast<const BlockQ4_0*>(row), y, dim);
          break;
        case DType::kQ4_K:  // one row per token: the scalar decoders are enough
          dequantize_row_q4_k(reinterpret_cast<const BlockQ4_K*>(row), y, dim);
          break;
        case DType::kQ5_K:
          dequantize_row_q5_k(reinterpret_cast<const BlockQ5_K*>(row), y, dim);
          break;
        case DType::kQ6_K:
          dequantize_row_q6_k(reinterpret_cast<const BlockQ6_K*>(row), y, dim);
          break;
        case DType::kIQ4_NL:
          dequantize_row_iq4_nl(reinterpret_cast<const BlockIQ4_NL*>(row), y, dim);
          break;
        case DType::kQ4_1:
          dequantize_row_q4_1(reinterpret_cast<const BlockQ4_1*>(row), y, dim);
          break;
        case DType::kQ5_0:
          dequantize_row_q5_0(reinterpret_cast<const BlockQ5_0*>(row), y, dim);
          break;
        case DType::kQ5_1:
          dequantize_row_q5_1(reinterpret_cast<const BlockQ5_1*>(row), y, dim);
          break;
      }
    }
  };
  if (pool == nullptr || pool->threads() <= 1 || n < 2 ||
      n * dim < kActivationOpsParallelMinElements) {
    rows(0, n);
  } else {
    pool->parallel_for(n, (kActivationOpsParallelMinElements + dim - 1) / dim, rows);
  }
  return absl::OkStatus();
}

}  // namespace hearth::kernels
