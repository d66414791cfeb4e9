// Thread-local temp allocators, the leases requests take on them, and the
// process-wide registry that reports them.
//
// Every thread that needs scratch memory lazily owns one CachingAllocator.
// A request running on a worker thread takes a TempAllocatorLease; kernels
// called during the request take scratch from lease.allocator() (or from
// thread_temp_allocator()), and when the lease ends, on any exit path,
// the allocator is reset so the next request starts with a warm, empty cache.
//
//   {
//     hearth::TempAllocatorLease lease;          // this thread's allocator
//     run_generation(..., lease.allocator());
//   }                                             // reset here, even on early return
//
// TempAllocatorRegistry::snapshot() gives, from any thread, a consistent copy
// of every live thread's counters plus the totals of threads that have exited;
// the metrics exporter reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memory/caching_allocator.h"

namespace hearth {

// Options for allocators created from now on (threads that already own one
// keep theirs). Call at start-up, before worker threads run.
void set_thread_temp_allocator_options(CachingAllocator::Options options);

// The calling thread's allocator, created on first use and destroyed (its
// final counters folded into the registry) when the thread exits.
CachingAllocator& thread_temp_allocator();

// RAII: borrows the calling thread's temp allocator and resets it when
// destroyed. Leases nest on one thread: only the outermost resets, so an
// inner scope can never invalidate memory the outer one still uses.
class TempAllocatorLease {
 public:
  TempAllocatorLease();
  ~TempAllocatorLease();

  TempAllocatorLease(const TempAllocatorLease&) = delete;
  TempAllocatorLease& operator=(const TempAllocatorLease&) = delete;

  CachingAllocator& allocator() const noexcept { return *allocator_; }
  bool outermost() const noexcept { return outermost_; }

 private:
  CachingAllocator* allocator_;
  bool outermost_;
};

struct ThreadTempAllocatorStats {
  std::uint64_t thread_id = 0;  // the kernel's thread id (gettid)
  std::string thread_name;      // pthread name at registration
  std::uint64_t leases = 0;     // outermost leases taken so far
  CachingAllocatorStats stats;
};

struct TempAllocatorSnapshot {
  std::vector<ThreadTempAllocatorStats> live_threads;
  std::uint64_t exited_threads = 0;
  CachingAllocatorStats exited_total;  // folded in when each thread exited
  CachingAllocatorStats total;         // live threads + exited_total
  std::uint64_t total_leases = 0;
};

class TempAllocatorRegistry {
 public:
  // Consistent per thread; threads that start or exit during the call are
  // counted exactly once, either live or exited.
  static TempAllocatorSnapshot snapshot();
};

}  // namespace hearth
