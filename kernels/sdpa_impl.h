// Private to kernels/: the per-ISA building blocks of sdpa.
// Not part of the API; sdpa.cc dispatches to these.
//
// sdpa.cc owns the algorithm (tiling, masking, work split, scratch); the
// per-ISA files provide the inner loops over one KV tile, so every path runs
// the same schedule and differs only in arithmetic order.
#pragma once

#include <cstddef>
#include <cstdint>

#include <xmmintrin.h>  // _mm_prefetch (SSE, in every x86-64 build)

#include "kernels/kv_cache.h"

namespace hearth::kernels::internal {

// KV positions per tile. A tile's int8 K (or V) rows are 16 KiB at head_dim
// 128 and its score rows 512 bytes, so a tile stays in L1/L2 while every
// query row of a GQA group uses it.
inline constexpr std::size_t kKvTile = 128;

// The SIMD loops prefetch the K/V bytes this far ahead of those they read,
// into L1 and, further ahead, into L2: on one core the hardware prefetcher
// alone leaves decode well short of the streaming bandwidth
// (docs/performance.md). Past a tile's end the next tile's rows follow
// contiguously, so the streams never break.
inline constexpr std::size_t kPrefetchL1Bytes = 2048;
inline constexpr std::size_t kPrefetchL2Bytes = 8192;

// For the SIMD files: their register blocks only stay in registers when
// every helper is inlined.
#define HEARTH_SDPA_INLINE inline __attribute__((always_inline))

// Prefetches the bytes kPrefetchL1Bytes and kPrefetchL2Bytes ahead of p.
// `static`: each SIMD file compiles its own copy with its own flags.
static inline __attribute__((always_inline)) void prefetch_ahead(const void* p) {
  const char* c = static_cast<const char*>(p);
  _mm_prefetch(c + kPrefetchL1Bytes, _MM_HINT_T0);
  _mm_prefetch(c + kPrefetchL2Bytes, _MM_HINT_T2);
}

// The inner loops over one KV tile of n positions (n <= kKvTile).
//
// Notation: q is `rows` query rows of head_dim floats with stride ld_q,
// already multiplied by the softmax scale; s and w are score / weight rows
// with stride ld_s; acc is `rows` accumulator rows with stride ld_acc.
// An int8 row j of K (or V) stands for k_scale[j] * (k[j][d] - k_zero[j])
// (kernels/kv_cache.h); the zero points are applied once per score and once
// per output row, never per element.
struct AttentionKernels {
  // s[r][j] = (dot(q[r], k[j]) - k_zero[j] * q_sum[r]) * k_scale[j]
  // (k: n rows of head_dim int8; q_sum[r] = sum_d q[r][d], which the caller
  // computes once per query row, not per tile).
  void (*scores_q8)(const float* q, std::size_t ld_q, std::size_t rows, const float* q_sum,
                    const std::int8_t* k, const float* k_scale, const std::int8_t* k_zero,
                    std::size_t n, std::size_t head_dim, float* s, std::size_t ld_s);
  // s[r][j] = dot(q[r], k[j])                 (k: n rows of head_dim floats)
  void (*scores_f32)(const float* q, std::size_t ld_q, std::size_t rows, const float* k,
                     std::size_t n, std::size_t head_dim, float* s, std::size_t ld_s);
  // Online-softmax step for one row whose first n_valid (>= 1) of n scores
  // are unmasked: m' = max(*m, max s[0..n_valid)); returns corr = exp(*m - m')
  // (0 when *m is -inf); *l = *l * corr + sum_j exp(s[j] - m'); *m = m'.
  // Overwrites s[j] with the weight exp(s[j] - m') * v_scale[j] (v_scale
  // nullptr: 1) for j < n_valid and 0 for n_valid <= j < n.
  float (*softmax_row)(float* s, std::size_t n_valid, std::size_t n, const float* v_scale, float* m,
                       float* l);
  // acc[r][d] = acc[r][d] * corr[r] + sum_j w[r][j] * (v[j][d] - v_zero[j])
  // (v int8), computed as sum_j w[r][j] * v[j][d] minus the one scalar
  // sum_j w[r][j] * v_zero[j] per row.
  void (*accumulate_q8)(const float* w, std::size_t ld_w, std::size_t rows, const std::int8_t* v,
                        const std::int8_t* v_zero, std::size_t n, std::size_t head_dim,
                        const float* corr, float* acc, std::size_t ld_acc);
  // acc[r][d] = acc[r][d] * corr[r] + sum_j w[r][j] * v[j][d]   (v float)
  void (*accumulate_f32)(const float* w, std::size_t ld_w, std::size_t rows, const float* v,
                         std::size_t n, std::size_t head_dim, const float* corr, float* acc,
                         std::size_t ld_acc);
  // The head sizes the table serves: multiples of head_dim_multiple, up to
  // max_head_dim (0: no limit). sdpa.cc takes the active ISA's table, or the
  // best one below it that serves the cache's head_dim.
  std::size_t head_dim_multiple;
  std::size_t max_head_dim;
};

// Scalar reference: any head_dim.
extern const AttentionKernels kScalarAttention;
// AVX2: head_dim a multiple of 8.
extern const AttentionKernels kAvx2Attention;
// AVX-512: head_dim a multiple of 16.
extern const AttentionKernels kAvx512Attention;
// AVX-512 VNNI: kAvx512Attention's loops with scores_q8_avx512vnni, head_dim
// a multiple of 16 up to kVnniMaxHeadDim. Each SIMD table is defined in its
// ISA's file (the loops are kernels/sdpa_simd_body.h, compiled per ISA); a
// table of function addresses is initialized at compile time, so no code of
// an ISA file runs before dispatch picks it.
extern const AttentionKernels kAvx512VnniAttention;

// AVX-512 VNNI replaces AVX-512's scores_q8 with this one (int16 query rows,
// VPDPWSSD) for head_dim a multiple of 16 up to kVnniMaxHeadDim (its int16
// query block lives on the stack). Each query element is rounded to a step of
// amax(|row|) / Qmax with Qmax the largest value <= 32767 with 255 *
// round_up(head_dim, 32) * Qmax < 2^31 (32767 up to head_dim 256, 16448 at
// 512), so |sum_d q16[d] * (k[d] - k_zero)| <= 255 * head_dim * Qmax stays in
// int32: the zero-point correction is exact too. It ignores q_sum and uses
// the exact integer sum of the rounded row instead.
inline constexpr std::size_t kVnniMaxHeadDim = 512;
void scores_q8_avx512vnni(const float* q, std::size_t ld_q, std::size_t rows, const float* q_sum,
                          const std::int8_t* k, const float* k_scale, const std::int8_t* k_zero,
                          std::size_t n, std::size_t head_dim, float* s, std::size_t ld_s);

}  // namespace hearth::kernels::internal
