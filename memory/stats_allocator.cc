#include "memory/stats_allocator.h"

#include <cstdio>

namespace hearth {

void* StatsAllocator::allocate(std::size_t size, std::size_t alignment) noexcept {
  void* p = wrapped_->allocate(size, alignment);
  if (p == nullptr) {
    ++stats_.failures;
    return nullptr;
  }
  ++stats_.allocations;
  stats_.in_use_bytes += size;
  if (stats_.in_use_bytes > stats_.peak_in_use_bytes)
    stats_.peak_in_use_bytes = stats_.in_use_bytes;
  return p;
}

void StatsAllocator::reset() noexcept {
  wrapped_->reset();
  stats_.in_use_bytes = 0;
  ++stats_.resets;
}

void StatsAllocator::set_wrapped(MemoryAllocator& wrapped) noexcept {
  wrapped_ = &wrapped;
  stats_.in_use_bytes = 0;
}

std::string format_usage_line(std::string_view label, std::size_t used, std::size_t capacity) {
  char buf[192];
  if (capacity == 0) {
    std::snprintf(buf, sizeof buf, ": %zu bytes", used);
  } else {
    const std::size_t free_bytes = used > capacity ? 0 : capacity - used;
    const unsigned pct =
        static_cast<unsigned>((static_cast<double>(used) * 100.0) / static_cast<double>(capacity));
    std::snprintf(buf, sizeof buf, ": %zu / %zu free: %zu ( used: %u %% )", used, capacity,
                  free_bytes, pct);
  }
  std::string line(label);
  line += buf;
  return line;
}

}  // namespace hearth
