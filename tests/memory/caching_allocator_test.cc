#include "memory/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <thread>
#include <vector>

#include "memory/size_classes.h"

namespace hearth {
namespace {

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(CachingAllocator, EveryBlockIsAlignedToAtLeast64) {
  CachingAllocator a;
  for (std::size_t size : {0, 1, 7, 63, 64, 65, 1000, 4097, 100000}) {
    for (std::size_t align : {1, 8, 16, 64}) {
      void* p = a.allocate(size, align);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(addr(p) % 64, 0u) << size << "/" << align;
    }
  }
  for (std::size_t align = 128; align <= 8192; align *= 2) {
    void* p = a.allocate(100, align);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(addr(p) % align, 0u) << align;
  }
}

TEST(CachingAllocator, BlocksAreWritableAndDistinct) {
  CachingAllocator a;
  std::vector<std::pair<char*, std::size_t>> blocks;
  for (std::size_t i = 0; i < 64; ++i) {
    const std::size_t size = 1 + i * 37;
    char* p = static_cast<char*>(a.allocate(size));
    ASSERT_NE(p, nullptr);
    std::memset(p, static_cast<int>(i), size);
    blocks.emplace_back(p, size);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i)
    for (std::size_t j = 0; j < blocks[i].second; ++j)
      ASSERT_EQ(blocks[i].first[j], static_cast<char>(i));
}

TEST(CachingAllocator, ResetMakesTheSameBlocksComeBack) {
  CachingAllocator a;
  std::set<void*> first;
  for (int i = 0; i < 10; ++i) first.insert(a.allocate(1000 + 100 * i));
  a.reset();
  std::set<void*> second;
  for (int i = 0; i < 10; ++i) second.insert(a.allocate(1000 + 100 * i));
  EXPECT_EQ(first, second);
  const CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.lookups, 20u);
  EXPECT_EQ(s.misses, 10u);
  EXPECT_EQ(s.hits, 10u);
  EXPECT_EQ(s.resets, 1u);
  EXPECT_DOUBLE_EQ(s.hit_ratio(), 0.5);
}

TEST(CachingAllocator, ByteAccountingFollowsBlocks) {
  CachingAllocator a;
  a.allocate(100);   // class 128
  a.allocate(1000);  // class 1024
  CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.in_use_bytes, 128u + 1024u);
  EXPECT_EQ(s.reserved_bytes, 128u + 1024u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.peak_bytes, 128u + 1024u);
  a.reset();
  s = a.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, 128u + 1024u);
  EXPECT_EQ(s.reserved_bytes, 128u + 1024u);
  EXPECT_EQ(s.last_reset_peak_bytes, 128u + 1024u);
  a.allocate(100);
  s = a.stats();
  EXPECT_EQ(s.in_use_bytes, 128u);
  EXPECT_EQ(s.cached_bytes, 1024u);
  a.reset();
  EXPECT_EQ(a.stats().last_reset_peak_bytes, 128u);
  EXPECT_EQ(a.stats().peak_bytes, 128u + 1024u);
}

// A span's peak holds across resets (a forward resets at every layer), and
// starts again at begin_span() from what is in use then.
TEST(CachingAllocator, SpanPeakHoldsAcrossResetsUntilTheNextSpan) {
  CachingAllocator a;
  a.allocate(64);
  a.begin_span();
  EXPECT_EQ(a.stats().span_peak_bytes, 64u);
  a.allocate(1000);  // a 1024-byte block
  a.reset();
  a.allocate(100);  // 128
  a.reset();
  CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.span_peak_bytes, 64u + 1024u);
  EXPECT_LT(s.last_reset_peak_bytes, s.span_peak_bytes);  // the last window alone
  a.begin_span();
  a.allocate(100);
  s = a.stats();
  EXPECT_EQ(s.span_peak_bytes, s.in_use_bytes);
  EXPECT_LT(s.span_peak_bytes, 64u + 1024u);
}

TEST(CachingAllocator, RoundsToSizeClassesSoGrowingBuffersHit) {
  CachingAllocator a;
  // 4 KiB plus one float per step stays in one class for 255 steps.
  a.allocate(4100);
  a.reset();
  for (int step = 2; step < 256; ++step) {
    a.allocate(4096 + 4 * step);
    a.reset();
  }
  EXPECT_EQ(a.stats().misses, 1u);
  EXPECT_EQ(a.stats().hits, 254u);
  EXPECT_EQ(a.stats().reserved_bytes, size_classes::bytes_of(size_classes::class_of(4100)));
}

TEST(CachingAllocator, OutgrownBlockGetsHeadroomSoGrowthMissesOncePerDoubling) {
  CachingAllocator a;
  // A score buffer of 32 heads x kv_len floats, kv_len 512 -> 2560 (x5).
  std::uint64_t misses_after_first = 0;
  for (int kv = 512; kv <= 2560; ++kv) {
    a.allocate(std::size_t{32} * 4 * kv);
    if (kv == 512) misses_after_first = a.stats().misses;
    a.reset();
  }
  const std::uint64_t growth_misses = a.stats().misses - misses_after_first;
  // log2(5) = 2.3 doublings: without headroom this would be ~9 class crossings.
  EXPECT_LE(growth_misses, 3u);
  EXPECT_GE(growth_misses, 1u);
}

