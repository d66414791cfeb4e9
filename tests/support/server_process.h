// A hearth-server (or any program that announces readiness the same way) run
// as a real child process for integration tests.
//
//   ServerProcess server;
//   ASSERT_TRUE(server.start(HEARTH_SERVER_BIN, {"--listen", "127.0.0.1:0"})) << server.error();
//   ... connect to server.grpc_address() ...
//   ASSERT_TRUE(server.signal(SIGTERM));
//   EXPECT_EQ(server.wait_exit(std::chrono::seconds(30)), 0) << server.describe();
//
// stdout is a pipe: start() waits (poll() with a timeout, no sleeps) for the
// line "hearth-server ready grpc=HOST:PORT metrics=HOST:PORT|off" and parses
// it. stderr goes to a temporary file, quoted by describe() in failure
// messages; stdin is /dev/null. The child (fork + execve) starts with no
// signal blocked and inherits the environment (TSAN_OPTIONS and friends).
//
// The child gets SIGKILL when the thread that started it exits
// (PR_SET_PDEATHSIG), so a test process that crashes or is killed by ctest's
// timeout leaves no server behind. Hence: call start() from the thread that
// outlives the object (the test's own thread, or SetUpTestSuite's).
//
// Sanitizers: when the child's stderr holds a sanitizer report (ThreadSanitizer
// warning, AddressSanitizer/LeakSanitizer error, UBSan runtime error), the
// fixture fails the running test (ADD_FAILURE) when it is destroyed or when
// wait_exit() sees the child exit, quoting the report.
//
// The destructor kills (SIGKILL) and reaps the child if it is still running;
// it never touches any other process.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace hearth::testing {

// The result of a program run to completion (run_process()).
struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + the signal that killed it; -1: not started
  std::string out, err;
};

// Runs `binary args...` to completion with `input` on stdin; stdout and stderr
// are collected through files (no pipe can fill up and block the child).
ProcessResult run_process(const std::string& binary, const std::vector<std::string>& args,
                          const std::string& input = "");

class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts `binary args...` and waits up to `timeout` for the ready line.
  // False (error() says why, with the child's stderr) when the program cannot
  // be started, exits before it is ready, or the timeout passes (the child is
  // then killed). Call once per object.
  bool start(const std::string& binary, const std::vector<std::string>& args,
             std::chrono::milliseconds timeout = default_ready_timeout());

  // Starts `binary args...` without waiting for anything (start() = this,
  // then the wait for the ready line).
  bool launch(const std::string& binary, const std::vector<std::string>& args);
  // Waits up to `timeout` until stderr holds `needle` (true), or the child
  // has exited or the timeout passed (false).
  bool wait_for_stderr(const std::string& needle, std::chrono::milliseconds timeout);

  // Longer under sanitizers, which slow loading several times over.
  static std::chrono::milliseconds default_ready_timeout();

  const std::string& error() const { return error_; }
  pid_t pid() const { return pid_; }
  // True until wait_exit() has seen the child exit.
  bool running() const { return pid_ > 0 && !exited_; }

  const std::string& ready_line() const { return ready_line_; }
  // "HOST:PORT" from grpc=..., and its port.
  const std::string& grpc_address() const { return grpc_address_; }
  int grpc_port() const { return grpc_port_; }
  // "HOST:PORT" from metrics=..., or "off"; its port (0 when off).
  const std::string& metrics_address() const { return metrics_address_; }
  int metrics_port() const { return metrics_port_; }
  // "HOST:PORT" from http=... (the OpenAI HTTP API), or "" when it is off.
  const std::string& http_address() const { return http_address_; }

  // Sends `sig` to the child. False if it has already been reaped.
  bool signal(int sig);

  // Waits up to `timeout` for the child to exit and reaps it. Returns its exit
  // status (128 + the signal when a signal killed it), or nullopt when it is
  // still running after `timeout`. Once reaped, returns the same status again.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);

  // Everything the child wrote to stdout so far (the ready line included).
  std::string stdout_text();
  // Everything the child wrote to stderr so far.
  std::string stderr_text() const;
  // The first sanitizer report in stderr (from its first line to the end of
  // stderr, at most 8 KiB), or "" when there is none.
  std::string sanitizer_report() const;
  // The command line, pid, state and the tail of stderr: for failure messages.
  std::string describe() const;

 private:
  bool wait_ready(std::chrono::milliseconds timeout);
  void drain_stdout();
  void check_sanitizer_report();
  bool reap(bool block);

  std::string command_;
  std::string dir_;  // temporary directory holding stderr
  std::string stderr_path_;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int pidfd_ = -1;  // -1 when pidfd_open is unavailable
  bool exited_ = false;
  bool killed_ = false;  // by this object (SIGKILL)
  int exit_status_ = -1;
  bool sanitizer_reported_ = false;
  std::string stdout_;
  std::string error_;
  std::string ready_line_;
  std::string grpc_address_, metrics_address_, http_address_;
  int grpc_port_ = 0, metrics_port_ = 0;
};

}  // namespace hearth::testing
