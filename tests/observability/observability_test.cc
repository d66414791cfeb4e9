// Observability end to end: a real hearth-server process, real Generate
// calls over loopback gRPC, /metrics scraped over real HTTP, the shipped
// Grafana dashboard and Prometheus config checked against that live scrape,
// against Grafana's published schema (npm @grafana/schema + tsc) and against
// a real Prometheus (Debian package `prometheus`), and promtool's lint.
//
// Missing tools (prometheus, promtool, npm, node) or an unreachable npm
// registry fail the tests with a message saying what to install; nothing is
// skipped silently.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "hearth/v1/inference.grpc.pb.h"
#include "tests/observability/observability_util.h"
#include "tests/support/server_process.h"

namespace hearth::testing {
namespace {

namespace v1 = ::hearth::v1;
using namespace obs;  // NOLINT: the test helpers
using google::protobuf::Struct;
using google::protobuf::Value;
using std::chrono::milliseconds;
using std::chrono::seconds;

#if defined(HEARTH_SANITIZER_THREAD) || defined(HEARTH_SANITIZER_ADDRESS)
constexpr bool kUnderSanitizer = true;
#else
constexpr bool kUnderSanitizer = false;
#endif

// Upper bound of any single wait: it only matters when something is broken.
seconds patience() { return kUnderSanitizer ? seconds(150) : seconds(30); }

// A path CMake's find_program() gave, or "" when it found nothing.
std::string found_program(const char* path) {
  const std::string p = path;
  return p.empty() || p.find("NOTFOUND") != std::string::npos ? "" : p;
}

constexpr char kModel[] = "demo";
constexpr char kUnknownModel[] = "(unknown)";

// ---- The server and its clients ---------------------------------------------------

struct GenerateOutcome {
  grpc::Status status;
  std::uint32_t prompt_tokens = 0, generated_tokens = 0, cached_tokens = 0;
};

std::unique_ptr<v1::Inference::Stub> connect(const std::string& address) {
  return v1::Inference::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

// ignore_eos: exactly max_tokens are generated (the demo model's random
// weights may otherwise end early), so the token counts are predictable.
GenerateOutcome generate(v1::Inference::Stub& stub, const std::string& model,
                         const std::string& prompt, std::uint32_t max_tokens) {
  v1::GenerateRequest req;
  req.set_model(model);
  req.set_prompt(prompt);
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + patience());
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub.Generate(&ctx, req);
  GenerateOutcome out;
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    if (msg.has_done()) {
      out.prompt_tokens = msg.done().usage().prompt_tokens();
      out.generated_tokens = msg.done().usage().generated_tokens();
      out.cached_tokens = msg.done().usage().cached_tokens();
    }
  }
  out.status = reader->Finish();
  return out;
}

// A request for exactly `max_tokens` tokens of kModel.
v1::GenerateRequest fixed_length_request(const std::string& prompt, std::uint32_t max_tokens) {
  v1::GenerateRequest req;
  req.set_model(kModel);
  req.set_prompt(prompt);
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  return req;
}

GenerateOutcome complete(v1::Inference::Stub& stub, const std::string& prompt,
                         std::uint32_t max_tokens) {
  const v1::GenerateRequest req = fixed_length_request(prompt, max_tokens);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + patience());
  v1::CompleteResponse resp;
  GenerateOutcome out;
  out.status = stub.Complete(&ctx, req, &resp);
  out.prompt_tokens = resp.done().usage().prompt_tokens();
  out.generated_tokens = resp.done().usage().generated_tokens();
  out.cached_tokens = resp.done().usage().cached_tokens();
  return out;
}

v1::ModelInfo get_model(v1::Inference::Stub& stub, const std::string& model) {
  v1::GetModelRequest req;
  req.set_model(model);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + patience());
  v1::ModelInfo info;
  const grpc::Status st = stub.GetModel(&ctx, req, &info);
  EXPECT_TRUE(st.ok()) << "GetModel " << model << ": " << st.error_message();
  return info;
}

// A Generate call read to its end on a thread of its own; cancel() ends it
// early. The destructor cancels it if it still runs, and joins the thread.
class BackgroundGenerate {
 public:
  BackgroundGenerate(v1::Inference::Stub& stub, const std::string& prompt,
                     std::uint32_t max_tokens) {
    const v1::GenerateRequest req = fixed_length_request(prompt, max_tokens);
    ctx_.set_deadline(std::chrono::system_clock::now() + patience());
    thread_ = std::thread([this, &stub, req] {
      std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub.Generate(&ctx_, req);
      v1::GenerateResponse msg;
      while (reader->Read(&msg)) {
      }
      status_ = reader->Finish();
    });
  }
  ~BackgroundGenerate() {
    if (thread_.joinable()) {
      ctx_.TryCancel();
      thread_.join();
    }
  }
  BackgroundGenerate(const BackgroundGenerate&) = delete;
  BackgroundGenerate& operator=(const BackgroundGenerate&) = delete;

  void cancel() { ctx_.TryCancel(); }
  // Waits for the call to end.
  const grpc::Status& finish() {
    if (thread_.joinable()) thread_.join();
    return status_;
  }

 private:
  grpc::ClientContext ctx_;
  grpc::Status status_;  // written by thread_, read after it is joined
  std::thread thread_;   // last: started once everything it uses exists
};

