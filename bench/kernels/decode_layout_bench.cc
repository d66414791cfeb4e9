// What the int4 decode tile's order of reads costs by itself, before any
// arithmetic. The tile reads 4 row groups at a time; in today's packed
// layout (group after group: a group's blocks, then its scales) that is 8
// streams per thread, 4 of weights and 4 of scales, a group's stride (18 KiB
// for 2048 inputs) apart. The same bytes stored block-interleaved (a tile's
// 4 groups' blocks side by side, then their scales) would be one stream.
// Each order reads a Q4_0-shaped buffer of the TinyLlama FFN's geometry
// (16-row groups of 2048 inputs: 256-byte blocks, 32 bytes of scales per
// block), far larger than the last-level cache, touching every byte once and
// computing nothing; "+ prefetch" also prefetches 8 blocks ahead into L1 as
// the decode tile does. If an order reads slower than the streaming read, no
// faster arithmetic in a kernel reading in that order can make up for it
// (docs/performance.md).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench_support.h"
#include "memory/streamed_buffer.h"

namespace hearth::bench {
namespace {

constexpr std::size_t kBlocks = 2048 / 32;  // blocks per row of a group
constexpr std::size_t kBlockBytes = 256;    // 16 rows x 32 int4
constexpr std::size_t kScaleBytes = 32;     // 16 rows x fp16
constexpr std::size_t kGroupBytes = kBlocks * (kBlockBytes + kScaleBytes);
constexpr std::size_t kTileGroups = 4;  // the decode tile's row groups
constexpr std::size_t kTileBytes = kTileGroups * kGroupBytes;
constexpr std::size_t kTiles = (768u << 20) / kTileBytes;

enum class Order { kRowGroups, kRowGroupsPrefetch, kOneStream };
constexpr std::size_t kPrefetchBlocks = 8;  // kQ4DecodePrefetchBlocks of the VNNI tile

const std::byte* layout_buffer() {
  static const std::byte* buf = [] {
    auto* b = static_cast<std::byte*>(allocate_streamed(kTiles * kTileBytes));
    if (b == nullptr) std::abort();
    for (std::size_t i = 0; i < kTiles * kTileBytes; i += 64) b[i] = std::byte{1};  // fault in
    return b;
  }();
  return buf;
}

__attribute__((target("avx2"))) inline __m256i touch(__m256i acc, const std::byte* p,
                                                     std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; i += 32)
    acc = _mm256_xor_si256(acc, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
  return acc;
}

// Reads tiles [t0, t1) in the decode tile's order; returns a checksum.
template <Order kOrder>
__attribute__((target("avx2"))) std::uint64_t read_tiles(std::size_t t0, std::size_t t1) {
  __m256i acc[kTileGroups] = {};
  for (std::size_t t = t0; t < t1; ++t) {
    const std::byte* tile = layout_buffer() + t * kTileBytes;
    for (std::size_t b = 0; b < kBlocks; ++b) {
      for (std::size_t h = 0; h < kTileGroups; ++h) {
        const std::byte *w, *s;
        if constexpr (kOrder != Order::kOneStream) {
          w = tile + h * kGroupBytes + b * kBlockBytes;
          s = tile + h * kGroupBytes + kBlocks * kBlockBytes + b * kScaleBytes;
          if constexpr (kOrder == Order::kRowGroupsPrefetch)
            for (std::size_t l = 0; l < kBlockBytes; l += 64)
              _mm_prefetch(reinterpret_cast<const char*>(w + kPrefetchBlocks * kBlockBytes + l),
                           _MM_HINT_T0);
        } else {
          const std::byte* step = tile + b * kTileGroups * (kBlockBytes + kScaleBytes);
          w = step + h * kBlockBytes;
          s = step + kTileGroups * kBlockBytes + h * kScaleBytes;
        }
        acc[h] = touch(touch(acc[h], w, kBlockBytes), s, kScaleBytes);
      }
    }
  }
  for (std::size_t h = 1; h < kTileGroups; ++h) acc[0] = _mm256_xor_si256(acc[0], acc[h]);
  return static_cast<std::uint64_t>(_mm256_extract_epi64(acc[0], 0));
}

// Arg: threads.
template <Order kOrder>
void BM_DecodeReadOrder(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx2")) {
    state.SkipWithError("needs AVX2");
    return;
  }
  const auto threads = static_cast<std::size_t>(state.range(0));
  kernels::ThreadPool& pool = bench_pool(threads);
  layout_buffer();
  Stopwatch sw;
  for (auto _ : state) {
    pool.parallel_for(kTiles, (kTiles + threads - 1) / threads, [](std::size_t t0, std::size_t t1) {
      benchmark::DoNotOptimize(read_tiles<kOrder>(t0, t1));
    });
  }
  const double bytes = static_cast<double>(kTiles * kTileBytes);
  const double gbps = bytes * static_cast<double>(state.iterations()) / sw.seconds() / 1e9;
  set_bandwidth_counters(state, bytes, threads);
  char figures[64];
  std::snprintf(figures, sizeof figures, "%.1f GB/s = %.0f%% of bw", gbps,
                100 * gbps / stream_read_gbps(threads));
  const char* order = kOrder == Order::kRowGroups           ? "4 row groups apart"
                      : kOrder == Order::kRowGroupsPrefetch ? "4 row groups + prefetch"
                                                            : "one stream";
  summary(std::string("decode read order, int4, ") + order,
          std::to_string(threads) + (threads == 1 ? " thread" : " threads"), figures);
}

BENCHMARK_TEMPLATE(BM_DecodeReadOrder, Order::kRowGroups)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Iterations(8)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_DecodeReadOrder, Order::kRowGroupsPrefetch)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Iterations(8)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_DecodeReadOrder, Order::kOneStream)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Iterations(8)
    ->UseRealTime();

}  // namespace
}  // namespace hearth::bench
