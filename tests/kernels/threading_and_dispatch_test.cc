#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"
#include "tests/support/heap_counter.h"

namespace hearth::kernels {
namespace {

TEST(CpuFeatures, ScalarIsAlwaysSupportedAndLevelsNest) {
  const std::vector<Isa> isas = supported_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::kScalar);
  EXPECT_EQ(isas.back(), best_isa());
  // A level is supported only if every lower level is.
  for (std::size_t i = 0; i < isas.size(); ++i)
    EXPECT_EQ(static_cast<int>(isas[i]), static_cast<int>(i));
  EXPECT_GE(cpu_features().physical_cores, 1);
}

TEST(CpuFeatures, ScopedIsaForcesEachSupportedPathAndRestores) {
  const Isa best = active_isa();
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    EXPECT_EQ(active_isa(), isa) << isa_name(isa);
  }
  EXPECT_EQ(active_isa(), best);
}

// The one choice made from the CPU's family: decode tiles prefetch their
// weights everywhere but in the AVX-512 tiles on Zen 4 (AMD family 0x19).
TEST(CpuFeatures, DecodePrefetchIsOffOnlyForZen4sAvx512Tiles) {
  EXPECT_FALSE(decode_prefetch_helps(/*amd=*/true, 0x19, Isa::kAvx512Vnni));  // Zen 4
  EXPECT_FALSE(decode_prefetch_helps(/*amd=*/true, 0x19, Isa::kAvx512));
  EXPECT_TRUE(decode_prefetch_helps(/*amd=*/true, 0x19, Isa::kAvx2));  // Zen 4 forced, or Zen 3
  EXPECT_TRUE(decode_prefetch_helps(/*amd=*/true, 0x1a, Isa::kAvx512Vnni));   // Zen 5
  EXPECT_TRUE(decode_prefetch_helps(/*amd=*/true, 0x17, Isa::kAvx2));         // Zen 2
  EXPECT_TRUE(decode_prefetch_helps(/*amd=*/false, 0x19, Isa::kAvx512Vnni));  // not AMD
  EXPECT_TRUE(decode_prefetch_helps(/*amd=*/false, 6, Isa::kAvx512Vnni));     // Intel
}

TEST(CpuFeatures, DecodePrefetchFollowsTheActiveIsaAndScopedDecodePrefetch) {
  const CpuFeatures& f = cpu_features();
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    EXPECT_EQ(decode_prefetch(), decode_prefetch_helps(f.amd, f.family, isa)) << isa_name(isa);
  }
  const bool detected = decode_prefetch();
  {
    ScopedDecodePrefetch off(false);
    EXPECT_FALSE(decode_prefetch());
    {
      ScopedDecodePrefetch on(true);
      EXPECT_TRUE(decode_prefetch());
    }
    EXPECT_FALSE(decode_prefetch());
  }
  EXPECT_EQ(decode_prefetch(), detected);
}

// Every kernel family dispatches through PerIsaTables: a level without a
// table of its own uses the nearest level below it that has one.
TEST(CpuFeatures, PerIsaTablesFallBackToTheNearestLevelBelow) {
  struct Table {
    int id;
  };
  const Table scalar{0}, avx2{1}, avx512{2}, vnni{3};
  const PerIsaTables<Table> all{&scalar, &avx2, &avx512, &vnni};
  EXPECT_EQ(all.at(Isa::kScalar).id, 0);
  EXPECT_EQ(all.at(Isa::kAvx2).id, 1);
  EXPECT_EQ(all.at(Isa::kAvx512).id, 2);
  EXPECT_EQ(all.at(Isa::kAvx512Vnni).id, 3);
  const PerIsaTables<Table> gaps{&scalar, nullptr, &avx512, nullptr};
  EXPECT_EQ(gaps.at(Isa::kAvx2).id, 0);
  EXPECT_EQ(gaps.at(Isa::kAvx512).id, 2);
  EXPECT_EQ(gaps.at(Isa::kAvx512Vnni).id, 2);
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    EXPECT_EQ(&all.active(), &all.at(isa)) << isa_name(isa);
  }
}

