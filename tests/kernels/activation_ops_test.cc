// Tests of kernels/activation_ops.h: every ISA path against naive double-precision
// implementations written here, and against the scalar path, with tolerances
// derived from the float error analysis stated next to each test.
#include "kernels/activation_ops.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/fp16.h"
#include "kernels/thread_pool.h"
#include "tests/support/heap_counter.h"
#include "tests/support/random_floats.h"

namespace hearth::kernels {
namespace {

using ::hearth::testing::random_normal_floats;

constexpr double kU = 1.0 / (1 << 24);  // unit roundoff of float: 2^-24
const std::size_t kSizes[] = {1, 7, 33, 100, 4097};

// Relative error bound of one exp on a path: glibc's expf (scalar path) is
// within 1 ulp, i.e. 2^-23 relative; SIMD paths promise kExpMaxRelError.
double exp_error(Isa isa) { return isa == Isa::kScalar ? 2 * kU : kExpMaxRelError; }

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// --- exp ---------------------------------------------------------------------

// Checks y = exp(x) against double exp: relative error <= `rel` for normal
// results; absolute error <= 2^-149 (one subnormal step) below FLT_MIN; an
// overflow to inf is accepted only when the exact value is within `rel` of
// FLT_MAX or above it.
::testing::AssertionResult exp_close(float x, float y, double rel, double* worst) {
  const double e = std::exp(static_cast<double>(x));
  if (std::isinf(y) && y > 0) {
    if (e >= FLT_MAX * (1 - rel)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "exp(" << x << ") = inf, exact " << e;
  }
  if (e >= FLT_MIN) {
    const double err = std::fabs(y - e) / e;
    if (err > *worst) *worst = err;
    if (err <= rel) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "exp(" << x << ") = " << y << ", exact " << e << ", rel error " << err;
  }
  if (std::fabs(y - e) <= std::ldexp(1.0, -149)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "exp(" << x << ") = " << y << ", exact " << e;
}

// Every 251st float in [-104, 89] (~9 million; the odd stride varies the low
// mantissa bits), on every path. This is the measurement kExpMaxRelError states.
TEST(Exp, WithinStatedErrorOverTheWholeRange) {
  std::vector<float> xs;
  for (std::uint32_t bits = 0; bits < 0x7f800000u; bits += 251) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (f <= 89.0f) xs.push_back(f);
    if (f <= 104.0f) xs.push_back(-f);
  }
  std::vector<float> ys(xs.size());
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    exp_f32(xs.data(), xs.size(), ys.data());
    double worst = 0;
    std::size_t failures = 0;
    for (std::size_t i = 0; i < xs.size() && failures < 10; ++i) {
      const auto r = exp_close(xs[i], ys[i], exp_error(isa), &worst);
      if (!r) {
        ++failures;
        ADD_FAILURE() << isa_name(isa) << ": " << r.message();
      }
    }
    std::printf("  exp %s: max relative error %.3g (%.2f ulp-ish) over %zu points\n", isa_name(isa),
                worst, worst / (2 * kU), xs.size());
  }
}

TEST(Exp, SpecialValuesAndExtremes) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xs = {0.0f,    -0.0f,   -inf,    inf,      nan,    -1000.0f,
                                 1000.0f, -103.0f, -104.5f, 88.72f,   88.73f, -87.5f,
                                 1e-30f,  -1e-30f, 1.0f,    -FLT_MAX, FLT_MAX};
  std::vector<float> ys(xs.size());
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    exp_f32(xs.data(), xs.size(), ys.data());
    SCOPED_TRACE(isa_name(isa));
    EXPECT_EQ(ys[0], 1.0f);
    EXPECT_EQ(ys[1], 1.0f);
    EXPECT_EQ(ys[2], 0.0f);
    EXPECT_EQ(ys[3], inf);
    EXPECT_TRUE(std::isnan(ys[4]));
    EXPECT_EQ(ys[5], 0.0f);
    EXPECT_EQ(ys[6], inf);
    EXPECT_GT(ys[7], 0.0f);  // exp(-103) ~ 1.4e-45... subnormal but not 0
    EXPECT_EQ(ys[8], 0.0f);
    EXPECT_TRUE(std::isfinite(ys[9]));
    EXPECT_EQ(ys[10], inf);
    double worst = 0;
    for (std::size_t i = 7; i < xs.size(); ++i)
      if (!std::isinf(xs[i])) {
        EXPECT_TRUE(exp_close(xs[i], ys[i], exp_error(isa), &worst));
      }
  }
}

