// The process's thread pool for kernels.
//
// A parallel region splits into n chunks, dealt out as one contiguous range
// per thread; each thread runs its own range front to back, half of what is
// left of it per claim (one call over adjacent chunks), then takes single
// chunks from the back of the others' ranges. The region ends when every
// chunk has run. (Contiguous ranges keep each thread's reads sequential,
// which a memory-bound decode needs to reach the streaming bandwidth;
// claiming halves lets chunks be fine, so a region's end waits for a small
// chunk, without splitting the owner's stream into many calls. Figures:
// docs/performance.md.)
//
// A worker that is not running (the machine is busy, or it is asleep)
// simply claims nothing: the caller runs the chunks itself and never waits
// for a thread that has no chunk. So a region's cost does not depend on
// every worker being scheduled, which a fixed-split pool (each thread owns a
// slice and the caller waits for all) cannot promise: there a descheduled
// worker stalls the whole step for its time slice.
//
// Workers spin for a short while after a region (decode runs regions a few
// microseconds apart), then sleep until the next one.
//
// Concurrent callers: one region runs on the pool at a time. A caller that
// finds the pool busy runs its own region on its own thread instead of
// waiting, so two generations on two cores each keep a core.
// Consequently chunks must never wait for each other.
//
// Chunks must not throw: a throw ends the process (std::terminate), where
// unwinding the caller would leave workers calling into its dead frame.
//
// parallel_for makes no heap allocation. XNNPACK (float layers) gets a
// separate pthreadpool through handle().
#pragma once

#include <pthreadpool.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace hearth::kernels {

