#include "memory/thread_temp_allocator.h"

#include <gtest/gtest.h>

#include <barrier>
#include <stdexcept>
#include <thread>
#include <vector>

namespace hearth {
namespace {

// Returns early from the middle of its work, leaving scratch live.
int generation_that_returns_early(int n) {
  TempAllocatorLease lease;
  for (int i = 0; i < 5; ++i) {
    if (lease.allocator().allocate(1024) == nullptr) return -1;
    if (i == n) return i;
  }
  return 5;
}

void generation_that_throws() {
  TempAllocatorLease lease;
  lease.allocator().allocate(4096);
  throw std::runtime_error("kernel failed");
}

TEST(TempAllocatorLease, ResetsOnEarlyReturn) {
  EXPECT_EQ(generation_that_returns_early(2), 2);
  const CachingAllocatorStats s = thread_temp_allocator().stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_GE(s.cached_bytes, 3u * 1024u);
}

TEST(TempAllocatorLease, ResetsWhenAnExceptionUnwinds) {
  const std::uint64_t resets = thread_temp_allocator().stats().resets;
  EXPECT_THROW(generation_that_throws(), std::runtime_error);
  const CachingAllocatorStats s = thread_temp_allocator().stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.resets, resets + 1);
}

TEST(TempAllocatorLease, NestedLeaseDoesNotResetTheOuterOne) {
  TempAllocatorLease outer;
  EXPECT_TRUE(outer.outermost());
  void* kept = outer.allocator().allocate(512);
  {
    TempAllocatorLease inner;
    EXPECT_FALSE(inner.outermost());
    EXPECT_EQ(&inner.allocator(), &outer.allocator());
    inner.allocator().allocate(512);
  }
  const CachingAllocatorStats s = outer.allocator().stats();
  EXPECT_EQ(s.in_use_bytes, 1024u);  // both blocks still live
  EXPECT_NE(kept, nullptr);
}

TEST(TempAllocatorLease, SecondGenerationOnAThreadHitsTheCache) {
  std::thread t([] {
    for (int gen = 0; gen < 2; ++gen) {
      TempAllocatorLease lease;
      for (int i = 0; i < 10; ++i) ASSERT_NE(lease.allocator().allocate(1000 * (i + 1)), nullptr);
    }
    const CachingAllocatorStats s = thread_temp_allocator().stats();
    EXPECT_EQ(s.misses, 10u);
    EXPECT_EQ(s.hits, 10u);
    EXPECT_EQ(s.resets, 2u);
  });
  t.join();
}

TEST(TempAllocatorRegistry, LeasesOnManyThreadsAtOnce) {
  constexpr int kThreads = 8;
  constexpr int kGenerations = 200;
  const TempAllocatorSnapshot before = TempAllocatorRegistry::snapshot();
  std::barrier all_running(kThreads + 1);
  std::barrier may_exit(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int g = 0; g < kGenerations; ++g) {
        TempAllocatorLease lease;
        for (int i = 0; i < 10; ++i) {
          auto* p = static_cast<unsigned char*>(lease.allocator().allocate(256 * (i + 1) + g));
          ASSERT_NE(p, nullptr);
          p[0] = static_cast<unsigned char>(t);  // the memory is really ours
        }
      }
      all_running.arrive_and_wait();
      may_exit.arrive_and_wait();
    });
  }
  all_running.arrive_and_wait();
  // Every worker is alive and idle: each shows up once with its own counters.
  const TempAllocatorSnapshot live = TempAllocatorRegistry::snapshot();
  EXPECT_EQ(live.live_threads.size(), before.live_threads.size() + kThreads);
  std::uint64_t worker_lookups = 0;
  for (const auto& th : live.live_threads) {
    if (th.leases == static_cast<std::uint64_t>(kGenerations)) {
      EXPECT_EQ(th.stats.lookups, 10u * kGenerations);
      EXPECT_EQ(th.stats.in_use_bytes, 0u);
      EXPECT_GT(th.stats.cached_bytes, 0u);
      EXPECT_GE(th.stats.hit_ratio(), 0.99);
      worker_lookups += th.stats.lookups;
    }
  }
  EXPECT_EQ(worker_lookups, 10u * kGenerations * kThreads);
  may_exit.arrive_and_wait();
  for (auto& th : threads) th.join();

  // After exit: the workers' counters are kept, their memory is gone.
  const TempAllocatorSnapshot after = TempAllocatorRegistry::snapshot();
  EXPECT_EQ(after.live_threads.size(), before.live_threads.size());
  EXPECT_EQ(after.exited_threads, before.exited_threads + kThreads);
  EXPECT_EQ(after.exited_total.lookups - before.exited_total.lookups,
            10u * kGenerations * kThreads);
  EXPECT_EQ(after.total.lookups - before.total.lookups, 10u * kGenerations * kThreads);
  EXPECT_EQ(after.total_leases - before.total_leases,
            static_cast<std::uint64_t>(kThreads) * kGenerations);
  EXPECT_EQ(after.exited_total.reserved_bytes, 0u);
  EXPECT_GT(after.exited_total.peak_bytes, before.exited_total.peak_bytes);
  EXPECT_EQ(after.total.reserved_bytes, before.total.reserved_bytes);
}

TEST(TempAllocatorRegistry, SnapshotWhileThreadsComeAndGo) {
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) {
      const TempAllocatorSnapshot s = TempAllocatorRegistry::snapshot();
      ASSERT_EQ(s.total.hits + s.total.misses, s.total.lookups);
      ASSERT_EQ(s.total.in_use_bytes + s.total.cached_bytes, s.total.reserved_bytes);
    }
  });
  for (int round = 0; round < 50; ++round) {
    std::thread([] {
      TempAllocatorLease lease;
      lease.allocator().allocate(12345);
    }).join();
  }
  stop = true;
  reader.join();
}

TEST(TempAllocatorRegistry, OptionsApplyToThreadsCreatedLater) {
  CachingAllocator::Options o;
  o.max_cached_bytes = 4096;
  set_thread_temp_allocator_options(o);
  std::thread([] {
    EXPECT_EQ(thread_temp_allocator().options().max_cached_bytes, 4096u);
    TempAllocatorLease lease;
    for (int i = 0; i < 4; ++i) lease.allocator().allocate(4096);
  }).join();
  set_thread_temp_allocator_options(CachingAllocator::Options{});
}

}  // namespace
}  // namespace hearth
