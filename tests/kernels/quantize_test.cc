// Tests for kernels/quantize.h: every dispatched path against an independent
// naive implementation written here, on odd shapes; the parameter guards; the
// round-trip error bound; threading; and that the hot path never allocates.
//
// Exactness: the kernels' contract (quantize.h) fixes the arithmetic
// (inv = 1/scale in float, one float product, round half to even), and the
// min/max reduction is exact, so codes, scales and zero points must be
// bit-identical across ISAs and thread counts: those comparisons use ==.
#include "kernels/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"
#include "tests/support/heap_counter.h"

namespace hearth::kernels {
namespace {

constexpr std::size_t kDims[] = {1, 7, 31, 33, 4097};
constexpr std::size_t kTokens[] = {1, 3, 65};
constexpr QScheme kSchemes[] = {QScheme::kAsymmetric, QScheme::kSymmetric};

const char* scheme_name(QScheme s) { return s == QScheme::kSymmetric ? "symmetric" : "asymmetric"; }

// ---- Naive reference, written from the definitions rather than from the
// kernels' code: double arithmetic for the parameters, clamping after rounding.

QParams naive_qparams(const float* x, std::size_t n, QScheme scheme) {
  double mn = 0.0, mx = 0.0;  // the range always includes 0
  for (std::size_t i = 0; i < n; ++i) {
    mn = std::min(mn, static_cast<double>(x[i]));
    mx = std::max(mx, static_cast<double>(x[i]));
  }
  if (scheme == QScheme::kSymmetric) {
    const float s = static_cast<float>(std::max(-mn, mx) / 127.0);
    return {std::max(s, kMinScale), 0};
  }
  float s = static_cast<float>((mx - mn) / 255.0);
  if (s < kMinScale) {
    // Widen [mn, mx] about 0 to 255 * kMinScale, keeping the ratio mn : mx.
    const double target = 255.0 * static_cast<double>(kMinScale);
    if (mx - mn == 0.0) {
      mx = target;
    } else {
      const double k = target / (mx - mn);
      mn *= k;
      mx *= k;
    }
    s = kMinScale;
  }
  const double zmin = -128.0 - mn / s, zmax = 127.0 - mx / s;
  const double z = (128.0 + std::fabs(mn / s) < 127.0 + std::fabs(mx / s)) ? zmin : zmax;
  const double zr = std::nearbyint(std::clamp(z, -128.0, 127.0));
  return {s, static_cast<std::int32_t>(zr)};
}

std::int8_t naive_quantize(float x, float scale, std::int32_t zp, int qmin = -128) {
  const float prod = x * (1.0f / scale);
  const double r = std::nearbyint(static_cast<double>(prod)) + zp;
  return static_cast<std::int8_t>(std::clamp(r, static_cast<double>(qmin), 127.0));
}

float naive_dequantize(std::int8_t q, float scale, std::int32_t zp) {
  return static_cast<float>(static_cast<int>(q) - zp) * scale;
}

// ---- Test data: activation-like rows of very different magnitudes, with
// outliers, one-signed rows (ReLU-like), an all-zero row and a constant row.

std::vector<float> make_activations(std::size_t tokens, std::size_t dim, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_mag(-4.0f, 2.5f);
  std::uniform_int_distribution<int> pick(0, 49);
  std::vector<float> x(tokens * dim);
  for (std::size_t t = 0; t < tokens; ++t) {
    float* row = x.data() + t * dim;
    const float mag = std::pow(10.0f, log_mag(rng));
    const std::size_t kind = (t + seed) % 7;
    for (std::size_t i = 0; i < dim; ++i) {
      float v = normal(rng) * mag;
      if (pick(rng) == 0) v *= 20.0f;  // outlier features, as in LLM activations
      if (kind == 1) v = std::fabs(v);
      if (kind == 2) v = -std::fabs(v) - 0.5f * mag;
      if (kind == 3) v = 0.0f;
      if (kind == 4) v = 0.75f * mag;
      row[i] = v;
    }
  }
  return x;
}

struct DynamicResult {
  std::vector<std::int8_t> q;
  std::vector<float> scales;
  std::vector<std::int32_t> zps;
  bool operator==(const DynamicResult& o) const {
    return q == o.q && zps == o.zps &&
           std::memcmp(scales.data(), o.scales.data(), scales.size() * sizeof(float)) == 0;
  }
};

DynamicResult run_dynamic(const std::vector<float>& x, std::size_t tokens, std::size_t dim,
                          QScheme scheme, ThreadPool* pool) {
  DynamicResult r{std::vector<std::int8_t>(tokens * dim, 99), std::vector<float>(tokens, -1.0f),
                  std::vector<std::int32_t>(tokens, 999)};
  quantize_dynamic_per_token(x.data(), tokens, dim, scheme, r.q.data(), r.scales.data(),
                             r.zps.data(), pool);
  return r;
}

DynamicResult run_unfused(const std::vector<float>& x, std::size_t tokens, std::size_t dim,
                          QScheme scheme, ThreadPool* pool) {
  DynamicResult r{std::vector<std::int8_t>(tokens * dim, 99), std::vector<float>(tokens, -1.0f),
                  std::vector<std::int32_t>(tokens, 999)};
  choose_qparams_per_token(x.data(), tokens, dim, scheme, r.scales.data(), r.zps.data(), pool);
  quantize_per_token(x.data(), tokens, dim, r.scales.data(), r.zps.data(), r.q.data(), pool);
  return r;
}

DynamicResult naive_dynamic(const std::vector<float>& x, std::size_t tokens, std::size_t dim,
                            QScheme scheme) {
  DynamicResult r{std::vector<std::int8_t>(tokens * dim), std::vector<float>(tokens),
                  std::vector<std::int32_t>(tokens)};
  for (std::size_t t = 0; t < tokens; ++t) {
    const QParams p = naive_qparams(x.data() + t * dim, dim, scheme);
    r.scales[t] = p.scale;
    r.zps[t] = p.zero_point;
    for (std::size_t i = 0; i < dim; ++i)
      r.q[t * dim + i] = naive_quantize(x[t * dim + i], p.scale, p.zero_point);
  }
  return r;
}

// ---- Every path against the naive reference.

TEST(Quantize, DynamicPerTokenMatchesNaiveOnEveryPath) {
  for (QScheme scheme : kSchemes) {
    for (std::size_t tokens : kTokens) {
      for (std::size_t dim : kDims) {
        const auto x = make_activations(tokens, dim, static_cast<std::uint32_t>(tokens * 31 + dim));
        const DynamicResult want = naive_dynamic(x, tokens, dim, scheme);
        for (Isa isa : supported_isas()) {
          ScopedIsa forced(isa);
          SCOPED_TRACE(std::string(isa_name(isa)) + " " + scheme_name(scheme) + " " +
                       std::to_string(tokens) + "x" + std::to_string(dim));
          const DynamicResult fused = run_dynamic(x, tokens, dim, scheme, nullptr);
          EXPECT_EQ(fused.scales, want.scales);
          EXPECT_EQ(fused.zps, want.zps);
          EXPECT_EQ(fused.q, want.q);
          EXPECT_TRUE(run_unfused(x, tokens, dim, scheme, nullptr) == fused);
        }
      }
    }
  }
}

TEST(Quantize, PerTensorMatchesNaiveOnEveryPath) {
  for (QScheme scheme : kSchemes) {
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{31}, std::size_t{33},
                          std::size_t{100}, std::size_t{4097}}) {
      // A single "row" of n values drawn like one token.
      const auto x = make_activations(1, n, static_cast<std::uint32_t>(n));
      const QParams want = naive_qparams(x.data(), n, scheme);
      for (Isa isa : supported_isas()) {
        ScopedIsa forced(isa);
        SCOPED_TRACE(std::string(isa_name(isa)) + " n=" + std::to_string(n));
        const QParams p = choose_qparams(x.data(), n, scheme);
        EXPECT_EQ(p.scale, want.scale);
        EXPECT_EQ(p.zero_point, want.zero_point);
        std::vector<std::int8_t> q(n);
        quantize_per_tensor(x.data(), n, p, q.data(), nullptr);
        std::vector<float> y(n);
        dequantize_per_tensor(q.data(), n, p, y.data(), nullptr);
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(q[i], naive_quantize(x[i], p.scale, p.zero_point)) << i;
          ASSERT_EQ(y[i], naive_dequantize(q[i], p.scale, p.zero_point)) << i;
        }
      }
    }
  }
}

