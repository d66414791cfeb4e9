#include "server/http_frontend.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "base/status_macros.h"
#include "base/str_cat.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/bearer_auth.h"
#include "server/openai_api.h"
#include "spdlog/spdlog.h"

namespace hearth::server {
namespace {

using Json = nlohmann::ordered_json;
using openai::dump;
using openai::Endpoint;

constexpr const char* kJson = "application/json";
// How long stop() lets the responses in flight finish writing.
constexpr std::chrono::seconds kResponsesGrace{5};

// Address and port of a socket end, as httplib reports them (numeric host).
bool endpoint_of(const sockaddr_storage& a, std::string& host, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &in.sin_addr, text, sizeof text);
    port = ntohs(in.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text);
    port = ntohs(in6.sin6_port);
  } else {
    return false;
  }
  host = text;
  return true;
}

// Calls `visit(fd, local host, local port, peer host, peer port)` for
// each connected TCP socket of the process until it returns true.
template <typename Visit>
void for_each_connection(Visit visit) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof local, peer_len = sizeof peer;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0)
      continue;
    std::string local_host, peer_host;
    int local_port = 0, peer_port = 0;
    if (endpoint_of(local, local_host, local_port) && endpoint_of(peer, peer_host, peer_port) &&
        visit(static_cast<int>(fd), local_port, peer_host, peer_port))
      break;
  }
  closedir(dir);
}

// The socket of the connection `req` came on, or -1. httplib 0.11 gives a
// handler neither the socket nor a closed-connection check (later versions
// do), so it is found by its two ends among the process's descriptors,
// once per generation call. The descriptor stays this connection's while
// the handler runs: httplib closes it only after the handler returns.
int connection_socket(const httplib::Request& req) {
  int found = -1;
  for_each_connection([&](int fd, int local_port, const std::string& peer_host, int peer_port) {
    if (local_port != req.local_port || peer_port != req.remote_port ||
        peer_host != req.remote_addr)
      return false;
    found = fd;
    return true;
  });
  return found;
}

// Whether the peer has closed (or reset) the connection. Cheap: one poll
// with no wait. A request pipelined behind this one is readable data, not
// a hang-up.
bool peer_closed(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// Until when a call may wait for an instance, and until when it may run.
struct Deadlines {
  Clock::time_point admission = Clock::time_point::max();
  Clock::time_point call = Clock::time_point::max();
};

// `header`'s value in seconds: more than 0 (or 0 itself when zero_allowed)
// and at most a year.
absl::StatusOr<double> header_seconds(const httplib::Request& req, const char* header,
                                      bool zero_allowed) {
  const std::string value = req.get_header_value(header);
  char* end = nullptr;
  const double seconds = std::strtod(value.c_str(), &end);
  const bool low_ok = zero_allowed ? seconds >= 0 : seconds > 0;
  if (end == value.c_str() || *end != '\0' || !low_ok || !(seconds <= 86400 * 365))
    return absl::InvalidArgumentError(str_cat(header, ": '", value,
                                              "' is not a number of seconds in ",
                                              zero_allowed ? "[0" : "(0", ", 31536000]"));
  return seconds;
}

Clock::time_point seconds_from_now(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// The call's deadlines. X-Request-Timeout (seconds) bounds the whole call.
// X-Stainless-Timeout is the timeout of OpenAI's SDKs, which they stop
// counting once the response's headers arrive: it bounds a unary call
// (whose headers come with its answer) but only the admission of a stream
// (whose headers come first), and 0 (the SDKs' whole seconds of a timeout
// under one) leaves the call to the client's own clock.
absl::StatusOr<Deadlines> deadlines_of(const httplib::Request& req, bool stream) {
  Deadlines d;
  if (req.has_header("X-Request-Timeout")) {
    HEARTH_ASSIGN_OR_RETURN(const double s, header_seconds(req, "X-Request-Timeout", false));
    d.admission = d.call = seconds_from_now(s);
  } else if (req.has_header("X-Stainless-Timeout")) {
    HEARTH_ASSIGN_OR_RETURN(const double s, header_seconds(req, "X-Stainless-Timeout", true));
    if (s > 0) {
      d.admission = seconds_from_now(s);
      if (!stream) d.call = d.admission;
    }
  }
  return d;
}

absl::Status check_auth(const httplib::Request& req, const std::string& token) {
  std::optional<std::string_view> authorization;
  std::string value;
  if (req.has_header("Authorization")) {
    value = req.get_header_value("Authorization");
    authorization = value;
  }
  return check_bearer(authorization, token);
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(rng()));
  return str_cat(prefix, hex);
}

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A unary call's pieces, gathered into its response.
class CollectSink final : public PieceSink {
 public:
  explicit CollectSink(openai::ResponseBuilder& builder) : builder_(builder) {}
  bool has_room(std::size_t) const override { return true; }
  void piece(std::string_view text, std::int32_t token, const PieceLogprobs* logprobs) override {
    builder_.add_piece(text, token, logprobs);
  }
  bool failed() const override { return false; }

 private:
  openai::ResponseBuilder& builder_;
};

Json model_object(const ModelEntry& e, std::int64_t created) {
  Json out = {
      {"id", e.spec.name}, {"object", "model"}, {"created", created}, {"owned_by", "hearth"}};
  if (e.pool != nullptr) out["context_length"] = e.pool->context_length();
  return out;
}

}  // namespace