// hearth-server on loopback with free ports, serving the built-in demo model
// (plus extra_args()).
class LiveServer : public ::testing::Test {
 protected:
  virtual std::vector<std::string> extra_args() const { return {}; }

  void SetUp() override {
    std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"};
    for (const std::string& a : extra_args()) args.push_back(a);
    ASSERT_TRUE(server_.start(HEARTH_SERVER_BIN, args)) << server_.error();
    ASSERT_NE(server_.metrics_port(), 0) << "metrics are off: " << server_.ready_line();
    stub_ = connect(server_.grpc_address());
  }

  Scrape scrape() {
    const HttpResponse r = http_get(server_.metrics_address(), "/metrics");
    EXPECT_EQ(r.status, 200) << r.error << "\n" << server_.describe();
    Scrape s = parse_exposition(r.body);
    EXPECT_EQ(s.error, "") << "a /metrics line does not parse";
    return s;
  }

  // Scrapes until `ready` holds (bounded: patience()); returns the last
  // scrape, which the caller's expectations then judge. Live gauges and the
  // step loop's histograms may trail a call's final status by a moment (the
  // loop may report a step after handing back the sequences it finished).
  Scrape scrape_until(const std::function<bool(const Scrape&)>& ready) {
    const Clock::time_point deadline = Clock::now() + patience();
    Scrape s = scrape();
    while (!ready(s) && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(10));  // polling interval, bounded above
      s = scrape();
    }
    return s;
  }

  // A few calls of every kind, so that every series exists: successful
  // Generate and Complete calls, and one naming an unknown model.
  void exercise() {
    for (int i = 0; i < 2; ++i) {
      const GenerateOutcome g =
          generate(*stub_, kModel, "the quick brown fox " + std::to_string(i), 8);
      ASSERT_TRUE(g.status.ok()) << g.status.error_message();
    }
    ASSERT_TRUE(complete(*stub_, "a completion", 4).status.ok());
    EXPECT_EQ(generate(*stub_, "no-such-model", "hello", 4).status.error_code(),
              grpc::StatusCode::NOT_FOUND);
  }

  ServerProcess server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

// ---- Requests move the metrics -------------------------------------------------------

