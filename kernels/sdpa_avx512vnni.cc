// AVX-512 VNNI scores over the int8 K cache (kernels/sdpa_impl.h); head_dim a
// multiple of 16, at most kVnniMaxHeadDim. The rest of the VNNI path is the
// AVX-512 code.
//
// Why integers: with float math each int8 K element costs a sign extension,
// a conversion and one FMA per query row. Here each block of query rows is
// rounded to int16 once per tile (scale amax / Qmax, error <= 1 / (2 Qmax) of
// the row's largest element) and K is only sign-extended to int16, then
// VPDPWSSD multiplies 32 pairs per instruction into int32: about half the
// instructions per K row. The zero point enters as z * sum(q16) with the
// rounded row's integer sum, so dot(q16, k - z) = dot(q16, k) - z * sum(q16)
// is exact in int32; the scores are (that * q_scale) * k_scale.
//
// Overflow: |dot(q16, k - z)| <= head_dim * Qmax * 255 < 2^31 by the choice
// of Qmax, and the two terms are each at most head_dim * Qmax * 128, so no
// intermediate overflows either.
//
// The float loops (softmax, accumulation, float scores) are the AVX-512
// ones, compiled here again from kernels/sdpa_simd_body.h, so this unit's
// table needs nothing from another ISA's.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/sdpa_impl.h"
#include "kernels/simd_avx512.h"

namespace hearth::kernels::internal {
namespace {

#include "kernels/sdpa_lanes_avx512.h"
// For the body's row_lanes of integer sums (declared before the body, so its
// templates find it; the using-declaration keeps the float overload visible).
using avx512::loadu;
HEARTH_SDPA_INLINE __m512i loadu(const std::int32_t* p) { return _mm512_loadu_si512(p); }
#include "kernels/sdpa_simd_body.h"

// acc += pairwise dot products of a and b (int16 -> int32). Inline asm
// because GCC 12 copies the accumulator around the intrinsic's tied operand,
// doubling the instructions of the inner loop.
HEARTH_SDPA_INLINE __m512i dpwssd(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// Head_dim rounded up to the 32 int16 lanes of one register.
constexpr std::size_t kPad = 32;

// 32 int8 of a K row -> 32 int16; `full` false reads only 16 (a row's tail).
HEARTH_SDPA_INLINE __m512i load_k16(const std::int8_t* p, bool full) {
  const __m256i b =
      full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
           : _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_cvtepi8_epi16(b);
}

// Integer dot products of R int16 query rows (stride ld, zero-padded to a
// multiple of 32) with P consecutive K rows; sums[r * P + p] as float.
template <int R, int P>
HEARTH_SDPA_INLINE void dot_step(const std::int16_t* q, std::size_t ld, const std::int8_t* k,
                                 std::size_t head_dim, std::size_t d, bool full, __m512i* acc) {
  __m512i kv[P];
  for (int p = 0; p < P; ++p) {
    prefetch_ahead(k + p * head_dim + d);
    kv[p] = load_k16(k + p * head_dim + d, full);
  }
  for (int r = 0; r < R; ++r) {
    const __m512i qv = _mm512_loadu_si512(q + r * ld + d);
    for (int p = 0; p < P; ++p) acc[r * P + p] = dpwssd(acc[r * P + p], qv, kv[p]);
  }
}

// Integer dot products of R int16 query rows (stride ld, zero-padded to a
// multiple of 32) with P consecutive K rows: lane r * P + p.
template <int R, int P>
HEARTH_SDPA_INLINE __m512i dot_block_i16(const std::int16_t* q, std::size_t ld,
                                         const std::int8_t* k, std::size_t head_dim) {
  static_assert(R * P <= 16);
  __m512i acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_si512();
  std::size_t d = 0;
  for (; d + kPad <= head_dim; d += kPad) dot_step<R, P>(q, ld, k, head_dim, d, true, acc);
  if (d < head_dim) dot_step<R, P>(q, ld, k, head_dim, d, false, acc);
  return transpose_sum16(acc);
}

// Rounds R query rows to int16 (zero-padded); returns their scales in qs and
// the exact sums of their int16 elements in sums.
template <int R>
HEARTH_SDPA_INLINE void quantize_rows(const float* q, std::size_t ld_q, std::size_t head_dim,
                                      float q_max, std::int16_t* out, std::size_t ld, float* qs,
                                      std::int32_t* sums) {
  for (int r = 0; r < R; ++r) {
    const float* row = q + r * ld_q;
    __m512 vmax = _mm512_setzero_ps();
    for (std::size_t d = 0; d < head_dim; d += 16)
      vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(row + d)));
    const float amax = _mm512_reduce_max_ps(vmax);
    qs[r] = amax / q_max;
    const __m512 inv = _mm512_set1_ps(amax > 0.0f ? q_max / amax : 0.0f);
    std::int16_t* dst = out + r * ld;
    __m512i sum = _mm512_setzero_si512();  // |sum| <= head_dim * Qmax: no overflow
    for (std::size_t d = 0; d < head_dim; d += 16) {
      // |row * inv| <= Qmax, so the saturating narrowing never saturates and
      // the int32 values summed are the int16 ones stored.
      const __m512i x = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + d), inv));
      sum = _mm512_add_epi32(sum, x);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + d), _mm512_cvtsepi32_epi16(x));
    }
    sums[r] = _mm512_reduce_add_epi32(sum);
    if (head_dim % kPad != 0)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + head_dim), _mm256_setzero_si256());
  }
}