TEST(ThreadPool, ParallelForCoversTheRangeExactlyOnce) {
  for (std::size_t threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (std::size_t range : {1, 7, 64, 1000, 4099}) {
      for (std::size_t grain : {1, 16, 5000}) {
        std::vector<std::atomic<int>> hits(range);
        pool.parallel_for(range, grain, [&](std::size_t b, std::size_t e) {
          ASSERT_LT(b, e);
          if (grain <= range && e != range) {
            EXPECT_GE(e - b, grain);
          }
          for (std::size_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (std::size_t i = 0; i < range; ++i)
          ASSERT_EQ(hits[i].load(), 1) << range << "/" << grain << "/" << i;
      }
    }
  }
}

TEST(ThreadPool, ParallelChunksRunsEachChunkOnceOverAnEvenSplit) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> chunk_runs(2);
  std::vector<std::atomic<int>> hits(101);
  pool.parallel_chunks(101, 2, [&](std::size_t c, std::size_t b, std::size_t e) {
    chunk_runs[c].fetch_add(1);
    for (std::size_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  EXPECT_EQ(chunk_runs[0].load(), 1);
  EXPECT_EQ(chunk_runs[1].load(), 1);
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, UsesMoreThanOneThreadWhenItHasThem) {
  ThreadPool pool(2);
  std::set<std::thread::id> seen;
  std::mutex mu;
  // Each chunk waits until both chunks have started, which only completes if
  // two threads run them at the same time.
  std::atomic<int> started{0};
  pool.parallel_chunks(2, 2, [&](std::size_t, std::size_t, std::size_t) {
    started.fetch_add(1);
    while (started.load() < 2) std::this_thread::yield();
    std::lock_guard<std::mutex> lock(mu);
    seen.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(seen.size(), 2u);
}

// A caller that finds the pool busy runs its region on its own thread rather
// than waiting: here the busy region cannot finish until the second caller's
// region has, so a pool that made the second caller wait would never finish
// (the chunk gives up after 20 s and the test fails instead of hanging).
TEST(ThreadPool, ACallerFindingThePoolBusyRunsItsRegionItself) {
  ThreadPool pool(2);
  std::atomic<bool> second_done{false}, first_started{false}, first_saw_second{true};
  std::atomic<std::size_t> second_items{0};
  std::thread first([&] {
    pool.parallel_chunks(2, 2, [&](std::size_t, std::size_t, std::size_t) {
      first_started.store(true);
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!second_done.load() && std::chrono::steady_clock::now() < give_up)
        std::this_thread::yield();
      if (!second_done.load()) first_saw_second.store(false);
    });
  });
  while (!first_started.load()) std::this_thread::yield();
  pool.parallel_for(1000, 10, [&](std::size_t b, std::size_t e) { second_items.fetch_add(e - b); });
  second_done.store(true);
  first.join();
  EXPECT_EQ(second_items.load(), 1000u);
  EXPECT_TRUE(first_saw_second.load()) << "the second caller waited for the busy region";
}

// Regions complete however the workers are scheduled: many small regions
// back to back from one caller, each must see every chunk exactly once.
TEST(ThreadPool, BackToBackRegionsRunEveryChunkExactlyOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(12);
  for (int r = 0; r < 2000; ++r) {
    pool.parallel_for(12, 1, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
  }
  for (auto& h : hits) EXPECT_EQ(h.load(), 2000);
}

// Next-region hints are prefetches: regions run every chunk exactly once
// whatever the hints say, stale ones (a freed buffer) and out-of-range
// thread indices included.
TEST(ThreadPool, HintsNeverChangeWhatARegionRuns) {
  ThreadPool pool(3);
  std::vector<std::uint8_t> weights(1 << 20, 1);
  const void* stale = nullptr;
  {
    std::vector<std::uint8_t> freed(1 << 16);
    stale = freed.data();
  }
  std::vector<std::atomic<int>> hits(100);
  for (int r = 0; r < 500; ++r) {
    pool.hint_next_region(1, weights.data() + (r % 8) * 4096, 256 << 10);
    pool.hint_next_region(2, r % 2 == 0 ? stale : weights.data(), 1 << 20);
    pool.hint_next_region(0, weights.data(), 4096);  // the caller's: ignored
    pool.hint_next_region(7, weights.data(), 4096);  // no such worker: ignored
    pool.parallel_for(100, 1, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
  }
  for (auto& h : hits) EXPECT_EQ(h.load(), 500);
}

// A thread that owns a range claims half of what is left of it at a time,
// in one call over adjacent chunks: every call starts and ends on chunk
// boundaries (or the range's end), and every item runs exactly once.
TEST(ThreadPool, CallsCoverWholeAdjacentChunksAndEveryItemOnce) {
  ThreadPool pool(2);
  const std::size_t range = 6403;  // not a multiple of the chunk count
  const std::size_t chunks = pool.chunk_count(range, 1);
  ASSERT_EQ(chunks, 2 * ThreadPool::kChunksPerThread);
  const std::size_t chunk = (range + chunks - 1) / chunks;
  for (int r = 0; r < 100; ++r) {
    std::vector<std::atomic<int>> hits(range);
    std::atomic<int> misaligned{0};
    pool.parallel_for(range, 1, [&](std::size_t b, std::size_t e) {
      if (b % chunk != 0 || (e % chunk != 0 && e != range)) misaligned.fetch_add(1);
      for (std::size_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    EXPECT_EQ(misaligned.load(), 0);
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, ConcurrentCallersBothComplete) {
  ThreadPool pool(2);
  std::atomic<long> total{0};
  auto work = [&] {
    for (int r = 0; r < 200; ++r)
      pool.parallel_for(1000, 10, [&](std::size_t b, std::size_t e) {
        total.fetch_add(static_cast<long>(e - b));
      });
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2L * 200 * 1000);
}

TEST(ThreadPool, ParallelForMakesNoHeapAllocation) {
  ThreadPool pool(2);
  std::atomic<long> sum{0};
  auto body = [&](std::size_t b, std::size_t e) { sum.fetch_add(static_cast<long>(e - b)); };
  pool.parallel_for(1000, 10, body);  // warm-up
  hearth::testing::HeapCounter counter;
  for (int i = 0; i < 100; ++i) pool.parallel_for(1000, 10, body);
  EXPECT_EQ(counter.allocations(), 0u);
  EXPECT_EQ(sum.load(), 101L * 1000);
}

// A chunk that throws ends the process at once: unwinding the caller would
// leave the workers running the rest of the region through its dead frame
// (and a late chunk's completion could then hang the next region).
using ThreadPoolDeathTest = ::testing::Test;
TEST_F(ThreadPoolDeathTest, AChunkThatThrowsEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ThreadPool pool(2);
        pool.parallel_for(64, 1, [](std::size_t begin, std::size_t) {
          if (begin == 0) throw std::runtime_error("chunk 0 failed");
        });
      },
      "chunk 0 failed");
}

TEST(ThreadPool, DefaultPoolHasOneThreadPerPhysicalCore) {
  EXPECT_EQ(default_thread_pool().threads(),
            static_cast<std::size_t>(cpu_features().physical_cores));
  EXPECT_FALSE(set_default_thread_count(default_thread_pool().threads() + 1));
}

}  // namespace
}  // namespace hearth::kernels