TEST(Exp, OddLengthsAndInPlace) {
  for (std::size_t n : kSizes) {
    const std::vector<float> x = random_normal_floats(n, 3 + static_cast<std::uint32_t>(n), 20.0f);
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      std::vector<float> y(n + 1, -7.0f), z = x;
      exp_f32(x.data(), n, y.data());
      exp_f32(z.data(), n, z.data());
      double worst = 0;
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(exp_close(x[i], y[i], exp_error(isa), &worst)) << isa_name(isa) << " n=" << n;
        ASSERT_TRUE(same_bits(y[i], z[i]));
      }
      EXPECT_EQ(y[n], -7.0f) << "wrote past the end";
    }
  }
}

// --- rms_norm ------------------------------------------------------------------

// Bound on |y - exact| / |exact| (header): the float sum of squares is within
// (ceil(dim/8) + 10) u on every path (non-negative terms: <= terms per partial
// sum - 1, + log2(partials), + 1 for the squares); mean, + eps, sqrt and the
// division add 2.5 u and halve the sum's error; the two products add 2 u.
double rms_norm_bound(std::size_t dim) {
  return ((std::ceil(dim / 8.0) + 10) / 2 + 2.5 + 2 + 1) * kU;
}

std::vector<double> naive_rms_norm(const std::vector<float>& x, const float* w, std::size_t dim,
                                   float eps) {
  std::vector<double> y(x.size());
  for (std::size_t t = 0; t < x.size() / dim; ++t) {
    double ss = 0;
    for (std::size_t i = 0; i < dim; ++i) ss += double(x[t * dim + i]) * x[t * dim + i];
    const double scale = 1 / std::sqrt(ss / dim + eps);
    for (std::size_t i = 0; i < dim; ++i)
      y[t * dim + i] = x[t * dim + i] * scale * (w != nullptr ? w[i] : 1.0);
  }
  return y;
}

TEST(RmsNorm, EveryPathMatchesNaiveAndScalarOnOddSizes) {
  const float eps = 1e-5f;
  for (std::size_t dim : kSizes) {
    for (std::size_t tokens : {1, 3}) {
      const std::vector<float> x =
          random_normal_floats(tokens * dim, 10 + static_cast<std::uint32_t>(dim), 2.0f);
      const std::vector<float> w = random_normal_floats(dim, 20 + static_cast<std::uint32_t>(dim));
      for (const float* wp : {w.data(), static_cast<const float*>(nullptr)}) {
        const std::vector<double> exact = naive_rms_norm(x, wp, dim, eps);
        std::vector<float> scalar(x.size());
        {
          ScopedIsa forced(Isa::kScalar);
          rms_norm(x.data(), wp, tokens, dim, eps, scalar.data());
        }
        const double bound = rms_norm_bound(dim);
        for (Isa isa : supported_isas()) {
          ScopedIsa forced(isa);
          std::vector<float> y(x.size() + 1, -7.0f), in_place = x;
          rms_norm(x.data(), wp, tokens, dim, eps, y.data());
          rms_norm(in_place.data(), wp, tokens, dim, eps, in_place.data());
          for (std::size_t i = 0; i < x.size(); ++i) {
            ASSERT_NEAR(y[i], exact[i], std::fabs(exact[i]) * bound + 1e-30)
                << isa_name(isa) << " dim=" << dim << " i=" << i;
            // Both within `bound` of exact.
            ASSERT_NEAR(y[i], scalar[i], std::fabs(exact[i]) * 2 * bound + 1e-30);
            ASSERT_TRUE(same_bits(y[i], in_place[i])) << "in place differs";
          }
          EXPECT_EQ(y[x.size()], -7.0f) << "wrote past the end";
        }
      }
    }
  }
}

TEST(RmsNorm, ScaleInvariantAndEpsMatters) {
  // A row of zeros gives zeros (scale 1/sqrt(eps) is finite), not NaN.
  std::vector<float> z(33, 0.0f), y(33, 1.0f);
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    rms_norm(z.data(), nullptr, 1, z.size(), 1e-6f, y.data());
    for (float v : y) ASSERT_EQ(v, 0.0f) << isa_name(isa);
    // A constant row of c has rms |c|: output +-1 up to eps.
    std::vector<float> c(100, -3.0f), out(100);
    rms_norm(c.data(), nullptr, 1, c.size(), 0.0f, out.data());
    for (float v : out) ASSERT_NEAR(v, -1.0f, 4 * kU) << isa_name(isa);
  }
}

