// MetricsExporter: hearth-server's Prometheus /metrics endpoint.
//
// Three sources feed it:
//   * requests, pushed by the front ends and the request path through the
//     RequestObserver hooks (counters and histograms, updated on the
//     request's thread, or the step loop's for on_inter_token);
//   * batched steps, pushed by each model's StepLoop through the
//     StepObserver hook (histograms, updated on the loop's thread);
//   * live state, pulled at scrape time: the model registry's pools, the
//     process-wide temp allocator registry and /proc/self. A scrape builds
//     these families from a fresh read, so no background thread polls.
//
// Metrics (base units; counters end in _total). Labels: model = the served
// model's name ("(unknown)" for calls naming no served model), method = the
// hearth.v1 method (an HTTP call counts as the method it maps to: streamed
// chat completions as Chat, unary ones as ChatComplete, completions as
// Generate / Complete, GET /v1/models as ListModels, GET /v1/models/{model}
// as GetModel), code = the final gRPC status code name ("OK", "UNAVAILABLE",
// ...), transport = the front end the call came through ("grpc", "http").
//
//   Requests
//   hearth_requests_total{model,method,code,transport}     counter
//   hearth_request_duration_seconds{model,method,transport}  histogram (arrival to final
//                                                          status)
//   hearth_queue_wait_seconds{model}                       histogram (a request's wait for an
//                                                          instance: admitted, timed out or
//                                                          cancelled in the queue)
//   hearth_time_to_first_token_seconds{model}              histogram
//   hearth_inter_token_latency_seconds{model}              histogram (token to next token)
//   hearth_prompt_tokens_total{model}                      counter (admitted requests')
//   hearth_prompt_tokens_cached_total{model}               counter (prompt tokens found in a
//                                                          KV cache: prefix reuse)
//   hearth_generated_tokens_total{model}                   counter
//   Batched steps (continuous batching: one step runs every running sequence
//   of a model that has room, decode tokens plus prompt chunks)
//   hearth_step_sequences{model}                           histogram (sequences in one step;
//                                                          buckets 1 to 64)
//   hearth_step_tokens{model}                              histogram (tokens in one step:
//                                                          decode + prompt chunk rows;
//                                                          buckets 1 to 1024)
//   hearth_step_duration_seconds{model}                    histogram (one step's forward and
//                                                          sampling)
//   Models (live)
//   hearth_model_state{model,state}                        gauge, 1 for the current state
//   hearth_model_instances{model}, hearth_model_instances_busy{model},
//   hearth_model_queue_depth{model}, hearth_model_queue_capacity{model}   gauges
//   hearth_model_requests_running{model}                   gauge (sequences in the step loop)
//   hearth_model_requests_waiting{model}                   gauge (requests waiting for an
//                                                          instance: the queue depth)
//   hearth_model_kv_positions_used{model}                  gauge (KV positions the running
//                                                          sequences hold)
//   hearth_model_kv_positions_capacity{model}              gauge (instances x context; not
//                                                          "_total": that suffix is for
//                                                          counters)
//   hearth_model_weights_mapped_bytes{model}               gauge (the model file, shared)
//   hearth_model_weights_packed_bytes{model}               gauge (packed projections, shared)
//   hearth_module_planned_activation_bytes{model}          gauge, ONE instance's
//   hearth_module_arena_capacity_bytes{model}, hearth_module_arena_used_bytes{model},
//   hearth_module_kv_cache_bytes{model}, hearth_module_temp_peak_bytes{model}
//                                                          gauges, ONE instance's (measured
//                                                          after warm-up at load; multiply by
//                                                          hearth_model_instances for a total)
//   Temp allocators: every thread's caching temp allocator (gRPC workers
//   running generations, kernel pool threads). Counters are sums over all
//   threads, those that have exited included; byte gauges are sums over the
//   live threads (what the process holds now).
//   hearth_temp_allocator_{lookups,hits,misses,failures,trims}_total   counters
//   hearth_temp_allocator_trimmed_bytes_total              counter
//   hearth_temp_allocator_{in_use,cached,reserved}_bytes   gauges (reserved = in use + cached)
//   hearth_temp_allocator_threads                          gauge (live threads owning one)
//   hearth_temp_allocator_exited_threads_total             counter (their caches died with them)
//   hearth_temp_allocator_peak_bytes{window}               gauge
//   hearth_temp_allocator_hit_ratio{window}                gauge in [0, 1]
//     window="since_start":     peak = the most temp memory ONE thread held at
//                               once since the server started (the max over
//                               every finished generation and every live
//                               thread seen at a scrape; never decreases):
//                               what the largest generation needed. Not a sum
//                               over threads: reserved_bytes is the process's
//                               total. Hit ratio = hits / lookups since start.
//     window="last_generation": the most recently finished generation (any
//                               model): its highest use and its hits /
//                               lookups, taken from the generation itself, so
//                               exact even while others run concurrently.
//                               0 before the first generation.
//   Process
//   process_resident_memory_bytes, process_virtual_memory_bytes,
//   process_cpu_seconds_total, process_start_time_seconds, process_open_fds
//                                                          (from /proc/self; the
//                                                          standard client names)
//   hearth_build_info{version}                             gauge, always 1
//
// Histogram buckets (seconds) span CPU token latencies: 1 ms to 10 s (the
// step duration too).
// prometheus-cpp adds its own exposer_* series (scrapes, bytes, latencies).
//
// Thread safety: every public method may be called from any thread.
// prometheus-cpp's families, counters and histograms lock or use atomics
// internally; `models_mu_` guards the per-model metric caches (requests and
// steps); `temp_mu_`
// guards the temp allocator peaks and last-generation figures (a pair that
// must not tear); `registry_mu_` guards the registry pointer and is held
// while a scrape reads the registry, so that set_registry(nullptr) returns
// only when no scrape still uses the old one. Scrapes run on the exposer's
// own HTTP threads (two). No exception leaves this class: the observer hooks
// (request and step) and scrapes catch everything, start() turns a bind failure into a status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/request_observer.h"
#include "server/step_loop.h"

