#include "base/write_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/str_cat.h"

namespace hearth {

absl::Status write_whole_file(const std::string& path, std::string_view bytes) {
  // mkstemp: a fresh name (O_EXCL) beside `path`, so a file or link already
  // there (a crashed run's, or planted in a shared directory) is neither
  // written through nor in the way; then the mode a plain create would give.
  std::string partial = str_cat(path, ".partial-XXXXXX");
  const int fd = ::mkostemp(partial.data(), O_CLOEXEC);
  if (fd < 0)
    return absl::PermissionDeniedError(
        str_cat("cannot create '", path, "': ", std::strerror(errno)));
  const mode_t mask = ::umask(0);  // read it (the tools write files from one thread)
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  int error = 0;
  for (std::size_t done = 0; done < bytes.size() && error == 0;) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      error = errno;
    } else if (n == 0) {
      error = EIO;
    }
  }
  // On disk before it takes the name: a crash leaves the old file or the
  // whole new one, never a part.
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && std::rename(partial.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(partial.c_str());
    return absl::InternalError(str_cat("cannot write '", path, "': ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace hearth
