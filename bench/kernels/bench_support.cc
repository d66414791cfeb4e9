#include "bench_support.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "memory/streamed_buffer.h"

namespace hearth::bench {
namespace {

constexpr std::size_t kStreamBytes = std::size_t{2} << 30;  // 2 GiB: well past any LLC here

// One stream of 256-bit loads, with kPrefetch software prefetch a kilobyte
// ahead.
template <bool kPrefetch>
__attribute__((target("avx2"))) std::uint64_t read_avx2(const std::byte* p, std::size_t n) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  for (std::size_t i = 0; i + 128 <= n; i += 128) {
    if constexpr (kPrefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 1024), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 1024 + 64), _MM_HINT_T0);
    }
    acc0 = _mm256_xor_si256(acc0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    acc1 = _mm256_xor_si256(acc1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    acc2 = _mm256_xor_si256(acc2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    acc3 = _mm256_xor_si256(acc3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  acc0 = _mm256_xor_si256(_mm256_xor_si256(acc0, acc1), _mm256_xor_si256(acc2, acc3));
  return static_cast<std::uint64_t>(_mm256_extract_epi64(acc0, 0));
}

// kStreams interleaved streams (kStreams equal parts of the range read side
// by side): more misses in flight than one stream, which is what a kernel
// reading several weight rows at once achieves. The count matters beyond
// that: some machines read 4 parts (a power-of-two spacing) slower than one
// stream and 7 much faster (docs/performance.md), so both are tried.
template <int kStreams>
__attribute__((target("avx2"))) std::uint64_t read_avx2_streams(const std::byte* p, std::size_t n) {
  const std::size_t per = n / kStreams / 64 * 64;
  __m256i acc[kStreams];
  for (auto& a : acc) a = _mm256_setzero_si256();
  for (std::size_t i = 0; i < per; i += 64) {
    for (int s = 0; s < kStreams; ++s) {
      const auto* q = reinterpret_cast<const __m256i*>(p + s * per + i);
      acc[s] = _mm256_xor_si256(acc[s], _mm256_load_si256(q));
      acc[s] = _mm256_xor_si256(acc[s], _mm256_load_si256(q + 1));
    }
  }
  __m256i all = acc[0];
  for (int s = 1; s < kStreams; ++s) all = _mm256_xor_si256(all, acc[s]);
  return static_cast<std::uint64_t>(_mm256_extract_epi64(all, 0));
}

// 512-bit loads with software prefetch a kilobyte ahead: on some machines a
// single core streams faster this way than the hardware prefetcher alone allows.
__attribute__((target("avx512f"))) std::uint64_t read_avx512_prefetch(const std::byte* p,
                                                                      std::size_t n) {
  __m512i acc0 = _mm512_setzero_si512(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  for (std::size_t i = 0; i + 256 <= n; i += 256) {
    for (int l = 0; l < 256; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 1024 + l), _MM_HINT_T0);
    acc0 = _mm512_xor_si512(acc0, _mm512_load_si512(p + i));
    acc1 = _mm512_xor_si512(acc1, _mm512_load_si512(p + i + 64));
    acc2 = _mm512_xor_si512(acc2, _mm512_load_si512(p + i + 128));
    acc3 = _mm512_xor_si512(acc3, _mm512_load_si512(p + i + 192));
  }
  acc0 = _mm512_xor_si512(_mm512_xor_si512(acc0, acc1), _mm512_xor_si512(acc2, acc3));
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, acc0);
  return lanes[0];
}

// read_avx2_streams with 512-bit loads.
template <int kStreams>
__attribute__((target("avx512f"))) std::uint64_t read_avx512_streams(const std::byte* p,
                                                                     std::size_t n) {
  const std::size_t per = n / kStreams / 128 * 128;
  __m512i acc[kStreams];
  for (auto& a : acc) a = _mm512_setzero_si512();
  for (std::size_t i = 0; i < per; i += 128) {
    for (int s = 0; s < kStreams; ++s) {
      acc[s] = _mm512_xor_si512(acc[s], _mm512_load_si512(p + s * per + i));
      acc[s] = _mm512_xor_si512(acc[s], _mm512_load_si512(p + s * per + i + 64));
    }
  }
  __m512i all = acc[0];
  for (int s = 1; s < kStreams; ++s) all = _mm512_xor_si512(all, acc[s]);
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, all);
  return lanes[0];
}

std::uint64_t read_scalar(const std::byte* p, std::size_t n) {
  std::uint64_t acc = 0;
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    std::uint64_t v;
    std::memcpy(&v, p + i, 8);
    acc ^= v;
  }
  return acc;
}

// One read of [p, p + n) by plain read number `kind` (0..kReadKinds - 1).
constexpr int kReadKinds = 4;
std::uint64_t read_kind(int kind, const std::byte* p, std::size_t n) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx2) return read_scalar(p, n);
  switch (kind) {
    case 1:
      return avx512 ? read_avx512_prefetch(p, n) : read_avx2<true>(p, n);
    case 2:
      return avx512 ? read_avx512_streams<4>(p, n) : read_avx2_streams<4>(p, n);
    case 3:
      return avx512 ? read_avx512_streams<7>(p, n) : read_avx2_streams<7>(p, n);
    default:
      return read_avx2<false>(p, n);
  }
}

std::mutex mu;
std::map<std::size_t, double> measured;  // threads -> GB/s
std::map<std::size_t, std::unique_ptr<kernels::ThreadPool>> pools;
struct Line {
  std::string what, setting, figures;
};
std::vector<Line> lines;

