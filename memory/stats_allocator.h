// A wrapper that measures any MemoryAllocator.
//
// Wrap the planned-activation arena, the method allocator or the temp
// allocator in a StatsAllocator and a runner can report memory the way an
// embedded runner does ("method_allocator_used: 320 / 62914560 free: ...",
// "peak_temp_allocator: 64 / 2097152"), without caring which allocator is
// underneath. The wrapped allocator is held by reference-to-interface and can
// be swapped with set_wrapped(), so the policy stays replaceable.
//
// Not thread-safe: like the allocators it wraps, it belongs to one owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "memory/memory_allocator.h"

namespace hearth {

struct AllocatorStats {
  std::size_t in_use_bytes = 0;       // requested bytes handed out since the last reset
  std::size_t peak_in_use_bytes = 0;  // highest in_use_bytes since construction
  std::uint64_t allocations = 0;      // successful allocate() calls
  std::uint64_t failures = 0;         // allocate() calls that returned nullptr
  std::uint64_t resets = 0;
};

class StatsAllocator final : public MemoryAllocator {
 public:
  // `wrapped` must outlive this object (or be replaced first).
  explicit StatsAllocator(MemoryAllocator& wrapped) noexcept : wrapped_(&wrapped) {}

  void* allocate(std::size_t size, std::size_t alignment = kDefaultAlignment) noexcept override;
  void reset() noexcept override;

  // Switches the underlying allocator. Statistics keep accumulating; bytes in
  // use restart at zero because the new allocator holds none of ours.
  void set_wrapped(MemoryAllocator& wrapped) noexcept;
  MemoryAllocator& wrapped() const noexcept { return *wrapped_; }

  const AllocatorStats& stats() const noexcept { return stats_; }
  // Clears the peak (e.g. at the start of a measured phase) to the current use.
  void reset_peak() noexcept { stats_.peak_in_use_bytes = stats_.in_use_bytes; }

 private:
  MemoryAllocator* wrapped_;
  AllocatorStats stats_;
};

// One report line in the embedded runner's format:
//   "<label>: <used> / <capacity> free: <capacity-used> ( used: <pct> % )"
// With capacity 0 (unbounded) the line is "<label>: <used> bytes".
std::string format_usage_line(std::string_view label, std::size_t used, std::size_t capacity);

}  // namespace hearth
