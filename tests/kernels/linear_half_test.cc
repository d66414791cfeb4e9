// Tests of kernels/linear.h's half path (F16 and BF16 weights kept as
// halves): every ISA path and thread count against the contract of
// kernels/linear_impl.h, computed here with std::fma, bit for bit; against
// a double-precision product within the stated bound; packing on a pool;
// no heap allocation in forward.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/fp16.h"
#include "kernels/linear.h"
#include "kernels/thread_pool.h"
#include "memory/caching_allocator.h"
#include "tests/support/heap_counter.h"
#include "tests/support/random_floats.h"

namespace hearth::kernels {
namespace {

using ::hearth::testing::random_normal_floats;

using Format = Linear::Format;

struct Shape {
  std::size_t n_out, n_in, m;
};

// Odd shapes: partial row groups, row-group counts that are not a multiple
// of any tile's, token counts around every tile width, n_in of 1 and odd;
// the last two are large enough for the pool to split them (one token and
// several).
const Shape kShapes[] = {{1, 1, 1},    {17, 3, 1},    {33, 100, 2}, {100, 37, 7},   {16, 64, 8},
                         {50, 129, 9}, {65, 300, 17}, {200, 96, 1}, {300, 1000, 1}, {130, 1000, 9}};

// Halves of normally distributed weights, one in 16 scaled down to the
// subnormal range of fp16 (exact in float).
std::vector<std::uint16_t> make_halves(Format format, std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<std::uint16_t> h(n);
  for (std::size_t i = 0; i < n; ++i) {
    float v = dist(rng);
    if (i % 16 == 5) v *= 1e-6f;
    if (format == Format::kF16) {
      h[i] = f32_to_fp16(v);
    } else {
      std::uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      h[i] = static_cast<std::uint16_t>(bits >> 16);
    }
  }
  return h;
}

float widen(Format format, std::uint16_t h) {
  return format == Format::kF16 ? fp16_to_f32(h) : bf16_to_f32(h);
}

absl::StatusOr<Linear> make(Format format, const std::vector<std::uint16_t>& w, const Shape& s,
                            ThreadPool* pool = nullptr) {
  return format == Format::kF16 ? Linear::from_f16(w.data(), s.n_out, s.n_in, pool)
                                : Linear::from_bf16(w.data(), s.n_out, s.n_in, pool);
}

std::vector<float> run(const Linear& l, const std::vector<float>& x, std::size_t m,
                       ThreadPool* pool) {
  CachingAllocator scratch;
  std::vector<float> y(m * l.n_out(), std::nanf(""));
  const absl::Status s = l.forward(x.data(), m, y.data(), scratch, pool);
  EXPECT_TRUE(s.ok()) << s;
  return y;
}

// The contract: per (token, row), one fma per input in input order.
std::vector<float> contract(Format format, const std::vector<std::uint16_t>& w,
                            const std::vector<float>& x, const Shape& s) {
  std::vector<float> y(s.m * s.n_out);
  for (std::size_t t = 0; t < s.m; ++t)
    for (std::size_t r = 0; r < s.n_out; ++r) {
      float acc = 0.0f;
      for (std::size_t i = 0; i < s.n_in; ++i)
        acc = std::fma(widen(format, w[r * s.n_in + i]), x[t * s.n_in + i], acc);
      y[t * s.n_out + r] = acc;
    }
  return y;
}

const char* name(Format f) { return f == Format::kF16 ? "f16" : "bf16"; }

class LinearHalf : public ::testing::TestWithParam<Format> {};

TEST_P(LinearHalf, EveryPathAndThreadCountComputesTheContractBitForBit) {
  const Format format = GetParam();
  ThreadPool pool(3);
  std::uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    const std::vector<std::uint16_t> w = make_halves(format, s.n_out * s.n_in, seed++);
    const std::vector<float> x = random_normal_floats(s.m * s.n_in, seed++);
    absl::StatusOr<Linear> l = make(format, w, s);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->format(), format);
    const std::vector<float> want = contract(format, w, x, s);
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        const std::vector<float> got = run(*l, x, s.m, p);
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
              << name(format) << " " << isa_name(isa) << (p ? " pooled" : "") << " shape "
              << s.n_out << "x" << s.n_in << " m=" << s.m << " at " << i << ": " << got[i] << " vs "
              << want[i];
      }
    }
  }
}

