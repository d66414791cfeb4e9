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

#include <cstring>

#include "kernels/linear_impl.h"
#include "kernels/simd_avx512.h"

namespace hearth::kernels::internal {
namespace {

using avx512::broadcast4;

inline __mmask16 row_mask(std::size_t n_out, std::size_t g) {
  const std::size_t first = g * kGroupRows;
  const std::size_t rows = n_out - first >= kGroupRows ? kGroupRows : n_out - first;
  return static_cast<__mmask16>((1u << rows) - 1u);
}

// Row groups [g, g + G) x the T tokens of token tile `tile` (pointer walk as
// in linear_avx512vnni.cc).
template <int G, int T, bool kQ4, bool kPerToken>
void tile(const PackedWeights& w, const QuantizedActivations& a, std::size_t g, std::size_t tile,
          float* y, std::size_t ldy) {
  constexpr std::size_t kBlockBytes = kQ4 ? kQ4BlockBytes : kQ8BlockBytes;
  const std::size_t gs = w.group_stride;
  const std::size_t first = tile * a.tile_tokens;
  const std::uint8_t* wp = w.data + g * gs;
  const std::uint8_t* sp = wp + w.scales_offset;
  const std::int8_t* xp = a.q + tile * a.q_tile_stride;
  const std::int32_t* bp = a.bias + first * a.blocks;
  const float* dp = a.d + (kPerToken ? first : first * a.blocks);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i sign8 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i ones16 = _mm512_set1_epi16(1);
  const __m512i zero = _mm512_setzero_si512();
  __m512 facc[G][T];
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) facc[i][j] = _mm512_setzero_ps();

  for (std::size_t b = 0; b < a.blocks; ++b) {
    __m512i acc[G][T];
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) acc[i][j] = zero;
    if constexpr (kQ4) {
      // int16 pair sums over the whole block, widened once.
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        __m512i lo[G], hi[G];
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i) {
          const __m512i raw = _mm512_load_si512(wp + i * gs + 64 * c);
          lo[i] = _mm512_and_si512(raw, low4);
          hi[i] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
        }
#pragma GCC unroll 8
        for (int j = 0; j < T; ++j) {
          const __m512i xlo = broadcast4(xp + 4 * T * c + 4 * j);
          const __m512i xhi = broadcast4(xp + 4 * T * (c + 4) + 4 * j);
#pragma GCC unroll 4
          for (int i = 0; i < G; ++i) {
            acc[i][j] = _mm512_add_epi16(acc[i][j], _mm512_maddubs_epi16(lo[i], xlo));
            acc[i][j] = _mm512_add_epi16(acc[i][j], _mm512_maddubs_epi16(hi[i], xhi));
          }
        }
      }
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const __m512i init = _mm512_set1_epi32(bp[j]);
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i)
          acc[i][j] = _mm512_add_epi32(init, _mm512_madd_epi16(acc[i][j], ones16));
      }
    } else {
      // Signed weights: the plain dot product, no bias to remove.
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        __m512i aw[G];
        __mmask64 neg[G];
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i) {
          const __m512i wv = _mm512_xor_si512(_mm512_load_si512(wp + i * gs + 64 * s), sign8);
          aw[i] = _mm512_abs_epi8(wv);
          neg[i] = _mm512_movepi8_mask(wv);
        }
#pragma GCC unroll 8
        for (int j = 0; j < T; ++j) {
          const __m512i xv = broadcast4(xp + 4 * T * s + 4 * j);
#pragma GCC unroll 4
          for (int i = 0; i < G; ++i) {
            const __m512i xs = _mm512_mask_sub_epi8(xv, neg[i], zero, xv);
            acc[i][j] = _mm512_add_epi32(
                acc[i][j], _mm512_madd_epi16(_mm512_maddubs_epi16(aw[i], xs), ones16));
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) {
      const __m512 dw =
          _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sp + i * gs)));
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const __m512 fdot = _mm512_cvtepi32_ps(acc[i][j]);
        if constexpr (kPerToken) {
          facc[i][j] = _mm512_fmadd_ps(fdot, dw, facc[i][j]);
        } else {
          facc[i][j] = _mm512_fmadd_ps(fdot, _mm512_mul_ps(dw, _mm512_set1_ps(dp[j])), facc[i][j]);
        }
      }
    }
    wp += kBlockBytes;
    sp += kScaleBytes;
    xp += 4 * T * 8;
    bp += T;
    if constexpr (!kPerToken) dp += T;
  }

#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) {
    const __mmask16 mask = row_mask(w.n_out, g + i);
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      __m512 v = facc[i][j];
      if constexpr (kPerToken) v = _mm512_mul_ps(v, _mm512_set1_ps(dp[j]));
      float* out = y + (first + j) * ldy + (g + i) * kGroupRows;
      if (mask == 0xffff) {
        _mm512_storeu_ps(out, v);
      } else {
        _mm512_mask_storeu_ps(out, mask, v);
      }
    }
  }
}

template <int G, bool kQ4, bool kPerToken>
void tile_n(std::size_t tokens, const PackedWeights& w, const QuantizedActivations& a,
            std::size_t g, std::size_t tile_index, float* y, std::size_t ldy) {
  switch (tokens) {
    case 1:
      return tile<G, 1, kQ4, kPerToken>(w, a, g, tile_index, y, ldy);
    case 2:
      return tile<G, 2, kQ4, kPerToken>(w, a, g, tile_index, y, ldy);
    case 3:
      return tile<G, 3, kQ4, kPerToken>(w, a, g, tile_index, y, ldy);
    default:
      return tile<G, 4, kQ4, kPerToken>(w, a, g, tile_index, y, ldy);
  }
}

static_assert(kTileTokensAvx512 == 4, "tile_n covers 1..4 tokens");

template <bool kQ4, bool kPerToken>
void run(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0, std::size_t g1,
         std::size_t t0, std::size_t t1, float* y, std::size_t ldy) {
  const std::size_t tt = a.tile_tokens;
  const std::size_t p0 = t0 / tt, p1 = (t1 + tt - 1) / tt;
  auto tokens = [&](std::size_t p) { return a.m - p * tt < tt ? a.m - p * tt : tt; };
  std::size_t g = g0;
  if (p1 - p0 == 1 && tokens(p0) == 1) {
    for (; g + 4 <= g1; g += 4) tile<4, 1, kQ4, kPerToken>(w, a, g, p0, y, ldy);
  }
  for (; g + 2 <= g1; g += 2)
    for (std::size_t p = p0; p < p1; ++p) tile_n<2, kQ4, kPerToken>(tokens(p), w, a, g, p, y, ldy);
  if (g < g1)
    for (std::size_t p = p0; p < p1; ++p) tile_n<1, kQ4, kPerToken>(tokens(p), w, a, g, p, y, ldy);
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
