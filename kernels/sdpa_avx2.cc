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

using namespace avx2;  // the primitives of kernels/sdpa_simd_body.h
constexpr int kScorePositions[5] = {0, 8, 4, 2, 2};
constexpr int kAccVectors = 2;

HEARTH_SDPA_INLINE Vec load_row(const std::int8_t* p) { return load_i8(p); }
HEARTH_SDPA_INLINE Vec load_row(const float* p) { return loadu(p); }

// Lane i of the result is the sum of the lanes of a[i].
HEARTH_SDPA_INLINE Vec reduce_lanes(const Vec* a) {
  const Vec h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const Vec h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
  const Vec x0 = _mm256_hadd_ps(h01, h23);  // per 128-bit half: a0 a1 a2 a3
  const Vec x1 = _mm256_hadd_ps(h45, h67);  // per 128-bit half: a4 a5 a6 a7
  return _mm256_add_ps(_mm256_permute2f128_ps(x0, x1, 0x20), _mm256_permute2f128_ps(x0, x1, 0x31));
}

// k_scale[j .. j + P) repeated over the lanes, to match dot_block's.
template <int P>
HEARTH_SDPA_INLINE Vec scale_lanes(const float* k_scale) {
  if constexpr (P == 8) return _mm256_loadu_ps(k_scale);
  if constexpr (P == 4) return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(k_scale));
  if constexpr (P == 2) {
    // The pair as one 8-byte value, from any float position (a sliding
    // window's tiles start anywhere): memcpy, not a misaligned double load.
    double pair;
    std::memcpy(&pair, k_scale, sizeof pair);
    return _mm256_castpd_ps(_mm256_set1_pd(pair));
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

#include "kernels/sdpa_simd_body.h"

}  // namespace

const AttentionKernels kAvx2Attention = attention_kernels(scores_q8, 0);

}  // namespace hearth::kernels::internal
