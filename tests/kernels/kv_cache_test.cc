#include "kernels/kv_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/quantize.h"
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

// Each (token, head) row lands in its head-major slot exactly as the
// family's quantize_row_asymmetric stores it (whose rule and accuracy
// quantize_test.cc checks), on every path, and nothing else is written.
TEST(KvAppend, QuantizedRowsAreTheFamilysInHeadMajorLayout) {
  const KvLayout l{3, 40, 11};
  const std::size_t stride = l.n_kv_heads * l.head_dim;
  const std::vector<float> k = random_rows(8 * l.n_kv_heads, l.head_dim, 1);
  const std::vector<float> v = random_rows(8 * l.n_kv_heads, l.head_dim, 2);
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    SCOPED_TRACE(isa_name(isa));
    Buffer mem = alloc64(quantized_kv_bytes(l));
    std::memset(mem.get(), 0x7f, quantized_kv_bytes(l));  // sentinel
    const QuantizedKvView kv = quantized_kv_view(l, mem.get());
    // Positions 2..4 then 5..9, as a prefill then a chunk would.
    ASSERT_TRUE(kv_append(kv, 2, k.data(), v.data(), 3).ok());
    ASSERT_TRUE(kv_append(kv, 5, k.data() + 3 * stride, v.data() + 3 * stride, 5).ok());
    std::vector<std::int8_t> want(l.head_dim);
    for (std::size_t h = 0; h < l.n_kv_heads; ++h) {
      for (std::size_t p = 0; p < l.max_seq; ++p) {
        const std::size_t row = h * l.max_seq + p;
        if (p < 2 || p >= 10) {  // untouched
          EXPECT_EQ(kv.k[row * l.head_dim], 0x7f);
          EXPECT_EQ(kv.v[row * l.head_dim + l.head_dim - 1], 0x7f);
          EXPECT_EQ(kv.k_zero[row], 0x7f);
          EXPECT_EQ(kv.v_zero[row], 0x7f);
          continue;
        }
        const std::size_t src = (p - 2) * stride + h * l.head_dim;
        QParams qp = quantize_row_asymmetric(&k[src], l.head_dim, want.data());
        EXPECT_EQ(std::memcmp(&kv.k[row * l.head_dim], want.data(), l.head_dim), 0) << row;
        EXPECT_EQ(kv.k_scale[row], qp.scale) << row;
        EXPECT_EQ(kv.k_zero[row], qp.zero_point) << row;
        qp = quantize_row_asymmetric(&v[src], l.head_dim, want.data());
        EXPECT_EQ(std::memcmp(&kv.v[row * l.head_dim], want.data(), l.head_dim), 0) << row;
        EXPECT_EQ(kv.v_scale[row], qp.scale) << row;
        EXPECT_EQ(kv.v_zero[row], qp.zero_point) << row;
      }
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

// A copied range holds the source's rows byte for byte (codes, scales, zero
// points), and the destination's other positions keep what they held.
TEST(KvCopy, CopiesExactlyTheRangeOfEveryHead) {
  const KvLayout l{3, 24, 9};
  const std::size_t qb = quantized_kv_bytes(l);
  Buffer src_mem = alloc64(qb), dst_mem = alloc64(qb);
  std::memset(dst_mem.get(), 0x5a, qb);
  const QuantizedKvView src = quantized_kv_view(l, src_mem.get());
  const QuantizedKvView dst = quantized_kv_view(l, dst_mem.get());
  const std::vector<float> k = random_rows(9 * l.n_kv_heads, l.head_dim, 7);
  const std::vector<float> v = random_rows(9 * l.n_kv_heads, l.head_dim, 8);
  ASSERT_TRUE(kv_append(src, 0, k.data(), v.data(), 9).ok());
  ASSERT_TRUE(kv_copy(dst, src, 2, 6).ok());
  for (std::size_t h = 0; h < l.n_kv_heads; ++h)
    for (std::size_t p = 0; p < l.max_seq; ++p) {
      const std::size_t row = h * l.max_seq + p;
      const bool copied = p >= 2 && p < 6;
      for (std::size_t d = 0; d < l.head_dim; ++d) {
        EXPECT_EQ(dst.k[row * l.head_dim + d], copied ? src.k[row * l.head_dim + d] : 0x5a);
        EXPECT_EQ(dst.v[row * l.head_dim + d], copied ? src.v[row * l.head_dim + d] : 0x5a);
      }
      EXPECT_EQ(dst.k_zero[row], copied ? src.k_zero[row] : 0x5a);
      EXPECT_EQ(dst.v_zero[row], copied ? src.v_zero[row] : 0x5a);
      if (copied) {
        EXPECT_EQ(dst.k_scale[row], src.k_scale[row]);
        EXPECT_EQ(dst.v_scale[row], src.v_scale[row]);
      }
    }
  // Float caches: the same range, exact.
  const std::size_t fb = float_kv_bytes(l);
  Buffer fsrc_mem = alloc64(fb), fdst_mem = alloc64(fb);
  std::memset(fdst_mem.get(), 0, fb);
  const FloatKvView fsrc = float_kv_view(l, fsrc_mem.get());
  const FloatKvView fdst = float_kv_view(l, fdst_mem.get());
  ASSERT_TRUE(kv_append(fsrc, 0, k.data(), v.data(), 9).ok());
  ASSERT_TRUE(kv_copy(fdst, fsrc, 0, 9).ok());
  EXPECT_EQ(std::memcmp(fdst.k, fsrc.k, l.n_kv_heads * l.max_seq * l.head_dim * 4), 0);
  EXPECT_EQ(std::memcmp(fdst.v, fsrc.v, l.n_kv_heads * l.max_seq * l.head_dim * 4), 0);
}

TEST(KvCopy, MismatchedLayoutsAndBadRangesWriteNothing) {
  const KvLayout l{2, 16, 8};
  const std::size_t qb = quantized_kv_bytes(l);
  Buffer a_mem = alloc64(qb), b_mem = alloc64(qb);
  std::memset(a_mem.get(), 0x11, qb);
  std::memset(b_mem.get(), 0x22, qb);
  const QuantizedKvView a = quantized_kv_view(l, a_mem.get());
  const QuantizedKvView b = quantized_kv_view(l, b_mem.get());
  absl::Status s = kv_copy(a, b, 3, 9);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_NE(s.message().find("max_seq 8"), std::string::npos) << s;
  EXPECT_EQ(kv_copy(a, b, 5, 4).code(), absl::StatusCode::kOutOfRange);
  QuantizedKvView other = b;
  other.layout.max_seq = 4;
  s = kv_copy(a, other, 0, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("different layouts"), std::string::npos) << s;
  other = b;
  other.k_scale = nullptr;
  EXPECT_EQ(kv_copy(a, other, 0, 2).code(), absl::StatusCode::kInvalidArgument);
  for (std::size_t i = 0; i < qb; ++i) ASSERT_EQ(a_mem.get()[i], std::byte{0x11});
  EXPECT_TRUE(kv_copy(a, b, 8, 8).ok());  // an empty range at the end
}

}  // namespace
}  // namespace hearth::kernels
