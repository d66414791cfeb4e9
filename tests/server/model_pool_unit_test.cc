// server/model_pool.h in-process: admission against deadlines, with the
// orderings made by events (a latch in the cancellation check), not sleeps.
#include "server/model_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "server/model_registry.h"

namespace hearth::server {
namespace {

ModelSpec one_instance() {
  ModelSpec spec;
  spec.name = "demo";
  spec.path = std::string(kDemoSource);
  spec.instances = 1;
  spec.queue = 1;
  return spec;
}

// A request waiting in the queue whose instance is freed only after its
// deadline passed is refused with DEADLINE_EXCEEDED, not admitted: here the
// instance comes free while the waiter is in its cancellation check, so the
// next thing it sees is a free instance, with the deadline behind it.
TEST(ModelPoolUnit, AnInstanceFreedAfterTheDeadlineDoesNotAdmitTheWaiter) {
  ModelRegistry registry({one_instance()});
  ASSERT_TRUE(registry.load_all(nullptr, false, {}, nullptr).ok());
  absl::StatusOr<ModelPool*> pool = registry.find("demo");
  ASSERT_TRUE(pool.ok()) << pool.status();

  // One try with the waiter's deadline `wait` from now; false when the
  // machine stalled the waiter past it before it queued (then it returns
  // at once, as it must, but the case is not tested: try a longer one).
  const auto attempt = [&](std::chrono::milliseconds wait) {
    std::optional<absl::StatusOr<ModelPool::Lease>> holder(
        (*pool)->acquire(Clock::time_point::max(), nullptr, {}));
    EXPECT_TRUE(holder->ok()) << holder->status();
    std::mutex mu;
    std::condition_variable cv;
    bool in_check = false, open = false, returned = false;  // guarded by mu
    const Clock::time_point deadline = Clock::now() + wait;
    std::optional<absl::Status> waiter_status;
    bool waiter_queued = false;  // written by the waiter, read after join()
    std::thread waiter([&] {
      auto cancelled = [&] {
        std::unique_lock lock(mu);
        in_check = true;
        cv.notify_all();
        cv.wait(lock, [&] { return open; });
        return false;
      };
      const absl::Status st = (*pool)->acquire(deadline, cancelled, {}, &waiter_queued).status();
      std::lock_guard lock(mu);
      waiter_status = st;
      returned = true;
      cv.notify_all();
    });
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return in_check || returned; });
    }
    while (Clock::now() < deadline) std::this_thread::yield();  // the deadline passes
    holder.reset();                                             // the instance comes free
    {
      std::lock_guard lock(mu);
      open = true;
    }
    cv.notify_all();
    waiter.join();
    EXPECT_TRUE(waiter_status.has_value());
    if (waiter_status.has_value()) {
      EXPECT_EQ(waiter_status->code(), absl::StatusCode::kDeadlineExceeded) << *waiter_status;
    }
    if (!in_check) return false;
    EXPECT_TRUE(waiter_queued) << "it waited in the queue: a queue-wait sample";
    return true;
  };
  bool tested = false;
  for (auto wait = std::chrono::milliseconds(200); !tested && wait <= std::chrono::seconds(60);
       wait *= 2)
    tested = attempt(wait);
  EXPECT_TRUE(tested) << "the waiter never reached its cancellation check before its deadline";
  // The instance is free for the next request.
  EXPECT_TRUE((*pool)->acquire(Clock::time_point::max(), nullptr, {}).ok());
}

// A request whose deadline has already passed is not lent a free instance.
TEST(ModelPoolUnit, APassedDeadlineIsRefusedEvenWithAFreeInstance) {
  ModelRegistry registry({one_instance()});
  ASSERT_TRUE(registry.load_all(nullptr, false, {}, nullptr).ok());
  absl::StatusOr<ModelPool*> pool = registry.find("demo");
  ASSERT_TRUE(pool.ok()) << pool.status();
  bool queued = true;
  EXPECT_EQ((*pool)->acquire(Clock::now(), nullptr, {}, &queued).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(queued) << "it never queued: no queue-wait sample";
  EXPECT_TRUE((*pool)->acquire(Clock::time_point::max(), nullptr, {}, &queued).ok());
  EXPECT_FALSE(queued);
}

}  // namespace
}  // namespace hearth::server