TEST_F(LiveServer, RequestsMoveTheMetrics) {
  // Warm-up: a thread's temp allocator fills its cache on the first steps
  // it runs; what follows must be served from it. gRPC may run each call on
  // a different worker thread, and a thread's first generation misses about
  // once per distinct scratch buffer (a dozen or so): with 64 tokens per
  // request, even a cold thread's generation stays above 0.99.
  ASSERT_TRUE(generate(*stub_, kModel, "warm up the caches", 64).status.ok());
  const v1::ModelInfo info = get_model(*stub_, kModel);
  ASSERT_EQ(info.instances(), 1u);
  ASSERT_GT(info.context_length(), 0u);
  const Scrape before = scrape();

  constexpr int kGenerates = 6;
  std::uint64_t prompt_tokens = 0, generated_tokens = 0, inter_tokens = 0, cached_tokens = 0;
  for (int i = 0; i < kGenerates; ++i) {
    const GenerateOutcome g =
        generate(*stub_, kModel, "request number " + std::to_string(i) + " of the test", 64);
    ASSERT_TRUE(g.status.ok()) << g.status.error_message();
    ASSERT_EQ(g.generated_tokens, 64u);
    prompt_tokens += g.prompt_tokens;
    generated_tokens += g.generated_tokens;
    inter_tokens += g.generated_tokens - 1;
    cached_tokens += g.cached_tokens;
  }
  const GenerateOutcome c = complete(*stub_, "one completion", 64);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  prompt_tokens += c.prompt_tokens;
  generated_tokens += c.generated_tokens;
  inter_tokens += c.generated_tokens - 1;
  cached_tokens += c.cached_tokens;
  // The prompts share their first tokens ("request number"), which the
  // one instance's KV cache holds from the request before (prefix reuse).
  EXPECT_GT(cached_tokens, 0u);
  EXPECT_EQ(generate(*stub_, "no-such-model", "hello", 4).status.error_code(),
            grpc::StatusCode::NOT_FOUND);
  const std::map<std::string, std::string> demo = {{"model", kModel}};
  // Each generation ran its prompt but the tokens found in the KV cache,
  // and every generated token but the last (the last is sampled, never
  // run): the tokens of every step, summed.
  const double step_tokens =
      static_cast<double>(prompt_tokens - cached_tokens + generated_tokens - (kGenerates + 1));
  const Scrape after = scrape_until([&](const Scrape& s) {
    return s.sum("hearth_step_tokens_sum", demo) - before.sum("hearth_step_tokens_sum", demo) >=
               step_tokens &&
           s.sum("hearth_model_requests_running", demo) == 0 &&
           s.sum("hearth_model_kv_positions_used", demo) == 0;
  });

  auto delta = [&](const std::string& name, const std::map<std::string, std::string>& m = {}) {
    return after.sum(name, m) - before.sum(name, m);
  };

  // Temp allocators: lookups and hits rise, and after warm-up practically
  // every lookup is a hit (over the window and in the last generation).
  const double lookups = delta("hearth_temp_allocator_lookups_total");
  const double hits = delta("hearth_temp_allocator_hits_total");
  EXPECT_GT(lookups, 0);
  EXPECT_GT(hits, 0);
  EXPECT_GE(hits / lookups, 0.99) << hits << " hits of " << lookups << " lookups";
  EXPECT_GE(after.sum("hearth_temp_allocator_hit_ratio", {{"window", "last_generation"}}), 0.99);
  EXPECT_GT(after.sum("hearth_temp_allocator_hit_ratio", {{"window", "since_start"}}), 0);
  EXPECT_GT(after.sum("hearth_temp_allocator_peak_bytes", {{"window", "since_start"}}), 0);
  EXPECT_GT(after.sum("hearth_temp_allocator_peak_bytes", {{"window", "last_generation"}}), 0);
  EXPECT_LE(after.sum("hearth_temp_allocator_peak_bytes", {{"window", "last_generation"}}),
            after.sum("hearth_temp_allocator_peak_bytes", {{"window", "since_start"}}));
  EXPECT_GT(after.sum("hearth_temp_allocator_reserved_bytes"), 0);
  EXPECT_EQ(after.sum("hearth_temp_allocator_reserved_bytes"),
            after.sum("hearth_temp_allocator_in_use_bytes") +
                after.sum("hearth_temp_allocator_cached_bytes"));
  EXPECT_EQ(delta("hearth_temp_allocator_failures_total"), 0);

  // The pool is idle again once every call has returned.
  EXPECT_EQ(after.sum("hearth_model_instances", demo), 1);
  EXPECT_EQ(after.sum("hearth_model_instances_busy", demo), 0);
  EXPECT_EQ(after.sum("hearth_model_queue_depth", demo), 0);
  EXPECT_EQ(after.sum("hearth_model_queue_capacity", demo), 8);
  EXPECT_EQ(after.sum("hearth_model_state", {{"model", kModel}, {"state", "serving"}}), 1);
  EXPECT_EQ(after.sum("hearth_model_requests_running", demo), 0);
  EXPECT_EQ(after.sum("hearth_model_requests_waiting", demo), 0);
  EXPECT_EQ(after.sum("hearth_model_kv_positions_used", demo), 0);
  EXPECT_EQ(after.sum("hearth_model_kv_positions_capacity", demo),
            static_cast<double>(info.instances()) * info.context_length());

  // The step loop: one observation per batched step in each histogram. One
  // instance and one call at a time: every step ran exactly one sequence,
  // and a generation of G tokens took at least G steps (a prompt chunk, then
  // G - 1 decode steps).
  const double steps = delta("hearth_step_sequences_count", demo);
  EXPECT_GE(steps, static_cast<double>(generated_tokens));
  EXPECT_EQ(delta("hearth_step_tokens_count", demo), steps);
  EXPECT_EQ(delta("hearth_step_duration_seconds_count", demo), steps);
  EXPECT_EQ(delta("hearth_step_sequences_sum", demo), steps) << "a step ran other than 1 sequence";
  EXPECT_EQ(delta("hearth_step_sequences_bucket", {{"model", kModel}, {"le", "1"}}), steps);
  EXPECT_EQ(delta("hearth_step_tokens_sum", demo), step_tokens)
      << "the steps ran other tokens than the prompts and the generated tokens but the last";
  EXPECT_GT(delta("hearth_step_duration_seconds_sum", demo), 0);
  EXPECT_EQ(after.count("hearth_step_sequences_count"), 1u) << "step series for another model?";

  // Every call is counted once, under its final code.
  EXPECT_EQ(
      delta("hearth_requests_total", {{"model", kModel}, {"method", "Generate"}, {"code", "OK"}}),
      kGenerates);
  EXPECT_EQ(
      delta("hearth_requests_total", {{"model", kModel}, {"method", "Complete"}, {"code", "OK"}}),
      1);
  EXPECT_EQ(delta("hearth_requests_total", {{"model", kUnknownModel}, {"code", "NOT_FOUND"}}), 1);
  EXPECT_EQ(delta("hearth_requests_total"), kGenerates + 2);

  // Histogram counts equal the requests made (and the tokens streamed).
  EXPECT_EQ(
      delta("hearth_request_duration_seconds_count", {{"model", kModel}, {"method", "Generate"}}),
      kGenerates);
  EXPECT_EQ(
      delta("hearth_request_duration_seconds_count", {{"model", kModel}, {"method", "Complete"}}),
      1);
  EXPECT_EQ(delta("hearth_request_duration_seconds_count", {{"model", kUnknownModel}}), 1);
  EXPECT_EQ(delta("hearth_time_to_first_token_seconds_count", demo), kGenerates + 1);
  EXPECT_EQ(delta("hearth_queue_wait_seconds_count", demo), kGenerates + 1);
  EXPECT_EQ(delta("hearth_inter_token_latency_seconds_count", demo),
            static_cast<double>(inter_tokens));
  EXPECT_EQ(delta("hearth_prompt_tokens_total", demo), static_cast<double>(prompt_tokens));
  EXPECT_EQ(delta("hearth_prompt_tokens_cached_total", demo), static_cast<double>(cached_tokens));
  EXPECT_EQ(delta("hearth_generated_tokens_total", demo), static_cast<double>(generated_tokens));
  for (const char* h :
       {"hearth_request_duration_seconds", "hearth_time_to_first_token_seconds",
        "hearth_inter_token_latency_seconds", "hearth_queue_wait_seconds", "hearth_step_sequences",
        "hearth_step_tokens", "hearth_step_duration_seconds"}) {
    const std::string name = h;
    EXPECT_EQ(after.types.at(name), "histogram") << name;
    EXPECT_EQ(after.sum(name + "_bucket", {{"le", "+Inf"}}), after.sum(name + "_count")) << name;
    EXPECT_GT(after.count(name + "_bucket"), 0u) << name;
    EXPECT_GT(after.sum(name + "_sum"), 0) << name;
  }
  // Buckets span 1 ms to 10 s.
  EXPECT_GT(after.count("hearth_time_to_first_token_seconds_bucket"), 0u);
  bool has_1ms = false, has_10s = false;
  for (const Sample& s : after.samples) {
    if (s.name != "hearth_inter_token_latency_seconds_bucket") continue;
    has_1ms |= s.labels.at("le") == "0.001";
    has_10s |= s.labels.at("le") == "10";
  }
  EXPECT_TRUE(has_1ms && has_10s) << "inter-token buckets must span 0.001 to 10 s";
  // Step buckets: sequences 1 to 64, tokens 1 to 1024, durations as latencies.
  auto bounds = [&](const std::string& name) {
    std::vector<std::string> le;
    for (const Sample& s : after.samples)
      if (s.name == name && s.labels.at("model") == kModel) le.push_back(s.labels.at("le"));
    return le;
  };
  EXPECT_EQ(bounds("hearth_step_sequences_bucket"),
            (std::vector<std::string>{"1", "2", "3", "4", "6", "8", "12", "16", "24", "32", "48",
                                      "64", "+Inf"}));
  EXPECT_EQ(bounds("hearth_step_tokens_bucket"),
            (std::vector<std::string>{"1", "2", "4", "8", "16", "32", "64", "128", "256", "512",
                                      "1024", "+Inf"}));
  EXPECT_EQ(bounds("hearth_step_duration_seconds_bucket"),
            bounds("hearth_inter_token_latency_seconds_bucket"));

  // Module memory and the process.
  for (const char* m : {"hearth_module_planned_activation_bytes", "hearth_module_arena_used_bytes",
                        "hearth_module_kv_cache_bytes", "hearth_model_weights_mapped_bytes",
                        "hearth_model_weights_packed_bytes"})
    EXPECT_GT(after.sum(m, demo), 0) << m;
  EXPECT_GT(after.sum("process_resident_memory_bytes"), 1 << 20);
  EXPECT_GT(after.sum("process_cpu_seconds_total"), 0);
  EXPECT_GE(after.sum("process_cpu_seconds_total"), before.sum("process_cpu_seconds_total"));
  ASSERT_EQ(after.count("hearth_build_info"), 1u);
  for (const Sample& s : after.samples)
    if (s.name == "hearth_build_info") {
      EXPECT_EQ(s.value, 1);
      EXPECT_NE(s.labels.count("version"), 0u);
    }

  // The counters' naming and types follow Prometheus' conventions.
  for (const auto& [name, type] : after.types) {
    EXPECT_EQ(type == "counter", name.ends_with("_total"))
        << name << " is a " << type << ": counters, and only they, end in _total";
  }
}

