// AVX-512 VNNI quantized linear layer: vpdpbusd multiplies the unsigned
// stored weights (w + C) by the signed int8 activations, 64 bytes (4 inputs x
// 16 rows) per instruction; each block's accumulator starts at -C * sum(x),
// which removes the bias exactly.
//
// Register tiles: G row groups (16 rows each) x T tokens, every weight load
// feeding T instructions. The GEMM tile is 2 x 6 (24 accumulators: 12 int32
// per block, 12 float across blocks); decode (one token) uses 4 x 1 so that
// four independent chains hide vpdpbusd's latency.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/linear_impl.h"
#include "kernels/simd_avx512.h"

namespace hearth::kernels::internal {
namespace {

using avx512::broadcast4;

// Broadcast of a memory int32, as a load-port-only instruction. The compiler
// would broadcast once and copy the register for each accumulator, and the
// copies compete with vpdpbusd for the vector ports.
inline __m512i load_broadcast(const std::int32_t* p) {
  __m512i v;
  asm volatile("vpbroadcastd %1, %0" : "=v"(v) : "m"(*p));
  return v;
}

inline __mmask16 row_mask(std::size_t n_out, std::size_t g) {
  const std::size_t first = g * kGroupRows;
  const std::size_t rows = n_out - first >= kGroupRows ? kGroupRows : n_out - first;
  return static_cast<__mmask16>((1u << rows) - 1u);
}

constexpr std::size_t kQ4PrefetchBlocks = 8;
// At most this many lines per block a GEMM tile prefetches of the next pair
// of row groups (more competes with the tile's own loads).
constexpr std::size_t kMaxPrefetchLines = 4;

// Row groups [g, g + G) x the T tokens of token tile `tile`. When `pf` is
// not null, also prefetches a.blocks x pf_lines cache lines from it into L2,
// pf_lines per block.
template <int G, int T, bool kQ4, bool kPerToken>
void tile(const PackedWeights& w, const QuantizedActivations& a, std::size_t g, std::size_t tile,
          float* y, std::size_t ldy, const std::uint8_t* pf, std::size_t pf_lines) {
  constexpr std::size_t kBlockBytes = kQ4 ? kQ4BlockBytes : kQ8BlockBytes;
  const std::size_t gs = w.group_stride;
  const std::size_t first = tile * a.tile_tokens;
  // Walking pointers, one per stream, so the tile needs few registers:
  // weights and scales of group g (group g + i at + i * gs), the tile's
  // activations (4T bytes per 4-input step), its per-block bias and scales.
  const std::uint8_t* wp = w.data + g * gs;
  const std::uint8_t* sp = wp + w.scales_offset;
  const std::int8_t* xp = a.q + tile * a.q_tile_stride;
  const std::int32_t* bp = a.bias + first * a.blocks;
  const float* dp = a.d + (kPerToken ? first : first * a.blocks);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512 facc[G][T];
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) facc[i][j] = _mm512_setzero_ps();

