#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "engine/stop_matcher.h"
#include "memory/arena_allocator.h"
#include "memory/caching_allocator.h"
#include "tests/support/heap_counter.h"

namespace hearth::engine {
namespace {

std::int32_t draw(Sampler& s, const std::vector<float>& logits,
                  const std::vector<std::int32_t>& history = {}) {
  CachingAllocator scratch;
  absl::StatusOr<std::int32_t> token = s.sample(logits.data(), history, scratch);
  EXPECT_TRUE(token.ok()) << token.status();
  return token.value_or(-1);
}

// Scratch that cannot hold the sampler's arrays is an error naming the array,
// never a token.
TEST(Sampler, ExhaustedScratchIsAnErrorNamingTheArray) {
  const std::vector<float> logits(1000, 0.5f);
  alignas(64) std::uint8_t small[256];
  for (const float temperature : {0.0f, 0.8f}) {
    SamplingParams p;
    p.temperature = temperature;
    Sampler s(p, logits.size());
    ArenaAllocator arena(small, sizeof small);
    const absl::StatusOr<std::int32_t> token = s.sample(logits.data(), {}, arena);
    ASSERT_FALSE(token.ok());
    EXPECT_EQ(token.status().code(), absl::StatusCode::kResourceExhausted) << token.status();
    EXPECT_NE(token.status().message().find("candidates"), std::string::npos) << token.status();
  }
  // Room for the candidates but not for the sampling weights.
  SamplingParams p;
  p.temperature = 0.8f;
  Sampler s(p, 64);
  const std::vector<float> few(64, 0.5f);
  alignas(64) std::uint8_t room[64 * 8 + 64];
  ArenaAllocator arena(room, sizeof room);
  const absl::StatusOr<std::int32_t> token = s.sample(few.data(), {}, arena);
  ASSERT_FALSE(token.ok());
  EXPECT_NE(token.status().message().find("weights"), std::string::npos) << token.status();
}

TEST(Sampler, GreedyTakesTheHighestLogitAndTheLowestIdOnTies) {
  Sampler s({}, 5);
  EXPECT_EQ(draw(s, {0.1f, 3.0f, -1.0f, 3.0f, 2.9f}), 1);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler s(p, 3);
  // Token 0 (logit 3) was seen: 3/2 = 1.5 < 2 -> token 1 wins.
  EXPECT_EQ(draw(s, {3.0f, 2.0f, -5.0f}, {0}), 1);
  // A negative seen logit becomes more negative.
  EXPECT_EQ(draw(s, {-1.0f, -1.5f, -5.0f}, {0}), 1);
}

TEST(Sampler, FrequencyAndPresencePenaltiesScaleWithCounts) {
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  Sampler s(p, 3);
  // Token 0 seen 3 times: 3 - 1.5 = 1.5 < 2.
  EXPECT_EQ(draw(s, {3.0f, 2.0f, 0.0f}, {0, 0, 0}), 1);
  EXPECT_EQ(draw(s, {3.0f, 2.0f, 0.0f}, {0}), 0);  // 3 - 0.5 = 2.5 > 2
  p = {};
  p.presence_penalty = 1.5f;
  Sampler s2(p, 3);
  EXPECT_EQ(draw(s2, {3.0f, 2.0f, 0.0f}, {0}), 1);
  p.penalty_last_n = 1;  // only the last token counts
  Sampler s3(p, 3);
  EXPECT_EQ(draw(s3, {3.0f, 2.0f, 0.0f}, {0, 2}), 0);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(static_cast<float>(i)) * 2.0f;
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  auto run = [&](std::uint64_t seed) {
    p.seed = seed;
    Sampler s(p, logits.size());
    std::vector<std::int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(draw(s, logits));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, TemperatureDrawFollowsTheSoftmax) {
  // Three tokens with probabilities 0.5, 0.3, 0.2 at temperature 1: 20,000
  // draws; a binomial's standard deviation is at most sqrt(0.25/20000) = 0.0035,
  // so 0.015 is more than four standard deviations.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  Sampler s(p, 3);
  CachingAllocator scratch;
  std::map<int, int> counts;
  for (int i = 0; i < 20000; ++i) {
    ++counts[s.sample(logits.data(), {}, scratch).value()];
    scratch.reset();
  }
  EXPECT_NEAR(counts[0] / 20000.0, 0.5, 0.015);
  EXPECT_NEAR(counts[1] / 20000.0, 0.3, 0.015);
  EXPECT_NEAR(counts[2] / 20000.0, 0.2, 0.015);
}

TEST(Sampler, TopKTopPAndMinPTruncate) {
  const std::vector<float> logits = {std::log(0.4f), std::log(0.3f), std::log(0.2f),
                                     std::log(0.1f)};
  auto support = [&](SamplingParams p) {
    p.temperature = 1.0f;
    Sampler s(p, 4);
    CachingAllocator scratch;
    std::set<int> seen;
    for (int i = 0; i < 2000; ++i) {
      seen.insert(s.sample(logits.data(), {}, scratch).value());
      scratch.reset();
    }
    return seen;
  };
  SamplingParams p;
  p.top_k = 2;
  EXPECT_EQ(support(p), (std::set<int>{0, 1}));
  p = {};
  p.top_p = 0.65f;  // 0.4 + 0.3 reaches 0.65
  EXPECT_EQ(support(p), (std::set<int>{0, 1}));
  p = {};
  p.min_p = 0.4f;  // keep p >= 0.16: tokens 0, 1, 2
  EXPECT_EQ(support(p), (std::set<int>{0, 1, 2}));
  p = {};
  EXPECT_EQ(support(p), (std::set<int>{0, 1, 2, 3}));
}

TEST(Sampler, ValidationNamesTheField) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(validate_sampling(p).message().find("temperature"), std::string::npos);
  p = {};
  p.top_p = std::nanf("");
  EXPECT_NE(validate_sampling(p).message().find("top_p"), std::string::npos);
  p = {};
  p.top_k = -3;
  EXPECT_NE(validate_sampling(p).message().find("top_k"), std::string::npos);
  p = {};
  p.min_p = 1.0f;
  EXPECT_NE(validate_sampling(p).message().find("min_p"), std::string::npos);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_NE(validate_sampling(p).message().find("repetition_penalty"), std::string::npos);
  // A float value is shown as the float it is, not the double nearest it.
  p = {};
  p.top_p = -0.1f;
  EXPECT_EQ(validate_sampling(p).message(), "top_p = -0.1 is out of range: allowed (0, 1]");
  EXPECT_TRUE(validate_sampling(SamplingParams{}).ok());
}

TEST(Sampler, MakesNoHeapAllocationWithAWarmScratchAllocator) {
  std::vector<float> logits(32000);
  for (std::size_t i = 0; i < logits.size(); ++i)
    logits[i] = std::cos(static_cast<float>(i) * 0.37f);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.repetition_penalty = 1.1f;
  Sampler s(p, logits.size());
  CachingAllocator scratch;
  const std::vector<std::int32_t> history = {1, 2, 3, 2, 1};
  ASSERT_TRUE(s.sample(logits.data(), history, scratch).ok());
  scratch.reset();
  hearth::testing::HeapCounter counter;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(s.sample(logits.data(), history, scratch).ok());
    scratch.reset();
  }
  EXPECT_EQ(counter.allocations(), 0u);
}

TEST(StopMatcher, HoldsBackPossiblePrefixesAndCutsAtTheMatch) {
  StopMatcher m({"\n\n", "END"});
  std::string out;
  out += m.push("Hello E");
  EXPECT_EQ(out, "Hello ");  // "E" might start "END"
  out += m.push("N");
  EXPECT_EQ(out, "Hello ");
  out += m.push("Xtra\n");
  EXPECT_EQ(out, "Hello ENXtra");
  out += m.push("\nignored");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "Hello ENXtra");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, FlushReturnsHeldTextWhenNoStopCame) {
  StopMatcher m({"stop"});
  EXPECT_EQ(m.push("a st"), "a ");
  EXPECT_EQ(m.flush(), "st");
  StopMatcher none({});
  EXPECT_EQ(none.push("anything"), "anything");
}

TEST(StopMatcher, MatchAcrossManySmallPieces) {
  StopMatcher m({"<|end|>"});
  std::string out;
  for (char c : std::string("abc<|end|>def")) out += m.push(std::string(1, c));
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "abc");
}

}  // namespace
}  // namespace hearth::engine
