// The status the server's validators return for a bad request field; the
// message names the field. One definition for every validator, so they read
// alike and a unity build sees no second copy.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace hearth::server {

inline absl::Status invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

}  // namespace hearth::server
