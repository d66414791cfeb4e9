// Helpers shared by the AVX2 translation units (*_avx2.cc, compiled with
// -mavx2 -mfma -mf16c). Every function is `static`: each translation unit
// gets its own copy, compiled with its own flags, so the linker can never
// hand an AVX2 caller a copy built for another ISA (the reason the *_impl.h
// headers declare only).
#pragma once

#if !defined(__AVX2__) || defined(__AVX512F__)
#error "kernels/simd_avx2.h is for the AVX2 translation units only"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace hearth::kernels::internal::avx2 {

// Horizontal reductions over the 8 lanes, pairwise: (l0+l4 + l2+l6) +
// (l1+l5 + l3+l7) for the sum (every path that must match the scalar
// reference bit for bit states its order against this one).
static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

static inline float hmin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  m = _mm_min_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

static inline std::int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// The 4 bytes at p in every 32-bit lane.
static inline __m256i broadcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

}  // namespace hearth::kernels::internal::avx2
