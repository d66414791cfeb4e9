#include "server/server.h"

#include <algorithm>
#include <string_view>
#include <thread>

#include "base/read_file.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/spdlog.h"

namespace hearth::server {
namespace {

// How long a drained server waits after its last handler returned before it
// closes connections (see shutdown()): loopback and LAN round trips are
// well under it, and it adds only this much to a SIGTERM.
constexpr std::chrono::milliseconds kLastFramesSettle{100};

// The PEM file `flag` names, refused naming both unless it holds `marker`
// (gRPC's own refusal of a bad certificate or key only says it cannot listen).
absl::StatusOr<std::string> read_pem(const std::string& path, const char* flag,
                                     std::string_view marker, std::string_view what) {
  absl::StatusOr<std::string> text = read_whole_file(path);
  if (!text.ok()) return absl::InvalidArgumentError(str_cat(flag, ": ", text.status().message()));
  if (text->find(marker) == std::string::npos)
    return absl::InvalidArgumentError(str_cat(flag, ": '", path, "' holds no PEM ", what));
  return text;
}

}  // namespace

HearthServer::HearthServer(ServerOptions options, RequestObserver* observer, StepObserver* steps)
    : options_(std::move(options)),
      registry_(options_.models),
      steps_(steps),
      path_(registry_, RequestPathOptions{options_.service.max_tokens_limit}, observer),
      service_(path_, options_.service) {}

HearthServer::~HearthServer() {
  if (http_) http_->set_state(HttpFrontEnd::State::kDraining);
  if (server_) {
    path_.abort_all();
    registry_.drain_all();
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
  if (http_) http_->stop();
}

void HearthServer::set_health(const std::string& service, bool serving) {
  if (server_) server_->GetHealthCheckService()->SetServingStatus(service, serving);
}

absl::StatusOr<int> HearthServer::start() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;

  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!options_.tls_cert_file.empty() || !options_.tls_key_file.empty()) {
    if (options_.tls_cert_file.empty() || options_.tls_key_file.empty())
      return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
    HEARTH_ASSIGN_OR_RETURN(auto cert, read_pem(options_.tls_cert_file, "--tls-cert",
                                                "-----BEGIN CERTIFICATE-----", "certificate"));
    HEARTH_ASSIGN_OR_RETURN(
        auto key, read_pem(options_.tls_key_file, "--tls-key", "PRIVATE KEY-----", "private key"));
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({key, cert});
    creds = grpc::SslServerCredentials(ssl);
  }
  // gRPC wraps a port past 65535 (99999 listened on 34463) instead of refusing it.
  if (const std::size_t colon = options_.listen.rfind(':'); colon != std::string::npos) {
    const std::string_view digits = std::string_view(options_.listen).substr(colon + 1);
    if (!digits.empty() && digits.size() <= 9 &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        std::stoul(std::string(digits)) > 65535)
      return absl::InvalidArgumentError(str_cat("--listen: '", options_.listen, "': port ", digits,
                                                " is out of range (0-65535)"));
  }
  int port = 0;
  builder.AddListeningPort(options_.listen, creds, &port);
  builder.RegisterService(&service_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options_.max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, options_.keepalive_time_s * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, options_.keepalive_timeout_s * 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  if (options_.max_connection_age_s > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               options_.max_connection_age_s * 1000);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               static_cast<int>(options_.grace_period_s * 1000));
  }
  // gRPC enables SO_REUSEPORT by default: a second server on a taken port
  // would start and silently share it. A taken port must be an error.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);

  // Every instance and queue slot may hold a worker thread for a whole
  // generation; 16 more keep the light calls (Tokenize, ListModels) going.
  std::size_t threads = options_.worker_threads;
  if (threads == 0) {
    threads = 16;
    for (const ModelSpec& m : options_.models) threads += m.instances + m.queue;
  }
  grpc::ResourceQuota quota("hearth");
  quota.SetMaxThreads(static_cast<int>(threads));
  builder.SetResourceQuota(quota);
  // A worker thread that finishes a call stays as a poller instead of
  // exiting (up to every thread), so its warm temp allocator serves the next
  // request; with gRPC's default (2 pollers) busy servers churn threads and
  // every new one starts with a cold cache.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                              static_cast<int>(threads));

  server_ = builder.BuildAndStart();
  if (!server_ || port == 0)
    return absl::UnavailableError(str_cat("--listen: cannot listen on ", options_.listen,
                                          " (address in use, or not an address)"));
  set_health("", false);
  for (const ModelEntry& e : registry_.entries()) set_health(e.spec.name, false);
  if (!options_.http_listen.empty()) {
    HttpOptions http;
    http.listen = options_.http_listen;
    http.auth_token = options_.service.auth_token;
    http.threads = threads;
    http.max_body_bytes = options_.max_message_bytes;
    http.max_tokens_limit = options_.service.max_tokens_limit;
    http.idle_timeout_s = options_.http_idle_timeout_s;
    http_ = std::make_unique<HttpFrontEnd>(path_, http);
    HEARTH_ASSIGN_OR_RETURN(http_port_, http_->start());
  }
  spdlog::info("gRPC listening on {} (port {}){}{}; {} worker threads", options_.listen, port,
               creds == nullptr || options_.tls_cert_file.empty() ? "" : ", TLS",
               options_.service.auth_token.empty() ? "" : ", bearer-token auth", threads);
  return port;
}

absl::Status HearthServer::load(kernels::ThreadPool* kernel_pool,
                                const std::function<bool()>& stop_requested) {
  absl::Status s = registry_.load_all(
      kernel_pool, options_.keep_going,
      [this](const std::string& name, ModelState state) {
        set_health(name, state == ModelState::kServing);
      },
      steps_, stop_requested);
  if (absl::IsCancelled(s)) return s;
  bool any = false;
  for (const ModelEntry& e : registry_.entries()) any = any || e.state == ModelState::kServing;
  if (!s.ok() && (!options_.keep_going || !any)) return s;
  set_health("", true);
  set_health("hearth.v1.Inference", true);
  if (http_) http_->set_state(HttpFrontEnd::State::kReady);
  return absl::OkStatus();
}

bool HearthServer::shutdown() {
  if (!server_) return true;
  spdlog::info("shutting down: draining for up to {:.1f} s", options_.grace_period_s);
  set_health("", false);
  set_health("hearth.v1.Inference", false);
  for (const ModelEntry& e : registry_.entries()) set_health(e.spec.name, false);
  if (http_) http_->set_state(HttpFrontEnd::State::kDraining);
  registry_.drain_all();
  const auto grace = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.grace_period_s));
  // Drained: every generation ended and every gRPC handler that was running
  // returned (its last pieces and status written), so that no call ends
  // after the GOAWAY (server/calls_in_flight.h says why that can lose it).
  const Clock::time_point deadline = Clock::now() + grace;
  const bool drained =
      registry_.wait_idle(deadline) && service_.calls_in_flight().close_and_wait(deadline);
  if (!drained) {
    spdlog::warn("grace period over: cancelling the generations and calls still running");
    path_.abort_all();
  } else {
    // The last statuses leave on gRPC's threads after their handlers return,
    // and the clients answer them with flow-control frames: a pause lets
    // both go by before Shutdown() closes the idle connections.
    std::this_thread::sleep_for(kLastFramesSettle);
  }
  // Cancelled generations stop within one decode step; give the calls a
  // moment to send their final status before the transport closes.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_->Wait();
  server_.reset();
  if (http_) http_->stop();
  spdlog::info("stopped{}", drained ? "" : " (some generations were cancelled)");
  return drained;
}

}  // namespace hearth::server
