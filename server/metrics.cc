#include "server/metrics.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "base/str_cat.h"
#include "memory/thread_temp_allocator.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "server/model_registry.h"
#include "spdlog/spdlog.h"

#ifndef HEARTH_VERSION
#define HEARTH_VERSION "unknown"
#endif

namespace hearth::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// The label value of calls that named no served model.
constexpr char kUnknownModel[] = "(unknown)";

// CPU token latencies: a fast decode step is about a millisecond, a long
// prefill or a queue wait under load several seconds.
const prometheus::Histogram::BucketBoundaries& latency_buckets() {
  static const prometheus::Histogram::BucketBoundaries b = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return b;
}

// Sequences in one batched step: one to a few dozen instances per model.
const prometheus::Histogram::BucketBoundaries& step_sequences_buckets() {
  static const prometheus::Histogram::BucketBoundaries b = {1,  2,  3,  4,  6,  8,
                                                            12, 16, 24, 32, 48, 64};
  return b;
}

// Tokens in one batched step: one decode row per sequence plus prompt chunks
// up to the step's token budget.
const prometheus::Histogram::BucketBoundaries& step_tokens_buckets() {
  static const prometheus::Histogram::BucketBoundaries b = {1,  2,   4,   8,   16,  32,
                                                            64, 128, 256, 512, 1024};
  return b;
}

// The gRPC name of a code (absl's codes are numerically gRPC's, and named
// the same way).
const char* code_name(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return "OK";
    case absl::StatusCode::kCancelled:
      return "CANCELLED";
    case absl::StatusCode::kUnknown:
      return "UNKNOWN";
    case absl::StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case absl::StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case absl::StatusCode::kNotFound:
      return "NOT_FOUND";
    case absl::StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case absl::StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case absl::StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case absl::StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case absl::StatusCode::kAborted:
      return "ABORTED";
    case absl::StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case absl::StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case absl::StatusCode::kInternal:
      return "INTERNAL";
    case absl::StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case absl::StatusCode::kDataLoss:
      return "DATA_LOSS";
    case absl::StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    default:
      break;
  }
  return "UNKNOWN";
}

// ---- Building scrape-time families by hand --------------------------------

MetricFamily family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void add_sample(MetricFamily& f, double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

void add_if_not_empty(std::vector<MetricFamily>& out, MetricFamily f) {
  if (!f.metric.empty()) out.push_back(std::move(f));
}

// ---- /proc/self --------------------------------------------------------------

struct ProcessStats {
  bool ok = false;
  double cpu_seconds = 0, start_time_seconds = 0;
  double resident_bytes = 0, virtual_bytes = 0;
  double open_fds = 0;
};

double boot_time_seconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime") {
      in >> value;
      return value;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

ProcessStats read_process_stats() {
  ProcessStats p;
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return p;
  // The command name (field 2) is in parentheses and may hold spaces: the
  // fields are counted from after its closing parenthesis, which is field 3.
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos) return p;
  std::istringstream fields(line.substr(close + 1));
  std::vector<std::string> f;  // f[0] is field 3 (state)
  for (std::string s; fields >> s;) f.push_back(std::move(s));
  if (f.size() < 22) return p;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  auto field = [&](int n) {
    return std::strtod(f[static_cast<std::size_t>(n - 3)].c_str(), nullptr);
  };
  p.cpu_seconds = (field(14) + field(15)) / ticks;  // utime + stime
  p.start_time_seconds = boot_time_seconds() + field(22) / ticks;
  p.virtual_bytes = field(23);
  p.resident_bytes = field(24) * page;
  if (DIR* d = opendir("/proc/self/fd")) {
    int n = 0;
    while (const dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
    p.open_fds = n - 1;  // not the descriptor opendir itself holds
  }
  p.ok = true;
  return p;
}

}  // namespace

// ---- Per-model request metrics -------------------------------------------------