// --- rope --------------------------------------------------------------------

struct RopeCase {
  RopeStyle style;
  std::size_t n_heads, head_dim, rot_dim;
  float base, freq_scale;
  bool factors;
};

// rot_dim < head_dim, rot_dim/2 not a multiple of 8 or 16 (10 pairs), and more
// than the 64 pairs a block holds (96 pairs).
const RopeCase kRopeCases[] = {
    {RopeStyle::kNormal, 3, 128, 128, 10000.0f, 1.0f, false},
    {RopeStyle::kNeox, 3, 128, 128, 10000.0f, 1.0f, false},
    {RopeStyle::kNormal, 2, 128, 64, 10000.0f, 0.25f, false},
    {RopeStyle::kNeox, 2, 128, 64, 10000.0f, 0.25f, false},
    {RopeStyle::kNormal, 1, 80, 20, 500000.0f, 1.0f, true},
    {RopeStyle::kNeox, 1, 80, 20, 500000.0f, 1.0f, true},
    {RopeStyle::kNormal, 2, 256, 192, 1000000.0f, 0.5f, true},
    {RopeStyle::kNeox, 2, 256, 192, 1000000.0f, 0.5f, true},
    {RopeStyle::kNormal, 1, 2, 2, 10000.0f, 1.0f, false},
    {RopeStyle::kNeox, 5, 6, 6, 10000.0f, 2.0f, true},
};

const std::int32_t kPositions[] = {0, 1, 511, 4095};

// Exact rotation in double and, per element, the bound on the float result's
// error. The float angle theta_i = p * ts^i (ts = powf(base, -2/rot_dim)) is
// built by i float products, each adding u relative error, from ts whose own
// relative error is (1 + |ln ts|) u (powf's rounding, and the rounding of the
// exponent -2/rot_dim amplified by |ln ts|), so theta_i is within
// (i (2 + |ln ts|) + 3) u relative (+3: float(p), / factor, * freq_scale).
// cosf/sinf add <= 1 ulp (<= u absolute on [-1, 1]) each and the rotation's two
// products and sum <= 2 u of |a| + |b|. So
//   |err| <= (|a| + |b|) (|theta_i| (i (2 + |ln ts|) + 3) u + 4 u).
struct RopeExpectation {
  std::vector<double> value, bound;
};

RopeExpectation naive_rope(const std::vector<float>& x, const std::vector<std::int32_t>& pos,
                           const RopeCase& c, const std::vector<float>& ff) {
  RopeExpectation r;
  r.value.assign(x.begin(), x.end());
  r.bound.assign(x.size(), 0.0);
  const std::size_t row = c.n_heads * c.head_dim, half = c.rot_dim / 2;
  const double ln_ts = std::fabs(2.0 * std::log(double(c.base)) / double(c.rot_dim));
  for (std::size_t t = 0; t < pos.size(); ++t) {
    for (std::size_t h = 0; h < c.n_heads; ++h) {
      const std::size_t o = t * row + h * c.head_dim;
      for (std::size_t i = 0; i < half; ++i) {
        const double theta = double(pos[t]) * c.freq_scale *
                             std::pow(double(c.base), -2.0 * double(i) / double(c.rot_dim)) /
                             (c.factors ? double(ff[i]) : 1.0);
        const std::size_t ia = c.style == RopeStyle::kNormal ? o + 2 * i : o + i;
        const std::size_t ib = c.style == RopeStyle::kNormal ? o + 2 * i + 1 : o + i + half;
        const double a = x[ia], b = x[ib];
        r.value[ia] = a * std::cos(theta) - b * std::sin(theta);
        r.value[ib] = a * std::sin(theta) + b * std::cos(theta);
        const double bound = (std::fabs(a) + std::fabs(b)) *
                             (std::fabs(theta) * (double(i) * (2 + ln_ts) + 3) * kU + 4 * kU);
        r.bound[ia] = r.bound[ib] = bound;
      }
    }
  }
  return r;
}

