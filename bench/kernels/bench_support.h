// Shared by the kernel benchmarks: the machine's streaming read bandwidth,
// measured once in this run, and a summary table printed after Google
// Benchmark's own output so the ratios of one run sit side by side.
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"

namespace hearth::bench {

// Streaming read bandwidth in GB/s (1e9 bytes/s) over a buffer far larger
// than the last-level cache, with `threads` threads. Measured on first call
// for each thread count and remembered.
double stream_read_gbps(std::size_t threads);

// The same measurement made now and not remembered: the best of `reads`
// reads (each kind of read in turn). Whole-model benchmarks take one next to
// each timed iteration, so a ratio compares two figures of the same moment
// on a machine whose bandwidth drifts with its neighbours' load.
double stream_read_gbps_now(std::size_t threads, int reads);

// The read bandwidth of `bytes` that stay in the last-level cache between
// reads (a few MB: a level the DRAM of the machine running this may not
// reach), best of `reads` reads after one that brings them in.
double resident_read_gbps(std::size_t bytes, std::size_t threads, int reads);

// n draws of N(0, 1) from std::mt19937(seed): the same inputs every run.
std::vector<float> random_floats(std::size_t n, std::uint32_t seed);

// A pool of `threads` threads for benchmarks (kept for the whole run).
kernels::ThreadPool& bench_pool(std::size_t threads);

// Sets counters "GB/s" and "of_bw" (fraction of stream_read_gbps(threads)) for
// a benchmark that reads `bytes_per_iteration` bytes each iteration. Call after
// the timing loop.
void set_bandwidth_counters(benchmark::State& state, double bytes_per_iteration,
                            std::size_t threads);

// Adds a line to the summary printed at exit, e.g.
//   summary("decode GEMV q8_0 4096x4096", "2 threads", "23.1 GB/s = 84% of bandwidth").
void summary(const std::string& what, const std::string& setting, const std::string& figures);

// Wall time of a benchmark's whole timing loop, for summary lines:
//   Stopwatch sw; for (auto _ : state) {...}  double s = sw.seconds() / state.iterations();
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Prints the summary lines (called by main after the benchmarks ran).
void print_summary();

// Takes `--isa=NAME` (scalar, avx2, avx512, avx512vnni) out of argv, before
// Google Benchmark reads it, and forces the kernels onto that level for the
// whole run (to measure a lower level's path on a machine that has a higher
// one). nullptr without the flag; exits with status 2 and a message naming
// the flag and this machine's levels for any other name.
std::unique_ptr<kernels::ScopedIsa> take_isa_flag(int& argc, char** argv);

// Takes `--decode-prefetch=on|off` out of argv the same way and forces
// kernels::decode_prefetch() for the whole run (to compare both settings on
// one machine); nullptr without the flag, exit status 2 for another value.
std::unique_ptr<kernels::ScopedDecodePrefetch> take_decode_prefetch_flag(int& argc, char** argv);

}  // namespace hearth::bench
