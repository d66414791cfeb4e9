// Dynamic per-token int8 quantization of float activations (kernels/quantize.h):
// the fused quantize_dynamic_per_token and the unfused pair
// choose_qparams_per_token + quantize_per_token, over [tokens x 4096] floats.
//
// Bytes moved per call = 4 bytes read + 1 byte written per element (the
// minimum traffic of the operation; the unfused pair reads its input twice,
// but is credited with the same bytes so the two figures compare directly).
// GB/s and of_bw below count read+write bytes, against the streaming *read*
// bandwidth measured at start; the summary lines also give the reads alone
// (4/5 of the bytes) as a fraction of that bandwidth.
//
// Two settings for each shape:
//  - in cache: the same input every call (64x4096 = 1 MiB, 512x4096 = 8 MiB of
//    floats: both fit in this VM's large L3, so this measures compute);
//  - DRAM: each call takes the next of many input/output copies whose total
//    exceeds 1 GiB, so every call reads its input from memory.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "bench_support.h"
#include "kernels/quantize.h"

namespace hearth::bench {
namespace {

using kernels::QScheme;

constexpr std::size_t kDim = 4096;
// Input copies total 1 GiB + 64 MiB (and outputs a quarter of that).
constexpr std::size_t kRotatingInputBytes = (std::size_t{1} << 30) + (std::size_t{64} << 20);

// One pool of rotating buffers for every benchmark here, allocated and filled
// once (filling 1 GiB takes about a second).
struct Rotating {
  float* x = nullptr;
  std::int8_t* q = nullptr;
  std::size_t elements = 0;
};

const Rotating& rotating() {
  static const Rotating r = [] {
    Rotating b;
    b.elements = kRotatingInputBytes / sizeof(float);
    b.x = static_cast<float*>(std::aligned_alloc(4096, b.elements * sizeof(float)));
    b.q = static_cast<std::int8_t*>(std::aligned_alloc(4096, b.elements));
    if (b.x == nullptr || b.q == nullptr) {
      std::fprintf(stderr, "quantize_bench: cannot allocate %zu MiB of buffers\n",
                   b.elements * 5 >> 20);
      std::abort();
    }
    // Activation-like values: a cheap hash mapped to [-4, 4) with every 64th
    // value an outlier, so rows have ordinary ranges. Speed does not depend
    // on the values (no data-dependent branches).
    std::uint32_t h = 12345;
    for (std::size_t i = 0; i < b.elements; ++i) {
      h = h * 1664525u + 1013904223u;
      const float v = static_cast<float>(static_cast<std::int32_t>(h) >> 8) * (4.0f / 8388608.0f);
      b.x[i] = (i & 63) == 17 ? v * 16.0f : v;
    }
    std::memset(b.q, 0, b.elements);  // fault the output pages in before timing
    return b;
  }();
  return r;
}

enum Variant { kFused = 0, kUnfused = 1 };

// Args: tokens, threads, dram (0 = in cache, 1 = rotating over > 1 GiB).
void run(benchmark::State& state, Variant variant) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  const auto threads = static_cast<std::size_t>(state.range(1));
  const bool dram = state.range(2) != 0;
  const std::size_t n = tokens * kDim;
  const Rotating& buf = rotating();
  const std::size_t copies = dram ? buf.elements / n : 1;
  kernels::ThreadPool& pool = bench_pool(threads);
  std::vector<float> scales(tokens);
  std::vector<std::int32_t> zps(tokens);

  std::size_t next = 0;
  auto once = [&] {
    const float* x = buf.x + next * n;
    std::int8_t* q = buf.q + next * n;
    if (++next == copies) next = 0;
    if (variant == kFused) {
      kernels::quantize_dynamic_per_token(x, tokens, kDim, QScheme::kAsymmetric, q, scales.data(),
                                          zps.data(), &pool);
    } else {
      kernels::choose_qparams_per_token(x, tokens, kDim, QScheme::kAsymmetric, scales.data(),
                                        zps.data(), &pool);
      kernels::quantize_per_token(x, tokens, kDim, scales.data(), zps.data(), q, &pool);
    }
    benchmark::DoNotOptimize(q);
    benchmark::ClobberMemory();
  };
  once();  // warm-up: pool threads awake, dispatch resolved

  for (auto _ : state) once();
  const double bytes = static_cast<double>(n) * (sizeof(float) + sizeof(std::int8_t));
  set_bandwidth_counters(state, bytes, threads);

  // Google Benchmark calls this function several times per setting while it
  // sizes the loop; the summary gets one line per setting, from its own
  // measurement: best of 3 rounds of >= 256 MiB of input each.
  static std::set<std::string> reported;
  const std::string what =
      std::string(variant == kFused ? "quant dyn/token fused " : "quant dyn/token unfused ") +
      std::to_string(tokens) + "x4096 " + (dram ? "DRAM" : "in cache");
  const std::string setting = std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  if (!reported.insert(what + setting).second) return;
  const std::size_t per_round = (std::size_t{256} << 20) / (n * sizeof(float));
  const std::size_t calls = per_round < 16 ? 16 : per_round;
  double seconds = 1e30;
  for (int round = 0; round < 3; ++round) {
    Stopwatch sw;
    for (std::size_t i = 0; i < calls; ++i) once();
    const double s = sw.seconds() / static_cast<double>(calls);
    seconds = s < seconds ? s : seconds;
  }
  const double gbps = bytes / seconds / 1e9;
  const double read_gbps = gbps * 4.0 / 5.0;  // the 4 of every 5 bytes that are reads
  const double bw = stream_read_gbps(threads);
  char figures[160];
  std::snprintf(figures, sizeof(figures),
                "%.1f GB/s r+w = %.0f%% of bw (reads alone %.1f GB/s = %.0f%%), %.1f us", gbps,
                100.0 * gbps / bw, read_gbps, 100.0 * read_gbps / bw, seconds * 1e6);
  summary(what, setting, figures);
}

void BM_QuantizeDynamicPerToken(benchmark::State& state) { run(state, kFused); }
void BM_QuantizeChooseThenQuantize(benchmark::State& state) { run(state, kUnfused); }

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens", "threads", "dram"});
  for (int dram : {0, 1})
    for (int tokens : {64, 512})
      for (int threads : {1, 2}) b->Args({tokens, threads, dram});
  b->UseRealTime();
}

BENCHMARK(BM_QuantizeDynamicPerToken)->Apply(shapes);
BENCHMARK(BM_QuantizeChooseThenQuantize)->Apply(shapes);

}  // namespace
}  // namespace hearth::bench