std::vector<float> factors_for(const RopeCase& c) {
  // llama3-like: 1 for high frequencies, up to 8 for low ones.
  std::vector<float> ff(c.rot_dim / 2);
  for (std::size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + 7.0f * float(i) / float(ff.size());
  return ff;
}

TEST(Rope, EveryPathMatchesNaiveForBothStylesFarPositionsAndScaling) {
  double worst_ratio = 0;
  for (const RopeCase& c : kRopeCases) {
    const std::vector<std::int32_t> pos(std::begin(kPositions), std::end(kPositions));
    const std::size_t row = c.n_heads * c.head_dim;
    const std::vector<float> x =
        random_normal_floats(pos.size() * row, 40 + static_cast<std::uint32_t>(row));
    const std::vector<float> ff = factors_for(c);
    RopeConfig cfg;
    cfg.style = c.style;
    cfg.rot_dim = c.rot_dim;
    cfg.base = c.base;
    cfg.freq_scale = c.freq_scale;
    cfg.freq_factors = c.factors ? ff.data() : nullptr;
    const RopeExpectation exact = naive_rope(x, pos, c, ff);
    std::vector<float> scalar = x;
    {
      ScopedIsa forced(Isa::kScalar);
      rope(scalar.data(), pos.size(), c.n_heads, c.head_dim, pos.data(), cfg);
    }
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      std::vector<float> y = x;
      rope(y.data(), pos.size(), c.n_heads, c.head_dim, pos.data(), cfg);
      for (std::size_t i = 0; i < y.size(); ++i) {
        const std::size_t d = i % c.head_dim;
        const auto where = [&] {
          return ::testing::Message()
                 << isa_name(isa) << " style=" << int(c.style) << " head_dim=" << c.head_dim
                 << " rot_dim=" << c.rot_dim << " i=" << i;
        };
        if (d >= c.rot_dim) {
          ASSERT_TRUE(same_bits(y[i], x[i])) << "dimension past rot_dim changed " << where();
          continue;
        }
        ASSERT_NEAR(y[i], exact.value[i], exact.bound[i] + 1e-30) << where();
        if (exact.bound[i] > 0)
          worst_ratio = std::fmax(worst_ratio, std::fabs(y[i] - exact.value[i]) / exact.bound[i]);
        // Same angles on every path; the rotation differs by FMA contraction
        // only: <= 2 u of |a| + |b| each way, and |a| + |b| <= 2 * max(|x|).
        const float ab = std::fabs(x[i]) + std::fabs(exact.value[i]);
        ASSERT_NEAR(y[i], scalar[i], 4 * kU * 2 * ab + 1e-30) << where();
      }
    }
  }
  std::printf("  rope: worst error / derived bound = %.3f\n", worst_ratio);
}

// attn_factor multiplies cos and sin: the rotated dimensions come out
// scaled by it (within the rounding of one more product), the others not.
TEST(Rope, AttnFactorScalesTheRotatedDimensionsOnEveryPath) {
  const std::size_t heads = 3, head_dim = 24, rot_dim = 16;
  std::vector<float> x = random_normal_floats(5 * heads * head_dim, 31);
  for (float& v : x) v = std::clamp(v, -1.0f, 1.0f);  // |a| + |b| <= 2
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    RopeConfig cfg;
    cfg.style = RopeStyle::kNeox;
    cfg.rot_dim = rot_dim;
    std::vector<float> plain = x, scaled = x;
    rope(plain.data(), 5, heads, head_dim, std::size_t{7}, cfg);
    cfg.attn_factor = 1.25f;
    rope(scaled.data(), 5, heads, head_dim, std::size_t{7}, cfg);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const bool rotated = i % head_dim < rot_dim;
      const double want = rotated ? 1.25 * plain[i] : x[i];
      // The rotation a cos - b sin may cancel: its error is relative to |a| + |b|.
      ASSERT_NEAR(scaled[i], want, 8 * kU * 4.0) << isa_name(isa) << " " << i;
    }
  }
}

TEST(Rope, PositionZeroIsIdentityOnEveryPath) {
  for (const RopeCase& c : kRopeCases) {
    const std::size_t row = c.n_heads * c.head_dim;
    const std::vector<float> x = random_normal_floats(2 * row, 77);
    const std::vector<float> ff = factors_for(c);
    RopeConfig cfg{c.style, c.rot_dim, c.base, c.freq_scale, c.factors ? ff.data() : nullptr};
    const std::int32_t zeros[2] = {0, 0};
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      std::vector<float> y = x;
      rope(y.data(), 2, c.n_heads, c.head_dim, zeros, cfg);
      for (std::size_t i = 0; i < y.size(); ++i)
        ASSERT_TRUE(same_bits(y[i], x[i])) << isa_name(isa) << " i=" << i;
    }
  }
}

