// Token log-probabilities through a real hearth-server serving the trained
// stories260K model (../shared): Generate's pieces and Complete's response
// carry the same figures, name their tokens as the tokenizer does, and equal
// a float softmax of an in-process forward over the same tokens (float KV
// cache; tolerance 1e-4 in log space: the server's batched forward and the
// in-process one run the same kernels on the same rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/module.h"
#include "engine/tokenizer.h"
#include "engine/unicode.h"
#include "memory/thread_temp_allocator.h"
#include "tests/server/stories_model.h"

namespace hearth::testing {
namespace {

constexpr char kModel[] = "stories";
constexpr char kPrompt[] = "Once upon a time, there was a little girl named Lily.";

v1::GenerateRequest with_logprobs(std::uint32_t top, std::uint32_t max_tokens = 16) {
  v1::GenerateRequest r = make_request(kModel, kPrompt, max_tokens);
  r.set_echo_prompt_ids(true);
  r.set_ignore_eos(true);
  r.set_logprobs(true);
  r.set_top_logprobs(top);
  return r;
}

class LogprobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HEARTH_REQUIRE_SHARED();
    HEARTH_START_SERVER(server_,
                        server_args({"--model", std::string(kModel) + "=" + stories_path().string(),
                                     "--instances", "1", "--kv-cache", "float"}));
    stub_ = make_stub(plain_channel(server_.grpc_address()));
    auto file = engine::GgufFile::open(stories_path().string());
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = std::move(*file);
    auto tokenizer = engine::Tokenizer::from_gguf(*file_);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
  }

  // The token as the tokenizer names it.
  void expect_named(const v1::TokenLogprob& t) {
    const std::string raw = tokenizer_->token_text(t.token_id());
    EXPECT_EQ(t.raw(), raw) << "token " << t.token_id();
    EXPECT_EQ(t.text(), engine::sanitize_utf8(raw)) << "token " << t.token_id();
    EXPECT_LE(t.logprob(), 0.0f);
  }

  ServerProcess server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
  std::shared_ptr<const engine::GgufFile> file_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
};

void expect_same(const v1::TokenLogprob& a, const v1::TokenLogprob& b) {
  EXPECT_EQ(a.token_id(), b.token_id());
  EXPECT_EQ(a.logprob(), b.logprob());
  EXPECT_EQ(a.raw(), b.raw());
}

TEST_F(LogprobsTest, GenerateAndCompleteCarryTheSameFiguresForEveryToken) {
  const StreamResult stream = generate(*stub_, with_logprobs(5));
  ASSERT_TRUE(stream.status.ok()) << status_text(stream.status);
  std::vector<v1::TokenLogprobs> streamed;
  for (const v1::Piece& p : stream.pieces) {
    if (p.token_id() < 0) {
      EXPECT_FALSE(p.has_logprobs()) << "the flushed piece has no token";
      continue;
    }
    ASSERT_TRUE(p.has_logprobs()) << "piece of token " << p.token_id();
    const v1::TokenLogprobs& lp = p.logprobs();
    EXPECT_EQ(lp.chosen().token_id(), p.token_id());
    expect_named(lp.chosen());
    ASSERT_EQ(lp.top_size(), 5);
    EXPECT_EQ(lp.top(0).token_id(), p.token_id()) << "greedy takes the most likely token";
    EXPECT_EQ(lp.top(0).logprob(), lp.chosen().logprob());
    for (int j = 0; j < lp.top_size(); ++j) {
      expect_named(lp.top(j));
      if (j > 0) {
        EXPECT_GE(lp.top(j - 1).logprob(), lp.top(j).logprob()) << "rank " << j;
      }
    }
    streamed.push_back(lp);
  }
  ASSERT_EQ(streamed.size(), 16u);

  v1::CompleteResponse unary;
  const grpc::Status st = complete(*stub_, with_logprobs(5), &unary);
  ASSERT_TRUE(st.ok()) << status_text(st);
  ASSERT_EQ(unary.token_ids_size(), 16);
  ASSERT_EQ(unary.logprobs_size(), 16);
  for (int i = 0; i < 16; ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    EXPECT_EQ(unary.token_ids(i), stream.ids()[i]);
    expect_same(unary.logprobs(i).chosen(), streamed[i].chosen());
    ASSERT_EQ(unary.logprobs(i).top_size(), streamed[i].top_size());
    for (int j = 0; j < streamed[i].top_size(); ++j)
      expect_same(unary.logprobs(i).top(j), streamed[i].top(j));
  }
}