// ---- Continuous batching -------------------------------------------------------------

// Two instances, so that the step loop batches two sequences, and a queue.
class BatchingServer : public LiveServer {
 protected:
  std::vector<std::string> extra_args() const override {
    return {"--instances", "2", "--queue", "4"};
  }
};

TEST_F(BatchingServer, StepAndLiveGaugesFollowTheRunningSequences) {
  const v1::ModelInfo info = get_model(*stub_, kModel);
  ASSERT_EQ(info.instances(), 2u);
  ASSERT_GT(info.context_length(), 128u);
  const std::map<std::string, std::string> demo = {{"model", kModel}};
  const double capacity = 2.0 * info.context_length();
  const Scrape before = scrape();
  EXPECT_EQ(before.sum("hearth_model_kv_positions_capacity", demo), capacity);
  EXPECT_EQ(before.sum("hearth_model_requests_running", demo), 0);
  EXPECT_EQ(before.sum("hearth_model_requests_waiting", demo), 0);
  EXPECT_EQ(before.sum("hearth_model_kv_positions_used", demo), 0);

  // Two generations long enough to run for a while (to the edge of the
  // context unless cancelled) hold both instances; a third waits.
  const std::uint32_t long_tokens = info.context_length() - 64;
  BackgroundGenerate a(*stub_, "the first long generation", long_tokens);
  BackgroundGenerate b(*stub_, "the second long generation", long_tokens);
  auto batched = [&](const Scrape& s) {  // steps that ran more than one sequence, at least
    return (s.sum("hearth_step_sequences_sum", demo) -
            before.sum("hearth_step_sequences_sum", demo)) -
           (s.sum("hearth_step_sequences_count", demo) -
            before.sum("hearth_step_sequences_count", demo));
  };
  const Scrape both = scrape_until([&](const Scrape& s) {
    return s.sum("hearth_model_requests_running", demo) == 2 &&
           s.sum("hearth_model_kv_positions_used", demo) > 0 && batched(s) > 0;
  });
  EXPECT_EQ(both.sum("hearth_model_requests_running", demo), 2) << "two sequences never ran";
  EXPECT_GT(batched(both), 0) << "no step ran both sequences";
  EXPECT_GT(both.sum("hearth_model_kv_positions_used", demo), 0);
  EXPECT_LE(both.sum("hearth_model_kv_positions_used", demo), capacity);
  EXPECT_EQ(both.sum("hearth_model_kv_positions_capacity", demo), capacity);

  BackgroundGenerate c(*stub_, "the third generation waits", long_tokens);
  const Scrape queued = scrape_until(
      [&](const Scrape& s) { return s.sum("hearth_model_requests_waiting", demo) == 1; });
  EXPECT_EQ(queued.sum("hearth_model_requests_waiting", demo), 1) << "the third never waited";
  EXPECT_EQ(queued.sum("hearth_model_requests_waiting", demo),
            queued.sum("hearth_model_queue_depth", demo));
  EXPECT_LE(queued.sum("hearth_model_requests_running", demo), 2);
  EXPECT_LE(queued.sum("hearth_model_kv_positions_used", demo), capacity);

  // Cancelled (the waiting one first, so that it never runs), everything
  // they held is given back: nothing runs, waits, or holds KV positions.
  c.cancel();
  EXPECT_TRUE(c.finish().error_code() == grpc::StatusCode::CANCELLED ||
              c.finish().error_code() == grpc::StatusCode::OK)
      << c.finish().error_message();
  a.cancel();
  b.cancel();
  for (BackgroundGenerate* g : {&a, &b}) {
    const grpc::Status& st = g->finish();
    EXPECT_TRUE(st.error_code() == grpc::StatusCode::CANCELLED || st.ok()) << st.error_message();
  }
  const Scrape idle = scrape_until([&](const Scrape& s) {
    return s.sum("hearth_model_requests_running", demo) == 0 &&
           s.sum("hearth_model_requests_waiting", demo) == 0 &&
           s.sum("hearth_model_kv_positions_used", demo) == 0 &&
           s.sum("hearth_model_instances_busy", demo) == 0;
  });
  EXPECT_EQ(idle.sum("hearth_model_requests_running", demo), 0);
  EXPECT_EQ(idle.sum("hearth_model_requests_waiting", demo), 0);
  EXPECT_EQ(idle.sum("hearth_model_kv_positions_used", demo), 0);
  EXPECT_EQ(idle.sum("hearth_model_instances_busy", demo), 0);
  EXPECT_EQ(idle.sum("hearth_model_kv_positions_capacity", demo), capacity);

  // No step ran more sequences than there are instances, every step ran at
  // least one token per sequence, and the three histograms agree. A scrape
  // is not a snapshot: it collects the histograms before the gauges, so the
  // scrape that first saw the gauges idle may have read the sequence
  // histogram before the last step's observation and the token histogram
  // after it. Once idle, nothing steps, so the next scrape is settled.
  const Scrape settled = scrape();
  auto delta = [&](const std::string& name, const std::map<std::string, std::string>& m) {
    return settled.sum(name, m) - before.sum(name, m);
  };
  const double steps = delta("hearth_step_sequences_count", demo);
  EXPECT_GT(steps, 0);
  EXPECT_EQ(delta("hearth_step_sequences_bucket", {{"model", kModel}, {"le", "2"}}), steps);
  EXPECT_LT(delta("hearth_step_sequences_bucket", {{"model", kModel}, {"le", "1"}}), steps);
  EXPECT_GE(delta("hearth_step_tokens_sum", demo), delta("hearth_step_sequences_sum", demo));
  EXPECT_EQ(delta("hearth_step_tokens_count", demo), steps);
  EXPECT_EQ(delta("hearth_step_duration_seconds_count", demo), steps);
}

