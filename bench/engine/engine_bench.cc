// bench_engine: decode and prefill tokens/s of whole synthetic models, with
// the roofline ratio of decode against the streaming bandwidth measured in the
// same run.
//
//   decode roofline = decode tokens/s x bytes read per token / streaming bandwidth
//
// where the bytes read per token are the projection weights as the file stores
// them, one embedding row and the KV cache read at the measured context. Shapes:
//   (a) 768 wide, 12 layers, 12 heads, FFN 2048, vocab 32000
//   (b) the TinyLlama 1.1B shape: 2048 wide, 22 layers, 32 heads, 4 KV heads, FFN 5632, vocab 32000
// each in Q8_0 and Q4_0, and (b) also in Q4_K, Q4_K_M and Q5_K_M (with Q6_K
// where llama.cpp puts it) and Q6_K, on 1 and 2 threads; prefill of a 128-token prompt.
//
// Each model runs 5 times (prefill, then 64 decode tokens); the streaming
// bandwidth is measured again just before and just after each decode, and
// the decode is held to the mean of the two, so every ratio compares figures
// of the same moment (a shared machine's bandwidth drifts by several percent
// within a minute, and some hosts switch between two levels, e.g. 35 and
// 60 GB/s, for seconds at a time). A decode whose two reads differ by more
// than kSteadyBandwidth ran while the bandwidth changed: its ratio is shown
// in the range but left out of the median when any steady run exists.
// Printed: the medians, the range of the 5 ratios and of the bandwidth.
//
// Run: build/release/bench/bench_engine [--isa=avx512] [--benchmark_filter=...]
// (--isa: a lower kernel level than the machine's best, bench_support.h)
// With HEARTH_WRITE_MODELS_TO=DIR the synthetic models are also written there
// (to run another engine on exactly the same files).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "bench_support.h"
#include "engine/module.h"
#include "engine/synthetic_model.h"
#include "kernels/cpu_features.h"
#include "memory/thread_temp_allocator.h"
#include "spdlog/spdlog.h"

