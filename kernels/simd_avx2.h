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

#include <cstddef>
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

// Lanes [0, n) of a register all ones, the rest zero (n in [0, 8]).
static inline __m256i tail_mask(std::size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The float-vector primitives the ISA-neutral bodies (kernels/*_simd_body.h)
// are written against; kernels/simd_avx512.h defines the same names.
using Vec = __m256;
inline constexpr std::size_t kLanes = 8;
static inline Vec zero() { return _mm256_setzero_ps(); }
static inline Vec set1(float x) { return _mm256_set1_ps(x); }
static inline Vec loadu(const float* p) { return _mm256_loadu_ps(p); }
static inline void storeu(float* p, Vec v) { _mm256_storeu_ps(p, v); }
static inline Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
static inline Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
static inline Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
static inline Vec div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
static inline Vec max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
static inline Vec min(Vec a, Vec b) { return _mm256_min_ps(a, b); }
static inline Vec fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
static inline Vec fnmadd(Vec a, Vec b, Vec c) { return _mm256_fnmadd_ps(a, b, c); }
static inline Vec fmsub(Vec a, Vec b, Vec c) { return _mm256_fmsub_ps(a, b, c); }
static inline Vec fmaddsub(Vec a, Vec b, Vec c) { return _mm256_fmaddsub_ps(a, b, c); }
// (x0 x1 x2 x3 ...) -> (x1 x0 x3 x2 ...)
static inline Vec swap_pairs(Vec v) { return _mm256_permute_ps(v, 0xb1); }
static inline float reduce_add(Vec v) { return hsum(v); }
static inline float reduce_max(Vec v) { return hmax(v); }
static inline float reduce_min(Vec v) { return hmin(v); }
static inline Vec abs(Vec v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
static inline float first_lane(Vec v) { return _mm256_cvtss_f32(v); }
static inline Vec round_nearest(Vec v) {
  return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// y * 2^k for integral k in [-252, 254]: two exact scalings by 2^(k/2), so
// neither factor leaves the normal range (one rounding, at the second, for a
// subnormal result).
static inline Vec times_pow2(Vec y, Vec k) {
  const __m256i ki = _mm256_cvtps_epi32(k);
  const __m256i k1 = _mm256_srai_epi32(ki, 1);
  const __m256i k2 = _mm256_sub_epi32(ki, k1);
  const __m256i bias = _mm256_set1_epi32(127);
  const Vec s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
  const Vec s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}
// v where x >= bound, 0 elsewhere.
static inline Vec keep_at_least(Vec x, float bound, Vec v) {
  return _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(bound), _CMP_GE_OQ), v);
}
// Tails (n < kLanes): lanes [0, n) from p, the rest `fill`; nothing read or
// written past p + n.
static inline Vec load_first(const float* p, std::size_t n, float fill = 0.0f) {
  const __m256i m = tail_mask(n);
  const Vec v = _mm256_maskload_ps(p, m);  // 0 in the other lanes
  return fill == 0.0f ? v : _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(m));
}
static inline Vec keep_first(Vec v, std::size_t n) {
  return _mm256_and_ps(_mm256_castsi256_ps(tail_mask(n)), v);
}
static inline void store_first(float* p, Vec v, std::size_t n) {
  _mm256_maskstore_ps(p, tail_mask(n), v);
}
// kLanes int8 values as int32 lanes, and int8 / fp16 / bf16 values as
// floats (exact conversions).
static inline __m256i load_i8_int(const std::int8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
static inline Vec load_i8(const std::int8_t* p) { return _mm256_cvtepi32_ps(load_i8_int(p)); }
static inline Vec load_f16(const std::uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
static inline Vec load_bf16(const std::uint16_t* p) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

// Integer vectors, for the quantized kernels' bodies.
using IVec = __m256i;
// kLanes x 4 bytes at p (32-byte aligned), loaded or stored.
static inline IVec load_aligned(const std::uint8_t* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}
static inline void store_aligned(std::uint8_t* p, IVec v) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(p), v);
}
static inline Vec to_float(IVec v) { return _mm256_cvtepi32_ps(v); }
static inline IVec to_nearest_int(Vec v) { return _mm256_cvtps_epi32(v); }
static inline IVec set1_int(std::int32_t v) { return _mm256_set1_epi32(v); }
static inline IVec add_int(IVec a, IVec b) { return _mm256_add_epi32(a, b); }
static inline IVec mul_int(IVec a, IVec b) { return _mm256_mullo_epi32(a, b); }
static inline std::int32_t reduce_add_int(IVec v) { return hsum(v); }
static inline IVec or_bits(IVec a, IVec b) { return _mm256_or_si256(a, b); }
static inline IVec and_bytes(IVec v, std::uint8_t mask) {
  return _mm256_and_si256(v, _mm256_set1_epi8(static_cast<char>(mask)));
}
template <int S>
static inline IVec shift_right_16(IVec v) {
  return _mm256_srli_epi16(v, S);
}
static inline IVec low_nibbles(IVec v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
static inline IVec high_nibbles(IVec v) { return low_nibbles(_mm256_srli_epi16(v, 4)); }
// A 16-byte table in both 128-bit lanes, and each byte of `nibbles` (0..15)
// looked up in it.
static inline IVec table16(const std::uint8_t* t) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
}
static inline IVec lookup16(IVec table, IVec nibbles) {
  return _mm256_shuffle_epi8(table, nibbles);
}
// kLanes fp16 (16-byte aligned) / u8 values as floats (exact conversions).
static inline Vec load_f16_aligned(const std::uint8_t* p) {
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
}
static inline Vec load_u8(const std::uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// The 4 bytes at p in every 32-bit lane.
static inline __m256i broadcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

}  // namespace hearth::kernels::internal::avx2
