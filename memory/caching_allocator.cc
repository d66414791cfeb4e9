#include "memory/caching_allocator.h"

#include <cstdio>
#include <cstdlib>
#include <new>

namespace hearth {
namespace {

// The address of this thread-local is a cheap, unique identity for the calling thread.
thread_local char thread_tag;

std::uint64_t load(const std::atomic<std::uint64_t>& a) noexcept {
  return a.load(std::memory_order_relaxed);
}

// Owner-only updates of a published counter: a plain load and store, no RMW.
//
// Sequence-lock ordering without fences (which TSan cannot model): the owner
// makes `seq` odd, then writes counters with release stores; a reader loads
// `seq`, then the counters with acquire loads, then `seq` again. A reader that
// sees any counter written inside a section synchronises with that store and
// therefore also sees the odd `seq`, so its second load differs and it
// retries. On x86 release stores and acquire loads are plain moves.
void publish(std::atomic<std::uint64_t>& a, std::uint64_t value) noexcept {
  a.store(value, std::memory_order_release);
}
void add(std::atomic<std::uint64_t>& a, std::uint64_t delta) noexcept {
  publish(a, load(a) + delta);
}
void sub(std::atomic<std::uint64_t>& a, std::uint64_t delta) noexcept {
  publish(a, load(a) - delta);
}
void raise(std::atomic<std::uint64_t>& a, std::uint64_t value) noexcept {
  if (value > load(a)) publish(a, value);
}
std::uint64_t read(const std::atomic<std::uint64_t>& a) noexcept {
  return a.load(std::memory_order_acquire);
}

}  // namespace

struct CachingAllocator::Block {
  void* memory;
  std::size_t bytes;
  std::size_t alignment;
  int size_class;
  Block* prev;  // links in free_[size_class] while idle, in live_ while handed out
  Block* next;
  Block* lru_prev;  // links in lru_ while idle
  Block* lru_next;
};

namespace {

using Block = CachingAllocator::Block;

template <Block* Block::*Prev, Block* Block::*Next, typename L>
void push_front(L& list, Block* b) noexcept {
  b->*Prev = nullptr;
  b->*Next = list.head;
  if (list.head != nullptr)
    list.head->*Prev = b;
  else
    list.tail = b;
  list.head = b;
}

template <Block* Block::*Prev, Block* Block::*Next, typename L>
void push_back(L& list, Block* b) noexcept {
  b->*Next = nullptr;
  b->*Prev = list.tail;
  if (list.tail != nullptr)
    list.tail->*Next = b;
  else
    list.head = b;
  list.tail = b;
}

template <Block* Block::*Prev, Block* Block::*Next, typename L>
void unlink(L& list, Block* b) noexcept {
  if (b->*Prev != nullptr)
    (b->*Prev)->*Next = b->*Next;
  else
    list.head = b->*Next;
  if (b->*Next != nullptr)
    (b->*Next)->*Prev = b->*Prev;
  else
    list.tail = b->*Prev;
  b->*Prev = b->*Next = nullptr;
}

constexpr auto kPrev = &Block::prev;
constexpr auto kNext = &Block::next;
constexpr auto kLruPrev = &Block::lru_prev;
constexpr auto kLruNext = &Block::lru_next;

// A request may take an idle block up to this many classes above its own.
constexpr int kUpwardReach = 3;

}  // namespace

CachingAllocatorStats& CachingAllocatorStats::operator+=(const CachingAllocatorStats& o) noexcept {
  lookups += o.lookups;
  hits += o.hits;
  misses += o.misses;
  failures += o.failures;
  resets += o.resets;
  trims += o.trims;
  trimmed_bytes += o.trimmed_bytes;
  in_use_bytes += o.in_use_bytes;
  peak_bytes += o.peak_bytes;
  last_reset_peak_bytes += o.last_reset_peak_bytes;
  span_peak_bytes += o.span_peak_bytes;
  cached_bytes += o.cached_bytes;
  reserved_bytes += o.reserved_bytes;
  return *this;
}

CachingAllocator::CachingAllocator(Options options) noexcept
    : options_(options), owner_(&thread_tag) {}

CachingAllocator::~CachingAllocator() {
  for (Block* b = live_.head; b != nullptr;) {
    Block* next = b->next;
    free_block(b);
    b = next;
  }
  for (Block* b = lru_.head; b != nullptr;) {
    Block* next = b->lru_next;
    free_block(b);
    b = next;
  }
}

void CachingAllocator::check_owner() const noexcept {
  if (owner_ != &thread_tag) [[unlikely]] {
    std::fprintf(stderr,
                 "hearth: CachingAllocator %p used from a thread that does not own it; a temp "
                 "allocator belongs to one thread (take a lease on your own thread's allocator)\n",
                 static_cast<const void*>(this));
    std::abort();
  }
}

void CachingAllocator::begin_write() noexcept {
  pub_.seq.store(load(pub_.seq) + 1, std::memory_order_relaxed);
}

void CachingAllocator::end_write() noexcept {
  pub_.seq.store(load(pub_.seq) + 1, std::memory_order_release);
}

Block* CachingAllocator::take_cached(int size_class, std::size_t alignment) noexcept {
  const int last = size_class + kUpwardReach < size_classes::kCount ? size_class + kUpwardReach
                                                                    : size_classes::kCount - 1;
  for (int c = size_class; c <= last; ++c) {
    for (Block* b = free_[c].head; b != nullptr; b = b->next) {
      if (b->alignment < alignment) continue;  // only over-aligned requests ever skip
      unlink<kPrev, kNext>(free_[c], b);
      unlink<kLruPrev, kLruNext>(lru_, b);
      return b;
    }
  }
  return nullptr;
}

bool CachingAllocator::outgrown(int size_class) const noexcept {
  for (int c = size_class - 1; c >= 0 && c >= size_class - size_classes::kClassesPerDoubling; --c) {
    if (free_[c].head != nullptr) return true;
  }
  return false;
}

Block* CachingAllocator::new_block(int size_class, std::size_t alignment) noexcept {
  Block* b = new (std::nothrow) Block{};
  if (b == nullptr) return nullptr;
  const std::size_t bytes = size_classes::bytes_of(size_class);
  void* memory = nullptr;
  if (posix_memalign(&memory, alignment, bytes) != 0) {
    delete b;
    return nullptr;
  }
  b->memory = memory;
  b->bytes = bytes;
  b->alignment = alignment;
  b->size_class = size_class;
  return b;
}

void CachingAllocator::free_block(Block* b) noexcept {
  std::free(b->memory);
  delete b;
}

void* CachingAllocator::allocate(std::size_t size, std::size_t alignment) noexcept {
  check_owner();
  begin_write();
  add(pub_.lookups, 1);
  Block* b = nullptr;
  if (is_power_of_two(alignment) && size <= size_classes::kMaxBytes) {
    if (alignment < kDefaultAlignment) alignment = kDefaultAlignment;
    const int size_class = size_classes::class_of(size);
    b = take_cached(size_class, alignment);
    if (b != nullptr) {
      add(pub_.hits, 1);
      sub(pub_.cached_bytes, b->bytes);
    } else {
      add(pub_.misses, 1);
      int target = size_class;
      if (outgrown(size_class)) {
        target = size_class + kUpwardReach < size_classes::kCount ? size_class + kUpwardReach
                                                                  : size_classes::kCount - 1;
      }
      b = new_block(target, alignment);
      if (b == nullptr && target != size_class) b = new_block(size_class, alignment);
      if (b != nullptr) add(pub_.reserved_bytes, b->bytes);
    }
  } else {
    add(pub_.misses, 1);
  }
  if (b == nullptr) {
    add(pub_.failures, 1);
    end_write();
    return nullptr;
  }
  push_back<kPrev, kNext>(live_, b);
  add(pub_.in_use_bytes, b->bytes);
  const std::uint64_t in_use = load(pub_.in_use_bytes);
  raise(pub_.peak_bytes, in_use);
  raise(pub_.window_peak_bytes, in_use);
  raise(pub_.span_peak_bytes, in_use);
  end_write();
  return b->memory;
}

void CachingAllocator::begin_span() noexcept {
  check_owner();
  begin_write();
  publish(pub_.span_peak_bytes, load(pub_.in_use_bytes));
  end_write();
}

void CachingAllocator::reset() noexcept {
  check_owner();
  begin_write();
  // Walk in allocation order so the last block handed out ends up most recent in the LRU.
  std::uint64_t released = 0;
  for (Block* b = live_.head; b != nullptr;) {
    Block* next = b->next;
    push_front<kPrev, kNext>(free_[b->size_class], b);
    push_front<kLruPrev, kLruNext>(lru_, b);
    released += b->bytes;
    b = next;
  }
  live_ = List{};
  add(pub_.cached_bytes, released);
  publish(pub_.in_use_bytes, 0);
  publish(pub_.last_reset_peak_bytes, load(pub_.window_peak_bytes));
  publish(pub_.window_peak_bytes, 0);
  add(pub_.resets, 1);
  end_write();
  trim_cache(options_.max_cached_bytes);
}

void CachingAllocator::trim_cache(std::size_t keep_bytes) noexcept {
  check_owner();
  if (load(pub_.cached_bytes) <= keep_bytes) return;
  begin_write();
  while (load(pub_.cached_bytes) > keep_bytes && lru_.tail != nullptr) {
    Block* b = lru_.tail;
    unlink<kLruPrev, kLruNext>(lru_, b);
    unlink<kPrev, kNext>(free_[b->size_class], b);
    sub(pub_.cached_bytes, b->bytes);
    sub(pub_.reserved_bytes, b->bytes);
    add(pub_.trims, 1);
    add(pub_.trimmed_bytes, b->bytes);
    free_block(b);
  }
  end_write();
}

CachingAllocatorStats CachingAllocator::stats() const noexcept {
  CachingAllocatorStats s;
  // Sequence-lock read: retry while the owner is mid-update. The owner's
  // critical sections are a few dozen instructions, so this settles quickly.
  for (;;) {
    const std::uint64_t before = pub_.seq.load(std::memory_order_acquire);
    if ((before & 1) == 0) {
      s.lookups = read(pub_.lookups);
      s.hits = read(pub_.hits);
      s.misses = read(pub_.misses);
      s.failures = read(pub_.failures);
      s.resets = read(pub_.resets);
      s.trims = read(pub_.trims);
      s.trimmed_bytes = read(pub_.trimmed_bytes);
      s.in_use_bytes = read(pub_.in_use_bytes);
      s.peak_bytes = read(pub_.peak_bytes);
      s.last_reset_peak_bytes = read(pub_.last_reset_peak_bytes);
      s.span_peak_bytes = read(pub_.span_peak_bytes);
      s.cached_bytes = read(pub_.cached_bytes);
      s.reserved_bytes = read(pub_.reserved_bytes);
      if (pub_.seq.load(std::memory_order_relaxed) == before) return s;
    }
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

}  // namespace hearth