// ---- promtool ---------------------------------------------------------------------

TEST_F(LiveServer, PromtoolAcceptsTheLiveScrape) {
  const std::string promtool = found_program(HEARTH_PROMTOOL);
  ASSERT_FALSE(promtool.empty())
      << "promtool not found: install the Debian package 'prometheus' (it ships promtool)";
  exercise();
  const Scrape s = scrape();
  ASSERT_FALSE(s.samples.empty());
  const ProcessResult r = run_process(promtool, {"check", "metrics"}, s.text);
  EXPECT_EQ(r.exit_code, 0) << "promtool check metrics:\n" << r.out << r.err;
  EXPECT_EQ(r.out + r.err, "") << "promtool had remarks";
}

// ---- The dashboard against the live scrape -----------------------------------------

Struct load_dashboard() {
  Struct dashboard;
  const std::string text = read_file(HEARTH_DASHBOARD_JSON);
  const auto st = google::protobuf::util::JsonStringToMessage(text, &dashboard);
  EXPECT_TRUE(st.ok()) << HEARTH_DASHBOARD_JSON << " is not JSON: " << st.ToString();
  return dashboard;
}

const Value* field(const Struct& s, const std::string& name) {
  const auto it = s.fields().find(name);
  return it == s.fields().end() ? nullptr : &it->second;
}

// Every PromQL expression of the dashboard: panel targets (rows' nested
// panels too) and query variables (label_values(METRIC, LABEL): METRIC).
struct DashboardQueries {
  std::vector<std::string> exprs;
  std::set<std::string> variable_metrics;
};

void collect_panels(const Value& panels, DashboardQueries& out) {
  for (const Value& p : panels.list_value().values()) {
    if (const Value* nested = field(p.struct_value(), "panels")) collect_panels(*nested, out);
    const Value* targets = field(p.struct_value(), "targets");
    if (targets == nullptr) continue;
    for (const Value& t : targets->list_value().values()) {
      const Value* expr = field(t.struct_value(), "expr");
      EXPECT_TRUE(expr != nullptr && !expr->string_value().empty())
          << "a target of panel '" << field(p.struct_value(), "title")->string_value()
          << "' has no expr";
      if (expr != nullptr) out.exprs.push_back(expr->string_value());
    }
  }
}

