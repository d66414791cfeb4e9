#include "engine/generation.h"

#include <chrono>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "engine/sequence.h"
#include "memory/thread_temp_allocator.h"

namespace hearth::engine {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStopString:
      return "stop";
    case FinishReason::kMaxTokens:
      return "length";
    case FinishReason::kContextLimit:
      return "context";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

absl::StatusOr<GenerationResult> generate(Module& module, const Tokenizer& tokenizer,
                                          const GenerationRequest& request,
                                          const TokenCallback& on_token,
                                          const CancelCheck& cancelled) {
  const auto t_start = Clock::now();
  GenerationRequest tokenized;
  const GenerationRequest* req = &request;
  if (request.prompt_ids.empty()) {
    if (auto s = validate_sampling(request.sampling); !s.ok()) return s;
    if (request.prompt.empty()) return absl::InvalidArgumentError("prompt: must not be empty");
    HEARTH_ASSIGN_OR_RETURN(auto ids, tokenizer.encode(request.prompt, request.tokenize));
    tokenized = request;
    tokenized.prompt_ids = std::move(ids);
    req = &tokenized;
  }
  absl::StatusOr<std::unique_ptr<Sequence>> started =
      Sequence::start(tokenizer, *req, module.context_length(), module.config().n_vocab);
  if (!started.ok()) return started.status();
  Sequence& seq = **started;
  seq.keep_text();

  // Own the temp allocator for the whole generation; reset it after each step.
  TempAllocatorLease lease;
  MemoryAllocator& temp = module.temp_allocator();
  CachingAllocator* caching =
      &temp == static_cast<MemoryAllocator*>(&lease.allocator()) ? &lease.allocator() : nullptr;
  const CachingAllocatorStats temp_before = caching ? caching->stats() : CachingAllocatorStats{};
  if (caching != nullptr) caching->begin_span();  // steps reset at every layer and at their end

  GenerationResult result;
  Clock::time_point t_prefilled = t_start, t_first = t_start;
  bool sampled = false;
  // One step: the next prompt chunk, or the last sampled token.
  while (!seq.finished()) {
    if (cancelled && cancelled()) {
      seq.cancel(on_token);
      break;
    }
    const std::span<const std::int32_t> tokens = seq.next_tokens(module.max_chunk());
    const bool logits_wanted = seq.wants_logits(tokens.size());
    auto logits = module.forward(tokens, seq.position());
    if (!logits.ok()) {
      temp.reset();
      return logits.status();
    }
    if (logits_wanted && !sampled) t_prefilled = Clock::now();
    const absl::Status s =
        seq.advance(tokens.size(), logits_wanted ? logits->data() : nullptr, temp, on_token);
    temp.reset();
    if (!s.ok()) return s;
    if (logits_wanted && !sampled) {
      sampled = true;
      t_first = Clock::now();
    }
  }
  temp.reset();
  const auto t_end = Clock::now();
  if (!sampled) t_prefilled = t_first = t_end;
  result.prompt_ids.assign(seq.prompt_ids().begin(), seq.prompt_ids().end());
  result.generated_ids.assign(seq.generated_ids().begin(), seq.generated_ids().end());
  result.text = seq.text();
  result.finish = seq.finish();
  result.stats.prompt_tokens = result.prompt_ids.size();
  result.stats.generated_tokens = result.generated_ids.size();
  result.stats.prefill_s = seconds_between(t_start, t_prefilled);
  result.stats.time_to_first_token_s = sampled ? seconds_between(t_start, t_first) : 0;
  result.stats.decode_s = result.generated_ids.empty() ? 0 : seconds_between(t_first, t_end);
  result.stats.total_s = seconds_between(t_start, t_end);
  if (caching != nullptr) {
    const CachingAllocatorStats after = caching->stats();
    result.stats.temp_lookups = after.lookups - temp_before.lookups;
    result.stats.temp_hits = after.hits - temp_before.hits;
    result.stats.temp_misses = after.misses - temp_before.misses;
    result.stats.temp_peak_bytes = after.span_peak_bytes;
    module.note_temp_peak(after.span_peak_bytes);
  }
  return result;
}

}  // namespace hearth::engine
