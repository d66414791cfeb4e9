#include "tests/support/server_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

extern char** environ;

namespace hearth::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A fresh private directory under the system's temporary directory.
std::string make_temp_dir(const char* prefix) {
  std::string templ = (fs::temp_directory_path() / (std::string(prefix) + "XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr) return "";
  return templ;
}

int status_to_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Milliseconds left until `deadline`, for poll(): never negative.
int millis_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30));
}

// A child that starts with default handling of the signals tests send or that
// a parent may ignore, and nothing blocked.
struct SpawnAttr {
  posix_spawnattr_t attr;
  SpawnAttr() {
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2})
      sigaddset(&defaults, sig);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  }
  ~SpawnAttr() { posix_spawnattr_destroy(&attr); }
};

std::vector<char*> make_argv(std::vector<std::string>& storage) {
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  return argv;
}

// "HOST:PORT" -> PORT; 0 when there is none.
int port_of(const std::string& address) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos) return 0;
  return std::atoi(address.c_str() + colon + 1);
}

}  // namespace

ProcessResult run_process(const std::string& binary, const std::vector<std::string>& args,
                          const std::string& input) {
  ProcessResult r;
  const std::string dir = make_temp_dir("hearth_run_");
  if (dir.empty()) {
    r.err = "cannot create a temporary directory";
    return r;
  }
  const std::string in = dir + "/stdin", out = dir + "/stdout", err = dir + "/stderr";
  {
    std::ofstream f(in, std::ios::binary);
    f << input;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, in.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> storage = {binary};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv = make_argv(storage);
  SpawnAttr attr;
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary.c_str(), &fa, &attr.attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc == 0) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.exit_code = status_to_code(status);
    r.out = read_whole_file(out);
    r.err = read_whole_file(err);
  } else {
    r.err = "cannot start " + binary + ": " + std::strerror(rc);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return r;
}

std::chrono::milliseconds ServerProcess::default_ready_timeout() {
#if defined(HEARTH_SANITIZER_THREAD) || defined(HEARTH_SANITIZER_ADDRESS)
  return std::chrono::minutes(3);
#else
  return std::chrono::seconds(60);
#endif
}

bool ServerProcess::start(const std::string& binary, const std::vector<std::string>& args,
                          std::chrono::milliseconds timeout) {
  return launch(binary, args) && wait_ready(timeout);
}

bool ServerProcess::launch(const std::string& binary, const std::vector<std::string>& args) {
  if (pid_ > 0) {
    error_ = "started twice";
    return false;
  }
  command_ = binary;
  for (const std::string& a : args) command_ += " " + a;
  dir_ = make_temp_dir("hearth_server_");
  if (dir_.empty()) {
    error_ = std::string("cannot create a temporary directory: ") + std::strerror(errno);
    return false;
  }
  stderr_path_ = dir_ + "/stderr.log";
  if (::access(binary.c_str(), X_OK) != 0) {
    error_ = "cannot execute " + binary + ": " + std::strerror(errno);
    return false;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    error_ = std::string("pipe2: ") + std::strerror(errno);
    return false;
  }
  // Everything the child needs is made before fork(): after it, the child of
  // this multi-threaded process only makes raw system calls (no allocation,
  // no locks, no sanitizer interceptors) until execve.
  const int in_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int err_fd = ::open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (in_fd < 0 || err_fd < 0) {
    error_ = "cannot open /dev/null or " + stderr_path_ + ": " + std::strerror(errno);
    for (int fd : {in_fd, err_fd, fds[0], fds[1]})
      if (fd >= 0) ::close(fd);
    return false;
  }
  std::vector<std::string> storage = {binary};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv = make_argv(storage);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child dies with the test: SIGKILL when the thread that forked it
    // (the test's main thread) exits, even if the test process crashes.
    ::syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (::syscall(SYS_getppid) != parent) ::syscall(SYS_exit_group, 127);
    std::uint64_t none = 0;  // the kernel's sigset: nothing blocked
    ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, sizeof none);
    const int from[3] = {in_fd, fds[1], err_fd};
    for (int target = 0; target < 3; ++target) {
      if (from[target] == target) {
        ::syscall(SYS_fcntl, target, F_SETFD, 0);  // keep it open across execve
      } else if (::syscall(SYS_dup3, from[target], target, 0) < 0) {
        ::syscall(SYS_exit_group, 127);
      }
    }
    ::syscall(SYS_execve, storage[0].c_str(), argv.data(), environ);
    ::syscall(SYS_exit_group, 127);  // exec failed
  }
  const int fork_errno = errno;
  ::close(in_fd);
  ::close(err_fd);
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    error_ = std::string("fork: ") + std::strerror(fork_errno);
    return false;
  }
  pid_ = pid;
  stdout_fd_ = fds[0];
  ::fcntl(stdout_fd_, F_SETFL, ::fcntl(stdout_fd_, F_GETFL) | O_NONBLOCK);
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));  // -1 on old kernels
  return true;
}

