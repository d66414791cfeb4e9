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
// block's scales, in the order kernels/linear.h documents (so every ISA gives
// the same bits).
//
// Primitives (besides the float set of kernels/simd_avx2.h / simd_avx512.h):
//   IVec, load_aligned(p)           kLanes x 4 bytes of packed weights (aligned)
//   broadcast4(p)                the 4 bytes at p in every 32-bit lane
//   load_f16_aligned(p)               kLanes fp16 scales as floats
//   to_float(IVec)               int32 lanes as floats
//   low_nibbles(v), high_nibbles(v)
//   block_start<kQ4>(bias)       an accumulator at the start of a block
//   q4_products(acc, lo, hi, xlo, xhi)   acc + the products of 8 inputs
//   block_finish<kQ4>(acc, bias) the block's int32 dot products
//   Q8Unit, q8_unit(stored), q8_products(acc, unit, x)
//   kQ4DecodePrefetchBlocks      0, or how far ahead the decode tile
//                                prefetches int4 blocks itself

// Rows of output row group g that exist (the last group may be partial).
inline std::size_t rows_from(std::size_t n_out, std::size_t row0) {
  return row0 >= n_out ? 0 : (n_out - row0 < kLanes ? n_out - row0 : kLanes);
}

// Row groups [g, g + G) x tokens [j0, j0 + T) of token tile `tile`, whose
// width is n. kWidth, when not 0, is n known at compile time (the decode
// GEMV's 1, or a tile as wide as T), so its address arithmetic folds into
// constants. When `pf` is not null, the tile also prefetches a.blocks x
// pf_lines cache lines from it into L2, pf_lines per block.
template <int G, int T, bool kQ4, bool kPerToken, std::size_t kWidth = 0>
void tile(const PackedWeights& w, const QuantizedActivations& a, std::size_t g, std::size_t tile,
          std::size_t j0, std::size_t width, float* y, std::size_t ldy,
          const std::uint8_t* pf = nullptr, std::size_t pf_lines = 0) {
  constexpr int kUnits = static_cast<int>(kGroupRows / kLanes);
  constexpr int H = G * kUnits;
  constexpr std::size_t kUnitBytes = 4 * kLanes;
  constexpr std::size_t kBlockBytes = kQ4 ? kQ4BlockBytes : kQ8BlockBytes;
  const std::size_t n = kWidth != 0 ? kWidth : width;
  const std::size_t gs = w.group_stride;
  const std::size_t tile_first = tile * a.tile_tokens;  // the activation tile's first token
  const std::size_t first = tile_first + j0;            // this register tile's
  // Walking pointers, one per stream, so the tile needs few registers: unit
  // h's weights at wp + (h / kUnits) * gs + kUnitBytes * (h % kUnits) (+ 64
  // per 4-input step), its scales likewise; the activations (4n bytes per
  // 4-input step), the per-block bias and scales.
  const std::uint8_t* wp = w.data + g * gs;
  const std::uint8_t* sp = wp + w.scales_offset;
  const std::int8_t* xp = a.q + tile * a.q_tile_stride + 4 * j0;
  const std::int32_t* bp = a.bias + tile_first * a.blocks + j0;
  const float* dp = a.d + (kPerToken ? first : tile_first * a.blocks + j0);
  auto unit_bytes = [&](int h) { return (h / kUnits) * gs + kUnitBytes * (h % kUnits); };
  Vec facc[H][T];
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) facc[h][j] = zero();

  for (std::size_t b = 0; b < a.blocks; ++b) {
    if (pf != nullptr)
      for (std::size_t k = 0; k < pf_lines; ++k)
        _mm_prefetch(reinterpret_cast<const char*>(pf + 64 * (b * pf_lines + k)), _MM_HINT_T1);
    IVec acc[H][T];
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j)
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) acc[h][j] = block_start<kQ4>(bp + j);
    if constexpr (kQ4) {
      if constexpr (T == 1 && kQ4DecodePrefetchBlocks > 0) {
        // Decode: int4 blocks cost more instructions per byte than int8, so
        // the hardware prefetcher runs less far ahead; fetch the block
        // kQ4DecodePrefetchBlocks ahead of each group ourselves.
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i)
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c)
            _mm_prefetch(reinterpret_cast<const char*>(
                             wp + i * gs + kQ4DecodePrefetchBlocks * kBlockBytes + 64 * c),
                         _MM_HINT_T0);
      }
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
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
    } else {
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        Q8Unit wu[H];
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h) wu[h] = q8_unit(load_aligned(wp + unit_bytes(h) + 64 * s));
#pragma GCC unroll 8
        for (int j = 0; j < T; ++j) {
          const IVec xv = broadcast4(xp + 4 * n * s + 4 * j);
#pragma GCC unroll 8
          for (int h = 0; h < H; ++h) acc[h][j] = q8_products(acc[h][j], wu[h], xv);
        }
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) {
      const Vec dw = load_f16_aligned(sp + (h / kUnits) * gs + 2 * kLanes * (h % kUnits));
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const Vec fdot = to_float(block_finish<kQ4>(acc[h][j], bp + j));
        if constexpr (kPerToken) {
          facc[h][j] = fmadd(fdot, dw, facc[h][j]);
        } else {
          facc[h][j] = fmadd(fdot, mul(dw, set1(dp[j])), facc[h][j]);
        }
      }
    }
    wp += kBlockBytes;
    sp += kScaleBytes;
    xp += 4 * n * 8;
    bp += n;
    if constexpr (!kPerToken) dp += n;
  }

