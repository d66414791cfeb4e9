// A bump allocator over a buffer the caller owns.
//
// Used for memory whose size is known when a model is loaded: the planned
// activation memory of a warm Module instance and load-time structures. It
// never touches the heap; allocate() is a pointer bump, reset() rewinds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "memory/memory_allocator.h"

namespace hearth {

class ArenaAllocator final : public MemoryAllocator {
 public:
  // `buffer` must outlive the allocator; it is not freed by it.
  ArenaAllocator(void* buffer, std::size_t capacity) noexcept;

  ArenaAllocator(const ArenaAllocator&) = delete;
  ArenaAllocator& operator=(const ArenaAllocator&) = delete;

  void* allocate(std::size_t size, std::size_t alignment = kDefaultAlignment) noexcept override;
  void reset() noexcept override { used_ = 0; }

  // Bytes consumed so far, alignment padding included.
  std::size_t used() const noexcept { return used_; }
  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t free() const noexcept { return capacity_ - used_; }
  // Highest used() seen since construction, across resets.
  std::size_t high_water() const noexcept { return high_water_; }
  const void* base() const noexcept { return reinterpret_cast<const void*>(base_); }

 private:
  std::uintptr_t base_;
  std::size_t capacity_;
  std::size_t used_ = 0;
  std::size_t high_water_ = 0;
};

}  // namespace hearth
