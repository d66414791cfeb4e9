// Helpers of the observability tests: a plain-socket HTTP GET, a parser of
// the Prometheus text exposition format, the metric names a PromQL
// expression uses, and a child process (Prometheus) stopped on destruction.
//
// Everything is bounded: sockets have timeouts, child processes are stopped
// (SIGTERM, then SIGKILL) and reaped by their owner, by pid.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace hearth::testing::obs {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline bool write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return static_cast<bool>(out);
}

// A fresh private directory; removed by the owner.
inline fs::path make_temp_dir(const char* prefix) {
  std::string templ = (fs::temp_directory_path() / (std::string(prefix) + "XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr) return {};
  return templ;
}

struct TempDir {
  fs::path path = make_temp_dir("hearth-obs-");
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

// ---- HTTP ---------------------------------------------------------------------

struct HttpResponse {
  int status = 0;  // 0: no HTTP answer (error says why)
  std::string body;
  std::string error;
};

// "HOST:PORT" (an IPv4 address) -> sockaddr. False on anything else.
inline bool parse_ipv4(const std::string& address, sockaddr_in& out) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  std::memset(&out, 0, sizeof out);
  out.sin_family = AF_INET;
  out.sin_port = htons(static_cast<std::uint16_t>(std::atoi(address.c_str() + colon + 1)));
  return ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &out.sin_addr) == 1;
}

// One HTTP/1.0 GET (the server closes the connection after answering, and
// answers without chunked encoding). `target` is the path and query string.
inline HttpResponse http_get(const std::string& address, const std::string& target,
                             std::chrono::seconds timeout = std::chrono::seconds(10)) {
  HttpResponse r;
  sockaddr_in sa;
  if (!parse_ipv4(address, sa)) {
    r.error = "not an IPv4 HOST:PORT: '" + address + "'";
    return r;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    r.error = std::string("socket: ") + std::strerror(errno);
    return r;
  }
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string raw;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    r.error = "connect " + address + ": " + std::strerror(errno);
  } else {
    const std::string request = "GET " + target + " HTTP/1.0\r\nHost: " + address +
                                "\r\nAccept: */*\r\nUser-Agent: hearth-observability-test\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(request.size())) {
      r.error = "send to " + address + ": " + std::strerror(errno);
    } else {
      char buf[16384];
      for (;;) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n > 0) {
          raw.append(buf, static_cast<std::size_t>(n));
        } else {
          if (n < 0) r.error = "recv from " + address + ": " + std::strerror(errno);
          break;
        }
      }
    }
  }
  ::close(fd);
  if (!r.error.empty()) return r;
  const std::size_t header_end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || header_end == std::string::npos) {
    r.error = "not an HTTP response from " + address + ": '" + raw.substr(0, 200) + "'";
    return r;
  }
  r.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  r.body = raw.substr(header_end + 4);
  return r;
}

inline std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

// A loopback port nobody listens on right now (bound, read, released).
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0)
    port = ntohs(sa.sin_port);
  ::close(fd);
  return port;
}

// ---- The text exposition format --------------------------------------------------

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Scrape {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  // family name -> counter, gauge, histogram, ...
  std::string text;
  std::string error;  // a line that did not parse

  std::set<std::string> sample_names() const {
    std::set<std::string> names;
    for (const Sample& s : samples) names.insert(s.name);
    return names;
  }

  // The sum of every sample named `name` whose labels include `match`
  // (0 when there is none: a series not created yet counts as 0).
  double sum(const std::string& name, const std::map<std::string, std::string>& match = {}) const {
    double total = 0;
    for (const Sample& s : samples) {
      if (s.name != name) continue;
      bool ok = true;
      for (const auto& [k, v] : match) {
        const auto it = s.labels.find(k);
        if (it == s.labels.end() || it->second != v) {
          ok = false;
          break;
        }
      }
      if (ok) total += s.value;
    }
    return total;
  }
  std::size_t count(const std::string& name) const {
    std::size_t n = 0;
    for (const Sample& s : samples) n += s.name == name ? 1 : 0;
    return n;
  }
};

inline Scrape parse_exposition(const std::string& text) {
  Scrape out;
  out.text = text;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty()) continue;
    if (line[0] == '#') {
      // "# TYPE name type"
      if (line.compare(0, 7, "# TYPE ") == 0) {
        const std::size_t sp = line.find(' ', 7);
        if (sp != std::string::npos) out.types[line.substr(7, sp - 7)] = line.substr(sp + 1);
      }
      continue;
    }
    Sample s;
    std::size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const std::size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') break;
        const std::string key = line.substr(i, eq - i);
        std::string value;
        std::size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value.push_back(line[j] == 'n' ? '\n' : line[j]);
          } else {
            value.push_back(line[j]);
          }
        }
        s.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size() || line[i] != '}') {
        out.error = line;
        continue;
      }
      ++i;
    }
    while (i < line.size() && line[i] == ' ') ++i;
    const std::string value = line.substr(i, line.find(' ', i) - i);
    char* parsed_end = nullptr;
    s.value = std::strtod(value.c_str(), &parsed_end);
    if (value.empty() || *parsed_end != '\0') {
      out.error = line;
      continue;
    }
    out.samples.push_back(std::move(s));
  }
  return out;
}

