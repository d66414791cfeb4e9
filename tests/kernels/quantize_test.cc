// Tests for the quantization family (kernels/quantize.h): the asymmetric row
// quantizer the int8 KV cache stores with, and Linear's activation quantizer
// (kernels/linear_impl.h), each on every dispatched path against the scalar
// reference (bit-identical: the rules are computed by one function and the
// reductions are exact, so comparisons use ==) and against an independent
// implementation of the documented rule written here, on odd shapes.
#include "kernels/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/linear_impl.h"
#include "kernels/quantize_impl.h"
#include "tests/support/heap_counter.h"

namespace hearth::kernels {
namespace {

// `rows` rows of n values: normal around 0 with every 17th a 20x outlier (as
// LLM activations have), each row scaled by its own magnitude in [1e-6, 1e3],
// so scales differ widely and small rows show that nothing floors them.
std::vector<float> random_rows(std::size_t rows, std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_mag(-6.0f, 3.0f);
  std::vector<float> x(rows * n);
  for (std::size_t r = 0; r < rows; ++r) {
    const float mag = std::pow(10.0f, log_mag(rng));
    for (std::size_t i = 0; i < n; ++i)
      x[r * n + i] = normal(rng) * mag * (i % 17 == 5 ? 20.0f : 1.0f);
  }
  return x;
}

// ---- Asymmetric rows (the int8 KV cache's) ----------------------------------

// Independent check of one quantized row, in double: scale = (hi - lo) / 255
// over the range widened to include 0; the zero point is the code of 0,
// -128 - lo / scale, to within rounding; every element is within half a step
// of scale * (q - zero_point); 0 maps to the zero point exactly, the minimum
// (when negative) to -128 and the maximum (when positive) to the top code.
//
// Slack for float rounding: the kernel computes inv = 255 / range, x * inv
// and scale = range / 255 in float, each off by u = 2^-24 relative, so
// scale * round(x * inv) is off by at most 3u |x| beyond half a step (and the
// clamp at 127 by a few u of the range); |x| and the range are at most
// 255 scale, so 2^-12 scale covers it (tests/kernels/sdpa_test.cc relies on
// this bound).
void expect_row_quantized(const float* x, std::size_t n, const std::int8_t* q, QParams p) {
  double lo = 0, hi = 0;
  for (std::size_t i = 0; i < n; ++i) {
    lo = std::min(lo, static_cast<double>(x[i]));
    hi = std::max(hi, static_cast<double>(x[i]));
  }
  const double range = hi - lo;
  if (range == 0) {
    ASSERT_EQ(p.scale, 0.0f);
    ASSERT_EQ(p.zero_point, 0);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(q[i], 0);
    return;
  }
  ASSERT_FLOAT_EQ(p.scale, static_cast<float>(range / 255.0));
  ASSERT_GE(p.zero_point, -128);
  ASSERT_LE(p.zero_point, 127);
  const double scale = p.scale;
  ASSERT_LE(std::fabs(p.zero_point - (-128.0 - lo / (range / 255.0))), 0.5 + 1e-3);
  int top = -128;
  for (std::size_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(x[i]) - scale * (q[i] - p.zero_point));
    ASSERT_LE(err, scale * (0.5 + 0x1p-12)) << "element " << i << " of " << n;
    if (x[i] == 0.0f) {
      ASSERT_EQ(q[i], p.zero_point) << "element " << i;
    }
    if (lo < 0 && x[i] == lo) {
      ASSERT_EQ(q[i], -128) << "element " << i;
    }
    top = std::max(top, static_cast<int>(q[i]));
  }
  // The maximum maps to 127, or 126 when float rounding lands it just below
  // a tie that its zero point's rounding went the other way on.
  if (hi > 0) {
    EXPECT_GE(top, 126);
  }
}

TEST(QuantizeRowAsymmetric, EveryPathIsBitIdenticalToScalarAndWithinHalfAStep) {
  const std::vector<std::size_t> sizes = {1,  7,  8,  13,  16,  17,  31,  32,
                                          33, 64, 80, 100, 128, 129, 4097};
  constexpr std::size_t kRows = 6;
  for (std::size_t n : sizes) {
    // Rows: 0 random around 0; 1 all >= 0 (post-ReLU-like); 2 all <= 0;
    // 3 constant positive; 4 constant negative; 5 all zero.
    std::vector<float> x = random_rows(kRows, n, static_cast<std::uint32_t>(n));
    for (std::size_t i = 0; i < n; ++i) {
      x[n + i] = std::max(0.0f, x[n + i]);
      x[2 * n + i] = -std::fabs(x[2 * n + i]);
      x[3 * n + i] = 0.37f;
      x[4 * n + i] = -2.5f;
      x[5 * n + i] = 0.0f;
    }
    std::vector<std::int8_t> ref(kRows * n), got(kRows * n);
    QParams ref_p[kRows];
    {
      ScopedIsa forced(Isa::kScalar);
      for (std::size_t r = 0; r < kRows; ++r)
        ref_p[r] = quantize_row_asymmetric(&x[r * n], n, &ref[r * n]);
    }
    for (std::size_t r = 0; r < kRows; ++r) {
      SCOPED_TRACE("n=" + std::to_string(n) + " row " + std::to_string(r));
      expect_row_quantized(&x[r * n], n, &ref[r * n], ref_p[r]);
    }
    // Constant rows use the end code and decode to the constant.
    EXPECT_EQ(ref[3 * n], 127);
    EXPECT_EQ(ref_p[3].zero_point, -128);
    EXPECT_EQ(ref[4 * n], -128);
    EXPECT_EQ(ref_p[4].zero_point, 127);
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      for (std::size_t r = 0; r < kRows; ++r) {
        // A sentinel past the row: nothing beyond q[n) may be written.
        std::memset(got.data(), 0x55, got.size());
        const QParams p = quantize_row_asymmetric(&x[r * n], n, &got[r * n]);
        const std::string what =
            std::string(isa_name(isa)) + " n=" + std::to_string(n) + " row " + std::to_string(r);
        EXPECT_EQ(p.scale, ref_p[r].scale) << what;
        EXPECT_EQ(p.zero_point, ref_p[r].zero_point) << what;
        EXPECT_EQ(std::memcmp(&got[r * n], &ref[r * n], n), 0) << what;
        if (r + 1 < kRows) {
          EXPECT_EQ(got[(r + 1) * n], 0x55) << what;
        }
      }
    }
  }
}

