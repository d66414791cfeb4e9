// Size classes of the caching temp allocator.
//
// Requests are rounded up to a class, not cached by exact size: a scratch
// buffer that grows by a few bytes each decode step keeps landing in the same
// class and keeps hitting the cache. Classes are 64-byte steps up to 256 bytes,
// then four per power of two (256, 320, 384, 448, 512, 640, ...), so rounding
// wastes at most 25% of a block and 12.5% on average for uniform sizes.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace hearth::size_classes {

inline constexpr std::size_t kGranule = 64;
inline constexpr int kSmallClasses = 4;  // 64, 128, 192, 256
inline constexpr int kClassesPerDoubling = 4;
inline constexpr int kMaxLog2 = 46;  // largest block: 2^46 bytes (64 TiB)
inline constexpr std::size_t kMaxBytes = std::size_t{1} << kMaxLog2;
inline constexpr int kCount = kSmallClasses + (kMaxLog2 - 8) * kClassesPerDoubling;

// The class of a request of `size` bytes; size must be <= kMaxBytes.
constexpr int class_of(std::size_t size) noexcept {
  if (size <= kSmallClasses * kGranule)
    return size == 0 ? 0 : static_cast<int>((size - 1) / kGranule);
  // 2^k < size <= 2^(k+1), k >= 8; the doubling is split into four steps of 2^(k-2).
  const int k = 63 - std::countl_zero(static_cast<std::uint64_t>(size - 1));
  const std::size_t step = std::size_t{1} << (k - 2);
  const std::size_t j = (size - (std::size_t{1} << k) + step - 1) / step;  // 1..4
  return kSmallClasses + (k - 8) * kClassesPerDoubling + static_cast<int>(j) - 1;
}

// The block size of class `c`.
constexpr std::size_t bytes_of(int c) noexcept {
  if (c < kSmallClasses) return static_cast<std::size_t>(c + 1) * kGranule;
  const int m = c - kSmallClasses;
  const int k = 8 + m / kClassesPerDoubling;
  const std::size_t j = static_cast<std::size_t>(m % kClassesPerDoubling) + 1;
  return (std::size_t{1} << k) + j * (std::size_t{1} << (k - 2));
}

static_assert(bytes_of(class_of(1)) == 64);
static_assert(bytes_of(class_of(257)) == 320);
static_assert(bytes_of(class_of(512)) == 512);
static_assert(bytes_of(class_of(513)) == 640);
static_assert(bytes_of(kCount - 1) == kMaxBytes);

}  // namespace hearth::size_classes
