// Generation: prompt in, tokens out, on one warm Module.
//
//   prefill (in chunks of the Module's max_chunk) -> sample -> decode one
//   token at a time -> ... until EOS, a stop string, max_tokens or the end of
//   the context, or until the caller cancels.
//
// Memory: generate() owns the calling thread's temp allocator (or the
// Module's own temp allocator) while it runs: it takes a lease on it and
// resets it after every prefill chunk and every decode step, so scratch never
// grows with the number of tokens and every step after the first reuses the
// same cached blocks. Nothing else on the thread may hold temp memory across
// a call.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/module.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"
#include "grammar/grammar.h"

namespace hearth::engine {

enum class FinishReason { kEos, kStopString, kMaxTokens, kContextLimit, kCancelled };
// "eos", "stop", "length", "context", "cancelled". kEos also ends a
// structured output whose value is complete (GenerationRequest::grammar).
const char* finish_reason_name(FinishReason r);

struct GenerationRequest {
  std::string prompt;
  // When non-empty, used as the prompt instead of tokenizing `prompt`.
  std::vector<std::int32_t> prompt_ids;
  TokenizeOptions tokenize;  // BOS (model default), special-token parsing (off)
  SamplingParams sampling;
  std::size_t max_tokens = 128;  // 0 generates nothing
  std::vector<std::string> stop;
  bool ignore_eos = false;
  // Each generated token's log-probability, and this many most likely
  // alternatives (engine/logprobs.h): [0, kMaxTopLogprobs], only with logprobs.
  bool logprobs = false;
  std::size_t top_logprobs = 0;
  // Structured output: when set, every sampled token keeps the output a
  // prefix of a sentence of this grammar (grammar/), end-of-generation
  // tokens come only once the output is a whole sentence, and generation
  // ends (kEos) when nothing may follow. Shared, read-only.
  std::shared_ptr<const grammar::Grammar> grammar;
};

struct GenerationStats {
  std::size_t prompt_tokens = 0;
  std::size_t generated_tokens = 0;
  double time_to_first_token_s = 0;
  double prefill_s = 0;
  double decode_s = 0;
  double total_s = 0;
  double prefill_tokens_per_s() const { return prefill_s > 0 ? prompt_tokens / prefill_s : 0; }
  // Tokens after the first, over the time spent decoding them.
  double decode_tokens_per_s() const {
    return decode_s > 0 && generated_tokens > 1 ? (generated_tokens - 1) / decode_s : 0;
  }
  // The temp allocator during this generation.
  std::uint64_t temp_lookups = 0, temp_hits = 0, temp_misses = 0;
  std::uint64_t temp_peak_bytes = 0;
};

// The seconds from a to b, as GenerationStats records them (and the server's
// step loop its sequences' timings).
inline double seconds_between(std::chrono::steady_clock::time_point a,
                              std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct GenerationResult {
  std::vector<std::int32_t> prompt_ids;
  std::vector<std::int32_t> generated_ids;  // the EOS token, if met, is not included
  std::string text;                         // what was streamed, concatenated
  FinishReason finish = FinishReason::kMaxTokens;
  GenerationStats stats;
};

// Receives each piece as it is ready: text (possibly empty while an unfinished
// UTF-8 character or a possible stop string is held back) and the token id that
// produced it; a final call with token -1 carries any text still held at the end.
using TokenCallback = std::function<void(std::string_view text, std::int32_t token)>;
// Polled between prefill chunks and before every decode step; true cancels.
using CancelCheck = std::function<bool()>;

// Errors: InvalidArgument for an empty prompt, bad sampling values or a prompt
// that leaves no room in the context (naming the field and the limit); errors
// from the Module are passed on.
absl::StatusOr<GenerationResult> generate(Module& module, const Tokenizer& tokenizer,
                                          const GenerationRequest& request,
                                          const TokenCallback& on_token = {},
                                          const CancelCheck& cancelled = {});

}  // namespace hearth::engine
