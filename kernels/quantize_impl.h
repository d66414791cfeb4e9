// Private to kernels/: the quantization family's parameter rules and per-ISA
// row kernels behind kernels/quantize.h. Not part of the API.
//
// quantize.cc holds the scalar reference and the dispatch; quantize_avx2.cc
// and quantize_avx512.cc compile the one set of SIMD loops
// (kernels/quantize_simd_body.h) over their own primitives. Linear's activation
// quantizers (quantize_activations_*, declared in kernels/linear_impl.h) live
// in the same files and use the same rules and rounding.
//
// This header is included by files compiled with AVX2 / AVX-512 flags, so it
// declares only: no inline functions, no templates (see kernels/CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/quantize.h"

namespace hearth::kernels::internal {

// Everything a row's codes are computed from (the rules in kernels/quantize.h):
//   q = round_half_even(clamp(x * inv, lo, hi)) + zero_point,
// lo = qlo - zero_point and hi = qhi - zero_point as floats.
struct RowParams {
  float scale = 0.0f;
  float inv = 0.0f;
  float lo = 0.0f;
  float hi = 0.0f;
  std::int32_t zero_point = 0;
};

// The two rules, each one out-of-line function compiled for the baseline ISA,
// so no path can round the parameters differently. asymmetric_params takes
// the row's range widened to include 0 (lo <= 0 <= hi).
RowParams asymmetric_params(float lo, float hi);
RowParams symmetric_params(float amax);

// A row's range widened to include 0: lo = min(0, min x), hi = max(0, max x).
struct Range {
  float lo = 0.0f;
  float hi = 0.0f;
};

// One ISA's row kernels (the dispatch idiom of kernels/cpu_features.h). Every
// ISA's version computes exactly what the scalar one does.
struct QuantizeKernels {
  // The range of x[0..n) (n >= 0) widened to include 0. Exact, so independent
  // of the order of reduction (up to the sign of a zero, which no rule sees).
  Range (*range)(const float* x, std::size_t n);
  // q[i] = round_half_even(clamp(x[i] * p.inv, p.lo, p.hi)) + p.zero_point
  // for i in [0, n).
  void (*quantize_row)(const float* x, std::size_t n, const RowParams& p, std::int8_t* q);
};
extern const QuantizeKernels kQuantizeScalar;
extern const QuantizeKernels kQuantizeAvx2;
extern const QuantizeKernels kQuantizeAvx512;

}  // namespace hearth::kernels::internal
