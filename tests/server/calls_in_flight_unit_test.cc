// CallsInFlight: the drain waits for the calls that entered before it began,
// and neither for calls that entered after (a draining server refuses their
// generations) nor past its deadline. Orderings are forced by scopes'
// lifetimes and joins, never by sleeps; the waits that must succeed have no
// deadline that matters.
#include "server/calls_in_flight.h"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

namespace hearth::server {
namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point kPast = Clock::now() - std::chrono::seconds(1);
const Clock::time_point kFar = Clock::now() + std::chrono::hours(1);

TEST(CallsInFlightUnit, CountsEachCallFromEntryToReturn) {
  CallsInFlight calls;
  EXPECT_EQ(calls.count(), 0u);
  {
    CallsInFlight::Scope a(calls);
    CallsInFlight::Scope b(calls);
    EXPECT_EQ(calls.count(), 2u);
  }
  EXPECT_EQ(calls.count(), 0u);
  EXPECT_TRUE(calls.close_and_wait(kPast)) << "nothing runs: no wait at all";
}

TEST(CallsInFlightUnit, WaitEndsAtTheDeadlineWhileAnEarlierCallRuns) {
  CallsInFlight calls;
  std::optional<CallsInFlight::Scope> running(std::in_place, calls);
  EXPECT_FALSE(calls.close_and_wait(kPast));
  EXPECT_FALSE(calls.close_and_wait(Clock::now() + std::chrono::milliseconds(1)));
  running.reset();
  EXPECT_TRUE(calls.close_and_wait(kPast));
}

TEST(CallsInFlightUnit, CallsEnteringAfterTheDrainBeganAreNotWaitedFor) {
  CallsInFlight calls;
  std::optional<CallsInFlight::Scope> earlier(std::in_place, calls);
  ASSERT_FALSE(calls.close_and_wait(kPast));
  CallsInFlight::Scope later(calls);  // refused by the draining server, say
  EXPECT_EQ(calls.count(), 1u);
  earlier.reset();
  EXPECT_EQ(calls.count(), 0u);
  EXPECT_TRUE(calls.close_and_wait(kPast)) << "the later call must not hold the drain";
}

// The HTTP front end's responses: counted from begin() to end(), not one
// scope, and waited for without closing (wait_for_none).
TEST(CallsInFlightUnit, WaitForNoneKeepsCountingCallsThatBeginWhileItWaits) {
  CallsInFlight calls;
  ASSERT_TRUE(calls.begin());
  EXPECT_FALSE(calls.wait_for_none(kPast));
  ASSERT_TRUE(calls.begin()) << "wait_for_none must not close";
  EXPECT_EQ(calls.count(), 2u);
  calls.end();
  EXPECT_FALSE(calls.wait_for_none(kPast)) << "the call that began later still runs";
  calls.end();
  EXPECT_EQ(calls.count(), 0u);
  EXPECT_TRUE(calls.wait_for_none(kPast));
}

TEST(CallsInFlightUnit, BeginAfterCloseIsNotCounted) {
  CallsInFlight calls;
  ASSERT_TRUE(calls.close_and_wait(kPast));
  EXPECT_FALSE(calls.begin());
  EXPECT_EQ(calls.count(), 0u);
}

TEST(CallsInFlightUnit, WaitReturnsWhenTheLastEarlierCallReturnsOnAnotherThread) {
  CallsInFlight calls;
  constexpr int kThreads = 4;
  std::atomic<int> entered{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> handlers;
  for (int i = 0; i < kThreads; ++i)
    handlers.emplace_back([&] {
      CallsInFlight::Scope scope(calls);
      entered.fetch_add(1);
      while (!release.load()) std::this_thread::yield();
    });
  while (entered.load() < kThreads) std::this_thread::yield();
  std::atomic<bool> drained{false};
  std::thread drain([&] { drained = calls.close_and_wait(kFar); });
  EXPECT_EQ(calls.count(), static_cast<std::size_t>(kThreads));
  EXPECT_FALSE(drained.load()) << "returned while four calls still run";
  release = true;
  drain.join();
  for (std::thread& t : handlers) t.join();
  EXPECT_TRUE(drained.load());
  EXPECT_EQ(calls.count(), 0u);
}

}  // namespace
}  // namespace hearth::server
