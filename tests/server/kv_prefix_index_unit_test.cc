// KvPrefixIndex without a server: which free instance a prompt gets (longest
// shared prefix, then least recently used), what prepare() skips, and how
// the records follow the tokens written. Copies between instances are
// covered end to end by tests/server/prefix_reuse_test.cc.
#include "server/kv_prefix_index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace hearth::server {
namespace {

using Tokens = std::vector<std::int32_t>;

// Three instances, no Modules: the tests never let another instance hold
// a longer prefix than the target's own, so nothing is copied.
KvPrefixIndex three_instances() { return KvPrefixIndex({nullptr, nullptr, nullptr}, 64); }

TEST(KvPrefixIndex, PromptsGoToTheLongestSharedPrefixThenTheLeastRecentlyUsed) {
  KvPrefixIndex index = three_instances();
  const std::vector<std::size_t> all = {0, 1, 2};
  // Nothing cached: the free list's choice (its back), as before reuse.
  EXPECT_EQ(index.choose(all, Tokens{1, 5, 6}), 2u);
  // Used in the order 1, 0 (prompts sharing nothing, so nothing is copied);
  // then instance 1 holds 1 5 6 7 and instance 0 holds 1 5.
  ASSERT_EQ(*index.prepare(1, Tokens{8}, true), 0u);
  ASSERT_EQ(*index.prepare(0, Tokens{9}, true), 0u);
  index.wrote(1, 0, Tokens{1, 5, 6, 7});
  index.wrote(0, 0, Tokens{1, 5});
  EXPECT_EQ(index.cached_length(1), 4u);
  EXPECT_EQ(index.choose(all, Tokens{1, 5, 6, 7, 9}), 1u);
  EXPECT_EQ(index.choose(std::vector<std::size_t>{0, 2}, Tokens{1, 5, 6, 7, 9}), 0u);
  // Ties (only BOS shared by 0 and 1, nothing by 2): 2 was never used.
  EXPECT_EQ(index.choose(all, Tokens{3, 4}), 2u);
  // Between 0 and 1, both sharing one token: 1 was used first.
  EXPECT_EQ(index.choose(std::vector<std::size_t>{0, 1}, Tokens{1, 2}), 1u);
}

TEST(KvPrefixIndex, PrepareSkipsTheSharedPrefixButNeverTheLastPromptToken) {
  KvPrefixIndex index = three_instances();
  ASSERT_EQ(*index.prepare(0, Tokens{1, 2, 3, 4}, true), 0u);
  index.wrote(0, 0, Tokens{1, 2, 3, 4});
  index.wrote(0, 4, Tokens{9});  // a generated token, run at position 4
  EXPECT_EQ(index.cached_length(0), 5u);
  // Shares 1 2 3: skips them; the record keeps only what stays valid.
  EXPECT_EQ(*index.prepare(0, Tokens{1, 2, 3, 7, 8}, true), 3u);
  EXPECT_EQ(index.cached_length(0), 3u);
  index.wrote(0, 3, Tokens{7, 8});
  // The same prompt again: all of it is cached, its last token still runs.
  EXPECT_EQ(*index.prepare(0, Tokens{1, 2, 3, 7, 8}, true), 4u);
  // Reuse off: nothing skipped, the record restarts from the tokens run.
  index.wrote(0, 4, Tokens{8});
  EXPECT_EQ(*index.prepare(0, Tokens{1, 2, 3, 7, 8}, false), 0u);
  EXPECT_EQ(index.cached_length(0), 0u);
  // A write that does not continue the record (a gap) forgets it.
  index.wrote(0, 2, Tokens{5});
  EXPECT_EQ(index.cached_length(0), 0u);
  index.wrote(0, 0, Tokens{1, 2});
  EXPECT_EQ(index.cached_length(0), 2u);
  // Past the context: forgotten, not overrun.
  index.wrote(0, 2, Tokens(63, 4));
  EXPECT_EQ(index.cached_length(0), 0u);
}

}  // namespace
}  // namespace hearth::server
