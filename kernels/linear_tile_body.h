// The register tile of the quantized linear layer (kernels/linear_impl.h's
// MatmulFn), written once for every vector ISA. Not a normal header:
// linear_avx2.cc, linear_avx512.cc and linear_avx512vnni.cc include it inside
// their anonymous namespace after defining the primitives below, so each ISA
// compiles its own copy with its own flags (the pattern Highway uses, without
// the dependency). What differs per ISA is only the integer dot product of a
// block (the "dot core") and the tile shapes its run() picks.
//
// A unit is kLanes rows of a row group (kUnits = kGroupRows / kLanes units per
// group: two ymm halves on AVX2, one zmm on AVX-512). A tile is G row groups
// x T tokens: per block of 32 inputs each (unit, token) pair gets an int32
// dot product from the core, converted to float and accumulated with the
// block's scales (and, for Q4_K, its mins), in the order kernels/linear.h
// documents (so every ISA gives the same bits).
//
// Primitives (besides the float set of kernels/simd_avx2.h / simd_avx512.h):
//   IVec, load_aligned(p)           kLanes x 4 bytes of packed weights (aligned)
//   broadcast4(p)                the 4 bytes at p in every 32-bit lane
//   load_f16_aligned(p)               kLanes fp16 scales as floats
//   to_float(IVec)               int32 lanes as floats
//   low_nibbles(v), high_nibbles(v)
//   table16(t), lookup16(table, nibbles)   a 16-byte table, bytes looked up in it
//   block_start<kF>(bias)        an accumulator at the start of a block
//   q4_products(acc, lo, hi, xlo, xhi)   acc + the products of 8 inputs
//   block_finish<kF>(acc, bias)  the block's int32 dot products
//   Q8Unit, q8_unit(stored), q8_products(acc, unit, x)
//   pair_products(acc, q0, x0, q1, x1)  acc + the int32 products of two
//                                 steps of unsigned 5- or 6-bit q
//   kQ4DecodePrefetchBlocks      0, or how far ahead the decode tile
//                                prefetches int4 blocks itself (when
//                                a.decode_prefetch)
//   kWideDecodePrefetchBlocks    the same for Q5_K and Q6_K blocks

// A Q4_K / Q5_K super-block's row scales for unit u (0..kUnits-1) of the
// group whose scales start at group_sp: d and dmin, converted once per
// super-block and kept in registers for its 8 blocks.
inline __attribute__((always_inline)) void super_scales(const std::uint8_t* group_sp, int u, Vec& d,
                                                        Vec& dmin) {
  const std::size_t f16 = 2 * kLanes * u;
  d = load_f16_aligned(group_sp + f16);
  dmin = load_f16_aligned(group_sp + kQ4KDminOffset + f16);
}

// Bytes of a row group's sub-block scales and mins unpacked by
// unpack_k_scales, per super-block.
inline constexpr std::size_t kUnpackedKScaleBytes = 2 * kBlocksPerSuper * kGroupRows;  // 256

// A Q4_K / Q5_K super-block's 6-bit sub-block scales and mins of the row
// group whose scales start at group_sp (kernels/linear_impl.h's layout), as
// bytes at out (64-byte aligned): sc[8][16], then m[8][16], row r of
// sub-block j at [j][r]. Once per super-block, so that each block's scales
// are one load as when they were stored as bytes.
inline __attribute__((always_inline)) void unpack_k_scales(const std::uint8_t* group_sp,
                                                           std::uint8_t* out) {
  const std::uint8_t* sc = group_sp + kQ4KScOffset;   // sc | (m >> 4) << 6
  const std::uint8_t* m4 = group_sp + kQ4KMinOffset;  // m & 15 of j and j + 4
#pragma GCC unroll 2
  for (std::size_t i = 0; i < 64; i += sizeof(IVec)) {
    const IVec first = load_aligned(sc + i), second = load_aligned(sc + 64 + i);
    const IVec low = load_aligned(m4 + i);
    store_aligned(out + i, and_bytes(first, 0x3f));
    store_aligned(out + 64 + i, and_bytes(second, 0x3f));
    store_aligned(out + 128 + i,
                  or_bits(and_bytes(shift_right_16<2>(first), 0x30), low_nibbles(low)));
    store_aligned(out + 192 + i,
                  or_bits(and_bytes(shift_right_16<2>(second), 0x30), high_nibbles(low)));
  }
}

