// Counts heap allocations made by any thread while a HeapCounter is active,
// to prove that a hot path allocates nothing.
//
// Linking hearth_test_support replaces the global operator new family and
// interposes malloc/calloc/realloc/posix_memalign/aligned_alloc/memalign
// (forwarding to glibc's __libc_* entry points). Under a sanitizer, which
// interposes malloc itself, only operator new is counted; available() says
// whether the malloc family is counted too.
#pragma once

#include <cstdint>

namespace hearth::testing {

class HeapCounter {
 public:
  HeapCounter();   // starts counting
  ~HeapCounter();  // stops
  HeapCounter(const HeapCounter&) = delete;
  HeapCounter& operator=(const HeapCounter&) = delete;

  // Allocations (new, malloc, ...) seen since construction, from all threads.
  std::uint64_t allocations() const;

  // True when malloc-family calls are counted as well as operator new.
  static bool counts_malloc();
};

}  // namespace hearth::testing
