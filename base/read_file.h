// Reading a whole file that a flag or a config names.
//
// One answer for every way it can fail (missing, unreadable, a directory, a
// read error part way), each naming the path, so a tool never mistakes a
// directory for an empty file or aborts on the stream's exception.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace hearth {

// The bytes of the regular file (or FIFO, e.g. /dev/stdin) at `path`;
// NotFound / InvalidArgument "cannot read 'PATH': REASON" otherwise, and
// for a file of more than `max_bytes` (/dev/zero would never end).
inline constexpr std::size_t kMaxFileBytes = std::size_t{256} << 20;
absl::StatusOr<std::string> read_whole_file(const std::string& path,
                                            std::size_t max_bytes = kMaxFileBytes);

// The same for an open descriptor (fd 0: whatever stdin is, a pipe, a
// socket or a file read from where it stands), named `name` in errors.
absl::StatusOr<std::string> read_whole_fd(int fd, const std::string& name,
                                          std::size_t max_bytes = kMaxFileBytes);

}  // namespace hearth
