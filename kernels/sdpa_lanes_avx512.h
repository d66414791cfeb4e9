// The AVX-512 primitives of kernels/sdpa_simd_body.h, shared by the two
// AVX-512 attention translation units (sdpa_avx512.cc and
// sdpa_avx512vnni.cc). Like the body, not a normal header: it is included
// inside each unit's anonymous namespace, so each compiles its own copy with
// its own flags.

using namespace avx512;  // the primitives of kernels/sdpa_simd_body.h
// With 32 registers the score blocks hold up to 16 accumulators and the
// accumulation 4 vectors per row.
constexpr int kScorePositions[5] = {0, 8, 8, 4, 4};
constexpr int kAccVectors = 4;

HEARTH_SDPA_INLINE Vec load_row(const std::int8_t* p) { return load_i8(p); }
HEARTH_SDPA_INLINE Vec load_row(const float* p) { return loadu(p); }

// Lane i of the result is the sum of the lanes of a[i]: a transpose tree of
// 15 adds for 16 sums. `V` is __m512 or __m512i; the shuffles move 32-bit
// lanes, whatever they hold.
template <typename V>
HEARTH_SDPA_INLINE V transpose_sum16(const V* a) {
  // A GCC vector subscripts to its element: float for __m512.
  constexpr bool kFloat = std::is_floating_point_v<std::remove_cvref_t<decltype(a[0][0])>>;
  auto bits = [](V x) {
    if constexpr (kFloat)
      return _mm512_castps_si512(x);
    else
      return x;
  };
  auto add = [](__m512i x, __m512i y) {
    if constexpr (kFloat) {
      return _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(y)));
    } else {
      return _mm512_add_epi32(x, y);
    }
  };
  __m512i t[8];
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: [a b a b] partial sums
    const __m512i x = bits(a[2 * i]), y = bits(a[2 * i + 1]);
    t[i] = add(_mm512_unpacklo_epi32(x, y), _mm512_unpackhi_epi32(x, y));
  }
  __m512i u[4];
  for (int i = 0; i < 4; ++i)  // per 128-bit lane: [a b c d]
    u[i] = add(_mm512_unpacklo_epi64(t[2 * i], t[2 * i + 1]),
               _mm512_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
  __m512i v[2];
  for (int i = 0; i < 2; ++i)  // pairs of 128-bit lanes added
    v[i] = add(_mm512_shuffle_i32x4(u[2 * i], u[2 * i + 1], 0x88),
               _mm512_shuffle_i32x4(u[2 * i], u[2 * i + 1], 0xdd));
  const __m512i r =
      add(_mm512_shuffle_i32x4(v[0], v[1], 0x88), _mm512_shuffle_i32x4(v[0], v[1], 0xdd));
  if constexpr (kFloat)
    return _mm512_castsi512_ps(r);
  else
    return r;
}
HEARTH_SDPA_INLINE Vec reduce_lanes(const Vec* a) { return transpose_sum16(a); }

// k_scale[j .. j + P) repeated over the lanes, to match dot_block's.
template <int P>
HEARTH_SDPA_INLINE Vec scale_lanes(const float* k_scale) {
  if constexpr (P == 8) return _mm512_broadcast_f32x8(_mm256_loadu_ps(k_scale));
  if constexpr (P == 4) return _mm512_broadcast_f32x4(_mm_loadu_ps(k_scale));
  return _mm512_set1_ps(k_scale[0]);
}

// k_zero[j .. j + P) as int32, repeated over the lanes.
template <int P>
HEARTH_SDPA_INLINE __m512i zero_lanes_i32(const std::int8_t* k_zero) {
  if constexpr (P == 8) {
    return _mm512_broadcast_i32x8(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(k_zero))));
  }
  if constexpr (P == 4) {
    std::int32_t bytes = 0;
    std::memcpy(&bytes, k_zero, 4);
    return _mm512_broadcast_i32x4(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(bytes)));
  }
  return _mm512_set1_epi32(k_zero[0]);
}
template <int P>
HEARTH_SDPA_INLINE Vec zero_lanes(const std::int8_t* k_zero) {
  return _mm512_cvtepi32_ps(zero_lanes_i32<P>(k_zero));
}