TEST_F(LogprobsTest, FiguresEqualAFloatSoftmaxOfAnInProcessForward) {
  const StreamResult stream = generate(*stub_, with_logprobs(3, 12));
  ASSERT_TRUE(stream.status.ok()) << status_text(stream.status);
  ASSERT_EQ(stream.dones.size(), 1u);
  const auto& echoed = stream.dones.front().usage().prompt_ids();
  std::vector<std::int32_t> tokens(echoed.begin(), echoed.end());

  engine::ModuleOptions o;
  o.kv_cache = engine::KvCacheType::kFloat;
  o.context_length = 256;
  auto module = engine::Module::load(stories_path().string(), o);
  ASSERT_TRUE(module.ok()) << module.status();
  std::size_t pos = 0;
  std::size_t i = 0;
  for (const v1::Piece& p : stream.pieces) {
    if (p.token_id() < 0) continue;
    TempAllocatorLease lease;
    const std::span<const std::int32_t> run(tokens.data() + pos, tokens.size() - pos);
    auto logits = (*module)->forward(run, pos);
    ASSERT_TRUE(logits.ok()) << logits.status();
    pos = tokens.size();
    const float max = *std::max_element(logits->begin(), logits->end());
    double sum = 0;
    for (float l : *logits) sum += std::exp(static_cast<double>(l - max));
    auto logprob_of = [&](std::int32_t id) {
      return static_cast<double>((*logits)[id] - max) - std::log(sum);
    };
    SCOPED_TRACE("token " + std::to_string(i++));
    EXPECT_NEAR(p.logprobs().chosen().logprob(), logprob_of(p.token_id()), 1e-4);
    for (const v1::TokenLogprob& t : p.logprobs().top())
      EXPECT_NEAR(t.logprob(), logprob_of(t.token_id()), 1e-4);
    tokens.push_back(p.token_id());
  }
  EXPECT_EQ(i, 12u);
}

TEST_F(LogprobsTest, OffByDefault) {
  v1::GenerateRequest r = with_logprobs(0, 4);
  r.set_logprobs(false);
  const StreamResult stream = generate(*stub_, r);
  ASSERT_TRUE(stream.status.ok()) << status_text(stream.status);
  for (const v1::Piece& p : stream.pieces) EXPECT_FALSE(p.has_logprobs());
  v1::CompleteResponse unary;
  ASSERT_TRUE(complete(*stub_, r, &unary).ok());
  EXPECT_EQ(unary.logprobs_size(), 0);
  // Asked for without alternatives: the chosen token's figure alone.
  const StreamResult chosen_only = generate(*stub_, with_logprobs(0, 4));
  ASSERT_TRUE(chosen_only.status.ok()) << status_text(chosen_only.status);
  for (const v1::Piece& p : chosen_only.pieces) {
    if (p.token_id() < 0) continue;
    ASSERT_TRUE(p.has_logprobs());
    EXPECT_EQ(p.logprobs().top_size(), 0);
  }
}

TEST_F(LogprobsTest, BadValuesAreInvalidArgumentNamingTheField) {
  const StreamResult too_many = generate(*stub_, with_logprobs(21));
  EXPECT_EQ(too_many.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(too_many.status.error_message().find("top_logprobs: 21"), std::string::npos)
      << status_text(too_many.status);
  v1::GenerateRequest without = with_logprobs(3);
  without.set_logprobs(false);
  v1::CompleteResponse unary;
  const grpc::Status st = complete(*stub_, without, &unary);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("top_logprobs"), std::string::npos) << status_text(st);
}

}  // namespace
}  // namespace hearth::testing
