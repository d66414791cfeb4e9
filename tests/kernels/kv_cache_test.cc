#include "kernels/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "tests/support/heap_counter.h"

namespace hearth::kernels {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;

Buffer alloc64(std::size_t bytes) {
  return Buffer(static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
}

std::vector<float> random_rows(std::size_t rows, std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), f(0.25f, 4.0f);
  std::vector<float> x(rows * n);
  for (std::size_t r = 0; r < rows; ++r) {
    const float scale = f(rng);  // rows of different magnitudes, so scales differ
    for (std::size_t i = 0; i < n; ++i) x[r * n + i] = u(rng) * scale;
  }
  return x;
}

TEST(KvLayout, ValidationNamesTheField) {
  EXPECT_TRUE(validate_kv_layout({8, 128, 4096}).ok());
  absl::Status s = validate_kv_layout({0, 128, 16});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("n_kv_heads"), std::string::npos) << s;
  s = validate_kv_layout({8, 0, 16});
  EXPECT_NE(s.message().find("head_dim"), std::string::npos) << s;
  s = validate_kv_layout({8, 128, 0});
  EXPECT_NE(s.message().find("max_seq"), std::string::npos) << s;
  s = validate_kv_layout({std::size_t{1} << 40, std::size_t{1} << 20, std::size_t{1} << 10});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("overflows"), std::string::npos) << s;
  EXPECT_EQ(quantized_kv_bytes({0, 128, 16}), 0u);
  EXPECT_EQ(float_kv_bytes({std::size_t{1} << 40, std::size_t{1} << 20, 1024}), 0u);
}