// Rows whose range is exactly 255 have step 1, so exact halves test the
// rounding (half to even) of the codes and of the zero point on every path,
// including in the tail of a vector.
TEST(QuantizeRowAsymmetric, RoundsExactHalvesToEvenOnEveryPath) {
  struct Case {
    std::vector<float> head;  // the row starts with these, then 1.0f
    std::vector<int> want;    // codes of head
    int zero_point;
  };
  const std::vector<Case> cases = {
      // lo -128, hi 127: zero point 0, codes round(x).
      {{127.0f, -128.0f, 2.5f, -3.5f, 0.5f, -0.5f}, {127, -128, 2, -4, 0, 0}, 0},
      // lo 0, hi 255: zero point -128, codes round(x) - 128.
      {{255.0f, 2.5f, 3.5f, 0.0f}, {127, -126, -124, -128}, -128},
      // lo -127.5: -128 - round(-127.5) = 0 (half to even), so 127.5 rounds
      // to 128 and clamps to 127, half a step below.
      {{127.5f, -127.5f, 1.5f}, {127, -128, 2}, 0},
  };
  for (std::size_t n : {6, 16, 17, 33, 47}) {
    for (const Case& c : cases) {
      std::vector<float> x(n, 1.0f);
      std::copy(c.head.begin(), c.head.end(), x.begin());
      for (Isa isa : supported_isas()) {
        ScopedIsa forced(isa);
        std::vector<std::int8_t> q(n, 0x55);
        const QParams p = quantize_row_asymmetric(x.data(), n, q.data());
        SCOPED_TRACE(std::string(isa_name(isa)) + " n=" + std::to_string(n));
        EXPECT_EQ(p.scale, 1.0f);
        EXPECT_EQ(p.zero_point, c.zero_point);
        for (std::size_t i = 0; i < c.want.size(); ++i) EXPECT_EQ(q[i], c.want[i]) << "x " << x[i];
        for (std::size_t i = c.head.size(); i < n; ++i) EXPECT_EQ(q[i], 1 + c.zero_point);
      }
    }
  }
}