// Against exact arithmetic on the halves: |error| <= n_in * eps * sum |w x|
// (linear.h, "Half path").
TEST_P(LinearHalf, WithinTheStatedBoundOfADoubleProduct) {
  const Format format = GetParam();
  const Shape s{65, 1000, 9};
  const std::vector<std::uint16_t> w = make_halves(format, s.n_out * s.n_in, 50);
  const std::vector<float> x = random_normal_floats(s.m * s.n_in, 51);
  absl::StatusOr<Linear> l = make(format, w, s);
  ASSERT_TRUE(l.ok()) << l.status();
  const std::vector<float> y = run(*l, x, s.m, nullptr);
  for (std::size_t t = 0; t < s.m; ++t)
    for (std::size_t r = 0; r < s.n_out; ++r) {
      double exact = 0, abs_sum = 0;
      for (std::size_t i = 0; i < s.n_in; ++i) {
        const double p = double{widen(format, w[r * s.n_in + i])} * x[t * s.n_in + i];
        exact += p;
        abs_sum += std::fabs(p);
      }
      ASSERT_NEAR(y[t * s.n_out + r], exact, s.n_in * FLT_EPSILON * abs_sum) << t << "," << r;
    }
}

TEST_P(LinearHalf, PackedOnAPoolEqualsPackedOnTheCallerAndAsBigAsTheFile) {
  const Format format = GetParam();
  ThreadPool pool(2);
  for (const Shape& s : {Shape{17, 300, 3}, Shape{1000, 64, 1}}) {
    const std::vector<std::uint16_t> w = make_halves(format, s.n_out * s.n_in, 60);
    const std::vector<float> x = random_normal_floats(s.m * s.n_in, 61);
    absl::StatusOr<Linear> a = make(format, w, s), b = make(format, w, s, &pool);
    ASSERT_TRUE(a.ok() && b.ok());
    const std::vector<float> ya = run(*a, x, s.m, nullptr), yb = run(*b, x, s.m, nullptr);
    ASSERT_EQ(std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)), 0) << name(format);
  }
  // 2 bytes per weight; rows are padded to whole groups of 16.
  const std::vector<std::uint16_t> w = make_halves(format, 64 * 1024, 62);
  absl::StatusOr<Linear> l = make(format, w, Shape{64, 1024, 1});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->weight_bytes(), 64u * 1024 * 2);
}

TEST_P(LinearHalf, ForwardSameInputEqualsSeparateForwards) {
  const Format format = GetParam();
  const Shape q{64, 96, 5}, kv{16, 96, 5};
  const std::vector<std::uint16_t> wq = make_halves(format, 64 * 96, 70);
  const std::vector<std::uint16_t> wk = make_halves(format, 16 * 96, 71);
  absl::StatusOr<Linear> lq = make(format, wq, q), lk = make(format, wk, kv);
  ASSERT_TRUE(lq.ok() && lk.ok());
  const std::vector<float> x = random_normal_floats(5 * 96, 72);
  std::vector<float> yq(5 * 64), yk(5 * 16);
  const Linear* layers[] = {&*lq, &*lk};
  float* ys[] = {yq.data(), yk.data()};
  CachingAllocator scratch;
  ASSERT_TRUE(Linear::forward_same_input(layers, x.data(), 5, ys, scratch, nullptr).ok());
  EXPECT_EQ(yq, run(*lq, x, 5, nullptr));
  EXPECT_EQ(yk, run(*lk, x, 5, nullptr));
}

TEST_P(LinearHalf, ForwardMakesNoHeapAllocation) {
  const Format format = GetParam();
  ThreadPool pool(2);
  const Shape s{256, 512, 64};
  const std::vector<std::uint16_t> w = make_halves(format, s.n_out * s.n_in, 80);
  absl::StatusOr<Linear> l = make(format, w, s);
  ASSERT_TRUE(l.ok());
  for (std::size_t m : {1, 64}) {
    const std::vector<float> x = random_normal_floats(m * s.n_in, 81);
    std::vector<float> y(m * s.n_out);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      CachingAllocator scratch;
      ASSERT_TRUE(l->forward(x.data(), m, y.data(), scratch, p).ok());
      hearth::testing::HeapCounter counter;
      ASSERT_TRUE(l->forward(x.data(), m, y.data(), scratch, p).ok());
      EXPECT_EQ(counter.allocations(), 0u) << name(format) << " m=" << m << (p ? " pooled" : "");
    }
  }
}

TEST(LinearHalfShapes, BadSizesAndNullWeightsAreInvalidArgument) {
  std::vector<std::uint16_t> h(64);
  EXPECT_EQ(Linear::from_f16(h.data(), 0, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Linear::from_bf16(h.data(), 4, 0).status().code(), absl::StatusCode::kInvalidArgument);
  const absl::Status s = Linear::from_bf16(nullptr, 4, 4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("from_bf16"), std::string::npos) << s;
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearHalf, ::testing::Values(Format::kF16, Format::kBF16),
                         [](const ::testing::TestParamInfo<Format>& info) {
                           return std::string(name(info.param));
                         });

}  // namespace
}  // namespace hearth::kernels