TEST(KvLayout, BytesAndViewsPlaceEveryArrayOnA64ByteBoundaryWithoutOverlap) {
  // Aligned sizes add up exactly.
  // int8: K and V codes, float scales, int8 zero points (133 bytes a row).
  EXPECT_EQ(quantized_kv_bytes({8, 128, 4096}),
            2u * 8 * 4096 * 128 + 2u * 8 * 4096 * 4 + 2u * 8 * 4096 * 1);
  EXPECT_EQ(float_kv_bytes({8, 128, 4096}), 2u * 8 * 4096 * 128 * 4);
  for (KvLayout l : {KvLayout{1, 1, 1}, KvLayout{3, 13, 7}, KvLayout{2, 64, 33}}) {
    const std::size_t qb = quantized_kv_bytes(l);
    Buffer mem = alloc64(qb);
    const QuantizedKvView v = quantized_kv_view(l, mem.get());
    const auto at = [&](const void* p) {
      return static_cast<std::size_t>(static_cast<const std::byte*>(p) - mem.get());
    };
    const std::size_t rows = l.n_kv_heads * l.max_seq;
    EXPECT_EQ(at(v.k), 0u);
    EXPECT_EQ(at(v.v) % 64, 0u);
    EXPECT_EQ(at(v.k_scale) % 64, 0u);
    EXPECT_EQ(at(v.v_scale) % 64, 0u);
    EXPECT_EQ(at(v.k_zero) % 64, 0u);
    EXPECT_EQ(at(v.v_zero) % 64, 0u);
    EXPECT_GE(at(v.v), rows * l.head_dim);
    EXPECT_GE(at(v.k_scale), at(v.v) + rows * l.head_dim);
    EXPECT_GE(at(v.v_scale), at(v.k_scale) + rows * 4);
    EXPECT_GE(at(v.k_zero), at(v.v_scale) + rows * 4);
    EXPECT_GE(at(v.v_zero), at(v.k_zero) + rows);
    EXPECT_LE(at(v.v_zero) + rows, qb);
    const std::size_t fb = float_kv_bytes(l);
    Buffer fmem = alloc64(fb);
    const FloatKvView f = float_kv_view(l, fmem.get());
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(f.v) % 64, 0u);
    EXPECT_GE(static_cast<std::size_t>(f.v - f.k), rows * l.head_dim);
    EXPECT_LE(static_cast<std::size_t>(f.v - f.k) * 4 + rows * l.head_dim * 4, fb);
  }
}

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
// 255 scale, so 2^-12 scale covers it.
void expect_row_quantized(const float* x, std::size_t n, const std::int8_t* q,
                          KvRowQuantization rq) {
  double lo = 0, hi = 0;
  for (std::size_t i = 0; i < n; ++i) {
    lo = std::min(lo, static_cast<double>(x[i]));
    hi = std::max(hi, static_cast<double>(x[i]));
  }
  const double range = hi - lo;
  if (range == 0) {
    ASSERT_EQ(rq.scale, 0.0f);
    ASSERT_EQ(rq.zero_point, 0);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(q[i], 0);
    return;
  }
  ASSERT_FLOAT_EQ(rq.scale, static_cast<float>(range / 255.0));
  const double scale = rq.scale;
  ASSERT_LE(std::fabs(rq.zero_point - (-128.0 - lo / (range / 255.0))), 0.5 + 1e-3);
  int top = -128;
  for (std::size_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(x[i]) - scale * (q[i] - rq.zero_point));
    ASSERT_LE(err, scale * (0.5 + 0x1p-12)) << "element " << i << " of " << n;
    if (x[i] == 0.0f) {
      ASSERT_EQ(q[i], rq.zero_point) << "element " << i;
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

TEST(QuantizeKvRow, EveryPathIsBitIdenticalToScalarAndWithinHalfAStep) {
  const std::vector<std::size_t> sizes = {1, 7, 8, 13, 16, 17, 31, 64, 80, 100, 128, 129};
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
    KvRowQuantization ref_rq[kRows];
    {
      ScopedIsa forced(Isa::kScalar);
      for (std::size_t r = 0; r < kRows; ++r)
        ref_rq[r] = quantize_kv_row(&x[r * n], n, &ref[r * n]);
    }
    for (std::size_t r = 0; r < kRows; ++r) {
      SCOPED_TRACE("n=" + std::to_string(n) + " row " + std::to_string(r));
      expect_row_quantized(&x[r * n], n, &ref[r * n], ref_rq[r]);
    }
    // Constant rows use the end code and decode to the constant.
    EXPECT_EQ(ref[3 * n], 127);
    EXPECT_EQ(ref_rq[3].zero_point, -128);
    EXPECT_EQ(ref[4 * n], -128);
    EXPECT_EQ(ref_rq[4].zero_point, 127);
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      for (std::size_t r = 0; r < kRows; ++r) {
        std::memset(got.data(), 0x55, got.size());
        const KvRowQuantization rq = quantize_kv_row(&x[r * n], n, &got[r * n]);
        EXPECT_EQ(rq.scale, ref_rq[r].scale) << isa_name(isa) << " n=" << n << " row " << r;
        EXPECT_EQ(rq.zero_point, ref_rq[r].zero_point)
            << isa_name(isa) << " n=" << n << " row " << r;
        EXPECT_EQ(std::memcmp(&got[r * n], &ref[r * n], n), 0)
            << isa_name(isa) << " n=" << n << " row " << r;
      }
    }
  }
}

// Rows whose range is exactly 255 have step 1, so exact halves test the
// rounding (half to even) of the codes and of the zero point on every path,
// including in the tail of a vector.
TEST(QuantizeKvRow, RoundsExactHalvesToEvenOnEveryPath) {
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
  for (std::size_t n : {6, 16, 17, 33}) {
    for (const Case& c : cases) {
      std::vector<float> x(n, 1.0f);
      std::copy(c.head.begin(), c.head.end(), x.begin());
      for (Isa isa : supported_isas()) {
        ScopedIsa forced(isa);
        std::vector<std::int8_t> q(n, 0x55);
        const KvRowQuantization rq = quantize_kv_row(x.data(), n, q.data());
        SCOPED_TRACE(std::string(isa_name(isa)) + " n=" + std::to_string(n));
        EXPECT_EQ(rq.scale, 1.0f);
        EXPECT_EQ(rq.zero_point, c.zero_point);
        for (std::size_t i = 0; i < c.want.size(); ++i) EXPECT_EQ(q[i], c.want[i]) << "x " << x[i];
        for (std::size_t i = c.head.size(); i < n; ++i) EXPECT_EQ(q[i], 1 + c.zero_point);
      }
    }
  }
}

