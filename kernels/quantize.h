// Dynamic int8 quantization of float rows: the one family the kernels
// quantize their run-time data with. The int8 KV cache stores each (position,
// head) row with the asymmetric rule (quantize_row_asymmetric, below); Linear
// quantizes its activations with the symmetric rule, per block of 32 inputs
// or per token, into the token-tiled layout its matmul reads
// (kernels/linear_impl.h). Both run on the same per-ISA reductions and
// round-and-store code. (Weights keep GGUF's block formats:
// kernels/gguf_blocks.h.)
//
// An int8 code q stands for the real value
//
//   x ~= scale * (q - zero_point)
//
// and (scale, zero_point) are chosen per row from the row's data. Each rule
// also gives inv, the factor the codes are computed with, and [qlo, qhi], the
// codes it may produce:
//
//  asymmetric: lo = min(0, min x), hi = max(0, max x), range = hi - lo (float)
//    scale      = range / 255
//    inv        = 255 / range                       (one rounding, not 1 / scale)
//    zero_point = -128 - round(lo * inv), clamped to [-128, 127]
//    [qlo, qhi] = [-128, 127]
//  The range always includes 0, so 0 is stored exactly (as zero_point), and
//  all 256 codes cover the row's actual span: lo (when negative) maps to -128
//  exactly. Rounding lo * inv rather than -128 - lo * inv keeps its low bits;
//  since 128 is even the result is the same as rounding the exact difference.
//
//  symmetric: amax = max |x|
//    scale = amax / 127,  inv = 1 / scale,  zero_point = 0,  [qlo, qhi] = [-127, 127]
//  The Q8_0 block convention. -128 is never produced, so a code can be negated
//  without overflow (what int8 dot-product tricks such as VNNI's u8 x s8
//  offsetting rely on).
//
//  A row whose range (asymmetric) or amax (symmetric) is below kTinyRange, or
//  NaN, gets scale 0, inv 0 and zero_point 0, so every code is 0: its inverse
//  step would overflow float near the subnormal range, and values that small
//  are far below anything a model produces. No other floor applies: a
//  small-but-normal row keeps its own fine step.
//
// Every code is then, identically on every path (scalar reference, AVX2,
// AVX-512):
//
//   q = round_half_even(clamp(x * inv, qlo - zero_point, qhi - zero_point)) + zero_point
//
// One float product per element (hence inv), and clamping before rounding,
// which equals clamping after it (the bounds are integers and rounding is
// monotonic) but keeps the value small before its conversion to int32. The
// parameters are computed by one scalar-compiled function per rule, so the
// paths cannot round them differently, and the reductions (min, max, max |x|)
// are exact, so every path gives bit-identical scales, zero points and codes.
// Rounding uses the current floating-point mode, which hearth never changes
// from the default round-to-nearest-even. Each element is within scale / 2 of
// scale * (q - zero_point), up to float rounding (a few ulp of max |x|).
//
// Preconditions: inputs are finite, and a row's range fits in a float
// (|x| < 2^127). Nothing here allocates memory or uses threads.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hearth::kernels {

// Rows whose range (asymmetric) or amax (symmetric) is below this are stored
// as zeros with scale 0 (see above): 1 / (1e-30 / 255) is still far from
// float's largest value, while every normal float above it keeps its step.
inline constexpr float kTinyRange = 1e-30f;

struct QParams {
  float scale = 0.0f;
  std::int32_t zero_point = 0;
};

// Quantizes the n floats at x (n >= 0) into q[0..n) with the asymmetric rule
// above and returns the row's parameters. Runs on the calling thread; every
// dispatched path gives the same bits.
QParams quantize_row_asymmetric(const float* x, std::size_t n, std::int8_t* q);

}  // namespace hearth::kernels
