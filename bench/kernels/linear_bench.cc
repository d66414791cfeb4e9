// Linear layer benchmarks.
//
// Decode (GEMV, m = 1): memory-bound. Each iteration runs a different copy of
// the weights, rotating over copies that total more than 1 GiB, so every call
// streams its weights from DRAM; reported as GB/s of packed weight bytes and
// as a fraction of the streaming read bandwidth measured in the same run.
// BM_ResidentGemv runs it over weights that stay in the last-level cache
// (against a read of the same bytes), BM_HotGemv over weights in L2.
//
// Prefill (GEMM, M = 128): compute-bound; GFLOP/s (2 M N K per forward) of
// the quantized path on the best ISA against XNNPACK's f32 GEMM on the same
// shape, and their ratio.
//
// The activation quantizer alone (BM_QuantizeActivations): millions of
// 32-input blocks per second on one thread, per ISA.
//
// Iteration counts are fixed (~0.5 s each): Google Benchmark calls a
// benchmark function several times while it searches for an iteration count,
// and every call would add a summary line; with a fixed count there is one.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_support.h"
#include "kernels/cpu_features.h"
#include "kernels/fp16.h"
#include "kernels/gguf_blocks.h"
#include "kernels/gguf_kquants.h"
#include "kernels/gguf_legacy_blocks.h"
#include "kernels/linear.h"
#include "kernels/linear_impl.h"
#include "memory/caching_allocator.h"
#include "memory/streamed_region.h"