TEST(CachingAllocator, PrefersTheExactClassOverALargerBlock) {
  CachingAllocator a;
  void* small = a.allocate(1000);
  void* large = a.allocate(1500);
  a.reset();
  EXPECT_EQ(a.allocate(1000), small);
  EXPECT_EQ(a.allocate(1500), large);
}

TEST(CachingAllocator, TakesASomewhatLargerIdleBlockButNotAHugeOne) {
  CachingAllocator a;
  void* p1500 = a.allocate(1500);  // class 1536
  void* p1m = a.allocate(1 << 20);
  a.reset();
  EXPECT_EQ(a.allocate(1000), p1500);  // class 1024, three classes below 1536
  EXPECT_NE(a.allocate(1000), p1m);    // 1 MiB is far too large to lend
  EXPECT_EQ(a.stats().misses, 3u);
}

TEST(CachingAllocator, CapTrimsLeastRecentlyUsedBlocksOnly) {
  CachingAllocator::Options o;
  o.max_cached_bytes = 3 * 4096;
  CachingAllocator a(o);
  // Generation 1 uses A, B; generation 2 uses C, D, E (all 4 KiB).
  void* pa = a.allocate(4096);
  void* pb = a.allocate(4096);
  a.reset();
  EXPECT_EQ(a.stats().trims, 0u);
  void* pc = a.allocate(4096);
  void* pd = a.allocate(4096);
  void* pe = a.allocate(4096);
  EXPECT_EQ(a.stats().misses, 3u);  // pa and pb handed out as pc and pd
  EXPECT_EQ(pc, pb);                // most recently released first
  EXPECT_EQ(pd, pa);
  a.reset();
  CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.cached_bytes, 3u * 4096u);
  EXPECT_EQ(s.trims, 0u);
  // Generation 3 uses 4 blocks, then 5 idle blocks exceed the cap of 3.
  std::vector<void*> g3;
  for (int i = 0; i < 5; ++i) g3.push_back(a.allocate(4096));
  EXPECT_EQ(g3[0], pe);
  EXPECT_EQ(g3[1], pa);
  EXPECT_EQ(g3[2], pb);
  a.reset();
  s = a.stats();
  EXPECT_EQ(s.cached_bytes, 3u * 4096u);
  EXPECT_EQ(s.reserved_bytes, 3u * 4096u);
  EXPECT_EQ(s.trims, 2u);
  EXPECT_EQ(s.trimmed_bytes, 2u * 4096u);
  // The survivors are the three handed out last: pb and the two new blocks.
  std::set<void*> g4;
  for (int i = 0; i < 3; ++i) g4.insert(a.allocate(4096));
  EXPECT_EQ(g4, (std::set<void*>{g3[2], g3[3], g3[4]}));
  EXPECT_EQ(a.stats().misses, 5u);
}

TEST(CachingAllocator, TrimKeepsTheMostRecentBlocks) {
  CachingAllocator a;
  std::vector<void*> order;
  for (int i = 0; i < 6; ++i) order.push_back(a.allocate(64 * (i + 1)));  // six distinct classes
  a.reset();
  a.trim_cache(64 * 6 + 64 * 5);  // keeps the two handed out last
  const CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.trims, 4u);
  EXPECT_EQ(s.cached_bytes, 64u * 11u);
  EXPECT_EQ(a.allocate(64 * 6), order[5]);
  EXPECT_EQ(a.allocate(64 * 5), order[4]);
  EXPECT_EQ(a.stats().hits, 2u);
  a.trim_cache(0);
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  EXPECT_EQ(a.stats().in_use_bytes, 64u * 11u);  // live blocks are never trimmed
}

TEST(CachingAllocator, RefusesImpossibleRequestsAndCountsThem) {
  CachingAllocator a;
  EXPECT_EQ(a.allocate(std::numeric_limits<std::size_t>::max()), nullptr);
  EXPECT_EQ(a.allocate(size_classes::kMaxBytes + 1), nullptr);
  EXPECT_EQ(a.allocate(64, 0), nullptr);
  EXPECT_EQ(a.allocate(64, 96), nullptr);
  EXPECT_EQ(a.allocate_array<std::uint64_t>(std::numeric_limits<std::size_t>::max() / 2), nullptr);
  const CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.lookups, 4u);  // the overflowing array never reached allocate()
  EXPECT_EQ(s.failures, 4u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_NE(a.allocate(64), nullptr);  // still works afterwards
}

TEST(CachingAllocator, ReadingStatsFromAnotherThreadIsConsistent) {
  CachingAllocator a;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const CachingAllocatorStats s = a.stats();
      ASSERT_EQ(s.hits + s.misses, s.lookups);
      ASSERT_EQ(s.in_use_bytes + s.cached_bytes, s.reserved_bytes);
      ASSERT_LE(s.in_use_bytes, s.peak_bytes);
    }
  });
  for (int step = 0; step < 20000; ++step) {
    for (int i = 0; i < 8; ++i) a.allocate(256 * (i + 1) + step % 64);
    a.reset();
  }
  done = true;
  reader.join();
}

using CachingAllocatorDeathTest = ::testing::Test;

TEST_F(CachingAllocatorDeathTest, UseFromAnotherThreadAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        CachingAllocator a;
        std::thread other([&] { a.allocate(64); });
        other.join();
      },
      "used from a thread that does not own it");
}

}  // namespace
}  // namespace hearth
