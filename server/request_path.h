// RequestPath: what every front end does for a generation, without knowing
// the transport. The gRPC service (server/inference_service.h) is a thin
// adapter over it; another front end reuses it unchanged.
//
// generate() takes plain request values, a sink for the pieces and a call
// context (deadline, client cancellation), and
//   1. finds the model (NOT_FOUND lists the served names; UNAVAILABLE while
//      loading or draining) and checks every field against the model
//      (INVALID_ARGUMENT naming the field and its limit);
//   2. tokenizes the prompt on the calling thread, under a lease on its
//      caching temp allocator (reset when the generation ends), and checks
//      it fits the context, all before taking an instance;
//   3. admits the request: ModelPool::acquire, the model's bounded FIFO
//      queue (UNAVAILABLE at capacity, DEADLINE_EXCEEDED, CANCELLED);
//   4. hands its engine::Sequence to the model's StepLoop and waits for it;
//      pieces reach `sink` on the loop's thread, each token timed for the
//      observer (time to first token, inter-token latency);
//   5. maps how it ended to a status: CANCELLED (client), DEADLINE_EXCEEDED,
//      UNAVAILABLE (the server's grace period ran out), or OK with the
//      outcome (finish reason, usage, timings).
// chat() first renders the conversation with the model's chat template
// (FAILED_PRECONDITION when it has none; INVALID_ARGUMENT when the template
// refuses the messages), on the calling thread, then runs the prompt as
// generate() does, its special-token text parsed as special tokens (the
// template writes the turn markers) and BOS added only when the model adds
// one and the rendered text does not already begin with it.
// A front end that must answer before the generation starts (an HTTP
// status line goes out before the first event) calls admit() (steps 1-3)
// and then execute() (steps 4-5); generate() and chat() are the two in one.
// The caller ends the call (its last write) and then reports it with
// finish(), which tells the observer once.
//
// Thread safety: every method may be called from any number of threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/generation.h"
#include "engine/sequence.h"
#include "server/model_registry.h"
#include "server/request_observer.h"
#include "server/step_loop.h"

namespace hearth::server {

// Request limits (documented in the proto).
inline constexpr std::size_t kDefaultMaxTokens = 128;
inline constexpr std::size_t kMaxStopStrings = 16;
inline constexpr std::size_t kMaxStopBytes = 256;

// A generation request in plain values, as a front end maps it from its
// wire format. Field names in error messages are these.
struct GenerateCall {
  std::string method;  // for the record: "Generate", "Complete", ...
  std::string model;
  engine::GenerationRequest request;  // prompt text (not ids), sampling, stop, max_tokens...
  // Start prefill after the longest prefix of the prompt already in one of
  // the model's KV caches (server/kv_prefix_index.h).
  bool reuse_prefix = true;
};

// A chat request in plain values (server/chat_call.h).
struct ChatCall;

struct GenerateOutcome {
  engine::FinishReason finish = engine::FinishReason::kMaxTokens;
  std::vector<std::int32_t> prompt_ids;
  std::size_t generated_tokens = 0;
  std::size_t cached_tokens = 0;  // prompt tokens found in a KV cache, not run
  std::size_t instance = 0;
  double queue_s = 0, time_to_first_token_s = 0, total_s = 0;
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
};

// A generation admitted by RequestPath::admit: its prompt tokenized and
// checked, one of the model's instances held (released when this is
// destroyed). Run it once with RequestPath::execute.
struct Admission {
  ModelPool& pool;
  ModelPool::Lease lease;
  std::unique_ptr<engine::Sequence> sequence;
  bool reuse_prefix = true;
};

struct RequestPathOptions {
  std::size_t max_tokens_limit = 4096;
};

// Checks the values a front end mapped (no model needed): prompt, max_tokens
// in [1, max_tokens_limit], stop strings, sampling ranges. INVALID_ARGUMENT
// naming the field ("max_tokens: 0 is out of range: allowed [1, 4096]").
absl::Status check_generation_request(const engine::GenerationRequest& request,
                                      std::size_t max_tokens_limit);

class RequestPath {
 public:
  RequestPath(ModelRegistry& registry, RequestPathOptions options,
              RequestObserver* observer = nullptr);

  // One generation (steps above). `record` is filled as it goes (model,
  // tokens, timings, temp allocator figures) for finish().
  absl::StatusOr<GenerateOutcome> generate(const GenerateCall& call, PieceSink& sink,
                                           const CallContext& context, RequestRecord& record);
  // One chat reply (see above); the same outcome as generate().
  absl::StatusOr<GenerateOutcome> chat(const ChatCall& call, PieceSink& sink,
                                       const CallContext& context, RequestRecord& record);
  // Steps 1-3 of generate() / chat(): the model found, the request checked
  // and tokenized, an instance held. Errors are those of generate().
  absl::StatusOr<std::unique_ptr<Admission>> admit(const GenerateCall& call,
                                                   const CallContext& context,
                                                   RequestRecord& record);
  absl::StatusOr<std::unique_ptr<Admission>> admit(const ChatCall& call, const CallContext& context,
                                                   RequestRecord& record);
  // Steps 4-5: runs an admitted generation to its end (blocks the calling
  // thread); `admission` is spent (its instance released) on return.
  absl::StatusOr<GenerateOutcome> execute(std::unique_ptr<Admission> admission, PieceSink& sink,
                                          const CallContext& context, RequestRecord& record);
  // Reports a finished call of any method with its final status.
  void finish(RequestRecord& record, const absl::Status& status);

  // Cancels every running generation at its next step (the grace period is
  // over); they end with UNAVAILABLE.
  void abort_all() { aborted_.store(true, std::memory_order_release); }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

  ModelRegistry& registry() const { return registry_; }
  const RequestPathOptions& options() const { return options_; }

 private:
  // The model, recorded with the method in `record`.
  absl::StatusOr<ModelPool*> find(const std::string& method, const std::string& model,
                                  RequestRecord& record);
  // admit() once the model is found and `call.request.prompt` is its text.
  absl::StatusOr<std::unique_ptr<Admission>> admit_prompt(ModelPool& pool, const GenerateCall& call,
                                                          const CallContext& context,
                                                          RequestRecord& record);

  ModelRegistry& registry_;
  const RequestPathOptions options_;
  RequestObserver* observer_;  // may be nullptr; outlives the path
  std::atomic<bool> aborted_{false};
};

}  // namespace hearth::server
