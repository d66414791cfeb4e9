// Helpers shared by the AVX-512 translation units (*_avx512.cc and
// *_avx512vnni.cc, compiled with their own flags). Every function is
// `static`: each translation unit gets its own copy, compiled with its own
// flags, so the linker never merges copies built for different ISAs (the
// reason the *_impl.h headers declare only).
#pragma once

#if !defined(__AVX512F__)
#error "kernels/simd_avx512.h is for the AVX-512 translation units only"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hearth::kernels::internal::avx512 {

// Lanes [0, n) of a 16-lane mask, n in [0, 16].
static inline __mmask16 tail_mask(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// The float-vector primitives the ISA-neutral bodies (kernels/*_simd_body.h)
// are written against; kernels/simd_avx2.h defines the same names.
using Vec = __m512;
inline constexpr std::size_t kLanes = 16;
static inline Vec zero() { return _mm512_setzero_ps(); }
static inline Vec set1(float x) { return _mm512_set1_ps(x); }
static inline Vec loadu(const float* p) { return _mm512_loadu_ps(p); }
static inline void storeu(float* p, Vec v) { _mm512_storeu_ps(p, v); }
static inline Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
static inline Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
static inline Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
static inline Vec div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
static inline Vec max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
static inline Vec min(Vec a, Vec b) { return _mm512_min_ps(a, b); }
static inline Vec fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
static inline Vec fnmadd(Vec a, Vec b, Vec c) { return _mm512_fnmadd_ps(a, b, c); }
static inline Vec fmsub(Vec a, Vec b, Vec c) { return _mm512_fmsub_ps(a, b, c); }
static inline Vec fmaddsub(Vec a, Vec b, Vec c) { return _mm512_fmaddsub_ps(a, b, c); }
// (x0 x1 x2 x3 ...) -> (x1 x0 x3 x2 ...)
static inline Vec swap_pairs(Vec v) { return _mm512_permute_ps(v, 0xb1); }
// Pairwise halving: 16 -> 8 -> 4 -> 2 -> 1.
static inline float reduce_add(Vec v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
static inline float reduce_max(Vec v) { return _mm512_reduce_max_ps(v); }
static inline float reduce_min(Vec v) { return _mm512_reduce_min_ps(v); }
static inline Vec abs(Vec v) { return _mm512_abs_ps(v); }
static inline float first_lane(Vec v) { return _mm512_cvtss_f32(v); }
static inline Vec round_nearest(Vec v) {
  return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// y * 2^k for integral k: vscalefps rounds once and handles subnormal
// results and overflow itself.
static inline Vec times_pow2(Vec y, Vec k) { return _mm512_scalef_ps(y, k); }
// v where x >= bound, 0 elsewhere.
static inline Vec keep_at_least(Vec x, float bound, Vec v) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(bound), _CMP_GE_OQ), v);
}
// Tails (n < kLanes): lanes [0, n) from p, the rest `fill`; nothing read or
// written past p + n.
static inline Vec load_first(const float* p, std::size_t n, float fill = 0.0f) {
  return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), tail_mask(n), p);
}
static inline Vec keep_first(Vec v, std::size_t n) { return _mm512_maskz_mov_ps(tail_mask(n), v); }
static inline void store_first(float* p, Vec v, std::size_t n) {
  _mm512_mask_storeu_ps(p, tail_mask(n), v);
}
// kLanes int8 values as int32 lanes, and int8 / fp16 / bf16 values as
// floats (exact conversions).
static inline __m512i load_i8_int(const std::int8_t* p) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
static inline Vec load_i8(const std::int8_t* p) { return _mm512_cvtepi32_ps(load_i8_int(p)); }
static inline Vec load_f16(const std::uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
static inline Vec load_bf16(const std::uint16_t* p) {
  const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

// Integer vectors, for the quantized kernels' bodies.
using IVec = __m512i;
// kLanes x 4 bytes at p (64-byte aligned), loaded or stored.
static inline IVec load_aligned(const std::uint8_t* p) { return _mm512_load_si512(p); }
static inline void store_aligned(std::uint8_t* p, IVec v) { _mm512_store_si512(p, v); }
static inline Vec to_float(IVec v) { return _mm512_cvtepi32_ps(v); }
static inline IVec to_nearest_int(Vec v) { return _mm512_cvtps_epi32(v); }
static inline IVec set1_int(std::int32_t v) { return _mm512_set1_epi32(v); }
static inline IVec add_int(IVec a, IVec b) { return _mm512_add_epi32(a, b); }
static inline IVec mul_int(IVec a, IVec b) { return _mm512_mullo_epi32(a, b); }
static inline std::int32_t reduce_add_int(IVec v) { return _mm512_reduce_add_epi32(v); }
static inline IVec or_bits(IVec a, IVec b) { return _mm512_or_si512(a, b); }
static inline IVec and_bytes(IVec v, std::uint8_t mask) {
  return _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(mask)));
}
template <int S>
static inline IVec shift_right_16(IVec v) {
  return _mm512_srli_epi16(v, S);
}
static inline IVec low_nibbles(IVec v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0f)); }
static inline IVec high_nibbles(IVec v) { return low_nibbles(_mm512_srli_epi16(v, 4)); }
// A 16-byte table in every 128-bit lane, and each byte of `nibbles` (0..15)
// looked up in it.
static inline IVec table16(const std::uint8_t* t) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
}
static inline IVec lookup16(IVec table, IVec nibbles) {
  return _mm512_shuffle_epi8(table, nibbles);
}
// kLanes fp16 (32-byte aligned) / u8 values as floats (exact conversions).
static inline Vec load_f16_aligned(const std::uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}
static inline Vec load_u8(const std::uint8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// The 4 bytes at p in every 32-bit lane.
static inline __m512i broadcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

}  // namespace hearth::kernels::internal::avx512
