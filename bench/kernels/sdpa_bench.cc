// Decode attention (kernels/sdpa.h): one new token, 32 query heads on 8 KV
// heads, head_dim 128 (a Llama-3-8B layer), over contexts of 128, 1024 and
// 4096 positions, with the int8 and the float KV cache, on 1 and 2 threads.
//
// Decode attention is a stream over the layer's KV cache, so the figure of
// merit is the KV bytes read per second (int8: K and V bytes plus their
// per-row scales and zero points; float: K and V) as a fraction of the
// streaming bandwidth.
// Each call reads another layer's cache, rotating over copies that total more
// than 1 GiB, so every call reads from DRAM as it would in a real model.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_support.h"
#include "kernels/kv_cache.h"
#include "kernels/sdpa.h"
#include "memory/caching_allocator.h"

namespace hearth::bench {
namespace {

constexpr std::size_t kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr std::size_t kSdpaRotateBytes = std::size_t{9} << 27;  // 1.125 GiB

// The caches of one (context, type), kept while consecutive benchmarks use them.
struct Caches {
  std::string key;
  // The copy the next call reads; continues across runs. Copy 0 is the source
  // the others were copied from, so it starts in cache: begin at 1.
  std::size_t next = 1;
  std::byte* memory = nullptr;
  std::vector<kernels::QuantizedKvView> q8;
  std::vector<kernels::FloatKvView> f32;
  ~Caches() { std::free(memory); }
};

Caches& caches(std::size_t ctx, bool quantized) {
  static Caches c;
  const std::string want = std::to_string(ctx) + (quantized ? "q8" : "f32");
  if (c.key == want) return c;
  std::free(c.memory);
  c.memory = nullptr;
  c.q8.clear();
  c.f32.clear();
  c.key = want;
  c.next = 1;
  const kernels::KvLayout layout{kKvHeads, kHeadDim, ctx};
  const std::size_t layer =
      quantized ? kernels::quantized_kv_bytes(layout) : kernels::float_kv_bytes(layout);
  const std::size_t copies = (kSdpaRotateBytes + layer - 1) / layer;
  c.memory = static_cast<std::byte*>(std::aligned_alloc(64, copies * layer));
  if (c.memory == nullptr) std::abort();
  // Fill one layer through kv_append, then copy it (also faults every page in).
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> rows(ctx * kKvHeads * kHeadDim);
  for (float& x : rows) x = u(rng);
  absl::Status s = quantized ? kernels::kv_append(kernels::quantized_kv_view(layout, c.memory), 0,
                                                  rows.data(), rows.data(), ctx)
                             : kernels::kv_append(kernels::float_kv_view(layout, c.memory), 0,
                                                  rows.data(), rows.data(), ctx);
  if (!s.ok()) std::abort();
  for (std::size_t i = 0; i < copies; ++i) {
    std::byte* base = c.memory + i * layer;
    if (i > 0) std::memcpy(base, c.memory, layer);
    if (quantized)
      c.q8.push_back(kernels::quantized_kv_view(layout, base));
    else
      c.f32.push_back(kernels::float_kv_view(layout, base));
  }
  return c;
}

// KV bytes one decode call reads.
double kv_bytes_read(std::size_t ctx, bool quantized) {
  const double rows = static_cast<double>(kKvHeads * ctx);
  // int8 row: head_dim codes, a float scale and an int8 zero point.
  return quantized ? 2 * rows * (kHeadDim + sizeof(float) + 1)
                   : 2 * rows * kHeadDim * sizeof(float);
}

// Args: context, threads.
template <bool kQuantized>
void BM_DecodeSdpa(benchmark::State& state) {
  const auto ctx = static_cast<std::size_t>(state.range(0));
  const auto threads = static_cast<std::size_t>(state.range(1));
  Caches& c = caches(ctx, kQuantized);
  const std::size_t copies = kQuantized ? c.q8.size() : c.f32.size();
  kernels::ThreadPool& pool = bench_pool(threads);
  std::vector<float> q(kHeads * kHeadDim), out(q.size());
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : q) x = u(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  CachingAllocator scratch;
  const auto call = [&](std::size_t i) {
    return kQuantized ? kernels::sdpa(q.data(), 1, ctx - 1, kHeads, c.q8[i], scale, out.data(),
                                      scratch, &pool)
                      : kernels::sdpa(q.data(), 1, ctx - 1, kHeads, c.f32[i], scale, out.data(),
                                      scratch, &pool);
  };
  // Warm up on the copy read longest ago, so the timed calls that follow
  // (from c.next on) do not find it in cache.
  if (!call((c.next + copies - 1) % copies).ok()) std::abort();
  scratch.reset();
  std::size_t i = c.next;
  Stopwatch sw;
  for (auto _ : state) {
    const absl::Status s = call(i);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    scratch.reset();
    if (++i == copies) i = 0;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  c.next = i;
  const double seconds = sw.seconds() / static_cast<double>(state.iterations());
  const double bytes = kv_bytes_read(ctx, kQuantized);
  set_bandwidth_counters(state, bytes, threads);
  const double gbps = bytes / seconds / 1e9;
  char figures[128];
  std::snprintf(figures, sizeof figures, "%.1f us, %.1f GB/s = %.0f%% of bw", seconds * 1e6, gbps,
                100 * gbps / stream_read_gbps(threads));
  summary(std::string("decode SDPA ") + (kQuantized ? "int8" : "f32") +
              " KV 32/8 heads hd128 ctx " + std::to_string(ctx),
          std::to_string(threads) + (threads == 1 ? " thread" : " threads"), figures);
}

void decode_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"ctx", "threads"});
  for (int ctx : {128, 1024, 4096})
    for (int threads : {1, 2}) b->Args({ctx, threads});
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK_TEMPLATE(BM_DecodeSdpa, true)->Apply(decode_args);
BENCHMARK_TEMPLATE(BM_DecodeSdpa, false)->Apply(decode_args);

}  // namespace
}  // namespace hearth::bench
