// Token log-probabilities (engine/logprobs.h): a distribution over the whole
// vocabulary that sums to one and matches a plain float softmax, the top-n
// order with ties, and what a Sequence reports for each token it samples.
#include "engine/logprobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/module.h"
#include "engine/sequence.h"
#include "engine/tokenizer.h"
#include "memory/thread_temp_allocator.h"
#include "tests/support/shared_data.h"

namespace hearth::engine {
namespace {

// A plain softmax in float, as a reader would write it: the reference the
// double computation must agree with.
std::vector<float> float_softmax(const float* logits, std::size_t n) {
  const float max = *std::max_element(logits, logits + n);
  std::vector<float> p(n);
  float sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += p[i] = std::exp(logits[i] - max);
  for (float& v : p) v /= sum;
  return p;
}

// Checks the full-vocabulary distribution of one step's logits.
void expect_whole_distribution(const float* logits, std::size_t vocab) {
  std::vector<TokenLogprob> all(vocab);
  most_likely(logits, vocab, log_sum_exp(logits, vocab), all);
  const std::vector<float> ref = float_softmax(logits, vocab);
  double total = 0;
  std::set<std::int32_t> ids;
  for (std::size_t j = 0; j < vocab; ++j) {
    const TokenLogprob& t = all[j];
    ids.insert(t.id);
    total += std::exp(static_cast<double>(t.logprob));
    EXPECT_LE(t.logprob, 0.0f);
    if (j > 0) {
      // Ranked by logit, equal logits in id order; the float log-probabilities
      // never increase (two close logits may round to one value).
      const TokenLogprob& prev = all[j - 1];
      ASSERT_TRUE(logits[prev.id] > logits[t.id] ||
                  (logits[prev.id] == logits[t.id] && prev.id < t.id))
          << "rank " << j << " out of order";
      ASSERT_GE(prev.logprob, t.logprob) << "rank " << j;
    }
    // Tolerances: float softmax keeps about 1e-7 relative; log space 1e-4
    // absolute for every probability float can still resolve.
    EXPECT_NEAR(std::exp(static_cast<double>(t.logprob)), ref[t.id], 1e-6) << "token " << t.id;
    if (ref[t.id] > 1e-30f) {
      EXPECT_NEAR(t.logprob, std::log(ref[t.id]), 1e-4) << "token " << t.id;
    }
  }
  EXPECT_EQ(ids.size(), vocab) << "every token once";
  EXPECT_NEAR(total, 1.0, 1e-6);
}

TEST(Logprobs, TopNIsMostLikelyFirstWithTiesInIdOrder) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f, -5.0f};
  TokenLogprobs out;
  token_logprobs(logits.data(), logits.size(), 5, 4, out);
  ASSERT_EQ(out.n_top, 4u);
  const std::vector<std::int32_t> want = {1, 2, 4, 3};
  for (std::size_t j = 0; j < 4; ++j) EXPECT_EQ(out.top[j].id, want[j]) << "rank " << j;
  EXPECT_EQ(out.top[0].logprob, out.top[1].logprob);
  EXPECT_EQ(out.top[1].logprob, out.top[2].logprob);
  EXPECT_GT(out.top[2].logprob, out.top[3].logprob);
  // The chosen token need not be among the top ones.
  EXPECT_EQ(out.chosen.id, 5);
  const double lse = std::log(std::exp(1.0) + 3 * std::exp(3.0) + std::exp(2.0) + std::exp(-5.0));
  EXPECT_NEAR(out.chosen.logprob, -5.0 - lse, 1e-6);
  EXPECT_NEAR(out.top[0].logprob, 3.0 - lse, 1e-6);
  // No alternatives, and never more than the vocabulary.
  token_logprobs(logits.data(), logits.size(), 0, 0, out);
  EXPECT_EQ(out.n_top, 0u);
  EXPECT_TRUE(out.alternatives().empty());
  token_logprobs(logits.data(), 3, 0, kMaxTopLogprobs, out);
  EXPECT_EQ(out.n_top, 3u);
}

