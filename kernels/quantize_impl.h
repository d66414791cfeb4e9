// Private to kernels/quantize*.cc: the per-ISA row kernels behind
// kernels/quantize.h. Not part of the API.
//
// Each kernel works on one contiguous row (or a few rows sharing per-channel
// parameters) on the calling thread; threading and parameter choice live in
// quantize.cc. Every ISA's version computes exactly what the scalar one does
// (see the rounding contract in quantize.h), so results are bit-identical.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hearth::kernels::internal {

struct MinMax {
  float min, max;
};

// Per-row quantization constants, derived once from (scale, zero_point):
//   inv = 1.0f / scale, lo = qmin - zp, hi = qmax - zp (both as floats).
struct RowParams {
  float inv, lo, hi;
  std::int32_t zp;
};

// Min and max of x[0..n), n >= 1, x finite. Exact, so independent of the order
// of reduction (the only possible difference, the sign of a zero, does not
// change the parameters chosen from it: the range is extended to include 0).
// The SIMD versions prefetch a kilobyte ahead of their reads, which can run
// up to a kilobyte past x + n (harmless: prefetches never fault).
MinMax minmax_scalar(const float* x, std::size_t n);
MinMax minmax_avx2(const float* x, std::size_t n);
MinMax minmax_avx512(const float* x, std::size_t n);

// q[i] = clamp(x[i] * p.inv, p.lo, p.hi) rounded half to even, + p.zp.
// `next`, when not nullptr, is where the caller reads next (the following
// row): the SIMD kernels prefetch next[0..n) while they work on an x that is
// already in L1, so the memory system never idles between rows. With nullptr
// they prefetch ahead within x instead. Prefetches never fault, so `next` may
// point past the end of a buffer.
void quantize_row_scalar(const float* x, std::size_t n, RowParams p, std::int8_t* q,
                         const float* next);
void quantize_row_avx2(const float* x, std::size_t n, RowParams p, std::int8_t* q,
                       const float* next);
void quantize_row_avx512(const float* x, std::size_t n, RowParams p, std::int8_t* q,
                         const float* next);

// Per channel over `rows` rows of `channels` values (row-major, dense):
// x[r][c] uses scales[c], zero_points[c]; codes clamped to [-128, 127].
void quantize_channels_scalar(const float* x, std::size_t rows, std::size_t channels,
                              const float* scales, const std::int32_t* zero_points, std::int8_t* q);
void quantize_channels_avx2(const float* x, std::size_t rows, std::size_t channels,
                            const float* scales, const std::int32_t* zero_points, std::int8_t* q);
void quantize_channels_avx512(const float* x, std::size_t rows, std::size_t channels,
                              const float* scales, const std::int32_t* zero_points, std::int8_t* q);

// y[i] = float(q[i] - zp) * scale.
void dequantize_row_scalar(const std::int8_t* q, std::size_t n, float scale, std::int32_t zp,
                           float* y);
void dequantize_row_avx2(const std::int8_t* q, std::size_t n, float scale, std::int32_t zp,
                         float* y);
void dequantize_row_avx512(const std::int8_t* q, std::size_t n, float scale, std::int32_t zp,
                           float* y);

// y[r][c] = float(q[r][c] - zero_points[c]) * scales[c].
void dequantize_channels_scalar(const std::int8_t* q, std::size_t rows, std::size_t channels,
                                const float* scales, const std::int32_t* zero_points, float* y);
void dequantize_channels_avx2(const std::int8_t* q, std::size_t rows, std::size_t channels,
                              const float* scales, const std::int32_t* zero_points, float* y);
void dequantize_channels_avx512(const std::int8_t* q, std::size_t rows, std::size_t channels,
                                const float* scales, const std::int32_t* zero_points, float* y);

// One ISA's table of the above (the dispatch idiom of kernels/cpu_features.h).
struct QuantizeKernels {
  MinMax (*minmax)(const float*, std::size_t);
  void (*quantize_row)(const float*, std::size_t, RowParams, std::int8_t*, const float*);
  void (*quantize_channels)(const float*, std::size_t, std::size_t, const float*,
                            const std::int32_t*, std::int8_t*);
  void (*dequantize_row)(const std::int8_t*, std::size_t, float, std::int32_t, float*);
  void (*dequantize_channels)(const std::int8_t*, std::size_t, std::size_t, const float*,
                              const std::int32_t*, float*);
};
extern const QuantizeKernels kQuantizeScalar;
extern const QuantizeKernels kQuantizeAvx2;
extern const QuantizeKernels kQuantizeAvx512;

}  // namespace hearth::kernels::internal