// The scales of block b for unit u of the group whose scales start at
// group_sp (the group's scales region, walked per block or super-block by
// next_scales): dw, the rows' scale, and for Q4_K and Q5_K dmin, the rows'
// min (d * sc and dmin * m of kernels/linear_impl.h: exact products, from the
// super-block's d and dmin given by super_scales, and its sc and m unpacked
// at group_k by unpack_k_scales; Q4_1 and Q5_1: the block's d and -m).
template <WeightFormat kF>
inline __attribute__((always_inline)) void unit_scales(const std::uint8_t* group_sp,
                                                       const std::uint8_t* group_k, int u,
                                                       std::size_t b, Vec d, Vec dmin_super,
                                                       Vec& dw, Vec& dmin) {
  if constexpr (super_mins(kF)) {
    const std::size_t sc = kGroupRows * (b % kBlocksPerSuper) + kLanes * u;
    dw = mul(d, load_u8(group_k + sc));
    dmin = mul(dmin_super, load_u8(group_k + kUnpackedKScaleBytes / 2 + sc));
  } else if constexpr (block_mins(kF)) {  // Q4_1, Q5_1: d, then -m
    dw = load_f16_aligned(group_sp + 2 * kLanes * u);
    dmin = load_f16_aligned(group_sp + kScaleBytes + 2 * kLanes * u);
  } else {
    dw = load_f16_aligned(group_sp + 2 * kLanes * u);
    dmin = zero();
  }
}

// At the start of each super-block (K-quants), the units' d and dmin.
template <WeightFormat kF, int H>
inline __attribute__((always_inline)) void load_super_scales(const std::uint8_t* sp, std::size_t gs,
                                                             std::size_t b, Vec (&d)[H],
                                                             Vec (&dmin)[H]) {
  constexpr int kUnits = static_cast<int>(kGroupRows / kLanes);
  // (Q6_K reads its d per block: holding it costs its tile more than the
  // load, measured by bench_kernels' BM_HotGemv.)
  if constexpr (super_mins(kF)) {
    if (b % kBlocksPerSuper == 0)
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) super_scales(sp + (h / kUnits) * gs, h % kUnits, d[h], dmin[h]);
  }
}
// At the start of each super-block (Q4_K, Q5_K), the sc and m of G row
// groups (scales at sp + i * gs) unpacked at k + i * kUnpackedKScaleBytes.
template <WeightFormat kF, int G>
inline __attribute__((always_inline)) void unpack_super_scales(const std::uint8_t* sp,
                                                               std::size_t gs, std::size_t b,
                                                               std::uint8_t* k) {
  if constexpr (super_mins(kF)) {
    if (b % kBlocksPerSuper == 0)
#pragma GCC unroll 4
      for (int i = 0; i < G; ++i) unpack_k_scales(sp + i * gs, k + i * kUnpackedKScaleBytes);
  }
}
// Q8_0's stored bytes (w + 128) of 4-input step s (0..7) of the unit whose
// block starts at u: Q8_0's own, or IQ4_NL's looked up in `table`
// (kIq4NlStored) from the low (s < 4) or high nibbles of step s % 4, Q4_0's
// pairing.
template <WeightFormat kF>
inline __attribute__((always_inline)) IVec stored_step(const std::uint8_t* u, int s,
                                                       [[maybe_unused]] IVec table) {
  if constexpr (kF == WeightFormat::kIQ4_NL) {
    const IVec raw = load_aligned(u + 64 * (s % 4));
    return lookup16(table, s < 4 ? low_nibbles(raw) : high_nibbles(raw));
  }
  return load_aligned(u + 64 * s);
}
// Where block b + 1's scales start, given block b's.
template <WeightFormat kF>
inline const std::uint8_t* next_scales(const std::uint8_t* sp, std::size_t b) {
  if constexpr (super_mins(kF))
    return (b + 1) % kBlocksPerSuper == 0 ? sp + kQ4KSuperScaleBytes : sp;
  if constexpr (block_mins(kF)) return sp + kBlockMinScaleBytes;
  return sp + kScaleBytes;
}
// A token's factor for a block's mins (Q4_K, Q5_K, Q4_1, Q5_1): its bias (-sum(q), kQ4KBias)
// times its scale d_x, or alone per token (d_x applies at the end).
template <bool kPerToken>
inline float token_min(float dx, std::int32_t bias) {
  return kPerToken ? static_cast<float>(bias) : dx * static_cast<float>(bias);
}

// Rows of output row group g that exist (the last group may be partial).
inline std::size_t rows_from(std::size_t n_out, std::size_t row0) {
  return row0 >= n_out ? 0 : (n_out - row0 < kLanes ? n_out - row0 : kLanes);
}

// Writes a tile's accumulators (units of row groups [g, g + G) x T tokens)
// to y (the tile's first token's row; per token, times its scale dp[j]).
template <int G, int T, bool kPerToken>
inline __attribute__((always_inline)) void store_tile(
    const Vec (&facc)[G * static_cast<int>(kGroupRows / kLanes)][T], std::size_t n_out,
    std::size_t g, const float* dp, float* y, std::size_t ldy) {
  constexpr int kUnits = static_cast<int>(kGroupRows / kLanes);
#pragma GCC unroll 8
  for (int h = 0; h < G * kUnits; ++h) {
    const std::size_t row0 = (g + h / kUnits) * kGroupRows + kLanes * (h % kUnits);
    const std::size_t rows = rows_from(n_out, row0);
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      Vec v = facc[h][j];
      if constexpr (kPerToken) v = mul(v, set1(dp[j]));
      float* out = y + j * ldy + row0;
      if (rows == kLanes) {
        storeu(out, v);
      } else if (rows != 0) {
        store_first(out, v, rows);
      }
    }
  }
}