TEST(QuantizeKvRow, TinyRangesAreStoredAsZeros) {
  const float x[5] = {1e-30f, -2e-30f, 0.0f, 3e-31f, 1e-38f};  // range 3e-30 < 2^-96
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    std::int8_t q[5] = {1, 1, 1, 1, 1};
    const KvRowQuantization rq = quantize_kv_row(x, 5, q);
    EXPECT_EQ(rq.scale, 0.0f) << isa_name(isa);
    EXPECT_EQ(rq.zero_point, 0) << isa_name(isa);
    for (std::int8_t v : q) EXPECT_EQ(v, 0) << isa_name(isa);
  }
}

// Symmetric int8 (scale amax / 127, codes round(x / scale)): the scheme the
// cache used before, as a yardstick. Returns the summed squared error and
// the largest error of the row.
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

// The reason for asymmetric rows: a row of one sign (e.g. after ReLU) spends
// half of the symmetric codes on values it never has. Asymmetric uses all
// 256 codes on [0, max], so its step, and with it the rounding error (RMS and
// worst case), is 127 / 255 ~ 0.498 of the symmetric one. For rows around 0
// the range is at most 2 amax, so it is never worse (step <= 254 / 255 of
// the symmetric step).
TEST(QuantizeKvRow, OneSignedRowsGetAboutHalfTheSymmetricError) {
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
      const KvRowQuantization rq = quantize_kv_row(x.data(), kN, q.data());
      for (std::size_t i = 0; i < kN; ++i) {
        const double e = std::fabs(x[i] - static_cast<double>(rq.scale) * (q[i] - rq.zero_point));
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

TEST(KvAppend, QuantizedRoundTripInHeadMajorLayout) {
  const KvLayout l{3, 40, 11};
  const std::size_t stride = l.n_kv_heads * l.head_dim;
  const std::vector<float> k = random_rows(8 * l.n_kv_heads, l.head_dim, 1);
  const std::vector<float> v = random_rows(8 * l.n_kv_heads, l.head_dim, 2);
  std::vector<std::int8_t> ref_k, ref_kz, ref_vz;
  std::vector<float> ref_ks;
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    Buffer mem = alloc64(quantized_kv_bytes(l));
    std::memset(mem.get(), 0x7f, quantized_kv_bytes(l));  // sentinel
    const QuantizedKvView kv = quantized_kv_view(l, mem.get());
    // Positions 2..4 then 5..9, as a prefill then a chunk would.
    ASSERT_TRUE(kv_append(kv, 2, k.data(), v.data(), 3).ok());
    ASSERT_TRUE(kv_append(kv, 5, k.data() + 3 * stride, v.data() + 3 * stride, 5).ok());
    for (std::size_t h = 0; h < l.n_kv_heads; ++h) {
      for (std::size_t p = 0; p < l.max_seq; ++p) {
        const std::size_t row = h * l.max_seq + p;
        if (p < 2 || p >= 10) {  // untouched
          EXPECT_EQ(kv.k[row * l.head_dim], 0x7f);
          EXPECT_EQ(kv.v[row * l.head_dim + l.head_dim - 1], 0x7f);
          continue;
        }
        const std::size_t src = (p - 2) * stride + h * l.head_dim;
        expect_row_quantized(&k[src], l.head_dim, &kv.k[row * l.head_dim],
                             {kv.k_scale[row], kv.k_zero[row]});
        expect_row_quantized(&v[src], l.head_dim, &kv.v[row * l.head_dim],
                             {kv.v_scale[row], kv.v_zero[row]});
      }
    }
    std::vector<std::int8_t> got_k(kv.k, kv.k + l.n_kv_heads * l.max_seq * l.head_dim);
    std::vector<float> got_ks(kv.k_scale, kv.k_scale + l.n_kv_heads * l.max_seq);
    std::vector<std::int8_t> got_kz(kv.k_zero, kv.k_zero + l.n_kv_heads * l.max_seq);
    std::vector<std::int8_t> got_vz(kv.v_zero, kv.v_zero + l.n_kv_heads * l.max_seq);
    if (isa == Isa::kScalar) {
      ref_k = got_k;
      ref_ks = got_ks;
      ref_kz = got_kz;
      ref_vz = got_vz;
    } else {
      EXPECT_EQ(got_k, ref_k) << isa_name(isa);
      EXPECT_EQ(std::memcmp(got_ks.data(), ref_ks.data(), got_ks.size() * 4), 0) << isa_name(isa);
      EXPECT_EQ(got_kz, ref_kz) << isa_name(isa);
      EXPECT_EQ(got_vz, ref_vz) << isa_name(isa);
    }
  }
}

TEST(KvAppend, FloatCopiesExactly) {
  const KvLayout l{2, 8, 5};
  const std::size_t stride = l.n_kv_heads * l.head_dim;
  const std::vector<float> k = random_rows(4, l.head_dim, 3), v = random_rows(4, l.head_dim, 4);
  Buffer mem = alloc64(float_kv_bytes(l));
  const FloatKvView kv = float_kv_view(l, mem.get());
  ASSERT_TRUE(kv_append(kv, 3, k.data(), v.data(), 2).ok());
  for (std::size_t t = 0; t < 2; ++t)
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t d = 0; d < l.head_dim; ++d) {
        EXPECT_EQ(kv.k[(h * l.max_seq + 3 + t) * l.head_dim + d],
                  k[t * stride + h * l.head_dim + d]);
        EXPECT_EQ(kv.v[(h * l.max_seq + 3 + t) * l.head_dim + d],
                  v[t * stride + h * l.head_dim + d]);
      }
}

