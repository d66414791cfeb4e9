// StepLoop: the one thread that runs every generation of a model, one
// batched forward step at a time (continuous batching).
//
// A request that holds one of the model's instances (a ModelPool lease)
// hands the loop its engine::Sequence with run(), and waits there until the
// sequence ends. Between steps the loop takes in the sequences handed to it;
// each step it
//   1. ends the sequences whose call is over (client gone, deadline passed,
//      server shutting down): they finish as kCancelled, and run() returns;
//   2. picks the rows of the step under its token budget (step_tokens):
//      one decode token for every decoding sequence whose sink has room,
//      then prompt chunks of the prefilling ones in what is left of the
//      budget, but at least half the budget (at least one token), even past
//      it, so prompts progress while decode rows fill the budget, and never
//      stall the running streams for more than a budget's worth of work.
//      The oldest prompt is sure of half of those rows; the rest go fewest
//      tokens left first (the oldest among them), so a short prompt is not
//      queued behind a long one's whole prefill;
//   3. runs engine::BatchedForward::step over them, samples each sequence
//      (its own Sampler, StopMatcher and TokenStreamDecoder) and hands its
//      pieces to its sink, on this thread;
//   4. resets this thread's temp allocator, and returns every sequence that
//      finished (EOS, stop string, length, context) to its run() caller.
// A sequence whose sink is full (a client that stops reading) sits out the
// steps until it drains: it holds only its own instance.
//
// Memory: this thread borrows its thread-local caching temp allocator for
// each step and resets it after the step; the BatchedForward's buffers are
// planned at start(); a steady decode step makes no heap allocation.
//
// Threads and locks: the loop's own thread runs every step, the sinks and
// the cancellation checks. `mu_` guards the inbox (sequences handed over,
// not yet taken in), the stop flag and each request's done flag; the active
// set belongs to the loop thread alone. Gauges (running, KV positions) are
// atomics, readable from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/batched_forward.h"
#include "engine/generation.h"
#include "engine/sequence.h"
#include "engine/tokenizer.h"
#include "server/kv_prefix_index.h"
#include "server/model_spec.h"
#include "server/piece_sink.h"

namespace hearth::server {

using Clock = std::chrono::steady_clock;

// How the loop learns that a call is over. Polled before every step, on the
// loop's thread: must be thread-safe and cheap.
struct CallContext {
  Clock::time_point deadline = Clock::time_point::max();
  std::function<bool()> cancelled;  // the client cancelled or went away; may be empty
};

// What the loop measured of each step, for the metrics exporter.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // One batched step of `model`: how many sequences and tokens it ran, and
  // how long the forward and sampling took. Called on the loop's thread.
  virtual void on_step(const std::string& model, std::size_t sequences, std::size_t tokens,
                       double seconds) = 0;
};

// Why run() returned, and what the sequence did.
struct RunResult {
  enum class Ended { kFinished, kCancelled, kDeadline, kAborted };
  Ended ended = Ended::kFinished;
  double time_to_first_token_s = -1;  // from run(); < 0: no token was sampled
  double prefill_s = 0, decode_s = 0;
  // Prompt tokens found in the instance's KV cache (prefix reuse), not run.
  std::size_t cached_tokens = 0;
  // The loop's temp allocator over the steps this sequence was in.
  std::uint64_t temp_lookups = 0, temp_hits = 0, temp_peak_bytes = 0;
};

struct StepLoopOptions {
  // Token budget of one step (decode rows + prompt chunk rows), >= 1.
  std::size_t step_tokens = kDefaultStepTokens;
  // Most sequences in one step: the model's instances.
  std::size_t max_sequences = 1;
};

class StepLoop {
 public:
  // Plans the batched forward for the largest step and starts the thread.
  // `observer` and `prefixes` may be nullptr (no prefix reuse); both outlive
  // the loop.
  static absl::StatusOr<std::unique_ptr<StepLoop>> start(
      std::string model, std::shared_ptr<const engine::ModelWeights> weights,
      const StepLoopOptions& options, kernels::ThreadPool* pool, StepObserver* observer,
      KvPrefixIndex* prefixes = nullptr);
  // Stops the thread. No run() may be in progress.
  ~StepLoop();
  StepLoop(const StepLoop&) = delete;
  StepLoop& operator=(const StepLoop&) = delete;

  // Runs `sequence` on `instance` (held by the caller's lease, used by no
  // one else until this returns; `instance_index` is its lease index) until
  // it ends, handing its pieces to `sink`; blocks the calling thread
  // meanwhile. With `reuse_prefix`, prefill starts after the longest prefix
  // of the prompt that the model's instances hold (KvPrefixIndex). `aborted` (the server's
  // grace period is over) is polled like the call context. Errors from the
  // forward or the sampler end this sequence only and are returned.
  absl::StatusOr<RunResult> run(engine::Module& instance, std::size_t instance_index,
                                bool reuse_prefix, engine::Sequence& sequence, PieceSink& sink,
                                const CallContext& call, const std::atomic<bool>& aborted);

  // Sequences being stepped now (handed over and not yet returned).
  std::size_t running() const { return running_.load(std::memory_order_relaxed); }
  // KV positions the running sequences hold (their instances' caches).
  std::size_t kv_positions_in_use() const { return kv_in_use_.load(std::memory_order_relaxed); }
  const StepLoopOptions& options() const { return options_; }

 private:
  struct Active;
  StepLoop() = default;
  void loop();
  // Ends `a` (no longer in active_) as `ended` / with `status` and wakes its
  // run(), the KV gauge already without it.
  void retire(Active& a, RunResult::Ended ended, absl::Status status);
  // Stores the KV positions of active_'s sequences (nullptr entries skipped).
  void publish_kv_in_use();
  // Takes the sequences handed over into the active set, each after its
  // instance's cache got the prompt's longest cached prefix.
  void take_in(std::vector<Active*>& arrived);
  // Step 2's prompt chunks, after `decode_rows` decode rows; returns their rows.
  std::size_t schedule_prompts(std::size_t decode_rows);
  // Adds up to `budget` of `a`'s next tokens to the step; returns how many.
  std::size_t add_chunk(Active& a, std::size_t budget);

  std::string model_;
  StepLoopOptions options_;
  StepObserver* observer_ = nullptr;
  KvPrefixIndex* prefixes_ = nullptr;
  std::unique_ptr<engine::BatchedForward> forward_;

  std::mutex mu_;
  std::condition_variable wake_;  // the loop waits: a sequence handed over, or stop
  std::condition_variable done_;  // run() callers wait for their sequence to end
  std::vector<Active*> inbox_;    // guarded by mu_
  bool stop_ = false;             // guarded by mu_

  // The loop thread's own.
  std::vector<Active*> active_;
  std::vector<engine::StepInput> inputs_;
  std::vector<Active*> stepped_;
  std::vector<Active*> arrived_;
  std::vector<Active*> prompting_;  // schedule_prompts' order

  std::atomic<std::size_t> running_{0};
  std::atomic<std::size_t> kv_in_use_{0};
  std::thread thread_;
};

}  // namespace hearth::server