TEST(Logprobs, LargeLogitsDoNotOverflow) {
  const std::vector<float> logits = {1000.0f, 1000.0f, -1000.0f};
  TokenLogprobs out;
  token_logprobs(logits.data(), logits.size(), 0, 3, out);
  EXPECT_NEAR(out.chosen.logprob, -std::log(2.0), 1e-6);
  EXPECT_EQ(out.top[2].id, 2);
  EXPECT_TRUE(std::isfinite(out.top[2].logprob));
}

TEST(Logprobs, ValidationNamesTheField) {
  EXPECT_TRUE(validate_logprobs(false, 0).ok());
  EXPECT_TRUE(validate_logprobs(true, 0).ok());
  EXPECT_TRUE(validate_logprobs(true, kMaxTopLogprobs).ok());
  const absl::Status too_many = validate_logprobs(true, kMaxTopLogprobs + 1);
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("top_logprobs: 21"), std::string::npos) << too_many;
  const absl::Status without = validate_logprobs(false, 3);
  EXPECT_EQ(without.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(without.message().find("top_logprobs"), std::string::npos) << without;
}

// stories260K: a trained model, so the distributions are peaked as real ones are.
struct Stories {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Module> module;
};

std::unique_ptr<Stories> load_stories() {
  const std::string path = (testing::shared_dir() / "models/stories260K.gguf").string();
  auto s = std::make_unique<Stories>();
  auto f = GgufFile::open(path);
  if (!f.ok()) {
    ADD_FAILURE() << f.status();
    return nullptr;
  }
  s->file = std::move(*f);
  auto t = Tokenizer::from_gguf(*s->file);
  if (!t.ok()) {
    ADD_FAILURE() << t.status();
    return nullptr;
  }
  s->tokenizer = std::move(*t);
  ModuleOptions o;
  o.kv_cache = KvCacheType::kFloat;
  o.context_length = 256;
  auto m = Module::load(path, o);
  if (!m.ok()) {
    ADD_FAILURE() << m.status();
    return nullptr;
  }
  s->module = std::move(*m);
  return s;
}

GenerationRequest request(const Tokenizer& tokenizer, std::size_t max_tokens) {
  GenerationRequest r;
  r.prompt = "Once upon a time";
  auto ids = tokenizer.encode(r.prompt, r.tokenize);
  EXPECT_TRUE(ids.ok()) << ids.status();
  if (ids.ok()) r.prompt_ids = *ids;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

// What a sequence reported for each token it emitted, beside the logits the
// token was sampled from.
struct Step {
  std::int32_t token;
  TokenLogprobs logprobs;
  std::vector<float> logits;
};

// Runs `r` to the end on s.module, one token per forward after the prompt.
std::vector<Step> run(Stories& s, const GenerationRequest& r) {
  std::vector<Step> steps;
  auto started =
      Sequence::start(*s.tokenizer, r, s.module->context_length(), s.tokenizer->vocab_size());
  EXPECT_TRUE(started.ok()) << started.status();
  if (!started.ok()) return steps;
  Sequence& seq = **started;
  std::span<const float> logits;
  const TokenCallback emit = [&](std::string_view, std::int32_t token) {
    if (token < 0) return;
    const TokenLogprobs* lp = seq.logprobs();
    EXPECT_EQ(lp != nullptr, r.logprobs);
    steps.push_back({token, lp != nullptr ? *lp : TokenLogprobs{},
                     std::vector<float>(logits.begin(), logits.end())});
  };
  TempAllocatorLease lease;
  while (!seq.finished()) {
    const auto tokens = seq.next_tokens(s.module->max_chunk());
    const bool want = seq.wants_logits(tokens.size());
    auto out = s.module->forward(tokens, seq.position());
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) break;
    logits = *out;
    const absl::Status st =
        seq.advance(tokens.size(), want ? logits.data() : nullptr, lease.allocator(), emit);
    EXPECT_TRUE(st.ok()) << st;
    lease.allocator().reset();
  }
  return steps;
}

