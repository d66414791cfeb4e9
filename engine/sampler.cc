#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/str_cat.h"

namespace hearth::engine {
namespace {

absl::Status scratch_exhausted(const char* array, std::size_t bytes) {
  return absl::ResourceExhaustedError(str_cat("sampler: the temp allocator could not provide the ",
                                              array, " array (", bytes, " bytes)"));
}

// `value` keeps its own type, so a float prints as the float it is ("-0.1",
// not the double nearest it).
template <typename T>
absl::Status out_of_range(const char* field, T value, const char* range) {
  return absl::InvalidArgumentError(
      str_cat(field, " = ", value, " is out of range: allowed ", range));
}

struct Candidate {
  float logit;
  std::int32_t id;
};

}  // namespace

absl::Status validate_sampling(const SamplingParams& p) {
  // Negated comparisons also reject NaN.
  if (!(p.temperature >= 0.0f && p.temperature <= 100.0f))
    return out_of_range("temperature", p.temperature, "[0, 100]");
  if (p.top_k < 0) return out_of_range("top_k", p.top_k, "0 (off) or a positive count");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return out_of_range("top_p", p.top_p, "(0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p < 1.0f)) return out_of_range("min_p", p.min_p, "[0, 1)");
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 10.0f)) {
    return out_of_range("repetition_penalty", p.repetition_penalty, "(0, 10]");
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return out_of_range("presence_penalty", p.presence_penalty, "[-2, 2]");
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return out_of_range("frequency_penalty", p.frequency_penalty, "[-2, 2]");
  }
  if (p.penalty_last_n < 0 || p.penalty_last_n > 4096) {
    return out_of_range("penalty_last_n", p.penalty_last_n, "[0, 4096]");
  }
  return absl::OkStatus();
}

Rng::Rng(std::uint64_t seed) {
  for (auto& s : s_) {
    seed += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    s = z ^ (z >> 31);
  }
}

std::uint64_t Rng::next() {
  auto rotl = [](std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

float Rng::uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }

Sampler::Sampler(const SamplingParams& params, std::size_t vocab_size)
    : params_(params), vocab_(vocab_size), rng_(params.seed) {}

absl::StatusOr<std::int32_t> Sampler::sample(const float* logits,
                                             std::span<const std::int32_t> history,
                                             MemoryAllocator& scratch) {
  auto* cand = scratch.allocate_array<Candidate>(vocab_);
  if (cand == nullptr) return scratch_exhausted("candidates", vocab_ * sizeof(Candidate));
  for (std::size_t i = 0; i < vocab_; ++i) cand[i] = {logits[i], static_cast<std::int32_t>(i)};

  // 1. Penalties over the recent history. Counts live in a scratch array that is
  //    cleared only where the history touched it.
  const bool penalise = params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                        params_.frequency_penalty != 0.0f;
  if (penalise && params_.penalty_last_n > 0 && !history.empty()) {
    const std::size_t n =
        std::min(history.size(), static_cast<std::size_t>(params_.penalty_last_n));
    const auto recent = history.subspan(history.size() - n);
    auto* counts = scratch.allocate_array<std::uint16_t>(vocab_);
    if (counts == nullptr)
      return scratch_exhausted("penalty counts", vocab_ * sizeof(std::uint16_t));
    for (std::int32_t id : recent) {
      if (id >= 0 && static_cast<std::size_t>(id) < vocab_) counts[id] = 0;
    }
    for (std::int32_t id : recent) {
      if (id >= 0 && static_cast<std::size_t>(id) < vocab_) ++counts[id];
    }
    for (std::int32_t id : recent) {
      if (id < 0 || static_cast<std::size_t>(id) >= vocab_ || counts[id] == 0) continue;
      float& l = cand[id].logit;
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
      l -= static_cast<float>(counts[id]) * params_.frequency_penalty + params_.presence_penalty;
      counts[id] = 0;  // each distinct token is penalised once
    }
  }

  // 2. Greedy.
  if (params_.temperature == 0.0f) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < vocab_; ++i) {
      if (cand[i].logit > cand[best].logit) best = i;
    }
    return cand[best].id;
  }

  // 3. Truncation, measured on softmax(logits). Only top-k and top-p need
  //    the candidates in order (highest first); without them they stay in id
  //    order and no sort is paid (a full sort of a 32k vocabulary costs more
  //    than a tenth of a decode step).
  std::size_t n = vocab_;
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  const bool top_k = params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < n;
  if (top_k) {
    n = static_cast<std::size_t>(params_.top_k);
    std::nth_element(cand, cand + n - 1, cand + vocab_, by_logit);
  }
  const bool sorted = top_k || params_.top_p < 1.0f;
  if (sorted) std::sort(cand, cand + n, by_logit);
  float max_logit = cand[0].logit;
  for (std::size_t i = 1; !sorted && i < n; ++i) max_logit = std::max(max_logit, cand[i].logit);
  if (params_.top_p < 1.0f) {
    double total = 0;
    for (std::size_t i = 0; i < n; ++i)
      total += std::exp(static_cast<double>(cand[i].logit - max_logit));
    double cum = 0;
    for (std::size_t i = 0; i < n; ++i) {
      cum += std::exp(static_cast<double>(cand[i].logit - max_logit)) / total;
      if (cum >= params_.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    // p_i / p_max = exp(l_i - l_max) >= min_p; the survivors keep their
    // order (remove_if moves, never allocates).
    const float threshold = max_logit + std::log(params_.min_p);
    n = static_cast<std::size_t>(
        std::remove_if(cand, cand + n, [&](const Candidate& c) { return c.logit < threshold; }) -
        cand);
  }

  // 4. Temperature and the draw. The weights' buffer has the size of the
  // candidates before top-p / min-p (fixed per sampler), so every step asks
  // the temp allocator for the same size and is served from its cache.
  double sum = 0;
  const std::size_t most = params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < vocab_
                               ? static_cast<std::size_t>(params_.top_k)
                               : vocab_;
  auto* weight = scratch.allocate_array<double>(most);
  if (weight == nullptr) return scratch_exhausted("weights", most * sizeof(double));
  for (std::size_t i = 0; i < n; ++i) {
    weight[i] = std::exp(static_cast<double>(cand[i].logit - max_logit) / params_.temperature);
    sum += weight[i];
  }
  const double r = static_cast<double>(rng_.uniform()) * sum;
  double acc = 0;
  for (std::size_t i = 0; i < n; ++i) {
    acc += weight[i];
    if (r < acc) return cand[i].id;
  }
  return cand[n - 1].id;
}

}  // namespace hearth::engine