namespace hearth::bench {
namespace {

using engine::GgmlType;

struct Shape {
  const char* name;
  std::size_t dim, layers, heads, kv_heads, ffn, vocab;
};
constexpr Shape kShapeA{"a-768x12", 768, 12, 12, 12, 2048, 32000};
constexpr Shape kShapeB{"b-tinyllama-1.1B", 2048, 22, 32, 4, 5632, 32000};

constexpr std::size_t kPromptTokens = 128;
constexpr std::size_t kDecodeTokens = 64;

struct Loaded {
  std::string bytes;  // the GGUF file, in memory
  std::shared_ptr<const engine::ModelWeights> weights;
};

// The weights' name: the type, with _M for Q4_K or Q5_K mixed with Q6_K as
// llama.cpp's quantizer mixes them.
std::string weights_name(GgmlType type, bool medium_mix) {
  return engine::ggml_type_name(type) + (medium_mix ? "_M" : "");
}

Loaded& model(const Shape& s, GgmlType type, bool medium_mix) {
  static std::map<std::string, std::unique_ptr<Loaded>> cache;
  const std::string key = std::string(s.name) + "/" + weights_name(type, medium_mix);
  auto& slot = cache[key];
  if (slot) return *slot;
  slot = std::make_unique<Loaded>();
  engine::SyntheticModelSpec spec;
  spec.name = key;
  spec.n_embd = s.dim;
  spec.n_layer = s.layers;
  spec.n_head = s.heads;
  spec.n_head_kv = s.kv_heads;
  spec.n_ff = s.ffn;
  spec.n_vocab = s.vocab;
  spec.context_length = 2048;
  spec.weight_type = type;
  spec.medium_mix = medium_mix;
  auto bytes = engine::synthesize_model(spec);
  if (!bytes.ok()) std::abort();
  slot->bytes = std::move(*bytes);
  if (const char* dir = std::getenv("HEARTH_WRITE_MODELS_TO")) {
    const auto path = std::filesystem::path(dir) /
                      (std::string(s.name) + "-" + weights_name(type, medium_mix) + ".gguf");
    std::ofstream(path, std::ios::binary)
        .write(slot->bytes.data(), static_cast<std::streamsize>(slot->bytes.size()));
  }
  auto file = engine::GgufFile::parse(reinterpret_cast<const std::uint8_t*>(slot->bytes.data()),
                                      slot->bytes.size(), key);
  if (!file.ok()) std::abort();
  auto weights =
      engine::ModelWeights::load(std::shared_ptr<const engine::GgufFile>(std::move(*file)));
  if (!weights.ok()) {
    std::fprintf(stderr, "%s\n", std::string(weights.status().message()).c_str());
    std::abort();
  }
  slot->weights = std::move(*weights);
  return *slot;
}

// How far apart (a fraction of the lower) the reads before and after a
// decode may be for that decode to count as run at one bandwidth.
constexpr double kSteadyBandwidth = 0.10;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void BM_Model(benchmark::State& state, const Shape& shape, GgmlType type, bool medium_mix = false) {
  const auto threads = static_cast<std::size_t>(state.range(0));
  Loaded& m = model(shape, type, medium_mix);
  engine::ModuleOptions o;
  o.context_length = kPromptTokens + kDecodeTokens + 8;
  o.max_chunk = kPromptTokens;
  o.pool = &bench_pool(threads);
  auto module = engine::Module::load(m.weights, o);
  if (!module.ok()) std::abort();
  engine::Module& mod = **module;
  std::vector<std::int32_t> prompt(kPromptTokens);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<std::int32_t>(300 + (i * 7919) % 20000);
  CachingAllocator& temp = thread_temp_allocator();
  const engine::ModelConfig& c = mod.config();
  // The roofline's bytes per decode token: the projections as the file stores
  // them (issue #16's measure; the packed layouts read as many) + one
  // embedding row + the KV cache at the mean decode position (int8 rows:
  // head_dim + 8 bytes of scales).
  const double mean_ctx = static_cast<double>(kPromptTokens) + kDecodeTokens / 2.0;
  const double kv_bytes = 2.0 * c.n_layer * c.n_head_kv * mean_ctx * (c.head_dim + 8);
  const double bytes_per_token =
      static_cast<double>(m.weights->projection_file_bytes()) +
      static_cast<double>(kernels::row_bytes(m.weights->embedding_type(), c.n_embd)) + kv_bytes;
  std::vector<double> prefill_tps, decode_tps, rooflines, steady_rooflines, bandwidths;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    auto logits = mod.forward(prompt, 0);
    auto t1 = std::chrono::steady_clock::now();
    temp.reset();
    std::int32_t next = 0;
    std::size_t pos = kPromptTokens;
    // One warm decode step, then the timed ones.
    std::int32_t one[1] = {next};
    logits = mod.forward(one, pos++);
    temp.reset();
    // The bandwidth this iteration's decode is held to: read just before it
    // and (below) just after it.
    const double bw_before = stream_read_gbps_now(threads, 4);
    auto t2 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < kDecodeTokens; ++i) {
      next = static_cast<std::int32_t>(std::max_element(logits->begin(), logits->end()) -
                                       logits->begin());
      one[0] = next;
      logits = mod.forward(one, pos++);
      temp.reset();
    }
    auto t3 = std::chrono::steady_clock::now();
    const double bw_after = stream_read_gbps_now(threads, 4);
    const double p = std::chrono::duration<double>(t1 - t0).count();
    const double d = std::chrono::duration<double>(t3 - t2).count();
    state.SetIterationTime(p + d);
    prefill_tps.push_back(static_cast<double>(kPromptTokens) / p);
    decode_tps.push_back(static_cast<double>(kDecodeTokens) / d);
    const double bw = (bw_before + bw_after) / 2;
    rooflines.push_back(decode_tps.back() * bytes_per_token / (bw * 1e9));
    bandwidths.push_back(bw);
    if (std::abs(bw_after - bw_before) <= kSteadyBandwidth * std::min(bw_before, bw_after))
      steady_rooflines.push_back(rooflines.back());
  }
  // Medians over the iterations (the roofline's over the steady ones, if
  // any); the ranges show the spread.
  const double prefill = median(prefill_tps), decode = median(decode_tps),
               roofline = median(steady_rooflines.empty() ? rooflines : steady_rooflines);
  const auto [lo, hi] = std::minmax_element(rooflines.begin(), rooflines.end());
  const auto [bw_lo, bw_hi] = std::minmax_element(bandwidths.begin(), bandwidths.end());
  state.counters["prefill_tok_s"] = prefill;
  state.counters["decode_tok_s"] = decode;
  state.counters["roofline"] = roofline;
  char fig[240];
  std::snprintf(fig, sizeof fig,
                "prefill %.1f tok/s | decode %.2f tok/s = %.0f%% of roofline (%zu runs: "
                "%.0f-%.0f%%, %zu steady; bandwidth %.0f-%.0f GB/s; %.2f GB/token)",
                prefill, decode, 100 * roofline, rooflines.size(), 100 * *lo, 100 * *hi,
                steady_rooflines.size(), *bw_lo, *bw_hi, bytes_per_token / 1e9);
  summary(std::string("model ") + shape.name + " " + weights_name(type, medium_mix),
          std::to_string(threads) + " thread" + (threads == 1 ? "" : "s"), fig);
}

BENCHMARK_CAPTURE(BM_Model, a_q8_0, kShapeA, GgmlType::kQ8_0)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Model, a_q4_0, kShapeA, GgmlType::kQ4_0)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Model, b_q8_0, kShapeB, GgmlType::kQ8_0)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Model, b_q4_0, kShapeB, GgmlType::kQ4_0)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Model, b_q4_k, kShapeB, GgmlType::kQ4_K)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Model, b_q4_k_m, kShapeB, GgmlType::kQ4_K, true)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Model, b_q5_k_m, kShapeB, GgmlType::kQ5_K, true)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Model, b_q6_k, kShapeB, GgmlType::kQ6_K)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace hearth::bench

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  const auto forced_isa = hearth::bench::take_isa_flag(argc, argv);
  const auto forced_prefetch = hearth::bench::take_decode_prefetch_flag(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::printf("kernel ISA: %s; decode prefetch: %s\n",
              hearth::kernels::isa_name(hearth::kernels::active_isa()),
              hearth::kernels::decode_prefetch() ? "on" : "off");
  hearth::bench::stream_read_gbps(1);
  hearth::bench::stream_read_gbps(2);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  hearth::bench::print_summary();
  return 0;
}