class ThreadPool {
 public:
  // `threads` = 0 means one per physical core. A pool of 1 runs everything
  // on the caller and starts no thread; a pool of N starts N - 1 workers
  // (the caller is the N-th).
  explicit ThreadPool(std::size_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  std::size_t threads() const noexcept { return threads_; }
  // A pthreadpool of the same size, for libraries that take one (XNNPACK);
  // nullptr when the pool has a single thread.
  pthreadpool_t handle() const noexcept { return pool_; }

  // Calls fn(begin, end) on disjoint chunks covering [0, range); each chunk
  // spans at least `grain` items except perhaps the last. Returns when all
  // chunks are done.
  template <typename F>
  void parallel_for(std::size_t range, std::size_t grain, F&& fn) {
    if (range == 0) return;
    if (grain == 0) grain = 1;
    const std::size_t chunks = chunk_count(range, grain);
    if (chunks <= 1) {
      fn(std::size_t{0}, range);
      return;
    }
    Closure<std::remove_reference_t<F>> c{&fn, range, (range + chunks - 1) / chunks};
    run(chunks, &Closure<std::remove_reference_t<F>>::call, &c);
  }

  // Calls fn(chunk, begin, end) for chunk = 0..n_chunks-1 over an even split of
  // [0, range). Each chunk index runs exactly once, so a kernel can give chunk
  // i its own slice of scratch memory. n_chunks is at most threads().
  template <typename F>
  void parallel_chunks(std::size_t range, std::size_t n_chunks, F&& fn) {
    if (range == 0) return;
    if (n_chunks <= 1) {
      fn(std::size_t{0}, std::size_t{0}, range);
      return;
    }
    ChunkClosure<std::remove_reference_t<F>> c{&fn, range, n_chunks};
    run(n_chunks, &ChunkClosure<std::remove_reference_t<F>>::call, &c);
  }

  // A hint, given before the caller runs a region, about the region after
  // it: worker `thread` (1 to threads() - 1) will start that one by reading
  // [p, p + bytes). Once the worker has no chunk left in the coming region,
  // it prefetches those lines into its cache while it would otherwise only
  // wait (for the region's last chunks, then for the caller's serial work
  // between regions), and stops as soon as the next region starts. A decode
  // step streams every weight once, and this keeps the memory system busy
  // through those gaps. A hint is used once. Prefetches never fault, so a
  // stale or torn hint (another caller's, or a freed buffer's) costs
  // bandwidth only; hints of concurrent callers may replace each other.
  void hint_next_region(std::size_t thread, const void* p, std::size_t bytes) noexcept;

  // How many chunks parallel_for would use: no more than threads() x
  // kChunksPerThread (fine enough that taking chunks from a slower thread
  // evens out a region's end) and no chunk smaller than `grain`.
  static constexpr std::size_t kChunksPerThread = 32;
  std::size_t chunk_count(std::size_t range, std::size_t grain) const noexcept;

 private:
  template <typename F>
  struct Closure {
    F* fn;
    std::size_t range, chunk;
    // Chunks [first, last) are adjacent items: one call covers them all.
    static void call(void* self, std::size_t first, std::size_t last) noexcept {
      auto* c = static_cast<Closure*>(self);
      const std::size_t begin = first * c->chunk;
      const std::size_t end = last * c->chunk < c->range ? last * c->chunk : c->range;
      if (begin < end) (*c->fn)(begin, end);
    }
  };
  template <typename F>
  struct ChunkClosure {
    F* fn;
    std::size_t range, n;
    static void call(void* self, std::size_t first, std::size_t last) noexcept {
      auto* c = static_cast<ChunkClosure*>(self);
      for (std::size_t i = first; i < last; ++i)
        (*c->fn)(i, c->range * i / c->n, c->range * (i + 1) / c->n);
    }
  };

  using Task = void (*)(void*, std::size_t, std::size_t) noexcept;  // chunks [first, last)
  void run(std::size_t n, Task task, void* context);
  void worker_main(std::size_t self);
  // Runs chunks of the current region until none is left: first from the
  // front of range `self`, then from the backs of the others' ranges.
  void run_chunks(std::size_t self);
  // Prefetches the worker's hint until the region after `epoch` starts.
  void prefetch_hint(std::size_t self, std::uint64_t epoch);

  std::size_t threads_;
  pthreadpool_t pool_ = nullptr;  // for XNNPACK only
  std::vector<std::thread> workers_;

  // The current region. Its chunks are split into one contiguous range per
  // thread (the caller's is range 0, worker i's range i), so each thread
  // streams through adjacent rows; a thread that finishes its own range
  // takes chunks from the back of the others'. A range's word packs epoch
  // (24 bits), front and back (20 bits each): a claim (compare and swap) can
  // only succeed in the region whose task the claimer read. `region_` packs
  // the epoch and chunk count; task_ and context_ are written before the
  // ranges and `region_` are published (release), and not changed until
  // every chunk is done.
  struct alignas(64) RangeWord {
    std::atomic<std::uint64_t> word{0};
  };
  std::unique_ptr<RangeWord[]> ranges_;
  // Next-region hints, one per thread (index 0, the caller's, unused): the
  // caller stores bytes, then p (release); a worker takes p with an exchange.
  struct alignas(64) Hint {
    std::atomic<const std::uint8_t*> p{nullptr};
    std::atomic<std::size_t> bytes{0};
  };
  std::unique_ptr<Hint[]> hints_;
  std::atomic<std::uint64_t> region_{0};
  std::atomic<Task> task_{nullptr};
  std::atomic<void*> context_{nullptr};
  alignas(64) std::atomic<std::size_t> done_{0};  // chunks of the current region finished
  std::mutex region_mu_;  // held by the caller that owns the pool for a region

  // Sleeping workers.
  std::mutex sleep_mu_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  bool stop_ = false;  // guarded by sleep_mu_
};

// The shared pool, created on first use with set_default_thread_count()'s
// value (default: physical cores).
ThreadPool& default_thread_pool();
// `pool`, or the shared pool when it is nullptr (the options' convention).
inline ThreadPool* pool_or_default(ThreadPool* pool) {
  return pool != nullptr ? pool : &default_thread_pool();
}
// Sets the size of the shared pool; only effective before its first use.
// Returns false if the pool already exists with another size.
bool set_default_thread_count(std::size_t threads);

}  // namespace hearth::kernels