TEST(Rope, StartPosOverloadEqualsExplicitPositions) {
  const RopeCase& c = kRopeCases[2];
  const std::size_t row = c.n_heads * c.head_dim, tokens = 9;
  const std::vector<float> x = random_normal_floats(tokens * row, 5);
  RopeConfig cfg{c.style, c.rot_dim, c.base, c.freq_scale, nullptr};
  std::vector<std::int32_t> pos(tokens);
  for (std::size_t t = 0; t < tokens; ++t) pos[t] = static_cast<std::int32_t>(100 + t);
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    std::vector<float> a = x, b = x;
    rope(a.data(), tokens, c.n_heads, c.head_dim, pos.data(), cfg);
    rope(b.data(), tokens, c.n_heads, c.head_dim, std::size_t{100}, cfg);
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(same_bits(a[i], b[i]));
  }
}

// Rotation preserves the norm of each pair, and the pairing is the style's:
// with only x[0] = 1 in a head, kNormal moves weight into x[1], kNeox into
// x[rot_dim/2].
TEST(Rope, PairingFollowsTheStyle) {
  const std::size_t head_dim = 16, rot_dim = 8;
  for (RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      std::vector<float> x(head_dim, 0.0f);
      x[0] = 1.0f;
      rope(x.data(), 1, 1, head_dim, std::size_t{1}, RopeConfig{style, rot_dim});
      const std::size_t partner = style == RopeStyle::kNormal ? 1 : rot_dim / 2;
      EXPECT_NEAR(x[0], std::cos(1.0), 4 * kU);
      EXPECT_NEAR(x[partner], std::sin(1.0), 4 * kU);
      for (std::size_t i = 0; i < head_dim; ++i) {
        if (i != 0 && i != partner) {
          EXPECT_EQ(x[i], 0.0f) << i;
        }
      }
    }
  }
}

// --- swiglu ------------------------------------------------------------------

// silu(g) * up in float: exp(-g) has relative error E (exp_error), which
// 1 + exp(-g) carries at most unchanged (factor e/(1+e) < 1); the sum, the
// division and the product add 3 u. Bound: (E + 4 u) relative, plus 1e-35
// absolute for g << 0 where the exact value is below float's normal range.
TEST(Swiglu, EveryPathMatchesNaiveIncludingExtremes) {
  for (std::size_t n : kSizes) {
    std::vector<float> g = random_normal_floats(n, 50 + static_cast<std::uint32_t>(n), 8.0f);
    const std::vector<float> up = random_normal_floats(n, 60 + static_cast<std::uint32_t>(n));
    const float extremes[] = {-1000.0f, 1000.0f, -88.8f, 88.8f, -0.0f, 0.0f, -104.0f, 30.0f};
    for (std::size_t i = 0; i < n && i < std::size(extremes); ++i) g[i * 13 % n] = extremes[i];
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      std::vector<float> out(n + 1, -7.0f), alias_gate = g, alias_up = up;
      swiglu(g.data(), up.data(), n, out.data());
      swiglu(alias_gate.data(), up.data(), n, alias_gate.data());
      swiglu(g.data(), alias_up.data(), n, alias_up.data());
      const double bound = exp_error(isa) + 4 * kU;
      for (std::size_t i = 0; i < n; ++i) {
        const double gd = g[i];
        const double exact = gd / (1 + std::exp(-gd)) * up[i];
        ASSERT_FALSE(std::isnan(out[i])) << "g=" << g[i];
        ASSERT_NEAR(out[i], exact, std::fabs(exact) * bound + 1e-35)
            << isa_name(isa) << " n=" << n << " g=" << g[i];
        ASSERT_TRUE(same_bits(out[i], alias_gate[i]));
        ASSERT_TRUE(same_bits(out[i], alias_up[i]));
      }
      EXPECT_EQ(out[n], -7.0f) << "wrote past the end";
    }
  }
}

