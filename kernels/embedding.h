// Token embedding lookup: the first operation of a llama forward pass.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/dtype.h"
#include "kernels/thread_pool.h"

namespace hearth::kernels {

// out[t][0..dim) = row ids[t] of `table`, dequantised to float, for t < n.
//
// table: [vocab][dim] row-major in `type`'s layout (kernels/dtype.h,
// kernels/gguf_blocks.h), rows of row_bytes(type, dim) bytes back to back, as
// token_embd.weight is stored in a GGUF file; 2-byte aligned unless F32.
// out: [n][dim] floats.
// Dequantisation is exact per element (F32 copied, F16/BF16 converted,
// Q8_0 d * q, Q4_0 d * (q - 8), Q4_K and Q5_K d * sc * q - dmin * m, Q6_K
// d * sc * (q - 32)), so every ISA
// path gives the same bits as the scalar reference (kernels/gguf_blocks.h,
// kernels/gguf_kquants.h).
//
// Errors (checked before anything is written, so `out` is untouched on error):
//   InvalidArgument  table, ids or out null while n > 0; unknown type; table
//                    misaligned; dim 0; dim not a multiple of 32 for Q8_0 / Q4_0
//                    (256 for the K-quants);
//   OutOfRange       ids[t] < 0 or >= vocab (the message names t and the id).
// Reads only the rows it needs; makes no heap allocation. `pool` splits tokens
// when the lookup has at least kActivationOpsParallelMinElements output elements.
absl::Status embedding_lookup(const void* table, DType type, std::size_t vocab, std::size_t dim,
                              const std::int32_t* ids, std::size_t n, float* out,
                              ThreadPool* pool = nullptr);

}  // namespace hearth::kernels
