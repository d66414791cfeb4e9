// The transformer forward pass over the rows of one step, shared by a single
// instance's Module::forward and by BatchedForward, which steps several
// instances at once.
//
// A step holds one or more sequences. Each sequence contributes a run of
// consecutive rows (prompt tokens of one chunk, or one decode token) at its
// own positions and attends to its own KV cache. Every projection runs once
// over all the rows of the step (a weight read from memory serves every row),
// while RoPE, the KV append and attention run per sequence. Row-wise kernels
// (norms, projections, SwiGLU) compute each row exactly as they would alone,
// so a sequence's results do not depend on what else is in its step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "engine/weights.h"
#include "kernels/kv_cache.h"
#include "kernels/thread_pool.h"
#include "memory/memory_allocator.h"
#include "memory/stats_allocator.h"

namespace hearth::engine {

enum class KvCacheType { kInt8, kFloat };
const char* kv_cache_type_name(KvCacheType t);

// One instance's KV cache: a view per layer, of the type the instance uses
// (the other span is empty).
struct KvCacheRef {
  std::span<const kernels::QuantizedKvView> int8;
  std::span<const kernels::FloatKvView> f32;
};

// A sequence's rows within a step: rows [first_row, first_row + rows) are
// its tokens at positions start_pos, start_pos + 1, ...; positions before
// start_pos must already be in its KV cache.
struct SequenceRows {
  std::size_t first_row = 0;
  std::size_t rows = 0;
  std::size_t start_pos = 0;
  KvCacheRef kv;
};

// Activation buffers for up to `rows` rows, carved from planned memory.
struct ActivationBuffers {
  std::size_t rows = 0;
  float *x = nullptr, *xn = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *attn = nullptr,
        *tmp = nullptr, *gate = nullptr, *up = nullptr;
  // Bytes the buffers take for `rows` rows (each rounded up to `align`).
  static std::size_t bytes_for(const ModelConfig& c, std::size_t rows, std::size_t align);
  // Carves them from `planned`; ResourceExhausted naming the buffer when it
  // is full.
  static absl::StatusOr<ActivationBuffers> carve(const ModelConfig& c, std::size_t rows,
                                                 StatsAllocator& planned, std::size_t align);
};

// Runs every layer over the step's rows: tokens[r] is row r's token, and
// `sequences` cover rows [0, n) in order, without gaps. Leaves the final
// hidden states in buffers.x. Scratch comes from `scratch`, which is reset
// before each layer (the caller may hold no temp memory across the call).
// With a single row (one decode token) the pool's workers are given
// next-projection prefetch hints (Linear::hint_decode).
absl::Status run_layers(const ModelWeights& w, const ActivationBuffers& buffers,
                        std::span<const std::int32_t> tokens,
                        std::span<const SequenceRows> sequences, MemoryAllocator& scratch,
                        kernels::ThreadPool* pool);

// The output norm and projection for the rows in `rows` (indices into the
// step, any order): logits of rows[i] go to logits[i * vocab ...]. Uses
// buffers.xn as staging for up to buffers.rows rows. Resets `scratch` first
// and leaves the projection's scratch for the caller to reset.
absl::Status project_logits(const ModelWeights& w, const ActivationBuffers& buffers,
                            std::span<const std::size_t> rows, float* logits,
                            MemoryAllocator& scratch, kernels::ThreadPool* pool);

}  // namespace hearth::engine