TEST(LogprobsStories, EveryStepIsAWholeDistributionMatchingAFloatSoftmax) {
  HEARTH_REQUIRE_SHARED();
  std::unique_ptr<Stories> s = load_stories();
  ASSERT_NE(s, nullptr);
  GenerationRequest r = request(*s->tokenizer, 12);
  r.logprobs = true;
  const std::vector<Step> steps = run(*s, r);
  ASSERT_EQ(steps.size(), 12u);
  for (const Step& step : steps) {
    SCOPED_TRACE("token " + std::to_string(step.token));
    expect_whole_distribution(step.logits.data(), step.logits.size());
  }
}

TEST(LogprobsStories, GreedyTokensAreTheMostLikelyAndReportTheirOwnLogprob) {
  HEARTH_REQUIRE_SHARED();
  std::unique_ptr<Stories> s = load_stories();
  ASSERT_NE(s, nullptr);
  GenerationRequest r = request(*s->tokenizer, 16);
  r.logprobs = true;
  r.top_logprobs = 5;
  const std::vector<Step> steps = run(*s, r);
  ASSERT_EQ(steps.size(), 16u);
  for (const Step& step : steps) {
    ASSERT_EQ(step.logprobs.n_top, 5u);
    EXPECT_EQ(step.logprobs.chosen.id, step.token);
    EXPECT_EQ(step.logprobs.top[0].id, step.token) << "greedy takes the most likely token";
    EXPECT_EQ(step.logprobs.top[0].logprob, step.logprobs.chosen.logprob);
  }
}

// Sampling transforms change which token is drawn, not the log-probabilities
// reported: they are the model's own (a float softmax of the raw logits).
TEST(LogprobsStories, SampledTokensReportTheModelsDistributionBeforeTransforms) {
  HEARTH_REQUIRE_SHARED();
  std::unique_ptr<Stories> s = load_stories();
  ASSERT_NE(s, nullptr);
  GenerationRequest r = request(*s->tokenizer, 24);
  r.logprobs = true;
  r.top_logprobs = 3;
  r.sampling.temperature = 2.0f;
  r.sampling.top_k = 8;
  r.sampling.repetition_penalty = 1.5f;
  r.sampling.seed = 11;
  const std::vector<Step> steps = run(*s, r);
  ASSERT_EQ(steps.size(), 24u);
  std::size_t not_top = 0;
  for (const Step& step : steps) {
    EXPECT_EQ(step.logprobs.chosen.id, step.token);
    const std::vector<float> ref = float_softmax(step.logits.data(), step.logits.size());
    EXPECT_NEAR(step.logprobs.chosen.logprob, std::log(ref[step.token]), 1e-4);
    if (step.logprobs.top[0].id != step.token) ++not_top;
  }
  EXPECT_GT(not_top, 0u) << "at temperature 2 some draws are not the most likely token";
}

TEST(LogprobsStories, OffByDefault) {
  HEARTH_REQUIRE_SHARED();
  std::unique_ptr<Stories> s = load_stories();
  ASSERT_NE(s, nullptr);
  const std::vector<Step> steps = run(*s, request(*s->tokenizer, 4));
  EXPECT_EQ(steps.size(), 4u);
}

TEST(LogprobsStories, SequenceRefusesBadValuesNamingTheField) {
  HEARTH_REQUIRE_SHARED();
  std::unique_ptr<Stories> s = load_stories();
  ASSERT_NE(s, nullptr);
  GenerationRequest r = request(*s->tokenizer, 4);
  r.logprobs = true;
  r.top_logprobs = 21;
  auto started = Sequence::start(*s->tokenizer, r, 256, s->tokenizer->vocab_size());
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.status().message().find("top_logprobs"), std::string::npos);
}

}  // namespace
}  // namespace hearth::engine
