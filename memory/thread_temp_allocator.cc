#include "memory/thread_temp_allocator.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

namespace hearth {
namespace {

// One registered thread. Owned by that thread's ThreadSlot; listed in the
// registry between registration and thread exit.
struct Entry {
  CachingAllocator allocator;
  std::uint64_t thread_id;
  std::string thread_name;
  std::atomic<std::uint64_t> leases{0};  // written by the owner, read by snapshot()
  int lease_depth = 0;                   // owner only

  explicit Entry(CachingAllocator::Options o) : allocator(o) {}
};

// The registry's state. Created on first use and deliberately never destroyed,
// so threads that exit during static destruction can still fold their totals in.
struct Registry {
  std::mutex mu;
  // Guarded by mu.
  std::vector<Entry*> live;
  CachingAllocatorStats exited_total;
  std::uint64_t exited_threads = 0;
  std::uint64_t exited_leases = 0;
  CachingAllocator::Options options;
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

// The thread-local owner of a thread's Entry; its destructor runs at thread exit.
struct ThreadSlot {
  std::unique_ptr<Entry> entry;

  Entry& get() {
    if (entry == nullptr) [[unlikely]]
      create();
    return *entry;
  }

  void create() {
    Registry& r = registry();
    CachingAllocator::Options options;
    {
      std::lock_guard<std::mutex> lock(r.mu);
      options = r.options;
    }
    auto e = std::make_unique<Entry>(options);
    e->thread_id = static_cast<std::uint64_t>(::syscall(SYS_gettid));
    char name[32] = {};
    if (pthread_getname_np(pthread_self(), name, sizeof name) == 0) e->thread_name = name;
    std::lock_guard<std::mutex> lock(r.mu);
    r.live.push_back(e.get());
    entry = std::move(e);
  }

  ~ThreadSlot() {
    if (entry == nullptr) return;
    Registry& r = registry();
    const CachingAllocatorStats last = entry->allocator.stats();
    std::lock_guard<std::mutex> lock(r.mu);
    r.live.erase(std::find(r.live.begin(), r.live.end(), entry.get()));
    // A thread that has exited holds no memory any more: keep its counters and
    // peaks, but its in-use, cached and reserved bytes are gone.
    CachingAllocatorStats folded = last;
    folded.in_use_bytes = folded.cached_bytes = folded.reserved_bytes = 0;
    r.exited_total += folded;
    r.exited_leases += entry->leases.load(std::memory_order_relaxed);
    ++r.exited_threads;
    // The allocator is destroyed below, after it left the list: no snapshot can see it.
  }
};

thread_local ThreadSlot slot;

}  // namespace

void set_thread_temp_allocator_options(CachingAllocator::Options options) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.options = options;
}

CachingAllocator& thread_temp_allocator() { return slot.get().allocator; }

TempAllocatorLease::TempAllocatorLease() {
  Entry& e = slot.get();
  allocator_ = &e.allocator;
  outermost_ = e.lease_depth++ == 0;
  if (outermost_)
    e.leases.store(e.leases.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

TempAllocatorLease::~TempAllocatorLease() {
  Entry& e = *slot.entry;
  --e.lease_depth;
  if (outermost_) allocator_->reset();
}

TempAllocatorSnapshot TempAllocatorRegistry::snapshot() {
  Registry& r = registry();
  TempAllocatorSnapshot snap;
  std::lock_guard<std::mutex> lock(r.mu);
  snap.live_threads.reserve(r.live.size());
  for (const Entry* e : r.live) {
    ThreadTempAllocatorStats t;
    t.thread_id = e->thread_id;
    t.thread_name = e->thread_name;
    t.leases = e->leases.load(std::memory_order_relaxed);
    t.stats = e->allocator.stats();
    snap.total += t.stats;
    snap.total_leases += t.leases;
    snap.live_threads.push_back(std::move(t));
  }
  snap.exited_threads = r.exited_threads;
  snap.exited_total = r.exited_total;
  snap.total += r.exited_total;
  snap.total_leases += r.exited_leases;
  return snap;
}

}  // namespace hearth
