#include "kernels/kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
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
  EXPECT_EQ(quantized_kv_bytes({8, 128, 4096}), 2u * 8 * 4096 * 128 + 2u * 8 * 4096 * 4);
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
    EXPECT_GE(at(v.v), rows * l.head_dim);
    EXPECT_GE(at(v.k_scale), at(v.v) + rows * l.head_dim);
    EXPECT_GE(at(v.v_scale), at(v.k_scale) + rows * 4);
    EXPECT_LE(at(v.v_scale) + rows * 4, qb);
    const std::size_t fb = float_kv_bytes(l);
    Buffer fmem = alloc64(fb);
    const FloatKvView f = float_kv_view(l, fmem.get());
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(f.v) % 64, 0u);
    EXPECT_GE(static_cast<std::size_t>(f.v - f.k), rows * l.head_dim);
    EXPECT_LE(static_cast<std::size_t>(f.v - f.k) * 4 + rows * l.head_dim * 4, fb);
  }
}

// Independent check of one quantized row: |q| <= 127, the largest |x| maps to
// +-127, scale = amax / 127, and every element is within half a step
// (scale / 2, plus 1e-6 relative for the float rounding of 127 / amax).
void expect_row_quantized(const float* x, std::size_t n, const std::int8_t* q, float scale) {
  double amax = 0;
  for (std::size_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(static_cast<double>(x[i])));
  ASSERT_FLOAT_EQ(scale, static_cast<float>(amax / 127.0));
  if (amax == 0) {
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(q[i], 0);
    return;
  }
  int qmax = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_GE(q[i], -127);
    qmax = std::max(qmax, std::abs(static_cast<int>(q[i])));
    const double err = std::fabs(static_cast<double>(x[i]) - static_cast<double>(scale) * q[i]);
    ASSERT_LE(err, scale * 0.5 * (1 + 1e-6)) << "element " << i << " of " << n;
  }
  EXPECT_EQ(qmax, 127);
}

TEST(QuantizeKvRow, EveryPathIsBitIdenticalToScalarAndWithinHalfAStep) {
  const std::vector<std::size_t> sizes = {1, 7, 8, 13, 16, 17, 31, 64, 80, 100, 128, 129};
  for (std::size_t n : sizes) {
    std::vector<float> x = random_rows(5, n, static_cast<std::uint32_t>(n));
    std::fill(x.begin() + 4 * n, x.end(), 0.0f);  // an all-zero row
    if (n >= 4) {
      // Exact half steps: amax 127 makes the step 1, so 2.5 -> 2 and -3.5 -> -4
      // (half to even) on every path.
      x[n] = 127.0f;
      x[n + 1] = 2.5f;
      x[n + 2] = -3.5f;
      x[n + 3] = 0.5f;
      for (std::size_t i = n + 4; i < 2 * n; ++i) x[i] = 1.0f;
    }
    std::vector<std::int8_t> ref(5 * n), got(5 * n);
    float ref_scale[5];
    {
      ScopedIsa forced(Isa::kScalar);
      for (std::size_t r = 0; r < 5; ++r) ref_scale[r] = quantize_kv_row(&x[r * n], n, &ref[r * n]);
    }
    for (std::size_t r = 0; r < 5; ++r)
      expect_row_quantized(&x[r * n], n, &ref[r * n], ref_scale[r]);
    if (n >= 4) {
      EXPECT_EQ(ref[n + 1], 2);
      EXPECT_EQ(ref[n + 2], -4);
      EXPECT_EQ(ref[n + 3], 0);
    }
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      for (std::size_t r = 0; r < 5; ++r) {
        std::memset(got.data(), 0x55, got.size());
        const float s = quantize_kv_row(&x[r * n], n, &got[r * n]);
        EXPECT_EQ(s, ref_scale[r]) << isa_name(isa) << " n=" << n << " row " << r;
        EXPECT_EQ(std::memcmp(&got[r * n], &ref[r * n], n), 0)
            << isa_name(isa) << " n=" << n << " row " << r;
      }
    }
  }
}

TEST(KvAppend, QuantizedRoundTripInHeadMajorLayout) {
  const KvLayout l{3, 40, 11};
  const std::size_t stride = l.n_kv_heads * l.head_dim;
  const std::vector<float> k = random_rows(8 * l.n_kv_heads, l.head_dim, 1);
  const std::vector<float> v = random_rows(8 * l.n_kv_heads, l.head_dim, 2);
  std::vector<std::int8_t> ref_k;
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
        expect_row_quantized(&k[src], l.head_dim, &kv.k[row * l.head_dim], kv.k_scale[row]);
        expect_row_quantized(&v[src], l.head_dim, &kv.v[row * l.head_dim], kv.v_scale[row]);
      }
    }
    std::vector<std::int8_t> got_k(kv.k, kv.k + l.n_kv_heads * l.max_seq * l.head_dim);
    std::vector<float> got_ks(kv.k_scale, kv.k_scale + l.n_kv_heads * l.max_seq);
    if (isa == Isa::kScalar) {
      ref_k = got_k;
      ref_ks = got_ks;
    } else {
      EXPECT_EQ(got_k, ref_k) << isa_name(isa);
      EXPECT_EQ(std::memcmp(got_ks.data(), ref_ks.data(), got_ks.size() * 4), 0) << isa_name(isa);
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