struct MetricsExporter::ModelMetrics {
  prometheus::Histogram* queue_wait;
  prometheus::Histogram* ttft;
  prometheus::Histogram* inter_token;
  prometheus::Counter* prompt_tokens;
  prometheus::Counter* prompt_tokens_cached;
  prometheus::Counter* generated_tokens;
  // By method and transport; guarded by models_mu_.
  std::map<std::pair<std::string, std::string>, prometheus::Histogram*> duration;
};

struct MetricsExporter::StepMetrics {
  prometheus::Histogram* sequences;
  prometheus::Histogram* tokens;
  prometheus::Histogram* duration;
};

// ---- Live state, read at scrape time --------------------------------------------

class MetricsExporter::LiveCollector final : public prometheus::Collectable {
 public:
  explicit LiveCollector(const MetricsExporter& owner) : owner_(owner) {}

  // Called on the exposer's HTTP threads. Nothing may escape into
  // prometheus-cpp/civetweb: on an unexpected error the scrape still
  // returns what was gathered.
  std::vector<MetricFamily> Collect() const override {
    std::vector<MetricFamily> out;
    try {
      collect_models(out);
      collect_temp_allocators(out);
      collect_process(out);
    } catch (const std::exception& e) {
      spdlog::error("metrics: a scrape failed part-way: {}", e.what());
    } catch (...) {
      spdlog::error("metrics: a scrape failed part-way");
    }
    return out;
  }

 private:
  void collect_models(std::vector<MetricFamily>& out) const {
    // Held while the pools are read, not just while the entries are copied:
    // the pools live only as long as the registry, and set_registry(nullptr)
    // must wait for this scrape to be done with them.
    std::lock_guard<std::mutex> lock(owner_.registry_mu_);
    if (owner_.registry_ == nullptr) return;
    collect_pools(owner_.registry_->entries(), out);
  }

