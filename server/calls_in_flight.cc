#include "server/calls_in_flight.h"

namespace hearth::server {

CallsInFlight::Scope::Scope(CallsInFlight& calls) : calls_(calls) {
  std::lock_guard<std::mutex> lock(calls_.mu_);
  counted_ = !calls_.closed_;
  if (counted_) ++calls_.count_;
}

CallsInFlight::Scope::~Scope() {
  if (!counted_) return;
  std::lock_guard<std::mutex> lock(calls_.mu_);
  if (--calls_.count_ == 0) calls_.none_.notify_all();
}

std::size_t CallsInFlight::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

bool CallsInFlight::close_and_wait(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  closed_ = true;
  return none_.wait_until(lock, deadline, [this] { return count_ == 0; });
}

}  // namespace hearth::server
