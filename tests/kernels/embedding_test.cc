// Tests of kernels/embedding.h: every table type on every ISA path against a
// naive decoder written here from the byte layout of each format. Decoding is
// exact (one product or an exact conversion per element), so results must
// match bit for bit: the tolerance is zero.
#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/dtype.h"
#include "kernels/fp16.h"
#include "kernels/gguf_blocks.h"
#include "kernels/gguf_legacy_blocks.h"
#include "kernels/thread_pool.h"
#include "tests/support/heap_counter.h"
#include "tests/support/k_quants_reference.h"

namespace hearth::kernels {
namespace {

const DType kTypes[] = {DType::kF32,    DType::kF16,  DType::kBF16, DType::kQ8_0,
                        DType::kQ4_0,   DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                        DType::kIQ4_NL, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1};

// Q4_1, Q5_0, Q5_1 (no encoder in hearth): random codes and high bits, a
// random fp16 scale in [0.01, 0.1) and (Q4_1, Q5_1) a min in [-2, 2).
void random_legacy_blocks(DType type, std::uint8_t* row, std::size_t dim, std::mt19937& rng) {
  const std::size_t bytes = row_bytes(type, dim) / (dim / 32);
  std::uniform_real_distribution<float> scale(0.01f, 0.1f), min(-2.0f, 2.0f);
  for (std::size_t b = 0; b < dim / 32; ++b) {
    std::uint8_t* block = row + b * bytes;
    for (std::size_t i = 0; i < bytes; ++i) block[i] = static_cast<std::uint8_t>(rng());
    const std::uint16_t d = f32_to_fp16(scale(rng)), m = f32_to_fp16(min(rng));
    std::memcpy(block, &d, 2);
    if (type != DType::kQ5_0) std::memcpy(block + 2, &m, 2);
  }
}

// A [vocab][dim] table of `type` from random floats, built byte by byte.
std::vector<std::uint8_t> make_table(DType type, std::size_t vocab, std::size_t dim,
                                     std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  std::vector<float> w(vocab * dim);
  for (float& v : w) v = dist(rng);
  std::vector<std::uint8_t> t(vocab * row_bytes(type, dim));
  for (std::size_t r = 0; r < vocab; ++r) {
    std::uint8_t* row = t.data() + r * row_bytes(type, dim);
    const float* x = w.data() + r * dim;
    switch (type) {
      case DType::kF32:
        std::memcpy(row, x, dim * 4);
        break;
      case DType::kF16:
        for (std::size_t i = 0; i < dim; ++i) {
          const std::uint16_t h = f32_to_fp16(x[i]);
          std::memcpy(row + 2 * i, &h, 2);
        }
        break;
      case DType::kBF16:
        for (std::size_t i = 0; i < dim; ++i) {
          std::uint32_t bits;
          std::memcpy(&bits, &x[i], 4);
          const auto h = static_cast<std::uint16_t>(bits >> 16);  // truncation is fine here
          std::memcpy(row + 2 * i, &h, 2);
        }
        break;
      case DType::kQ8_0:
        quantize_row_q8_0(x, reinterpret_cast<BlockQ8_0*>(row), dim);
        break;
      case DType::kQ4_0:
      case DType::kIQ4_NL:  // Q4_0's scales, its codes read as IQ4_NL's indices
        quantize_row_q4_0(x, reinterpret_cast<BlockQ4_0*>(row), dim);
        break;
      case DType::kQ4_K:
        quantize_row_q4_k(x, reinterpret_cast<BlockQ4_K*>(row), dim);
        break;
      case DType::kQ5_K:
        quantize_row_q5_k(x, reinterpret_cast<BlockQ5_K*>(row), dim);
        break;
      case DType::kQ6_K:
        quantize_row_q6_k(x, reinterpret_cast<BlockQ6_K*>(row), dim);
        break;
      case DType::kQ4_1:
      case DType::kQ5_0:
      case DType::kQ5_1:
        random_legacy_blocks(type, row, dim, rng);
        break;
    }
  }
  return t;
}

// Element i of row r, read straight from the format's bytes.
float naive_element(const std::vector<std::uint8_t>& t, DType type, std::size_t dim, std::size_t r,
                    std::size_t i) {
  const std::uint8_t* row = t.data() + r * row_bytes(type, dim);
  std::uint16_t h;
  switch (type) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, row + 4 * i, 4);
      return f;
    }
    case DType::kF16:
      std::memcpy(&h, row + 2 * i, 2);
      return fp16_to_f32(h);
    case DType::kBF16: {
      std::memcpy(&h, row + 2 * i, 2);
      const std::uint32_t bits = std::uint32_t{h} << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DType::kQ8_0: {
      const std::uint8_t* block = row + (i / 32) * 34;  // 2-byte fp16 scale, then 32 int8
      std::memcpy(&h, block, 2);
      return fp16_to_f32(h) * static_cast<float>(static_cast<std::int8_t>(block[2 + i % 32]));
    }
    case DType::kQ4_0: {
      const std::uint8_t* block = row + (i / 32) * 18;  // 2-byte fp16 scale, then 16 bytes
      std::memcpy(&h, block, 2);
      const std::size_t j = i % 32;
      const int q = j < 16 ? (block[2 + j] & 0x0f) : (block[2 + j - 16] >> 4);
      return fp16_to_f32(h) * static_cast<float>(q - 8);
    }
    case DType::kIQ4_NL: {  // as Q4_0, each code an index into the 16 levels
      const std::uint8_t* block = row + (i / 32) * 18;
      std::memcpy(&h, block, 2);
      const std::size_t j = i % 32;
      const int q = j < 16 ? (block[2 + j] & 0x0f) : (block[2 + j - 16] >> 4);
      return fp16_to_f32(h) * static_cast<float>(kIq4NlValues[q]);
    }
    case DType::kQ4_K:
      return testing::q4_k_value(reinterpret_cast<const BlockQ4_K*>(row)[i / 256], i % 256);
    case DType::kQ5_K:
      return testing::q5_k_value(reinterpret_cast<const BlockQ5_K*>(row)[i / 256], i % 256);
    case DType::kQ6_K:
      return testing::q6_k_value(reinterpret_cast<const BlockQ6_K*>(row)[i / 256], i % 256);
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1: {
      // fp16 d, then (Q4_1, Q5_1) fp16 m, then (Q5_0, Q5_1) 32 high bits,
      // then 16 bytes: byte j holds inputs j (low nibble) and j + 16.
      const bool has_m = type != DType::kQ5_0, five = type != DType::kQ4_1;
      const std::uint8_t* block = row + (i / 32) * (row_bytes(type, dim) / (dim / 32));
      std::uint16_t m = 0;
      std::memcpy(&h, block, 2);
      if (has_m) std::memcpy(&m, block + 2, 2);
      const std::uint8_t* qh = block + (has_m ? 4 : 2);
      const std::uint8_t* qs = qh + (five ? 4 : 0);
      const std::size_t j = i % 32;
      int q = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
      if (five) q |= (qh[j / 8] >> (j % 8) & 1) << 4;
      if (!has_m) return fp16_to_f32(h) * static_cast<float>(q - 16);
      return static_cast<float>(q) * fp16_to_f32(h) + fp16_to_f32(m);
    }
  }
  return 0.0f;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::vector<std::size_t> dims_for(DType type) {
  if (type == DType::kQ8_0 || type == DType::kQ4_0 || type == DType::kIQ4_NL ||
      type == DType::kQ4_1 || type == DType::kQ5_0 || type == DType::kQ5_1)
    return {32, 96, 4096};
  if (type == DType::kQ4_K || type == DType::kQ5_K || type == DType::kQ6_K) return {256, 768, 4096};
  return {1, 7, 33, 100, 4097};
}

TEST(Embedding, EveryTypeOnEveryPathMatchesTheNaiveDecoderExactly) {
  const std::size_t vocab = 37;
  const std::vector<std::int32_t> ids = {0, 36, 5, 5, 17, 1, 35};
  for (DType type : kTypes) {
    for (std::size_t dim : dims_for(type)) {
      const auto table = make_table(type, vocab, dim, static_cast<std::uint32_t>(dim) * 7 + 1);
      for (Isa isa : supported_isas()) {
        ScopedIsa forced(isa);
        for (std::size_t n : {std::size_t{1}, ids.size()}) {
          std::vector<float> out(n * dim + 1, -7.0f);
          ASSERT_TRUE(
              embedding_lookup(table.data(), type, vocab, dim, ids.data(), n, out.data()).ok());
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t i = 0; i < dim; ++i)
              ASSERT_TRUE(same_bits(out[t * dim + i],
                                    naive_element(table, type, dim, std::size_t(ids[t]), i)))
                  << dtype_name(type) << " " << isa_name(isa) << " dim=" << dim << " t=" << t
                  << " i=" << i;
          EXPECT_EQ(out[n * dim], -7.0f) << "wrote past the end";
        }
      }
    }
  }
}