  static void collect_pools(const std::vector<ModelEntry>& entries,
                            std::vector<MetricFamily>& out) {
    auto state = family("hearth_model_state",
                        "1 for the model's current state (loading, serving, draining, failed).",
                        MetricType::Gauge);
    auto instances =
        family("hearth_model_instances", "Warm instances of the model.", MetricType::Gauge);
    auto busy = family("hearth_model_instances_busy",
                       "Instances of the model running a generation now.", MetricType::Gauge);
    auto depth = family("hearth_model_queue_depth",
                        "Requests waiting for an instance of the model now.", MetricType::Gauge);
    auto capacity =
        family("hearth_model_queue_capacity",
               "Requests that may wait for an instance; beyond, UNAVAILABLE.", MetricType::Gauge);
    auto running =
        family("hearth_model_requests_running",
               "Sequences of the model in its step loop now (handed over, not yet ended).",
               MetricType::Gauge);
    auto waiting = family("hearth_model_requests_waiting",
                          "Requests waiting for an instance of the model now (the queue depth).",
                          MetricType::Gauge);
    auto kv_used =
        family("hearth_model_kv_positions_used",
               "KV cache positions the model's running sequences hold now.", MetricType::Gauge);
    auto kv_capacity = family("hearth_model_kv_positions_capacity",
                              "KV cache positions of all the model's instances (instances x "
                              "context).",
                              MetricType::Gauge);
    auto mapped = family("hearth_model_weights_mapped_bytes",
                         "Bytes of the model file mapped read-only (shared by all instances).",
                         MetricType::Gauge);
    auto packed =
        family("hearth_model_weights_packed_bytes",
               "Bytes of packed projection weights (shared by all instances).", MetricType::Gauge);
    auto planned = family("hearth_module_planned_activation_bytes",
                          "Activation bytes one instance planned at load.", MetricType::Gauge);
    auto arena_capacity =
        family("hearth_module_arena_capacity_bytes",
               "Bytes of one instance's planned-memory arena.", MetricType::Gauge);
    auto arena_used =
        family("hearth_module_arena_used_bytes",
               "Bytes of one instance's arena in use after warm-up.", MetricType::Gauge);
    auto kv = family("hearth_module_kv_cache_bytes", "Bytes of one instance's KV cache.",
                     MetricType::Gauge);
    auto temp_peak =
        family("hearth_module_temp_peak_bytes",
               "Highest temp-allocator use of one forward pass during warm-up.", MetricType::Gauge);
    static constexpr std::pair<ModelState, const char*> kStates[] = {
        {ModelState::kLoading, "loading"},
        {ModelState::kServing, "serving"},
        {ModelState::kDraining, "draining"},
        {ModelState::kFailed, "failed"}};
    for (const ModelEntry& e : entries) {
      const std::string& name = e.spec.name;
      for (const auto& [s, label] : kStates)
        add_sample(state, e.state == s ? 1 : 0, {{"model", name}, {"state", label}});
      if (e.pool == nullptr) continue;
      const PoolCounters n = e.pool->counters();
      const engine::ModuleMemoryReport& m = e.pool->instance_memory();
      const std::vector<ClientMetric::Label> labels = {{"model", name}};
      add_sample(instances, static_cast<double>(n.instances), labels);
      add_sample(busy, static_cast<double>(n.busy), labels);
      add_sample(depth, static_cast<double>(n.queue_depth), labels);
      add_sample(capacity, static_cast<double>(n.queue_capacity), labels);
      add_sample(running, static_cast<double>(n.running), labels);
      add_sample(waiting, static_cast<double>(n.queue_depth), labels);
      add_sample(kv_used, static_cast<double>(n.kv_positions_used), labels);
      add_sample(kv_capacity, static_cast<double>(n.kv_positions_total), labels);
      add_sample(mapped, static_cast<double>(e.pool->weights().mapped_bytes()), labels);
      add_sample(packed, static_cast<double>(e.pool->weights().packed_bytes()), labels);
      add_sample(planned, static_cast<double>(m.planned_bytes), labels);
      add_sample(arena_capacity, static_cast<double>(m.arena_capacity_bytes), labels);
      add_sample(arena_used, static_cast<double>(m.arena_used_bytes), labels);
      add_sample(kv, static_cast<double>(m.kv_cache_bytes), labels);
      add_sample(temp_peak, static_cast<double>(m.peak_temp_bytes), labels);
    }
    for (MetricFamily* f :
         {&state, &instances, &busy, &depth, &capacity, &running, &waiting, &kv_used, &kv_capacity,
          &mapped, &packed, &planned, &arena_capacity, &arena_used, &kv, &temp_peak})
      add_if_not_empty(out, std::move(*f));
  }

