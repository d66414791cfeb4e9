// Prefix reuse, end to end: a real hearth-server serving the trained
// stories260K model (../shared). A request whose prompt starts like tokens an
// instance's KV cache holds prefills only the rest (Usage.cached_tokens), from
// the instance it runs on or copied from another one, and generates exactly
// what it generates with reuse off (disable_prefix_reuse).
//
// Tolerance: none, with the float and with the int8 KV cache. A cached row
// (h, p) is the bytes a forward of the same tokens wrote there: K and V of a
// position depend only on the tokens up to it, every kernel on the path is
// row-independent and chunk-independent (tests/server/batching_test.cc), and
// int8 rows are quantized once, when appended, then copied as stored. So
// skipping or copying them changes no bit of what attention reads.
//
// Expected cached_tokens are computed from the token ids the server echoes:
// the longest common prefix of the new prompt with what the instance holds
// (the earlier request's prompt and every generated token but the last),
// capped one short of the prompt (its last token always runs).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/server/stories_model.h"

namespace hearth::testing {
namespace {

constexpr char kModel[] = "stories";
constexpr char kStory[] =
    "Once upon a time, there was a little girl named Lily. She liked to play in the park with "
    "her dog, and every day they ran to the big tree";

v1::GenerateRequest greedy(const std::string& prompt, bool reuse = true, bool bos = true) {
  v1::GenerateRequest r = make_request(kModel, prompt, 24);
  r.set_echo_prompt_ids(true);
  r.set_disable_prefix_reuse(!reuse);
  r.set_add_bos(bos);
  return r;
}

std::vector<std::int32_t> prompt_ids(const StreamResult& r) {
  const auto& ids = r.dones.front().usage().prompt_ids();
  return {ids.begin(), ids.end()};
}

// What an instance holds after `r`: its prompt and every generated token but
// the last (sampled, never run).
std::vector<std::int32_t> held_after(const StreamResult& r) {
  std::vector<std::int32_t> held = prompt_ids(r);
  const std::vector<std::int32_t> gen = r.ids();
  if (!gen.empty()) held.insert(held.end(), gen.begin(), gen.end() - 1);
  return held;
}

std::size_t expected_cached(const std::vector<std::int32_t>& held,
                            const std::vector<std::int32_t>& prompt) {
  std::size_t n = 0;
  while (n < held.size() && n < prompt.size() && held[n] == prompt[n]) ++n;
  return std::min(n, prompt.size() - 1);
}

class PrefixReuseTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { HEARTH_REQUIRE_SHARED(); }

  void start(int instances) {
    HEARTH_START_SERVER(
        server_,
        server_args({"--model", std::string(kModel) + "=" + stories_path().string(), "--instances",
                     std::to_string(instances), "--queue", "4", "--kv-cache", GetParam()}));
    stub_ = make_stub(plain_channel(server_.grpc_address()));
  }

  StreamResult run(const v1::GenerateRequest& req) {
    StreamResult r = generate(*stub_, req);
    EXPECT_TRUE(r.status.ok()) << status_text(r.status);
    EXPECT_EQ(r.dones.size(), 1u);
    return r;
  }