TEST(Quantize, DequantizePerTokenMatchesNaiveOnEveryPath) {
  for (std::size_t tokens : kTokens) {
    for (std::size_t dim : kDims) {
      const auto x = make_activations(tokens, dim, 7);
      const DynamicResult r = naive_dynamic(x, tokens, dim, QScheme::kAsymmetric);
      for (Isa isa : supported_isas()) {
        ScopedIsa forced(isa);
        std::vector<float> y(tokens * dim, -1.0f);
        dequantize_per_token(r.q.data(), tokens, dim, r.scales.data(), r.zps.data(), y.data(),
                             nullptr);
        for (std::size_t t = 0; t < tokens; ++t)
          for (std::size_t i = 0; i < dim; ++i)
            ASSERT_EQ(y[t * dim + i], naive_dequantize(r.q[t * dim + i], r.scales[t], r.zps[t]))
                << isa_name(isa) << " " << tokens << "x" << dim << " at " << t << "," << i;
      }
    }
  }
}

// Per-channel parameters with scales spanning 2^-12 .. 2^3 and zero points
// all over the int8 range; some values fall outside a channel's range, so the
// clamp is exercised too.
TEST(Quantize, PerChannelMatchesNaiveOnEveryPath) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> zp_dist(-128, 127), exp_dist(-12, 3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::size_t rows : kTokens) {
    for (std::size_t channels : kDims) {
      std::vector<float> scales(channels), x(rows * channels);
      std::vector<std::int32_t> zps(channels);
      for (std::size_t c = 0; c < channels; ++c) {
        scales[c] = std::ldexp(1.0f + 0.37f * static_cast<float>(c % 3), exp_dist(rng));
        zps[c] = zp_dist(rng);
      }
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < channels; ++c)
          x[r * channels + c] = normal(rng) * 60.0f * scales[c];
      for (Isa isa : supported_isas()) {
        ScopedIsa forced(isa);
        std::vector<std::int8_t> q(rows * channels);
        std::vector<float> y(rows * channels);
        quantize_per_channel(x.data(), rows, channels, scales.data(), zps.data(), q.data(),
                             nullptr);
        dequantize_per_channel(q.data(), rows, channels, scales.data(), zps.data(), y.data(),
                               nullptr);
        for (std::size_t r = 0; r < rows; ++r) {
          for (std::size_t c = 0; c < channels; ++c) {
            const std::size_t i = r * channels + c;
            ASSERT_EQ(q[i], naive_quantize(x[i], scales[c], zps[c]))
                << isa_name(isa) << " " << rows << "x" << channels << " at " << r << "," << c;
            ASSERT_EQ(y[i], naive_dequantize(q[i], scales[c], zps[c]));
          }
        }
      }
    }
  }
}

