#include "kernels/gguf_blocks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/fp16.h"
#include "kernels/gguf_legacy_blocks.h"

namespace hearth::kernels {
namespace {

TEST(Fp16, RoundTripsEveryHalfValue) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_fp16(f), h) << std::hex << h;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(fp16_to_f32(f32_to_fp16(1.0f + 1.0f / 2048)), 1.0f);                // tie -> even (1.0)
  EXPECT_EQ(fp16_to_f32(f32_to_fp16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie -> even (up)
  EXPECT_EQ(f32_to_fp16(1e6f), 0x7c00);                                         // overflow -> inf
  EXPECT_EQ(fp16_to_f32(f32_to_fp16(1e-8f)), 0.0f);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
}

TEST(GgufBlocks, Q8_0RoundTripWithinHalfAStep) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> x(32 * 9), y(x.size());
  for (float& v : x) v = dist(rng);
  std::vector<BlockQ8_0> q(x.size() / 32);
  quantize_row_q8_0(x.data(), q.data(), x.size());
  dequantize_row_q8_0(q.data(), y.data(), x.size());
  for (std::size_t b = 0; b < q.size(); ++b) {
    const float d = fp16_to_f32(q[b].d);
    // Half a step, plus the scale's own fp16 rounding (2^-11 relative) times |q| <= 127.
    for (std::size_t i = 0; i < 32; ++i)
      ASSERT_NEAR(y[b * 32 + i], x[b * 32 + i], 0.5f * d + 127 * d / 2048) << b << "," << i;
  }
}

// Codes round as std::lround does: halves away from zero, and the floats
// next to each half to their nearest integer. A block holding 127 has
// d = 1, so its codes are its values rounded.
TEST(GgufBlocks, Q8_0CodesRoundAsLround) {
  std::vector<float> x;
  for (int k = -127; k < 127; ++k) {
    const float half = static_cast<float>(k) + 0.5f;
    for (float v :
         {half, std::nextafter(half, -200.0f), std::nextafter(half, 200.0f), static_cast<float>(k)})
      x.push_back(v);
  }
  for (float v : {0.49999997f, -0.49999997f, 1e-30f, -0.0f}) x.push_back(v);
  while (x.size() % 31 != 0) x.push_back(0.25f);
  std::vector<float> blocks;  // 31 values and 127 per block
  for (std::size_t i = 0; i < x.size(); i += 31) {
    blocks.insert(blocks.end(), x.begin() + static_cast<std::ptrdiff_t>(i),
                  x.begin() + static_cast<std::ptrdiff_t>(i + 31));
    blocks.push_back(127.0f);
  }
  std::vector<BlockQ8_0> q(blocks.size() / 32);
  quantize_row_q8_0(blocks.data(), q.data(), blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_EQ(fp16_to_f32(q[i / 32].d), 1.0f);
    ASSERT_EQ(q[i / 32].qs[i % 32], static_cast<std::int8_t>(std::lround(blocks[i]))) << blocks[i];
  }
}

// An inf weight makes its block's codes NaN (inf x 0): they are stored as 0,
// and a NaN weight is passed over by the block's max |x|.
TEST(GgufBlocks, Q8_0NonFiniteWeightsGiveZeroCodesOrAreSkipped) {
  std::vector<float> x(64, 1.0f);
  x[3] = std::numeric_limits<float>::infinity();
  x[32 + 5] = std::nanf("");
  x[32 + 6] = 63.5f;
  std::vector<BlockQ8_0> q(2);
  quantize_row_q8_0(x.data(), q.data(), x.size());
  for (std::size_t i = 0; i < 32; ++i) EXPECT_EQ(q[0].qs[i], 0) << i;
  EXPECT_EQ(fp16_to_f32(q[1].d), 0.5f);
  EXPECT_EQ(q[1].qs[5], 0);
  EXPECT_EQ(q[1].qs[6], 127);
  EXPECT_EQ(q[1].qs[0], 2);
}

// A block of 32 equal values comes back exactly.
template <typename Block>
void expect_constant_block_returns(void (*encode)(const float*, Block*, std::size_t),
                                   void (*decode)(const Block*, float*, std::size_t), float value) {
  std::vector<float> same(32, value), back(32, value + 1.0f);
  Block c;
  encode(same.data(), &c, 32);
  decode(&c, back.data(), 32);
  for (float v : back) EXPECT_EQ(v, value);
}

// Q4_0 and Q5_0: the signed value of largest magnitude maps to the lowest
// code (-half d), and every value comes back within half a step (plus the
// fp16 rounding of d); levels run from -half d to (half - 1) d, so a value
// beyond half - 0.5 steps on the side opposite the extreme is clamped, off by
// at most one step. All zeros give d = 0 and come back as zeros.
template <typename Block>
void expect_signed_extreme_round_trip(void (*encode)(const float*, Block*, std::size_t),
                                      void (*decode)(const Block*, float*, std::size_t),
                                      float half) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> x(32 * 5), y(x.size());
  for (float& v : x) v = dist(rng);
  x[40] = 5.0f;   // block 1's extreme, positive: d < 0
  x[70] = -5.0f;  // block 2's, negative: d > 0
  std::vector<Block> q(x.size() / 32);
  encode(x.data(), q.data(), x.size());
  decode(q.data(), y.data(), x.size());
  EXPECT_EQ(fp16_to_f32(q[1].d), 5.0f / -half);
  EXPECT_EQ(fp16_to_f32(q[2].d), 5.0f / half);
  EXPECT_EQ(y[40], 5.0f);
  EXPECT_EQ(y[70], -5.0f);
  for (std::size_t b = 0; b < q.size(); ++b) {
    const float d = std::fabs(fp16_to_f32(q[b].d));
    for (std::size_t i = 0; i < 32; ++i) {
      const bool clamped = std::fabs(x[b * 32 + i]) > (half - 0.5f) * d;
      const float tol = (clamped ? 1.0f : 0.5f) * d + half * d / 2048 + 1e-6f;
      ASSERT_NEAR(y[b * 32 + i], x[b * 32 + i], tol) << b << "," << i;
    }
  }
  expect_constant_block_returns<Block>(encode, decode, 0.0f);
}