namespace prometheus {
class Counter;
class Exposer;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace hearth::server {

class ModelRegistry;

class MetricsExporter final : public RequestObserver, public StepObserver {
 public:
  // INVALID_ARGUMENT unless `address` is "IPV4:PORT" (the embedded HTTP
  // server listens on IPv4 only). Check flags with it before starting.
  static absl::Status check_address(const std::string& address);
  // Serves /metrics on `address` (port 0 picks a free one). Errors name the
  // address: INVALID_ARGUMENT as check_address(), UNAVAILABLE when it cannot
  // be bound (taken, or not this machine's).
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> start(const std::string& address);
  ~MetricsExporter() override;

  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;

  // The port actually bound.
  int port() const { return port_; }

  // The registry whose models a scrape reports; nullptr stops reporting them.
  // Call set_registry(nullptr) before the registry is destroyed: it waits for
  // a scrape in progress to stop using the old one.
  void set_registry(const ModelRegistry* registry);

  // RequestObserver: cheap, no I/O, never throws.
  void on_inter_token(const std::string& model, double seconds) override;
  void on_request_done(const RequestRecord& record) override;
  // StepObserver: the same (called on the model's step loop thread).
  void on_step(const std::string& model, std::size_t sequences, std::size_t tokens,
               double seconds) override;

 private:
  class LiveCollector;
  struct ModelMetrics;  // the per-model request series, created on first use
  struct StepMetrics;   // the per-model step series, created on a model's first step

  MetricsExporter();
  ModelMetrics& model_metrics(const std::string& model);  // locks models_mu_
  StepMetrics& step_metrics(const std::string& model);    // locks models_mu_

  // The families below are owned by request_registry_ and live as long as it.
  std::shared_ptr<prometheus::Registry> request_registry_;
  prometheus::Family<prometheus::Counter>* requests_total_ = nullptr;
  prometheus::Family<prometheus::Histogram>* request_duration_ = nullptr;
  prometheus::Family<prometheus::Histogram>* queue_wait_ = nullptr;
  prometheus::Family<prometheus::Histogram>* ttft_ = nullptr;
  prometheus::Family<prometheus::Histogram>* inter_token_ = nullptr;
  prometheus::Family<prometheus::Counter>* prompt_tokens_ = nullptr;
  prometheus::Family<prometheus::Counter>* prompt_tokens_cached_ = nullptr;
  prometheus::Family<prometheus::Counter>* generated_tokens_ = nullptr;
  prometheus::Family<prometheus::Histogram>* step_sequences_ = nullptr;
  prometheus::Family<prometheus::Histogram>* step_tokens_ = nullptr;
  prometheus::Family<prometheus::Histogram>* step_duration_ = nullptr;

  std::mutex models_mu_;
  std::map<std::string, std::unique_ptr<ModelMetrics>> models_;  // guarded by models_mu_
  std::map<std::string, std::unique_ptr<StepMetrics>> steps_;    // guarded by models_mu_

  // Temp allocator figures the snapshots cannot give (see above). Mutable:
  // a scrape (const) folds the live threads' peaks into the maximum.
  struct TempFigures {
    std::uint64_t max_peak_bytes = 0;  // since start
    std::uint64_t last_peak_bytes = 0;
    double last_hit_ratio = 0;
  };
  mutable std::mutex temp_mu_;
  mutable TempFigures temp_;  // guarded by temp_mu_

  mutable std::mutex registry_mu_;
  const ModelRegistry* registry_ = nullptr;  // guarded by registry_mu_

  std::shared_ptr<LiveCollector> live_;
  int port_ = 0;
  // Last member: destroyed first, so the HTTP threads stop before anything
  // they read goes away.
  std::unique_ptr<prometheus::Exposer> exposer_;
};

// Points `exporter` (may be nullptr: metrics off) at `registry` for its
// lifetime; declare it after the registry's owner so that it detaches first.
class MetricsRegistryBinding {
 public:
  MetricsRegistryBinding(MetricsExporter* exporter, const ModelRegistry& registry)
      : exporter_(exporter) {
    if (exporter_ != nullptr) exporter_->set_registry(&registry);
  }
  ~MetricsRegistryBinding() {
    if (exporter_ != nullptr) exporter_->set_registry(nullptr);
  }
  MetricsRegistryBinding(const MetricsRegistryBinding&) = delete;
  MetricsRegistryBinding& operator=(const MetricsRegistryBinding&) = delete;

 private:
  MetricsExporter* exporter_;
};

}  // namespace hearth::server