TEST(Embedding, BadIdsAreOutOfRangeAndLeaveTheOutputUntouched) {
  const std::size_t vocab = 10, dim = 256;
  for (DType type : kTypes) {
    const auto table = make_table(type, vocab, dim, 3);
    for (std::int32_t bad : {-1, 10, std::numeric_limits<std::int32_t>::max(),
                             std::numeric_limits<std::int32_t>::min()}) {
      const std::int32_t ids[] = {0, 9, bad, 1};
      std::vector<float> out(4 * dim, -7.0f);
      const absl::Status s = embedding_lookup(table.data(), type, vocab, dim, ids, 4, out.data());
      EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
      EXPECT_NE(s.message().find("ids[2] = " + std::to_string(bad)), std::string::npos) << s;
      for (float v : out) ASSERT_EQ(v, -7.0f) << "output written despite the error";
    }
  }
}

TEST(Embedding, InvalidArgumentsAreReported) {
  const auto table = make_table(DType::kQ8_0, 4, 64, 9);
  const std::int32_t ids[] = {1};
  std::vector<float> out(64);
  // 48: not a multiple of 32
  for (DType block32 :
       {DType::kQ8_0, DType::kQ4_0, DType::kIQ4_NL, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1}) {
    const absl::Status s = embedding_lookup(table.data(), block32, 4, 48, ids, 1, out.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("multiple of 32"), std::string::npos) << s;
  }
  EXPECT_EQ(embedding_lookup(table.data(), DType::kQ4_0, 4, 0, ids, 1, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  for (DType k_quant : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {  // 64 is not a multiple of 256
    const absl::Status s = embedding_lookup(table.data(), k_quant, 4, 64, ids, 1, out.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("multiple of 256"), std::string::npos) << s;
  }
  EXPECT_EQ(embedding_lookup(nullptr, DType::kF32, 4, 64, ids, 1, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(embedding_lookup(table.data(), DType::kF32, 4, 16, nullptr, 1, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(embedding_lookup(table.data() + 1, DType::kF16, 4, 16, ids, 1, out.data()).code(),
            absl::StatusCode::kInvalidArgument);  // odd address
  EXPECT_EQ(
      embedding_lookup(table.data(), static_cast<DType>(99), 4, 16, ids, 1, out.data()).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(embedding_lookup(nullptr, DType::kF32, 4, 64, nullptr, 0, nullptr).ok());  // n = 0
}

// 64 tokens x 4096 = 262144 elements: split across the pool; same bits.
TEST(Embedding, PoolGivesTheSameBitsAndNoHeapAllocation) {
  ThreadPool pool(2);
  const std::size_t vocab = 100, dim = 4096, n = 64;
  std::vector<std::int32_t> ids(n);
  for (std::size_t t = 0; t < n; ++t) ids[t] = static_cast<std::int32_t>((t * 37) % vocab);
  for (DType type : kTypes) {
    const auto table = make_table(type, vocab, dim, 21);
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      std::vector<float> one(n * dim), two(n * dim);
      ASSERT_TRUE(embedding_lookup(table.data(), type, vocab, dim, ids.data(), n, one.data()).ok());
      ASSERT_TRUE(
          embedding_lookup(table.data(), type, vocab, dim, ids.data(), n, two.data(), &pool).ok());
      for (std::size_t i = 0; i < one.size(); ++i)
        ASSERT_TRUE(same_bits(one[i], two[i])) << dtype_name(type) << " " << isa_name(isa);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        hearth::testing::HeapCounter counter;
        const absl::Status s =
            embedding_lookup(table.data(), type, vocab, dim, ids.data(), n, two.data(), p);
        EXPECT_EQ(counter.allocations(), 0u) << dtype_name(type) << " " << isa_name(isa);
        EXPECT_TRUE(s.ok());
      }
    }
  }
}

}  // namespace
}  // namespace hearth::kernels