  void collect_temp_allocators(std::vector<MetricFamily>& out) const {
    const TempAllocatorSnapshot snap = TempAllocatorRegistry::snapshot();
    const CachingAllocatorStats& t = snap.total;
    auto counter = [&](const char* name, const char* help, std::uint64_t v) {
      MetricFamily f = family(name, help, MetricType::Counter);
      add_sample(f, static_cast<double>(v));
      out.push_back(std::move(f));
    };
    auto gauge = [&](const char* name, const char* help, double v) {
      MetricFamily f = family(name, help, MetricType::Gauge);
      add_sample(f, v);
      out.push_back(std::move(f));
    };
    counter("hearth_temp_allocator_lookups_total",
            "Temp allocations asked of the caching temp allocators (all threads).", t.lookups);
    counter("hearth_temp_allocator_hits_total", "Temp allocations served from a cached block.",
            t.hits);
    counter("hearth_temp_allocator_misses_total", "Temp allocations that needed the heap.",
            t.misses);
    counter("hearth_temp_allocator_failures_total", "Temp allocations that failed.", t.failures);
    counter("hearth_temp_allocator_trims_total", "Cached blocks freed to honour the cache cap.",
            t.trims);
    counter("hearth_temp_allocator_trimmed_bytes_total",
            "Bytes of cached blocks freed to honour the cache cap.", t.trimmed_bytes);
    gauge("hearth_temp_allocator_in_use_bytes", "Temp bytes handed out now (live threads).",
          static_cast<double>(t.in_use_bytes));
    gauge("hearth_temp_allocator_cached_bytes", "Idle temp bytes kept for reuse (live threads).",
          static_cast<double>(t.cached_bytes));
    gauge("hearth_temp_allocator_reserved_bytes",
          "Temp bytes held from the heap: in use plus cached (live threads).",
          static_cast<double>(t.reserved_bytes));
    gauge("hearth_temp_allocator_threads", "Live threads owning a temp allocator.",
          static_cast<double>(snap.live_threads.size()));
    // Each thread caches for itself: threads that come and go (gRPC's
    // worker pool) start cold, which shows here and in the misses.
    counter("hearth_temp_allocator_exited_threads_total",
            "Threads whose temp allocator was released when they exited.", snap.exited_threads);

    std::uint64_t live_max_peak = 0;
    for (const ThreadTempAllocatorStats& th : snap.live_threads)
      live_max_peak = std::max<std::uint64_t>(live_max_peak, th.stats.peak_bytes);
    TempFigures figures;
    {
      std::lock_guard<std::mutex> lock(owner_.temp_mu_);
      owner_.temp_.max_peak_bytes = std::max(owner_.temp_.max_peak_bytes, live_max_peak);
      figures = owner_.temp_;
    }
    MetricFamily peak = family(
        "hearth_temp_allocator_peak_bytes",
        "Most temp bytes one thread held at once. window=since_start: over every generation and "
        "thread since start; window=last_generation: the last finished generation.",
        MetricType::Gauge);
    add_sample(peak, static_cast<double>(figures.max_peak_bytes), {{"window", "since_start"}});
    add_sample(peak, static_cast<double>(figures.last_peak_bytes), {{"window", "last_generation"}});
    out.push_back(std::move(peak));
    MetricFamily ratio =
        family("hearth_temp_allocator_hit_ratio",
               "Temp allocations served from the cache over all lookups. window=since_start: every "
               "thread since start; window=last_generation: the last finished generation.",
               MetricType::Gauge);
    add_sample(ratio, t.hit_ratio(), {{"window", "since_start"}});
    add_sample(ratio, figures.last_hit_ratio, {{"window", "last_generation"}});
    out.push_back(std::move(ratio));
  }

  static void collect_process(std::vector<MetricFamily>& out) {
    const ProcessStats p = read_process_stats();
    if (!p.ok) return;
    auto one = [&](const char* name, const char* help, MetricType type, double v) {
      MetricFamily f = family(name, help, type);
      add_sample(f, v);
      out.push_back(std::move(f));
    };
    one("process_cpu_seconds_total", "User and system CPU time spent, in seconds.",
        MetricType::Counter, p.cpu_seconds);
    one("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge,
        p.resident_bytes);
    one("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge,
        p.virtual_bytes);
    one("process_start_time_seconds", "Start time of the process since the Unix epoch, in seconds.",
        MetricType::Gauge, p.start_time_seconds);
    one("process_open_fds", "Open file descriptors.", MetricType::Gauge, p.open_fds);
  }

  const MetricsExporter& owner_;
};

// ---- MetricsExporter ---------------------------------------------------------