// The walking pointers of a tile of row groups from g x tokens [j0, j0 + T)
// of token tile `tile`, one per stream, so the tile needs few registers:
// unit h's weights at wp + unit_bytes(h) (+ 64 per 4-input step), its
// scales at sp + (h / kUnits) * gs; the activations (4n bytes per 4-input
// step, n the activation tile's width) and their per-block bias, low sums
// and scales (per token: the tokens' scales, fixed).
template <bool kPerToken>
struct TileStreams {
  static constexpr int kUnits = static_cast<int>(kGroupRows / kLanes);
  const std::uint8_t* wp;
  const std::uint8_t* sp;
  const std::int8_t* xp;
  const std::int32_t* bp;
  const std::int32_t* lp;
  const float* dp;
  std::size_t n, gs, first;

  TileStreams(const PackedWeights& w, const QuantizedActivations& a, std::size_t g,
              std::size_t tile, std::size_t j0, std::size_t width)
      : n(width), gs(w.group_stride) {
    const std::size_t tile_first = tile * a.tile_tokens;  // the activation tile's first token
    first = tile_first + j0;                              // this register tile's
    wp = w.data + g * gs;
    sp = wp + w.scales_offset;
    xp = a.q + tile * a.q_tile_stride + 4 * j0;
    bp = a.bias + tile_first * a.blocks + j0;
    lp = a.low_sum + tile_first * a.blocks + j0;
    dp = a.d + (kPerToken ? first : tile_first * a.blocks + j0);
  }
  std::size_t unit_bytes(int h) const {
    return (h / kUnits) * gs + 4 * kLanes * static_cast<std::size_t>(h % kUnits);
  }
  // To the next block's weights (block_bytes on) and activations; the
  // scales move by format (next_scales).
  void next_block(std::size_t block_bytes) {
    wp += block_bytes;
    xp += 4 * n * 8;
    bp += n;
    lp += n;
    if constexpr (!kPerToken) dp += n;
  }
};

// Prefetches lines [k0, k1) of block b's share of pf (pf_lines lines per
// block) into L2. The tiles issue lines 0..7 of a block's share spread over
// its steps, between their loads, and any further lines (a step of one or
// two token tiles fetches more than 8 per block) at its start: a prefetch
// waits for a line-fill buffer, and bunched at the block's start they held
// the core longer (docs/performance-batching.md, "Prefetches spread").
inline __attribute__((always_inline)) void prefetch_share(const std::uint8_t* pf, std::size_t b,
                                                          std::size_t pf_lines, std::size_t k0,
                                                          std::size_t k1) {
  if (pf != nullptr)
    for (std::size_t k = k0; k < pf_lines && k < k1; ++k)
      _mm_prefetch(reinterpret_cast<const char*>(pf + 64 * (b * pf_lines + k)), _MM_HINT_T1);
}
// A block's steps issue lines [0, kSpreadLines) of its share; its start
// issues [kSpreadLines, kRestOfShare), i.e. every line after those.
inline constexpr std::size_t kSpreadLines = 8;
inline constexpr std::size_t kRestOfShare = ~std::size_t{0};

// Decode (one token) only: fetches into L1 the block kAhead blocks past wp
// in each of the tile's G row groups (group stride gs). Blocks with more
// instructions per byte than Q8_0's (int4, and more so 5- and 6-bit) leave
// the hardware prefetcher behind the tile (docs/performance.md).
template <int G, std::size_t kBlockBytes, std::size_t kAhead>
inline __attribute__((always_inline)) void prefetch_decode_blocks(const std::uint8_t* wp,
                                                                  std::size_t gs) {
  if constexpr (kAhead > 0) {
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i)
#pragma GCC unroll 6
      for (std::size_t c = 0; c < kBlockBytes / 64; ++c)
        _mm_prefetch(reinterpret_cast<const char*>(wp + i * gs + kAhead * kBlockBytes + 64 * c),
                     _MM_HINT_T0);
  }
}

// Decode (one token) only: fetches into L1 the scales ahead of block b's in
// the tile's G row groups (group stride gs), a short stream of their own
// beside the blocks' that the hardware prefetcher is late to. Q4_K and Q5_K
// take the next super-block's at a super-block's start; the formats with a
// scale per block (32 or 64 bytes) the line kScaleLinesAhead lines on, once
// per line. (Q6_K, which reads its d every block, ran no faster with it, and
// Q8_0's blocks leave the hardware prefetcher time: docs/performance.md.)
inline constexpr std::size_t kScaleLinesAhead = 8;
template <WeightFormat kF, int G>
inline __attribute__((always_inline)) void prefetch_scales(const std::uint8_t* sp, std::size_t gs,
                                                           std::size_t b, std::size_t blocks) {
  if constexpr (super_mins(kF)) {
    if (b % kBlocksPerSuper != 0 || b + kBlocksPerSuper >= blocks) return;
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i)
#pragma GCC unroll 4
      for (std::size_t c = 0; c < kQ4KSuperScaleBytes / 64; ++c)
        _mm_prefetch(reinterpret_cast<const char*>(sp + i * gs + kQ4KSuperScaleBytes + 64 * c),
                     _MM_HINT_T0);
  } else if constexpr (kF != WeightFormat::kQ6_K && kF != WeightFormat::kQ8_0) {
    constexpr std::size_t kBytes = block_mins(kF) ? kBlockMinScaleBytes : kScaleBytes;
    if (b * kBytes % 64 != 0) return;  // the line was fetched with an earlier block's
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i)
      _mm_prefetch(reinterpret_cast<const char*>(sp + i * gs + 64 * kScaleLinesAhead), _MM_HINT_T0);
  }
}