namespace hearth::bench {
namespace {

using kernels::Linear;
using kernels::Packing;

constexpr std::size_t kLinearRotateBytes = std::size_t{1} << 30;

const char* format_name(Linear::Format f) {
  switch (f) {
    case Linear::Format::kQ8_0:
      return "q8_0";
    case Linear::Format::kQ4_0:
      return "q4_0";
    case Linear::Format::kQ4_K:
      return "q4_k";
    case Linear::Format::kQ5_K:
      return "q5_k";
    case Linear::Format::kQ6_K:
      return "q6_k";
    case Linear::Format::kIQ4_NL:
      return "iq4_nl";
    case Linear::Format::kQ5_0:
      return "q5_0";
    case Linear::Format::kQ4_1:
      return "q4_1";
    case Linear::Format::kQ5_1:
      return "q5_1";
    case Linear::Format::kF16:
      return "f16";
    case Linear::Format::kBF16:
      return "bf16";
    default:
      return "f32";
  }
}

// IQ4_NL blocks for timing: Q4_0's blocks of x read as IQ4_NL (the same
// layout, a scale and 32 codes; hearth has no IQ4_NL encoder, and the
// kernels' speed does not depend on which codes they meet).
void q4_0_blocks_as_iq4_nl(const float* x, kernels::BlockIQ4_NL* y, std::size_t n) {
  static_assert(sizeof(kernels::BlockQ4_0) == sizeof(kernels::BlockIQ4_NL));
  std::vector<kernels::BlockQ4_0> q(n / 32);
  kernels::quantize_row_q4_0(x, q.data(), n);
  std::memcpy(static_cast<void*>(y), q.data(), q.size() * sizeof(kernels::BlockQ4_0));
}

// Packs w (n_out x n_in floats) as `format` each time it is called (as the
// Packing it is given says), from blocks quantized once: the rotating copies
// below pack hundreds.
std::function<absl::StatusOr<Linear>(Packing)> linear_packer(Linear::Format format,
                                                             std::size_t n_out, std::size_t n_in,
                                                             const std::vector<float>& w) {
  const std::size_t n = n_out * n_in;
  auto packer = [&]<typename Block>(
                    void (*quantize)(const float*, Block*, std::size_t), std::size_t per_block,
                    absl::StatusOr<Linear> (*from)(const Block*, std::size_t, std::size_t, Packing))
      -> std::function<absl::StatusOr<Linear>(Packing)> {
    auto q = std::make_shared<std::vector<Block>>(n / per_block);
    quantize(w.data(), q->data(), n);
    return [q, n_out, n_in, from](Packing p) { return from(q->data(), n_out, n_in, p); };
  };
  switch (format) {
    case Linear::Format::kQ8_0:
      return packer(kernels::quantize_row_q8_0, 32, &Linear::from_q8_0);
    case Linear::Format::kQ4_0:
      return packer(kernels::quantize_row_q4_0, 32, &Linear::from_q4_0);
    case Linear::Format::kQ4_K:
      return packer(kernels::quantize_row_q4_k, 256, &Linear::from_q4_k);
    case Linear::Format::kQ5_K:
      return packer(kernels::quantize_row_q5_k, 256, &Linear::from_q5_k);
    case Linear::Format::kQ6_K:
      return packer(kernels::quantize_row_q6_k, 256, &Linear::from_q6_k);
    case Linear::Format::kIQ4_NL:
      return packer(q4_0_blocks_as_iq4_nl, 32, &Linear::from_iq4_nl);
    case Linear::Format::kQ5_0:
      return packer(kernels::quantize_row_q5_0, 32, &Linear::from_q5_0);
    case Linear::Format::kQ4_1:
      return packer(kernels::quantize_row_q4_1, 32, &Linear::from_q4_1);
    case Linear::Format::kQ5_1:
      return packer(kernels::quantize_row_q5_1, 32, &Linear::from_q5_1);
    case Linear::Format::kF16: {
      auto h = std::make_shared<std::vector<std::uint16_t>>(n);
      for (std::size_t i = 0; i < n; ++i) (*h)[i] = kernels::f32_to_fp16(w[i]);
      return [h, n_out, n_in](Packing p) { return Linear::from_f16(h->data(), n_out, n_in, p); };
    }
    default: {
      auto f = std::make_shared<std::vector<float>>(w);
      return [f, n_out, n_in](Packing) { return Linear::from_f32(f->data(), n_out, n_in); };
    }
  }
}

absl::StatusOr<Linear> make_linear(Linear::Format format, std::size_t n_out, std::size_t n_in,
                                   const std::vector<float>& w) {
  return linear_packer(format, n_out, n_in, w)(Packing());
}

// Copies of one weight matrix totalling at least `bytes` (by default more
// than any cache here), kept between benchmarks of the same shape (1 and 2
// threads) and replaced when the shape changes, so at most one set (~1 GiB)
// is alive.
std::vector<Linear>& rotating_copies(Linear::Format format, std::size_t n_out, std::size_t n_in,
                                     std::size_t bytes = kLinearRotateBytes +
                                                         (kLinearRotateBytes >> 3)) {
  static std::string key;
  static std::vector<Linear> copies;
  const std::string want = std::string(format_name(format)) + std::to_string(n_out) + "x" +
                           std::to_string(n_in) + "/" + std::to_string(bytes);
  if (key == want) return copies;
  copies.clear();
  key = want;
  const auto pack = linear_packer(format, n_out, n_in, random_floats(n_out * n_in, 1));
  // Carved from one region, as a model's projections are (engine/weights.cc).
  const std::shared_ptr<StreamedRegion> region = StreamedRegion::reserve(2 * bytes);
  std::size_t total = 0;
  while (total < bytes) {
    absl::StatusOr<Linear> l = pack(Packing(nullptr, region));
    if (!l.ok() || l->format() != format) std::abort();
    total += l->weight_bytes();
    copies.push_back(*std::move(l));
  }
  return copies;
}

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

// Seconds per forward of `m` rows, each iteration on the next of `copies`
// (from DRAM when they total more than the caches hold, as BM_DecodeGemv's
// do), after one warm-up call.
double seconds_per_rotating_call(benchmark::State& state, std::vector<Linear>& copies,
                                 std::size_t m, std::size_t threads) {
  kernels::ThreadPool& pool = bench_pool(threads);
  const std::vector<float> x = random_floats(m * copies[0].n_in(), 2);
  std::vector<float> y(m * copies[0].n_out());
  CachingAllocator scratch;
  std::size_t i = 0;
  if (!copies[0].forward(x.data(), m, y.data(), scratch, &pool).ok()) std::abort();  // warm-up
  scratch.reset();
  Stopwatch sw;
  for (auto _ : state) {
    const absl::Status s = copies[i].forward(x.data(), m, y.data(), scratch, &pool);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    scratch.reset();
    if (++i == copies.size()) i = 0;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  return sw.seconds() / static_cast<double>(state.iterations());
}

// Args: n_out, n_in, threads.
template <Linear::Format kFormat>
void BM_DecodeGemv(benchmark::State& state) {
  const auto n_out = static_cast<std::size_t>(state.range(0));
  const auto n_in = static_cast<std::size_t>(state.range(1));
  const auto threads = static_cast<std::size_t>(state.range(2));
  std::vector<Linear>& copies = rotating_copies(kFormat, n_out, n_in);
  const double seconds = seconds_per_rotating_call(state, copies, 1, threads);
  const double bytes = static_cast<double>(copies[0].weight_bytes());
  set_bandwidth_counters(state, bytes, threads);
  const double gbps = bytes / seconds / 1e9;
  summary(std::string("decode GEMV ") + format_name(kFormat) + " " + std::to_string(n_out) + "x" +
              std::to_string(n_in),
          std::to_string(threads) + (threads == 1 ? " thread" : " threads"),
          fmt("%.1f GB/s = %.0f%% of bw (%.0f us)", gbps, 100 * gbps / stream_read_gbps(threads),
              seconds * 1e6));
}

BENCHMARK_TEMPLATE(BM_DecodeGemv, Linear::Format::kQ8_0)
    ->ArgNames({"n_out", "n_in", "threads"})
    ->Args({4096, 4096, 1})
    ->Args({4096, 4096, 2})
    ->Iterations(256)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_DecodeGemv, Linear::Format::kQ8_0)
    ->ArgNames({"n_out", "n_in", "threads"})
    ->Args({11008, 4096, 1})
    ->Args({11008, 4096, 2})
    ->Iterations(128)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_DecodeGemv, Linear::Format::kQ4_0)
    ->ArgNames({"n_out", "n_in", "threads"})
    ->Args({4096, 4096, 1})
    ->Args({4096, 4096, 2})
    ->Iterations(256)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_DecodeGemv, Linear::Format::kQ4_0)
    ->ArgNames({"n_out", "n_in", "threads"})
    ->Args({11008, 4096, 1})
    ->Args({11008, 4096, 2})
    ->Iterations(128)
    ->UseRealTime();