// Below kTinyRange a row is stored as zeros; at it and above, however small,
// it keeps its own step (no floor on the scale).
TEST(QuantizeRowAsymmetric, OnlyRowsBelowTheTinyRangeAreStoredAsZeros) {
  const float tiny[5] = {1e-31f, -2e-31f, 0.0f, 3e-32f, 1e-38f};  // range 3e-31
  const float at_threshold[2] = {kTinyRange, 0.0f};
  const float small[3] = {1e-6f, -1e-6f, 5e-7f};  // far below any former 2^-14 floor
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    SCOPED_TRACE(isa_name(isa));
    std::int8_t q[5] = {1, 1, 1, 1, 1};
    QParams p = quantize_row_asymmetric(tiny, 5, q);
    EXPECT_EQ(p.scale, 0.0f);
    EXPECT_EQ(p.zero_point, 0);
    for (std::int8_t v : q) EXPECT_EQ(v, 0);

    p = quantize_row_asymmetric(at_threshold, 2, q);
    EXPECT_EQ(p.scale, kTinyRange / 255.0f);
    EXPECT_EQ(p.zero_point, -128);
    EXPECT_EQ(q[0], 127);
    EXPECT_EQ(q[1], -128);

    p = quantize_row_asymmetric(small, 3, q);
    EXPECT_EQ(p.scale, (1e-6f - -1e-6f) / 255.0f);
    expect_row_quantized(small, 3, q, p);
  }
}

TEST(QuantizeRowAsymmetric, AnEmptyRowWritesNothing) {
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    std::int8_t q = 0x55;
    const QParams p = quantize_row_asymmetric(nullptr, 0, &q);
    EXPECT_EQ(p.scale, 0.0f) << isa_name(isa);
    EXPECT_EQ(p.zero_point, 0) << isa_name(isa);
    EXPECT_EQ(q, 0x55) << isa_name(isa);
  }
}

