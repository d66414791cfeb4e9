#include "base/write_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/str_cat.h"

namespace hearth {

absl::Status write_whole_file(const std::string& path, std::string_view bytes) {
  const std::string partial = str_cat(path, ".partial-", ::getpid());
  std::FILE* f = std::fopen(partial.c_str(), "wb");
  if (f == nullptr)
    return absl::PermissionDeniedError(
        str_cat("cannot create '", path, "': ", std::strerror(errno)));
  int error = 0;
  if (std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) error = errno;
  if (std::fclose(f) != 0 && error == 0) error = errno;
  if (error == 0 && std::rename(partial.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    std::remove(partial.c_str());
    return absl::InternalError(str_cat("cannot write '", path, "': ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace hearth