TEST(KvAppend, BoundsAndArgumentErrorsWriteNothing) {
  const KvLayout l{2, 16, 8};
  Buffer mem = alloc64(quantized_kv_bytes(l));
  std::memset(mem.get(), 0x11, quantized_kv_bytes(l));
  const QuantizedKvView kv = quantized_kv_view(l, mem.get());
  const std::vector<float> k = random_rows(2 * 9, 16, 5);
  absl::Status s = kv_append(kv, 6, k.data(), k.data(), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_NE(s.message().find("max_seq 8"), std::string::npos) << s;
  EXPECT_EQ(kv_append(kv, 9, k.data(), k.data(), 0).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(kv_append(kv, 0, k.data(), k.data(), 9).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(kv_append(kv, 1, k.data(), k.data(), SIZE_MAX).code(), absl::StatusCode::kOutOfRange);
  for (std::size_t i = 0; i < quantized_kv_bytes(l); ++i) ASSERT_EQ(mem.get()[i], std::byte{0x11});
  EXPECT_TRUE(kv_append(kv, 8, k.data(), k.data(), 0).ok());  // empty append at the end
  EXPECT_TRUE(kv_append(kv, 5, k.data(), k.data(), 3).ok());  // exactly fills the cache
  EXPECT_EQ(kv_append(kv, 0, nullptr, k.data(), 1).code(), absl::StatusCode::kInvalidArgument);
  QuantizedKvView broken = kv;
  broken.v_scale = nullptr;
  EXPECT_EQ(kv_append(broken, 0, k.data(), k.data(), 1).code(), absl::StatusCode::kInvalidArgument);
  broken = kv;
  broken.k_zero = nullptr;
  EXPECT_EQ(kv_append(broken, 0, k.data(), k.data(), 1).code(), absl::StatusCode::kInvalidArgument);
  broken = kv;
  broken.layout.head_dim = 0;
  EXPECT_EQ(kv_append(broken, 0, k.data(), k.data(), 1).code(), absl::StatusCode::kInvalidArgument);

  Buffer fmem = alloc64(float_kv_bytes(l));
  const FloatKvView f = float_kv_view(l, fmem.get());
  EXPECT_EQ(kv_append(f, 7, k.data(), k.data(), 2).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(kv_append(f, 7, k.data(), k.data(), 1).ok());
}

TEST(KvAppend, MakesNoHeapAllocation) {
  const KvLayout l{8, 128, 64};
  Buffer mem = alloc64(quantized_kv_bytes(l));
  Buffer fmem = alloc64(float_kv_bytes(l));
  const QuantizedKvView kv = quantized_kv_view(l, mem.get());
  const FloatKvView f = float_kv_view(l, fmem.get());
  const std::vector<float> k = random_rows(8 * 8, 128, 6);
  ASSERT_TRUE(kv_append(kv, 0, k.data(), k.data(), 8).ok());
  hearth::testing::HeapCounter counter;
  ASSERT_TRUE(kv_append(kv, 8, k.data(), k.data(), 8).ok());
  ASSERT_TRUE(kv_append(f, 8, k.data(), k.data(), 8).ok());
  EXPECT_EQ(counter.allocations(), 0u);
}

}  // namespace
}  // namespace hearth::kernels
