// The matmul of float weights stored as halves (kernels/linear_impl.h's
// HalfMatmulFn, F16 and BF16), written once for every vector ISA. Not a
// normal header: linear_avx2.cc, linear_avx512.cc and linear_avx512vnni.cc
// include it inside their anonymous namespace after
// kernels/linear_tile_body.h (whose store_tile and with_width it uses), with
// their float primitives (load_f16, load_bf16, set1, fmadd, zero) and two
// tile shapes defined:
//   kHalfGemvGroups   row groups of a one-token tile (independent fma chains
//                     enough to hide the fma's latency)
//   kHalfGemmGroups, kHalfGemmTokens   the register tile of several tokens
//                     (units x tokens each at most 8, the loops' unroll
//                     pragmas: longer loops keep their accumulators in memory)
// Each (row, token) accumulator takes one fma per input in input order,
// the contract of linear_impl.h, so the tile shapes change only how many
// accumulators run side by side, never the bits.

template <bool kBf16>
inline __attribute__((always_inline)) Vec load_halves(const std::uint16_t* p) {
  if constexpr (kBf16) {
    return load_bf16(p);
  } else {
    return load_f16(p);
  }
}

// Row groups [g, g + G) x tokens [t0, t0 + T) of x.
template <int G, int T, bool kBf16>
void half_tile(const HalfWeights& w, const float* x, std::size_t g, std::size_t t0, float* y) {
  constexpr int kUnits = static_cast<int>(kGroupRows / kLanes);
  constexpr int H = G * kUnits;
  Vec acc[H][T];
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) acc[h][j] = zero();
  const std::uint16_t* wp = w.data + g * w.group_stride;
  const float* xp = x + t0 * w.n_in;
  for (std::size_t i = 0; i < w.n_in; ++i, wp += kGroupRows) {
    Vec wv[H];
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h)
      wv[h] = load_halves<kBf16>(wp + (h / kUnits) * w.group_stride + kLanes * (h % kUnits));
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const Vec xv = set1(xp[j * w.n_in + i]);
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) acc[h][j] = fmadd(wv[h], xv, acc[h][j]);
    }
  }
  store_tile<G, T, false>(acc, w.n_out, g, nullptr, y + t0 * w.n_out, w.n_out);
}

// Every token over row groups [g, g + G): whole tiles of kHalfGemmTokens,
// then the rest. The G groups' weights stay in L2 while the tokens pass.
template <int G, bool kBf16>
void half_groups(const HalfWeights& w, const float* x, std::size_t m, std::size_t g, float* y) {
  constexpr int T = kHalfGemmTokens;
  std::size_t t = 0;
  for (; t + T <= m; t += T) half_tile<G, T, kBf16>(w, x, g, t, y);
  // The n (1..T-1) tokens left after the whole tiles.
  with_width<T - 1>(m - t, [&]<int N>() { half_tile<G, N, kBf16>(w, x, g, t, y); });
}

template <bool kBf16>
void run_half(const HalfWeights& w, const float* x, std::size_t m, std::size_t g0, std::size_t g1,
              float* y) {
  std::size_t g = g0;
  if (m == 1) {
    for (; g + kHalfGemvGroups <= g1; g += kHalfGemvGroups)
      half_tile<static_cast<int>(kHalfGemvGroups), 1, kBf16>(w, x, g, 0, y);
    for (; g < g1; ++g) half_tile<1, 1, kBf16>(w, x, g, 0, y);
    return;
  }
  for (; g + kHalfGemmGroups <= g1; g += kHalfGemmGroups)
    half_groups<static_cast<int>(kHalfGemmGroups), kBf16>(w, x, m, g, y);
  for (; g < g1; ++g) half_groups<1, kBf16>(w, x, m, g, y);
}