MetricsExporter::MetricsExporter() : request_registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *request_registry_;
  requests_total_ = &prometheus::BuildCounter()
                         .Name("hearth_requests_total")
                         .Help("Finished hearth.v1 calls by model, method and final gRPC code.")
                         .Register(r);
  request_duration_ = &prometheus::BuildHistogram()
                           .Name("hearth_request_duration_seconds")
                           .Help("Time from a call's arrival to its final status.")
                           .Register(r);
  queue_wait_ = &prometheus::BuildHistogram()
                     .Name("hearth_queue_wait_seconds")
                     .Help(
                         "Time a generation waited for an instance of its model: admitted, "
                         "or timed out or cancelled in the queue (refusals at capacity: "
                         "hearth_requests_total by code).")
                     .Register(r);
  ttft_ = &prometheus::BuildHistogram()
               .Name("hearth_time_to_first_token_seconds")
               .Help("Time from a generation's arrival to its first generated token.")
               .Register(r);
  inter_token_ = &prometheus::BuildHistogram()
                      .Name("hearth_inter_token_latency_seconds")
                      .Help("Time between consecutive generated tokens of one generation.")
                      .Register(r);
  prompt_tokens_ = &prometheus::BuildCounter()
                        .Name("hearth_prompt_tokens_total")
                        .Help("Prompt tokens of generation requests (counted once tokenized).")
                        .Register(r);
  prompt_tokens_cached_ =
      &prometheus::BuildCounter()
           .Name("hearth_prompt_tokens_cached_total")
           .Help("Prompt tokens found in an instance's KV cache (prefix reuse), not recomputed.")
           .Register(r);
  generated_tokens_ = &prometheus::BuildCounter()
                           .Name("hearth_generated_tokens_total")
                           .Help("Tokens generated.")
                           .Register(r);
  step_sequences_ = &prometheus::BuildHistogram()
                         .Name("hearth_step_sequences")
                         .Help("Sequences run by one batched step of the model's step loop.")
                         .Register(r);
  step_tokens_ = &prometheus::BuildHistogram()
                      .Name("hearth_step_tokens")
                      .Help("Tokens run by one batched step: decode rows plus prompt chunks.")
                      .Register(r);
  step_duration_ = &prometheus::BuildHistogram()
                        .Name("hearth_step_duration_seconds")
                        .Help("Time one batched step took: the forward and the sampling.")
                        .Register(r);
  prometheus::BuildGauge()
      .Name("hearth_build_info")
      .Help("Always 1; the labels describe the running build.")
      .Register(r)
      .Add({{"version", HEARTH_VERSION}})
      .Set(1);
  live_ = std::make_shared<LiveCollector>(*this);
}

MetricsExporter::~MetricsExporter() {
  // The HTTP threads read everything below: stop them first.
  exposer_.reset();
}

absl::Status MetricsExporter::check_address(const std::string& address) {
  // civetweb, as Debian builds it, listens on IPv4 only; it would also take
  // forms like "+PORT" or a bare port that the ready line could not report.
  const std::size_t colon = address.rfind(':');
  in_addr ip;
  std::int64_t port = -1;
  if (colon != std::string::npos && colon + 1 < address.size() && address.size() - colon <= 6) {
    port = 0;
    for (std::size_t i = colon + 1; i < address.size() && port >= 0; ++i)
      port = std::isdigit(static_cast<unsigned char>(address[i])) ? port * 10 + (address[i] - '0')
                                                                  : -1;
  }
  if (port < 0 || port > 65535 || inet_pton(AF_INET, address.substr(0, colon).c_str(), &ip) != 1)
    return absl::InvalidArgumentError(
        str_cat("--metrics-listen: '", address,
                "' is not IPV4:PORT (e.g. 0.0.0.0:9464 for every interface, 127.0.0.1:0 for "
                "a free loopback port) or 'off'"));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::start(
    const std::string& address) {
  HEARTH_RETURN_IF_ERROR(check_address(address));
  std::unique_ptr<MetricsExporter> m;
  try {
    m.reset(new MetricsExporter());
    // prometheus-cpp throws when civetweb cannot bind (its message only says
    // "possible problem binding to port"): say which address and why.
    m->exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/2);
    m->exposer_->RegisterCollectable(m->request_registry_);
    m->exposer_->RegisterCollectable(m->live_);
    const std::vector<int> ports = m->exposer_->GetListeningPorts();
    if (ports.empty())
      return absl::UnavailableError(
          str_cat("--metrics-listen: cannot listen on ", address, ": no port was bound"));
    m->port_ = ports.front();
  } catch (const std::exception& e) {
    return absl::UnavailableError(str_cat(
        "--metrics-listen: cannot listen on ", address,
        ": the port is in use, or the address is not one of this machine's (", e.what(), ")"));
  } catch (...) {
    return absl::UnavailableError(str_cat("--metrics-listen: cannot listen on ", address));
  }
  return m;
}

