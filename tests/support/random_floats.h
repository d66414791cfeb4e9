// Deterministic random inputs for tests: fixed seeds, so every run (and
// every machine) draws the same values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace hearth::testing {

// n draws of N(0, stddev) from std::mt19937(seed), in order.
inline std::vector<float> random_normal_floats(std::size_t n, std::uint32_t seed,
                                               float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace hearth::testing