// (dot - z * sum) * q_scale * k_scale: the scores of one block.
HEARTH_SDPA_INLINE __m512 finish(__m512i dot, __m512i zero, __m512i sum, __m512 q_scale,
                                 __m512 k_scale) {
  const __m512i exact = _mm512_sub_epi32(dot, _mm512_mullo_epi32(zero, sum));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(exact), q_scale), k_scale);
}

template <int R, int P>
void score_rows_i16(const float* q, std::size_t ld_q, const std::int8_t* k, const float* k_scale,
                    const std::int8_t* k_zero, std::size_t n, std::size_t head_dim, float* s,
                    std::size_t ld_s) {
  constexpr std::size_t kLd = kVnniMaxHeadDim;
  alignas(64) std::int16_t q16[R * kLd];
  float qs[R];
  std::int32_t sums[R];
  // Largest Qmax (<= 32767) with head_dim * Qmax * 255 < 2^31.
  const std::size_t padded = (head_dim + kPad - 1) / kPad * kPad;
  const std::size_t limit = 2147483647u / (255u * padded);
  const float q_max = static_cast<float>(limit < 32767 ? limit : 32767);
  quantize_rows<R>(q, ld_q, head_dim, q_max, q16, kLd, qs, sums);
  const __m512 q_scale = row_lanes<R, P>(qs), q_scale1 = row_lanes<R, 1>(qs);
  const __m512i sum = row_lanes<R, P>(sums), sum1 = row_lanes<R, 1>(sums);
  std::size_t j = 0;
  for (; j + P <= n; j += P) {
    const __m512i v = dot_block_i16<R, P>(q16, kLd, k + j * head_dim, head_dim);
    store_block<R, P>(
        finish(v, zero_lanes_i32<P>(k_zero + j), sum, q_scale, scale_lanes<P>(k_scale + j)), s + j,
        ld_s);
  }
  for (; j < n; ++j) {
    const __m512i v = dot_block_i16<R, 1>(q16, kLd, k + j * head_dim, head_dim);
    store_block<R, 1>(
        finish(v, zero_lanes_i32<1>(k_zero + j), sum1, q_scale1, scale_lanes<1>(k_scale + j)),
        s + j, ld_s);
  }
}

}  // namespace

void scores_q8_avx512vnni(const float* q, std::size_t ld_q, std::size_t rows, const float*,
                          const std::int8_t* k, const float* k_scale, const std::int8_t* k_zero,
                          std::size_t n, std::size_t head_dim, float* s, std::size_t ld_s) {
  for_each_row_block(rows, [&]<int R>(std::size_t r) {
    score_rows_i16<R, kScorePositions[R]>(q + r * ld_q, ld_q, k, k_scale, k_zero, n, head_dim,
                                          s + r * ld_s, ld_s);
  });
}

const AttentionKernels kAvx512VnniAttention =
    attention_kernels(scores_q8_avx512vnni, kVnniMaxHeadDim);

}  // namespace hearth::kernels::internal