// x[r][c] must use scales[c] (the column), not scales[r].
TEST(Quantize, PerChannelUsesTheColumnsParameters) {
  const float x[] = {4, 4, 4, 8, 8, 8};  // 2 rows x 3 channels
  const float scales[] = {1, 2, 4};
  const std::int32_t zps[] = {0, 10, -10};
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    std::int8_t q[6];
    quantize_per_channel(x, 2, 3, scales, zps, q, nullptr);
    const std::int8_t want[] = {4, 12, -9, 8, 14, -8};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(q[i], want[i]) << isa_name(isa) << " " << i;
    float y[6];
    dequantize_per_channel(q, 2, 3, scales, zps, y, nullptr);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], x[i]) << isa_name(isa) << " " << i;
  }
}

// Exact halves must round to even (not away from zero), on every path and
// in every lane position: scale 0.5 makes inv = 2 exact, so x * inv is exact.
TEST(Quantize, RoundsHalfToEven) {
  const float pattern[] = {0.25f, 0.75f, 1.25f, -0.25f, -0.75f, -1.25f, 63.25f};
  const std::int8_t want_pattern[] = {0, 2, 2, 0, -2, -2, 126};
  std::vector<float> x;
  std::vector<std::int8_t> want;
  for (int rep = 0; rep < 11; ++rep) {  // 77 values: SIMD bodies and tails
    for (int i = 0; i < 7; ++i) {
      x.push_back(pattern[i]);
      want.push_back(want_pattern[i]);
    }
  }
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    std::vector<std::int8_t> q(x.size());
    quantize_per_tensor(x.data(), x.size(), QParams{0.5f, 0}, q.data(), nullptr);
    EXPECT_EQ(q, want) << isa_name(isa);
  }
}