TEST(GgufBlocks, Q4_0RoundTripWithinHalfAStepAndMapsExtremes) {
  expect_signed_extreme_round_trip<BlockQ4_0>(quantize_row_q4_0, dequantize_row_q4_0, 8.0f);
}

TEST(GgufBlocks, Q4_0NibbleLayoutMatchesTheFormat) {
  BlockQ4_0 b{};
  b.d = f32_to_fp16(1.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row_q4_0(&b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], static_cast<float>(j - 8));
    EXPECT_EQ(y[j + 16], static_cast<float>(7 - j));
  }
}

// Q4_1 and Q5_1: the block's minimum is m and its range spans 15 or 31
// steps, so every value comes back within half a step (plus the fp16
// rounding of d and m); the minimum and maximum map to q = 0 and q = levels.
template <typename Block>
void expect_min_range_round_trip(void (*encode)(const float*, Block*, std::size_t),
                                 void (*decode)(const Block*, float*, std::size_t), int levels) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> dist(-1.0f, 3.0f);
  std::vector<float> x(32 * 6), y(x.size());
  for (float& v : x) v = dist(rng);
  std::vector<Block> q(x.size() / 32);
  encode(x.data(), q.data(), x.size());
  decode(q.data(), y.data(), x.size());
  for (std::size_t b = 0; b < q.size(); ++b) {
    const float d = fp16_to_f32(q[b].d), m = fp16_to_f32(q[b].m);
    const auto [lo, hi] = std::minmax_element(&x[b * 32], &x[b * 32 + 32]);
    EXPECT_NEAR(m, *lo, std::fabs(*lo) / 2048 + 1e-7f) << b;
    EXPECT_NEAR(d, (*hi - *lo) / static_cast<float>(levels), d / 2048 + 1e-7f) << b;
    for (std::size_t i = 0; i < 32; ++i) {
      const float tol = 0.5f * d + levels * d / 2048 + std::fabs(m) / 2048 + 1e-6f;
      ASSERT_NEAR(y[b * 32 + i], x[b * 32 + i], tol) << b << "," << i;
    }
    EXPECT_EQ(y[lo - x.data()], m) << "the minimum is q = 0";
    EXPECT_NEAR(y[hi - x.data()], *hi, levels * d / 2048 + std::fabs(m) / 2048 + 1e-6f);
  }
  expect_constant_block_returns<Block>(encode, decode, 0.75f);  // d = 0, every value m
}

TEST(GgufLegacyBlocks, Q4_1AndQ5_1RoundTripWithinHalfAStep) {
  expect_min_range_round_trip<BlockQ4_1>(quantize_row_q4_1, dequantize_row_q4_1, 15);
  expect_min_range_round_trip<BlockQ5_1>(quantize_row_q5_1, dequantize_row_q5_1, 31);
}

TEST(GgufLegacyBlocks, Q5_0RoundTripWithinHalfAStepAndMapsTheExtremeToZero) {
  expect_signed_extreme_round_trip<BlockQ5_0>(quantize_row_q5_0, dequantize_row_q5_0, 16.0f);
}

}  // namespace
}  // namespace hearth::kernels