// The read buffer, allocated and faulted in once (a static's thread-safe
// initialization): a 2 GiB memset per measurement would cost more than the
// reads.
std::byte* stream_buffer() {
  static std::byte* buf = [] {
    // The same kind of buffer as packed weights (huge pages where available).
    auto* b = static_cast<std::byte*>(allocate_streamed(kStreamBytes));
    if (b == nullptr) std::abort();
    std::memset(b, 1, kStreamBytes);  // fault every page in before timing
    return b;
  }();
  return buf;
}

// The best of `reads` reads of the buffer's first `bytes` (the whole buffer
// by default: from DRAM; a few MB stay in the last-level cache between reads).
double measure(std::size_t threads, int reads, std::size_t bytes = kStreamBytes) {
  std::byte* buf = stream_buffer();
  kernels::ThreadPool& pool = bench_pool(threads);
  // The best of several plain streaming reads (read_kind: one stream, one
  // stream with software prefetch, 4 and 7 interleaved streams): the most a
  // simple read loop reaches, which kernels are held to.
  double best = 0;
  std::uint64_t sink = 0;
  for (int rep = 0; rep < reads; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::uint64_t> partial(threads);
    pool.parallel_chunks(
        bytes / 4096, threads, [&](std::size_t chunk, std::size_t b, std::size_t e) {
          partial[chunk] = read_kind(rep % kReadKinds, buf + b * 4096, (e - b) * 4096);
        });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (auto v : partial) sink ^= v;
    best = std::max(best, static_cast<double>(bytes / 4096 * 4096) / s / 1e9);
  }
  benchmark::DoNotOptimize(sink);
  return best;
}

}  // namespace

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

kernels::ThreadPool& bench_pool(std::size_t threads) {
  std::lock_guard<std::mutex> lock(mu);
  auto& p = pools[threads];
  if (!p) p = std::make_unique<kernels::ThreadPool>(threads);
  return *p;
}

double stream_read_gbps(std::size_t threads) {
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = measured.find(threads);
    if (it != measured.end()) return it->second;
  }
  const double gbps = measure(threads, 8);
  std::lock_guard<std::mutex> lock(mu);
  measured[threads] = gbps;
  std::printf("streaming read bandwidth, %zu thread%s: %.1f GB/s\n", threads,
              threads == 1 ? "" : "s", gbps);
  return gbps;
}

double stream_read_gbps_now(std::size_t threads, int reads) { return measure(threads, reads); }

double resident_read_gbps(std::size_t bytes, std::size_t threads, int reads) {
  measure(threads, 1, bytes);  // brings the bytes into the cache
  return measure(threads, reads, bytes);
}

void set_bandwidth_counters(benchmark::State& state, double bytes_per_iteration,
                            std::size_t threads) {
  const double bw = stream_read_gbps(threads) * 1e9;
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["of_bw"] =
      benchmark::Counter(bytes_per_iteration / bw, benchmark::Counter::kIsIterationInvariantRate);
}

void summary(const std::string& what, const std::string& setting, const std::string& figures) {
  std::lock_guard<std::mutex> lock(mu);
  // Google Benchmark runs a function several times while it settles the
  // iteration count: the last run's figures replace the earlier ones.
  for (Line& l : lines) {
    if (l.what == what && l.setting == setting) {
      l.figures = figures;
      return;
    }
  }
  lines.push_back({what, setting, figures});
}

void print_summary() {
  std::lock_guard<std::mutex> lock(mu);
  std::printf("\n=== summary (one run) ===\n");
  for (const auto& [threads, gbps] : measured)
    std::printf("%-44s %-12s %.1f GB/s\n", "streaming read bandwidth",
                (std::to_string(threads) + " threads").c_str(), gbps);
  for (const Line& l : lines)
    std::printf("%-44s %-12s %s\n", l.what.c_str(), l.setting.c_str(), l.figures.c_str());
}

namespace {

// Removes every `flag` + VALUE argument from argv (before Google Benchmark
// reads it) and returns the last VALUE, or nullopt without one.
std::optional<std::string> take_last_flag_value(int& argc, char** argv, std::string_view flag) {
  std::optional<std::string> last;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with(flag)) {
      last = std::string(arg.substr(flag.size()));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  return last;
}

}  // namespace

std::unique_ptr<kernels::ScopedIsa> take_isa_flag(int& argc, char** argv) {
  const std::optional<std::string> name = take_last_flag_value(argc, argv, "--isa=");
  if (!name) return nullptr;
  const std::vector<kernels::Isa> levels = kernels::supported_isas();
  const auto isa = std::find_if(levels.begin(), levels.end(),
                                [&](kernels::Isa l) { return *name == kernels::isa_name(l); });
  if (isa == levels.end()) {
    std::string choices;
    for (kernels::Isa l : levels)
      choices += std::string(choices.empty() ? "" : ", ") + kernels::isa_name(l);
    std::fprintf(stderr, "--isa=%s: not a level this machine runs; one of %s\n", name->c_str(),
                 choices.c_str());
    std::exit(2);
  }
  return std::make_unique<kernels::ScopedIsa>(*isa);
}

std::unique_ptr<kernels::ScopedDecodePrefetch> take_decode_prefetch_flag(int& argc, char** argv) {
  const std::optional<std::string> value = take_last_flag_value(argc, argv, "--decode-prefetch=");
  if (!value) return nullptr;
  if (*value != "on" && *value != "off") {
    std::fprintf(stderr, "--decode-prefetch=%s: expected on or off\n", value->c_str());
    std::exit(2);
  }
  return std::make_unique<kernels::ScopedDecodePrefetch>(*value == "on");
}

}  // namespace hearth::bench
