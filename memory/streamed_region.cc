#include "memory/streamed_region.h"

#include <sys/mman.h>

#include "memory/streamed_buffer.h"

namespace hearth {

namespace {
constexpr std::size_t kAlign = 64;
constexpr std::size_t kSmallPageBytes = 4096;
std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }
}  // namespace

std::shared_ptr<StreamedRegion> StreamedRegion::reserve(std::size_t capacity) noexcept {
  if (capacity == 0) capacity = 1;
  const std::size_t capacity_rounded = round_up(capacity, kHugePageBytes);
  // One huge page more than needed, so that a 2 MiB boundary lies inside.
  // MAP_NORESERVE: address space only; pages are made as they are written.
  const std::size_t mapping_bytes = capacity_rounded + kHugePageBytes;
  void* mapping = ::mmap(nullptr, mapping_bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) return nullptr;
  auto* base = reinterpret_cast<std::uint8_t*>(
      round_up(reinterpret_cast<std::uintptr_t>(mapping), kHugePageBytes));
  (void)::madvise(base, capacity_rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
  return std::shared_ptr<StreamedRegion>(
      new StreamedRegion(mapping, mapping_bytes, base, capacity));
}

StreamedRegion::StreamedRegion(void* mapping, std::size_t mapping_bytes, std::uint8_t* base,
                               std::size_t capacity) noexcept
    : mapping_(mapping), mapping_bytes_(mapping_bytes), base_(base), capacity_(capacity) {}

StreamedRegion::~StreamedRegion() { ::munmap(mapping_, mapping_bytes_); }

std::uint8_t* StreamedRegion::take(std::size_t bytes) noexcept {
  std::size_t used = used_.load(std::memory_order_relaxed);
  for (;;) {
    const std::size_t start = round_up(used, kAlign);
    if (start > capacity_ || bytes > capacity_ - start) return nullptr;
    if (used_.compare_exchange_weak(used, start + bytes, std::memory_order_relaxed)) {
      return base_ + start;
    }
  }
}

void StreamedRegion::release_unused() noexcept {
  const std::size_t from = round_up(used(), kSmallPageBytes);
  const std::size_t to = round_up(used(), kHugePageBytes);
  if (to > from) (void)::madvise(base_ + from, to - from, MADV_DONTNEED);
}

bool StreamedRegion::contains(const void* p) const noexcept {
  const auto* q = static_cast<const std::uint8_t*>(p);
  return q >= base_ && q < base_ + capacity_;
}

}  // namespace hearth
