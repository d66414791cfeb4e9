#include "engine/module.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "memory/thread_temp_allocator.h"
#include "tests/support/heap_counter.h"
#include "tests/support/shared_data.h"

namespace hearth::engine {
namespace {

std::string stories() { return (testing::shared_dir() / "models/stories260K.gguf").string(); }

// Greedy continuation, one token per forward after the prompt.
std::vector<std::int32_t> greedy(Module& m, std::vector<std::int32_t> prompt, int n) {
  std::vector<std::int32_t> out;
  std::size_t pos = 0;
  auto logits = m.forward(prompt, pos);
  EXPECT_TRUE(logits.ok()) << logits.status();
  pos += prompt.size();
  for (int i = 0; i < n; ++i) {
    const auto next = static_cast<std::int32_t>(std::max_element(logits->begin(), logits->end()) -
                                                logits->begin());
    out.push_back(next);
    thread_temp_allocator().reset();
    const std::int32_t tok[1] = {next};
    logits = m.forward(tok, pos++);
    EXPECT_TRUE(logits.ok()) << logits.status();
  }
  thread_temp_allocator().reset();
  return out;
}

const std::vector<std::int32_t> kOnceUponATime = {1, 403, 407, 261, 378};
const std::vector<std::int32_t> kOnceExpected = {
    432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
    410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394,
    261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432,
    398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310, 439, 419, 357, 336};
const std::vector<std::int32_t> kLilyAndTom = {1,   317, 269, 274, 287, 263,
                                               377, 267, 265, 282, 295, 433};
const std::vector<std::int32_t> kLilyExpected = {
    426, 342, 394, 261, 370, 268, 414, 444, 335, 261, 370, 268, 414, 444, 426, 342,
    391, 266, 267, 337, 335, 312, 426, 342, 391, 266, 267, 337, 335, 265, 268, 414,
    444, 426, 342, 391, 266, 267, 337, 335, 265, 268, 414, 444, 426, 13,  436, 438,
    347, 433, 432, 392, 287, 443, 436, 317, 336, 426, 313, 438, 316, 439, 419, 298};

class ModuleGreedy : public ::testing::TestWithParam<KvCacheType> {};

TEST_P(ModuleGreedy, Stories260KReproducesTheReferenceContinuations) {
  HEARTH_REQUIRE_SHARED();
  ModuleOptions o;
  o.kv_cache = GetParam();
  o.context_length = 256;
  auto m = Module::load(stories(), o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(greedy(**m, kOnceUponATime, 64), kOnceExpected);
  EXPECT_EQ(greedy(**m, kLilyAndTom, 64), kLilyExpected);
}

INSTANTIATE_TEST_SUITE_P(KvCaches, ModuleGreedy,
                         ::testing::Values(KvCacheType::kInt8, KvCacheType::kFloat),
                         [](const auto& info) {
                           return std::string(kv_cache_type_name(info.param));
                         });

}  // namespace
}  // namespace hearth::engine
