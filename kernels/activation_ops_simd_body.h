// The SIMD activation operations (kernels/activation_ops_impl.h's ActivationOpsKernels),
// written once for every vector ISA. Not a normal header: activation_ops_avx2.cc
// and activation_ops_avx512.cc include it inside their anonymous namespace after
// a using-directive for their primitives (kernels/simd_avx2.h,
// kernels/simd_avx512.h), so each ISA compiles its own copy with its own
// flags (the pattern Highway uses, without the dependency).
//
// Every loop runs whole vectors, then one masked tail (load_first /
// store_first touch nothing past the row), so no row length needs a scalar
// loop. Outputs that are one float operation per element (swiglu's
// factors, add, scale, rope, the dequantizations) give the same bits on
// every ISA; the reductions (rms_norm, softmax) differ only in summation order.

#include "kernels/simd_exp_body.h"

void rms_norm_row(const float* x, const float* w, std::size_t dim, float eps, float* y) {
  // 4 * kLanes partial sums; the tail's vectors go to acc0.
  Vec acc0 = zero(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  std::size_t i = 0;
  for (; i + 4 * kLanes <= dim; i += 4 * kLanes) {
    const Vec a = loadu(x + i), b = loadu(x + i + kLanes);
    const Vec c = loadu(x + i + 2 * kLanes), d = loadu(x + i + 3 * kLanes);
    acc0 = fmadd(a, a, acc0);
    acc1 = fmadd(b, b, acc1);
    acc2 = fmadd(c, c, acc2);
    acc3 = fmadd(d, d, acc3);
  }
  for (; i + kLanes <= dim; i += kLanes) {
    const Vec a = loadu(x + i);
    acc0 = fmadd(a, a, acc0);
  }
  if (i < dim) {
    const Vec a = load_first(x + i, dim - i);
    acc0 = fmadd(a, a, acc0);
  }
  const float sum = reduce_add(add(add(acc0, acc2), add(acc1, acc3)));
  const float mean = sum / static_cast<float>(dim);
  const Vec s = set1(1.0f / __builtin_sqrtf(mean + eps));
  for (i = 0; i + kLanes <= dim; i += kLanes) {
    Vec v = mul(loadu(x + i), s);
    if (w != nullptr) v = mul(v, loadu(w + i));
    storeu(y + i, v);
  }
  if (i < dim) {
    Vec v = mul(load_first(x + i, dim - i), s);
    if (w != nullptr) v = mul(v, load_first(w + i, dim - i));
    store_first(y + i, v, dim - i);
  }
}

// silu(g) * u = g / (1 + e^-g) * u.
static inline __attribute__((always_inline)) Vec swiglu_lanes(Vec g, Vec u) {
  return mul(div(g, add(set1(1.0f), exp_lanes(sub(zero(), g)))), u);
}

void swiglu(const float* gate, const float* up, std::size_t n, float* out) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    storeu(out + i, swiglu_lanes(loadu(gate + i), loadu(up + i)));
  if (i < n) {
    const std::size_t left = n - i;
    store_first(out + i, swiglu_lanes(load_first(gate + i, left), load_first(up + i, left)), left);
  }
}

static inline __attribute__((always_inline)) Vec geglu_lanes(Vec g, Vec u) {
  const Vec z = mul(set1(kGeluTwiceSqrt2OverPi), fmadd(mul(set1(kGeluCubic), mul(g, g)), g, g));
  return mul(div(g, add(set1(1.0f), exp_lanes(sub(zero(), z)))), u);
}

void geglu(const float* gate, const float* up, std::size_t n, float* out) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) storeu(out + i, geglu_lanes(loadu(gate + i), loadu(up + i)));
  if (i < n) {
    const std::size_t left = n - i;
    store_first(out + i, geglu_lanes(load_first(gate + i, left), load_first(up + i, left)), left);
  }
}

