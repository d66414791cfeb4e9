#include "server/request_path.h"

#include <ctime>
#include <optional>
#include <utility>

#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/chat_prompt.h"
#include "engine/sequence.h"
#include "memory/thread_temp_allocator.h"
#include "server/chat_call.h"
#include "server/conversation.h"
#include "server/invalid_argument.h"

namespace hearth::server {
namespace {

// Passes pieces on to the front end's sink and times the tokens for the
// observer: time to first token from arrival, then token to token. Runs on
// the step loop's thread; the record is read by the request's thread only
// after StepLoop::run returns.
class TimedSink final : public PieceSink {
 public:
  TimedSink(PieceSink& out, RequestRecord& record, RequestObserver* observer)
      : out_(out), record_(record), observer_(observer) {}
  bool has_room(std::size_t pieces) const override { return out_.has_room(pieces); }
  bool failed() const override { return out_.failed(); }
  void piece(std::string_view text, std::int32_t token, const PieceLogprobs* logprobs) override {
    if (token >= 0) {
      const Clock::time_point now = Clock::now();
      if (tokens_ == 0) {
        record_.time_to_first_token_s = engine::seconds_between(record_.arrival, now);
      } else if (observer_ != nullptr) {
        observer_->on_inter_token(record_.model, engine::seconds_between(last_, now));
      }
      last_ = now;
      ++tokens_;
    } else if (text.empty()) {
      return;  // nothing held back at the end
    }
    out_.piece(text, token, logprobs);
  }