// gelu_tanh(g) * up against double 0.5 g (1 + tanh(u)). The float argument
// z = 2 sqrt(2/pi) (g + 0.044715 g^3) errs by <= 4 u |z| + u, which exp turns
// into as much relative error; exp itself adds E, the division and products 4u.
TEST(Geglu, EveryPathMatchesNaiveIncludingExtremes) {
  for (std::size_t n : kSizes) {
    std::vector<float> g = random_normal_floats(n, 70 + static_cast<std::uint32_t>(n), 4.0f);
    const std::vector<float> up = random_normal_floats(n, 80 + static_cast<std::uint32_t>(n));
    const float extremes[] = {-1000.0f, 1000.0f, -12.0f, 12.0f, -0.0f, 0.0f, -5.0f, 30.0f};
    for (std::size_t i = 0; i < n && i < std::size(extremes); ++i) g[i * 13 % n] = extremes[i];
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      std::vector<float> out(n + 1, -7.0f), alias_gate = g;
      geglu(g.data(), up.data(), n, out.data());
      geglu(alias_gate.data(), up.data(), n, alias_gate.data());
      for (std::size_t i = 0; i < n; ++i) {
        const double gd = g[i];
        const double u = std::sqrt(2.0 / M_PI) * (gd + 0.044715 * gd * gd * gd);
        // 0.5 g (1 + tanh(u)) = g / (1 + exp(-2u)); the latter does not
        // cancel in double for very negative u.
        const double exact = gd / (1 + std::exp(-2 * u)) * up[i];
        const double bound = exp_error(isa) + (8 * std::fabs(u) + 6) * kU;
        ASSERT_FALSE(std::isnan(out[i])) << "g=" << g[i];
        ASSERT_NEAR(out[i], exact, std::fabs(exact) * bound + 1e-35)
            << isa_name(isa) << " n=" << n << " g=" << g[i];
        ASSERT_TRUE(same_bits(out[i], alias_gate[i]));
      }
      EXPECT_EQ(out[n], -7.0f) << "wrote past the end";
    }
  }
}

// cap * tanh(x / cap): std::tanh on the scalar path (~1 ulp), the
// exp-based form on SIMD paths (absolute error <= 4e-7 * cap, stated in
// kernels/activation_ops.h); outputs never leave [-cap, cap].
TEST(Softcap, EveryPathMatchesNaiveIncludingInfinities) {
  for (float cap : {30.0f, 0.5f}) {
    for (std::size_t n : kSizes) {
      std::vector<float> x = random_normal_floats(n, 90 + static_cast<std::uint32_t>(n), 3 * cap);
      const float extremes[] = {INFINITY, -INFINITY, 1e30f, -1e30f, 0.0f, -0.0f, 1e-30f, cap};
      for (std::size_t i = 0; i < n && i < std::size(extremes); ++i) x[i * 13 % n] = extremes[i];
      for (Isa isa : supported_isas()) {
        ScopedIsa forced(isa);
        std::vector<float> y = x;
        y.push_back(-7.0f);
        softcap(y.data(), n, cap);
        for (std::size_t i = 0; i < n; ++i) {
          const double exact = cap * std::tanh(static_cast<double>(x[i]) / cap);
          ASSERT_NEAR(y[i], exact, 4e-7 * cap) << isa_name(isa) << " n=" << n << " x=" << x[i];
          ASSERT_LE(std::fabs(y[i]), cap);
        }
        EXPECT_EQ(y[n], -7.0f) << "wrote past the end";
      }
    }
  }
}

// --- softmax -----------------------------------------------------------------

