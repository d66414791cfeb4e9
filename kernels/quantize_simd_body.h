// The SIMD loops of the quantization family (kernels/quantize.h), written
// once for every vector ISA. Not a normal header: quantize_avx2.cc and
// quantize_avx512.cc include it inside their anonymous namespace after a
// using-directive for their float primitives (kernels/simd_avx2.h,
// kernels/simd_avx512.h: Vec, kLanes, zero, set1, loadu, load_first, min,
// max, mul, abs, reduce_min, reduce_max) and their own int32-code
// primitives, so each ISA compiles its own copy with its own flags (the
// pattern Highway uses, without the dependency). The code primitives, whose
// stores receive codes in [-128, 127]:
//   IVec                        kLanes int32 lanes
//   to_nearest_int(Vec)         round half to even (the default rounding mode)
//   set1_int, add_int, reduce_add_int
//   store_codes(q, v)           kLanes codes to q
//   store_codes_first(q, v, n)  lanes [0, n) to q[0..n), nothing past them
//   store_block_codes(q, v)     the 32 codes of v[0 .. kBlockVectors) to q
//
// Every function computes exactly what its scalar reference in quantize.cc
// does: min, max and max |x| are exact in any order, the parameters come
// from the same out-of-line rules (quantize_impl.h), and each code is the
// contract's one multiply, clamp, round and zero-point add. Rows end with
// one partial vector (load_first reads nothing past the row), so no length
// needs a scalar loop.

// The unit of the loops: 32 floats, one activation block.
constexpr std::size_t kBlockVectors = kQuantGroup / kLanes;

struct Block {
  Vec v[kBlockVectors];
};

static inline __attribute__((always_inline)) Block load_block(const float* x) {
  Block b;
  for (std::size_t k = 0; k < kBlockVectors; ++k) b.v[k] = loadu(x + k * kLanes);
  return b;
}

// RowParams (quantize_impl.h) in every lane.
struct VecParams {
  Vec inv, lo, hi;
  IVec zero_point;
};

static inline __attribute__((always_inline)) VecParams broadcast(const RowParams& p) {
  return {set1(p.inv), set1(p.lo), set1(p.hi), set1_int(p.zero_point)};
}

// The contract's multiply, clamp, round and zero-point add.
static inline __attribute__((always_inline)) IVec quantize_lanes(Vec x, const VecParams& p) {
  return add_int(to_nearest_int(min(max(mul(x, p.inv), p.lo), p.hi)), p.zero_point);
}

static inline __attribute__((always_inline)) void quantize_block(const Block& b, const VecParams& p,
                                                                 IVec* codes) {
  for (std::size_t k = 0; k < kBlockVectors; ++k) codes[k] = quantize_lanes(b.v[k], p);
}

static inline __attribute__((always_inline)) float block_amax(const Block& b) {
  Vec m = abs(b.v[0]);
  for (std::size_t k = 1; k < kBlockVectors; ++k) m = max(m, abs(b.v[k]));
  return reduce_max(m);
}

// max |x| over x[0..n), n a multiple of 32: one accumulator per vector of a
// block, so the maxes run as independent chains.
float row_amax(const float* x, std::size_t n) {
  Vec m[kBlockVectors];
  for (Vec& v : m) v = zero();
  for (std::size_t i = 0; i < n; i += kQuantGroup) {
    const Block b = load_block(x + i);
    for (std::size_t k = 0; k < kBlockVectors; ++k) m[k] = max(m[k], abs(b.v[k]));
  }
  for (std::size_t k = 1; k < kBlockVectors; ++k) m[0] = max(m[0], m[k]);
  return reduce_max(m[0]);
}