DashboardQueries dashboard_queries() {
  const Struct d = load_dashboard();
  DashboardQueries out;
  if (const Value* panels = field(d, "panels")) collect_panels(*panels, out);
  if (const Value* templating = field(d, "templating")) {
    for (const Value& v : field(templating->struct_value(), "list")->list_value().values()) {
      const Value* query = field(v.struct_value(), "query");
      if (field(v.struct_value(), "type")->string_value() != "query" || query == nullptr) continue;
      std::string q = query->has_struct_value()
                          ? field(query->struct_value(), "query")->string_value()
                          : query->string_value();
      const std::string prefix = "label_values(";
      EXPECT_EQ(q.compare(0, prefix.size(), prefix), 0) << "unexpected variable query " << q;
      const std::size_t comma = q.find(',');
      if (comma != std::string::npos)
        out.variable_metrics.insert(q.substr(prefix.size(), comma - prefix.size()));
    }
  }
  return out;
}

TEST(PromqlNames, ExtractsMetricNamesOnly) {
  EXPECT_EQ(promql_metric_names(
                "histogram_quantile(0.95, sum by (le, model) (rate(a_seconds_bucket{model=~\"$m\","
                "x!=\"y z\"}[$__rate_interval])))"),
            (std::set<std::string>{"a_seconds_bucket"}));
  EXPECT_EQ(promql_metric_names("busy{m=\"a\"} / on (model) group_left total * 2 + 1e3"),
            (std::set<std::string>{"busy", "total"}));
  EXPECT_EQ(promql_metric_names("sum without (code) (rate(x_total[5m])) > bool 0.5"),
            (std::set<std::string>{"x_total"}));
}

TEST_F(LiveServer, EveryDashboardMetricExistsInALiveScrape) {
  exercise();
  const Scrape s = scrape();
  const std::set<std::string> live = s.sample_names();
  const DashboardQueries q = dashboard_queries();
  ASSERT_GE(q.exprs.size(), 45u) << "the dashboard lost its queries?";
  std::set<std::string> used = q.variable_metrics;
  for (const std::string& e : q.exprs) {
    const std::set<std::string> names = promql_metric_names(e);
    EXPECT_FALSE(names.empty()) << "no metric in: " << e;
    used.insert(names.begin(), names.end());
  }
  ASSERT_GE(used.size(), 20u);
  for (const std::string& name : used) {
    // Histogram series are selected as NAME_bucket/_sum/_count: those are
    // the sample names of the scrape, so an exact match covers them.
    EXPECT_TRUE(live.count(name) == 1)
        << "the dashboard uses '" << name << "', which a live scrape does not have";
  }
  // The panels are all there.
  for (const char* m : {"hearth_requests_total",
                        "hearth_generated_tokens_total",
                        "hearth_time_to_first_token_seconds_bucket",
                        "hearth_inter_token_latency_seconds_bucket",
                        "hearth_model_queue_depth",
                        "hearth_model_instances_busy",
                        "hearth_temp_allocator_hit_ratio",
                        "hearth_temp_allocator_peak_bytes",
                        "hearth_temp_allocator_in_use_bytes",
                        "hearth_temp_allocator_cached_bytes",
                        "hearth_module_kv_cache_bytes",
                        "hearth_module_planned_activation_bytes",
                        "process_resident_memory_bytes",
                        "hearth_step_sequences_bucket",
                        "hearth_step_sequences_sum",
                        "hearth_step_sequences_count",
                        "hearth_step_tokens_bucket",
                        "hearth_step_duration_seconds_bucket",
                        "hearth_model_kv_positions_used",
                        "hearth_model_kv_positions_capacity",
                        "hearth_model_requests_running",
                        "hearth_model_requests_waiting"})
    EXPECT_EQ(used.count(m), 1u) << "the dashboard does not chart " << m;
}

// ---- A real Prometheus with the shipped config ---------------------------------------

// Parses an /api/v1 answer; "" or why not.
std::string parse_api(const HttpResponse& r, Struct& out) {
  if (r.status != 200) return "HTTP " + std::to_string(r.status) + " " + r.error + " " + r.body;
  const auto st = google::protobuf::util::JsonStringToMessage(r.body, &out);
  if (!st.ok()) return "not JSON: " + r.body.substr(0, 300);
  if (field(out, "status") == nullptr || field(out, "status")->string_value() != "success")
    return "status is not success: " + r.body.substr(0, 300);
  return "";
}

