// What a request did, for whoever watches the server (the metrics exporter).
// Front ends and the request path call these on the request's thread, and
// on_inter_token on the model's step loop thread; implementations must be
// thread-safe and cheap (no I/O). Transport-neutral: codes are absl's
// (numerically gRPC's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <chrono>

#include "absl/status/status.h"

namespace hearth::server {

struct RequestRecord {
  std::string model;   // empty when the request named no known model
  std::string method;  // "Generate", "Complete", ...
  std::string transport = "grpc";  // the front end: "grpc", "http"
  absl::StatusCode code = absl::StatusCode::kOk;
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
  double queue_s = -1;                // time waiting for an instance; < 0: never queued
  double time_to_first_token_s = -1;  // < 0: no token was produced
  double duration_s = 0;              // arrival to the final status
  std::size_t prompt_tokens = 0;
  std::size_t generated_tokens = 0;
  std::size_t cached_tokens = 0;  // prompt tokens served from a KV cache
  // The step loop's temp allocator over the steps of this generation (0
  // when none ran).
  std::uint64_t temp_lookups = 0, temp_hits = 0, temp_peak_bytes = 0;
};

class RequestObserver {
 public:
  virtual ~RequestObserver() = default;
  // One generated token was sent, `seconds` after the previous one of the
  // same request (the first token reports time_to_first_token instead).
  virtual void on_inter_token(const std::string& model, double seconds) = 0;
  // Called once per finished call of any method.
  virtual void on_request_done(const RequestRecord& record) = 0;
};

}  // namespace hearth::server