// The TinyLlama 1.1B projections (engine benchmark shape b), 2 threads: the
// small K/V and attention matrices show the per-call overhead that whole-model
// decode pays ~150 times per token.
BENCHMARK_TEMPLATE(BM_DecodeGemv, Linear::Format::kQ4_0)
    ->ArgNames({"n_out", "n_in", "threads"})
    ->Args({256, 2048, 2})
    ->Args({2048, 2048, 2})
    ->Args({5632, 2048, 1})
    ->Args({5632, 2048, 2})
    ->Args({2048, 5632, 2})
    ->Iterations(2048)
    ->UseRealTime();

// The same shape for the K-quants (the Q4_K_M / Q5_K_M / Q6_K files'
// projections), 1 and 2 threads.
void ffn_shape_one_and_two_threads(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n_out", "n_in", "threads"})
      ->Args({5632, 2048, 1})
      ->Args({5632, 2048, 2})
      ->Iterations(2048)
      ->UseRealTime();
}
BENCHMARK_TEMPLATE(BM_DecodeGemv, Linear::Format::kQ4_K)->Apply(ffn_shape_one_and_two_threads);
BENCHMARK_TEMPLATE(BM_DecodeGemv, Linear::Format::kQ5_K)->Apply(ffn_shape_one_and_two_threads);
BENCHMARK_TEMPLATE(BM_DecodeGemv, Linear::Format::kQ6_K)->Apply(ffn_shape_one_and_two_threads);
BENCHMARK_TEMPLATE(BM_DecodeGemv, Linear::Format::kIQ4_NL)->Apply(ffn_shape_one_and_two_threads);
BENCHMARK_TEMPLATE(BM_DecodeGemv, Linear::Format::kQ5_0)->Apply(ffn_shape_one_and_two_threads);
BENCHMARK_TEMPLATE(BM_DecodeGemv, Linear::Format::kQ4_1)->Apply(ffn_shape_one_and_two_threads);
BENCHMARK_TEMPLATE(BM_DecodeGemv, Linear::Format::kQ5_1)->Apply(ffn_shape_one_and_two_threads);

