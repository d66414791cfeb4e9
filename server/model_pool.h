// ModelPool: one served model's warm instances and the queue of requests
// waiting for one.
//
// The model's weights are loaded once (ModelWeights, shared read-only); each
// of the N instances is an engine::Module with its own KV cache and planned
// activation memory. A request borrows an instance with acquire() and gives
// it back when its Lease is destroyed, on every path (success, error,
// cancellation, deadline), so instances cannot leak.
//
// Waiting: when every instance is busy, up to `queue` requests wait in FIFO
// order; one more is refused at once with UNAVAILABLE ("at capacity"). A
// waiting request leaves the queue when its deadline passes
// (DEADLINE_EXCEEDED), when its client cancels (CANCELLED), or when the pool
// starts draining (UNAVAILABLE). Client cancellation of a synchronous gRPC
// call is only observable by polling, so each waiter re-checks its own
// client every kCancelPollInterval, without holding the pool's mutex (a
// callback is the transport's code: it must not run under our lock, and
// never on another request's thread).
//
// Chat: the model's chat template (spec.chat_template's file when given,
// else the GGUF's tokenizer.chat_template) is parsed at load. An override
// that cannot be read or parsed fails the load; a model file without a
// template, or with one hearth cannot parse, still serves Generate, and
// chat_prompt() says why Chat cannot run. Without an override, a file's
// second template for requests with tools (tokenizer.chat_template.tool_use,
// as Hermes 2 Pro's and Command R's files carry) is parsed too; when it
// cannot be, requests with tools use the first.
//
// Thread safety: every method may be called from any thread. `mu_` guards the
// free list, the wait queue and the counters; the Modules themselves are
// used by one lease holder at a time and need no lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf.h"
#include "engine/module.h"
#include "engine/tokenizer.h"
#include "engine/weights.h"
#include "server/kv_prefix_index.h"
#include "server/model_spec.h"
#include "server/step_loop.h"

namespace hearth::chat {
class ChatPrompt;
}  // namespace hearth::chat

namespace hearth::server {

inline constexpr std::chrono::milliseconds kCancelPollInterval{10};

struct PoolCounters {
  std::size_t instances = 0;
  std::size_t busy = 0;         // instances lent out (running or about to)
  std::size_t queue_depth = 0;  // requests waiting for an instance
  std::size_t queue_capacity = 0;
  std::size_t running = 0;             // sequences in the step loop
  std::size_t kv_positions_used = 0;   // KV positions the running sequences hold
  std::size_t kv_positions_total = 0;  // instances x context
};

class ModelPool {
 public:
  // Loads the model (or synthesizes the demo model), its tokenizer, and
  // spec.instances warm Modules, each run once on a short prompt so that its
  // memory is touched before the first request, then starts the model's
  // StepLoop (every generation of the model runs there). `kernel_pool` may
  // be nullptr (the process's default pool); `steps` (may be nullptr) hears
  // of every step. Errors name the model and the file.
  static absl::StatusOr<std::unique_ptr<ModelPool>> load(const ModelSpec& spec,
                                                         kernels::ThreadPool* kernel_pool,
                                                         StepObserver* steps = nullptr);
  ~ModelPool();

  class Lease {
   public:
    Lease(Lease&& o) noexcept : pool_(o.pool_), index_(o.index_) { o.pool_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    engine::Module& module() const;
    std::size_t index() const { return index_; }

   private:
    friend class ModelPool;
    Lease(ModelPool* pool, std::size_t index) : pool_(pool), index_(index) {}
    ModelPool* pool_;
    std::size_t index_;
  };

  // Borrows an instance, waiting in the queue until `deadline` if all are
  // busy: of the free ones, the one whose KV cache shares the longest prefix
  // with `prompt` (KvPrefixIndex::choose; empty: any). `cancelled` is polled
  // while waiting. No instance is lent once `deadline` has passed, even one
  // that is free. Errors: UNAVAILABLE (queue full, or draining),
  // DEADLINE_EXCEEDED, CANCELLED; each message names the model. *queued
  // (when given) says whether the request waited in the queue.
  absl::StatusOr<Lease> acquire(Clock::time_point deadline, const std::function<bool()>& cancelled,
                                std::span<const std::int32_t> prompt = {}, bool* queued = nullptr);

  // No new acquire() succeeds from now on; waiters are released with
  // UNAVAILABLE. Leases already held stay valid.
  void drain();
  // Blocks until no instance is busy or `deadline` passes; true if idle.
  bool wait_idle(Clock::time_point deadline);

  PoolCounters counters() const;
  const ModelSpec& spec() const { return spec_; }
  const engine::Tokenizer& tokenizer() const { return *tokenizer_; }
  // The model's chat template (for a request with tools, the file's tool-use
  // template when it has one), or FAILED_PRECONDITION naming the model and
  // why it has none.
  absl::StatusOr<const chat::ChatPrompt*> chat_prompt(bool with_tools = false) const;
  const engine::ModelWeights& weights() const { return *weights_; }
  std::size_t context_length() const { return context_; }
  // Parameters in the model file's tensors.
  std::uint64_t parameters() const { return parameters_; }
  std::size_t max_chunk() const { return max_chunk_; }
  // One instance's memory as measured after its warm-up at load (every
  // instance of a model has the same plan; weights are shared by all).
  const engine::ModuleMemoryReport& instance_memory() const { return instance_memory_; }
  // What each instance's KV cache holds (prefix reuse).
  const KvPrefixIndex& prefixes() const { return *prefixes_; }
  // The loop that steps every generation of this model.
  StepLoop& step_loop() const { return *step_loop_; }

 private:
  explicit ModelPool(ModelSpec spec);  // in the .cc: chat_ is of an incomplete type here
  void release(std::size_t index);
  // Sets chat_ (and chat_tools_) or chat_unavailable_ (see the class comment).
  absl::Status load_chat_prompt(const engine::GgufFile& file);
  // Takes the free instance acquire() hands out. Requires mu_, free_ not empty.
  std::size_t take_free(std::span<const std::int32_t> prompt);

  const ModelSpec spec_;
  std::shared_ptr<const engine::ModelWeights> weights_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  // The chat template (by pointer: the interpreter's headers stay out of
  // every file that includes this one); set at load, or...
  std::unique_ptr<const chat::ChatPrompt> chat_;
  std::unique_ptr<const chat::ChatPrompt> chat_tools_;      // tokenizer.chat_template.tool_use
  absl::Status chat_unavailable_;                           // ...why not
  std::vector<std::unique_ptr<engine::Module>> instances_;  // fixed after load
  std::size_t context_ = 0;
  std::size_t max_chunk_ = 0;
  std::uint64_t parameters_ = 0;
  engine::ModuleMemoryReport instance_memory_;
  std::unique_ptr<KvPrefixIndex> prefixes_;  // what each instance's KV cache holds
  std::unique_ptr<StepLoop> step_loop_;      // started last, stopped first

  mutable std::mutex mu_;
  std::condition_variable changed_;  // an instance came back, a waiter left, or draining
  std::vector<std::size_t> free_;    // guarded by mu_
  struct Waiter {
    std::uint64_t ticket;
    Clock::time_point deadline;
  };
  // Waiters whose deadline has not passed: the ones that count against the
  // queue limit (a cancelled one leaves within kCancelPollInterval, when its
  // own thread sees it). Requires mu_.
  std::size_t live_waiters(Clock::time_point now) const;
  std::deque<Waiter> waiters_;     // guarded by mu_: FIFO
  std::uint64_t next_ticket_ = 0;  // guarded by mu_
  bool draining_ = false;          // guarded by mu_
};

}  // namespace hearth::server
