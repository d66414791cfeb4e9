// Pure pieces of the hearth client (header-only, no server needed): latency
// percentiles, the bench's deterministic fault mix, long prompts.
#include <gtest/gtest.h>

#include <cstddef>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tools/client/bench.h"
#include "tools/client/percentiles.h"

namespace hearth::client {
namespace {

std::vector<double> one_to(int n) {
  std::vector<double> v;
  for (int i = 1; i <= n; ++i) v.push_back(i);
  return v;
}

TEST(Percentiles, NearestRankPicksAMeasuredValue) {
  const auto ten = one_to(10);
  EXPECT_EQ(nearest_rank(ten, 50), 5);   // ceil(5.0) = rank 5
  EXPECT_EQ(nearest_rank(ten, 10), 1);   // ceil(1.0) = rank 1
  EXPECT_EQ(nearest_rank(ten, 11), 2);   // ceil(1.1) = rank 2
  EXPECT_EQ(nearest_rank(ten, 95), 10);  // ceil(9.5) = rank 10
  EXPECT_EQ(nearest_rank(ten, 0), 1);
  EXPECT_EQ(nearest_rank(ten, 100), 10);
  // Products that are whole numbers stay at that rank despite rounding.
  EXPECT_EQ(nearest_rank(one_to(20), 95), 19);
  EXPECT_EQ(nearest_rank(one_to(100), 99), 99);
  EXPECT_EQ(nearest_rank(one_to(100), 50), 50);
}

TEST(Percentiles, EmptyAndSingleSample) {
  EXPECT_EQ(nearest_rank({}, 50), 0);
  const Percentiles none = percentiles({});
  EXPECT_EQ(none.count, 0u);
  EXPECT_EQ(none.p99, 0);
  const Percentiles one = percentiles({0.25});
  EXPECT_EQ(one.count, 1u);
  EXPECT_EQ(one.p50, 0.25);
  EXPECT_EQ(one.p95, 0.25);
  EXPECT_EQ(one.p99, 0.25);
}

TEST(Percentiles, SortsItsInput) {
  const Percentiles p = percentiles({9, 1, 8, 2, 7, 3, 6, 4, 5, 10});
  EXPECT_EQ(p.count, 10u);
  EXPECT_EQ(p.p50, 5);
  EXPECT_EQ(p.p95, 10);
  EXPECT_EQ(p.p99, 10);
}

TEST(FaultMix, SameSeedSamePlan) {
  BenchOptions o;
  o.cancel_fraction = 0.2;
  o.deadline_fraction = 0.3;
  o.long_prompt_fraction = 0.1;
  o.mix_seed = 42;
  BenchOptions copy = o;
  for (std::size_t i = 0; i < 1000; ++i) EXPECT_EQ(plan_request(o, i), plan_request(copy, i));
  // A different seed gives a different mix.
  copy.mix_seed = 43;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < 1000; ++i) differ += !(plan_request(o, i) == plan_request(copy, i));
  EXPECT_GT(differ, 100u);
}

TEST(FaultMix, FixedValuesDoNotDrift) {
  // The mix is part of a run's reproducibility (integer hashing, no library
  // RNG: the same on every platform): pin a few draws.
  BenchOptions o;
  o.cancel_fraction = o.deadline_fraction = o.long_prompt_fraction = 0.5;
  o.mix_seed = 7;
  std::ostringstream s;
  for (std::size_t i = 0; i < 8; ++i) {
    const RequestPlan p = plan_request(o, i);
    s << p.cancel_after_first << p.short_deadline << p.long_prompt << ' ';
  }
  EXPECT_EQ(s.str(), "100 111 001 111 011 101 110 111 ");
}

TEST(FaultMix, FractionsAreRespected) {
  BenchOptions o;
  o.mix_seed = 1;
  for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(plan_request(o, i), RequestPlan{});
  o.cancel_fraction = o.deadline_fraction = o.long_prompt_fraction = 1.0;
  for (std::size_t i = 0; i < 100; ++i) {
    const RequestPlan p = plan_request(o, i);
    EXPECT_TRUE(p.cancel_after_first && p.short_deadline && p.long_prompt);
  }
  o.cancel_fraction = 0.25;
  o.deadline_fraction = 0.5;
  o.long_prompt_fraction = 0.1;
  std::size_t cancel = 0, deadline = 0, long_prompt = 0, both = 0;
  const std::size_t n = 20000;
  for (std::size_t i = 0; i < n; ++i) {
    const RequestPlan p = plan_request(o, i);
    cancel += p.cancel_after_first;
    deadline += p.short_deadline;
    long_prompt += p.long_prompt;
    both += p.cancel_after_first && p.short_deadline;
  }
  // Binomial: a few hundred either way is far beyond 5 standard deviations.
  EXPECT_NEAR(static_cast<double>(cancel), 0.25 * n, 400);
  EXPECT_NEAR(static_cast<double>(deadline), 0.5 * n, 400);
  EXPECT_NEAR(static_cast<double>(long_prompt), 0.1 * n, 300);
  // The decisions are independent of each other.
  EXPECT_NEAR(static_cast<double>(both), 0.125 * n, 300);
}

TEST(FaultMix, ExpectedErrorsFollowThePlan) {
  constexpr int kOk = 0, kCancelled = 1, kDeadline = 4, kUnavailable = 14;
  RequestPlan plain, cancel, deadline;
  cancel.cancel_after_first = true;
  deadline.short_deadline = true;
  EXPECT_FALSE(is_expected_error(plain, kCancelled));
  EXPECT_FALSE(is_expected_error(plain, kDeadline));
  EXPECT_TRUE(is_expected_error(cancel, kCancelled));
  EXPECT_FALSE(is_expected_error(cancel, kDeadline));
  EXPECT_TRUE(is_expected_error(deadline, kDeadline));
  EXPECT_FALSE(is_expected_error(deadline, kCancelled));
  EXPECT_FALSE(is_expected_error(cancel, kUnavailable));
  EXPECT_FALSE(is_expected_error(cancel, kOk));
}

TEST(LongPrompt, HasTheRequestedNumberOfWords) {
  EXPECT_EQ(prompt_of_tokens(0), "");
  EXPECT_EQ(prompt_of_tokens(3), "the quick brown");
  const std::string p = prompt_of_tokens(600);
  std::istringstream in(p);
  std::size_t words = 0;
  for (std::string w; in >> w;) ++words;
  EXPECT_EQ(words, 600u);
}

// Prefix-reuse load: each request's own words are fixed by (seed, index)
// and differ between requests from the first word on, so requests share
// the prefix and nothing after it.
TEST(RequestWords, ReproducibleAndDistinctPerRequest) {
  EXPECT_EQ(request_words(1, 7, 20), request_words(1, 7, 20));
  std::istringstream in(request_words(1, 7, 20));
  std::size_t words = 0;
  for (std::string w; in >> w;) ++words;
  EXPECT_EQ(words, 20u);
  std::set<std::string> first_words;
  for (std::size_t i = 0; i < 16; ++i) {
    EXPECT_NE(request_words(1, i, 20), request_words(1, i + 1, 20)) << i;
    first_words.insert(request_words(1, i, 1));
  }
  EXPECT_GT(first_words.size(), 4u) << "requests should rarely share their first word";
  EXPECT_NE(request_words(1, 3, 20), request_words(2, 3, 20));
  EXPECT_EQ(request_words(1, 3, 0), "");
}

RequestOutcome outcome(bool long_prompt, double start_s, std::vector<double> token_times_s) {
  RequestOutcome r;
  r.plan.long_prompt = long_prompt;
  r.start_s = start_s;
  r.total_s = token_times_s.empty() ? 1.0 : token_times_s.back();
  r.token_times_s = std::move(token_times_s);
  return r;
}

TEST(LongPromptSplit, SeparatesTtftAndFindsTheGapsDuringALongPrefill) {
  // A long prompt starts at 1.0 s and gets its first token at 1.5 s (prefill
  // [1.0, 1.5]); the other stream, started at 0.5 s, has its tokens at 0.8,
  // 0.9, 0.95, 1.6 and 1.7 s: one 0.65 s gap spans the prefill.
  std::vector<RequestOutcome> runs = {
      outcome(false, 0.5, {0.3, 0.4, 0.45, 1.1, 1.2}),
      outcome(true, 1.0, {0.5, 0.6}),
  };
  const LongPromptSplit s = split_by_long_prompt(runs);
  EXPECT_EQ(s.long_prompt_requests, 1u);
  EXPECT_EQ(s.ttft_long, std::vector<double>({0.5}));
  EXPECT_EQ(s.ttft_other, std::vector<double>({0.3}));
  ASSERT_EQ(s.itl_other.size(), 4u);  // the long request's own gap is not counted
  ASSERT_EQ(s.itl_during_long_prefill.size(), 1u);
  EXPECT_NEAR(s.itl_during_long_prefill[0], 0.65, 1e-12);
}

TEST(LongPromptSplit, OverlappingPrefillsMergeAndAFailedOneRunsToItsEnd) {
  // Two long prompts: [0.5, 0.8] and [0.7, 1.0]; a third got no token and
  // ended at 2.5 + 0.5 = 3.0 ([2.5, 3.0]). Gaps of the other stream (start 0):
  // [0, 0.6] overlaps, [0.6, 1.2] overlaps, [1.2, 2.5] touches the third only
  // at its end point (no overlap), [2.5, 2.9] overlaps.
  RequestOutcome failed = outcome(true, 2.5, {});
  failed.total_s = 0.5;
  failed.code = 4;
  std::vector<RequestOutcome> runs = {
      outcome(true, 0.5, {0.3}),
      outcome(true, 0.7, {0.3}),
      failed,
      outcome(false, 0.0, {0.0, 0.6, 1.2, 2.5, 2.9}),
  };
  const LongPromptSplit s = split_by_long_prompt(runs);
  EXPECT_EQ(s.long_prompt_requests, 3u);
  EXPECT_EQ(s.ttft_long.size(), 2u);
  EXPECT_EQ(s.itl_other.size(), 4u);
  EXPECT_EQ(s.itl_during_long_prefill.size(), 3u);
}

TEST(LongPromptSplit, NothingWithoutLongPrompts) {
  const LongPromptSplit s = split_by_long_prompt({outcome(false, 0.0, {0.1, 0.2})});
  EXPECT_EQ(s.long_prompt_requests, 0u);
  EXPECT_TRUE(s.ttft_long.empty());
  EXPECT_TRUE(s.itl_during_long_prefill.empty());
  EXPECT_EQ(s.itl_other.size(), 1u);
}

}  // namespace
}  // namespace hearth::client
