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
  auto* start = static_cast<std::uint8_t*>(mapping);
  auto* base = reinterpret_cast<std::uint8_t*>(
      round_up(reinterpret_cast<std::uintptr_t>(mapping), kHugePageBytes));
  // The slack around the aligned range goes back at once (the tail is never
  // empty: the head is under one huge page).
  if (base > start) (void)::munmap(start, static_cast<std::size_t>(base - start));
  (void)::munmap(base + capacity_rounded,
                 mapping_bytes - capacity_rounded - static_cast<std::size_t>(base - start));
  (void)::madvise(base, capacity_rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
  return std::shared_ptr<StreamedRegion>(new StreamedRegion(base, capacity_rounded, capacity));
}

StreamedRegion::StreamedRegion(std::uint8_t* base, std::size_t mapped,
                               std::size_t capacity) noexcept
    : base_(base), mapped_(mapped), capacity_(capacity) {}

StreamedRegion::~StreamedRegion() {
  if (mapped_ > 0) ::munmap(base_, mapped_);
}

std::uint8_t* StreamedRegion::take(std::size_t bytes) noexcept {
  const std::size_t capacity = capacity_.load(std::memory_order_relaxed);
  std::size_t used = used_.load(std::memory_order_relaxed);
  for (;;) {
    const std::size_t start = round_up(used, kAlign);
    if (start > capacity || bytes > capacity - start) return nullptr;
    if (used_.compare_exchange_weak(used, start + bytes, std::memory_order_relaxed)) {
      return base_ + start;
    }
  }
}

void StreamedRegion::release_unused() noexcept {
  const std::size_t from = round_up(used(), kSmallPageBytes);
  const std::size_t to = round_up(used(), kHugePageBytes);
  if (to > from) (void)::madvise(base_ + from, to - from, MADV_DONTNEED);
  if (mapped_ > to) {
    (void)::munmap(base_ + to, mapped_ - to);
    mapped_ = to;
  }
  if (capacity() > to) capacity_.store(to, std::memory_order_relaxed);
}

bool StreamedRegion::contains(const void* p) const noexcept {
  const auto* q = static_cast<const std::uint8_t*>(p);
  return q >= base_ && q < base_ + capacity();
}

}  // namespace hearth
