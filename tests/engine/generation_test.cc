#include "engine/generation.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "memory/thread_temp_allocator.h"
#include "tests/support/shared_data.h"

namespace hearth::engine {
namespace {

struct Loaded {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Module> module;
};

Loaded load_stories(KvCacheType kv = KvCacheType::kFloat, std::size_t context = 256) {
  Loaded l;
  auto f = GgufFile::open((testing::shared_dir() / "models/stories260K.gguf").string());
  EXPECT_TRUE(f.ok()) << f.status();
  l.file = std::move(*f);
  auto t = Tokenizer::from_gguf(*l.file);
  EXPECT_TRUE(t.ok()) << t.status();
  l.tokenizer = std::move(*t);
  ModuleOptions o;
  o.kv_cache = kv;
  o.context_length = context;
  auto m = Module::load(l.file, o);
  EXPECT_TRUE(m.ok()) << m.status();
  l.module = std::move(*m);
  return l;
}

TEST(Generation, GreedyTextMatchesTheReferenceAndStreamsInOrder) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load_stories();
  GenerationRequest req;
  req.prompt = "Once upon a time";
  req.max_tokens = 64;
  std::string streamed;
  std::vector<std::int32_t> streamed_ids;
  auto r = generate(*l.module, *l.tokenizer, req, [&](std::string_view text, std::int32_t id) {
    streamed += text;
    if (id >= 0) streamed_ids.push_back(id);
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_ids, (std::vector<std::int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(r->text,
            ", there was a little girl named Lily. She loved to play outside in the park. One day, "
            "she saw a big, red "
            "ball. She wanted to play with it, but it was too high.\nLily's mom said");
  EXPECT_EQ(streamed, r->text);
  EXPECT_EQ(streamed_ids, r->generated_ids);
  EXPECT_EQ(r->finish, FinishReason::kMaxTokens);
  EXPECT_EQ(r->stats.prompt_tokens, 5u);
  EXPECT_EQ(r->stats.generated_tokens, 64u);
  EXPECT_GT(r->stats.time_to_first_token_s, 0.0);
  EXPECT_GT(r->stats.decode_tokens_per_s(), 0.0);
  // Every step after the first reuses the cached blocks.
  EXPECT_GT(r->stats.temp_lookups, 0u);
  EXPECT_GE(static_cast<double>(r->stats.temp_hits) / r->stats.temp_lookups, 0.95);
  EXPECT_GT(r->stats.temp_peak_bytes, 0u);
}

// The reported temp peak is the most the generation's scratch held at once,
// its forwards' layers included (each layer resets the allocator, and the
// figure once kept only the logits' and sampler's part): on a thread of its
// own, whose allocator served nothing else, it equals that allocator's
// lifetime peak.
TEST(Generation, TempPeakCountsEveryLayersScratch) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load_stories();
  GenerationRequest req;
  req.prompt = "Once upon a time there was a little girl who lived in a village near the forest";
  req.max_tokens = 2;
  std::uint64_t reported = 0, held = 0;
  std::thread([&] {
    auto r = generate(*l.module, *l.tokenizer, req, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    reported = r->stats.temp_peak_bytes;
    held = thread_temp_allocator().stats().peak_bytes;
  }).join();
  EXPECT_GT(held, 0u);
  EXPECT_EQ(reported, held);
}

TEST(Generation, StopStringsCutTheTextAndReportStop) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load_stories();
  GenerationRequest req;
  req.prompt = "Once upon a time";
  req.max_tokens = 64;
  req.stop = {"Lily"};
  auto r = generate(*l.module, *l.tokenizer, req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, ", there was a little girl named ");
  EXPECT_EQ(r->finish, FinishReason::kStopString);
}

TEST(Generation, SeededSamplingIsReproducible) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load_stories();
  GenerationRequest req;
  req.prompt = "Lily and Tom";
  req.max_tokens = 40;
  req.sampling.temperature = 0.9f;
  req.sampling.top_k = 40;
  req.sampling.top_p = 0.95f;
  req.sampling.seed = 1234;
  auto a = generate(*l.module, *l.tokenizer, req);
  auto b = generate(*l.module, *l.tokenizer, req);
  req.sampling.seed = 99;
  auto c = generate(*l.module, *l.tokenizer, req);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->generated_ids, b->generated_ids);
  EXPECT_NE(a->generated_ids, c->generated_ids);
}

TEST(Generation, CancellationIsCheckedEveryToken) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load_stories();
  GenerationRequest req;
  req.prompt = "Once upon a time";
  req.max_tokens = 64;
  int tokens = 0;
  auto r = generate(
      *l.module, *l.tokenizer, req, [&](std::string_view, std::int32_t id) { tokens += id >= 0; },
      [&] { return tokens >= 3; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finish, FinishReason::kCancelled);
  EXPECT_EQ(r->generated_ids.size(), 3u);
}

TEST(Generation, ContextLimitEndsGeneration) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load_stories(KvCacheType::kInt8, 16);
  GenerationRequest req;
  req.prompt = "Once upon a time";  // 5 tokens
  req.max_tokens = 100;
  auto r = generate(*l.module, *l.tokenizer, req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finish, FinishReason::kContextLimit);
  EXPECT_EQ(r->prompt_ids.size() + r->generated_ids.size(),
            17u);  // 16 positions + the last sampled token
}

TEST(Generation, BadRequestsNameTheField) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load_stories(KvCacheType::kInt8, 16);
  GenerationRequest req;
  auto r = generate(*l.module, *l.tokenizer, req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("prompt"), std::string::npos);
  req.prompt = std::string(200, 'x');
  r = generate(*l.module, *l.tokenizer, req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("context"), std::string::npos) << r.status();
  req.prompt = "hi";
  req.sampling.temperature = -2;
  r = generate(*l.module, *l.tokenizer, req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("temperature"), std::string::npos);
  req = {};
  req.prompt_ids = {1, 9999};
  r = generate(*l.module, *l.tokenizer, req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("prompt_ids"), std::string::npos);
}

// Heap allocations of the real decode path: Batched.GenerateMakesNoHeapAllocationBetweenTokens
// (tests/engine/batched_forward_test.cc) counts engine::generate() as it runs.

}  // namespace
}  // namespace hearth::engine