// Row groups [g, g + G) x tokens [j0, j0 + T) of token tile `tile`, whose
// width is n. kWidth, when not 0, is n known at compile time (the decode
// GEMV's 1, or a tile as wide as T), so its address arithmetic folds into
// constants. When `pf` is not null, the tile also prefetches a.blocks x
// pf_lines cache lines from it into L2, pf_lines per block.
template <int G, int T, WeightFormat kF, bool kPerToken, std::size_t kWidth>
void tile_blocks(const PackedWeights& w, const QuantizedActivations& a, std::size_t g,
                 std::size_t tile, std::size_t j0, std::size_t width, float* y, std::size_t ldy,
                 const std::uint8_t* pf, std::size_t pf_lines) {
  constexpr int kUnits = static_cast<int>(kGroupRows / kLanes);
  constexpr int H = G * kUnits;
  constexpr bool kNibbles = kF != WeightFormat::kQ8_0;
  constexpr bool kSuper = kF == WeightFormat::kQ4_K;  // scales per super-block
  constexpr bool kMins = has_mins(kF);                // Q4_K, Q4_1
  // IQ4_NL: nibbles looked up as Q8_0's stored bytes (kIq4NlStored).
  constexpr bool kLookup = kF == WeightFormat::kIQ4_NL;
  constexpr std::size_t kBlockBytes = kNibbles ? kQ4BlockBytes : kQ8BlockBytes;
  TileStreams<kPerToken> at(w, a, g, tile, j0, kWidth != 0 ? kWidth : width);
  const std::size_t n = at.n, gs = at.gs;
  auto unit_bytes = [&](int h) { return at.unit_bytes(h); };
  const std::uint8_t*& wp = at.wp;
  const std::int8_t*& xp = at.xp;
  const std::int32_t*& bp = at.bp;
  const float*& dp = at.dp;
  Vec facc[H][T];
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) facc[h][j] = zero();
  // Set at block 0 (a super-block's first); zeroed for the compiler's sake.
  [[maybe_unused]] Vec d_super[H], dmin_super[H];
  alignas(64) std::uint8_t k_scales[kSuper ? G * kUnpackedKScaleBytes : 64];
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h) d_super[h] = dmin_super[h] = zero();
  const IVec table = kLookup ? table16(kIq4NlStored) : IVec{};

  const bool prefetch_blocks = T == 1 && a.decode_prefetch;
  for (std::size_t b = 0; b < a.blocks; ++b) {
    prefetch_share(pf, b, pf_lines, kSpreadLines, kRestOfShare);
    load_super_scales<kF, H>(at.sp, gs, b, d_super, dmin_super);
    unpack_super_scales<kF, G>(at.sp, gs, b, k_scales);
    IVec acc[H][T];
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j)
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) acc[h][j] = block_start<kF>(bp + j);
    if constexpr (kNibbles) {
      if (prefetch_blocks) {
        prefetch_decode_blocks<G, kBlockBytes, kQ4DecodePrefetchBlocks>(wp, gs);
        prefetch_scales<kF, G>(at.sp, gs, b, a.blocks);
      }
    }
    if constexpr (kNibbles && !kLookup) {
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        prefetch_share(pf, b, pf_lines, 2 * c, 2 * c + 2);
        IVec lo[H], hi[H];
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h) {
          const IVec raw = load_aligned(wp + unit_bytes(h) + 64 * c);
          lo[h] = low_nibbles(raw);
          hi[h] = high_nibbles(raw);
        }
