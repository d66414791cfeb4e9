// Q4_K, Q5_K and Q6_K against another implementation: blocks written by
// llama.cpp's quantizer and their values as llama.cpp's own decoder (gguf-py)
// reads them (tests/kernels/data/q{4,5,6}_k_llama_cpp.txt; make_k_reference.sh
// says how they were made). hearth's encoders are not involved, so a
// misreading of a format shared by hearth's encoder and decoder cannot pass.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/gguf_kquants.h"
#include "kernels/gguf_legacy_blocks.h"
#include "kernels/linear.h"
#include "memory/caching_allocator.h"
#include "tests/support/q8_0_twins.h"

namespace hearth::kernels {
namespace {

template <typename Block>
struct Reference {
  std::size_t rows = 0, n_in = 0;
  std::vector<Block> blocks;  // rows x n_in / 256
  std::vector<float> values;  // rows x n_in, as llama.cpp decodes them
};

template <typename Block>
Reference<Block> read_reference(const std::string& file, std::size_t block_elems = 256) {
  Reference<Block> ref;
  std::ifstream in(std::filesystem::path(HEARTH_SOURCE_DIR) / "tests/kernels/data" / file);
  EXPECT_TRUE(in.good()) << "tests/kernels/data/" << file << " is missing";
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "rows") {
      std::string n_in_key;
      words >> ref.rows >> n_in_key >> ref.n_in;
    } else if (key == "blocks") {
      std::string hex;
      words >> hex;
      std::vector<std::uint8_t> bytes(hex.size() / 2);
      for (std::size_t i = 0; i < bytes.size(); ++i)
        bytes[i] = static_cast<std::uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
      EXPECT_EQ(bytes.size() % sizeof(Block), 0u);
      const std::size_t first = ref.blocks.size();
      ref.blocks.resize(first + bytes.size() / sizeof(Block));
      std::memcpy(&ref.blocks[first], bytes.data(), bytes.size());
    } else if (key == "values") {
      float v;
      while (words >> v) ref.values.push_back(v);
    }
  }
  EXPECT_EQ(ref.blocks.size(), ref.rows * ref.n_in / block_elems);
  EXPECT_EQ(ref.values.size(), ref.rows * ref.n_in);
  return ref;
}

// d * sc * q - dmin * m (Q4_K) and d * sc * (q - 32) (Q6_K): gguf-py computes
// them in float32 with the same roundings, so the values agree to the bit
// (printed with 9 digits).
TEST(KQuantsFromLlamaCpp, DecodeToLlamaCppsValues) {
  const auto q4 = read_reference<BlockQ4_K>("q4_k_llama_cpp.txt");
  ASSERT_GT(q4.rows, 0u);
  std::vector<float> y(q4.values.size());
  dequantize_row_q4_k(q4.blocks.data(), y.data(), y.size());
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], q4.values[i]) << "Q4_K value " << i;
  const auto q5 = read_reference<BlockQ5_K>("q5_k_llama_cpp.txt");
  ASSERT_GT(q5.rows, 0u);
  y.resize(q5.values.size());
  dequantize_row_q5_k(q5.blocks.data(), y.data(), y.size());
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], q5.values[i]) << "Q5_K value " << i;
  const auto q6 = read_reference<BlockQ6_K>("q6_k_llama_cpp.txt");
  ASSERT_GT(q6.rows, 0u);
  y.resize(q6.values.size());
  dequantize_row_q6_k(q6.blocks.data(), y.data(), y.size());
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], q6.values[i]) << "Q6_K value " << i;
}

// Linear::from_q4_k / from_q5_k / from_q6_k on llama.cpp's blocks: every path agrees bit
// for bit, and y matches a double-precision matmul of llama.cpp's decoded
// weights with the quantized activations within the float rounding of the
// kernels' order (kernels/linear.h): two roundings per block of magnitudes
// bounded by 2 |w| + 2 max|w| of the row (Q4_K's and Q5_K's d sc q x and dmin m x; Q6_K's
// halves, |w| alone), times |xq|.
template <typename Block>
void expect_linear_matches(const Reference<Block>& ref, const absl::StatusOr<Linear>& l) {
  ASSERT_TRUE(l.ok()) << l.status();
  for (std::size_t m : {1, 5, 9}) {
    std::mt19937 rng(static_cast<unsigned>(m));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(m * ref.n_in);
    for (float& v : x) v = dist(rng);
    std::vector<float> y(m * ref.rows), scalar;
    CachingAllocator scratch;
    {
      ScopedIsa forced(Isa::kScalar);
      ASSERT_TRUE(l->forward(x.data(), m, y.data(), scratch, nullptr).ok());
      scalar = y;
    }
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      scratch.reset();
      ASSERT_TRUE(l->forward(x.data(), m, y.data(), scratch, nullptr).ok());
      ASSERT_EQ(std::memcmp(y.data(), scalar.data(), y.size() * sizeof(float)), 0)
          << isa_name(isa) << " m=" << m;
    }
    for (std::size_t t = 0; t < m; ++t)
      for (std::size_t r = 0; r < ref.rows; ++r) {
        const float* w = &ref.values[r * ref.n_in];
        float w_max = 0.0f;
        for (std::size_t k = 0; k < ref.n_in; ++k) w_max = std::max(w_max, std::fabs(w[k]));
        double exact = 0.0, magnitude = 0.0;
        for (std::size_t b = 0; b < ref.n_in / 32; ++b) {
          // The block's activations as the kernels quantize them
          // (kernels/quantize.h, symmetric per 32).
          float amax = 0.0f;
          for (std::size_t i = 0; i < 32; ++i)
            amax = std::max(amax, std::fabs(x[t * ref.n_in + 32 * b + i]));
          const float d = amax / 127.0f, inv = 1.0f / d;
          for (std::size_t i = 0; i < 32; ++i) {
            const std::size_t k = 32 * b + i;
            const double xq = std::nearbyint(x[t * ref.n_in + k] * inv) * static_cast<double>(d);
            exact += static_cast<double>(w[k]) * xq;
            magnitude += (2.0 * std::fabs(w[k]) + 2.0 * w_max) * std::fabs(xq);
          }
        }
        const double bound = (2.0 * ref.n_in / 32 + 3) * FLT_EPSILON * magnitude;
        EXPECT_NEAR(scalar[t * ref.rows + r], exact, bound) << "token " << t << " row " << r;
      }
  }
}

