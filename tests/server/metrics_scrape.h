// Reading a live server's /metrics in tests: a minimal HTTP GET over
// loopback and the Prometheus text exposition as a map of samples.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/server/test_util.h"

namespace hearth::testing {

// --- /metrics ----------------------------------------------------------------

// GET http://HOST:PORT`path` (HTTP/1.0, connection closed by the server);
// returns the body, or nullopt (with *error set) on a connection failure, a
// non-200 status or `timeout`.
inline std::optional<std::string> http_get(const std::string& host_port, const std::string& path,
                                           std::string* error, milliseconds timeout = seconds(10)) {
  const auto deadline = Clock::now() + timeout;
  auto left_ms = [&] {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    return static_cast<int>(left < 0 ? 0 : left);
  };
  const std::size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) {
    *error = "not HOST:PORT: " + host_port;
    return std::nullopt;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::atoi(host_port.c_str() + colon + 1)));
  if (::inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    *error = "not an IPv4 address: " + host_port;
    return std::nullopt;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = "socket() failed";
    return std::nullopt;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 &&
      errno != EINPROGRESS) {
    *error = "connect to " + host_port + " failed: " + std::strerror(errno);
    return std::nullopt;
  }
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, left_ms()) != 1) {
    *error = "connect to " + host_port + " timed out";
    return std::nullopt;
  }
  int so_error = 0;
  socklen_t len = sizeof so_error;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
  if (so_error != 0) {
    *error = "connect to " + host_port + " failed: " + std::strerror(so_error);
    return std::nullopt;
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + host_port + "\r\n\r\n";
  std::size_t sent = 0;
  while (sent < request.size()) {
    p = {fd, POLLOUT, 0};
    if (::poll(&p, 1, left_ms()) != 1) {
      *error = "sending to " + host_port + " timed out";
      return std::nullopt;
    }
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN) {
      *error = "send failed";
      return std::nullopt;
    }
    if (n > 0) sent += static_cast<std::size_t>(n);
  }
  std::string response;
  char buf[16384];
  for (;;) {
    p = {fd, POLLIN, 0};
    if (::poll(&p, 1, left_ms()) != 1) {
      *error = "reading from " + host_port + " timed out";
      return std::nullopt;
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      *error = "recv failed";
      return std::nullopt;
    }
    response.append(buf, static_cast<std::size_t>(n));
  }
  const std::size_t body = response.find("\r\n\r\n");
  if (response.compare(0, 12, "HTTP/1.1 200") != 0 &&
      response.compare(0, 12, "HTTP/1.0 200") != 0) {
    *error = "HTTP error: " + response.substr(0, response.find("\r\n"));
    return std::nullopt;
  }
  if (body == std::string::npos) {
    *error = "malformed HTTP response";
    return std::nullopt;
  }
  return response.substr(body + 4);
}

// The samples of a Prometheus text exposition: "name{labels}" (exactly as
// written, labels in the exporter's order) -> value.
inline std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    // The value follows the last space outside the label set.
    const std::size_t close = line.rfind('}');
    const std::size_t space = line.find(' ', close == std::string::npos ? 0 : close);
    if (space == std::string::npos) continue;
    const std::string value = line.substr(space + 1);
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (end == value.c_str()) continue;
    out[line.substr(0, space)] = v;
  }
  return out;
}

// A scrape of the server's /metrics; fails the test (non-fatally) and returns
// an empty map when the endpoint does not answer.
inline std::map<std::string, double> scrape(const ServerProcess& server) {
  std::string error;
  const std::optional<std::string> body = http_get(server.metrics_address(), "/metrics", &error);
  EXPECT_TRUE(body.has_value()) << "scraping " << server.metrics_address() << ": " << error;
  return body ? parse_metrics(*body) : std::map<std::string, double>{};
}

// The value of `series` ("name" or "name{labels}"), or nullopt when absent.
inline std::optional<double> metric(const std::map<std::string, double>& m,
                                    const std::string& series) {
  const auto it = m.find(series);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

// The sum of `name`'s samples whose label set contains every one of `labels`
// (each written as in the exposition, e.g. "code=\"OK\""): a counter summed
// over the labels not named.
inline double sum_series(const std::map<std::string, double>& m, const std::string& name,
                         const std::vector<std::string>& labels = {}) {
  double sum = 0;
  for (const auto& [series, value] : m) {
    if (series.rfind(name + "{", 0) != 0 && series != name) continue;
    bool match = true;
    for (const std::string& l : labels) match = match && series.find(l) != std::string::npos;
    if (match) sum += value;
  }
  return sum;
}

// Scrapes until `pred` holds on a scrape (back to back: each is a real HTTP
// round trip) or `timeout` passes; returns the last scrape, *held whether it held.
inline std::map<std::string, double> scrape_until(
    const ServerProcess& server,
    const std::function<bool(const std::map<std::string, double>&)>& pred, milliseconds timeout,
    bool* held) {
  const auto deadline = Clock::now() + timeout;
  std::map<std::string, double> m;
  do {
    m = scrape(server);
    if (pred(m)) {
      *held = true;
      return m;
    }
  } while (Clock::now() < deadline);
  *held = false;
  return m;
}

}  // namespace hearth::testing