#pragma GCC unroll 8
        for (int j = 0; j < T; ++j) {
          const IVec xlo = broadcast4(xp + 4 * n * c + 4 * j);
          const IVec xhi = broadcast4(xp + 4 * n * (c + 4) + 4 * j);
#pragma GCC unroll 8
          for (int h = 0; h < H; ++h) acc[h][j] = q4_products(acc[h][j], lo[h], hi[h], xlo, xhi);
        }
      }
    } else {  // Q8_0's stored bytes, IQ4_NL's looked up
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        prefetch_share(pf, b, pf_lines, s, s + 1);
        Q8Unit wu[H];
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h) wu[h] = q8_unit(stored_step<kF>(wp + unit_bytes(h), s, table));
#pragma GCC unroll 8
        for (int j = 0; j < T; ++j) {
          const IVec xv = broadcast4(xp + 4 * n * s + 4 * j);
#pragma GCC unroll 8
          for (int h = 0; h < H; ++h) acc[h][j] = q8_products(acc[h][j], wu[h], xv);
        }
      }
    }
    [[maybe_unused]] float xmin[T];
    if constexpr (kMins)
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) xmin[j] = token_min<kPerToken>(dp[j], bp[j]);
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) {
      Vec dw, dmin;
      // (Formats other than Q4_K read their scales in place: k_scales is a stub.)
      const std::uint8_t* group_k = nullptr;
      if constexpr (kSuper) group_k = k_scales + (h / kUnits) * kUnpackedKScaleBytes;
      unit_scales<kF>(at.sp + (h / kUnits) * gs, group_k, h % kUnits, b, d_super[h], dmin_super[h],
                      dw, dmin);
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const Vec fdot = to_float(block_finish<kF>(acc[h][j], bp + j));
        if constexpr (kPerToken) {
          facc[h][j] = fmadd(fdot, dw, facc[h][j]);
        } else {
          facc[h][j] = fmadd(fdot, mul(dw, set1(dp[j])), facc[h][j]);
        }
        if constexpr (kMins) facc[h][j] = fmadd(dmin, set1(xmin[j]), facc[h][j]);
      }
    }
    at.sp = next_scales<kF>(at.sp, b);
    at.next_block(kBlockBytes);
  }

  store_tile<G, T, kPerToken>(facc, w.n_out, g, dp, y + at.first * ldy, ldy);
}

// The q of inputs 4C..4C+7 and 16+4C..16+4C+7 (C = 0 or 2) of the Q5_K or
// Q6_K unit (kLanes rows) whose block starts at u, as four q-vectors of 4
// inputs each (kernels/linear_impl.h's layouts): Q5_K's five steps, Q6_K's
// triple C / 2; the q-vectors in a step's low bits take a mask, the others
// are gathered from the steps' top bits (each moved to its place and
// masked, the masks keeping only bits of the same byte).
template <WeightFormat kF, int C>
inline __attribute__((always_inline)) void wide_steps(const std::uint8_t* u, IVec& lo0, IVec& lo1,
                                                      IVec& hi0, IVec& hi1) {
  if constexpr (kF == WeightFormat::kQ6_K) {
    const std::uint8_t* triple = u + 3 * 64 * (C / 2);
    const IVec s0 = load_aligned(triple), s1 = load_aligned(triple + 64);
    const IVec s2 = load_aligned(triple + 128);
    lo0 = and_bytes(s0, 0x3f);
    lo1 = and_bytes(s1, 0x3f);
    hi0 = and_bytes(s2, 0x3f);
    const IVec bits01 = and_bytes(shift_right_16<6>(s0), 0x03);
    const IVec bits23 = and_bytes(shift_right_16<4>(s1), 0x0c);
    hi1 = or_bits(or_bits(bits01, bits23), and_bytes(shift_right_16<2>(s2), 0x30));
  } else {
    // H_1 (C = 0) or H_2 (C = 2): bits 0-2 atop step a, 3-4 atop step b.
    auto gather = [](IVec a, IVec b) {
      return or_bits(and_bytes(shift_right_16<5>(a), 0x07), and_bytes(shift_right_16<2>(b), 0x18));
    };
    const IVec s1 = load_aligned(u + 64), s2 = load_aligned(u + 128);
    if constexpr (C == 0) {
      const IVec s0 = load_aligned(u);
      lo0 = and_bytes(s0, 0x1f);
      lo1 = and_bytes(s1, 0x1f);
      hi0 = and_bytes(s2, 0x1f);
      hi1 = gather(s0, s1);
    } else {
      const IVec s3 = load_aligned(u + 192), s4 = load_aligned(u + 256);
      lo0 = and_bytes(s3, 0x1f);
      lo1 = and_bytes(s4, 0x1f);
      hi0 = gather(s2, s3);
      const IVec h3 =
          or_bits(and_bytes(shift_right_16<5>(s4), 0x07), and_bytes(shift_right_16<4>(s3), 0x08));
      hi1 = or_bits(h3, and_bytes(shift_right_16<3>(s1), 0x10));
    }
  }
}

// Q6_K's scales of block b for unit u of the group whose scales (this
// super-block's) start at unit_sp: the rows' d, and the int8 sc of the
// block's two halves (sub-blocks of 16) as int32 lanes.
inline __attribute__((always_inline)) void q6_k_scales(const std::uint8_t* unit_sp, std::size_t u,
                                                       std::size_t b, Vec& d, IVec& sc_lo,
                                                       IVec& sc_hi) {
  const std::size_t sub = 2 * (b % kBlocksPerSuper);  // the low half's sub-block of 16
  d = load_f16_aligned(unit_sp + 2 * kLanes * u);
  const auto* sc = reinterpret_cast<const std::int8_t*>(unit_sp + kQ6KScOffset + kLanes * u);
  sc_lo = load_i8_int(sc + kGroupRows * sub);
  sc_hi = load_i8_int(sc + kGroupRows * (sub + 1));
}