// A streamed generation call, from its admission (in the handler) to its
// last event (in the content provider, on the same httplib thread).
struct HttpFrontEnd::StreamCall {
  RequestRecord record;
  openai::ResponseHead head;
  bool include_usage = false;
  CallContext context;
  std::unique_ptr<Admission> admission;
  bool reported = false;  // finish() was called
};

HttpFrontEnd::HttpFrontEnd(RequestPath& path, HttpOptions options)
    : path_(path), options_(std::move(options)), started_unix_s_(unix_now()) {}

HttpFrontEnd::~HttpFrontEnd() { stop(); }

namespace {
thread_local bool t_response_counted = false;  // see HttpFrontEnd::response_begins
// Set by a handler whose request's body was not read to its end: the
// connection is shut down after the response (httplib's logger runs then).
thread_local bool t_close_after_response = false;
}  // namespace

void HttpFrontEnd::response_begins() { t_response_counted = responses_.begin(); }

void HttpFrontEnd::response_written() {
  if (!t_response_counted) return;
  t_response_counted = false;
  responses_.end();
}

absl::StatusOr<int> HttpFrontEnd::start() {
  const std::size_t colon = options_.listen.rfind(':');
  int port = -1;
  std::string host;
  if (colon != std::string::npos) {
    host = options_.listen.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);
    char* end = nullptr;
    const std::string port_text = options_.listen.substr(colon + 1);
    const long p = std::strtol(port_text.c_str(), &end, 10);
    if (!port_text.empty() && *end == '\0' && p >= 0 && p <= 65535) port = static_cast<int>(p);
  }
  if (port < 0 || host.empty())
    return absl::InvalidArgumentError(
        str_cat("--http-listen: '", options_.listen, "' is not HOST:PORT"));

  server_ = std::make_unique<httplib::Server>();
  httplib::Server& s = *server_;
  const std::size_t threads = options_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(options_.max_body_bytes);
  s.set_read_timeout(options_.idle_timeout_s, 0);
  s.set_write_timeout(options_.idle_timeout_s, 0);
  s.set_keep_alive_timeout(options_.idle_timeout_s);
  s.set_logger([this](const httplib::Request& req, const httplib::Response&) {
    if (t_close_after_response) {
      t_close_after_response = false;
      if (const int fd = connection_socket(req); fd >= 0) ::shutdown(fd, SHUT_RDWR);
    }
    response_written();
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) { health(res); });
  s.Get("/v1/models",
        [this](const httplib::Request& req, httplib::Response& res) { list_models(req, res); });
  s.Get(R"(/v1/models/(.+))",
        [this](const httplib::Request& req, httplib::Response& res) { get_model(req, res); });
  // A POST that declares neither a length nor chunks has no body (RFC 9112,
  // 6.3); httplib would wait out --http-idle-timeout-s for one instead.
  s.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (req.method != "POST" || req.has_header("Content-Length") ||
        req.has_header("Transfer-Encoding"))
      return httplib::Server::HandlerResponse::Unhandled;
    res.status = 411;
    res.set_content(openai::error_body(
                        absl::InvalidArgumentError("request: a POST needs a Content-Length or a "
                                                   "chunked Transfer-Encoding (and a JSON body)"),
                        false),
                    kJson);
    return httplib::Server::HandlerResponse::Handled;
  });
  // The POST endpoints read their own bodies: httplib would cap a body
  // declared as a form (curl -d's default type) at its compiled-in 8 KB with
  // a 413, and every endpoint here reads JSON whatever the declared type.
  // --max-message-bytes still bounds every body (set_payload_max_length for
  // a declared length, generate() for the others).
  auto post = [&s, this](const char* pattern, Endpoint endpoint) {
    s.Post(pattern, [this, endpoint](const httplib::Request& req, httplib::Response& res,
                                     const httplib::ContentReader& read) {
      generate(req, read, res, endpoint);
    });
  };
  post("/v1/completions", Endpoint::kCompletions);
  post("/v1/chat/completions", Endpoint::kChatCompletions);
  // httplib's own refusals (no such route, body too large, a request it
  // cannot parse) get OpenAI's error object too.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = str_cat("HTTP ", res.status);
    absl::StatusCode code = absl::StatusCode::kInvalidArgument;
    if (res.status == 404) {
      message = str_cat("no route ", req.method, " ", req.path);
      code = absl::StatusCode::kNotFound;
    } else if (res.status == 413) {
      message = "request body: larger than the server's limit (--max-message-bytes)";
    } else if (res.status == 400) {
      message =
          "request: not a complete HTTP request (malformed, cut short, or nothing "
          "received for --http-idle-timeout-s)";
    } else if (res.status >= 500) {
      code = absl::StatusCode::kInternal;
    }
    Json error = {{"error",
                   {{"message", message},
                    {"type", res.status >= 500 ? "server_error" : "invalid_request_error"},
                    {"param", nullptr},
                    {"code", std::string(absl::StatusCodeToString(code))}}}};
    res.set_content(dump(error), kJson);
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content(
        openai::error_body(absl::InternalError("internal error handling the request"), false),
        kJson);
  });

  // httplib's default sets SO_REUSEPORT, which lets a second server bind a
  // port this one listens on and take half its connections: SO_REUSEADDR
  // alone (a restart may still bind over its predecessor's TIME_WAIT).
  s.set_socket_options([](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  if (port == 0) {
    port = s.bind_to_any_port(host);
    if (port <= 0) port = -1;
  } else if (!s.bind_to_port(host, port)) {
    port = -1;
  }
  if (port < 0)
    return absl::UnavailableError(str_cat("--http-listen: cannot listen on ", options_.listen,
                                          " (address in use, or not an address)"));
  port_ = port;
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  spdlog::info("HTTP (OpenAI API) listening on {} (port {}){}; {} threads", options_.listen, port,
               options_.auth_token.empty() ? "" : ", bearer-token auth", threads);
  return port;
}

void HttpFrontEnd::stop() {
  if (server_ == nullptr) return;
  responses_.wait_for_none(std::chrono::steady_clock::now() + kResponsesGrace);
  server_->stop();
  // httplib 0.11 lets an idle keep-alive connection wait out its timeout
  // before its thread sees the stop; ending the reading side of every
  // connection to this port wakes those threads at once.
  for_each_connection([this](int fd, int local_port, const std::string&, int) {
    if (local_port == port_) ::shutdown(fd, SHUT_RD);
    return false;
  });
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

void HttpFrontEnd::health(httplib::Response& res) const {
  const State state = state_.load(std::memory_order_acquire);
  const char* name = state == State::kReady     ? "ready"
                     : state == State::kLoading ? "loading"
                                                : "draining";
  res.status = state == State::kReady ? 200 : 503;
  res.set_content(dump(Json{{"status", name}}), kJson);
}

bool HttpFrontEnd::draining(const std::string& model) const {
  if (path_.aborted() || state_.load(std::memory_order_acquire) != State::kReady) return true;
  absl::StatusOr<ModelEntry> entry = path_.registry().entry(model);
  return entry.ok() && entry->state != ModelState::kServing;
}

void HttpFrontEnd::refuse(RequestRecord& record, const absl::Status& status,
                          httplib::Response& res) {
  const bool unavailable = draining(record.model);
  res.status = openai::http_status(status, unavailable);
  if (res.status == 429) res.set_header("Retry-After", "1");
  if (res.status == 503) res.set_header("Retry-After", "5");
  res.set_content(openai::error_body(status, unavailable), kJson);
  path_.finish(record, status);
}

void HttpFrontEnd::list_models(const httplib::Request& req, httplib::Response& res) {
  RequestRecord record;
  record.method = "ListModels";
  record.transport = "http";
  if (absl::Status s = check_auth(req, options_.auth_token); !s.ok()) return refuse(record, s, res);
  Json data = Json::array();
  for (const ModelEntry& e : path_.registry().entries())
    data.push_back(model_object(e, started_unix_s_));
  res.set_content(dump(Json{{"object", "list"}, {"data", std::move(data)}}), kJson);
  path_.finish(record, absl::OkStatus());
}

void HttpFrontEnd::get_model(const httplib::Request& req, httplib::Response& res) {
  RequestRecord record;
  record.method = "GetModel";
  record.transport = "http";
  if (absl::Status s = check_auth(req, options_.auth_token); !s.ok()) return refuse(record, s, res);
  absl::StatusOr<ModelEntry> entry = path_.registry().entry(req.matches[1]);
  if (!entry.ok()) return refuse(record, entry.status(), res);
  record.model = entry->spec.name;
  res.set_content(dump(model_object(*entry, started_unix_s_)), kJson);
  path_.finish(record, absl::OkStatus());
}

void HttpFrontEnd::generate(const httplib::Request& req, const httplib::ContentReader& read,
                            httplib::Response& res, Endpoint endpoint) {
  response_begins();
  const bool chat = endpoint == Endpoint::kChatCompletions;
  auto call = std::make_shared<StreamCall>();
  RequestRecord& record = call->record;
  record.transport = "http";
  record.method = chat ? "ChatComplete" : "Complete";
  if (absl::Status s = check_auth(req, options_.auth_token); !s.ok()) return refuse(record, s, res);
  if (req.is_multipart_form_data())
    return refuse(record,
                  absl::InvalidArgumentError(
                      "request body: multipart form data is not accepted here; send a JSON object"),
                  res);
  std::string body;
  // httplib holds a declared Content-Length to the limit, but reads chunked
  // bodies, and inflates gzip or brotli ones, without one: the limit is kept
  // here, on the bytes as they arrive (inflated). What comes past it is read
  // and dropped, up to a bound, so that the client reads the 413 (closing a
  // socket with unread bytes resets it, and the answer can be lost).
  const std::size_t drain_at_most = 4 * options_.max_body_bytes;
  bool too_large = false;
  std::size_t dropped = 0;
  const bool complete = read([&](const char* data, std::size_t n) {
    if (!too_large && n <= options_.max_body_bytes - body.size()) {
      body.append(data, n);
      return true;
    }
    too_large = true;
    dropped += n;
    return dropped <= drain_at_most;
  });
  if (too_large || !complete) {
    // The error handler words the status: 413 here, or what httplib set
    // (too large, cut short). The client may be gone, so the response may
    // never be written (and logged): it is not waited for.
    if (too_large) res.status = 413;
    if (!complete) {
      // httplib keeps a connection open unless its request asked otherwise:
      // the body's unread rest would be parsed as the next request. The
      // connection ends once the answer is written (the logger).
      res.set_header("Connection", "close");
      t_close_after_response = true;
    }
    response_written();
    return;
  }
  thread_local std::mt19937_64 seeds{std::random_device{}()};
  absl::StatusOr<openai::Request> request =
      openai::parse_request(endpoint, body, options_.max_tokens_limit, seeds());
  if (!request.ok()) return refuse(record, request.status(), res);
  record.method = chat ? request->chat.method : request->generate.method;
  absl::StatusOr<Deadlines> deadlines = deadlines_of(req, request->stream);
  if (!deadlines.ok()) return refuse(record, deadlines.status(), res);

  call->context.deadline = deadlines->admission;
  if (const int fd = connection_socket(req); fd >= 0)
    call->context.cancelled = [fd] { return peer_closed(fd); };
  absl::StatusOr<std::unique_ptr<Admission>> admission =
      chat ? path_.admit(request->chat, call->context, record)
           : path_.admit(request->generate, call->context, record);
  if (!admission.ok()) return refuse(record, admission.status(), res);

  call->head = {endpoint, random_id(chat ? "chatcmpl-" : "cmpl-"), unix_now(), record.model,
                request->stream && request->include_usage};
  if (!request->stream) {
    openai::ResponseBuilder builder(call->head);
    CollectSink sink(builder);
    absl::StatusOr<GenerateOutcome> outcome =
        path_.execute(std::move(*admission), sink, call->context, record);
    if (!outcome.ok()) return refuse(record, outcome.status(), res);
    res.set_content(builder.finish(*outcome), kJson);
    path_.finish(record, absl::OkStatus());
    return;
  }
  call->include_usage = request->include_usage;
  call->admission = std::move(*admission);
  call->context.deadline = deadlines->call;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, call](std::size_t /*offset*/, httplib::DataSink& sink) {
        stream(*call, sink);
        return true;
      },
      [this, call](bool /*success*/) {
        // The headers could not be sent: the stream never started.
        if (!call->reported)
          path_.finish(call->record, absl::CancelledError("the client went away"));
      });
}

