// AVX-512 (F/BW, without VNNI) quantized linear layer, and the AVX-512
// activation quantizer (also used by the VNNI path).
//
// Without vpdpbusd the u8 x s8 products go through vpmaddubsw, whose int16
// pair sums saturate. So:
//  - Q8_0 recovers the signed weight (stored ^ 0x80) and multiplies |w| (a
//    valid u8 even for w = -128) by x carrying w's sign: each product is at
//    most 128 * 127 and a pair 32512 < 32767, so nothing saturates, and the
//    int32 sums equal the VNNI path's exactly.
//  - Q4_0 multiplies the unsigned nibble (0..15) by x directly: a pair is at
//    most 2 * 15 * 127 = 3810, so the 8 pair sums of a block fit in int16
//    (30480) and are widened once per block.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/linear_impl.h"
#include "kernels/simd_avx512.h"

namespace hearth::kernels::internal {
namespace {

using namespace avx512;  // float primitives of kernels/linear_tile_body.h

// The dot core of kernels/linear_tile_body.h: vpmaddubsw's u8 x s8 pairs
// (see above for why nothing saturates).
using IVec = __m512i;
inline IVec load_unit(const std::uint8_t* p) { return _mm512_load_si512(p); }
inline Vec unit_scales(const std::uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}
inline Vec to_float(IVec v) { return _mm512_cvtepi32_ps(v); }
inline IVec low_nibbles(IVec v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0f)); }
inline IVec high_nibbles(IVec v) { return low_nibbles(_mm512_srli_epi16(v, 4)); }
template <bool kQ4>
inline IVec block_start(const std::int32_t*) {
  return _mm512_setzero_si512();
}
inline IVec q4_products(IVec acc, IVec lo, IVec hi, IVec xlo, IVec xhi) {
  acc = _mm512_add_epi16(acc, _mm512_maddubs_epi16(lo, xlo));
  return _mm512_add_epi16(acc, _mm512_maddubs_epi16(hi, xhi));
}
template <bool kQ4>
inline IVec block_finish(IVec acc, const std::int32_t* bias) {
  if constexpr (kQ4) {
    return _mm512_add_epi32(_mm512_set1_epi32(*bias), _mm512_madd_epi16(acc, _mm512_set1_epi16(1)));
  }
  return acc;
}
// Q8_0: |w| times x negated where w < 0 (no vpsignb on zmm: a masked
// subtraction instead).
struct Q8Unit {
  IVec abs_w;
  __mmask64 negative;
};
inline Q8Unit q8_unit(IVec stored) {
  const IVec ws = _mm512_xor_si512(stored, _mm512_set1_epi8(static_cast<char>(0x80)));
  return {_mm512_abs_epi8(ws), _mm512_movepi8_mask(ws)};
}
inline IVec q8_products(IVec acc, const Q8Unit& u, IVec x) {
  const IVec xs = _mm512_mask_sub_epi8(x, u.negative, _mm512_setzero_si512(), x);
  return _mm512_add_epi32(
      acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u.abs_w, xs), _mm512_set1_epi16(1)));
}
constexpr std::size_t kQ4DecodePrefetchBlocks = 0;

#include "kernels/linear_tile_body.h"

template <bool kQ4, bool kPerToken>
void run(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0, std::size_t g1,
         std::size_t t0, std::size_t t1, float* y, std::size_t ldy) {
  run_in_group_pairs<kQ4, kPerToken, static_cast<int>(kTileTokensAvx512), false>(w, a, g0, g1, t0,
                                                                                 t1, y, ldy);
}

}  // namespace

void quantize_activations_avx512(const float* x, std::size_t t0, std::size_t t1,
                                 std::int32_t bias_c, const QuantizedActivations& a) {
  const std::size_t n_in = a.blocks * kQuantGroup;
  for (std::size_t t = t0; t < t1; ++t) {
    const float* xt = x + t * n_in;
    // Token t's place in the token-tiled layout (kernels/linear_impl.h).
    const std::size_t tile = t / a.tile_tokens, j = t % a.tile_tokens;
    const std::size_t first = tile * a.tile_tokens;
    const std::size_t n = a.m - first < a.tile_tokens ? a.m - first : a.tile_tokens;
    std::int8_t* q = a.q + tile * a.q_tile_stride + 4 * j;
    const std::size_t meta = first * a.blocks + j;
    float d = 0.0f, id = 0.0f;
    if (a.per_token) {
      __m512 vmax = _mm512_setzero_ps();
      for (std::size_t i = 0; i < n_in; i += 16)
        vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(xt + i)));
      const float amax = _mm512_reduce_max_ps(vmax);
      if (amax >= kTinyAmax) {
        d = amax / 127.0f;
        id = 1.0f / d;
      }
      a.d[t] = d;
    }
    for (std::size_t b = 0; b < a.blocks; ++b) {
      const __m512 x0 = _mm512_loadu_ps(xt + b * kQuantGroup);
      const __m512 x1 = _mm512_loadu_ps(xt + b * kQuantGroup + 16);
      if (!a.per_token) {
        const float amax =
            _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        d = 0.0f;
        id = 0.0f;
        if (amax >= kTinyAmax) {
          d = amax / 127.0f;
          id = 1.0f / d;
        }
        a.d[meta + b * n] = d;
      }
      const __m512 vid = _mm512_set1_ps(id);
      // cvtps2dq rounds to nearest even (default MXCSR), as lrint does.
      const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid));
      const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
      std::int8_t* qb = q + b * 8 * 4 * n;
      if (n == 1) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtepi32_epi8(i0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtepi32_epi8(i1));
      } else {
        alignas(16) std::int8_t tmp[kQuantGroup];
        _mm_store_si128(reinterpret_cast<__m128i*>(tmp), _mm512_cvtepi32_epi8(i0));
        _mm_store_si128(reinterpret_cast<__m128i*>(tmp + 16), _mm512_cvtepi32_epi8(i1));
        for (std::size_t s = 0; s < 8; ++s) std::memcpy(qb + s * 4 * n, tmp + 4 * s, 4);
      }
      a.bias[meta + b * n] = -bias_c * _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
    }
  }
}

const LinearKernels kLinearAvx512 = {kTileTokensAvx512, quantize_activations_avx512,
                                     run<false, false>, run<false, true>,
                                     run<true, false>,  run<true, true>};

}  // namespace hearth::kernels::internal