// Q6_K's -32 offsets of a block's low and high half for one token: 32
// times its codes' sums (kQ6KBias: bias = -(low + high); *lp the low half's).
inline std::int32_t q6_k_low_offset(const std::int32_t* lp) { return -32 * *lp; }
inline std::int32_t q6_k_high_offset(const std::int32_t* bp, const std::int32_t* lp) {
  return 32 * (*bp + *lp);
}

// Q6_K's end of a block for one (unit, token): each half's dot product (with
// its offset added here unless kOffsetsAdded) times its sc, summed in int32
// (exact: at most 2 x 16 x 32 x 127 x 128 < 2^24), then one fma with d
// (and, per block, the token's *dp).
template <bool kPerToken, bool kOffsetsAdded = false>
inline __attribute__((always_inline)) Vec finish_q6_k(IVec lo_acc, IVec hi_acc, Vec d, IVec sc_lo,
                                                      IVec sc_hi, const std::int32_t* bp,
                                                      const std::int32_t* lp, const float* dp,
                                                      Vec facc) {
  const IVec lo = kOffsetsAdded ? lo_acc : add_int(lo_acc, set1_int(q6_k_low_offset(lp)));
  const IVec hi = kOffsetsAdded ? hi_acc : add_int(hi_acc, set1_int(q6_k_high_offset(bp, lp)));
  const Vec dot = to_float(add_int(mul_int(lo, sc_lo), mul_int(hi, sc_hi)));
  return fmadd(dot, kPerToken ? d : mul(d, set1(*dp)), facc);
}