// Values outside the representable range saturate instead of wrapping, even
// when x * inv would overflow int32.
TEST(Quantize, SaturatesOutOfRangeValues) {
  std::vector<float> x;
  for (int i = 0; i < 37; ++i) x.push_back((i % 2 ? 1.0f : -1.0f) * std::pow(10.0f, i % 35));
  const QParams p{0.01f, 100};
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    std::vector<std::int8_t> q(x.size());
    quantize_per_tensor(x.data(), x.size(), p, q.data(), nullptr);
    for (std::size_t i = 0; i < x.size(); ++i)
      EXPECT_EQ(q[i], naive_quantize(x[i], p.scale, p.zero_point)) << isa_name(isa) << " " << i;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::fabs(x[i]) >= 1e3f) {
        EXPECT_EQ(q[i], x[i] > 0 ? 127 : -128) << isa_name(isa) << i;
      }
    }
  }
}

// ---- Parameter guards.

TEST(QParams, RangeAlwaysIncludesZeroAndZeroIsExact) {
  // All-positive data: 0 is the minimum of the extended range -> zp = -128.
  QParams p = choose_qparams_from_range(2.0f, 10.0f, QScheme::kAsymmetric);
  EXPECT_EQ(p.zero_point, -128);
  EXPECT_FLOAT_EQ(p.scale, 10.0f / 255.0f);
  // All-negative data -> zp = 127.
  p = choose_qparams_from_range(-10.0f, -2.0f, QScheme::kAsymmetric);
  EXPECT_EQ(p.zero_point, 127);
  EXPECT_FLOAT_EQ(p.scale, 10.0f / 255.0f);
  // Mixed: 0 maps onto an integer code, dequantizing to exactly 0.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mag(-6.0f, 3.0f);
  for (int i = 0; i < 2000; ++i) {
    const float lo = -std::pow(10.0f, mag(rng)), hi = std::pow(10.0f, mag(rng));
    for (QScheme scheme : kSchemes) {
      p = choose_qparams_from_range(lo, hi, scheme);
      EXPECT_GE(p.scale, kMinScale);
      EXPECT_GE(p.zero_point, -128);
      EXPECT_LE(p.zero_point, 127);
      if (scheme == QScheme::kSymmetric) {
        EXPECT_EQ(p.zero_point, 0);
      }
      const std::int8_t q0 = naive_quantize(0.0f, p.scale, p.zero_point);
      EXPECT_EQ(q0, p.zero_point);
      EXPECT_EQ(naive_dequantize(q0, p.scale, p.zero_point), 0.0f);
      // The whole data range stays representable to within half a step (the
      // zero point was rounded to an integer), plus float rounding of scale.
      const double qmin = scheme == QScheme::kSymmetric ? -127.0 : -128.0;
      const double tol = 1e-4 * p.scale;
      EXPECT_GE(static_cast<double>(lo), (qmin - p.zero_point - 0.5) * p.scale - tol);
      EXPECT_LE(static_cast<double>(hi), (127.0 - p.zero_point + 0.5) * p.scale + tol);
    }
  }
}

TEST(QParams, ZeroAndConstantInputsGetTheMinimumScale) {
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    for (QScheme scheme : kSchemes) {
      const std::vector<float> zeros(37, 0.0f);
      QParams p = choose_qparams(zeros.data(), zeros.size(), scheme);
      EXPECT_EQ(p.scale, kMinScale);
      EXPECT_GE(p.zero_point, -128);
      EXPECT_LE(p.zero_point, 127);
      std::vector<std::int8_t> q(zeros.size());
      quantize_per_tensor(zeros.data(), zeros.size(), p, q.data(), nullptr);
      for (std::int8_t v : q) EXPECT_EQ(naive_dequantize(v, p.scale, p.zero_point), 0.0f);

      // n == 0 behaves as all-zero data.
      const QParams e = choose_qparams(nullptr, 0, scheme);
      EXPECT_EQ(e.scale, p.scale);
      EXPECT_EQ(e.zero_point, p.zero_point);

      // A tiny constant: the scale is floored at kMinScale, never 0 or subnormal.
      for (float c : {1e-9f, -1e-9f, 1e-30f, 0.003f, 0.5f, -0.5f}) {
        const std::vector<float> k(33, c);
        p = choose_qparams(k.data(), k.size(), scheme);
        EXPECT_EQ(
            p.scale,
            std::max(kMinScale, std::fabs(c) / (scheme == QScheme::kSymmetric ? 127.0f : 255.0f)))
            << c;
        EXPECT_GE(p.zero_point, -128);
        EXPECT_LE(p.zero_point, 127);
      }
    }
  }
  // kMinScale is the smallest normal fp16 and its reciprocal is exact.
  EXPECT_EQ(kMinScale, std::ldexp(1.0f, -14));
  EXPECT_EQ(1.0f / kMinScale, 16384.0f);
}