// Symmetric int8 (scale amax / 127, codes round(x / scale)) as a yardstick.
// Adds the row's squared errors to *sq and keeps the largest in *worst.
void symmetric_error(const float* x, std::size_t n, double* sq, double* worst) {
  double amax = 0;
  for (std::size_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
  const double scale = amax / 127;
  for (std::size_t i = 0; i < n; ++i) {
    const double e =
        amax == 0 ? std::fabs(x[i]) : std::fabs(x[i] - scale * std::nearbyint(x[i] / scale));
    *sq += e * e;
    *worst = std::max(*worst, e);
  }
}

// The reason the KV cache's rows are asymmetric: a row of one sign (e.g.
// after ReLU) spends half of the symmetric codes on values it never has.
// Asymmetric uses all 256 codes on [0, max], so its step, and with it the
// rounding error (RMS and worst case), is 127 / 255 ~ 0.498 of the symmetric
// one. For rows around 0 the range is at most 2 amax, so it is never worse
// (step <= 254 / 255 of the symmetric step).
TEST(QuantizeRowAsymmetric, OneSignedRowsGetAboutHalfTheSymmetricError) {
  constexpr std::size_t kN = 128, kRows = 64;
  std::mt19937 rng(42);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (bool one_signed : {true, false}) {
    SCOPED_TRACE(one_signed ? "post-ReLU rows" : "rows around 0");
    double asym_sq = 0, asym_worst = 0, sym_sq = 0, sym_worst = 0;
    std::vector<float> x(kN);
    std::vector<std::int8_t> q(kN);
    for (std::size_t r = 0; r < kRows; ++r) {
      for (float& v : x) v = one_signed ? std::max(0.0f, gauss(rng)) : gauss(rng);
      const QParams p = quantize_row_asymmetric(x.data(), kN, q.data());
      for (std::size_t i = 0; i < kN; ++i) {
        const double e = std::fabs(x[i] - static_cast<double>(p.scale) * (q[i] - p.zero_point));
        asym_sq += e * e;
        asym_worst = std::max(asym_worst, e);
      }
      symmetric_error(x.data(), kN, &sym_sq, &sym_worst);
    }
    const double rms_ratio = std::sqrt(asym_sq / sym_sq), worst_ratio = asym_worst / sym_worst;
    std::printf("%s: asymmetric / symmetric error, RMS %.3f, worst %.3f\n",
                one_signed ? "post-ReLU rows" : "rows around 0", rms_ratio, worst_ratio);
    if (one_signed) {
      // About 0.498; the RMS of ~4000 nonzero errors is within a few % of its
      // expectation, the worst case within a few % of half a step.
      EXPECT_GT(rms_ratio, 0.45);
      EXPECT_LT(rms_ratio, 0.55);
      EXPECT_LT(worst_ratio, 0.55);
    } else {
      EXPECT_LT(rms_ratio, 1.03);
    }
  }
}

TEST(QuantizeRowAsymmetric, MakesNoHeapAllocation) {
  const std::vector<float> x = random_rows(1, 4097, 7);
  std::vector<std::int8_t> q(x.size());
  quantize_row_asymmetric(x.data(), x.size(), q.data());  // dispatch resolved
  hearth::testing::HeapCounter counter;
  quantize_row_asymmetric(x.data(), x.size(), q.data());
  quantize_row_asymmetric(x.data(), 13, q.data());
  EXPECT_EQ(counter.allocations(), 0u);
}

// ---- The rules ---------------------------------------------------------------

TEST(QuantizeRules, TinyRangesGiveZerosAndSmallOnesKeepTheirStep) {
  using internal::asymmetric_params;
  using internal::symmetric_params;
  const float below = std::nextafter(kTinyRange, 0.0f);
  for (float amax : {0.0f, 1e-40f, below, std::nanf("")}) {
    const internal::RowParams p = symmetric_params(amax);
    EXPECT_EQ(p.scale, 0.0f) << amax;
    EXPECT_EQ(p.inv, 0.0f) << amax;
    EXPECT_EQ(p.zero_point, 0) << amax;
    const internal::RowParams a = asymmetric_params(-amax / 2, amax / 2);
    EXPECT_EQ(a.scale, 0.0f) << amax;
    EXPECT_EQ(a.inv, 0.0f) << amax;
    EXPECT_EQ(a.zero_point, 0) << amax;
  }
  // Symmetric: d = amax / 127, inv = 1 / d, codes in [-127, 127].
  for (float amax : {kTinyRange, 1e-20f, 6e-5f, 1.0f, 3e30f}) {
    const internal::RowParams p = symmetric_params(amax);
    EXPECT_EQ(p.scale, amax / 127.0f) << amax;
    EXPECT_EQ(p.inv, 1.0f / (amax / 127.0f)) << amax;
    EXPECT_EQ(p.lo, -127.0f);
    EXPECT_EQ(p.hi, 127.0f);
    EXPECT_EQ(p.zero_point, 0);
  }
  // Asymmetric: scale = range / 255, inv = 255 / range, lo maps to -128.
  const internal::RowParams a = asymmetric_params(-1e-20f, 3e-20f);
  EXPECT_EQ(a.scale, (3e-20f - -1e-20f) / 255.0f);
  EXPECT_EQ(a.inv, 255.0f / (3e-20f - -1e-20f));
  EXPECT_EQ(a.zero_point, -128 - static_cast<int>(std::nearbyint(-1e-20f * a.inv)));
  EXPECT_EQ(a.lo, static_cast<float>(-128 - a.zero_point));
  EXPECT_EQ(a.hi, static_cast<float>(127 - a.zero_point));
}

// ---- Linear's activations ---------------------------------------------------

using internal::QuantizedActivations;

// The activation quantizer of each ISA this machine runs.
struct Quantizer {
  Isa isa;
  internal::QuantizeFn fn;
};

std::vector<Quantizer> quantizers() {
  std::vector<Quantizer> q = {{Isa::kScalar, internal::quantize_activations_scalar}};
  if (isa_supported(Isa::kAvx2)) q.push_back({Isa::kAvx2, internal::quantize_activations_avx2});
  if (isa_supported(Isa::kAvx512))
    q.push_back({Isa::kAvx512, internal::quantize_activations_avx512});
  return q;
}

// Owns the buffers of one QuantizedActivations, filled with a sentinel.
struct Acts {
  std::vector<std::int8_t> q;
  std::vector<float> d;
  std::vector<std::int32_t> bias, low_sum;
  QuantizedActivations a{};

  Acts(std::size_t m, std::size_t blocks, std::size_t tile_tokens, bool per_token) {
    const std::size_t stride = (tile_tokens * blocks * 32 + 63) / 64 * 64;
    const std::size_t tiles = (m + tile_tokens - 1) / tile_tokens;
    q.assign(tiles * stride, 0x55);
    d.assign(per_token ? m : m * blocks, -1.0f);
    bias.assign(m * blocks, 12345);
    low_sum.assign(m * blocks, 54321);
    a = {q.data(), d.data(),    bias.data(), low_sum.data(), m,
         blocks,   tile_tokens, stride,      per_token};
  }
  bool operator==(const Acts& o) const {
    return q == o.q && bias == o.bias && low_sum == o.low_sum &&
           std::memcmp(d.data(), o.d.data(), d.size() * sizeof(float)) == 0;
  }
};

// random_rows with blocks that test the rule's edges: all zero, amax just
// below and exactly at kTinyRange, subnormal, huge, one-signed.
std::vector<float> make_activations(std::size_t m, std::size_t blocks, std::uint32_t seed) {
  std::vector<float> x = random_rows(m, blocks * 32, seed);
  for (std::size_t t = 0; t < m; ++t) {
    for (std::size_t b = 0; b < blocks; ++b) {
      float* xb = &x[(t * blocks + b) * 32];
      const std::size_t kind = (t * 7 + b) % 9;
      for (std::size_t i = 0; i < 32; ++i) {
        float& v = xb[i];
        if (kind == 1) v = 0.0f;
        if (kind == 2) v = std::nextafter(kTinyRange, 0.0f) * (i % 2 == 0 ? 1.0f : -0.5f);
        if (kind == 3) v = (i == 9 ? -kTinyRange : 0.25f * kTinyRange);
        if (kind == 4) v = 1e-40f * static_cast<float>(i);  // subnormal
        if (kind == 5) v *= 1e30f / (std::fabs(v) + 1.0f);  // up to 1e30
        if (kind == 6) v = std::fabs(v);
      }
    }
  }
  return x;
}

// The documented rule, written here: d = amax / 127 (0 below kTinyRange),
// q = round_half_even(x * (1 / d)), bias = -C * sum of the block's q,
// low_sum = the sum of its first 16.
void expect_matches_rule(const std::vector<float>& x, const QuantizedActivations& a,
                         std::int32_t bias_c, const std::string& what) {
  const std::size_t n_in = a.blocks * 32;
  for (std::size_t t = 0; t < a.m; ++t) {
    const float* xt = &x[t * n_in];
    const internal::TokenSlot s = internal::token_slot(a, t);
    float row_amax = 0.0f;
    for (std::size_t k = 0; k < n_in; ++k) row_amax = std::max(row_amax, std::fabs(xt[k]));
    for (std::size_t b = 0; b < a.blocks; ++b) {
      float amax = row_amax;
      if (!a.per_token) {
        amax = 0.0f;
        for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xt[b * 32 + i]));
      }
      const float d = amax < kTinyRange ? 0.0f : amax / 127.0f;
      const float id = d == 0.0f ? 0.0f : 1.0f / d;
      const float got_d = a.per_token ? a.d[t] : a.d[s.meta + b * s.n];
      ASSERT_EQ(std::memcmp(&got_d, &d, sizeof d), 0) << what << " t=" << t << " b=" << b;
      std::int32_t sum = 0, low = 0;
      for (std::size_t i = 0; i < 32; ++i) {
        const int want = static_cast<int>(std::nearbyint(xt[b * 32 + i] * id));
        ASSERT_LE(std::abs(want), 127);
        const std::size_t k = b * 32 + i;
        ASSERT_EQ(s.q[k / 4 * s.step + k % 4], want) << what << " t=" << t << " k=" << k;
        sum += want;
        if (i < 16) low += want;
      }
      ASSERT_EQ(a.bias[s.meta + b * s.n], -bias_c * sum) << what << " t=" << t << " b=" << b;
      ASSERT_EQ(a.low_sum[s.meta + b * s.n], low) << what << " t=" << t << " b=" << b;
    }
  }
}

