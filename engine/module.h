// Module: one warm instance of a model.
//
// A Module shares its model's weights (read-only, with every other instance
// of that model) and owns what one running request needs for itself: the KV
// cache (int8 by default, float on request) and the planned activation
// memory, laid out once at load in an ArenaAllocator wrapped in a
// StatsAllocator. forward() takes every kernel's scratch memory from the temp
// allocator it was given (or the calling thread's), so a steady decode step
// makes no heap allocation.
//
// Ownership and threads: a Module is used by one request at a time (the
// server's pool hands it out); forward() runs on the caller's thread and fans
// kernel work out to the thread pool. Weights are shared through shared_ptr.
//
// Making one: every way takes the same optional allocator arguments, in the
// same order (planned memory, then temp memory):
//   Module::load("model.gguf", options, planned, temp)
//   Module::load(mapped_file, options, planned, temp)
//   Module::load(shared_weights, options, planned, temp)
// planned: where the activation buffers and KV cache are carved from
//   (nullptr: the Module allocates them itself, once, at load);
// temp: scratch for kernels (nullptr: the calling thread's temp allocator,
//   memory/thread_temp_allocator.h, looked up at each forward).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/forward_pass.h"
#include "engine/weights.h"
#include "kernels/kv_cache.h"
#include "kernels/thread_pool.h"
#include "memory/arena_allocator.h"
#include "memory/stats_allocator.h"

namespace hearth::engine {

struct ModuleOptions {
  // Positions the KV cache holds; 0 = the model's training context, capped at 4096.
  std::size_t context_length = 0;
  KvCacheType kv_cache = KvCacheType::kInt8;
  // Most tokens one forward() takes (prefill runs in chunks of this size).
  std::size_t max_chunk = 64;
  // Kernel threads; nullptr = kernels::default_thread_pool().
  kernels::ThreadPool* pool = nullptr;
  // How weights are prepared when load() is given a path or a file (packed
  // on `pool` unless load.pool names other threads).
  LoadOptions load;
};

// What the instance holds, in the spirit of an embedded runner's report.
struct ModuleMemoryReport {
  std::size_t weights_mapped_bytes = 0;  // the model file, mapped read-only (shared)
  std::size_t weights_packed_bytes = 0;  // packed projection weights (shared)
  std::size_t planned_bytes = 0;         // activation buffers laid out at load
  std::size_t arena_capacity_bytes = 0;  // the arena they live in
  std::size_t arena_used_bytes = 0;
  std::size_t kv_cache_bytes = 0;
  std::size_t peak_temp_bytes = 0;  // highest temp-allocator use in one forward
  std::vector<std::string> lines() const;
};

class Module {
 public:
  static absl::StatusOr<std::unique_ptr<Module>> load(const std::string& path,
                                                      const ModuleOptions& options = {},
                                                      MemoryAllocator* planned = nullptr,
                                                      MemoryAllocator* temp = nullptr);
  static absl::StatusOr<std::unique_ptr<Module>> load(std::shared_ptr<const GgufFile> file,
                                                      const ModuleOptions& options = {},
                                                      MemoryAllocator* planned = nullptr,
                                                      MemoryAllocator* temp = nullptr);
  static absl::StatusOr<std::unique_ptr<Module>> load(std::shared_ptr<const ModelWeights> weights,
                                                      const ModuleOptions& options = {},
                                                      MemoryAllocator* planned = nullptr,
                                                      MemoryAllocator* temp = nullptr);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Runs `tokens` (1 to max_chunk of them) at positions start_pos, start_pos+1,
  // ... and returns the logits of the last one (vocab floats, valid until the
  // next forward). With all_logits != nullptr, the logits of every token are
  // also written there ([tokens][vocab]). Positions before start_pos must
  // already be in the KV cache (from earlier forwards of this instance).
  // Scratch comes from the temp allocator, which forward() resets before each
  // layer (a layer's scratch is dead when it ends), so temp memory is bounded
  // by one layer whatever the model's depth. The caller must therefore hold no
  // temp memory across a call; the output projection's scratch is left for
  // the caller to reset (a generation does after each step).
  absl::StatusOr<std::span<const float>> forward(std::span<const std::int32_t> tokens,
                                                 std::size_t start_pos,
                                                 float* all_logits = nullptr);

  // One forward of a short prompt so the temp allocator, the thread pool and
  // the pages of the weights are warm before the first request.
  absl::Status warm_up();

  const ModelConfig& config() const { return weights_->config(); }
  const ModelWeights& weights() const { return *weights_; }
  std::shared_ptr<const ModelWeights> shared_weights() const { return weights_; }
  std::size_t context_length() const { return context_; }
  std::size_t max_chunk() const { return options_.max_chunk; }
  KvCacheType kv_cache_type() const { return options_.kv_cache; }
  kernels::ThreadPool& pool() const { return *pool_; }
  ModuleMemoryReport memory_report() const;
  // The allocator forward() takes scratch from: the one given at load, or the
  // calling thread's temp allocator.
  MemoryAllocator& temp_allocator();
  // Records a temp-allocator peak observed by the caller (a generation reads
  // it after each step) for memory_report().
  void note_temp_peak(std::size_t bytes) {
    if (bytes > peak_temp_) peak_temp_ = bytes;
  }
  const AllocatorStats& planned_stats() const { return planned_stats_->stats(); }
  // This instance's KV cache, for a BatchedForward step that includes it
  // (the holder of the instance's lease runs that step).
  KvCacheRef kv_cache() const { return {kv_int8_, kv_float_}; }
  // Copies positions [begin, end) of every layer's KV cache from `src`, an
  // instance of the same model with the same context and KV type (prefix
  // reuse: what src computed for the same tokens). Neither instance may run
  // a forward meanwhile. InvalidArgument when the instances differ.
  absl::Status copy_kv_from(const Module& src, std::size_t begin, std::size_t end);

 private:
  Module() = default;
  absl::Status plan(MemoryAllocator* planned);

  std::shared_ptr<const ModelWeights> weights_;
  ModuleOptions options_;
  std::size_t context_ = 0;
  kernels::ThreadPool* pool_ = nullptr;
  MemoryAllocator* temp_ = nullptr;

  // Planned memory: our own buffer and arena when the caller gave none.
  std::unique_ptr<std::uint8_t[], void (*)(std::uint8_t*)> own_buffer_{nullptr, nullptr};
  std::unique_ptr<ArenaAllocator> own_arena_;
  std::unique_ptr<StatsAllocator> planned_stats_;
  std::size_t planned_bytes_ = 0;
  std::size_t kv_bytes_ = 0;
  std::size_t peak_temp_ = 0;

  // Activation buffers (in the arena), sized for max_chunk tokens.
  ActivationBuffers buffers_;
  float* logits_ = nullptr;             // vocab floats: the last token's logits
  std::vector<std::size_t> every_row_;  // 0 .. max_chunk - 1 (all_logits selects them all)
  std::vector<kernels::QuantizedKvView> kv_int8_;
  std::vector<kernels::FloatKvView> kv_float_;
};

}  // namespace hearth::engine