TEST(QParams, MatchTheKnownPyTorchValues) {
  // Hand-computed from the definition: range [-1, 3] -> scale 4/255,
  // zero point -128 + 1 / (4/255) = -128 + 63.75 -> -64.
  const QParams p = choose_qparams_from_range(-1.0f, 3.0f, QScheme::kAsymmetric);
  EXPECT_EQ(p.scale, static_cast<float>(4.0 / 255.0));
  EXPECT_EQ(p.zero_point, -64);
  const QParams s = choose_qparams_from_range(-1.0f, 3.0f, QScheme::kSymmetric);
  EXPECT_EQ(s.scale, static_cast<float>(3.0 / 127.0));
  EXPECT_EQ(s.zero_point, 0);
}

TEST(QParams, SymmetricNeverProducesMinus128) {
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    const std::size_t tokens = 65, dim = 33;
    const auto x = make_activations(tokens, dim, 5);
    const DynamicResult r = run_dynamic(x, tokens, dim, QScheme::kSymmetric, nullptr);
    const DynamicResult u = run_unfused(x, tokens, dim, QScheme::kSymmetric, nullptr);
    for (std::int8_t v : u.q) ASSERT_GE(v, -127) << isa_name(isa);
    for (std::int32_t z : r.zps) ASSERT_EQ(z, 0);
    // The row's extreme value maps to exactly +-127 (full range used).
    for (std::size_t t = 0; t < tokens; ++t) {
      int amax = 0;
      for (std::size_t i = 0; i < dim; ++i) amax = std::max(amax, std::abs(int{r.q[t * dim + i]}));
      if (r.scales[t] > kMinScale) {
        EXPECT_EQ(amax, 127) << t;
      }
    }
  }
}

// ---- Round trip. For x inside the range the parameters were chosen from:
// q = round(v) (+zp) with v = fl(x * fl(1/s)) = (x/s)(1+d1)(1+d2), |d| <= u = 2^-24,
// so |round(v) - x/s| <= 1/2 + 2u|x|/s; dequantizing adds one more rounding,
// u|y|. When the clamp acts (the edges, after the zero point was rounded to an
// integer) the clamped code is within 1/2 of x/s plus the error of the float
// scale (s is range/255 rounded to float: 255 steps of it differ from the
// range by up to 255u*s). Together:
//   |y - x| <= s/2 + 256u*s + 4u|x|.
TEST(Quantize, RoundTripErrorIsAtMostHalfAStep) {
  const double u = std::ldexp(1.0, -24);
  double worst = 0;  // largest error seen, in steps
  for (QScheme scheme : kSchemes) {
    const std::size_t tokens = 65, dim = 4097;
    const auto x = make_activations(tokens, dim, 21);
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      const DynamicResult r = run_dynamic(x, tokens, dim, scheme, nullptr);
      std::vector<float> y(tokens * dim);
      dequantize_per_token(r.q.data(), tokens, dim, r.scales.data(), r.zps.data(), y.data(),
                           nullptr);
      for (std::size_t t = 0; t < tokens; ++t) {
        const double s = r.scales[t];
        for (std::size_t i = 0; i < dim; ++i) {
          const double xi = x[t * dim + i];
          const double err = std::fabs(static_cast<double>(y[t * dim + i]) - xi);
          const double bound = s / 2 + 256 * u * s + 4 * u * std::fabs(xi);
          ASSERT_LE(err, bound) << isa_name(isa) << " " << scheme_name(scheme) << " token " << t
                                << " i " << i << " x " << xi << " scale " << s;
          worst = std::max(worst, err / s);
        }
      }
    }
  }
  // The bound is tight: varied rows come close to half a step.
  EXPECT_GT(worst, 0.49);
  EXPECT_LE(worst, 0.5 + 1e-4);
}

// ---- Threading: the pool must not change a single bit.

