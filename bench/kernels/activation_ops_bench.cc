// Activation operations (kernels/activation_ops.h, kernels/embedding.h) at llama-7B
// decode sizes, one thread, on every ISA path the machine has. Inputs fit in
// cache except the embedding table (32000 x 4096 Q8_0, 139 MB, random rows).
// Summary: ns/call on each path, with the speed-up over the scalar path.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench_support.h"
#include "kernels/activation_ops.h"
#include "kernels/cpu_features.h"
#include "kernels/dtype.h"
#include "kernels/embedding.h"
#include "kernels/gguf_blocks.h"

namespace hearth::bench {
namespace {

using kernels::Isa;

std::set<std::string> reported;           // what + isa already in the summary
std::map<std::string, double> scalar_ns;  // what -> the scalar path's ns/call

// Times `once` for the summary (best of 3 rounds of ~2 ms) the first time a
// setting runs: Google Benchmark calls the function several times per setting.
template <typename F>
void report(benchmark::State& state, const std::string& what, Isa isa, F&& once) {
  if (!reported.insert(what + kernels::isa_name(isa)).second) return;
  Stopwatch probe;
  for (int i = 0; i < 16; ++i) once();
  const double est = probe.seconds() / 16;
  const std::size_t calls = est > 0 ? static_cast<std::size_t>(2e-3 / est) + 16 : 1000;
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    Stopwatch sw;
    for (std::size_t i = 0; i < calls; ++i) once();
    const double s = sw.seconds() / static_cast<double>(calls);
    best = s < best ? s : best;
  }
  const double ns = best * 1e9;
  if (isa == Isa::kScalar) scalar_ns[what] = ns;
  char figures[128];
  const auto it = scalar_ns.find(what);
  if (isa != Isa::kScalar && it != scalar_ns.end()) {
    std::snprintf(figures, sizeof figures, "%.0f ns/call (%.1fx scalar)", ns, it->second / ns);
  } else {
    std::snprintf(figures, sizeof figures, "%.0f ns/call", ns);
  }
  summary(what, std::string("1 thread ") + kernels::isa_name(isa), figures);
  state.counters["ns_per_call"] = ns;
}

Isa isa_arg(const benchmark::State& state) { return static_cast<Isa>(state.range(0)); }

void BM_RmsNorm4096(benchmark::State& state) {
  const Isa isa = isa_arg(state);
  kernels::ScopedIsa forced(isa);
  const std::size_t dim = 4096;
  const std::vector<float> x = random_floats(dim, 1), w = random_floats(dim, 2);
  std::vector<float> y(dim);
  auto once = [&] {
    kernels::rms_norm(x.data(), w.data(), 1, dim, 1e-5f, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  };
  for (auto _ : state) once();
  report(state, "rms_norm 4096", isa, once);
}

void BM_Swiglu11008(benchmark::State& state) {
  const Isa isa = isa_arg(state);
  kernels::ScopedIsa forced(isa);
  const std::size_t n = 11008;
  const std::vector<float> g = random_floats(n, 3), u = random_floats(n, 4);
  std::vector<float> out(n);
  auto once = [&] {
    kernels::swiglu(g.data(), u.data(), n, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  };
  for (auto _ : state) once();
  report(state, "swiglu 11008", isa, once);
}

// 32 heads' attention rows over a 4096-token context. The input is restored
// each call (a softmax of a softmax would be a different, flatter input).
void BM_Softmax32x4096(benchmark::State& state) {
  const Isa isa = isa_arg(state);
  kernels::ScopedIsa forced(isa);
  const std::size_t rows = 32, n = 4096;
  const std::vector<float> src = random_floats(rows * n, 5);
  std::vector<float> x(rows * n);
  auto once = [&] {
    std::copy(src.begin(), src.end(), x.begin());
    kernels::softmax(x.data(), rows, n);
    benchmark::DoNotOptimize(x.data());
    benchmark::ClobberMemory();
  };
  for (auto _ : state) once();
  report(state, "softmax 32x4096 (incl. 512 KB copy)", isa, once);
}

// One token, 32 heads x 128 (q of llama-7B), at a far position.
void BM_Rope32x128(benchmark::State& state) {
  const Isa isa = isa_arg(state);
  const auto style = static_cast<kernels::RopeStyle>(state.range(1));
  kernels::ScopedIsa forced(isa);
  std::vector<float> x = random_floats(32 * 128, 6);
  const kernels::RopeConfig cfg{style, 128};
  std::size_t pos = 1000;
  auto once = [&] {
    kernels::rope(x.data(), 1, 32, 128, pos, cfg);
    pos = pos == 4000 ? 1000 : pos + 1;
    benchmark::DoNotOptimize(x.data());
    benchmark::ClobberMemory();
  };
  for (auto _ : state) once();
  report(state,
         std::string("rope 32x128 ") + (style == kernels::RopeStyle::kNormal ? "normal" : "neox"),
         isa, once);
}

// One token's row of a 32000 x 4096 Q8_0 table (139 MB), walking all rows in a
// random order.
void BM_EmbeddingQ8_0(benchmark::State& state) {
  const Isa isa = isa_arg(state);
  kernels::ScopedIsa forced(isa);
  const std::size_t vocab = 32000, dim = 4096;
  static std::vector<kernels::BlockQ8_0> table = [&] {
    std::vector<kernels::BlockQ8_0> t(vocab * dim / 32);
    const std::vector<float> row = random_floats(dim, 7);
    for (std::size_t r = 0; r < vocab; ++r)
      kernels::quantize_row_q8_0(row.data(), t.data() + r * dim / 32, dim);
    return t;
  }();
  // Every row once per cycle, in random order.
  std::vector<std::int32_t> ids(vocab);
  for (std::size_t i = 0; i < vocab; ++i) ids[i] = static_cast<std::int32_t>(i);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(8));
  std::vector<float> out(dim);
  std::size_t k = 0;
  auto once = [&] {
    const absl::Status s = kernels::embedding_lookup(table.data(), kernels::DType::kQ8_0, vocab,
                                                     dim, &ids[k], 1, out.data());
    benchmark::DoNotOptimize(s.ok());
    k = (k + 1) % ids.size();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  };
  for (auto _ : state) once();
  set_bandwidth_counters(state, static_cast<double>(kernels::row_bytes(kernels::DType::kQ8_0, dim)),
                         1);
  report(state, "embedding Q8_0 4096 (1 of 32000 rows)", isa, once);
}

void isas(benchmark::internal::Benchmark* b) {
  b->ArgNames({"isa"});
  for (Isa isa : kernels::supported_isas()) b->Arg(static_cast<int>(isa));
}

void isas_and_styles(benchmark::internal::Benchmark* b) {
  b->ArgNames({"isa", "style"});
  for (int style : {0, 1})
    for (Isa isa : kernels::supported_isas()) b->Args({static_cast<int>(isa), style});
}

BENCHMARK(BM_RmsNorm4096)->Apply(isas);
BENCHMARK(BM_Swiglu11008)->Apply(isas);
BENCHMARK(BM_Softmax32x4096)->Apply(isas);
BENCHMARK(BM_Rope32x128)->Apply(isas_and_styles);
BENCHMARK(BM_EmbeddingQ8_0)->Apply(isas);

}  // namespace
}  // namespace hearth::bench