// Decode from the last-level cache: the copies total kResidentBytes, which
// stay in this machine's L3 (hundreds of MB on the server parts these guests
// run on), read at a higher rate than its DRAM gives; against the plain read
// of the same bytes, measured right after. So a machine whose DRAM streams
// only ~35 GB/s to 2 cores still shows what the decode tiles reach where
// memory is faster (the 60-90 GB/s of other 2-core guests): a figure well
// below 100% here means their instructions, not the memory, set the pace.
constexpr std::size_t kResidentBytes = std::size_t{24} << 20;
template <Linear::Format kFormat>
void BM_ResidentGemv(benchmark::State& state) {
  const std::size_t n_out = 5632, n_in = 2048, threads = 2;
  std::vector<Linear>& copies = rotating_copies(kFormat, n_out, n_in, kResidentBytes);
  const double seconds = seconds_per_rotating_call(state, copies, 1, threads);
  const double bytes = static_cast<double>(copies[0].weight_bytes());
  const double read =
      resident_read_gbps(static_cast<std::size_t>(bytes) * copies.size(), threads, 8);
  const double gbps = bytes / seconds / 1e9;
  state.counters["GB/s"] = gbps;
  state.counters["of_read"] = gbps / read;
  summary(std::string("L3-resident GEMV ") + format_name(kFormat) + " 5632x2048 x" +
              std::to_string(copies.size()),
          "2 threads",
          fmt("%.1f GB/s = %.0f%% of the read of the same bytes (%.1f GB/s)", gbps,
              100 * gbps / read, read));
}
BENCHMARK_TEMPLATE(BM_ResidentGemv, Linear::Format::kQ8_0)->Iterations(8192)->UseRealTime();
BENCHMARK_TEMPLATE(BM_ResidentGemv, Linear::Format::kQ4_0)->Iterations(8192)->UseRealTime();
BENCHMARK_TEMPLATE(BM_ResidentGemv, Linear::Format::kQ4_K)->Iterations(8192)->UseRealTime();
BENCHMARK_TEMPLATE(BM_ResidentGemv, Linear::Format::kQ5_K)->Iterations(8192)->UseRealTime();
BENCHMARK_TEMPLATE(BM_ResidentGemv, Linear::Format::kQ6_K)->Iterations(8192)->UseRealTime();
BENCHMARK_TEMPLATE(BM_ResidentGemv, Linear::Format::kIQ4_NL)->Iterations(8192)->UseRealTime();
BENCHMARK_TEMPLATE(BM_ResidentGemv, Linear::Format::kQ5_0)->Iterations(8192)->UseRealTime();
BENCHMARK_TEMPLATE(BM_ResidentGemv, Linear::Format::kQ4_1)->Iterations(8192)->UseRealTime();
BENCHMARK_TEMPLATE(BM_ResidentGemv, Linear::Format::kQ5_1)->Iterations(8192)->UseRealTime();

// Decode's instruction cost, without the memory: one thread, one token, the
// same weights every call (256 x 2048: 0.15-0.5 MB, resident in L2), as
// packed weight bytes per second. Decode can run at the streaming bandwidth
// only where this rate is well above a core's share of it; where it is not,
// the format's inner loop (unpacking, per-block scales) is what to speed up.
template <Linear::Format kFormat>
void BM_HotGemv(benchmark::State& state) {
  const std::size_t n_out = 256, n_in = 2048;
  absl::StatusOr<Linear> l = make_linear(kFormat, n_out, n_in, random_floats(n_out * n_in, 3));
  if (!l.ok()) std::abort();
  std::vector<Linear> one;
  one.push_back(std::move(*l));
  const double seconds = seconds_per_rotating_call(state, one, 1, 1);
  const double gbps = static_cast<double>(one[0].weight_bytes()) / seconds / 1e9;
  state.counters["GB/s"] = gbps;
  summary(std::string("hot GEMV (in L2) ") + format_name(kFormat) + " 256x2048", "1 thread",
          fmt("%.1f GB/s of packed weights = %.0f%% of 1 thread's streaming bandwidth", gbps,
              100 * gbps / stream_read_gbps(1)));
}
BENCHMARK_TEMPLATE(BM_HotGemv, Linear::Format::kQ8_0)->Iterations(20000)->UseRealTime();
BENCHMARK_TEMPLATE(BM_HotGemv, Linear::Format::kQ4_0)->Iterations(20000)->UseRealTime();
BENCHMARK_TEMPLATE(BM_HotGemv, Linear::Format::kQ4_K)->Iterations(20000)->UseRealTime();
BENCHMARK_TEMPLATE(BM_HotGemv, Linear::Format::kQ5_K)->Iterations(20000)->UseRealTime();
BENCHMARK_TEMPLATE(BM_HotGemv, Linear::Format::kQ6_K)->Iterations(20000)->UseRealTime();
BENCHMARK_TEMPLATE(BM_HotGemv, Linear::Format::kIQ4_NL)->Iterations(20000)->UseRealTime();
BENCHMARK_TEMPLATE(BM_HotGemv, Linear::Format::kQ5_0)->Iterations(20000)->UseRealTime();
BENCHMARK_TEMPLATE(BM_HotGemv, Linear::Format::kQ4_1)->Iterations(20000)->UseRealTime();
BENCHMARK_TEMPLATE(BM_HotGemv, Linear::Format::kQ5_1)->Iterations(20000)->UseRealTime();
BENCHMARK_TEMPLATE(BM_HotGemv, Linear::Format::kF16)->Iterations(20000)->UseRealTime();