#pragma GCC unroll 8
  for (int h = 0; h < H; ++h) {
    const std::size_t row0 = (g + h / kUnits) * kGroupRows + kLanes * (h % kUnits);
    const std::size_t rows = rows_from(w.n_out, row0);
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      Vec v = facc[h][j];
      if constexpr (kPerToken) v = mul(v, set1(dp[j]));
      float* out = y + (first + j) * ldy + row0;
      if (rows == kLanes) {
        storeu(out, v);
      } else if (rows != 0) {
        store_first(out, v, rows);
      }
    }
  }
}

// tile<G, T> for a whole token tile of `tokens` (1..kMaxT) tokens, T chosen
// at run time.
template <int G, bool kQ4, bool kPerToken, int... Ts>
void whole_tile(std::size_t tokens, const PackedWeights& w, const QuantizedActivations& a,
                std::size_t g, std::size_t p, float* y, std::size_t ldy, const std::uint8_t* pf,
                std::size_t pf_lines, std::integer_sequence<int, Ts...>) {
  (void)((tokens == Ts + 1 &&
          (tile<G, Ts + 1, kQ4, kPerToken, Ts + 1>(w, a, g, p, 0, Ts + 1, y, ldy, pf, pf_lines),
           true)) ||
         ...);
}
template <int G, int kMaxT, bool kQ4, bool kPerToken>
void whole_tile(std::size_t tokens, const PackedWeights& w, const QuantizedActivations& a,
                std::size_t g, std::size_t p, float* y, std::size_t ldy,
                const std::uint8_t* pf = nullptr, std::size_t pf_lines = 0) {
  whole_tile<G, kQ4, kPerToken>(tokens, w, a, g, p, y, ldy, pf, pf_lines,
                                std::make_integer_sequence<int, kMaxT>{});
}

// At most this many lines per block a GEMM tile prefetches of the next pair
// of row groups (more competes with the tile's own loads).
constexpr std::size_t kMaxPrefetchLines = 4;

// The schedule of the 16-row (one vector per group) ISAs. Decode (one
// token): 4 x 1 tiles, so that four independent chains hide the dot
// product's latency. Otherwise two row groups at a time, each pair over
// every token tile: the pair's weights (2 x 16 rows x n_in) stay in L2 while
// all tokens stream past. With kPrefetchNextPair the tiles meanwhile prefetch
// the next pair's weights into L2, each its share (a slice of pf_lines lines
// per block), so that with few tiles (a batched decode step of 8-16 rows) the
// whole next pair still arrives while this one computes, instead of the
// cores stalling on DRAM.
template <bool kQ4, bool kPerToken, int kMaxT, bool kPrefetchNextPair>
void run_in_group_pairs(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0,
                        std::size_t g1, std::size_t t0, std::size_t t1, float* y, std::size_t ldy) {
  const std::size_t tt = a.tile_tokens;
  const std::size_t p0 = t0 / tt, p1 = (t1 + tt - 1) / tt;
  auto tokens = [&](std::size_t p) { return a.m - p * tt < tt ? a.m - p * tt : tt; };
  std::size_t g = g0;
  if (p1 - p0 == 1 && tokens(p0) == 1) {
    for (; g + 4 <= g1; g += 4) tile<4, 1, kQ4, kPerToken, 1>(w, a, g, p0, 0, 1, y, ldy);
  }
  const std::size_t slice = a.blocks * 64;
  const std::size_t tiles = p1 - p0;
  const std::size_t pair_slices = (2 * w.group_stride + slice - 1) / slice;
  const std::size_t pf_lines =
      kPrefetchNextPair
          ? std::min<std::size_t>((pair_slices + tiles - 1) / tiles, kMaxPrefetchLines)
          : 0;
  for (; g + 2 <= g1; g += 2) {
    const std::size_t next = g + 2 < g1 ? (g1 - g - 2 < 2 ? g1 - g - 2 : 2) : 0;
    const std::uint8_t* pf = w.data + (g + 2) * w.group_stride;
    for (std::size_t p = p0; p < p1; ++p) {
      const std::size_t off = (p - p0) * slice * pf_lines;
      const bool fetch = kPrefetchNextPair && off < next * w.group_stride;
      whole_tile<2, kMaxT, kQ4, kPerToken>(tokens(p), w, a, g, p, y, ldy,
                                           fetch ? pf + off : nullptr, pf_lines);
    }
  }
  if (g < g1)
    for (std::size_t p = p0; p < p1; ++p)
      whole_tile<1, kMaxT, kQ4, kPerToken>(tokens(p), w, a, g, p, y, ldy);
}
