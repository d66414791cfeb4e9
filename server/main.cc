// hearth-server: serves GGUF models over gRPC (hearth.v1.Inference) and,
// with --http-listen, the OpenAI-compatible HTTP API.
//
//   hearth-server [--model NAME=PATH ...] [--config FILE] [--listen ADDR] ...
//
// With no model, serves the built-in synthetic demo model as "demo". When
// every model is loaded and warm, prints one line to stdout:
//   hearth-server ready grpc=HOST:PORT metrics=HOST:PORT [http=HOST:PORT]
// Logs go to stderr. SIGTERM/SIGINT drain and exit 0; while the models load
// they stop the loading after the current model, then drain what the loaded
// ones serve, and exit 0 without the ready line.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/cli_flags.h"
#include "base/read_file.h"
#include "base/str_cat.h"
#include "kernels/thread_pool.h"
#include "server/metrics.h"
#include "server/server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

constexpr const char* kUsage = R"(usage: hearth-server [options]

Models (with none, the built-in synthetic demo model is served as "demo"):
  --model NAME=PATH         serve a GGUF file under NAME (repeatable)
  --config FILE             model config file ([model NAME] sections; see README); repeatable
  --instances N             warm instances per model (default 1)
  --queue N                 requests that may wait per model (default 8)
  --context N               KV positions per instance (default: the model's, at most 4096)
  --kv-cache int8|float     KV cache type (default int8)
  --step-tokens N           token budget of one batched step: decode rows + prompt chunks
                            (default 16; larger admits prompts faster, smaller keeps
                            inter-token latency low while prompts are admitted)
  --chat-template [NAME=]FILE   the Jinja chat template Chat renders for model NAME (without
                            NAME=: for every model), instead of the file's own (repeatable)
  --keep-going              serve the models that load when another fails (calls to it:
                            FAILED_PRECONDITION naming the load error)
Network:
  --listen ADDR             gRPC address (default 0.0.0.0:50051; port 0 picks one)
  --metrics-listen ADDR     Prometheus /metrics address (default 0.0.0.0:9464; "off" disables)
  --http-listen ADDR        also serve the OpenAI-compatible HTTP API (/v1/completions,
                            /v1/chat/completions, /v1/models, /v1/models/{model}, /health)
                            here (default: off)
  --http-idle-timeout-s S   disconnect an HTTP client that sends or reads nothing for S seconds
                            mid-request, or idles that long between requests (default 5)
  --max-message-bytes N     largest request or response, gRPC message or HTTP body
                            (default 4194304)
  --keepalive-time-s S      ping an idle connection after S seconds (default 60)
  --keepalive-timeout-s S   drop it if the ping is unanswered after S seconds (default 20)
  --max-connection-age-s S  close connections after S seconds (in-flight calls finish), so
                            clients re-resolve and reach new replicas (default 0: never)
  --tls-cert FILE --tls-key FILE   serve TLS with this PEM certificate chain and key
  --auth-token TOKEN        require "authorization: Bearer TOKEN" on hearth.v1 calls and on
                            the HTTP API (not on health checks)
  --auth-token-file FILE    the same, the token read from FILE (its first line, trailing blanks ignored)
Work:
  --worker-threads N        gRPC worker threads (default: instances + queue slots + 16)
  --kernel-threads N        kernel threads (default: physical cores)
  --max-tokens-limit N      largest max_tokens a request may ask (default 4096)
  --grace-period-s S        on SIGTERM/SIGINT, let generations finish for S s (default 10)
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return 2;
}

const char* signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : "SIGINT"; }

// SIGTERM / SIGINT, waited for on a thread of its own from the start, so a
// signal that comes while the models load (minutes, for large ones) is seen
// then: requested() stops the loading between models, and wait() returns it
// to the main thread. Lives as long as the process.
class StopSignals {
 public:
  explicit StopSignals(const sigset_t& signals)
      : signals_(signals), received_(promise_.get_future()) {
    std::thread([this] { run(); }).detach();
  }
  bool requested() const { return signal_.load() != 0; }
  int wait() { return received_.get(); }

 private:
  void run() {
    int sig = 0;
    sigwait(&signals_, &sig);
    signal_.store(sig);
    promise_.set_value(sig);
  }
  const sigset_t signals_;
  std::atomic<int> signal_{0};
  std::promise<int> promise_;
  std::future<int> received_;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace hearth;
  // Before any thread exists: every thread inherits the mask, so only the
  // waiting thread below ever receives SIGTERM/SIGINT.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  spdlog::set_default_logger(spdlog::stderr_color_mt("hearth"));
  // Never destroyed: its thread may still wait when main returns.
  static StopSignals* const stop = new StopSignals(stop_signals);
  server::ModelSpec defaults;  // for every model; --model and --config entries may override
  server::ServerOptions options;

