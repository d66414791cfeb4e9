// Latency percentiles for the hearth client's bench (header-only, so unit
// tests can use it without linking the gRPC client library).
//
// Method: nearest-rank on the sorted samples. The p-th percentile (0 < p <= 100)
// of n samples is the smallest sample such that at least p% of the samples are
// less than or equal to it: sorted[ceil(p / 100 * n) - 1]. It is always one of
// the measured values (never interpolated). p <= 0 gives the minimum; no
// samples give 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace hearth::client {

// `sorted` must be in ascending order.
inline double nearest_rank(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  if (p <= 0) return sorted.front();
  if (p >= 100) return sorted.back();
  const double n = static_cast<double>(sorted.size());
  // The small epsilon keeps e.g. 0.95 * 20 = 19.000000000000004 at rank 19.
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * n - 1e-9));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

struct Percentiles {
  std::size_t count = 0;
  double p50 = 0, p95 = 0, p99 = 0;
};

// Sorts a copy of `samples` and takes p50, p95 and p99 by nearest rank.
inline Percentiles percentiles(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  Percentiles out;
  out.count = samples.size();
  out.p50 = nearest_rank(samples, 50);
  out.p95 = nearest_rank(samples, 95);
  out.p99 = nearest_rank(samples, 99);
  return out;
}

}  // namespace hearth::client
