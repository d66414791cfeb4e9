// CallsInFlight: how many calls a front end's handlers are running, and a
// wait for none to be left.
//
// Why the drain needs it: gRPC's Server::Shutdown() sends GOAWAY, and from
// then on gRPC 1.51 closes a connection as soon as its last stream ends. A
// stream that ended that way, its handler still writing its last pieces at
// the GOAWAY, was seen (once, under heavy test load) to lose its final
// frames to a connection reset: the client got UNAVAILABLE instead of its
// status. So the drain waits for the handlers that were running when it
// began to return, and for their last frames to leave, before Shutdown():
// then no stream is left to end after the GOAWAY.
//
// The HTTP front end counts its generation responses with it as well, from
// the handler's start to httplib's logger (begin() / end(): not one C++
// scope), and waits for them without closing (wait_for_none()).
//
// Thread safety: every method may be called from any thread (one mutex).
// Owner: the front end whose handlers it counts (InferenceService,
// HttpFrontEnd).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace hearth::server {

class CallsInFlight {
 public:
  // Counts one call from construction to destruction, unless it entered
  // after close_and_wait() began.
  class Scope {
   public:
    explicit Scope(CallsInFlight& calls);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CallsInFlight& calls_;
    bool counted_;
  };

  // Counts one call until end(), unless close_and_wait() has begun; returns
  // whether it was counted (only a counted call may call end()).
  bool begin();
  void end();
  // The counted calls still running.
  std::size_t count() const;
  // Waits for the counted calls to return, still counting new ones: true
  // once none is left, false if `deadline` comes first.
  bool wait_for_none(std::chrono::steady_clock::time_point deadline);
  // Stops counting new calls (a draining server refuses their generations at
  // once, and a client retrying in a loop must not hold the drain up), then
  // waits for the counted ones to return: true once none is left, false if
  // `deadline` comes first.
  bool close_and_wait(std::chrono::steady_clock::time_point deadline);

 private:
  mutable std::mutex mu_;
  std::condition_variable none_;
  std::size_t count_ = 0;  // guarded by mu_
  bool closed_ = false;    // guarded by mu_
};

}  // namespace hearth::server