// A batched decode step's GEMM: M rows (one per decoding sequence) against
// cold weights (the rotating copies, as the GEMV above), so the figure holds
// both the DRAM stream of the weights and the M rows' multiply-adds; printed
// as ms per call and as its ratio to M = 1 of the same shape (a perfect
// overlap of memory and compute keeps that ratio near 1 until the rows'
// compute outgrows the weights' stream). Args: M, n_out, n_in, threads.
template <Linear::Format kFormat>
void BM_BatchedGemm(benchmark::State& state) {
  const auto m = static_cast<std::size_t>(state.range(0));
  const auto n_out = static_cast<std::size_t>(state.range(1));
  const auto n_in = static_cast<std::size_t>(state.range(2));
  const auto threads = static_cast<std::size_t>(state.range(3));
  std::vector<Linear>& copies = rotating_copies(kFormat, n_out, n_in);
  const double seconds = seconds_per_rotating_call(state, copies, m, threads);
  static std::map<std::string, double> one_row_seconds;
  const std::string shape = std::string(format_name(kFormat)) + " " + std::to_string(n_out) + "x" +
                            std::to_string(n_in) + " " + std::to_string(threads) + " thr";
  if (m == 1) one_row_seconds[shape] = seconds;
  const auto one = one_row_seconds.find(shape);
  const double ratio = one == one_row_seconds.end() ? 0.0 : seconds / one->second;
  state.counters["x_m1"] = ratio;
  summary("batched GEMM (cold weights) " + shape, "M=" + std::to_string(m),
          fmt("%.0f us = %.2fx M=1, %.0f GMAC/s", seconds * 1e6, ratio,
              static_cast<double>(m * n_out * n_in) / seconds / 1e9));
}

BENCHMARK_TEMPLATE(BM_BatchedGemm, Linear::Format::kQ4_0)
    ->ArgNames({"M", "n_out", "n_in", "threads"})
    ->Args({1, 5632, 2048, 2})
    ->Args({2, 5632, 2048, 2})
    ->Args({4, 5632, 2048, 2})
    ->Args({6, 5632, 2048, 2})
    ->Args({8, 5632, 2048, 2})
    ->Args({12, 5632, 2048, 2})
    ->Args({16, 5632, 2048, 2})
    ->Args({32, 5632, 2048, 2})
    ->Iterations(512)
    ->UseRealTime();

BENCHMARK_TEMPLATE(BM_BatchedGemm, Linear::Format::kQ8_0)
    ->ArgNames({"M", "n_out", "n_in", "threads"})
    ->Args({1, 5632, 2048, 2})
    ->Args({4, 5632, 2048, 2})
    ->Args({8, 5632, 2048, 2})
    ->Args({16, 5632, 2048, 2})
    ->Args({1, 5632, 2048, 1})
    ->Args({16, 5632, 2048, 1})
    ->Iterations(256)
    ->UseRealTime();

// Decode (M=1) of the K-quants, cold, on 1 and 2 threads: what the decode
// tile does when its weights stream from DRAM (BM_HotGemv: from L2).
BENCHMARK_TEMPLATE(BM_BatchedGemm, Linear::Format::kQ6_K)
    ->ArgNames({"M", "n_out", "n_in", "threads"})
    ->Args({1, 5632, 2048, 1})
    ->Args({1, 5632, 2048, 2})
    ->Iterations(256)
    ->UseRealTime();