// Every path writes the same bytes as the scalar reference, which follows
// the rule, for every tile width the kernels use (1: scalar, 4, 6, 8), token
// counts that leave short last tiles, and both granularities; and quantizing
// the tokens in two ranges (as threads do) equals quantizing them at once.
TEST(QuantizeActivations, EveryPathMatchesTheRuleInEveryTileLayout) {
  std::uint32_t seed = 1;
  for (std::size_t tile_tokens : {1, 4, 6, 8})
    for (std::size_t m : {1, 3, 8, 13})
      for (std::size_t blocks : {1, 3, 129})
        for (bool per_token : {false, true}) {
          const std::string what = "tile " + std::to_string(tile_tokens) +
                                   " m=" + std::to_string(m) + " blocks=" + std::to_string(blocks) +
                                   (per_token ? " per token" : " per block");
          const std::vector<float> x = make_activations(m, blocks, seed++);
          const std::int32_t bias_c = seed % 2 == 0 ? internal::kQ8Bias : internal::kQ4Bias;
          Acts ref(m, blocks, tile_tokens, per_token);
          internal::quantize_activations_scalar(x.data(), 0, m, bias_c, ref.a);
          expect_matches_rule(x, ref.a, bias_c, what + " scalar");
          for (const Quantizer& k : quantizers()) {
            Acts got(m, blocks, tile_tokens, per_token);
            k.fn(x.data(), 0, m, bias_c, got.a);
            EXPECT_TRUE(got == ref) << what << " " << isa_name(k.isa) << " vs scalar";
            Acts split(m, blocks, tile_tokens, per_token);
            k.fn(x.data(), m / 2, m, bias_c, split.a);
            k.fn(x.data(), 0, m / 2, bias_c, split.a);
            EXPECT_TRUE(split == ref) << what << " " << isa_name(k.isa) << " in two ranges";
          }
        }
}

TEST(QuantizeActivations, MakesNoHeapAllocation) {
  const std::size_t m = 9, blocks = 128;
  const std::vector<float> x = make_activations(m, blocks, 3);
  for (const Quantizer& k : quantizers()) {
    Acts acts(m, blocks, 8, false);
    hearth::testing::HeapCounter counter;
    k.fn(x.data(), 0, m, internal::kQ4Bias, acts.a);
    EXPECT_EQ(counter.allocations(), 0u) << isa_name(k.isa);
  }
}

}  // namespace
}  // namespace hearth::kernels