// cap * tanh(x / cap), with tanh(y) = 2 / (1 + exp(-2y)) - 1: absolute error
// a few float steps of 1 (no relative accuracy near 0, where it cancels).
static inline __attribute__((always_inline)) Vec softcap_lanes(Vec x, Vec cap,
                                                               Vec minus_two_over_cap) {
  const Vec e = exp_lanes(mul(x, minus_two_over_cap));
  return mul(cap, sub(div(set1(2.0f), add(set1(1.0f), e)), set1(1.0f)));
}

void softcap(float* x, std::size_t n, float cap) {
  const Vec c = set1(cap), k = set1(-2.0f / cap);
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) storeu(x + i, softcap_lanes(loadu(x + i), c, k));
  if (i < n) store_first(x + i, softcap_lanes(load_first(x + i, n - i), c, k), n - i);
}

void softmax_row(float* x, std::size_t n) {
  const float neg_inf = -__builtin_inff();
  Vec mx = set1(neg_inf);
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) mx = max(mx, loadu(x + i));
  if (i < n) mx = max(mx, load_first(x + i, n - i, neg_inf));
  const Vec vmax = set1(reduce_max(mx));
  Vec acc0 = zero(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const Vec a = exp_lanes(sub(loadu(x + i), vmax));
    const Vec b = exp_lanes(sub(loadu(x + i + kLanes), vmax));
    const Vec c = exp_lanes(sub(loadu(x + i + 2 * kLanes), vmax));
    const Vec d = exp_lanes(sub(loadu(x + i + 3 * kLanes), vmax));
    storeu(x + i, a);
    storeu(x + i + kLanes, b);
    storeu(x + i + 2 * kLanes, c);
    storeu(x + i + 3 * kLanes, d);
    acc0 = add(acc0, a);
    acc1 = add(acc1, b);
    acc2 = add(acc2, c);
    acc3 = add(acc3, d);
  }
  for (; i + kLanes <= n; i += kLanes) {
    const Vec a = exp_lanes(sub(loadu(x + i), vmax));
    storeu(x + i, a);
    acc0 = add(acc0, a);
  }
  if (i < n) {
    // Lanes past the row are zeroed after exp so they add nothing.
    const Vec a = keep_first(exp_lanes(sub(load_first(x + i, n - i), vmax)), n - i);
    store_first(x + i, a, n - i);
    acc0 = add(acc0, a);
  }
  const float sum = reduce_add(add(add(acc0, acc2), add(acc1, acc3)));
  const Vec inv = set1(1.0f / sum);
  for (i = 0; i + kLanes <= n; i += kLanes) storeu(x + i, mul(loadu(x + i), inv));
  if (i < n) store_first(x + i, mul(load_first(x + i, n - i), inv), n - i);
}

void exp_row(const float* x, std::size_t n, float* y) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) storeu(y + i, exp_lanes(loadu(x + i)));
  if (i < n) store_first(y + i, exp_lanes(load_first(x + i, n - i)), n - i);
}

void add_to(float* y, const float* x, std::size_t n) {
  std::size_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    storeu(y + i, add(loadu(y + i), loadu(x + i)));
    storeu(y + i + kLanes, add(loadu(y + i + kLanes), loadu(x + i + kLanes)));
  }
  for (; i + kLanes <= n; i += kLanes) storeu(y + i, add(loadu(y + i), loadu(x + i)));
  if (i < n) store_first(y + i, add(load_first(y + i, n - i), load_first(x + i, n - i)), n - i);
}

void scale_by(float* y, float s, std::size_t n) {
  const Vec vs = set1(s);
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) storeu(y + i, mul(loadu(y + i), vs));
  if (i < n) store_first(y + i, mul(load_first(y + i, n - i), vs), n - i);
}

