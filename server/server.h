// HearthServer: the gRPC server around the model registry, with health,
// reflection, TLS, auth, and a graceful drain; and, when asked, the
// OpenAI-compatible HTTP front end over the same request path.
//
// Life of a server:
//   start()    binds the listen address and starts serving at once, with
//              health NOT_SERVING (overall and per model) so probes see the
//              process while models load;
//   load()     loads and warms every model; each becomes SERVING (health per
//              model), then the overall status becomes SERVING;
//   shutdown() health NOT_SERVING, every model drains (new requests:
//              UNAVAILABLE), in-flight generations get up to the grace period
//              to finish, then are cancelled; the gRPC server stops.
// Threads: gRPC's synchronous server runs each call on one of its worker
// threads (at most `worker_threads`), which waits while the model's step
// loop thread runs the generation; start/load/shutdown are called from the
// main thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"
#include "server/http_frontend.h"
#include "server/inference_service.h"
#include "server/model_registry.h"

namespace hearth::server {

struct ServerOptions {
  std::string listen = "0.0.0.0:50051";
  // The OpenAI-compatible HTTP API's address (server/http_frontend.h);
  // empty: off. Its bodies are limited by max_message_bytes, its threads
  // like gRPC's workers.
  std::string http_listen;
  int http_idle_timeout_s = 5;  // see HttpOptions::idle_timeout_s
  std::vector<ModelSpec> models;
  std::size_t worker_threads = 0;  // 0: enough for every instance, queue slot and 16 more
  std::size_t max_message_bytes = 4 << 20;
  int keepalive_time_s = 60;
  int keepalive_timeout_s = 20;
  // Close a connection (gracefully: calls in flight finish) after this many
  // seconds, so long-lived clients re-resolve and spread over new replicas;
  // 0: never.
  int max_connection_age_s = 0;
  std::string tls_cert_file, tls_key_file;  // both or neither
  ServiceOptions service;
  double grace_period_s = 10;
  bool keep_going = false;  // serve the models that load when another fails
};

class HearthServer {
 public:
  // `observer` hears of every call and `steps` of every batched step; both
  // may be nullptr and must outlive the server.
  explicit HearthServer(ServerOptions options, RequestObserver* observer = nullptr,
                        StepObserver* steps = nullptr);
  ~HearthServer();

  // Binds and starts; returns the bound port (the one picked when the listen
  // address has port 0). Errors name the address or the TLS file. Starts
  // the HTTP front end too when http_listen is set.
  absl::StatusOr<int> start();
  // The HTTP front end's bound port; 0 when it is off.
  int http_port() const { return http_port_; }
  // Loads every model (see ModelRegistry::load_all); health follows. When
  // `stop_requested` turns true, no further model is loaded, and the server
  // does not turn SERVING (CANCELLED).
  absl::Status load(kernels::ThreadPool* kernel_pool,
                    const std::function<bool()>& stop_requested = {});
  // Drains and stops (see above). Returns true if every generation finished
  // within the grace period.
  bool shutdown();

  ModelRegistry& registry() { return registry_; }

 private:
  void set_health(const std::string& service, bool serving);

  ServerOptions options_;
  ModelRegistry registry_;
  StepObserver* steps_;
  RequestPath path_;  // shared by the front ends
  InferenceService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpFrontEnd> http_;  // null when off
  int http_port_ = 0;
};

}  // namespace hearth::server
