#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/str_cat.h"

namespace hearth::engine {

absl::Status validate_logprobs(bool logprobs, std::size_t top_logprobs) {
  if (top_logprobs > kMaxTopLogprobs)
    return absl::InvalidArgumentError(str_cat(
        "top_logprobs: ", top_logprobs, " is out of range: allowed [0, ", kMaxTopLogprobs, "]"));
  if (top_logprobs > 0 && !logprobs)
    return absl::InvalidArgumentError("top_logprobs: needs logprobs set");
  return absl::OkStatus();
}

double log_sum_exp(const float* logits, std::size_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < n; ++i) max = std::max(max, logits[i]);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  return max + std::log(sum);
}

void most_likely(const float* logits, std::size_t n, double lse, std::span<TokenLogprob> out) {
  const std::size_t k = std::min(out.size(), n);
  if (k == 0) return;
  // Insertion into a sorted window of k entries: ids arrive in increasing
  // order, so a later id displaces an entry only with a strictly larger logit.
  std::size_t filled = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float l = logits[i];
    if (filled == k && !(l > logits[out[k - 1].id])) continue;
    std::size_t at = filled < k ? filled++ : k - 1;
    while (at > 0 && l > logits[out[at - 1].id]) {
      out[at] = out[at - 1];
      --at;
    }
    out[at].id = static_cast<std::int32_t>(i);
  }
  for (std::size_t j = 0; j < k; ++j)
    out[j].logprob = static_cast<float>(static_cast<double>(logits[out[j].id]) - lse);
}

void token_logprobs(const float* logits, std::size_t vocab, std::int32_t chosen, std::size_t top_n,
                    TokenLogprobs& out) {
  const double lse = log_sum_exp(logits, vocab);
  out.chosen = {chosen, static_cast<float>(static_cast<double>(logits[chosen]) - lse)};
  out.n_top = std::min({top_n, kMaxTopLogprobs, vocab});
  most_likely(logits, vocab, lse, std::span<TokenLogprob>(out.top.data(), out.n_top));
}

}  // namespace hearth::engine
