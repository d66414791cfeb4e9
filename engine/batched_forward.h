// BatchedForward: one forward pass that steps several warm instances of a
// model at once (continuous batching).
//
// Each instance keeps its own KV cache; a step gives each of them a run of
// tokens at its own positions: one decode token, or a chunk of its prompt.
// Every projection runs once over all rows of the step, so a weight streamed
// from memory serves every sequence (decode is bound by memory bandwidth:
// eight sequences cost little more than one). Attention runs per sequence
// against its own cache, and the output projection runs only for the rows
// whose logits are wanted. A sequence's results are those it would get alone
// (engine/forward_pass.h).
//
// Memory: the step's activation buffers, token list and logits are planned
// once, at create(), for the largest step (max_tokens rows, max_sequences
// logit rows); kernel scratch comes from the calling thread's temp
// allocator, reset before each layer, so a steady step allocates nothing.
//
// Threads: one thread runs step() at a time (the model's step loop); the
// instances in a step must not be used by anyone else meanwhile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/forward_pass.h"
#include "engine/module.h"
#include "engine/weights.h"
#include "kernels/thread_pool.h"

namespace hearth::engine {

struct BatchOptions {
  std::size_t max_tokens = 64;          // rows of the largest step, [1, 4096]
  std::size_t max_sequences = 16;       // instances in one step, [1, max_tokens]
  kernels::ThreadPool* pool = nullptr;  // nullptr: kernels::default_thread_pool()
};

// One instance's part of a step.
struct StepInput {
  Module* instance = nullptr;
  std::span<const std::int32_t> tokens;  // 1 or more, at positions start_pos...
  std::size_t start_pos = 0;
  bool want_logits = false;  // the logits of its last token
};

class BatchedForward {
 public:
  // InvalidArgument for options out of range; ResourceExhausted when the
  // planned buffers cannot be allocated.
  static absl::StatusOr<std::unique_ptr<BatchedForward>> create(
      std::shared_ptr<const ModelWeights> weights, const BatchOptions& options);
  ~BatchedForward();
  BatchedForward(const BatchedForward&) = delete;
  BatchedForward& operator=(const BatchedForward&) = delete;

  // Runs one step over `inputs` (distinct instances of this model, at most
  // max_sequences of them, at most max_tokens tokens in all). Returns the
  // logits of the inputs with want_logits, in their order: row i of
  // [count][vocab], valid until the next step. InvalidArgument names the
  // input that is malformed (instance of another model, repeated, no
  // tokens), OutOfRange the one whose positions pass its context; nothing
  // runs then.
  absl::StatusOr<std::span<const float>> step(std::span<const StepInput> inputs);

  const BatchOptions& options() const { return options_; }
  const ModelWeights& weights() const { return *weights_; }
  // Bytes planned at create(): activations, tokens and logits.
  std::size_t planned_bytes() const { return planned_bytes_; }

 private:
  BatchedForward() = default;
  absl::Status check(std::span<const StepInput> inputs) const;

  std::shared_ptr<const ModelWeights> weights_;
  BatchOptions options_;
  std::size_t planned_bytes_ = 0;
  std::unique_ptr<std::uint8_t[], void (*)(std::uint8_t*)> buffer_{nullptr, nullptr};
  std::unique_ptr<ArenaAllocator> arena_;
  std::unique_ptr<StatsAllocator> planned_;
  ActivationBuffers buffers_;
  std::int32_t* tokens_ = nullptr;  // max_tokens
  float* logits_ = nullptr;         // max_sequences x vocab
  // Per-step lists, sized at create() (assigned, never grown, in step()).
  std::vector<SequenceRows> sequences_;
  std::vector<std::size_t> logit_rows_;
};

}  // namespace hearth::engine
