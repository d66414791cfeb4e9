// HttpFrontEnd: the OpenAI-compatible HTTP API (server/openai_api.h) over
// the same RequestPath as the gRPC service, served by cpp-httplib.
//
//   GET  /health                 200 {"status":"ready"}; 503 "loading" or "draining"
//   GET  /v1/models              the served models (OpenAI's list object)
//   GET  /v1/models/{id}         one of them
//   POST /v1/completions         a prompt's completion
//   POST /v1/chat/completions    a reply rendered with the model's chat template
// Both POSTs answer with one JSON object, or with "stream": true as
// server-sent events (a chunk per piece, the finish reason, usage when
// asked, then "data: [DONE]"). Errors are OpenAI's error objects with the
// matching HTTP status (openai::http_status); 429 and 503 carry Retry-After.
//
// A generation call is admitted (model found, request checked and
// tokenized, instance held) before anything is sent, so every refusal has
// its HTTP status; an error after a stream began is sent as an error event.
// The call's deadline comes from the X-Request-Timeout header (seconds), or
// X-Stainless-Timeout as OpenAI's SDKs send it. A client that disconnects
// cancels its generation at the next step: the loop polls the connection's
// socket (and a failed write ends a stream too).
//
// Threads: httplib's pool runs each connection on one of `threads` threads,
// which parses, admits and then waits while the model's step loop runs the
// generation; a stream's events are written by a PieceWriter's thread, so
// the step loop never waits for the socket. start/set_state/stop are called
// by the server's owner thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/calls_in_flight.h"
#include "server/piece_writer.h"
#include "server/request_path.h"

namespace httplib {
class ContentReader;
class DataSink;
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace hearth::server {

namespace openai {
enum class Endpoint;  // server/openai_api.h
}  // namespace openai

struct HttpOptions {
  std::string listen;      // "HOST:PORT" ("[::]:PORT" for IPv6); port 0 picks one
  std::string auth_token;  // empty: no auth (the same token as gRPC's)
  std::size_t threads = 32;
  std::size_t max_body_bytes = 4 << 20;  // larger request bodies get 413
  std::size_t max_tokens_limit = 4096;
  // A client that sends nothing (or reads nothing) for this long in the
  // middle of a request (a response) is disconnected, as is an idle
  // keep-alive connection: each holds one of the threads meanwhile.
  int idle_timeout_s = 5;
};

class HttpFrontEnd {
 public:
  enum class State { kLoading, kReady, kDraining };

  // `path` outlives the front end.
  HttpFrontEnd(RequestPath& path, HttpOptions options);
  // Stops serving (see stop()).
  ~HttpFrontEnd();
  HttpFrontEnd(const HttpFrontEnd&) = delete;
  HttpFrontEnd& operator=(const HttpFrontEnd&) = delete;

  // Binds and starts serving on a thread of its own; returns the bound port.
  // Errors name the address.
  absl::StatusOr<int> start();
  // What /health reports.
  void set_state(State state) { state_.store(state, std::memory_order_release); }
  // Lets the generation responses still being written finish (for up to
  // 5 s, as gRPC's shutdown), then closes the listening socket and the idle
  // connections and waits for httplib's threads. The owner first drains the
  // models and aborts what runs past the grace period, so those responses
  // are only their last events.
  void stop();

 private:
  void health(httplib::Response& res) const;
  void list_models(const httplib::Request& req, httplib::Response& res);
  void get_model(const httplib::Request& req, httplib::Response& res);
  void generate(const httplib::Request& req, const httplib::ContentReader& read,
                httplib::Response& res, openai::Endpoint endpoint);
  // Answers with `status` as OpenAI's error object and reports the call.
  void refuse(RequestRecord& record, const absl::Status& status, httplib::Response& res);
  bool draining(const std::string& model) const;

  struct StreamCall;
  void stream(StreamCall& call, httplib::DataSink& sink);

  // Generation responses are counted from their handler's start until
  // httplib's logger runs, after the response's last byte is written. stop()
  // waits for none to be left: httplib's stop ends a chunked response
  // before its content is written, and after stop() ends the connections'
  // reads, httplib refuses to write to them (it takes a read end for a peer
  // that left). The handler and the logger of one request run on the same
  // httplib thread, one request at a time, so a thread-local mark tells the
  // logger whether its request was counted.
  void response_begins();
  void response_written();

  RequestPath& path_;
  const HttpOptions options_;
  const std::int64_t started_unix_s_;
  std::atomic<State> state_{State::kLoading};
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;        // bound by start()
  std::thread thread_;  // runs httplib's accept loop
  PieceWriterPool writers_;
  CallsInFlight responses_;  // see response_begins()
};

}  // namespace hearth::server
