// Choosing the next token from logits.
//
// The chain, in the reference implementation's default order:
//   1. penalties over the last `penalty_last_n` tokens of the history:
//      repetition (a positive logit is divided by it, a negative one multiplied),
//      frequency (minus count x value) and presence (minus value once seen);
//   2. temperature 0 -> greedy: the highest logit wins (lowest id on ties);
//   3. otherwise top-k, then top-p (smallest set whose probability reaches p),
//      then min-p (drop tokens below min_p x the top probability), all measured
//      on softmax(logits), then softmax(logits / temperature) over the survivors
//      and a draw from it.
// The draw uses hearth's own generator seeded by `seed`, so a seed gives the
// same tokens on every machine and every run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "memory/memory_allocator.h"

namespace hearth::engine {

struct SamplingParams {
  float temperature = 0.0f;          // 0: greedy; (0, 100]
  std::int32_t top_k = 0;            // 0: off; otherwise [1, vocab]
  float top_p = 1.0f;                // (0, 1]; 1: off
  float min_p = 0.0f;                // [0, 1); 0: off
  float repetition_penalty = 1.0f;   // (0, 10]; 1: off
  float presence_penalty = 0.0f;     // [-2, 2]
  float frequency_penalty = 0.0f;    // [-2, 2]
  std::int32_t penalty_last_n = 64;  // tokens of history the penalties look at; [0, 4096]
  std::uint64_t seed = 0;
};

// InvalidArgument naming the field and its allowed range.
absl::Status validate_sampling(const SamplingParams& p);

// A small, fast, well-distributed generator (xoshiro256**) with a defined
// seeding (splitmix64), so draws never depend on the standard library.
class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  std::uint64_t next();
  float uniform();  // [0, 1), 24 random bits

 private:
  std::uint64_t s_[4];
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, std::size_t vocab_size);

  // Picks the next token. `logits` has vocab_size entries and is not
  // modified; `history` is every token so far (prompt and generated).
  // Working memory comes from `scratch` (no heap allocation on success);
  // ResourceExhausted, naming the array, when scratch cannot provide it.
  absl::StatusOr<std::int32_t> sample(const float* logits, std::span<const std::int32_t> history,
                                      MemoryAllocator& scratch);

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::size_t vocab_;
  Rng rng_;
};

}  // namespace hearth::engine