// ---- PromQL ---------------------------------------------------------------------

// The metric names a PromQL expression selects. Skips strings, label
// matchers {...}, ranges [...], function and aggregation names (an
// identifier before "("), the label lists of by/without/on/ignoring/
// group_left/group_right, keywords, numbers, and $variables. (A metric
// named like an aggregation operator, e.g. "sum", would be missed.)
inline std::set<std::string> promql_metric_names(const std::string& expr) {
  // Keywords, and the aggregation operators (which may be followed by a
  // by/without clause instead of their parenthesis).
  static const std::set<std::string> kKeywords = {
      "by",           "without", "on",     "ignoring", "group_left", "group_right", "bool",
      "and",          "or",      "unless", "offset",   "inf",        "nan",         "sum",
      "min",          "max",     "avg",    "group",    "stddev",     "stdvar",      "count",
      "count_values", "bottomk", "topk",   "quantile", "limitk",     "limit_ratio"};
  static const std::set<std::string> kLabelLists = {"by",       "without",    "on",
                                                    "ignoring", "group_left", "group_right"};
  std::set<std::string> names;
  auto skip_until = [&](std::size_t i, char close) {
    while (i < expr.size() && expr[i] != close) {
      if (expr[i] == '"' || expr[i] == '\'') {
        const char q = expr[i++];
        while (i < expr.size() && expr[i] != q) i += expr[i] == '\\' ? 2 : 1;
      }
      ++i;
    }
    return i + 1;
  };
  auto ident_start = [](char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  };
  auto ident_char = [&](char c) {
    return ident_start(c) || std::isdigit(static_cast<unsigned char>(c));
  };
  std::size_t i = 0;
  while (i < expr.size()) {
    const char c = expr[i];
    if (c == '"' || c == '\'') {
      i = skip_until(i + 1, c);
    } else if (c == '{') {
      i = skip_until(i + 1, '}');
    } else if (c == '[') {
      i = skip_until(i + 1, ']');
    } else if (c == '$') {
      ++i;
      while (i < expr.size() && ident_char(expr[i])) ++i;
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '.' && i + 1 < expr.size() &&
                std::isdigit(static_cast<unsigned char>(expr[i + 1])))) {
      while (i < expr.size() &&
             (std::isalnum(static_cast<unsigned char>(expr[i])) || expr[i] == '.'))
        ++i;
    } else if (ident_start(c)) {
      std::size_t j = i;
      while (j < expr.size() && ident_char(expr[j])) ++j;
      const std::string word = expr.substr(i, j - i);
      std::size_t k = j;
      while (k < expr.size() && std::isspace(static_cast<unsigned char>(expr[k]))) ++k;
      const bool call = k < expr.size() && expr[k] == '(';
      if (kLabelLists.count(word) != 0 && call) {
        j = skip_until(k + 1, ')');
      } else if (!call && kKeywords.count(word) == 0) {
        names.insert(word);
      }
      i = j;
    } else {
      ++i;
    }
  }
  return names;
}

// ---- A child process ----------------------------------------------------------------

// `binary args...` with stdin from /dev/null and stdout+stderr to `log`.
// Stopped (SIGTERM, then SIGKILL after 10 s) and reaped by stop() or the
// destructor; only this pid is ever signalled.
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { stop(); }

  bool start(const std::string& binary, const std::vector<std::string>& args, const fs::path& log) {
    log_ = log;
    std::vector<std::string> storage = {binary};
    storage.insert(storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : storage) argv.push_back(s.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    const int rc = posix_spawn(&pid_, binary.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      pid_ = -1;
      error_ = "cannot start " + binary + ": " + std::strerror(rc);
      return false;
    }
    return true;
  }

  // True while the child has not exited (reaps it if it has).
  bool running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    // Wait up to 10 s for the exit (a pidfd turns readable; without one, a
    // bounded reaping poll), then kill it.
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    int status = 0;
    bool exited = false;
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      exited = ::poll(&p, 1, 10000) == 1;
      ::close(pidfd);
    } else {
      const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
      while (!(exited = ::waitpid(pid_, &status, WNOHANG) != 0) && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // no pidfd: poll, bounded
      if (exited) {
        pid_ = -1;
        return;
      }
    }
    if (!exited) ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  const std::string& error() const { return error_; }
  std::string log_tail(std::size_t bytes = 4000) const {
    const std::string all = read_file(log_);
    return all.size() <= bytes ? all : all.substr(all.size() - bytes);
  }

 private:
  pid_t pid_ = -1;
  fs::path log_;
  std::string error_;
};

}  // namespace hearth::testing::obs
