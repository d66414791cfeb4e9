#include "memory/stats_allocator.h"

#include <gtest/gtest.h>

#include "memory/arena_allocator.h"
#include "memory/caching_allocator.h"

namespace hearth {
namespace {

TEST(StatsAllocator, CountsBytesPeakAllocationsAndFailures) {
  alignas(64) static std::byte buffer[1024];
  ArenaAllocator arena(buffer, sizeof buffer);
  StatsAllocator stats(arena);
  ASSERT_NE(stats.allocate(100), nullptr);
  ASSERT_NE(stats.allocate(200), nullptr);
  EXPECT_EQ(stats.allocate(5000), nullptr);
  EXPECT_EQ(stats.stats().in_use_bytes, 300u);
  EXPECT_EQ(stats.stats().peak_in_use_bytes, 300u);
  EXPECT_EQ(stats.stats().allocations, 2u);
  EXPECT_EQ(stats.stats().failures, 1u);
  stats.reset();
  EXPECT_EQ(arena.used(), 0u);  // reset reaches the wrapped allocator
  EXPECT_EQ(stats.stats().in_use_bytes, 0u);
  EXPECT_EQ(stats.stats().peak_in_use_bytes, 300u);
  ASSERT_NE(stats.allocate(50), nullptr);
  EXPECT_EQ(stats.stats().peak_in_use_bytes, 300u);
  stats.reset_peak();
  EXPECT_EQ(stats.stats().peak_in_use_bytes, 50u);
  EXPECT_EQ(stats.stats().resets, 1u);
}

TEST(StatsAllocator, TypedHelpersGoThroughTheWrapper) {
  CachingAllocator caching;
  StatsAllocator stats(caching);
  ASSERT_NE(stats.allocate_array<float>(10), nullptr);
  EXPECT_EQ(stats.stats().in_use_bytes, 40u);
  EXPECT_EQ(caching.stats().lookups, 1u);
  EXPECT_EQ(stats.allocate_array<float>(std::size_t{1} << 62), nullptr);  // overflow
}

TEST(StatsAllocator, WrappedAllocatorIsReplaceable) {
  alignas(64) static std::byte buffer[256];
  ArenaAllocator arena(buffer, sizeof buffer);
  CachingAllocator caching;
  StatsAllocator stats(arena);
  ASSERT_NE(stats.allocate(100), nullptr);
  stats.set_wrapped(caching);
  EXPECT_EQ(&stats.wrapped(), &caching);
  ASSERT_NE(stats.allocate(1000), nullptr);  // would not fit in the arena
  EXPECT_EQ(caching.stats().lookups, 1u);
  EXPECT_EQ(stats.stats().in_use_bytes, 1000u);
  EXPECT_EQ(stats.stats().peak_in_use_bytes, 1000u);
  EXPECT_EQ(stats.stats().allocations, 2u);
}

TEST(FormatUsageLine, MatchesTheEmbeddedRunnerReport) {
  EXPECT_EQ(format_usage_line("method_allocator_used", 320, 62914560),
            "method_allocator_used: 320 / 62914560 free: 62914240 ( used: 0 % )");
  EXPECT_EQ(format_usage_line("peak_temp_allocator", 1048576, 2097152),
            "peak_temp_allocator: 1048576 / 2097152 free: 1048576 ( used: 50 % )");
  EXPECT_EQ(format_usage_line("method_allocator_planned", 64, 0),
            "method_allocator_planned: 64 bytes");
}

}  // namespace
}  // namespace hearth
