#include "base/read_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "base/str_cat.h"

namespace hearth {
namespace {

absl::Status cannot_read(const std::string& path, const char* reason, bool missing = false) {
  const std::string message = str_cat("cannot read '", path, "': ", reason);
  return missing ? absl::NotFoundError(message) : absl::InvalidArgumentError(message);
}

}  // namespace

absl::StatusOr<std::string> read_whole_file(const std::string& path, std::size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return cannot_read(path, std::strerror(e), e == ENOENT);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  return read_whole_fd(fd, path, max_bytes);
}

absl::StatusOr<std::string> read_whole_fd(int fd, const std::string& name, std::size_t max_bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return cannot_read(name, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return cannot_read(name, "it is a directory");
  std::string text;
  if (S_ISREG(st.st_mode) && static_cast<std::size_t>(st.st_size) <= max_bytes)
    text.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) return text;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {  // a non-blocking pipe: wait for data
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, -1) >= 0 || errno == EINTR) continue;
      }
      return cannot_read(name, std::strerror(errno));
    }
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > max_bytes)
      return cannot_read(name, str_cat("it holds more than ", max_bytes, " bytes").c_str());
  }
}

}  // namespace hearth