void MetricsExporter::set_registry(const ModelRegistry* registry) {
  std::lock_guard<std::mutex> lock(registry_mu_);
  registry_ = registry;
}

MetricsExporter::ModelMetrics& MetricsExporter::model_metrics(const std::string& model) {
  std::lock_guard<std::mutex> lock(models_mu_);
  std::unique_ptr<ModelMetrics>& m = models_[model];
  if (m == nullptr) {
    const prometheus::Labels labels = {{"model", model}};
    m = std::make_unique<ModelMetrics>(ModelMetrics{&queue_wait_->Add(labels, latency_buckets()),
                                                    &ttft_->Add(labels, latency_buckets()),
                                                    &inter_token_->Add(labels, latency_buckets()),
                                                    &prompt_tokens_->Add(labels),
                                                    &prompt_tokens_cached_->Add(labels),
                                                    &generated_tokens_->Add(labels),
                                                    {}});
  }
  return *m;
}

MetricsExporter::StepMetrics& MetricsExporter::step_metrics(const std::string& model) {
  std::lock_guard<std::mutex> lock(models_mu_);
  std::unique_ptr<StepMetrics>& m = steps_[model];
  if (m == nullptr) {
    const prometheus::Labels labels = {{"model", model}};
    m = std::make_unique<StepMetrics>(
        StepMetrics{&step_sequences_->Add(labels, step_sequences_buckets()),
                    &step_tokens_->Add(labels, step_tokens_buckets()),
                    &step_duration_->Add(labels, latency_buckets())});
  }
  return *m;
}

void MetricsExporter::on_step(const std::string& model, std::size_t sequences, std::size_t tokens,
                              double seconds) {
  try {
    StepMetrics& m = step_metrics(model.empty() ? kUnknownModel : model);
    m.sequences->Observe(static_cast<double>(sequences));
    m.tokens->Observe(static_cast<double>(tokens));
    m.duration->Observe(seconds);
  } catch (...) {
    // Only allocation can fail here; losing one sample beats stalling the loop.
  }
}

void MetricsExporter::on_inter_token(const std::string& model, double seconds) {
  try {
    model_metrics(model.empty() ? kUnknownModel : model).inter_token->Observe(seconds);
  } catch (...) {
    // Only allocation can fail here; losing one sample beats failing the request.
  }
}

void MetricsExporter::on_request_done(const RequestRecord& r) {
  try {
    const std::string model = r.model.empty() ? kUnknownModel : r.model;
    ModelMetrics& m = model_metrics(model);
    requests_total_
        ->Add({{"model", model},
               {"method", r.method},
               {"code", code_name(r.code)},
               {"transport", r.transport}})
        .Increment();
    prometheus::Histogram* duration = nullptr;
    {
      std::lock_guard<std::mutex> lock(models_mu_);
      prometheus::Histogram*& h = m.duration[{r.method, r.transport}];
      if (h == nullptr)
        h = &request_duration_->Add(
            {{"model", model}, {"method", r.method}, {"transport", r.transport}},
            latency_buckets());
      duration = h;
    }
    duration->Observe(r.duration_s);
    if (r.queue_s >= 0) m.queue_wait->Observe(r.queue_s);
    if (r.time_to_first_token_s >= 0) m.ttft->Observe(r.time_to_first_token_s);
    m.prompt_tokens->Increment(static_cast<double>(r.prompt_tokens));
    m.prompt_tokens_cached->Increment(static_cast<double>(r.cached_tokens));
    m.generated_tokens->Increment(static_cast<double>(r.generated_tokens));
    if (r.temp_lookups > 0) {
      std::lock_guard<std::mutex> lock(temp_mu_);
      temp_.last_peak_bytes = r.temp_peak_bytes;
      temp_.last_hit_ratio = static_cast<double>(r.temp_hits) / static_cast<double>(r.temp_lookups);
      temp_.max_peak_bytes = std::max(temp_.max_peak_bytes, r.temp_peak_bytes);
    }
  } catch (...) {
    // Only allocation can fail here; losing one sample beats failing the request.
  }
}

}  // namespace hearth::server
