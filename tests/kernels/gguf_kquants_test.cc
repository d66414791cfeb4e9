#include "kernels/gguf_kquants.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/fp16.h"
#include "tests/support/random_floats.h"

namespace hearth::kernels {
namespace {

using ::hearth::testing::random_normal_floats;

// Hand-built blocks pin the bit layout of each format.
TEST(KQuants, Q4_KLayoutLowNibblesFirstThenHigh) {
  BlockQ4_K b{};
  b.d = kernels::f32_to_fp16(1.0f);
  b.dmin = kernels::f32_to_fp16(0.5f);
  // Sub-block 0: scale 2, min 3; sub-block 1: scale 1, min 0; sub-block 5: scale 17 (needs the high
  // bits).
  b.scales[0] = 2;
  b.scales[4] = 3;
  b.scales[1] = 1;
  b.scales[9] = 17 & 0xF;         // low 4 bits of sc[5] in q[9] low nibble
  b.scales[1] |= (17 >> 4) << 6;  // high 2 bits of sc[5] in q[1] bits 6-7
  for (int l = 0; l < 32; ++l) b.qs[l] = static_cast<std::uint8_t>((l % 16) | (5 << 4));
  b.qs[64] = 0x30;  // sub-block 5 (elements 160..191) = high nibbles of qs[64..95]
  std::vector<float> y(256);
  dequantize_row_q4_k(&b, y.data(), 256);
  EXPECT_EQ(y[0], 2.0f * 0 - 1.5f);
  EXPECT_EQ(y[7], 2.0f * 7 - 1.5f);
  EXPECT_EQ(y[32], 1.0f * 5 - 0.0f);
  EXPECT_EQ(y[160], 17.0f * 3);
}

TEST(KQuants, Q6_KLayout) {
  BlockQ6_K b{};
  b.d = kernels::f32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<std::int8_t>(j + 1);
  b.ql[0] = 0x21;                // element 0 low nibble 1, element 64 low nibble 2
  b.qh[0] = 0x02 | (0x01 << 4);  // element 0 high bits 2 (-> 33-32), element 64 high bits 1
  std::vector<float> y(256);
  dequantize_row_q6_k(&b, y.data(), 256);
  EXPECT_EQ(y[0], 0.5f * 1 * ((1 | (2 << 4)) - 32));
  EXPECT_EQ(y[64], 0.5f * 5 * ((2 | (1 << 4)) - 32));
  EXPECT_EQ(y[1], 0.5f * 1 * (0 - 32));
}

// Round trip through the encoders: error within one level of each sub-block.
TEST(KQuants, EncodersRoundTripWithinTheirStep) {
  const std::size_t n = 256 * 3;
  const std::vector<float> x = random_normal_floats(n, 5);
  std::vector<float> y(n);
  std::vector<BlockQ4_K> q4(n / 256);
  quantize_row_q4_k(x.data(), q4.data(), n);
  dequantize_row_q4_k(q4.data(), y.data(), n);
  double err4 = 0;
  for (std::size_t i = 0; i < n; ++i)
    err4 = std::max(err4, static_cast<double>(std::fabs(x[i] - y[i])));
  std::vector<BlockQ5_K> q5(n / 256);
  quantize_row_q5_k(x.data(), q5.data(), n);
  dequantize_row_q5_k(q5.data(), y.data(), n);
  double err5 = 0;
  for (std::size_t i = 0; i < n; ++i)
    err5 = std::max(err5, static_cast<double>(std::fabs(x[i] - y[i])));
  std::vector<BlockQ6_K> q6(n / 256);
  quantize_row_q6_k(x.data(), q6.data(), n);
  dequantize_row_q6_k(q6.data(), y.data(), n);
  double err6 = 0;
  for (std::size_t i = 0; i < n; ++i)
    err6 = std::max(err6, static_cast<double>(std::fabs(x[i] - y[i])));
  // Unit-normal data spans about +-3.5 per sub-block: Q4 steps ~7/15 (~0.47), Q5 ~7/31, Q6 ~3.5/31.
  // Rounding error is half a step plus the 6-bit scale/min rounding (at most one more step for the
  // min).
  EXPECT_LT(err4, 0.6);
  EXPECT_LT(err5, 0.3);
  EXPECT_LT(err6, 0.1);
  EXPECT_LT(err6, err5);
  EXPECT_LT(err5, err4);
}

}  // namespace
}  // namespace hearth::kernels
