// AVX2 inner loops of sdpa (kernels/sdpa_impl.h); head_dim a multiple of 8.
// The loops are kernels/sdpa_simd_body.h; this file defines its primitives
// for 8-lane vectors. With 16 registers the blocks are smaller than
// AVX-512's: scores in R x P blocks of at most 8 accumulators, reduced
// together by an hadd tree; accumulation in R rows x 2 vectors.
#include <immintrin.h>

#include <cstring>

#include "kernels/sdpa_impl.h"
#include "kernels/simd_avx2.h"

namespace hearth::kernels::internal {
namespace {

using Vec = __m256;
constexpr std::size_t kLanes = 8;
constexpr int kScorePositions[5] = {0, 8, 4, 2, 2};
constexpr int kAccVectors = 2;

HEARTH_SDPA_INLINE Vec zero() { return _mm256_setzero_ps(); }
HEARTH_SDPA_INLINE Vec set1(float x) { return _mm256_set1_ps(x); }
HEARTH_SDPA_INLINE Vec loadu(const float* p) { return _mm256_loadu_ps(p); }
HEARTH_SDPA_INLINE void storeu(float* p, Vec v) { _mm256_storeu_ps(p, v); }
HEARTH_SDPA_INLINE Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
HEARTH_SDPA_INLINE Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
HEARTH_SDPA_INLINE Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
HEARTH_SDPA_INLINE Vec max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
HEARTH_SDPA_INLINE Vec fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
HEARTH_SDPA_INLINE Vec fnmadd(Vec a, Vec b, Vec c) { return _mm256_fnmadd_ps(a, b, c); }
HEARTH_SDPA_INLINE Vec fmsub(Vec a, Vec b, Vec c) { return _mm256_fmsub_ps(a, b, c); }
HEARTH_SDPA_INLINE float reduce_add(Vec v) { return avx2::hsum(v); }
HEARTH_SDPA_INLINE float reduce_max(Vec v) { return avx2::hmax(v); }
HEARTH_SDPA_INLINE float first_lane(Vec v) { return _mm256_cvtss_f32(v); }

HEARTH_SDPA_INLINE Vec load_row(const std::int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
HEARTH_SDPA_INLINE Vec load_row(const float* p) { return _mm256_loadu_ps(p); }
HEARTH_SDPA_INLINE Vec load_zero_points(const std::int8_t* p) { return load_row(p); }

// Lane i of the result is the sum of the lanes of a[i].
HEARTH_SDPA_INLINE Vec reduce_lanes(const Vec* a) {
  const Vec h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const Vec h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
  const Vec x0 = _mm256_hadd_ps(h01, h23);  // per 128-bit half: a0 a1 a2 a3
  const Vec x1 = _mm256_hadd_ps(h45, h67);  // per 128-bit half: a4 a5 a6 a7
  return _mm256_add_ps(_mm256_permute2f128_ps(x0, x1, 0x20), _mm256_permute2f128_ps(x0, x1, 0x31));
}

// Lanes [0, n) all ones, the rest zero (n <= 8).
HEARTH_SDPA_INLINE __m256i first_lanes(std::size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
HEARTH_SDPA_INLINE Vec load_first(const float* p, std::size_t n, float fill) {
  const __m256i k = first_lanes(n);
  return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, k), _mm256_castsi256_ps(k));
}
HEARTH_SDPA_INLINE Vec keep_first(Vec v, std::size_t n) {
  return _mm256_and_ps(_mm256_castsi256_ps(first_lanes(n)), v);
}
HEARTH_SDPA_INLINE void store_first(float* p, Vec v, std::size_t n) {
  _mm256_maskstore_ps(p, first_lanes(n), v);
}

// k_scale[j .. j + P) repeated over the lanes, to match dot_block's.
template <int P>
HEARTH_SDPA_INLINE Vec scale_lanes(const float* k_scale) {
  if constexpr (P == 8) return _mm256_loadu_ps(k_scale);
  if constexpr (P == 4) return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(k_scale));
  if constexpr (P == 2) {
    return _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(k_scale)));
  }
  return _mm256_broadcast_ss(k_scale);
}

// k_zero[j .. j + P) as floats, repeated over the lanes.
template <int P>
HEARTH_SDPA_INLINE Vec zero_lanes(const std::int8_t* k_zero) {
  if constexpr (P == 8) return load_row(k_zero);
  if constexpr (P == 4 || P == 2) {
    std::uint32_t bytes = 0;
    std::memcpy(&bytes, k_zero, P);
    // P == 2: repeat the two bytes so the 4 lanes read z0 z1 z0 z1.
    if constexpr (P == 2) bytes *= 0x10001u;
    const __m128i z = _mm_cvtepi8_epi32(_mm_cvtsi32_si128(static_cast<int>(bytes)));
    return _mm256_cvtepi32_ps(_mm256_broadcastsi128_si256(z));
  }
  return _mm256_set1_ps(static_cast<float>(k_zero[0]));
}

// exp_lanes's pieces (kernels/sdpa_simd_body.h).
HEARTH_SDPA_INLINE Vec min(Vec a, Vec b) { return _mm256_min_ps(a, b); }
HEARTH_SDPA_INLINE Vec round_nearest(Vec v) {
  return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// y * 2^n for integral n in [-126, 127], by building the exponent.
HEARTH_SDPA_INLINE Vec times_pow2(Vec y, Vec n) {
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}
// v where x >= bound, 0 elsewhere.
HEARTH_SDPA_INLINE Vec keep_at_least(Vec x, float bound, Vec v) {
  return _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(bound), _CMP_GE_OQ), v);
}

#include "kernels/sdpa_simd_body.h"

}  // namespace

const AttentionKernels kAvx2Attention = attention_kernels(scores_q8, 0);

}  // namespace hearth::kernels::internal