bool ServerProcess::wait_ready(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::size_t scanned = 0;  // stdout_ before this offset holds no ready line
  for (;;) {
    // A complete line announcing readiness?
    for (;;) {
      const std::size_t nl = stdout_.find('\n', scanned);
      if (nl == std::string::npos) break;
      const std::string line = stdout_.substr(scanned, nl - scanned);
      scanned = nl + 1;
      static constexpr char kReady[] = "hearth-server ready ";
      if (line.rfind(kReady, 0) != 0) continue;
      ready_line_ = line;
      std::size_t pos = 0;
      while (pos < line.size()) {
        std::size_t end = line.find(' ', pos);
        if (end == std::string::npos) end = line.size();
        const std::string word = line.substr(pos, end - pos);
        if (word.rfind("grpc=", 0) == 0) grpc_address_ = word.substr(5);
        if (word.rfind("metrics=", 0) == 0) metrics_address_ = word.substr(8);
        if (word.rfind("http=", 0) == 0) http_address_ = word.substr(5);
        pos = end + 1;
      }
      grpc_port_ = port_of(grpc_address_);
      metrics_port_ = metrics_address_ == "off" ? 0 : port_of(metrics_address_);
      if (grpc_port_ <= 0 || metrics_address_.empty() ||
          (metrics_address_ != "off" && metrics_port_ <= 0)) {
        error_ = "malformed ready line '" + line + "'\n" + describe();
        return false;
      }
      return true;
    }
    if (stdout_fd_ < 0) {  // stdout closed: the child is exiting
      const std::optional<int> code = wait_exit(std::chrono::milliseconds(millis_until(deadline)));
      error_ = "exited (status " + (code ? std::to_string(*code) : std::string("unknown")) +
               ") before printing the ready line\n" + describe();
      return false;
    }
    const int left = millis_until(deadline);
    if (left == 0) {
      ::kill(pid_, SIGKILL);
      killed_ = true;
      reap(/*block=*/true);
      error_ =
          "no ready line within " + std::to_string(timeout.count()) + " ms (killed)\n" + describe();
      return false;
    }
    pollfd p{stdout_fd_, POLLIN, 0};
    const int n = ::poll(&p, 1, left);
    if (n < 0 && errno != EINTR) {
      error_ = std::string("poll: ") + std::strerror(errno);
      return false;
    }
    if (n > 0) drain_stdout();
  }
}

void ServerProcess::drain_stdout() {
  if (stdout_fd_ < 0) return;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(stdout_fd_, buf, sizeof buf);
    if (n > 0) {
      stdout_.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    ::close(stdout_fd_);  // EOF or a read error: nothing more will come
    stdout_fd_ = -1;
    return;
  }
}

bool ServerProcess::reap(bool block) {
  if (pid_ <= 0 || exited_) return exited_;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    exited_ = true;
    exit_status_ = status_to_code(status);
    if (pidfd_ >= 0) {
      ::close(pidfd_);
      pidfd_ = -1;
    }
  }
  return exited_;
}

bool ServerProcess::signal(int sig) {
  if (!running()) return false;
  return ::kill(pid_, sig) == 0;
}

