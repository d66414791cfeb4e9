// Dynamic int8 quantization of float activations (and its inverse).
//
// An int8 code q stands for the real value
//
//   x ~= scale * (q - zero_point)
//
// The parameters (scale, zero_point) are chosen at run time from the data:
// per tensor (one pair for everything), per token (one pair per row of a
// [tokens x dim] activation matrix, the usual choice for the input of an int8
// GEMM) or per channel (one pair per column, the layout of weight-style
// quantization). Layouts are dense row-major: row r of a [rows x cols] matrix
// starts at element r * cols. All outputs are caller-provided; no function here
// allocates memory or touches the heap, so none takes a scratch allocator.
//
// Rounding, identical on every path (scalar reference, AVX2, AVX-512), so all
// paths give bit-identical codes:
//
//   inv = 1.0f / scale                                  (float division)
//   v   = x * inv                                       (one float product)
//   v   = min(max(v, qmin - zp), qmax - zp)             (clamp before rounding)
//   q   = round_half_to_even(v) + zp
//
// Multiplying by the reciprocal (as ExecuTorch's and fbgemm's quantize do)
// rather than dividing keeps the hot loop to one multiply; computing inv once
// per scale, in float, in the same way everywhere is what makes SIMD and scalar
// agree exactly. Clamping before rounding equals clamping after it (the bounds
// are integers, and rounding is monotonic), but keeps the value in [-255, 255]
// before its conversion to int32, so huge inputs cannot overflow. Rounding uses
// the current floating-point rounding mode, which hearth never changes from
// the default round-to-nearest-even. Dequantization is
//
//   x' = float(q - zp) * scale                          (exact difference, one rounding)
//
// Preconditions for all functions: inputs are finite (no NaN or infinity);
// scales are positive, finite and >= kMinScale; zero points lie in
// [-128, 127]; input and output buffers do not overlap. A nullptr pool runs
// everything on the calling thread; with a pool, work is split only when it is
// large enough to pay for the fan-out (kParallelMinElements) and the results
// are bit-identical to the single-threaded ones.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/thread_pool.h"