// Interleaved pairs: with c = (c0 c0 c1 c1 ...), s = (s0 s0 s1 s1 ...) and
// x~ = x with neighbours swapped, fmaddsub(x, c, x~ * s) gives
// a c - b s in even lanes and b c + a s in odd lanes.
void rope_normal(float* x, std::size_t n_heads, std::size_t head_stride, const float* cs,
                 const float* sn, std::size_t n_pairs) {
  alignas(64) float cd[2 * kRopeMaxPairs], sd[2 * kRopeMaxPairs];
  for (std::size_t i = 0; i < n_pairs; ++i) {
    cd[2 * i] = cd[2 * i + 1] = cs[i];
    sd[2 * i] = sd[2 * i + 1] = sn[i];
  }
  const std::size_t n = 2 * n_pairs;
  // The tail vector reads a whole register of the tables.
  for (std::size_t i = n; i < 2 * kRopeMaxPairs && i % kLanes != 0; ++i) cd[i] = sd[i] = 0.0f;
  for (std::size_t h = 0; h < n_heads; ++h, x += head_stride) {
    std::size_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      const Vec v = loadu(x + i);
      storeu(x + i, fmaddsub(v, loadu(cd + i), mul(swap_pairs(v), loadu(sd + i))));
    }
    if (i < n) {
      const Vec v = load_first(x + i, n - i);
      store_first(x + i, fmaddsub(v, loadu(cd + i), mul(swap_pairs(v), loadu(sd + i))), n - i);
    }
  }
}

void rope_neox(float* x, std::size_t n_heads, std::size_t head_stride, std::size_t half,
               const float* cs, const float* sn, std::size_t n_pairs) {
  for (std::size_t h = 0; h < n_heads; ++h, x += head_stride) {
    float* x1 = x + half;
    std::size_t i = 0;
    for (; i + kLanes <= n_pairs; i += kLanes) {
      const Vec a = loadu(x + i), b = loadu(x1 + i), c = loadu(cs + i), s = loadu(sn + i);
      storeu(x + i, fmsub(a, c, mul(b, s)));
      storeu(x1 + i, fmadd(a, s, mul(b, c)));
    }
    if (i < n_pairs) {
      const std::size_t left = n_pairs - i;
      const Vec a = load_first(x + i, left), b = load_first(x1 + i, left);
      const Vec c = load_first(cs + i, left), s = load_first(sn + i, left);
      store_first(x + i, fmsub(a, c, mul(b, s)), left);
      store_first(x1 + i, fmadd(a, s, mul(b, c)), left);
    }
  }
}

void dequant_q8_0(const BlockQ8_0* in, float* y, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, y += kQuantGroup) {
    const Vec d = set1(_cvtsh_ss(in[b].d));
    for (std::size_t c = 0; c < kQuantGroup; c += kLanes)
      storeu(y + c, mul(d, load_i8(in[b].qs + c)));
  }
}

void dequant_q4_0(const BlockQ4_0* in, float* y, std::size_t n) {
  const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, y += kQuantGroup) {
    const Vec d = set1(_cvtsh_ss(in[b].d));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in[b].qs));
    alignas(16) std::int8_t w[kQuantGroup];  // low nibbles: w 0..15, high: w 16..31
    _mm_store_si128(reinterpret_cast<__m128i*>(w), _mm_sub_epi8(_mm_and_si128(q, low4), eight));
    _mm_store_si128(reinterpret_cast<__m128i*>(w + 16),
                    _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low4), eight));
    for (std::size_t c = 0; c < kQuantGroup; c += kLanes) storeu(y + c, mul(d, load_i8(w + c)));
  }
}

void dequant_f16(const std::uint16_t* in, float* y, std::size_t n) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) storeu(y + i, load_f16(in + i));
  for (; i < n; ++i) y[i] = _cvtsh_ss(in[i]);
}

void dequant_bf16(const std::uint16_t* in, float* y, std::size_t n) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) storeu(y + i, load_bf16(in + i));
  for (; i < n; ++i) {
    const std::uint32_t bits = static_cast<std::uint32_t>(in[i]) << 16;
    std::memcpy(y + i, &bits, sizeof bits);
  }
}

constexpr ActivationOpsKernels kActivationOpsKernels = {
    rms_norm_row, swiglu,      geglu,     softcap,      softmax_row,  exp_row,     add_to,
    scale_by,     rope_normal, rope_neox, dequant_q8_0, dequant_q4_0, dequant_f16, dequant_bf16,
};