std::optional<int> ServerProcess::wait_exit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  const auto deadline = Clock::now() + timeout;
  while (!reap(/*block=*/false)) {
    const int left = millis_until(deadline);
    if (left == 0) return std::nullopt;
    // Wait for the exit (pidfd) while draining stdout so the child never
    // blocks on a full pipe. Without a pidfd, stdout's end of file marks the exit.
    pollfd p[2];
    nfds_t n = 0;
    if (pidfd_ >= 0) p[n++] = pollfd{pidfd_, POLLIN, 0};
    if (stdout_fd_ >= 0) p[n++] = pollfd{stdout_fd_, POLLIN, 0};
    if (n == 0) {  // no pidfd and stdout already closed: the child is exiting
      reap(/*block=*/true);
      break;
    }
    const int ready = ::poll(p, n, left);
    if (ready < 0 && errno != EINTR) return std::nullopt;
    drain_stdout();
    if (pidfd_ >= 0 && ready > 0 && (p[0].revents & POLLIN)) reap(/*block=*/true);
  }
  drain_stdout();
  check_sanitizer_report();
  return exit_status_;
}

bool ServerProcess::wait_for_stderr(const std::string& needle, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (stderr_text().find(needle) != std::string::npos) return true;
    if (!running() || reap(/*block=*/false)) return false;
    const int left = millis_until(deadline);
    if (left == 0) return false;
    // stderr is a file: looked at again every few milliseconds (draining
    // stdout meanwhile, so the child never blocks on a full pipe).
    pollfd p{stdout_fd_, POLLIN, 0};
    if (::poll(&p, stdout_fd_ >= 0 ? 1 : 0, std::min(left, 5)) > 0) drain_stdout();
  }
}

std::string ServerProcess::stdout_text() {
  drain_stdout();
  return stdout_;
}

std::string ServerProcess::stderr_text() const {
  if (stderr_path_.empty()) return "";
  return read_whole_file(stderr_path_);
}

std::string ServerProcess::sanitizer_report() const {
  const std::string err = stderr_text();
  std::size_t at = std::string::npos;
  for (const char* marker :
       {"WARNING: ThreadSanitizer", "ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
        "ERROR: ThreadSanitizer", ": runtime error: "}) {
    const std::size_t pos = err.find(marker);
    if (pos != std::string::npos) at = std::min(at, pos);
  }
  if (at == std::string::npos) return "";
  const std::size_t line_start = err.rfind('\n', at);
  const std::size_t begin = line_start == std::string::npos ? 0 : line_start + 1;
  return err.substr(begin, 8192);
}

void ServerProcess::check_sanitizer_report() {
  if (sanitizer_reported_) return;
  const std::string report = sanitizer_report();
  if (report.empty()) return;
  sanitizer_reported_ = true;
  ADD_FAILURE() << "the server (" << command_ << ", pid " << pid_
                << ") reported a sanitizer error:\n"
                << report;
}

std::string ServerProcess::describe() const {
  std::string s = "server: " + command_ + " (pid " + std::to_string(pid_) + ", ";
  if (pid_ <= 0) {
    s += "not started)";
  } else if (exited_ && killed_) {
    s += "killed by the test fixture)";
  } else if (exited_) {
    s += "exited with status " + std::to_string(exit_status_) + ")";
  } else {
    s += "running)";
  }
  std::string err = stderr_text();
  constexpr std::size_t kTail = 6000;
  if (err.size() > kTail) err = "[...]" + err.substr(err.size() - kTail);
  s += "\n--- server stderr ---\n" + err + "--- end of server stderr ---";
  return s;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && !exited_) {
    ::kill(pid_, SIGKILL);
    killed_ = true;
    reap(/*block=*/true);
  }
  check_sanitizer_report();
  if (pid_ > 0 && ::testing::Test::HasFailure()) {
    std::fprintf(stderr, "%s\n", describe().c_str());
  }
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  if (pidfd_ >= 0) ::close(pidfd_);
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

}  // namespace hearth::testing