  // The numeric flags: name, allowed range, and where the value goes.
  struct NumericFlag {
    const char* name;
    double min, max;
    bool integer;
    std::function<void(double)> set;
  };
  const auto size = [](std::size_t& field) {
    return [&field](double v) { field = static_cast<std::size_t>(v); };
  };
  const auto count = [](int& field) { return [&field](double v) { field = static_cast<int>(v); }; };
  const NumericFlag numeric_flags[] = {
      {"instances", 1, server::kMaxInstances, true, size(defaults.instances)},
      {"queue", 0, server::kMaxQueue, true, size(defaults.queue)},
      {"context", 0, server::kMaxContext, true, size(defaults.context)},
      {"step-tokens", 1, server::kMaxStepTokens, true, size(defaults.step_tokens)},
      {"max-message-bytes", 1024, double(std::int64_t{1} << 30), true,
       size(options.max_message_bytes)},
      {"keepalive-time-s", 1, 86400, true, count(options.keepalive_time_s)},
      {"keepalive-timeout-s", 1, 3600, true, count(options.keepalive_timeout_s)},
      {"max-connection-age-s", 0, 86400 * 365, true, count(options.max_connection_age_s)},
      {"http-idle-timeout-s", 1, 3600, true, count(options.http_idle_timeout_s)},
      {"worker-threads", 2, 4096, true, size(options.worker_threads)},
      {"max-tokens-limit", 1, 1 << 20, true, size(options.service.max_tokens_limit)},
      {"kernel-threads", 1, 1024, true,
       [](double v) { kernels::set_default_thread_count(static_cast<std::size_t>(v)); }},
      {"grace-period-s", 0, 3600, false, [&](double v) { options.grace_period_s = v; }},
  };
  std::vector<std::string> value_flags = {
      "model",    "config",  "kv-cache",   "chat-template",   "listen",     "metrics-listen",
      "tls-cert", "tls-key", "auth-token", "auth-token-file", "http-listen"};
  for (const NumericFlag& f : numeric_flags) value_flags.push_back(f.name);

  hearth::Flags flags("hearth-server", value_flags, {"help", "keep-going"});
  if (!flags.parse(argc, argv)) return usage_error(flags.error());
  if (flags.get_bool("help").value_or(false)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty())
    return usage_error(
        str_cat("hearth-server: unexpected argument '", flags.positional()[0], "' (see --help)"));

  for (const NumericFlag& f : numeric_flags) {
    if (!flags.has(f.name)) continue;
    double value = 0;
    if (f.integer) {
      std::int64_t v = 0;
      if (!flags.get_int(f.name, static_cast<std::int64_t>(f.min), static_cast<std::int64_t>(f.max),
                         &v))
        return usage_error(flags.error());
      value = static_cast<double>(v);
    } else if (!flags.get_float(f.name, f.min, f.max, &value)) {
      return usage_error(flags.error());
    }
    f.set(value);
  }
  if (flags.has("kv-cache")) {
    const std::string kv = flags.get("kv-cache");
    if (kv != "int8" && kv != "float")
      return usage_error("hearth-server: --kv-cache: '" + kv + "' is not int8 or float");
    defaults.kv_cache = kv == "int8" ? engine::KvCacheType::kInt8 : engine::KvCacheType::kFloat;
  }

  for (const std::string& m : flags.get_all("model")) {
    absl::StatusOr<server::ModelSpec> spec = server::parse_model_flag(m, defaults);
    if (!spec.ok()) return usage_error(str_cat("hearth-server: ", spec.status().message()));
    options.models.push_back(*spec);
  }
  for (const std::string& path : flags.get_all("config")) {  // each file's models
    absl::StatusOr<std::string> text = read_whole_file(path);
    if (!text.ok())
      return usage_error(str_cat("hearth-server: --config: ", text.status().message()));
    auto specs = server::parse_model_config(*text, path, defaults);
    if (!specs.ok())
      return usage_error(str_cat("hearth-server: --config: ", specs.status().message()));
    options.models.insert(options.models.end(), specs->begin(), specs->end());
  }
  if (options.models.empty()) {
    server::ModelSpec demo = defaults;
    demo.name = "demo";
    demo.path = std::string(server::kDemoSource);
    options.models.push_back(demo);
    spdlog::warn(
        "no --model or --config given: serving the BUILT-IN SYNTHETIC DEMO MODEL as "
        "'demo' (random weights: its text is meaningless)");
  }
  if (absl::Status s =
          server::apply_chat_template_flags(flags.get_all("chat-template"), options.models);
      !s.ok())
    return usage_error(str_cat("hearth-server: --chat-template: ", s.message()));
  if (absl::Status s = server::validate_specs(options.models); !s.ok())
    return usage_error(str_cat("hearth-server: ", s.message()));