// GFLOP/s of the prefill benchmarks of this run, by name, for the ratio line.
std::map<std::string, double>& prefill_results() {
  static std::map<std::string, double> r;
  return r;
}

void add_ratio_if_complete() {
  auto& r = prefill_results();
  const auto f32 = r.find("f32");
  if (f32 == r.end()) return;
  for (const auto& [name, gflops] : r) {
    if (name == "f32" || name.find("ratio") != std::string::npos) continue;
    if (r.count(name + " ratio")) continue;
    r[name + " ratio"] = gflops / f32->second;
    // The 2x target is the int8 GEMM's (quantized names carry "per-").
    const bool quantized = name.find("per-") != std::string::npos;
    summary("prefill GEMM " + name + " / xnnpack f32", "M=128 2 thr",
            fmt(quantized ? "%.2fx (target >= 2x)" : "%.2fx", gflops / f32->second));
  }
}

// Args: M, n_out, n_in, threads, activation quant (0 per group, 1 per token).
template <Linear::Format kFormat>
void BM_PrefillGemm(benchmark::State& state) {
  const auto m = static_cast<std::size_t>(state.range(0));
  const auto n_out = static_cast<std::size_t>(state.range(1));
  const auto n_in = static_cast<std::size_t>(state.range(2));
  const auto threads = static_cast<std::size_t>(state.range(3));
  const auto aq = state.range(4) == 0 ? Linear::ActivationQuant::kPerGroup32
                                      : Linear::ActivationQuant::kPerToken;
  absl::StatusOr<Linear> l = make_linear(kFormat, n_out, n_in, random_floats(n_out * n_in, 3));
  if (!l.ok()) {
    state.SkipWithError(std::string(l.status().message()).c_str());
    return;
  }
  kernels::ThreadPool& pool = bench_pool(threads);
  const std::vector<float> x = random_floats(m * n_in, 4);
  std::vector<float> y(m * n_out);
  CachingAllocator scratch;
  if (!l->forward(x.data(), m, y.data(), scratch, &pool, aq).ok()) std::abort();  // warm-up
  scratch.reset();
  Stopwatch sw;
  for (auto _ : state) {
    const absl::Status s = l->forward(x.data(), m, y.data(), scratch, &pool, aq);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    scratch.reset();
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double seconds = sw.seconds() / static_cast<double>(state.iterations());
  const double flops = 2.0 * static_cast<double>(m * n_out * n_in);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  const double gflops = flops / seconds / 1e9;
  std::string name = format_name(kFormat);
  if (kFormat != Linear::Format::kF32 && kFormat != Linear::Format::kF16) {
    name += std::string(aq == Linear::ActivationQuant::kPerGroup32 ? " per-group" : " per-token") +
            " (" + kernels::isa_name(kernels::active_isa()) + ")";
  }
  summary("prefill GEMM " + name + " " + std::to_string(n_out) + "x" + std::to_string(n_in),
          "M=" + std::to_string(m) + " " + std::to_string(threads) + " thr",
          fmt("%.0f GFLOP/s (%.1f ms)", gflops, seconds * 1e3));
  if (m == 128 && n_out == 4096 && n_in == 4096 && threads == 2) {
    prefill_results()[name] = gflops;
    add_ratio_if_complete();
  }
}

BENCHMARK_TEMPLATE(BM_PrefillGemm, Linear::Format::kF32)
    ->ArgNames({"M", "n_out", "n_in", "threads", "aq"})
    ->Args({128, 4096, 4096, 2, 0})
    ->Iterations(8)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
// F16 weights on hearth's half path (what an F16 or BF16 file runs on).
BENCHMARK_TEMPLATE(BM_PrefillGemm, Linear::Format::kF16)
    ->ArgNames({"M", "n_out", "n_in", "threads", "aq"})
    ->Args({128, 4096, 4096, 2, 0})
    ->Iterations(8)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_PrefillGemm, Linear::Format::kQ8_0)
    ->ArgNames({"M", "n_out", "n_in", "threads", "aq"})
    ->Args({128, 4096, 4096, 2, 0})
    ->Args({128, 4096, 4096, 2, 1})
    ->Iterations(32)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