  ServerProcess server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
  std::vector<std::unique_ptr<v1::Inference::Stub>> stalling_;
};

// One instance: every request finds what the one before left. For prompts
// sharing none, one (BOS), about half, and all but one of their tokens with
// the cache, the tokens with reuse equal the tokens without.
TEST_P(PrefixReuseTest, ReuseGivesTheTokensOfAFullPrefill) {
  start(1);
  const std::string half(kStory, std::string(kStory).find(" She liked"));
  struct Case {
    const char* what;
    v1::GenerateRequest req;
  };
  const std::vector<Case> cases = {
      {"no shared token (no BOS)", greedy(kStory, true, false)},
      {"BOS only", greedy("Tom had a big red ball and he liked to kick it")},
      {"about half", greedy(half + " who had a small cat named Tom.")},
      {"all but the last token", greedy(kStory)},
      {"all, and more", greedy(std::string(kStory) + ". Then the sun went down")},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::GenerateRequest off = c.req;
    off.set_disable_prefix_reuse(true);
    const StreamResult reference = run(off);
    const StreamResult story = run(greedy(kStory));  // the cache now holds the story
    const StreamResult got = run(c.req);
    if (HasFailure()) return;
    const std::size_t want = expected_cached(held_after(story), prompt_ids(got));
    EXPECT_EQ(got.dones.front().usage().cached_tokens(), want);
    EXPECT_EQ(reference.dones.front().usage().cached_tokens(), 0u);
    EXPECT_EQ(got.ids(), reference.ids()) << "reuse changed the generated tokens";
    EXPECT_EQ(got.text(), reference.text());
    EXPECT_EQ(prompt_ids(got), prompt_ids(reference));
  }
  // The cases above cover the sizes they claim (a different tokenizer or
  // story would silently shrink them).
  const StreamResult story = run(greedy(kStory));
  const StreamResult all = run(greedy(kStory));
  EXPECT_EQ(all.dones.front().usage().cached_tokens(), prompt_ids(all).size() - 1);
  EXPECT_GT(prompt_ids(all).size(), 20u);
}

// Two instances: while one runs a long request on the story, a request
// sharing half of it goes to the other, whose cache holds nothing yet: the
// shared rows are copied from the busy instance, and the tokens equal a full
// prefill's. Then requests with the same prefix and different continuations,
// interleaved, each get their own tokens (no row of another leaks in).
TEST_P(PrefixReuseTest, RowsComeFromAnotherInstanceWithoutLeakingItsTokens) {
  start(2);
  const std::string half(kStory, std::string(kStory).find(" She liked"));
  v1::GenerateRequest long_req = greedy(kStory);
  long_req.set_max_tokens(600);
  long_req.set_ignore_eos(true);
  stalling_.push_back(make_stub(stalling_channel(server_.grpc_address())));
  OpenStream long_stream(*stalling_.back(), long_req);
  ASSERT_TRUE(long_stream.wait_first_piece()) << "the long request produced no piece";
  const v1::GenerateRequest c = greedy(half + " and her big brown dog.");
  const StreamResult c_got = run(c);
  long_stream.cancel();
  long_stream.finish();
  if (HasFailure()) return;
  EXPECT_NE(c_got.dones.front().instance(), 0u) << "c should have run beside the long request";
  v1::GenerateRequest c_off = c;
  c_off.set_disable_prefix_reuse(true);
  const StreamResult c_ref = run(c_off);
  const StreamResult story = run(greedy(kStory, /*reuse=*/false));
  if (HasFailure()) return;
  const std::size_t want = expected_cached(prompt_ids(story), prompt_ids(c_got));
  EXPECT_GT(want, 5u) << "the prompts share too little to show a copy";
  EXPECT_EQ(c_got.dones.front().usage().cached_tokens(), want)
      << "the half-story prefix was not copied from the busy instance";
  EXPECT_EQ(c_got.ids(), c_ref.ids()) << "copied rows changed the generated tokens";
  EXPECT_EQ(c_got.text(), c_ref.text());

  const v1::GenerateRequest a = greedy(half + " who had a small cat named Tom.");
  const v1::GenerateRequest b = greedy(half + " who lived by the sea with her mom.");
  v1::GenerateRequest a_off = a, b_off = b;
  a_off.set_disable_prefix_reuse(true);
  b_off.set_disable_prefix_reuse(true);
  const StreamResult a_ref = run(a_off), b_ref = run(b_off);
  for (int round = 0; round < 2; ++round) {
    const StreamResult a_got = run(a), b_got = run(b);
    if (HasFailure()) return;
    EXPECT_GT(a_got.dones.front().usage().cached_tokens(), 0u);
    EXPECT_GT(b_got.dones.front().usage().cached_tokens(), 0u);
    EXPECT_EQ(a_got.ids(), a_ref.ids()) << "round " << round;
    EXPECT_EQ(b_got.ids(), b_ref.ids()) << "round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(KvCache, PrefixReuseTest, ::testing::Values("float", "int8"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace hearth::testing