  options.listen = flags.get("listen", options.listen);
  options.http_listen = flags.get("http-listen");
  options.tls_cert_file = flags.get("tls-cert");
  options.tls_key_file = flags.get("tls-key");
  options.keep_going = flags.get_bool("keep-going").value_or(false);
  options.service.auth_token = flags.get("auth-token");
  if (flags.has("auth-token") && flags.has("auth-token-file"))
    return usage_error("hearth-server: --auth-token and --auth-token-file: give one, not both");
  if (flags.has("auth-token-file")) {
    const std::string path = flags.get("auth-token-file");
    absl::StatusOr<std::string> text = read_whole_file(path);
    if (!text.ok())
      return usage_error(str_cat("hearth-server: --auth-token-file: ", text.status().message()));
    // Its first line, without the line end (CRLF too) or trailing blanks: a
    // client can send neither in a header.
    std::string token = text->substr(0, text->find('\n'));
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ' || token.back() == '\t'))
      token.pop_back();
    options.service.auth_token = std::move(token);
    if (options.service.auth_token.empty())
      return usage_error("hearth-server: --auth-token-file: '" + path + "' starts with no token");
  }
  if (flags.has("auth-token") && options.service.auth_token.empty())
    return usage_error("hearth-server: --auth-token: the token is empty");
  const std::string metrics_listen = flags.get("metrics-listen", "0.0.0.0:9464");
  if (metrics_listen != "off") {
    if (absl::Status s = server::MetricsExporter::check_address(metrics_listen); !s.ok())
      return usage_error(str_cat("hearth-server: ", s.message()));
  }

  // Metrics first: the exporter is the server's request observer and must
  // outlive it (declared before `srv`, so destroyed after it).
  std::unique_ptr<server::MetricsExporter> metrics;
  std::string metrics_address = "off";
  if (metrics_listen != "off") {
    absl::StatusOr<std::unique_ptr<server::MetricsExporter>> started =
        server::MetricsExporter::start(metrics_listen);
    if (!started.ok()) {
      spdlog::error("{}", std::string(started.status().message()));
      return 1;
    }
    metrics = std::move(*started);
    std::string metrics_host = metrics_listen.substr(0, metrics_listen.rfind(':'));
    if (metrics_host == "0.0.0.0" || metrics_host == "[::]") metrics_host = "127.0.0.1";
    metrics_address = str_cat(metrics_host, ":", metrics->port());
  }

  server::HearthServer srv(options, metrics.get(), metrics.get());
  // Declared after `srv`, so destroyed before it on every return path: no
  // scrape reads the registry while `srv` destroys it.
  server::MetricsRegistryBinding metrics_binding(metrics.get(), srv.registry());
  absl::StatusOr<int> port = srv.start();
  if (!port.ok()) {
    spdlog::error("{}", std::string(port.status().message()));
    return 1;
  }
  // Load errors are logged by the registry, naming the model and the file.
  const absl::Status loaded =
      srv.load(&kernels::default_thread_pool(), [] { return stop->requested(); });
  if (stop->requested()) {  // the models loaded so far may be serving: drained
    spdlog::info("received {} while loading: stopping", signal_name(stop->wait()));
    srv.shutdown();
    return 0;
  }
  if (!loaded.ok()) return 1;
  // Wildcard hosts are printed as loopback: an address a client can dial.
  const auto dialable = [](const std::string& listen) {
    const std::string host = listen.substr(0, listen.rfind(':'));
    return host == "0.0.0.0" || host == "[::]" ? std::string("127.0.0.1") : host;
  };
  const std::string http =
      srv.http_port() > 0 ? str_cat(" http=", dialable(options.http_listen), ":", srv.http_port())
                          : "";
  std::printf("hearth-server ready grpc=%s:%d metrics=%s%s\n", dialable(options.listen).c_str(),
              *port, metrics_address.c_str(), http.c_str());
  std::fflush(stdout);

  const int sig = stop->wait();
  spdlog::info("received {}", signal_name(sig));
  srv.shutdown();
  return 0;
}
