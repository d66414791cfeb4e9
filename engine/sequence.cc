#include "engine/sequence.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "base/status_macros.h"
#include "base/str_cat.h"

namespace hearth::engine {

namespace {
constexpr char kContextLengthExceeded[] = "hearth.engine/context_length_exceeded";
}  // namespace

absl::Status context_length_exceeded(std::string_view message) {
  absl::Status s = absl::InvalidArgumentError(std::string(message));
  s.SetPayload(kContextLengthExceeded, absl::Cord());
  return s;
}

bool is_context_length_exceeded(const absl::Status& status) {
  return status.GetPayload(kContextLengthExceeded).has_value();
}

Sequence::Sequence(const Tokenizer& tokenizer, const GenerationRequest& request,
                   std::size_t context, std::size_t n_vocab)
    : tokenizer_(tokenizer),
      context_(context),
      max_tokens_(request.max_tokens),
      max_text_bytes_(tokenizer.max_text_bytes()),
      ignore_eos_(request.ignore_eos),
      logprobs_on_(request.logprobs),
      top_logprobs_(request.top_logprobs),
      n_vocab_(n_vocab),
      sampler_(request.sampling, n_vocab),
      // Generated text continues the prompt: a first "▁there" keeps its space.
      decoder_(tokenizer, TokenStreamDecoder::Start::kContinuation),
      stops_(request.stop),
      prompt_(request.prompt_ids) {}

absl::StatusOr<std::unique_ptr<Sequence>> Sequence::start(const Tokenizer& tokenizer,
                                                          const GenerationRequest& request,
                                                          std::size_t context,
                                                          std::size_t n_vocab) {
  HEARTH_RETURN_IF_ERROR(validate_sampling(request.sampling));
  HEARTH_RETURN_IF_ERROR(validate_logprobs(request.logprobs, request.top_logprobs));
  const std::size_t n_prompt = request.prompt_ids.size();
  if (n_prompt == 0) return absl::InvalidArgumentError("prompt: tokenizes to no tokens");
  for (std::int32_t id : request.prompt_ids)
    if (id < 0 || static_cast<std::size_t>(id) >= n_vocab)
      return absl::InvalidArgumentError(
          str_cat("prompt_ids: token id ", id, " is outside the vocabulary [0, ", n_vocab, ")"));
  if (n_prompt >= context)
    return context_length_exceeded(
        str_cat("prompt: ", n_prompt, " tokens do not fit the context of ", context,
                " tokens (at most ", context - 1, " leave room to generate)"));
  std::unique_ptr<Sequence> s(new Sequence(tokenizer, request, context, n_vocab));
  if (request.grammar != nullptr) {
    if (tokenizer.vocab_size() != n_vocab)
      return absl::InvalidArgumentError(str_cat("response_format: the vocabulary has ",
                                                tokenizer.vocab_size(), " tokens, the model ",
                                                n_vocab));
    s->constraint_ = std::make_unique<grammar::ConstrainedOutput>(request.grammar,
                                                                  tokenizer.grammar_vocabulary());
  }
  // Everything a decode step writes is reserved now: a step allocates nothing.
  // One token adds at most its text plus a held-back character, each
  // invalid byte of which may become a 3-byte U+FFFD.
  const std::size_t piece_bytes = 3 * (tokenizer.max_text_bytes() + 4);
  s->history_.reserve(n_prompt + request.max_tokens + 1);
  s->history_ = s->prompt_;
  s->generated_.reserve(request.max_tokens);
  s->decoded_.reserve(piece_bytes);
  s->stops_.reserve(piece_bytes);
  s->piece_.reserve(piece_bytes + 256);
  return s;
}

std::size_t Sequence::skip_cached_prefix(std::size_t cached) {
  if (pos_ != 0 || prompt_.empty()) return 0;
  pos_ = std::min(cached, prompt_.size() - 1);
  return pos_;
}

std::span<const std::int32_t> Sequence::next_tokens(std::size_t budget) const {
  if (finished_) return {};
  if (prefilling())
    return std::span<const std::int32_t>(prompt_).subspan(
        pos_, std::min(std::max<std::size_t>(budget, 1), prompt_.size() - pos_));
  return std::span<const std::int32_t>(&last_, 1);
}

void Sequence::keep_text() {
  keep_text_ = true;
  text_.reserve(max_tokens_ * max_text_bytes_ + 64);
}

void Sequence::emit_piece(std::int32_t token, const TokenCallback& emit) {
  if (keep_text_) text_.append(piece_);
  if (emit) emit(piece_, token);
}

absl::Status Sequence::advance(std::size_t n, const float* logits, MemoryAllocator& scratch,
                               const TokenCallback& emit) {
  if (finished_) return absl::FailedPreconditionError("Sequence::advance: already finished");
  if (n == 0 || n > next_tokens(n).size())
    return absl::InvalidArgumentError(str_cat("Sequence::advance: ", n, " tokens ran"));
  const bool ended_prompt = prefilling() && pos_ + n == prompt_.size();
  pos_ += n;
  if (prefilling()) return absl::OkStatus();  // a chunk in the middle of the prompt
  if (ended_prompt && max_tokens_ == 0) {
    end(FinishReason::kMaxTokens, emit);
    return absl::OkStatus();
  }
  if (logits == nullptr) return absl::InvalidArgumentError("Sequence::advance: logits needed");
  const float* sampled_from = logits;
  if (constraint_ != nullptr) {
    HEARTH_ASSIGN_OR_RETURN(sampled_from, constrain(logits, scratch));
  }
  HEARTH_ASSIGN_OR_RETURN(const std::int32_t token,
                          sampler_.sample(sampled_from, history_, scratch));
  if (logprobs_on_) token_logprobs(logits, n_vocab_, token, top_logprobs_, logprobs_);
  if (tokenizer_.is_eog(token) && (!ignore_eos_ || constraint_ != nullptr)) {
    end(FinishReason::kEos, emit);
    return absl::OkStatus();
  }
  if (constraint_ != nullptr && !constraint_->accept_token(token))
    return absl::InternalError(
        str_cat("response_format: sampled token ", token, " that the grammar refuses"));
  generated_.push_back(token);
  history_.push_back(token);
  last_ = token;
  decoded_.clear();
  decoder_.push(token, decoded_);
  logprobs_.text_bytes = decoded_.size();
  piece_.clear();
  stops_.push(decoded_, piece_);
  emit_piece(token, emit);
  if (stops_.stopped()) {
    finished_ = true;
    finish_ = FinishReason::kStopString;
  } else if (constraint_ != nullptr && constraint_->must_end()) {
    end(FinishReason::kEos, emit);
  } else if (generated_.size() >= max_tokens_) {
    end(FinishReason::kMaxTokens, emit);
  } else if (pos_ >= context_) {
    end(FinishReason::kContextLimit, emit);
  }
  return absl::OkStatus();
}

absl::StatusOr<const float*> Sequence::constrain(const float* logits, MemoryAllocator& scratch) {
  float* masked = static_cast<float*>(scratch.allocate(n_vocab_ * sizeof(float), alignof(float)));
  if (masked == nullptr)
    return absl::ResourceExhaustedError("response_format: no scratch for the masked logits");
  HEARTH_ASSIGN_OR_RETURN(const std::span<const std::uint64_t> allowed, constraint_->allowed());
  constexpr float kRefused = -std::numeric_limits<float>::infinity();
  for (std::size_t id = 0; id < n_vocab_; ++id)
    masked[id] = (allowed[id / 64] >> (id % 64)) & 1 ? logits[id] : kRefused;
  // End-of-generation tokens end the output: only once it is complete (a
  // user-defined one such as "<|im_end|>" may also be text a JSON string
  // could hold).
  const bool complete = constraint_->complete();
  for (std::int32_t id : tokenizer_.eog_tokens()) masked[id] = complete ? logits[id] : kRefused;
  const bool any = std::any_of(masked, masked + n_vocab_, [](float l) { return l != kRefused; });
  if (any) return masked;
  using Cause = grammar::ConstrainedOutput::EmptyMaskCause;
  switch (constraint_->why_empty()) {
    case Cause::kBounds:
      return absl::FailedPreconditionError(str_cat(
          "response_format: the output so far passes the grammar matcher's bounds (more than ",
          grammar::ParseState::kMaxParses, " ways to parse it, or ", grammar::ParseState::kMaxDepth,
          " rules deep, or too many expansion steps for one character), so no token can follow "
          "it; make the grammar less ambiguous"));
    case Cause::kWorkBudget:
      return absl::FailedPreconditionError(
          "response_format: no token can continue the output, and finding out why took more "
          "than the grammar's work budget; make the grammar less ambiguous");
    case Cause::kGrammar:
      break;
  }
  return absl::FailedPreconditionError(
      "response_format: no token of the vocabulary can continue the output");
}

void Sequence::cancel(const TokenCallback& emit) {
  if (!finished_) end(FinishReason::kCancelled, emit);
}

void Sequence::end(FinishReason reason, const TokenCallback& emit) {
  finished_ = true;
  finish_ = reason;
  // Whatever the decoder and the stop matcher still hold goes out, unless
  // it completes a stop string.
  decoded_.clear();
  decoder_.flush(decoded_);
  piece_.clear();
  stops_.push(decoded_, piece_);
  if (stops_.stopped()) {
    finish_ = FinishReason::kStopString;
  } else {
    stops_.flush(piece_);
  }
  if (!piece_.empty()) emit_piece(-1, emit);
}

}  // namespace hearth::engine
