// Token log-probabilities: the log-softmax of one step's logits as the model
// produced them, before any sampling transform (penalties, temperature,
// top-k / top-p / min-p), for the token sampled and the most likely
// alternatives.
//
// Everything is computed in double from the float logits and stored as
// float. Fixed capacity: a step's figures live in the caller's TokenLogprobs,
// so computing them allocates nothing.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace hearth::engine {

// The most alternatives a request may ask for (OpenAI's limit as well).
inline constexpr std::size_t kMaxTopLogprobs = 20;

struct TokenLogprob {
  std::int32_t id = -1;
  float logprob = 0;  // natural log; <= 0
};

struct TokenLogprobs {
  TokenLogprob chosen;
  std::array<TokenLogprob, kMaxTopLogprobs> top{};
  std::size_t n_top = 0;
  // The bytes of text the chosen token added to the output before stop
  // strings held any back (Sequence sets it): where each token's text lies
  // in the output, for front ends that report offsets.
  std::size_t text_bytes = 0;
  // Most likely first; equal logits in increasing id order.
  std::span<const TokenLogprob> alternatives() const { return {top.data(), n_top}; }
};

// InvalidArgument naming the field: top_logprobs in [0, kMaxTopLogprobs],
// and only with logprobs.
absl::Status validate_logprobs(bool logprobs, std::size_t top_logprobs);

// log(sum(exp(logits[i]))) over `n` logits, computed without overflow.
double log_sum_exp(const float* logits, std::size_t n);

// Fills `out` with the out.size() (<= n) most likely tokens, most likely
// first, equal logits in increasing id order; `lse` is log_sum_exp(logits, n).
void most_likely(const float* logits, std::size_t n, double lse, std::span<TokenLogprob> out);

// The chosen token's log-probability and the `top_n` (<= kMaxTopLogprobs,
// <= vocab) most likely tokens'. `chosen` must be in [0, vocab).
void token_logprobs(const float* logits, std::size_t vocab, std::int32_t chosen, std::size_t top_n,
                    TokenLogprobs& out);

}  // namespace hearth::engine
