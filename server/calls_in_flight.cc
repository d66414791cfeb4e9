#include "server/calls_in_flight.h"

namespace hearth::server {

CallsInFlight::Scope::Scope(CallsInFlight& calls) : calls_(calls), counted_(calls.begin()) {}

CallsInFlight::Scope::~Scope() {
  if (counted_) calls_.end();
}

bool CallsInFlight::begin() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return false;
  ++count_;
  return true;
}

void CallsInFlight::end() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--count_ == 0) none_.notify_all();
}

std::size_t CallsInFlight::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

bool CallsInFlight::wait_for_none(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return none_.wait_until(lock, deadline, [this] { return count_ == 0; });
}

bool CallsInFlight::close_and_wait(std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  return wait_for_none(deadline);
}

}  // namespace hearth::server