 private:
  PieceSink& out_;
  RequestRecord& record_;
  RequestObserver* observer_;
  Clock::time_point last_{};
  std::size_t tokens_ = 0;
};

// Refuses, before tokenizing, a prompt too long for the context whatever its
// tokens: tokenizing a multi-megabyte prompt only to refuse it took hundreds
// of megabytes.
absl::Status check_prompt_bytes(std::string_view prompt, const ModelPool& pool) {
  const std::size_t fewest = pool.tokenizer().min_tokens(prompt);
  const std::size_t context = pool.context_length();
  if (fewest < context) return absl::OkStatus();
  return engine::context_length_exceeded(
      str_cat("prompt: ", prompt.size(), " bytes of text cannot fit the context of ", context,
              " tokens (they are at least ", fewest, " tokens, whatever the text)"));
}

}  // namespace

absl::Status check_generation_request(const engine::GenerationRequest& r,
                                      std::size_t max_tokens_limit) {
  if (r.prompt.empty()) return invalid("prompt: must not be empty");
  if (r.max_tokens < 1 || r.max_tokens > max_tokens_limit)
    return invalid(str_cat("max_tokens: ", r.max_tokens, " is out of range: allowed [1, ",
                           max_tokens_limit, "]"));
  if (r.stop.size() > kMaxStopStrings)
    return invalid(
        str_cat("stop: ", r.stop.size(), " strings given, at most ", kMaxStopStrings, " allowed"));
  for (std::size_t i = 0; i < r.stop.size(); ++i) {
    const std::string& s = r.stop[i];
    if (s.empty()) return invalid(str_cat("stop[", i, "]: must not be empty"));
    if (s.size() > kMaxStopBytes)
      return invalid(
          str_cat("stop[", i, "]: ", s.size(), " bytes, at most ", kMaxStopBytes, " allowed"));
  }
  if (absl::Status s = engine::validate_sampling(r.sampling); !s.ok())
    return invalid(str_cat("sampling.", s.message()));
  HEARTH_RETURN_IF_ERROR(engine::validate_logprobs(r.logprobs, r.top_logprobs));
  return absl::OkStatus();
}

RequestPath::RequestPath(ModelRegistry& registry, RequestPathOptions options,
                         RequestObserver* observer)
    : registry_(registry), options_(options), observer_(observer) {}

void RequestPath::finish(RequestRecord& record, const absl::Status& status) {
  record.code = status.code();
  record.duration_s = engine::seconds_between(record.arrival, Clock::now());
  if (observer_ != nullptr) observer_->on_request_done(record);
}

absl::StatusOr<ModelPool*> RequestPath::find(const std::string& method, const std::string& model,
                                             RequestRecord& record) {
  record.method = method;
  HEARTH_ASSIGN_OR_RETURN(ModelPool * pool, registry_.find(model));
  record.model = pool->spec().name;
  return pool;
}

absl::StatusOr<GenerateOutcome> RequestPath::generate(const GenerateCall& call, PieceSink& sink,
                                                      const CallContext& context,
                                                      RequestRecord& record) {
  HEARTH_ASSIGN_OR_RETURN(std::unique_ptr<Admission> admission, admit(call, context, record));
  return execute(std::move(admission), sink, context, record);
}

absl::StatusOr<GenerateOutcome> RequestPath::chat(const ChatCall& call, PieceSink& sink,
                                                  const CallContext& context,
                                                  RequestRecord& record) {
  HEARTH_ASSIGN_OR_RETURN(std::unique_ptr<Admission> admission, admit(call, context, record));
  return execute(std::move(admission), sink, context, record);
}

absl::StatusOr<std::unique_ptr<Admission>> RequestPath::admit(const GenerateCall& call,
                                                              const CallContext& context,
                                                              RequestRecord& record) {
  HEARTH_ASSIGN_OR_RETURN(ModelPool * pool, find(call.method, call.model, record));
  return admit_prompt(*pool, call, context, record);
}

absl::StatusOr<std::unique_ptr<Admission>> RequestPath::admit(const ChatCall& call,
                                                              const CallContext& context,
                                                              RequestRecord& record) {
  HEARTH_ASSIGN_OR_RETURN(ModelPool * pool, find(call.method, call.model, record));
  if (call.conversation.messages.empty()) return invalid("messages: at least one is needed");
  HEARTH_ASSIGN_OR_RETURN(const chat::ChatPrompt* prompt,
                          pool->chat_prompt(has_tools(call.conversation)));
  GenerateCall generate;
  generate.method = call.method;
  generate.model = call.model;
  generate.reuse_prefix = call.reuse_prefix;
  generate.request = call.request;
  HEARTH_ASSIGN_OR_RETURN(generate.request.prompt,
                          render_conversation(*prompt, call.conversation, call.model));
  generate.request.tokenize.parse_special = true;
  generate.request.tokenize.add_bos =
      pool->tokenizer().add_bos_default() && !prompt->starts_with_bos(generate.request.prompt);
  absl::StatusOr<std::unique_ptr<Admission>> admitted =
      admit_prompt(*pool, generate, context, record);
  if (!admitted.ok()) return as_messages_error(admitted.status());
  return admitted;
}

absl::StatusOr<std::unique_ptr<Admission>> RequestPath::admit_prompt(ModelPool& pool,
                                                                     const GenerateCall& call,
                                                                     const CallContext& context,
                                                                     RequestRecord& record) {
  HEARTH_RETURN_IF_ERROR(check_generation_request(call.request, options_.max_tokens_limit));
  const std::size_t vocab = pool.tokenizer().vocab_size();
  const std::int32_t top_k = call.request.sampling.top_k;
  if (top_k < 0 || static_cast<std::size_t>(top_k) > vocab)
    return invalid(str_cat("sampling.top_k = ", top_k, " is out of range: allowed [0, ", vocab,
                           "] (the vocabulary)"));

  // The request's own work (tokenizing, the sequence's buffers) happens on
  // this thread, before an instance is taken: a prompt that cannot run is
  // refused without queueing.
  TempAllocatorLease temp;
  engine::GenerationRequest request = call.request;
  HEARTH_RETURN_IF_ERROR(check_prompt_bytes(request.prompt, pool));
  absl::StatusOr<std::vector<std::int32_t>> ids =
      pool.tokenizer().encode(request.prompt, request.tokenize);
  if (!ids.ok()) return invalid(str_cat("prompt: ", ids.status().message()));
  request.prompt_ids = std::move(*ids);
  absl::StatusOr<std::unique_ptr<engine::Sequence>> sequence = engine::Sequence::start(
      pool.tokenizer(), request, pool.context_length(), pool.weights().config().n_vocab);
  if (!sequence.ok()) return sequence.status();

  bool queued = false;
  absl::StatusOr<ModelPool::Lease> lease =
      pool.acquire(context.deadline, context.cancelled, request.prompt_ids, &queued);
  // A wait is recorded when there was one: admitted, or given up in the
  // queue (deadline, cancellation, drain). A refusal before the queue (at
  // capacity, a deadline already passed) waited for nothing and would pull
  // the quantiles towards 0 just when the pool is full. Prompt tokens count
  // only when a step will compute them.
  if (lease.ok() || queued) record.queue_s = engine::seconds_between(record.arrival, Clock::now());
  if (!lease.ok()) return lease.status();
  record.prompt_tokens = request.prompt_ids.size();
  return std::unique_ptr<Admission>(
      new Admission{pool, std::move(*lease), std::move(*sequence), call.reuse_prefix});
}

absl::StatusOr<GenerateOutcome> RequestPath::execute(std::unique_ptr<Admission> admission,
                                                     PieceSink& sink, const CallContext& context,
                                                     RequestRecord& record) {
  ModelPool& pool = admission->pool;
  const ModelPool::Lease& lease = admission->lease;
  TimedSink timed(sink, record, observer_);
  absl::StatusOr<RunResult> run =
      pool.step_loop().run(lease.module(), lease.index(), admission->reuse_prefix,
                           *admission->sequence, timed, context, aborted_);
  if (!run.ok()) return run.status();
  const engine::Sequence& seq = *admission->sequence;
  record.generated_tokens = seq.generated_ids().size();
  record.cached_tokens = run->cached_tokens;
  record.temp_lookups = run->temp_lookups;
  record.temp_hits = run->temp_hits;
  record.temp_peak_bytes = run->temp_peak_bytes;
  switch (run->ended) {
    case RunResult::Ended::kAborted:
      return absl::UnavailableError("the server shut down before the generation finished");
    case RunResult::Ended::kDeadline:
      return absl::DeadlineExceededError(
          str_cat("deadline exceeded after ", seq.generated_ids().size(), " generated tokens"));
    case RunResult::Ended::kCancelled:
      return absl::CancelledError("cancelled by the client");
    case RunResult::Ended::kFinished:
      break;
  }

  GenerateOutcome out;
  out.finish = seq.finish();
  out.prompt_ids.assign(seq.prompt_ids().begin(), seq.prompt_ids().end());
  out.generated_tokens = seq.generated_ids().size();
  out.cached_tokens = run->cached_tokens;
  out.instance = lease.index();
  out.queue_s = record.queue_s;
  out.time_to_first_token_s = record.time_to_first_token_s < 0 ? 0 : record.time_to_first_token_s;
  out.prefill_tokens_per_s = run->prefill_s > 0 ? out.prompt_ids.size() / run->prefill_s : 0;
  out.decode_tokens_per_s = run->decode_s > 0 && out.generated_tokens > 1
                                ? (out.generated_tokens - 1) / run->decode_s
                                : 0;
  out.total_s = engine::seconds_between(record.arrival, Clock::now());
  return out;
}

}  // namespace hearth::server
