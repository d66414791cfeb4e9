#include "memory/arena_allocator.h"

namespace hearth {

ArenaAllocator::ArenaAllocator(void* buffer, std::size_t capacity) noexcept
    : base_(reinterpret_cast<std::uintptr_t>(buffer)),
      capacity_(buffer == nullptr ? 0 : capacity) {}

void* ArenaAllocator::allocate(std::size_t size, std::size_t alignment) noexcept {
  if (!is_power_of_two(alignment)) return nullptr;
  const std::uintptr_t cursor = base_ + used_;
  // Padding to the next multiple of `alignment`; computed without forming an
  // out-of-range address so a huge alignment fails cleanly.
  const std::size_t padding = (alignment - (cursor & (alignment - 1))) & (alignment - 1);
  const std::size_t available = capacity_ - used_;
  if (padding > available || size > available - padding) return nullptr;
  // A zero-byte request still gets a distinct address inside the arena.
  const std::size_t consumed = padding + (size == 0 ? 1 : size);
  if (consumed > available) return nullptr;
  used_ += consumed;
  if (used_ > high_water_) high_water_ = used_;
  return reinterpret_cast<void*>(cursor + padding);
}

}  // namespace hearth