// QuantizeKernels::range. The accumulators start at 0 and a partial
// vector's missing lanes load as 0, which is already in the range.
Range range(const float* x, std::size_t n) {
  Vec lo[kBlockVectors], hi[kBlockVectors];
  for (std::size_t k = 0; k < kBlockVectors; ++k) lo[k] = hi[k] = zero();
  std::size_t i = 0;
  for (; i + kQuantGroup <= n; i += kQuantGroup) {
    const Block b = load_block(x + i);
    for (std::size_t k = 0; k < kBlockVectors; ++k) {
      lo[k] = min(lo[k], b.v[k]);
      hi[k] = max(hi[k], b.v[k]);
    }
  }
  for (; i < n; i += kLanes) {
    const Vec v = n - i >= kLanes ? loadu(x + i) : load_first(x + i, n - i);
    lo[0] = min(lo[0], v);
    hi[0] = max(hi[0], v);
  }
  for (std::size_t k = 1; k < kBlockVectors; ++k) {
    lo[0] = min(lo[0], lo[k]);
    hi[0] = max(hi[0], hi[k]);
  }
  return {reduce_min(lo[0]), reduce_max(hi[0])};
}

// QuantizeKernels::quantize_row.
void quantize_row(const float* x, std::size_t n, const RowParams& rp, std::int8_t* q) {
  const VecParams p = broadcast(rp);
  std::size_t i = 0;
  for (; i + kQuantGroup <= n; i += kQuantGroup) {
    IVec codes[kBlockVectors];
    quantize_block(load_block(x + i), p, codes);
    store_block_codes(q + i, codes);
  }
  for (; i + kLanes <= n; i += kLanes) store_codes(q + i, quantize_lanes(loadu(x + i), p));
  if (i < n) store_codes_first(q + i, quantize_lanes(load_first(x + i, n - i), p), n - i);
}

constexpr QuantizeKernels kQuantizeKernels = {range, quantize_row};

// A block's 32 codes where a token slot of step `step` keeps them
// (kernels/linear_impl.h): input k at q[(k / 4) * step + k % 4]. A tile of
// one token (step 4) is plain row-major.
static inline __attribute__((always_inline)) void store_tiled(const IVec* codes, std::int8_t* q,
                                                              std::size_t step) {
  if (step == 4) {
    store_block_codes(q, codes);
    return;
  }
  alignas(64) std::int8_t tmp[kQuantGroup];
  store_block_codes(tmp, codes);
  for (std::size_t s = 0; s < kQuantGroup / 4; ++s) std::memcpy(q + s * step, tmp + 4 * s, 4);
}

// quantize_activations_* (kernels/linear_impl.h). Per block, its 32 values
// are loaded once for its amax, its codes and its sum; per token, the row's
// amax is one pass before that one.
void quantize_activations(const float* x, std::size_t t0, std::size_t t1, std::int32_t bias_c,
                          const QuantizedActivations& a) {
  const std::size_t n_in = a.blocks * kQuantGroup;
  for (std::size_t t = t0; t < t1; ++t) {
    const float* xt = x + t * n_in;
    const TokenSlot s = token_slot(a, t);
    VecParams p{};
    if (a.per_token) {
      const RowParams rp = symmetric_params(row_amax(xt, n_in));
      a.d[t] = rp.scale;
      p = broadcast(rp);
    }
    for (std::size_t b = 0; b < a.blocks; ++b) {
      const Block xb = load_block(xt + b * kQuantGroup);
      if (!a.per_token) {
        const RowParams rp = symmetric_params(block_amax(xb));
        a.d[s.meta + b * s.n] = rp.scale;
        p = broadcast(rp);
      }
      IVec codes[kBlockVectors];
      quantize_block(xb, p, codes);
      // The first half's vectors hold the block's first 16 codes.
      IVec low = codes[0], high = codes[kBlockVectors / 2];
      for (std::size_t k = 1; k < kBlockVectors / 2; ++k) {
        low = add_int(low, codes[k]);
        high = add_int(high, codes[kBlockVectors / 2 + k]);
      }
      const std::int32_t low_sum = reduce_add_int(low);
      a.bias[s.meta + b * s.n] = -bias_c * (low_sum + reduce_add_int(high));
      a.low_sum[s.meta + b * s.n] = low_sum;
      store_tiled(codes, s.q + b * (kQuantGroup / 4) * s.step, s.step);
    }
  }
}