TEST_F(LiveServer, PrometheusScrapesItWithTheShippedConfig) {
  const std::string prometheus = found_program(HEARTH_PROMETHEUS);
  ASSERT_FALSE(prometheus.empty())
      << "prometheus not found: install the Debian package 'prometheus'";
  exercise();
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());

  // The shipped config with the target rewritten (compose's "hearth:9464"
  // becomes this test's server) and the job renamed to what a Kubernetes
  // ServiceMonitor calls it (the Service's name), so the dashboard is shown
  // to work whatever the job is called.
  std::string config = read_file(HEARTH_PROMETHEUS_YML);
  const std::string shipped_job = "job_name: hearth\n", job = "hearth-metrics";
  const std::size_t job_at = config.find(shipped_job);
  ASSERT_NE(job_at, std::string::npos) << HEARTH_PROMETHEUS_YML << " no longer has " << shipped_job;
  config.replace(job_at, shipped_job.size(), "job_name: " + job + "\n");
  const std::string shipped_target = "\"hearth:9464\"";
  const std::size_t at = config.find(shipped_target);
  ASSERT_NE(at, std::string::npos)
      << HEARTH_PROMETHEUS_YML << " no longer targets " << shipped_target;
  ASSERT_EQ(config.find(shipped_target, at + 1), std::string::npos);
  // The server is scraped as two targets (127.0.0.1 and localhost), as a
  // Deployment's replicas are: each series comes twice, differing only in
  // `instance`, so a query that joins series must match per instance.
  const std::string address = server_.metrics_address();
  const std::string alias = "localhost" + address.substr(address.rfind(':'));
  config.replace(at, shipped_target.size(), "\"" + address + "\", \"" + alias + "\"");
  ASSERT_TRUE(write_file(dir.path / "prometheus.yml", config));

  const int port = free_loopback_port();
  ASSERT_NE(port, 0);
  const std::string web = "127.0.0.1:" + std::to_string(port);
  Child prom;
  ASSERT_TRUE(prom.start(prometheus,
                         {"--config.file=" + (dir.path / "prometheus.yml").string(),
                          "--storage.tsdb.path=" + (dir.path / "data").string(),
                          "--web.listen-address=" + web, "--log.level=warn"},
                         dir.path / "prometheus.log"))
      << prom.error();

  // Poll (bounded) until the target is up and a hearth series is queryable.
  const Clock::time_point deadline = Clock::now() + patience() + seconds(30);
  std::string last;
  bool up = false, queried = false;
  while (Clock::now() < deadline && !queried) {
    ASSERT_TRUE(prom.running()) << "prometheus exited:\n" << prom.log_tail();
    Struct answer;
    if (!up) {
      last = parse_api(http_get(web, "/api/v1/targets"), answer);
      if (last.empty()) {
        for (const Value& t :
             field(field(answer, "data")->struct_value(), "activeTargets")->list_value().values()) {
          const Struct& ts = t.struct_value();
          last = "target " + field(ts, "scrapeUrl")->string_value() + " health " +
                 field(ts, "health")->string_value() + " " + field(ts, "lastError")->string_value();
          up |= field(ts, "health")->string_value() == "up" &&
                field(ts, "scrapeUrl")->string_value().find(server_.metrics_address()) !=
                    std::string::npos;
        }
      }
    } else {
      last = parse_api(http_get(web, "/api/v1/query?query=" + url_encode("hearth_build_info")),
                       answer);
      if (last.empty()) {
        const Value* result = field(field(answer, "data")->struct_value(), "result");
        queried = result != nullptr && result->list_value().values_size() > 0;
        if (queried) {
          const Struct& metric =
              field(result->list_value().values(0).struct_value(), "metric")->struct_value();
          EXPECT_EQ(field(metric, "job")->string_value(), job);
          EXPECT_NE(field(metric, "version"), nullptr);
        }
        last = "no hearth_build_info series yet";
      }
    }
    if (!queried) std::this_thread::sleep_for(milliseconds(250));  // polling interval
  }
  ASSERT_TRUE(up) << "the target never became up; last: " << last << "\n" << prom.log_tail();
  ASSERT_TRUE(queried) << "no hearth series returned; last: " << last << "\n" << prom.log_tail();

  // rate() needs two samples in its window: wait (bounded) for a second
  // scrape of the target.
  bool two_scrapes = false;
  while (Clock::now() < deadline && !two_scrapes) {
    ASSERT_TRUE(prom.running()) << "prometheus exited:\n" << prom.log_tail();
    Struct answer;
    last = parse_api(http_get(web, "/api/v1/query?query=" +
                                       url_encode("count_over_time(hearth_build_info[1m])")),
                     answer);
    if (last.empty()) {
      const Value* result = field(field(answer, "data")->struct_value(), "result");
      two_scrapes = result != nullptr && result->list_value().values_size() > 0 &&
                    std::atof(field(result->list_value().values(0).struct_value(), "value")
                                  ->list_value()
                                  .values(1)
                                  .string_value()
                                  .c_str()) >= 2;
      last = "fewer than two scrapes yet";
    }
    if (!two_scrapes) std::this_thread::sleep_for(milliseconds(250));  // polling interval
  }
  ASSERT_TRUE(two_scrapes) << "no second scrape; last: " << last << "\n" << prom.log_tail();

  // Every dashboard expression is valid PromQL for this Prometheus (with
  // Grafana's variables filled in: $job as its query, label_values of
  // hearth_build_info, resolves here) and returns series from the live
  // server (a histogram_quantile over no new observations is a NaN sample,
  // still a series: the panel's query matches what the server exposes).
  for (std::string e : dashboard_queries().exprs) {
    const std::string original = e;
    for (const auto& [var, value] : std::vector<std::pair<std::string, std::string>>{
             {"$__rate_interval", "1m"}, {"$model", ".*"}, {"$job", job}}) {
      for (std::size_t p; (p = e.find(var)) != std::string::npos;) e.replace(p, var.size(), value);
    }
    Struct answer;
    const std::string err =
        parse_api(http_get(web, "/api/v1/query?query=" + url_encode(e)), answer);
    EXPECT_EQ(err, "") << "dashboard query: " << original;
    if (!err.empty()) continue;
    const Value* result = field(field(answer, "data")->struct_value(), "result");
    EXPECT_TRUE(result != nullptr && result->list_value().values_size() > 0)
        << "dashboard query returns no series: " << original;
  }
}