// Per element, with d_i = x_i - max: the float subtraction errs by u |d_i|,
// which exp turns into u |d_i| relative; exp itself adds E. The sum of the
// exponentials has relative error max_j(E + u |d_j|) + (ceil(n/8) + 10) u (as
// rms_norm's sum), 1/sum and the product add 2 u. So
//   |err_i| / exact_i <= 2 E + u (|d_i| + max_j |d_j|) + (ceil(n/8) + 12) u.
TEST(Softmax, EveryPathMatchesNaiveWithMaskedEntries) {
  const float inf = std::numeric_limits<float>::infinity();
  for (std::size_t n : kSizes) {
    for (std::size_t rows : {1, 3}) {
      std::vector<float> x =
          random_normal_floats(rows * n, 70 + static_cast<std::uint32_t>(n), 3.0f);
      // Mask every 5th entry except the first of each row (rows keep a finite value).
      for (std::size_t i = 0; i < x.size(); ++i)
        if (i % n != 0 && i % 5 == 2) x[i] = -inf;
      std::vector<double> exact(x.size());
      std::vector<double> max_d(rows, 0.0), row_max(rows);
      for (std::size_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * n;
        double mx = -INFINITY, sum = 0;
        for (std::size_t i = 0; i < n; ++i) mx = std::fmax(mx, xr[i]);
        row_max[r] = mx;
        for (std::size_t i = 0; i < n; ++i) sum += std::exp(xr[i] - mx);
        for (std::size_t i = 0; i < n; ++i) {
          exact[r * n + i] = std::exp(xr[i] - mx) / sum;
          if (std::isfinite(xr[i])) max_d[r] = std::fmax(max_d[r], mx - xr[i]);
        }
      }
      std::vector<float> scalar = x;
      {
        ScopedIsa forced(Isa::kScalar);
        softmax(scalar.data(), rows, n);
      }
      for (Isa isa : supported_isas()) {
        ScopedIsa forced(isa);
        std::vector<float> y = x;
        y.push_back(-7.0f);
        softmax(y.data(), rows, n);
        for (std::size_t r = 0; r < rows; ++r) {
          double total = 0;
          for (std::size_t i = 0; i < n; ++i) {
            const std::size_t k = r * n + i;
            if (std::isinf(x[k])) {
              ASSERT_EQ(y[k], 0.0f) << "masked entry";
              continue;
            }
            const double d = row_max[r] - x[k];
            const double bound =
                2 * exp_error(isa) + kU * (d + max_d[r]) + (std::ceil(n / 8.0) + 12) * kU;
            ASSERT_NEAR(y[k], exact[k], exact[k] * bound + 1e-37)
                << isa_name(isa) << " n=" << n << " r=" << r << " i=" << i;
            ASSERT_NEAR(
                y[k], scalar[k],
                exact[k] * (bound + 2 * exp_error(Isa::kScalar) + (std::ceil(n / 8.0) + 12) * kU) +
                    1e-37);
            total += y[k];
          }
          EXPECT_NEAR(total, 1.0, 1e-4) << isa_name(isa);
        }
        EXPECT_EQ(y[x.size()], -7.0f) << "wrote past the end";
      }
    }
  }
}

TEST(Softmax, LargeInputsAreStable) {
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    std::vector<float> x = {1000.0f, 999.0f, -1000.0f, 3e38f, 3e38f};
    softmax(x.data(), 1, 3);  // the first three: no overflow, exact ratios
    EXPECT_NEAR(x[0], 1 / (1 + std::exp(-1.0)), 1e-6);
    EXPECT_NEAR(x[1], std::exp(-1.0) / (1 + std::exp(-1.0)), 1e-6);
    EXPECT_EQ(x[2], 0.0f);
    softmax(x.data() + 3, 1, 2);
    EXPECT_EQ(x[3], 0.5f);
    EXPECT_EQ(x[4], 0.5f);
    std::vector<float> one = {-5.0f};
    softmax(one.data(), 1, 1);
    EXPECT_EQ(one[0], 1.0f) << isa_name(isa);
  }
}

// --- vector helpers ----------------------------------------------------------

// One float operation per element: every path must give the float result
// exactly, which is the double result rounded once.
TEST(VectorHelpers, AddScaleAndBiasAreExactOnEveryPath) {
  for (std::size_t n : kSizes) {
    const std::vector<float> a = random_normal_floats(n, 90 + static_cast<std::uint32_t>(n));
    const std::vector<float> b = random_normal_floats(n, 91 + static_cast<std::uint32_t>(n), 5.0f);
    const std::size_t rows = 3;
    const std::vector<float> m = random_normal_floats(rows * n, 92);
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      std::vector<float> y = a;
      y.push_back(-7.0f);
      add_inplace(y.data(), b.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(y[i], static_cast<float>(double(a[i]) + double(b[i]))) << isa_name(isa);
      EXPECT_EQ(y[n], -7.0f);
      y = a;
      scale_inplace(y.data(), 0.37f, n);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(y[i], static_cast<float>(double(a[i]) * 0.37f)) << isa_name(isa);
      std::vector<float> z = m;
      add_rows_inplace(z.data(), b.data(), rows, n);
      for (std::size_t i = 0; i < z.size(); ++i)
        ASSERT_EQ(z[i], static_cast<float>(double(m[i]) + double(b[i % n]))) << isa_name(isa);
    }
  }
}

// --- widening ------------------------------------------------------------------