// Q5_K, Q5_0, Q5_1 and Q6_K: row groups [g, g + G) x tokens [j0, j0 + T) of
// token tile `tile`, as tile_blocks() (same walk, same epilogue), for q wider
// than a nibble (wide_steps unpacks them): the block's halves (inputs 0..15
// and 16..31) get their own int32 sums, widened every two steps. Q6_K's
// halves are sub-blocks, each with its -32 offset and scale; the 5-bit
// formats add them: Q5_K then takes Q4_K's scales and mins, Q5_1 its block's
// d and -m, and Q5_0 its block's d, its low half starting at its bias (C =
// kQ5Bias).
template <int G, int T, WeightFormat kF, bool kPerToken, std::size_t kWidth>
void tile_wide(const PackedWeights& w, const QuantizedActivations& a, std::size_t g,
               std::size_t tile, std::size_t j0, std::size_t width, float* y, std::size_t ldy,
               const std::uint8_t* pf, std::size_t pf_lines) {
  constexpr int kUnits = static_cast<int>(kGroupRows / kLanes);
  constexpr int H = G * kUnits;
  TileStreams<kPerToken> at(w, a, g, tile, j0, kWidth != 0 ? kWidth : width);
  const std::size_t n = at.n, gs = at.gs;
  auto unit_bytes = [&](int h) { return at.unit_bytes(h); };
  const std::uint8_t*& wp = at.wp;
  const std::int8_t*& xp = at.xp;
  const std::int32_t*& bp = at.bp;
  const std::int32_t*& lp = at.lp;
  const float*& dp = at.dp;
  constexpr bool kSix = kF == WeightFormat::kQ6_K;
  constexpr std::size_t kBlockBytes = kSix ? kQ6BlockBytes : kQ5BlockBytes;
  // One token: nothing to reuse across tokens, so each unit is unpacked and
  // multiplied before the next. Unpacking all H units first spilled most of
  // them to the stack with 16 registers, and some with 32 (the AVX-512 Q5_K
  // tile ran 6% slower; docs/performance.md).
  constexpr bool kUnitAtATime = T == 1;
  Vec facc[H][T];
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) facc[h][j] = zero();
  Vec d_super[H], dmin_super[H];                          // set at block 0 (a super-block's first)
  constexpr bool kSuperMins = kF == WeightFormat::kQ5_K;  // scales per super-block
  alignas(64) std::uint8_t k_scales[kSuperMins ? G * kUnpackedKScaleBytes : 64];
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h) d_super[h] = dmin_super[h] = zero();

  const bool prefetch_blocks = T == 1 && a.decode_prefetch;
  for (std::size_t b = 0; b < a.blocks; ++b) {
    prefetch_share(pf, b, pf_lines, kSpreadLines, kRestOfShare);
    load_super_scales<kF, H>(at.sp, gs, b, d_super, dmin_super);
    unpack_super_scales<kF, G>(at.sp, gs, b, k_scales);
    if (prefetch_blocks) {
      prefetch_decode_blocks<G, kBlockBytes, kWideDecodePrefetchBlocks>(wp, gs);
      prefetch_scales<kF, G>(at.sp, gs, b, a.blocks);
    }
    IVec lo_acc[H][T], hi_acc[H][T];
    // The 5-bit formats' GEMM tiles (T > 1) sum both halves into lo_acc:
    // their halves share one scale, and two int32 sums per (unit, token)
    // would not fit the registers beside the float ones. (The decode tile
    // keeps the two chains: more independent sums hide the dot product's
    // latency.)
    constexpr bool kOneSum = !kSix && T > 1;
    auto& hi_sum = [&]() -> IVec(&)[H][T] {
      if constexpr (kOneSum) return lo_acc;
      return hi_acc;
    }();
    // Q6_K's halves start at their -32 offsets in the GEMM tiles, and get
    // them at the end in the decode tile: each order measured faster where
    // it is used (docs/performance.md); the sums are the same integers.
    constexpr bool kOffsetsFirst = kSix && T > 1;
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const IVec lo_start = set1_int(kF == WeightFormat::kQ5_0 ? bp[j]
                                     : kOffsetsFirst           ? q6_k_low_offset(lp + j)
                                                               : 0);
      const IVec hi_start = set1_int(kOffsetsFirst ? q6_k_high_offset(bp + j, lp + j) : 0);
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) {
        lo_acc[h][j] = lo_start;
        hi_acc[h][j] = hi_start;
      }
    }
    // The q-vectors of inputs 4C.. and 4C + 4.. (and 16 + 4C.., 16 + 4C + 4..)
    // together: the maddubs cores sum their int16 pairs before widening
    // (2 x 2 x 63 x 127 < 32768).
    auto steps = [&]<int C>() {
      prefetch_share(pf, b, pf_lines, 2 * C, 2 * C + 4);
      if constexpr (kUnitAtATime) {
        const IVec xl0 = broadcast4(xp + 4 * n * C), xl1 = broadcast4(xp + 4 * n * (C + 1));
        const IVec xh0 = broadcast4(xp + 4 * n * (C + 4)), xh1 = broadcast4(xp + 4 * n * (C + 5));
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h) {
          IVec lo0, lo1, hi0, hi1;
          wide_steps<kF, C>(wp + unit_bytes(h), lo0, lo1, hi0, hi1);
          lo_acc[h][0] = pair_products(lo_acc[h][0], lo0, xl0, lo1, xl1);
          hi_acc[h][0] = pair_products(hi_acc[h][0], hi0, xh0, hi1, xh1);
        }
        return;
      }
      IVec lo0[H], lo1[H], hi0[H], hi1[H];
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h)
        wide_steps<kF, C>(wp + unit_bytes(h), lo0[h], lo1[h], hi0[h], hi1[h]);
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const IVec xl0 = broadcast4(xp + 4 * n * C + 4 * j);
        const IVec xl1 = broadcast4(xp + 4 * n * (C + 1) + 4 * j);
        const IVec xh0 = broadcast4(xp + 4 * n * (C + 4) + 4 * j);
        const IVec xh1 = broadcast4(xp + 4 * n * (C + 5) + 4 * j);
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h) {
          lo_acc[h][j] = pair_products(lo_acc[h][j], lo0[h], xl0, lo1[h], xl1);
          hi_sum[h][j] = pair_products(hi_sum[h][j], hi0[h], xh0, hi1[h], xh1);
        }
      }
    };
    steps.template operator()<0>();
    steps.template operator()<2>();
    if constexpr (kSix) {
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) {
        Vec d;
        IVec sc_lo, sc_hi;
        q6_k_scales(at.sp + (h / kUnits) * gs, static_cast<std::size_t>(h % kUnits), b, d, sc_lo,
                    sc_hi);
#pragma GCC unroll 8
        for (int j = 0; j < T; ++j)
          facc[h][j] = finish_q6_k<kPerToken, kOffsetsFirst>(
              lo_acc[h][j], hi_acc[h][j], d, sc_lo, sc_hi, bp + j, lp + j, dp + j, facc[h][j]);
      }
    } else {
      constexpr bool kMins = has_mins(kF);
      [[maybe_unused]] float xmin[T];
      if constexpr (kMins)
#pragma GCC unroll 8
        for (int j = 0; j < T; ++j) xmin[j] = token_min<kPerToken>(dp[j], bp[j]);
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) {
        Vec dw, dmin;
        const std::uint8_t* group_k = nullptr;  // (a stub unless kSuperMins)
        if constexpr (kSuperMins) group_k = k_scales + (h / kUnits) * kUnpackedKScaleBytes;
        unit_scales<kF>(at.sp + (h / kUnits) * gs, group_k, h % kUnits, b, d_super[h],
                        dmin_super[h], dw, dmin);
#pragma GCC unroll 8
        for (int j = 0; j < T; ++j) {
          const Vec fdot = to_float(kOneSum ? lo_acc[h][j] : add_int(lo_acc[h][j], hi_acc[h][j]));
          facc[h][j] = kPerToken ? fmadd(fdot, dw, facc[h][j])
                                 : fmadd(fdot, mul(dw, set1(dp[j])), facc[h][j]);
          if constexpr (kMins) facc[h][j] = fmadd(dmin, set1(xmin[j]), facc[h][j]);
        }
      }
    }
    if constexpr (kSix) {
      if ((b + 1) % kBlocksPerSuper == 0) at.sp += kQ6KSuperScaleBytes;
    } else {
      at.sp = next_scales<kF>(at.sp, b);
    }
    at.next_block(kBlockBytes);
  }
  store_tile<G, T, kPerToken>(facc, w.n_out, g, dp, y + at.first * ldy, ldy);
}