// The second row is BM_BatchedGemm's M=16 step with its 6.5 MB of weights
// hot in L3: what it saves against the cold one is the DRAM time the step
// does not hide (compare them in one process, with repetitions: the machine
// drifts between runs).
BENCHMARK_TEMPLATE(BM_PrefillGemm, Linear::Format::kQ4_0)
    ->ArgNames({"M", "n_out", "n_in", "threads", "aq"})
    ->Args({128, 4096, 4096, 2, 0})
    ->Args({16, 5632, 2048, 2, 0})
    ->Iterations(32)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
// The K-quants (and IQ4_NL) at a prompt's width and at a batched decode step's (8 rows).
void k_quant_gemm_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "n_out", "n_in", "threads", "aq"})
      ->Args({128, 4096, 4096, 2, 0})
      ->Args({8, 4096, 4096, 2, 0})
      ->Iterations(16)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}
BENCHMARK_TEMPLATE(BM_PrefillGemm, Linear::Format::kQ4_K)->Apply(k_quant_gemm_args);
BENCHMARK_TEMPLATE(BM_PrefillGemm, Linear::Format::kQ5_K)->Apply(k_quant_gemm_args);
BENCHMARK_TEMPLATE(BM_PrefillGemm, Linear::Format::kQ6_K)->Apply(k_quant_gemm_args);
BENCHMARK_TEMPLATE(BM_PrefillGemm, Linear::Format::kIQ4_NL)->Apply(k_quant_gemm_args);
BENCHMARK_TEMPLATE(BM_PrefillGemm, Linear::Format::kQ5_0)->Apply(k_quant_gemm_args);
BENCHMARK_TEMPLATE(BM_PrefillGemm, Linear::Format::kQ4_1)->Apply(k_quant_gemm_args);
BENCHMARK_TEMPLATE(BM_PrefillGemm, Linear::Format::kQ5_1)->Apply(k_quant_gemm_args);

// The activation quantizer alone (one thread, inputs in L1/L2): M rows of
// n_in floats into token tiles of `tile` tokens, per 32-input block, as a
// Linear's forward runs it before every quantized matmul. A batched decode
// step quantizes 8-16 rows four times per layer. Args: M, n_in, tile.
template <kernels::Isa kIsa>
void BM_QuantizeActivations(benchmark::State& state) {
  if (!kernels::isa_supported(kIsa)) {
    state.SkipWithError("ISA not supported here");
    return;
  }
  const kernels::internal::QuantizeFn fn =
      kIsa == kernels::Isa::kAvx512 ? kernels::internal::quantize_activations_avx512
      : kIsa == kernels::Isa::kAvx2 ? kernels::internal::quantize_activations_avx2
                                    : kernels::internal::quantize_activations_scalar;
  const auto m = static_cast<std::size_t>(state.range(0));
  const auto n_in = static_cast<std::size_t>(state.range(1));
  const auto tile = static_cast<std::size_t>(state.range(2));
  const std::size_t blocks = n_in / 32, tiles = (m + tile - 1) / tile;
  const std::size_t stride = (tile * n_in + 63) / 64 * 64;
  const std::vector<float> x = random_floats(m * n_in, 5);
  std::vector<std::int8_t> q(tiles * stride);
  std::vector<float> d(m * blocks);
  std::vector<std::int32_t> bias(m * blocks), low_sum(m * blocks);
  const kernels::internal::QuantizedActivations a{
      q.data(), d.data(), bias.data(), low_sum.data(), m, blocks, tile, stride, false};
  for (auto _ : state) {
    fn(x.data(), 0, m, kernels::internal::kQ4Bias, a);
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  state.counters["Mblocks"] = benchmark::Counter(static_cast<double>(m * blocks) / 1e6,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_TEMPLATE(BM_QuantizeActivations, kernels::Isa::kAvx512)
    ->ArgNames({"M", "n_in", "tile"})
    ->Args({1, 2048, 1})
    ->Args({16, 2048, 6})
    ->Args({16, 5632, 6})
    ->Iterations(4000);
BENCHMARK_TEMPLATE(BM_QuantizeActivations, kernels::Isa::kAvx2)
    ->ArgNames({"M", "n_in", "tile"})
    ->Args({16, 2048, 8})
    ->Iterations(4000);

}  // namespace
}  // namespace hearth::bench
