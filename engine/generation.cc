#include "engine/generation.h"

#include <chrono>

#include "absl/status/status.h"
#include "engine/stop_matcher.h"
#include "engine/str_cat.h"
#include "engine/token_stream_decoder.h"
#include "memory/thread_temp_allocator.h"

namespace hearth::engine {
namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

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
  if (auto s = validate_sampling(request.sampling); !s.ok()) return s;
  GenerationResult result;
  if (!request.prompt_ids.empty()) {
    result.prompt_ids = request.prompt_ids;
    for (std::int32_t id : result.prompt_ids) {
      if (id < 0 || static_cast<std::size_t>(id) >= module.config().n_vocab) {
        return absl::InvalidArgumentError(str_cat("prompt_ids: token id ", id,
                                                  " is outside the vocabulary [0, ",
                                                  module.config().n_vocab, ")"));
      }
    }
  } else {
    if (request.prompt.empty()) return absl::InvalidArgumentError("prompt: must not be empty");
    auto ids = tokenizer.encode(request.prompt, request.tokenize);
    if (!ids.ok()) return ids.status();
    result.prompt_ids = std::move(*ids);
  }
  const std::size_t n_prompt = result.prompt_ids.size();
  const std::size_t context = module.context_length();
  if (n_prompt == 0) return absl::InvalidArgumentError("prompt: tokenizes to no tokens");
  if (n_prompt >= context) {
    return absl::InvalidArgumentError(
        str_cat("prompt: ", n_prompt, " tokens do not fit the context of ", context,
                " tokens (at most ", context - 1, " leave room to generate)"));
  }
  result.stats.prompt_tokens = n_prompt;

  // Own the temp allocator for the whole generation; reset it after each step.
  TempAllocatorLease lease;
  MemoryAllocator& temp = module.temp_allocator();
  CachingAllocator* caching =
      &temp == static_cast<MemoryAllocator*>(&lease.allocator()) ? &lease.allocator() : nullptr;
  const CachingAllocatorStats temp_before = caching ? caching->stats() : CachingAllocatorStats{};
  std::uint64_t step_peak = 0;
  auto end_step = [&] {
    temp.reset();
    if (caching != nullptr) step_peak = std::max(step_peak, caching->stats().last_reset_peak_bytes);
  };

  Sampler sampler(request.sampling, module.config().n_vocab);
  // Generated text continues the prompt: a first "▁there" keeps its space.
  TokenStreamDecoder decoder(tokenizer, TokenStreamDecoder::Start::kContinuation);
  StopMatcher stops(request.stop);
  std::vector<std::int32_t> history = result.prompt_ids;
  history.reserve(n_prompt + request.max_tokens + 1);
  result.generated_ids.reserve(request.max_tokens);
  auto emit = [&](std::string_view text, std::int32_t token) {
    result.text.append(text);
    if (on_token) on_token(text, token);
  };

  // Prefill.
  std::span<const float> logits;
  const std::size_t chunk = module.max_chunk();
  bool cancelled_now = false;
  for (std::size_t pos = 0; pos < n_prompt; pos += chunk) {
    if (cancelled && cancelled()) {
      cancelled_now = true;
      break;
    }
    const std::size_t n = std::min(chunk, n_prompt - pos);
    auto r = module.forward(std::span<const std::int32_t>(result.prompt_ids.data() + pos, n), pos);
    if (!r.ok()) {
      end_step();
      return r.status();
    }
    logits = *r;
    if (pos + n < n_prompt) end_step();
  }
  const auto t_prefilled = Clock::now();
  result.stats.prefill_s = seconds(t_start, t_prefilled);

  // Decode.
  FinishReason finish = FinishReason::kMaxTokens;
  std::size_t pos = n_prompt;
  Clock::time_point t_first = t_prefilled;
  if (cancelled_now) finish = FinishReason::kCancelled;
  while (!cancelled_now && result.generated_ids.size() < request.max_tokens) {
    const std::int32_t token = sampler.sample(logits.data(), history, temp);
    end_step();
    if (token < 0)
      return absl::ResourceExhaustedError(
          "sampler: the temp allocator could not provide scratch memory");
    if (result.generated_ids.empty()) {
      t_first = Clock::now();
      result.stats.time_to_first_token_s = seconds(t_start, t_first);
    }
    if (!request.ignore_eos && tokenizer.is_eog(token)) {
      finish = FinishReason::kEos;
      break;
    }
    result.generated_ids.push_back(token);
    history.push_back(token);
    emit(stops.push(decoder.push(token)), token);
    if (stops.stopped()) {
      finish = FinishReason::kStopString;
      break;
    }
    if (result.generated_ids.size() >= request.max_tokens) break;
    if (pos >= context) {
      finish = FinishReason::kContextLimit;
      break;
    }
    if (cancelled && cancelled()) {
      finish = FinishReason::kCancelled;
      break;
    }
    const std::int32_t one[1] = {token};
    auto r = module.forward(one, pos++);
    if (!r.ok()) {
      end_step();
      return r.status();
    }
    logits = *r;
  }
  if (finish != FinishReason::kStopString) {
    const std::string tail = stops.push(decoder.flush());
    const std::string rest = stops.stopped() ? std::string() : stops.flush();
    if (stops.stopped()) finish = FinishReason::kStopString;
    if (!tail.empty() || !rest.empty()) emit(tail + rest, -1);
  }
  end_step();
  const auto t_end = Clock::now();
  result.finish = finish;
  result.stats.generated_tokens = result.generated_ids.size();
  result.stats.decode_s = result.generated_ids.empty() ? 0 : seconds(t_first, t_end);
  result.stats.total_s = seconds(t_start, t_end);
  if (caching != nullptr) {
    const CachingAllocatorStats after = caching->stats();
    result.stats.temp_lookups = after.lookups - temp_before.lookups;
    result.stats.temp_hits = after.hits - temp_before.hits;
    result.stats.temp_misses = after.misses - temp_before.misses;
    result.stats.temp_peak_bytes = step_peak;
    module.note_temp_peak(step_peak);
  }
  return result;
}

}  // namespace hearth::engine
