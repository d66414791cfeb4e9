#include "memory/streamed_buffer.h"

#include <sys/mman.h>

#include <cstdlib>

namespace hearth {

void* allocate_streamed(std::size_t bytes) noexcept {
  if (bytes < kHugePageBytes) return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  // aligned_alloc wants a size that is a multiple of the alignment; the part
  // past `bytes` is never touched, so it costs address space only.
  const std::size_t whole = bytes / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes,
                               (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
  if (p != nullptr) (void)madvise(p, whole, MADV_HUGEPAGE);  // advice only: failure is harmless
  return p;
}

}  // namespace hearth