// Every 16-bit pattern (NaNs and subnormals included, compared as bits) and 7
// more, so that the length is odd (the SIMD paths end on a partial vector) and
// above kActivationOpsParallelMinElements (the pool splits it), on every path.
TEST(Widen, F16AndBf16AreExactForEveryBitPatternOnEveryPath) {
  ThreadPool pool(2);
  std::vector<std::uint16_t> h(65536 + 7);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<std::uint16_t>(i);
  std::vector<float> y(h.size() + 1);
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      y.back() = -7.0f;
      widen_f16(h.data(), h.size(), y.data(), p);
      for (std::size_t i = 0; i < h.size(); ++i)
        ASSERT_TRUE(same_bits(y[i], fp16_to_f32(h[i]))) << isa_name(isa) << " f16 " << h[i];
      widen_bf16(h.data(), h.size(), y.data(), p);
      for (std::size_t i = 0; i < h.size(); ++i)
        ASSERT_TRUE(same_bits(y[i], bf16_to_f32(h[i]))) << isa_name(isa) << " bf16 " << h[i];
      EXPECT_EQ(y.back(), -7.0f) << "written past n";
    }
  }
}

// --- threading and heap ------------------------------------------------------

// Large enough to split: 16 x 4096 = 65536 elements >= kActivationOpsParallelMinElements.
TEST(Threading, PoolGivesTheSameBitsAsOneThread) {
  ThreadPool pool(2);
  const std::size_t tokens = 16, dim = 4096;
  const std::vector<float> x = random_normal_floats(tokens * dim, 101);
  const std::vector<float> w = random_normal_floats(dim, 102);
  const std::vector<float> u = random_normal_floats(tokens * dim, 103);
  const std::vector<std::int32_t> pos = {0,  1,  511, 4095, 7,  8,  9,  10,
                                         11, 12, 13,  14,   15, 16, 17, 18};
  RopeConfig cfg{RopeStyle::kNeox, 128};
  auto run_all = [&](ThreadPool* p) {
    std::vector<float> out(x.size() * 5);
    float* o = out.data();
    rms_norm(x.data(), w.data(), tokens, dim, 1e-5f, o, p);
    swiglu(x.data(), u.data(), x.size(), o + x.size(), p);
    std::memcpy(o + 2 * x.size(), x.data(), x.size() * 4);
    softmax(o + 2 * x.size(), tokens, dim, p);
    std::memcpy(o + 3 * x.size(), x.data(), x.size() * 4);
    rope(o + 3 * x.size(), tokens, 32, 128, pos.data(), cfg, p);
    std::memcpy(o + 4 * x.size(), x.data(), x.size() * 4);
    add_rows_inplace(o + 4 * x.size(), w.data(), tokens, dim, p);
    add_inplace(o + 4 * x.size(), u.data(), x.size(), p);
    scale_inplace(o + 4 * x.size(), 0.5f, x.size(), p);
    return out;
  };
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    const std::vector<float> one = run_all(nullptr), two = run_all(&pool);
    for (std::size_t i = 0; i < one.size(); ++i)
      ASSERT_TRUE(same_bits(one[i], two[i])) << isa_name(isa) << " i=" << i;
  }
}

TEST(Heap, HotOpsMakeNoHeapAllocation) {
  ThreadPool pool(2);
  const std::size_t tokens = 16, dim = 4096;
  std::vector<float> x = random_normal_floats(tokens * dim, 111), y(x.size());
  const std::vector<float> w = random_normal_floats(dim, 112);
  RopeConfig cfg{RopeStyle::kNormal, 128};
  const std::vector<float> ff(64, 2.0f);
  RopeConfig cfg3{RopeStyle::kNeox, 128, 500000.0f, 1.0f, ff.data()};
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      auto run = [&] {
        rms_norm(x.data(), w.data(), tokens, dim, 1e-5f, y.data(), p);
        swiglu(x.data(), y.data(), x.size(), y.data(), p);
        softmax(y.data(), tokens, dim, p);
        rope(y.data(), tokens, 32, 128, std::size_t{4000}, cfg, p);
        rope(y.data(), tokens, 32, 128, std::size_t{4000}, cfg3, p);
        add_inplace(y.data(), x.data(), x.size(), p);
        add_rows_inplace(y.data(), w.data(), tokens, dim, p);
        scale_inplace(y.data(), 0.5f, y.size(), p);
        exp_f32(x.data(), 100, y.data(), p);
      };
      run();  // warm-up
      hearth::testing::HeapCounter counter;
      run();
      EXPECT_EQ(counter.allocations(), 0u) << isa_name(isa) << (p ? " pooled" : " single");
    }
  }
}

}  // namespace
}  // namespace hearth::kernels