  for (std::size_t b = 0; b < a.blocks; ++b) {
    if (pf != nullptr)
      for (std::size_t k = 0; k < pf_lines; ++k)
        _mm_prefetch(reinterpret_cast<const char*>(pf + 64 * (b * pf_lines + k)), _MM_HINT_T1);
    __m512i acc[G][T];
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j)
#pragma GCC unroll 4
      for (int i = 0; i < G; ++i) acc[i][j] = load_broadcast(bp + j);
    if constexpr (kQ4) {
      if constexpr (T == 1) {
        // Decode: int4 blocks cost more instructions per byte than int8, so
        // the hardware prefetcher runs less far ahead; fetch the block
        // kQ4PrefetchBlocks ahead of each group ourselves.
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i) {
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c)
            _mm_prefetch(reinterpret_cast<const char*>(wp + i * gs +
                                                       kQ4PrefetchBlocks * kBlockBytes + 64 * c),
                         _MM_HINT_T0);
        }
      }
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
            acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], lo[i], xlo);
            acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], hi[i], xhi);
          }
        }
      }
    } else {
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        __m512i wv[G];
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i) wv[i] = _mm512_load_si512(wp + i * gs + 64 * s);
#pragma GCC unroll 8
        for (int j = 0; j < T; ++j) {
          const __m512i xv = broadcast4(xp + 4 * T * s + 4 * j);
#pragma GCC unroll 4
          for (int i = 0; i < G; ++i) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], wv[i], xv);
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
            std::size_t g, std::size_t tile_index, float* y, std::size_t ldy,
            const std::uint8_t* pf, std::size_t pf_lines) {
  switch (tokens) {
    case 1:
      return tile<G, 1, kQ4, kPerToken>(w, a, g, tile_index, y, ldy, pf, pf_lines);
    case 2:
      return tile<G, 2, kQ4, kPerToken>(w, a, g, tile_index, y, ldy, pf, pf_lines);
    case 3:
      return tile<G, 3, kQ4, kPerToken>(w, a, g, tile_index, y, ldy, pf, pf_lines);
    case 4:
      return tile<G, 4, kQ4, kPerToken>(w, a, g, tile_index, y, ldy, pf, pf_lines);
    case 5:
      return tile<G, 5, kQ4, kPerToken>(w, a, g, tile_index, y, ldy, pf, pf_lines);
    default:
      return tile<G, 6, kQ4, kPerToken>(w, a, g, tile_index, y, ldy, pf, pf_lines);
  }
}

static_assert(kTileTokensAvx512Vnni == 6, "tile_n covers 1..6 tokens");

template <bool kQ4, bool kPerToken>
void run(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0, std::size_t g1,
         std::size_t t0, std::size_t t1, float* y, std::size_t ldy) {
  const std::size_t tt = a.tile_tokens;
  const std::size_t p0 = t0 / tt, p1 = (t1 + tt - 1) / tt;
  auto tokens = [&](std::size_t p) { return a.m - p * tt < tt ? a.m - p * tt : tt; };
  std::size_t g = g0;
  if (p1 - p0 == 1 && tokens(p0) == 1) {
    for (; g + 4 <= g1; g += 4) tile<4, 1, kQ4, kPerToken>(w, a, g, p0, y, ldy, nullptr, 0);
  }
  // Two row groups at a time, each pair over every token tile: the pair's
  // weights (2 x 16 rows x n_in) stay in L2 while all tokens stream past.
  // Meanwhile the tiles prefetch the next pair's weights into L2, each its
  // share (a slice of pf_lines lines per block), so that with few tiles (a
  // batched decode step of 8-16 rows) the whole next pair still arrives
  // while this one computes, instead of the cores stalling on DRAM.
  const std::size_t slice = a.blocks * 64;
  const std::size_t tiles = p1 - p0;
  const std::size_t pair_slices = (2 * w.group_stride + slice - 1) / slice;
  const std::size_t pf_lines =
      std::min<std::size_t>((pair_slices + tiles - 1) / tiles, kMaxPrefetchLines);
  for (; g + 2 <= g1; g += 2) {
    const std::size_t next = g + 2 < g1 ? (g1 - g - 2 < 2 ? g1 - g - 2 : 2) : 0;
    const std::uint8_t* pf = w.data + (g + 2) * w.group_stride;
    for (std::size_t p = p0; p < p1; ++p) {
      const std::size_t off = (p - p0) * slice * pf_lines;
      tile_n<2, kQ4, kPerToken>(tokens(p), w, a, g, p, y, ldy,
                                off < next * w.group_stride ? pf + off : nullptr, pf_lines);
    }
  }
  if (g < g1)
    for (std::size_t p = p0; p < p1; ++p)
      tile_n<1, kQ4, kPerToken>(tokens(p), w, a, g, p, y, ldy, nullptr, 0);
}

}  // namespace

// Activations are quantized as on the AVX-512 path (linear_avx512.cc).
const LinearKernels kLinearAvx512Vnni = {kTileTokensAvx512Vnni, quantize_activations_avx512,
                                         run<false, false>,     run<false, true>,
                                         run<true, false>,      run<true, true>};

}  // namespace hearth::kernels::internal
