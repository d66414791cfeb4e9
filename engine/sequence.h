// Sequence: one generation as a series of steps, so that a step loop can
// run many of them through one batched forward, and engine::generate() can
// run one alone, with the same rules.
//
// Each step, the driver asks the sequence what to run (next_tokens: the
// next chunk of the prompt, or the token sampled last), runs those tokens at
// position() on the sequence's instance, and hands back the logits of the
// last one when wants_logits() said so (advance). On logits the sequence
// samples its next token (its own Sampler), checks EOS, max_tokens, the
// context and its stop strings (its own StopMatcher), and turns the token
// into text (its own TokenStreamDecoder), handing each piece to the caller's
// TokenCallback (engine/generation.h). finished() says when it is done, and
// why (finish()).
//
// Prefill and decode in the same shape: during prefill next_tokens() returns
// up to `budget` prompt tokens; the logits of a chunk matter only when it
// ends the prompt. Cancellation is the driver's call (cancel()), checked
// before every step, as generate() always did.
//
// Memory: the sequence allocates at start() (history, generated ids and
// text buffers are reserved for max_tokens); a decode step makes no heap
// allocation. Sampling scratch comes from the allocator passed to advance().
// Under a grammar (structured output) a step may allocate when it meets a
// grammar state for the first time (the state's token mask is cached).
//
// Not thread-safe: one driver thread at a time. The Tokenizer must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/generation.h"
#include "engine/logprobs.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "engine/token_stream_decoder.h"
#include "engine/tokenizer.h"
#include "grammar/token_mask.h"
#include "memory/memory_allocator.h"

namespace hearth::engine {

// A prompt that does not fit the context: InvalidArgument with `message`,
// marked so a front end can say so in its own terms (OpenAI's error code
// "context_length_exceeded").
absl::Status context_length_exceeded(std::string_view message);
bool is_context_length_exceeded(const absl::Status& status);

class Sequence {
 public:
  // Checks the request against the model: sampling values, prompt ids
  // (already tokenized: request.prompt_ids must not be empty) inside the
  // vocabulary, and a prompt that leaves room in `context`. InvalidArgument
  // names the field and the limit.
  static absl::StatusOr<std::unique_ptr<Sequence>> start(const Tokenizer& tokenizer,
                                                         const GenerationRequest& request,
                                                         std::size_t context, std::size_t n_vocab);

  // Before the first step: the instance's KV cache already holds the first
  // `cached` prompt tokens (prefix reuse), so prefill starts after them,
  // keeping at least the last prompt token to run (its logits give the
  // first sampled token). Returns the positions skipped.
  std::size_t skip_cached_prefix(std::size_t cached);
  // What to run next: up to `budget` (>= 1) prompt tokens while prefilling,
  // else the one token sampled last. Empty once finished.
  std::span<const std::int32_t> next_tokens(std::size_t budget) const;
  // The position of next_tokens()' first token.
  std::size_t position() const { return pos_; }
  bool prefilling() const { return pos_ < prompt_.size(); }
  // Prompt tokens not run yet (0 once decoding).
  std::size_t prompt_tokens_left() const { return prefilling() ? prompt_.size() - pos_ : 0; }
  // Whether a step that runs `n` of next_tokens() must hand back logits.
  bool wants_logits(std::size_t n) const { return pos_ + n >= prompt_.size(); }

  // The driver ran `n` tokens of next_tokens() (n >= 1); `logits` are the
  // last one's when wants_logits(n) (vocab floats), else nullptr. Samples,
  // emits, and may finish. ResourceExhausted when `scratch` is exhausted.
  absl::Status advance(std::size_t n, const float* logits, MemoryAllocator& scratch,
                       const TokenCallback& emit);
  // Ends the sequence now (client gone, deadline, shutdown): kCancelled.
  void cancel(const TokenCallback& emit);

  // The log-probabilities of the token sampled last, while the TokenCallback
  // that receives its piece runs (and until the next advance); nullptr
  // unless the request asked for them.
  const TokenLogprobs* logprobs() const { return logprobs_on_ ? &logprobs_ : nullptr; }
  const Tokenizer& tokenizer() const { return tokenizer_; }

  bool finished() const { return finished_; }
  FinishReason finish() const { return finish_; }
  std::span<const std::int32_t> prompt_ids() const { return prompt_; }
  std::span<const std::int32_t> generated_ids() const { return generated_; }
  // Every piece emitted, concatenated; kept only after keep_text(), which
  // reserves room for max_tokens tokens of the vocabulary's longest text
  // (only ill-formed UTF-8, each bad byte becoming U+FFFD, can outgrow it).
  const std::string& text() const { return text_; }
  void keep_text();

 private:
  Sequence(const Tokenizer& tokenizer, const GenerationRequest& request, std::size_t context,
           std::size_t n_vocab);
  // Flushes the decoder and stop matcher, emits what was held, sets finish_.
  void end(FinishReason reason, const TokenCallback& emit);
  void emit_piece(std::int32_t token, const TokenCallback& emit);
  // Under a grammar: `logits` copied to scratch with every token the grammar
  // refuses at -inf (end-of-generation tokens allowed once the output is
  // complete). FailedPrecondition when no token of the vocabulary can
  // continue the output.
  absl::StatusOr<const float*> constrain(const float* logits, MemoryAllocator& scratch);

  const Tokenizer& tokenizer_;
  const std::size_t context_;
  const std::size_t max_tokens_;
  const std::size_t max_text_bytes_;
  const bool ignore_eos_;
  const bool logprobs_on_;
  const std::size_t top_logprobs_;
  const std::size_t n_vocab_;
  TokenLogprobs logprobs_;
  Sampler sampler_;
  TokenStreamDecoder decoder_;
  StopMatcher stops_;
  std::unique_ptr<grammar::ConstrainedOutput> constraint_;  // null: unconstrained
  std::vector<std::int32_t> prompt_;
  std::vector<std::int32_t> history_;  // prompt + generated: what the penalties look at
  std::vector<std::int32_t> generated_;
  std::size_t pos_ = 0;  // next position to run
  std::int32_t last_ = -1;
  std::string decoded_, piece_, text_;  // reused per token
  bool keep_text_ = false;
  bool finished_ = false;
  FinishReason finish_ = FinishReason::kMaxTokens;
};

}  // namespace hearth::engine