void HttpFrontEnd::stream(StreamCall& call, httplib::DataSink& sink) {
  call.reported = true;
  bool sent = true;  // every write so far reached the socket
  auto send = [&sink, &sent](std::string_view event) {
    sent = sent && sink.write(event.data(), event.size());
    return sent;
  };
  if (call.head.endpoint == Endpoint::kChatCompletions) send(openai::role_event(call.head));

  PieceWriterPool::Borrowed writer = writers_.take();
  const openai::ResponseHead& head = call.head;
  openai::LogprobQueue logprobs(head.endpoint);  // the writer thread's, then ours
  writer->begin([&head, &send, &logprobs](std::string_view text, std::int32_t token,
                                          const PieceLogprobs* lp) {
    logprobs.add(text, token >= 0 ? lp : nullptr);
    const std::string event = openai::piece_event(head, text, logprobs.take_released());
    return event.empty() || send(event);
  });
  PieceWriterSink pieces(*writer);
  absl::StatusOr<GenerateOutcome> outcome =
      path_.execute(std::move(call.admission), pieces, call.context, call.record);
  writer->finish();  // every piece is out (or the stream is gone) before the end

  absl::Status status = outcome.status();
  if (outcome.ok()) {
    // Tokens that ended the output without text of their own (no stop string).
    const std::string rest = openai::piece_event(head, "", logprobs.take_rest(outcome->finish));
    if (!rest.empty()) send(rest);
    send(openai::finish_event(head, *outcome));
    if (call.include_usage) send(openai::usage_event(head, *outcome));
  } else {
    send(openai::error_event(status));
  }
  // Counted before the last event, as gRPC counts a call before its status
  // goes out: a client that has read [DONE] finds the request in /metrics.
  if (status.ok() && !sent) status = absl::CancelledError("the client went away");
  path_.finish(call.record, status);
  send(openai::kDoneEvent);
  sink.done();
}

}  // namespace hearth::server