// The register tile of every format (tile_blocks's comment above).
template <int G, int T, WeightFormat kF, bool kPerToken, std::size_t kWidth = 0>
void tile(const PackedWeights& w, const QuantizedActivations& a, std::size_t g, std::size_t tile,
          std::size_t j0, std::size_t width, float* y, std::size_t ldy,
          const std::uint8_t* pf = nullptr, std::size_t pf_lines = 0) {
  if constexpr (five_bit(kF) || kF == WeightFormat::kQ6_K) {
    tile_wide<G, T, kF, kPerToken, kWidth>(w, a, g, tile, j0, width, y, ldy, pf, pf_lines);
  } else {
    tile_blocks<G, T, kF, kPerToken, kWidth>(w, a, g, tile, j0, width, y, ldy, pf, pf_lines);
  }
}

// Calls f.template operator()<N>() for the N in 1..kMax equal to n (a width
// known at run time, as a template argument); nothing when n is outside.
template <int kMax, typename F>
inline __attribute__((always_inline)) void with_width(std::size_t n, F&& f) {
  const auto pick = [&]<int... Ns>(std::integer_sequence<int, Ns...>) {
    (void)((n == Ns + 1 && (f.template operator()<Ns + 1>(), true)) || ...);
  };
  pick(std::make_integer_sequence<int, kMax>{});
}

// tile<G, T> for a whole token tile of `tokens` (1..kMaxT) tokens, T chosen
// at run time.
template <int G, int kMaxT, WeightFormat kF, bool kPerToken>
void whole_tile(std::size_t tokens, const PackedWeights& w, const QuantizedActivations& a,
                std::size_t g, std::size_t p, float* y, std::size_t ldy,
                const std::uint8_t* pf = nullptr, std::size_t pf_lines = 0) {
  with_width<kMaxT>(tokens, [&]<int T>() {
    tile<G, T, kF, kPerToken, T>(w, a, g, p, 0, T, y, ldy, pf, pf_lines);
  });
}

// The schedule of the 16-row (one vector per group) ISAs. Decode (one
// token): 4 x 1 tiles, so that four independent chains hide the dot
// product's latency. Otherwise two row groups at a time, each pair over
// every token tile: the pair's weights (2 x 16 rows x n_in) stay in L2 while
// all tokens stream past. With kPrefetchNextPair the tiles meanwhile prefetch
// the next pair's weights into L2, each its share (a slice of pf_lines lines
// per block), so that with few tiles (a batched decode step of 8-16 rows) the
// whole next pair still arrives while this one computes, instead of the
// cores stalling on DRAM. The pair after g1 is fetched too: a pool thread
// walks its range forwards, so its next call usually starts there
// (kernels/thread_pool.cc), and a call's first pair would otherwise wait
// on DRAM.
template <WeightFormat kF, bool kPerToken, int kMaxT, bool kPrefetchNextPair>
void run_in_group_pairs(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0,
                        std::size_t g1, std::size_t t0, std::size_t t1, float* y, std::size_t ldy) {
  const std::size_t tt = a.tile_tokens;
  const std::size_t p0 = t0 / tt, p1 = (t1 + tt - 1) / tt;
  auto tokens = [&](std::size_t p) { return a.m - p * tt < tt ? a.m - p * tt : tt; };
  std::size_t g = g0;
  if (p1 - p0 == 1 && tokens(p0) == 1) {
    for (; g + 4 <= g1; g += 4) tile<4, 1, kF, kPerToken, 1>(w, a, g, p0, 0, 1, y, ldy);
  }
  const std::size_t slice = a.blocks * 64;
  const std::size_t tiles = p1 - p0;
  const std::size_t pair_slices = (2 * w.group_stride + slice - 1) / slice;
  // Each tile fetches an equal share, whole: a step of one token tile (2-6
  // decode rows) prefetches the entire next pair itself, since its few
  // multiply-adds leave the hardware prefetcher too little time to.
  const std::size_t pf_lines = kPrefetchNextPair ? (pair_slices + tiles - 1) / tiles : 0;
  const std::size_t all = (w.n_out + kGroupRows - 1) / kGroupRows;  // the matrix's groups
  for (; g + 2 <= g1; g += 2) {
    const std::size_t next = g + 2 < all ? (all - g - 2 < 2 ? all - g - 2 : 2) : 0;
    const std::uint8_t* pf = w.data + (g + 2) * w.group_stride;
    for (std::size_t p = p0; p < p1; ++p) {
      const std::size_t off = (p - p0) * slice * pf_lines;
      const bool fetch = kPrefetchNextPair && off < next * w.group_stride;
      whole_tile<2, kMaxT, kF, kPerToken>(tokens(p), w, a, g, p, y, ldy, fetch ? pf + off : nullptr,
                                          pf_lines);
    }
  }
  if (g < g1)
    for (std::size_t p = p0; p < p1; ++p)
      whole_tile<1, kMaxT, kF, kPerToken>(tokens(p), w, a, g, p, y, ldy);
}