TEST(Quantize, ThreadedEqualsSingleThreaded) {
  ThreadPool pool(2);
  for (QScheme scheme : kSchemes) {
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      // 65 x 4097 = 266K elements: above kParallelMinElements, so it splits.
      const std::size_t tokens = 65, dim = 4097;
      const auto x = make_activations(tokens, dim, 9);
      const DynamicResult one = run_dynamic(x, tokens, dim, scheme, nullptr);
      EXPECT_TRUE(run_dynamic(x, tokens, dim, scheme, &pool) == one) << isa_name(isa);
      EXPECT_TRUE(run_unfused(x, tokens, dim, scheme, &pool) == one) << isa_name(isa);

      const std::size_t n = tokens * dim;
      const QParams p1 = choose_qparams(x.data(), n, scheme, nullptr);
      const QParams p2 = choose_qparams(x.data(), n, scheme, &pool);
      EXPECT_EQ(p1.scale, p2.scale);
      EXPECT_EQ(p1.zero_point, p2.zero_point);
      std::vector<std::int8_t> q1(n), q2(n, 99);
      quantize_per_tensor(x.data(), n, p1, q1.data(), nullptr);
      quantize_per_tensor(x.data(), n, p1, q2.data(), &pool);
      EXPECT_EQ(q1, q2);
      std::vector<float> y1(n), y2(n, -1.0f);
      dequantize_per_tensor(q1.data(), n, p1, y1.data(), nullptr);
      dequantize_per_tensor(q1.data(), n, p1, y2.data(), &pool);
      EXPECT_EQ(y1, y2);
      dequantize_per_token(one.q.data(), tokens, dim, one.scales.data(), one.zps.data(), y1.data(),
                           nullptr);
      dequantize_per_token(one.q.data(), tokens, dim, one.scales.data(), one.zps.data(), y2.data(),
                           &pool);
      EXPECT_EQ(y1, y2);

      // Per channel: transpose roles (4097 rows of 65 channels).
      const std::size_t rows = dim, channels = tokens;
      std::vector<float> cs(channels);
      std::vector<std::int32_t> cz(channels);
      for (std::size_t c = 0; c < channels; ++c) {
        cs[c] = one.scales[c];
        cz[c] = one.zps[c];
      }
      quantize_per_channel(x.data(), rows, channels, cs.data(), cz.data(), q1.data(), nullptr);
      quantize_per_channel(x.data(), rows, channels, cs.data(), cz.data(), q2.data(), &pool);
      EXPECT_EQ(q1, q2);
      dequantize_per_channel(q1.data(), rows, channels, cs.data(), cz.data(), y1.data(), nullptr);
      dequantize_per_channel(q1.data(), rows, channels, cs.data(), cz.data(), y2.data(), &pool);
      EXPECT_EQ(y1, y2);
    }
  }
}

// ---- The hot path makes no heap allocation, single- or multi-threaded.

TEST(Quantize, DynamicPerTokenMakesNoHeapAllocation) {
  const std::size_t tokens = 64, dim = 4096;  // 256K elements: the pool splits it
  const auto x = make_activations(tokens, dim, 13);
  std::vector<std::int8_t> q(tokens * dim);
  std::vector<float> scales(tokens), y(tokens * dim);
  std::vector<std::int32_t> zps(tokens);
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (QScheme scheme : kSchemes) {
      // Warm-up: first use of the pool and of the ISA dispatch.
      quantize_dynamic_per_token(x.data(), tokens, dim, scheme, q.data(), scales.data(), zps.data(),
                                 p);
      hearth::testing::HeapCounter counter;
      quantize_dynamic_per_token(x.data(), tokens, dim, scheme, q.data(), scales.data(), zps.data(),
                                 p);
      choose_qparams_per_token(x.data(), tokens, dim, scheme, scales.data(), zps.data(), p);
      quantize_per_token(x.data(), tokens, dim, scales.data(), zps.data(), q.data(), p);
      dequantize_per_token(q.data(), tokens, dim, scales.data(), zps.data(), y.data(), p);
      const QParams qp = choose_qparams(x.data(), x.size(), scheme, p);
      quantize_per_tensor(x.data(), x.size(), qp, q.data(), p);
      dequantize_per_tensor(q.data(), x.size(), qp, y.data(), p);
      EXPECT_EQ(counter.allocations(), 0u) << (p ? "pool" : "no pool");
    }
  }
}

}  // namespace
}  // namespace hearth::kernels