namespace hearth::kernels {

enum class QScheme {
  // q in [-128, 127]; zero_point anywhere in that range, so the whole int8
  // range covers [min, max] of the data (extended to include 0).
  kAsymmetric,
  // q in [-127, 127]; zero_point = 0, scale = amax / 127. The code -128 is
  // never produced for the data the parameters were chosen from, so q can be
  // negated without overflow (what int8 dot-product tricks such as VNNI's
  // u8 x s8 offsetting rely on).
  kSymmetric,
};

struct QParams {
  float scale;
  std::int32_t zero_point;
};

// The smallest scale choose_qparams returns: 2^-14 = 6.103515625e-5.
//  - It is the smallest normal IEEE half-precision number, so a scale stored as
//    fp16 (as GGUF blocks and several int8 GEMM libraries store theirs) never
//    becomes subnormal or zero.
//  - 1/kMinScale = 16384 exactly, so inv is finite and exact for it, and a
//    near-zero row (all |x| < 2^-7) still maps into int8 without overflow of
//    the intermediate product.
//  - Below it the step between codes is irrelevant for LLM activations (whose
//    useful magnitudes are >> 1e-4), while an all-zero or tiny row would
//    otherwise get scale 0 (division by zero) or an enormous 1/scale.
// PyTorch/ExecuTorch use SMALL_SCALE_THRESHOLD = 6.1e-5f for the same reason;
// we take the exact power of two it approximates.
inline constexpr float kMinScale = 0x1p-14f;

// Work below this many input elements runs on the calling thread even when a
// pool is given (a fan-out costs a few microseconds, ~64K elements of work).
inline constexpr std::size_t kParallelMinElements = std::size_t{1} << 16;

// The parameters for data whose minimum and maximum are `min` and `max`
// (min <= max, both finite), the computation the functions below share:
//  - the range is extended to include 0 (so 0 is exactly representable);
//  - asymmetric: scale = (max - min) / 255, computed in double and rounded to
//    float; when it is below kMinScale it becomes kMinScale and the range is
//    widened around 0 in proportion (as PyTorch does), so the zero point stays
//    where the data puts it. The zero point is solved from (min, -128) or from
//    (max, 127), whichever adds terms of smaller magnitude (smaller rounding
//    error; PyTorch's per-tensor code writes this test with a '-' where its own
//    comment, TFLite and gemmlowp use '+': we follow the comment), then rounded
//    half to even and clamped into [-128, 127];
//  - symmetric: scale = max(max(|min|, |max|) / 127, kMinScale), zero_point 0.
// An all-zero range gives scale kMinScale (PyTorch substitutes 0.1 there; any
// scale represents all-zero data exactly, and one rule is simpler).
QParams choose_qparams_from_range(float min, float max, QScheme scheme);

// Parameters for the n floats at x (per tensor): min and max over x[0..n),
// then choose_qparams_from_range. n == 0 behaves as all-zero data.
// The reduction is split over `pool` when n >= kParallelMinElements.
QParams choose_qparams(const float* x, std::size_t n, QScheme scheme, ThreadPool* pool = nullptr);

// Parameters for each row of the row-major [tokens x dim] matrix x:
// scales[t], zero_points[t] describe row t (both arrays hold `tokens` values).
// Parallel over tokens when tokens * dim >= kParallelMinElements.
void choose_qparams_per_token(const float* x, std::size_t tokens, std::size_t dim, QScheme scheme,
                              float* scales, std::int32_t* zero_points, ThreadPool* pool);

// q[i] = quantize(x[i], p) for i in [0, n), codes clamped to [-128, 127].
void quantize_per_tensor(const float* x, std::size_t n, QParams p, std::int8_t* q,
                         ThreadPool* pool);

// Row t of the row-major [tokens x dim] matrix x is quantized with
// (scales[t], zero_points[t]) into row t of q (same shape).
void quantize_per_token(const float* x, std::size_t tokens, std::size_t dim, const float* scales,
                        const std::int32_t* zero_points, std::int8_t* q, ThreadPool* pool);

// x is row-major [rows x channels]; x[r][c] is quantized with
// (scales[c], zero_points[c]) into q[r][c] (scales and zero_points hold
// `channels` values). Meant for occasional use (weights, calibration): it
// recomputes 1/scale once per tile of 4 rows instead of caching it.
void quantize_per_channel(const float* x, std::size_t rows, std::size_t channels,
                          const float* scales, const std::int32_t* zero_points, std::int8_t* q,
                          ThreadPool* pool);

// The inverses: y = float(q - zero_point) * scale, same shapes and layouts.
void dequantize_per_tensor(const std::int8_t* q, std::size_t n, QParams p, float* y,
                           ThreadPool* pool);
void dequantize_per_token(const std::int8_t* q, std::size_t tokens, std::size_t dim,
                          const float* scales, const std::int32_t* zero_points, float* y,
                          ThreadPool* pool);
void dequantize_per_channel(const std::int8_t* q, std::size_t rows, std::size_t channels,
                            const float* scales, const std::int32_t* zero_points, float* y,
                            ThreadPool* pool);

// Dynamic per-token quantization, fused: for each row of the row-major
// [tokens x dim] matrix x, find its min/max, choose its parameters
// (choose_qparams_from_range) and quantize it while the row is still in L1,
// so x is read from memory once (and the next row is prefetched while a row
// is quantized, so memory never idles). Writes q (same shape), scales[t] and
// zero_points[t]. Bit-identical to choose_qparams_per_token followed by
// quantize_per_token. Symmetric rows are clamped to [-127, 127].
// Parallel over tokens when tokens * dim >= kParallelMinElements.
void quantize_dynamic_per_token(const float* x, std::size_t tokens, std::size_t dim, QScheme scheme,
                                std::int8_t* q, float* scales, std::int32_t* zero_points,
                                ThreadPool* pool);

}  // namespace hearth::kernels
