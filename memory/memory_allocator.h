// The interface every hearth allocator implements.
//
// Allocators hand out raw, uninitialised memory and never throw: a request that
// cannot be met returns nullptr, and the caller turns that into an error that
// names what it was allocating. Memory is given back all at once by reset(),
// never piece by piece: that is what lets the planned arena and the per-request
// temp allocator be a handful of instructions on the hot path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace hearth {

class MemoryAllocator {
 public:
  // Alignment used when the caller does not ask for one. 64 bytes covers a
  // cache line and an AVX-512 register, so SIMD kernels may use aligned loads.
  static constexpr std::size_t kDefaultAlignment = 64;

  virtual ~MemoryAllocator() = default;

  // Returns `size` bytes aligned to `alignment` (a power of two), or nullptr
  // when the request cannot be met or `alignment` is not a power of two.
  // A zero-byte request returns a valid, unique pointer.
  virtual void* allocate(std::size_t size, std::size_t alignment = kDefaultAlignment) noexcept = 0;

  // Invalidates every pointer handed out since the last reset and makes the
  // memory available again.
  virtual void reset() noexcept = 0;

  // Room for `count` objects of type T, or nullptr if count * sizeof(T)
  // overflows or the allocation fails. The objects are not constructed.
  template <typename T>
  T* allocate_array(std::size_t count, std::size_t alignment = alignof(T) > kDefaultAlignment
                                                                   ? alignof(T)
                                                                   : kDefaultAlignment) noexcept {
    std::size_t bytes = 0;
    if (!checked_mul(count, sizeof(T), &bytes)) return nullptr;
    return static_cast<T*>(allocate(bytes, alignment));
  }

  // Room for one object of type T, not constructed.
  template <typename T>
  T* allocate_instance() noexcept {
    return allocate_array<T>(1);
  }

  // a * b into *out; false when it does not fit in size_t.
  static bool checked_mul(std::size_t a, std::size_t b, std::size_t* out) noexcept {
    return !__builtin_mul_overflow(a, b, out);
  }

  static constexpr bool is_power_of_two(std::size_t x) noexcept {
    return x != 0 && (x & (x - 1)) == 0;
  }
};

}  // namespace hearth
