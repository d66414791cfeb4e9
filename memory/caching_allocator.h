// The caching temp allocator: scratch memory for one thread's kernels.
//
// Every allocate() is served from a cache of heap blocks grouped by size class
// (memory/size_classes.h); reset() hands every live block back to the cache,
// so after the first decode step a request finds its block again and no heap
// call is made. The cache is bounded: when reset() leaves more than
// `max_cached_bytes` cached, the least recently used blocks are freed until it
// fits (a trim), rather than dropping the whole cache.
//
// Placement policy, in order:
//  1. a cached block of the request's own class (most recently released first);
//  2. a cached block of up to three classes larger (at most ~1.7x the request);
//  3. a new heap block. When an idle cached block of the same doubling but a
//     smaller class exists, the request has outgrown its old block (scratch that
//     grows with the KV length does this), so the new block is made three
//     classes larger to leave headroom; otherwise it is the request's class.
//
// Ownership: one thread owns the allocator (the thread that constructed it).
// allocate() and reset() take no lock; calling them from another thread is a
// bug, and a check on every call aborts with a message when it happens (the
// check is one thread-local address compare). Statistics are published through
// a sequence lock so that other threads (the metrics registry) can read a
// consistent copy at any time without stopping the owner.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "memory/memory_allocator.h"
#include "memory/size_classes.h"

namespace hearth {

// A consistent copy of one allocator's counters. Byte figures count whole
// blocks (class-rounded), since that is the memory actually held.
struct CachingAllocatorStats {
  std::uint64_t lookups = 0;   // allocate() calls
  std::uint64_t hits = 0;      // served from the cache
  std::uint64_t misses = 0;    // needed the heap (or failed)
  std::uint64_t failures = 0;  // returned nullptr
  std::uint64_t resets = 0;
  std::uint64_t trims = 0;  // blocks freed to honour the cap
  std::uint64_t trimmed_bytes = 0;
  std::uint64_t in_use_bytes = 0;           // live blocks
  std::uint64_t peak_bytes = 0;             // highest in_use_bytes since construction
  std::uint64_t last_reset_peak_bytes = 0;  // highest in_use_bytes between the last two resets
  std::uint64_t span_peak_bytes = 0;  // highest in_use_bytes since begin_span(), resets or not
  std::uint64_t cached_bytes = 0;     // idle blocks kept for reuse
  std::uint64_t reserved_bytes = 0;   // in use + cached: what the heap holds for us

  double hit_ratio() const noexcept {
    return lookups == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(lookups);
  }
  // Adds counters; byte gauges add too, so a sum over threads is the process total
  // (peaks add up to an upper bound of the process's concurrent temp memory).
  CachingAllocatorStats& operator+=(const CachingAllocatorStats& o) noexcept;
};

class CachingAllocator final : public MemoryAllocator {
 public:
  struct Options {
    // Idle bytes kept after a reset; beyond this the least recently used
    // blocks are freed.
    std::size_t max_cached_bytes = std::size_t{256} << 20;
  };

  CachingAllocator() noexcept : CachingAllocator(Options{}) {}
  explicit CachingAllocator(Options options) noexcept;
  ~CachingAllocator() override;

  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Alignment is at least 64 whatever is asked; larger powers of two are honoured.
  void* allocate(std::size_t size, std::size_t alignment = kDefaultAlignment) noexcept override;
  // Returns every live block to the cache, then trims to the cap.
  void reset() noexcept override;
  // Starts a span for span_peak_bytes: the peak of a piece of work whose
  // parts reset in between (a forward resets at every layer), called by the
  // owner of that work's lease before it begins. Spans do not nest.
  void begin_span() noexcept;

  // Frees least recently used idle blocks until at most `keep_bytes` stay cached.
  void trim_cache(std::size_t keep_bytes) noexcept;

  // Safe from any thread.
  CachingAllocatorStats stats() const noexcept;

  const Options& options() const noexcept { return options_; }

  struct Block;  // opaque; defined in caching_allocator.cc

 private:
  struct List {
    Block* head = nullptr;
    Block* tail = nullptr;
  };

  void check_owner() const noexcept;
  Block* take_cached(int size_class, std::size_t alignment) noexcept;
  Block* new_block(int size_class, std::size_t alignment) noexcept;
  bool outgrown(int size_class) const noexcept;
  void free_block(Block* b) noexcept;

  // The counters, written only by the owner, read by anyone under the sequence lock.
  struct Published {
    std::atomic<std::uint64_t> seq{0};  // odd while the owner is writing
    std::atomic<std::uint64_t> lookups{0}, hits{0}, misses{0}, failures{0}, resets{0}, trims{0},
        trimmed_bytes{0}, in_use_bytes{0}, peak_bytes{0}, window_peak_bytes{0},
        last_reset_peak_bytes{0}, span_peak_bytes{0}, cached_bytes{0}, reserved_bytes{0};
  };
  void begin_write() noexcept;
  void end_write() noexcept;

  Options options_;
  const void* owner_;
  // free_[c]: idle blocks of class c, most recently released at the head.
  std::array<List, size_classes::kCount> free_{};
  List lru_;   // every idle block, most recently released at the head
  List live_;  // blocks handed out since the last reset, in allocation order
  Published pub_;
};

}  // namespace hearth