// ---- The dashboard against Grafana's published schema ----------------------------------

TEST(GrafanaDashboard, TypeChecksAgainstGrafanaSchema) {
  const std::string npm = found_program(HEARTH_NPM), node = found_program(HEARTH_NODE);
  ASSERT_FALSE(npm.empty() || node.empty())
      << "npm/node not found: install the Debian packages 'npm' and 'nodejs'";
  // node_modules lives in the build tree and is reused while the lock file
  // is unchanged (the install needs the npm registry once).
  const fs::path src = HEARTH_GRAFANA_SCHEMA_SRC, work = HEARTH_GRAFANA_SCHEMA_WORK;
  fs::create_directories(work);
  const std::string lock = read_file(src / "package-lock.json");
  ASSERT_FALSE(lock.empty()) << src / "package-lock.json";
  const fs::path stamp = work / "node_modules" / ".hearth-installed-lock";
  if (read_file(stamp) != lock) {
    ASSERT_TRUE(write_file(work / "package.json", read_file(src / "package.json")));
    ASSERT_TRUE(write_file(work / "package-lock.json", lock));
    const ProcessResult r =
        run_process(npm, {"ci", "--prefix", work.string(), "--no-audit", "--no-fund",
                          "--fetch-retries=1", "--fetch-timeout=60000"});
    ASSERT_EQ(r.exit_code, 0)
        << "npm ci of @grafana/schema and typescript failed (is the npm registry reachable?):\n"
        << r.out << r.err;
    ASSERT_TRUE(write_file(stamp, lock));
  }

  // The dashboard JSON pasted in as an object literal typed Dashboard: tsc
  // then checks every field's type, string unions included, and rejects
  // fields the schema does not have (importing the .json file would widen
  // every string and skip the unknown-field check). The @ts-expect-error
  // line proves the checker is live: were Dashboard `any`, it would fail.
  const std::string dashboard = read_file(HEARTH_DASHBOARD_JSON);
  ASSERT_FALSE(dashboard.empty()) << HEARTH_DASHBOARD_JSON;
  ASSERT_TRUE(write_file(work / "hearth_dashboard.ts",
                         "import type { Dashboard } from \"@grafana/schema\";\n"
                         "export const dashboard: Dashboard = " +
                             dashboard +
                             ";\n"
                             "// @ts-expect-error: schemaVersion must be a number\n"
                             "export const broken: Dashboard = { schemaVersion: \"39\" };\n"));
  ASSERT_TRUE(write_file(work / "tsconfig.json", read_file(src / "tsconfig.json")));
  const ProcessResult tsc =
      run_process(node, {(work / "node_modules" / "typescript" / "bin" / "tsc").string(), "-p",
                         (work / "tsconfig.json").string()});
  EXPECT_EQ(tsc.exit_code, 0) << HEARTH_DASHBOARD_JSON
                              << " does not type-check as @grafana/schema's Dashboard "
                                 "(line numbers are in hearth_dashboard.ts, 2 lines more than the "
                                 "JSON):\n"
                              << tsc.out << tsc.err;
}

// ---- Startup ---------------------------------------------------------------------------

TEST(MetricsStartup, TakenMetricsPortIsAClearStartupError) {
  // Hold a loopback port, then ask the server to serve metrics there.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  const std::string taken = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));

  ServerProcess server;
  EXPECT_FALSE(
      server.start(HEARTH_SERVER_BIN, {"--listen", "127.0.0.1:0", "--metrics-listen", taken}))
      << "the server started although " << taken << " is taken";
  EXPECT_EQ(server.wait_exit(patience()), 1) << server.describe();
  EXPECT_NE(server.stderr_text().find("--metrics-listen: cannot listen on " + taken),
            std::string::npos)
      << server.stderr_text();
  ::close(fd);
}

TEST(MetricsStartup, MalformedMetricsAddressIsAFlagError) {
  for (const std::string bad : {"[::]:9464", "9464", "+9464", "127.0.0.1:70000", "host:9464"}) {
    ServerProcess server;
    EXPECT_FALSE(
        server.start(HEARTH_SERVER_BIN, {"--listen", "127.0.0.1:0", "--metrics-listen", bad}))
        << bad;
    EXPECT_EQ(server.wait_exit(patience()), 2) << server.describe();
    EXPECT_NE(server.stderr_text().find("--metrics-listen: '" + bad + "' is not IPV4:PORT"),
              std::string::npos)
        << server.stderr_text();
  }
}

TEST(MetricsStartup, OffServesNoMetrics) {
  ServerProcess server;
  ASSERT_TRUE(
      server.start(HEARTH_SERVER_BIN, {"--listen", "127.0.0.1:0", "--metrics-listen", "off"}))
      << server.error();
  EXPECT_EQ(server.metrics_address(), "off");
  EXPECT_EQ(server.metrics_port(), 0);
  {
    auto stub = connect(server.grpc_address());
    EXPECT_TRUE(generate(*stub, kModel, "metrics are off", 4).status.ok());
  }
  ASSERT_TRUE(server.signal(SIGTERM));
  EXPECT_EQ(server.wait_exit(patience()), 0) << server.describe();
}

}  // namespace
}  // namespace hearth::testing
