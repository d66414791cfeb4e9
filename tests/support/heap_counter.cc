#include "tests/support/heap_counter.h"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(HEARTH_SANITIZER_ADDRESS) || defined(HEARTH_SANITIZER_THREAD)
#define HEARTH_COUNT_MALLOC 0
#else
#define HEARTH_COUNT_MALLOC 1
#endif

namespace {
std::atomic<int> active{0};
std::atomic<std::uint64_t> count{0};

inline void note() {
  if (active.load(std::memory_order_relaxed) > 0) count.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

#if HEARTH_COUNT_MALLOC
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);

void* malloc(std::size_t n) {
  note();
  return __libc_malloc(n);
}
void* calloc(std::size_t a, std::size_t b) {
  note();
  return __libc_calloc(a, b);
}
void* realloc(void* p, std::size_t n) {
  note();
  return __libc_realloc(p, n);
}
void free(void* p) { __libc_free(p); }
void* memalign(std::size_t align, std::size_t n) {
  note();
  return __libc_memalign(align, n);
}
void* aligned_alloc(std::size_t align, std::size_t n) {
  note();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, std::size_t align, std::size_t n) {
  note();
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return 22;  // EINVAL
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}  // extern "C"

// operator new goes through malloc above, so it is counted there.
#else
void* operator new(std::size_t n) {
  note();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  note();
  void* p = nullptr;
  if (posix_memalign(&p, static_cast<std::size_t>(a), n == 0 ? 1 : n) == 0) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return ::operator new(n, a); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  note();
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return ::operator new(n, std::nothrow);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  note();
  void* p = nullptr;
  return posix_memalign(&p, static_cast<std::size_t>(a), n == 0 ? 1 : n) == 0 ? p : nullptr;
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return ::operator new(n, a, std::nothrow);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#endif

namespace hearth::testing {

HeapCounter::HeapCounter() {
  count.store(0);
  active.fetch_add(1);
}
HeapCounter::~HeapCounter() { active.fetch_sub(1); }
std::uint64_t HeapCounter::allocations() const { return count.load(); }
bool HeapCounter::counts_malloc() { return HEARTH_COUNT_MALLOC != 0; }

}  // namespace hearth::testing
