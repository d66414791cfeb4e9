#include "kernels/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "kernels/cpu_features.h"

namespace hearth::kernels {

namespace {

// A range word: epoch (24 bits) | front (20 bits) | back (20 bits).
// region_: epoch (24 bits) | chunk count (20 bits).
constexpr int kEpochShift = 40, kFrontShift = 20;
constexpr std::uint64_t kField = (std::uint64_t{1} << 20) - 1;
constexpr std::uint64_t kEpochMask = (std::uint64_t{1} << (64 - kEpochShift)) - 1;
constexpr std::size_t kMaxChunks = kField;  // 20 bits of chunk index
// How long an idle worker keeps looking for the next region before it
// sleeps: decode issues regions a few to a few tens of microseconds apart.
constexpr auto kSpinTime = std::chrono::microseconds(200);
// The owner of a range claims 1/kOwnerShare of what is left of it at a time
// (at least one chunk), so its stream runs in few calls while the range's
// end is left in single chunks for others to take.
constexpr std::uint64_t kOwnerShare = 2;

std::uint64_t pack(std::uint64_t epoch, std::uint64_t front, std::uint64_t back) {
  return (epoch << kEpochShift) | (front << kFrontShift) | back;
}
std::uint64_t epoch_of(std::uint64_t w) { return w >> kEpochShift; }
std::uint64_t front_of(std::uint64_t w) { return (w >> kFrontShift) & kField; }
std::uint64_t back_of(std::uint64_t w) { return w & kField; }

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(std::size_t threads)
    : threads_(threads == 0 ? static_cast<std::size_t>(cpu_features().physical_cores) : threads) {
  if (threads_ > 1) {
    pool_ = pthreadpool_create(threads_);
    ranges_ = std::make_unique<RangeWord[]>(threads_);
    hints_ = std::make_unique<Hint[]>(threads_);
    workers_.reserve(threads_ - 1);
    for (std::size_t i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(sleep_mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
  if (pool_ != nullptr) pthreadpool_destroy(pool_);
}

std::size_t ThreadPool::chunk_count(std::size_t range, std::size_t grain) const noexcept {
  if (grain == 0) grain = 1;
  const std::size_t by_grain = (range + grain - 1) / grain;
  const std::size_t by_threads = threads_ * kChunksPerThread;
  return by_grain < by_threads ? by_grain : by_threads;
}

void ThreadPool::run_chunks(std::size_t self) {
  const std::uint64_t epoch = epoch_of(region_.load(std::memory_order_acquire));
  // Read the region's task first: a successful claim (the range word still
  // carries this epoch) proves the region, and so these values, unchanged.
  const Task task = task_.load(std::memory_order_relaxed);
  void* const context = context_.load(std::memory_order_relaxed);
  for (std::size_t k = 0; k < threads_; ++k) {
    const std::size_t r = (self + k) % threads_;
    std::atomic<std::uint64_t>& word = ranges_[r].word;
    const bool own = k == 0;
    std::uint64_t w = word.load(std::memory_order_acquire);
    while (epoch_of(w) == epoch && front_of(w) < back_of(w)) {
      // The owner walks its range forwards, a share of what is left at a
      // time; others take one chunk at a time from its back.
      const std::uint64_t left = back_of(w) - front_of(w);
      const std::uint64_t take = own ? std::max<std::uint64_t>(1, left / kOwnerShare) : 1;
      const std::uint64_t claimed = own ? w + (take << kFrontShift) : w - 1;
      if (!word.compare_exchange_weak(w, claimed, std::memory_order_acq_rel,
                                      std::memory_order_acquire))
        continue;
      const std::size_t first = static_cast<std::size_t>(own ? front_of(w) : back_of(w) - 1);
      task(context, first, first + static_cast<std::size_t>(take));
      done_.fetch_add(static_cast<std::size_t>(take), std::memory_order_release);
      w = word.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::hint_next_region(std::size_t thread, const void* p, std::size_t bytes) noexcept {
  if (thread == 0 || thread >= threads_) return;
  hints_[thread].bytes.store(bytes, std::memory_order_relaxed);
  hints_[thread].p.store(static_cast<const std::uint8_t*>(p), std::memory_order_release);
}

void ThreadPool::prefetch_hint(std::size_t self, std::uint64_t epoch) {
  const std::uint8_t* p = hints_[self].p.exchange(nullptr, std::memory_order_acquire);
  if (p == nullptr) return;
  const std::size_t bytes = hints_[self].bytes.load(std::memory_order_relaxed);
  // Eight lines between looks at the region word: a prefetch waits when
  // the core's line-fill buffers are full, so this is a few hundred ns.
  constexpr std::size_t kLine = 64, kBatch = 8 * kLine;
  for (std::size_t off = 0; off < bytes; off += kBatch) {
    if (epoch_of(region_.load(std::memory_order_relaxed)) != epoch) return;
    const std::size_t end = off + kBatch < bytes ? off + kBatch : bytes;
    for (std::size_t l = off; l < end; l += kLine) __builtin_prefetch(p + l, 0, 2);
  }
}

void ThreadPool::worker_main(std::size_t self) {
  std::uint64_t seen = 0;  // the last region's epoch this worker looked at
  for (;;) {
    const std::uint64_t epoch = epoch_of(region_.load(std::memory_order_acquire));
    if (epoch != seen) {
      seen = epoch;
      run_chunks(self);
      prefetch_hint(self, seen);
      continue;
    }
    // Spin a little for the next region, then sleep until one is published.
    const auto until = std::chrono::steady_clock::now() + kSpinTime;
    bool found = false;
    while (!found && std::chrono::steady_clock::now() < until) {
      for (int i = 0; i < 64 && !found; ++i) {
        found = epoch_of(region_.load(std::memory_order_acquire)) != seen;
        cpu_relax();
      }
    }
    if (found) continue;
    std::unique_lock<std::mutex> lock(sleep_mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    wake_.wait(lock,
               [&] { return stop_ || epoch_of(region_.load(std::memory_order_seq_cst)) != seen; });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    if (stop_) return;
  }
}

void ThreadPool::run(std::size_t n, Task task, void* context) {
  // Single-threaded pools, oversized regions, and callers that find the pool
  // busy with another caller's region run on the calling thread.
  if (workers_.empty() || n > kMaxChunks || !region_mu_.try_lock()) {
    task(context, 0, n);
    return;
  }
  std::lock_guard<std::mutex> region(region_mu_, std::adopt_lock);
  task_.store(task, std::memory_order_relaxed);
  context_.store(context, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  const std::uint64_t epoch = (epoch_of(region_.load(std::memory_order_relaxed)) + 1) & kEpochMask;
  for (std::size_t i = 0; i < threads_; ++i)
    ranges_[i].word.store(pack(epoch, n * i / threads_, n * (i + 1) / threads_),
                          std::memory_order_relaxed);
  region_.store(pack(epoch, 0, n), std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(sleep_mu_);
    wake_.notify_all();
  }
  run_chunks(0);
  // Chunks claimed by workers are running now; wait for them, yielding the
  // core now and then in case one of them is waiting for it.
  for (unsigned spins = 0; done_.load(std::memory_order_acquire) != n; ++spins) {
    if (spins % 256 == 255) {
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
  }
}

namespace {
std::mutex default_mu;
std::size_t default_threads = 0;  // guarded by default_mu
std::atomic<ThreadPool*> default_pool{nullptr};
}  // namespace

ThreadPool& default_thread_pool() {
  ThreadPool* p = default_pool.load(std::memory_order_acquire);
  if (p != nullptr) return *p;
  std::lock_guard<std::mutex> lock(default_mu);
  p = default_pool.load(std::memory_order_relaxed);
  if (p == nullptr) {
    p = new ThreadPool(default_threads);  // lives for the whole process
    default_pool.store(p, std::memory_order_release);
  }
  return *p;
}

bool set_default_thread_count(std::size_t threads) {
  std::lock_guard<std::mutex> lock(default_mu);
  ThreadPool* p = default_pool.load(std::memory_order_relaxed);
  if (p != nullptr)
    return p->threads() ==
           (threads == 0 ? static_cast<std::size_t>(cpu_features().physical_cores) : threads);
  default_threads = threads;
  return true;
}

}  // namespace hearth::kernels
