// bench_kernels: every kernel benchmark in one run, so figures are ratios of
// the same machine state. Run: build/release/bench/bench_kernels [--isa=avx2]
// [--decode-prefetch=on|off]
// [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdio>

#include "bench_support.h"
#include "kernels/cpu_features.h"

int main(int argc, char** argv) {
  const auto forced_isa = hearth::bench::take_isa_flag(argc, argv);
  const auto forced_prefetch = hearth::bench::take_decode_prefetch_flag(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const auto& f = hearth::kernels::cpu_features();
  std::printf("kernel ISA: %s; decode prefetch: %s; physical cores: %d\n",
              hearth::kernels::isa_name(hearth::kernels::active_isa()),
              hearth::kernels::decode_prefetch() ? "on" : "off", f.physical_cores);
  hearth::bench::stream_read_gbps(1);
  hearth::bench::stream_read_gbps(2);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  hearth::bench::print_summary();
  return 0;
}
