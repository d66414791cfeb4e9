// Writing a whole file that a tool makes (a model, a converted copy).
//
// The bytes go to a temporary file beside `path`, which is renamed over it
// only once every byte is written: a failed write (a full disk, a read-only
// directory) leaves no partial file for a later run to mistake for a model,
// and whatever was at `path` stays as it was.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace hearth {

// PermissionDenied "cannot create 'PATH': REASON" or Internal "cannot write
// 'PATH': REASON" on failure.
absl::Status write_whole_file(const std::string& path, std::string_view bytes);

}  // namespace hearth
