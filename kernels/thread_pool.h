// The process's thread pool for kernels, over pthreadpool.
//
// One pool serves everything the process runs. pthreadpool serialises
// parallel regions: when two request threads call parallel_for at once, the
// second waits until the first region ends, then runs on all threads. Each
// region is short (one matrix, one attention pass), so concurrent requests
// interleave region by region rather than oversubscribing the cores. The
// calling thread always takes part in the work.
//
// parallel_for makes no heap allocation.
#pragma once

#include <pthreadpool.h>

#include <cstddef>
#include <type_traits>

namespace hearth::kernels {

class ThreadPool {
 public:
  // `threads` = 0 means one per physical core. A pool of 1 runs everything
  // on the caller and starts no thread.
  explicit ThreadPool(std::size_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  std::size_t threads() const noexcept { return threads_; }
  // The underlying pthreadpool, for libraries that take one (XNNPACK);
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

  // How many chunks parallel_for would use: no more than threads() x 4 (to
  // even out load) and no chunk smaller than `grain`.
  std::size_t chunk_count(std::size_t range, std::size_t grain) const noexcept;

 private:
  template <typename F>
  struct Closure {
    F* fn;
    std::size_t range, chunk;
    static void call(void* self, std::size_t i) {
      auto* c = static_cast<Closure*>(self);
      const std::size_t begin = i * c->chunk;
      const std::size_t end = begin + c->chunk < c->range ? begin + c->chunk : c->range;
      if (begin < end) (*c->fn)(begin, end);
    }
  };
  template <typename F>
  struct ChunkClosure {
    F* fn;
    std::size_t range, n;
    static void call(void* self, std::size_t i) {
      auto* c = static_cast<ChunkClosure*>(self);
      (*c->fn)(i, c->range * i / c->n, c->range * (i + 1) / c->n);
    }
  };

  void run(std::size_t n, void (*task)(void*, std::size_t), void* context);

  std::size_t threads_;
  pthreadpool_t pool_ = nullptr;
};

// The shared pool, created on first use with set_default_thread_count()'s
// value (default: physical cores).
ThreadPool& default_thread_pool();
// Sets the size of the shared pool; only effective before its first use.
// Returns false if the pool already exists with another size.
bool set_default_thread_count(std::size_t threads);

}  // namespace hearth::kernels
