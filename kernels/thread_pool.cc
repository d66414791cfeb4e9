#include "kernels/thread_pool.h"

#include <atomic>
#include <mutex>

#include "kernels/cpu_features.h"

namespace hearth::kernels {

ThreadPool::ThreadPool(std::size_t threads)
    : threads_(threads == 0 ? static_cast<std::size_t>(cpu_features().physical_cores) : threads) {
  if (threads_ > 1) {
    pool_ = pthreadpool_create(threads_);
    if (pool_ == nullptr) threads_ = 1;  // could not start workers: run on the caller
  }
}

ThreadPool::~ThreadPool() {
  if (pool_ != nullptr) pthreadpool_destroy(pool_);
}

std::size_t ThreadPool::chunk_count(std::size_t range, std::size_t grain) const noexcept {
  if (grain == 0) grain = 1;
  const std::size_t by_grain = (range + grain - 1) / grain;
  const std::size_t by_threads = threads_ * 4;
  return by_grain < by_threads ? by_grain : by_threads;
}

#if defined(HEARTH_SANITIZER_THREAD)
// pthreadpool is not built with TSan, so TSan cannot see that handing a task
// to a worker, and the caller waking when all tasks are done, order memory.
// These annotations state exactly those two edges.
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
namespace {
struct AnnotatedTask {
  void (*task)(void*, std::size_t);
  void* context;
  static void call(void* self, std::size_t i) {
    auto* t = static_cast<AnnotatedTask*>(self);
    __tsan_acquire(t);
    t->task(t->context, i);
    __tsan_release(t);
  }
};
}  // namespace
#endif

void ThreadPool::run(std::size_t n, void (*task)(void*, std::size_t), void* context) {
  if (pool_ == nullptr) {
    for (std::size_t i = 0; i < n; ++i) task(context, i);
    return;
  }
#if defined(HEARTH_SANITIZER_THREAD)
  AnnotatedTask annotated{task, context};
  __tsan_release(&annotated);
  pthreadpool_parallelize_1d(pool_, &AnnotatedTask::call, &annotated, n, 0);
  __tsan_acquire(&annotated);
#else
  pthreadpool_parallelize_1d(pool_, task, context, n, 0);
#endif
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