TEST(KQuantsFromLlamaCpp, LinearMatchesLlamaCppsWeights) {
  const auto q4 = read_reference<BlockQ4_K>("q4_k_llama_cpp.txt");
  ASSERT_GT(q4.rows, 0u);
  expect_linear_matches(q4, Linear::from_q4_k(q4.blocks.data(), q4.rows, q4.n_in));
  const auto q5 = read_reference<BlockQ5_K>("q5_k_llama_cpp.txt");
  ASSERT_GT(q5.rows, 0u);
  expect_linear_matches(q5, Linear::from_q5_k(q5.blocks.data(), q5.rows, q5.n_in));
  const auto q6 = read_reference<BlockQ6_K>("q6_k_llama_cpp.txt");
  ASSERT_GT(q6.rows, 0u);
  expect_linear_matches(q6, Linear::from_q6_k(q6.blocks.data(), q6.rows, q6.n_in));
}

// ---- The older types (Q4_1, Q5_0, Q5_1, IQ4_NL) ------------------------------

// d * (q - 16) and d * kvalue are one rounding, as in gguf-py: bit-equal.
// d * q + m (Q4_1, Q5_1) is two roundings in hearth and in numpy alike (no
// fused multiply-add in either): bit-equal as well.
template <typename Block, typename Decode>
void expect_decodes(const char* file, Decode decode) {
  const auto ref = read_reference<Block>(file, 32);
  ASSERT_GT(ref.rows, 0u);
  std::vector<float> y(ref.values.size());
  decode(ref.blocks.data(), y.data(), y.size());
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], ref.values[i]) << file << " " << i;
}

TEST(LegacyBlocksFromLlamaCpp, DecodeToLlamaCppsValues) {
  expect_decodes<BlockQ4_1>("q4_1_llama_cpp.txt", dequantize_row_q4_1);
  expect_decodes<BlockQ5_0>("q5_0_llama_cpp.txt", dequantize_row_q5_0);
  expect_decodes<BlockQ5_1>("q5_1_llama_cpp.txt", dequantize_row_q5_1);
  expect_decodes<BlockIQ4_NL>("iq4_nl_llama_cpp.txt", dequantize_row_iq4_nl);
}

// Q5_0 and IQ4_NL written as Q8_0 blocks (tests/support/q8_0_twins.h, the
// model test's twin files) decode to the same floats.
template <typename Block, typename Convert>
void expect_exact_q8_0(const char* file, Convert convert) {
  const auto ref = read_reference<Block>(file, 32);
  ASSERT_GT(ref.rows, 0u);
  std::vector<BlockQ8_0> q(ref.blocks.size());
  convert(ref.blocks.data(), q.data(), ref.values.size());
  std::vector<float> y(ref.values.size());
  dequantize_row_q8_0(q.data(), y.data(), y.size());
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], ref.values[i]) << file << " " << i;
}

// They run natively (Linear::from_iq4_nl, from_q4_1, from_q5_0,
// from_q5_1) on llama.cpp's blocks: the same checks as the K-quants' above
// (every path bit-equal; y within the float rounding of a double-precision
// matmul of llama.cpp's values).
template <typename Block>
void expect_blocks_run_natively(const char* file,
                                absl::StatusOr<Linear> (*from)(const Block*, std::size_t,
                                                               std::size_t, Packing)) {
  const auto ref = read_reference<Block>(file, 32);
  ASSERT_GT(ref.rows, 0u) << file;
  expect_linear_matches(ref, from(ref.blocks.data(), ref.rows, ref.n_in, Packing()));
}

TEST(LegacyBlocksFromLlamaCpp, LinearMatchesLlamaCppsWeights) {
  expect_blocks_run_natively<BlockIQ4_NL>("iq4_nl_llama_cpp.txt", &Linear::from_iq4_nl);
  expect_blocks_run_natively<BlockQ4_1>("q4_1_llama_cpp.txt", &Linear::from_q4_1);
  expect_blocks_run_natively<BlockQ5_0>("q5_0_llama_cpp.txt", &Linear::from_q5_0);
  expect_blocks_run_natively<BlockQ5_1>("q5_1_llama_cpp.txt", &Linear::from_q5_1);
}

TEST(LegacyBlocksFromLlamaCpp, Q5_0AndIq4NlConvertToQ8_0WithoutLoss) {
  expect_exact_q8_0<BlockQ5_0>("q5_0_llama_cpp.txt", hearth::testing::q5_0_to_q8_0);
  expect_exact_q8_0<BlockIQ4_NL>("iq4_nl_llama_cpp.txt", hearth::testing::iq4_nl_to_q8_0);
}

}  // namespace
}  // namespace hearth::kernels
