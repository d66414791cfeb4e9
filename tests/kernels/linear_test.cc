#include "kernels/linear.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/fp16.h"
#include "kernels/gguf_blocks.h"
#include "kernels/gguf_kquants.h"
#include "kernels/gguf_legacy_blocks.h"
#include "kernels/thread_pool.h"
#include "memory/caching_allocator.h"
#include "memory/streamed_region.h"
#include "tests/support/heap_counter.h"
#include "tests/support/k_quants_reference.h"

namespace hearth::kernels {
namespace {

using Format = Linear::Format;
using AQ = Linear::ActivationQuant;

const char* aq_name(AQ aq) { return aq == AQ::kPerGroup32 ? "per-group" : "per-token"; }
const char* format_name(Format f) {
  return f == Format::kQ8_0     ? "q8_0"
         : f == Format::kQ4_0   ? "q4_0"
         : f == Format::kQ4_K   ? "q4_k"
         : f == Format::kQ5_K   ? "q5_k"
         : f == Format::kQ6_K   ? "q6_k"
         : f == Format::kIQ4_NL ? "iq4_nl"
         : f == Format::kQ5_0   ? "q5_0"
         : f == Format::kQ4_1   ? "q4_1"
         : f == Format::kQ5_1   ? "q5_1"
                                : "f32";
}

// ---------------------------------------------------------------------------
// Test data and an independent implementation of the documented semantics,
// written from kernels/linear.h's description (GGUF blocks in, no packing).

struct QuantWeights {
  Format format;
  std::size_t n_out, n_in;
  std::vector<BlockQ8_0> q8;
  std::vector<BlockQ4_0> q4;
  std::vector<BlockQ4_K> q4k;
  std::vector<BlockQ5_K> q5k;
  std::vector<BlockQ6_K> q6k;
  std::vector<BlockIQ4_NL> iq4;
  std::vector<BlockQ5_0> q50;
  std::vector<BlockQ4_1> q41;
  std::vector<BlockQ5_1> q51;
  std::vector<float> dequant;  // n_out x n_in

  // Q5_0, Q4_1, Q5_1: input i's code in a block (GGUF: byte i % 16 of qs,
  // low nibble for i < 16; the 5-bit types' bit 4 is bit i of qh).
  static int legacy_code(const std::uint8_t* qs, const std::uint8_t* qh, std::size_t i) {
    const int nibble = i < 16 ? (qs[i] & 0x0f) : (qs[i - 16] >> 4);
    return qh == nullptr ? nibble : nibble | (qh[i / 8] >> (i % 8) & 1) << 4;
  }
  bool block_mins() const { return format == Format::kQ4_1 || format == Format::kQ5_1; }
  // Formats whose blocks add a min term (kernels/linear.h).
  bool mins() const { return k_scaled() || block_mins(); }
  const BlockQ4_K& k_block(std::size_t row, std::size_t k) const {
    return q4k[row * (n_in / 256) + k / 256];
  }
  const BlockQ5_K& q5_block(std::size_t row, std::size_t k) const {
    return q5k[row * (n_in / 256) + k / 256];
  }
  // Q4_K and Q5_K share their scale packing.
  int six_bits(std::size_t row, std::size_t b, bool min) const {
    return format == Format::kQ5_K ? testing::q4_k_six_bits(q5_block(row, 32 * b), b % 8, min)
                                   : testing::q4_k_six_bits(k_block(row, 32 * b), b % 8, min);
  }
  float k_d(std::size_t row, std::size_t b, bool min) const {
    const std::uint16_t h = format == Format::kQ5_K
                                ? (min ? q5_block(row, 32 * b).dmin : q5_block(row, 32 * b).d)
                                : (min ? k_block(row, 32 * b).dmin : k_block(row, 32 * b).d);
    return fp16_to_f32(h);
  }
  const BlockQ6_K& q6_block(std::size_t row, std::size_t k) const {
    return q6k[row * (n_in / 256) + k / 256];
  }
  // Q6_K: input k's super-block scale d and its sub-block of 16's sc.
  float d6(std::size_t row, std::size_t k) const { return fp16_to_f32(q6_block(row, k).d); }
  int sc16(std::size_t row, std::size_t k) const { return q6_block(row, k).scales[k % 256 / 16]; }
  int w(std::size_t row, std::size_t k) const {  // the integer weight (Q4_K: q)
    const std::size_t blocks = n_in / 32, b = k / 32, i = k % 32;
    if (format == Format::kQ8_0) return q8[row * blocks + b].qs[i];
    if (format == Format::kQ6_K) return testing::q6_k_q(q6_block(row, k), k % 256) - 32;
    if (format == Format::kQ4_K) return testing::q4_k_q(k_block(row, k), k % 256);
    if (format == Format::kQ5_K) return testing::q5_k_q(q5_block(row, k), k % 256);
    const std::size_t bi = row * blocks + b;
    if (format == Format::kQ5_0) return legacy_code(q50[bi].qs, q50[bi].qh, i) - 16;
    if (format == Format::kQ4_1) return legacy_code(q41[bi].qs, nullptr, i);
    if (format == Format::kQ5_1) return legacy_code(q51[bi].qs, q51[bi].qh, i);
    const bool iq4_nl = format == Format::kIQ4_NL;
    const std::uint8_t byte =
        iq4_nl ? iq4[row * blocks + b].qs[i % 16] : q4[row * blocks + b].qs[i % 16];
    const int code = i < 16 ? (byte & 0x0f) : (byte >> 4);
    return iq4_nl ? kIq4NlValues[code] : code - 8;
  }
  bool k_scaled() const { return format == Format::kQ4_K || format == Format::kQ5_K; }
  float d(std::size_t row, std::size_t b) const {  // Q4_K, Q5_K: d * sc
    if (k_scaled()) return k_d(row, b, false) * static_cast<float>(six_bits(row, b, false));
    const std::size_t i = row * (n_in / 32) + b;
    return fp16_to_f32(format == Format::kQ8_0     ? q8[i].d
                       : format == Format::kIQ4_NL ? iq4[i].d
                       : format == Format::kQ5_0   ? q50[i].d
                       : format == Format::kQ4_1   ? q41[i].d
                       : format == Format::kQ5_1   ? q51[i].d
                                                   : q4[i].d);
  }
  // Q4_K, Q5_K: dmin * m; Q4_1, Q5_1: -m (the min term is min * -sum(q_x));
  // others 0.
  float min(std::size_t row, std::size_t b) const {
    const std::size_t i = row * (n_in / 32) + b;
    if (format == Format::kQ4_1) return -fp16_to_f32(q41[i].m);
    if (format == Format::kQ5_1) return -fp16_to_f32(q51[i].m);
    if (!k_scaled()) return 0.0f;
    return k_d(row, b, true) * static_cast<float>(six_bits(row, b, true));
  }
};

QuantWeights make_weights(Format format, std::size_t n_out, std::size_t n_in, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  std::vector<float> w(n_out * n_in);
  for (float& v : w) v = dist(rng);
  QuantWeights q{
      format, n_out, n_in, {}, {}, {}, {}, {}, {}, {}, {}, {}, std::vector<float>(n_out * n_in)};
  const std::size_t blocks = n_in / 32;
  if (format == Format::kQ5_K) {
    const std::size_t supers = n_in / 256;
    q.q5k.resize(n_out * supers);
    for (std::size_t r = 0; r < n_out; ++r)
      quantize_row_q5_k(&w[r * n_in], &q.q5k[r * supers], n_in);
    // Every 6-bit scale and min, and the largest q (31) somewhere in each block.
    for (std::size_t i = 0; i < q.q5k.size(); ++i) {
      for (std::size_t k = 0; k < 12; ++k)
        q.q5k[i].scales[k] = static_cast<std::uint8_t>(rng() & 0xff);
      q.q5k[i].qs[i % 128] = 0xff;
      q.q5k[i].qh[i % 32] = 0xff;
    }
    for (std::size_t r = 0; r < n_out; ++r)
      dequantize_row_q5_k(&q.q5k[r * supers], &q.dequant[r * n_in], n_in);
  } else if (format == Format::kQ6_K) {
    const std::size_t supers = n_in / 256;
    q.q6k.resize(n_out * supers);
    for (std::size_t r = 0; r < n_out; ++r)
      quantize_row_q6_k(&w[r * n_in], &q.q6k[r * supers], n_in);
    // Every signed scale, -128 included, and every 6-bit q (0 and 63: the
    // largest products).
    for (std::size_t i = 0; i < q.q6k.size(); ++i) {
      for (std::size_t k = 0; k < 16; ++k) q.q6k[i].scales[k] = static_cast<std::int8_t>(rng());
      q.q6k[i].ql[i % 128] = 0xff;
      q.q6k[i].qh[i % 64] = 0xff;
    }
    for (std::size_t r = 0; r < n_out; ++r)
      dequantize_row_q6_k(&q.q6k[r * supers], &q.dequant[r * n_in], n_in);
  } else if (format == Format::kQ4_K) {
    const std::size_t supers = n_in / 256;
    q.q4k.resize(n_out * supers);
    for (std::size_t r = 0; r < n_out; ++r)
      quantize_row_q4_k(&w[r * n_in], &q.q4k[r * supers], n_in);
    // Every 6-bit scale and min value, the top two bits included, whatever
    // the encoder happens to choose.
    for (std::size_t i = 0; i < q.q4k.size(); ++i)
      for (std::size_t k = 0; k < 12; ++k)
        q.q4k[i].scales[k] = static_cast<std::uint8_t>(rng() & 0xff);
    for (std::size_t r = 0; r < n_out; ++r)
      dequantize_row_q4_k(&q.q4k[r * supers], &q.dequant[r * n_in], n_in);
  } else if (format == Format::kQ8_0) {
    q.q8.resize(n_out * blocks);
    for (std::size_t r = 0; r < n_out; ++r)
      quantize_row_q8_0(&w[r * n_in], &q.q8[r * blocks], n_in);
    // -128 is valid Q8_0 although the reference quantizer never writes it:
    // the non-VNNI paths must handle it without int8 overflow.
    for (std::size_t i = 0; i < q.q8.size(); i += 3) q.q8[i].qs[i % 32] = -128;
    for (std::size_t r = 0; r < n_out; ++r)
      dequantize_row_q8_0(&q.q8[r * blocks], &q.dequant[r * n_in], n_in);
  } else if (format == Format::kIQ4_NL) {
    // Q4_0's scales (about amax / 8, where IQ4_NL's are about amax / 127:
    // larger products) and uniformly random codes, all 16 levels.
    std::vector<BlockQ4_0> q4(n_out * blocks);
    for (std::size_t r = 0; r < n_out; ++r) quantize_row_q4_0(&w[r * n_in], &q4[r * blocks], n_in);
    q.iq4.resize(n_out * blocks);
    for (std::size_t i = 0; i < q.iq4.size(); ++i) {
      q.iq4[i].d = q4[i].d;
      for (std::uint8_t& c : q.iq4[i].qs) c = static_cast<std::uint8_t>(rng());
    }
    dequantize_row_iq4_nl(q.iq4.data(), q.dequant.data(), n_out * n_in);
  } else if (format == Format::kQ5_0 || format == Format::kQ4_1 || format == Format::kQ5_1) {
    // No encoder in hearth: Q4_0's scales (halved for 5 bits), uniformly
    // random codes and high bits (0 and 31 among them), and a min about the
    // block's lowest weight (Q4_1, Q5_1) with a random sign.
    std::vector<BlockQ4_0> q4(n_out * blocks);
    for (std::size_t r = 0; r < n_out; ++r) quantize_row_q4_0(&w[r * n_in], &q4[r * blocks], n_in);
    const bool five = format != Format::kQ4_1;
    auto fill = [&](auto& v) {
      v.resize(n_out * blocks);
      for (std::size_t i = 0; i < v.size(); ++i) {
        const float d = fp16_to_f32(q4[i].d) / (five ? 2.0f : 1.0f);
        v[i].d = f32_to_fp16(d);
        for (std::uint8_t& c : v[i].qs) c = static_cast<std::uint8_t>(rng());
        if constexpr (requires { v[i].qh; })
          for (std::uint8_t& c : v[i].qh) c = static_cast<std::uint8_t>(rng());
        if constexpr (requires { v[i].m; }) v[i].m = f32_to_fp16((rng() % 2 ? -16.0f : 3.0f) * d);
      }
    };
    if (format == Format::kQ5_0) {
      fill(q.q50);
      dequantize_row_q5_0(q.q50.data(), q.dequant.data(), n_out * n_in);
    } else if (format == Format::kQ4_1) {
      fill(q.q41);
      dequantize_row_q4_1(q.q41.data(), q.dequant.data(), n_out * n_in);
    } else {
      fill(q.q51);
      dequantize_row_q5_1(q.q51.data(), q.dequant.data(), n_out * n_in);
    }
  } else {
    q.q4.resize(n_out * blocks);
    for (std::size_t r = 0; r < n_out; ++r)
      quantize_row_q4_0(&w[r * n_in], &q.q4[r * blocks], n_in);
    for (std::size_t r = 0; r < n_out; ++r)
      dequantize_row_q4_0(&q.q4[r * blocks], &q.dequant[r * n_in], n_in);
  }
  return q;
}

absl::StatusOr<Linear> make_linear(const QuantWeights& q, Packing packing = {}) {
  if (q.format == Format::kQ4_K) return Linear::from_q4_k(q.q4k.data(), q.n_out, q.n_in, packing);
  if (q.format == Format::kQ5_K) return Linear::from_q5_k(q.q5k.data(), q.n_out, q.n_in, packing);
  if (q.format == Format::kQ6_K) return Linear::from_q6_k(q.q6k.data(), q.n_out, q.n_in, packing);
  if (q.format == Format::kIQ4_NL)
    return Linear::from_iq4_nl(q.iq4.data(), q.n_out, q.n_in, packing);
  if (q.format == Format::kQ5_0) return Linear::from_q5_0(q.q50.data(), q.n_out, q.n_in, packing);
  if (q.format == Format::kQ4_1) return Linear::from_q4_1(q.q41.data(), q.n_out, q.n_in, packing);
  if (q.format == Format::kQ5_1) return Linear::from_q5_1(q.q51.data(), q.n_out, q.n_in, packing);
  return q.format == Format::kQ8_0 ? Linear::from_q8_0(q.q8.data(), q.n_out, q.n_in, packing)
                                   : Linear::from_q4_0(q.q4.data(), q.n_out, q.n_in, packing);
}

// Activations: normal values, a few large outliers, and an all-zero block in
// the first token (d = 0).
std::vector<float> make_activations(std::size_t m, std::size_t n_in, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(m * n_in);
  for (float& v : x) v = dist(rng);
  for (std::size_t i = 0; i < x.size(); i += 97) x[i] *= 20.0f;
  if (n_in >= 64)
    for (std::size_t i = 32; i < 64; ++i) x[i] = 0.0f;
  return x;
}

// The documented activation quantization: d = amax / 127, q = round half to
// even (x * (1 / d)), amax per block or per token (below 1e-30 counts as 0).
struct QuantActs {
  std::vector<int> q;      // m x n_in
  std::vector<float> d;    // m x blocks (per token: repeated)
  std::vector<float> deq;  // q * d
};

QuantActs quantize_acts(const std::vector<float>& x, std::size_t m, std::size_t n_in, AQ aq) {
  const std::size_t blocks = n_in / 32;
  QuantActs a{std::vector<int>(m * n_in), std::vector<float>(m * blocks),
              std::vector<float>(m * n_in)};
  for (std::size_t t = 0; t < m; ++t) {
    float row_amax = 0.0f;
    for (std::size_t k = 0; k < n_in; ++k)
      row_amax = std::max(row_amax, std::fabs(x[t * n_in + k]));
    for (std::size_t b = 0; b < blocks; ++b) {
      float amax = row_amax;
      if (aq == AQ::kPerGroup32) {
        amax = 0.0f;
        for (std::size_t i = 0; i < 32; ++i)
          amax = std::max(amax, std::fabs(x[t * n_in + b * 32 + i]));
      }
      const float d = amax < 1e-30f ? 0.0f : amax / 127.0f;
      const float id = d == 0.0f ? 0.0f : 1.0f / d;
      a.d[t * blocks + b] = d;
      for (std::size_t i = 0; i < 32; ++i) {
        const std::size_t k = t * n_in + b * 32 + i;
        a.q[k] = static_cast<int>(std::nearbyint(x[k] * id));
        a.deq[k] = static_cast<float>(a.q[k]) * d;
      }
    }
  }
  return a;
}

// The float operations kernels/linear.h specifies, in its order.
std::vector<float> spec_forward(const QuantWeights& w, const QuantActs& a, std::size_t m, AQ aq) {
  const std::size_t blocks = w.n_in / 32;
  std::vector<float> y(m * w.n_out);
  for (std::size_t t = 0; t < m; ++t)
    for (std::size_t o = 0; o < w.n_out; ++o) {
      float acc = 0.0f;
      for (std::size_t b = 0; b < blocks; ++b) {
        const float dx = a.d[t * blocks + b];
        if (w.format == Format::kQ6_K) {  // two halves of 16, each times its sc
          std::int32_t dot = 0;
          for (std::size_t h = 0; h < 2; ++h) {
            std::int32_t half = 0;
            for (std::size_t i = 16 * h; i < 16 * h + 16; ++i)
              half += w.w(o, b * 32 + i) * a.q[t * w.n_in + b * 32 + i];
            dot += half * w.sc16(o, b * 32 + 16 * h);
          }
          const float d = w.d6(o, b * 32);
          acc = aq == AQ::kPerToken ? std::fma(static_cast<float>(dot), d, acc)
                                    : std::fma(static_cast<float>(dot), d * dx, acc);
          continue;
        }
        std::int32_t dot = 0, sum = 0;
        for (std::size_t i = 0; i < 32; ++i) {
          dot += w.w(o, b * 32 + i) * a.q[t * w.n_in + b * 32 + i];
          sum += a.q[t * w.n_in + b * 32 + i];
        }
        const float dw = w.d(o, b);
        acc = aq == AQ::kPerToken ? std::fma(static_cast<float>(dot), dw, acc)
                                  : std::fma(static_cast<float>(dot), dw * dx, acc);
        if (w.mins()) {  // the block's mins, times -sum(q_x)
          const float s_b = static_cast<float>(-sum);
          acc = std::fma(w.min(o, b), aq == AQ::kPerToken ? s_b : dx * s_b, acc);
        }
      }
      y[t * w.n_out + o] = aq == AQ::kPerToken ? acc * a.d[t * blocks] : acc;
    }
  return y;
}

// Naive double-precision y = x W^T, with sum |x_i w_i| for error bounds.
void naive_matmul(const std::vector<float>& w, const std::vector<float>& x, std::size_t m,
                  std::size_t n_out, std::size_t n_in, std::vector<double>* y,
                  std::vector<double>* abs_sum) {
  y->assign(m * n_out, 0.0);
  abs_sum->assign(m * n_out, 0.0);
  for (std::size_t t = 0; t < m; ++t)
    for (std::size_t o = 0; o < n_out; ++o) {
      double s = 0.0, as = 0.0;
      for (std::size_t k = 0; k < n_in; ++k) {
        const double p = static_cast<double>(w[o * n_in + k]) * x[t * n_in + k];
        s += p;
        as += std::fabs(p);
      }
      (*y)[t * n_out + o] = s;
      (*abs_sum)[t * n_out + o] = as;
    }
}

std::vector<float> run(const Linear& l, const std::vector<float>& x, std::size_t m, AQ aq,
                       ThreadPool* pool = nullptr) {
  CachingAllocator scratch;
  std::vector<float> y(m * l.n_out(), std::nanf(""));
  const absl::Status s = l.forward(x.data(), m, y.data(), scratch, pool, aq);
  EXPECT_TRUE(s.ok()) << s;
  return y;
}

// Bit-identical results (the contract between paths and thread counts).
void expect_identical(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << what << " at " << i << ": " << got[i] << " vs " << want[i];
}

// ---------------------------------------------------------------------------

struct Shape {
  std::size_t n_out, n_in, m;
};

std::vector<Shape> odd_shapes(Format format) {
  std::vector<Shape> shapes;
  // n_in not a multiple of 64 (96, 4128; Q4_K: an odd number of super-blocks,
  // 768 and 4352); n_out leaving partial row groups and, at 70 and 100 (5
  // and 7 groups), every tile width; m covering the single-token path, small
  // batches and token-tile tails.
  const bool k_quant =
      format == Format::kQ4_K || format == Format::kQ5_K || format == Format::kQ6_K;
  const std::vector<std::size_t> n_ins =
      k_quant ? std::vector<std::size_t>{256, 768, 4352} : std::vector<std::size_t>{32, 96, 4128};
  for (std::size_t n_in : n_ins)
    for (std::size_t n_out : {1, 17, 33, 70, 100})
      for (std::size_t m : {1, 3, 4, 5, 6, 7, 8, 9, 14, 130}) {
        if (n_in > 4096 && n_out == 100 && m == 130) continue;  // keep the scalar runs short
        if (n_out == 70 && m != 1) continue;  // 5 groups: decode's 3 + 2 tiles only
#if defined(HEARTH_SANITIZER_ADDRESS) || defined(HEARTH_SANITIZER_THREAD)
        // Under a sanitizer (memory errors, not arithmetic: the release run
        // checks every shape), one 130-token shape per width: those are most
        // of the test's time, and the other m already cover every tile tail.
        if (m == 130 && n_out != 17) continue;
#endif
        shapes.push_back({n_out, n_in, m});
      }
  return shapes;
}

class LinearQuantized : public ::testing::TestWithParam<std::tuple<Format, AQ>> {};

// Every dispatched path against the scalar reference (bit-identical), the
// scalar reference against the test's own implementation of the documented
// operations (bit-identical), and against a double-precision matmul of the
// dequantized weights and activations.
TEST_P(LinearQuantized, EveryPathMatchesTheSpecificationOnOddShapes) {
  const auto [format, aq] = GetParam();
  unsigned seed = 1;
  for (const Shape& s : odd_shapes(format)) {
    const std::string what = std::string(format_name(format)) + " " + aq_name(aq) +
                             " n_out=" + std::to_string(s.n_out) +
                             " n_in=" + std::to_string(s.n_in) + " m=" + std::to_string(s.m);
    const QuantWeights w = make_weights(format, s.n_out, s.n_in, seed++);
    const std::vector<float> x = make_activations(s.m, s.n_in, seed++);
    absl::StatusOr<Linear> l = make_linear(w);
    ASSERT_TRUE(l.ok()) << l.status();

    const QuantActs a = quantize_acts(x, s.m, s.n_in, aq);
    const std::vector<float> spec = spec_forward(w, a, s.m, aq);

    std::vector<float> scalar;
    {
      ScopedIsa forced(Isa::kScalar);
      scalar = run(*l, x, s.m, aq);
    }
    expect_identical(scalar, spec, what + " scalar vs spec");
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      expect_identical(run(*l, x, s.m, aq), scalar, what + " " + isa_name(isa) + " vs scalar");
      if (s.m == 1) {  // the decode tiles, with the prefetch setting this machine does not pick
        ScopedDecodePrefetch other(!decode_prefetch());
        expect_identical(run(*l, x, s.m, aq), scalar,
                         what + " " + isa_name(isa) + " decode prefetch flipped vs scalar");
      }
    }

    // Against exact arithmetic on the same quantized values, the kernels
    // differ by float rounding: converting dot to float is exact (|dot| <
    // 2^24), d_w * d_x rounds once (eps/2), and each of the n_in/32 fma
    // accumulations (and the per-token final multiply) rounds once, each error
    // at most eps/2 of a partial sum bounded by sum |w x|. Hence
    //   |y - exact| <= (n_in / 32 + 2) * FLT_EPSILON * sum |w_i xq_i|.
    // Q4_K accumulates two terms per block (d sc q x and dmin m x, whose
    // magnitudes bound the partial sums instead of |w x|), each with one
    // more product: (2 n_in / 32 + 3) roundings of sum (|d sc q| + |dmin m|) |xq|.
    // Q6_K: two roundings per block as well, of |w| itself.
    std::vector<float> magnitude = w.dequant;
    if (w.mins())
      for (std::size_t o = 0; o < s.n_out; ++o)
        for (std::size_t k = 0; k < s.n_in; ++k)
          magnitude[o * s.n_in + k] =
              std::fabs(w.d(o, k / 32) * w.w(o, k)) + std::fabs(w.min(o, k / 32));
    const double roundings =
        w.mins() || format == Format::kQ6_K ? 2.0 * s.n_in / 32 + 3 : s.n_in / 32.0 + 2;
    std::vector<double> exact, abs_sum, unused;
    naive_matmul(w.dequant, a.deq, s.m, s.n_out, s.n_in, &exact, &unused);
    naive_matmul(magnitude, a.deq, s.m, s.n_out, s.n_in, &unused, &abs_sum);
    for (std::size_t i = 0; i < spec.size(); ++i)
      ASSERT_NEAR(scalar[i], exact[i], roundings * FLT_EPSILON * abs_sum[i] + 1e-30)
          << what << " vs dequantized at " << i;

    // Against the unquantized activations: each x_i moves by at most d / 2
    // = amax / 254 (amax of its block, or of its token), so
    //   |y - y_float| <= sum_i |w_i| * amax_i / 254 + the rounding above.
    // With relative factor 1.001 for the double/float conversions.
    std::vector<double> y_float, abs_float;
    naive_matmul(w.dequant, x, s.m, s.n_out, s.n_in, &y_float, &abs_float);
    for (std::size_t t = 0; t < s.m; ++t)
      for (std::size_t o = 0; o < s.n_out; ++o) {
        double bound = 0.0;
        for (std::size_t k = 0; k < s.n_in; ++k)
          bound += std::fabs(w.dequant[o * s.n_in + k]) * a.d[t * (s.n_in / 32) + k / 32] / 2;
        const std::size_t i = t * s.n_out + o;
        ASSERT_NEAR(scalar[i], y_float[i],
                    1.001 * bound + roundings * FLT_EPSILON * abs_sum[i] + 1e-30)
            << what << " vs float activations at " << i;
      }
  }
}

// Threads split outputs (row groups, or tokens when there are few row groups),
// never the sum, so the thread count cannot change a single bit.
TEST_P(LinearQuantized, ThreadedEqualsUnthreadedBitForBit) {
  const auto [format, aq] = GetParam();
  ThreadPool pool2(2), pool3(3);
  // n_in 4352 (17 super-blocks) where 4128 (129 blocks) is not a whole
  // number of Q4_K super-blocks.
  const std::size_t odd =
      format == Format::kQ4_K || format == Format::kQ5_K || format == Format::kQ6_K ? 4352 : 4128;
  const Shape shapes[] = {{300, odd, 1},    {300, odd, 3},  {300, 1024, 9}, {300, 1024, 12},
                          {300, 1024, 130}, {17, odd, 130}, {1000, 512, 64}};
  unsigned seed = 100;
  for (const Shape& s : shapes) {
    const QuantWeights w = make_weights(format, s.n_out, s.n_in, seed++);
    const std::vector<float> x = make_activations(s.m, s.n_in, seed++);
    absl::StatusOr<Linear> l = make_linear(w);
    ASSERT_TRUE(l.ok()) << l.status();
    const std::vector<float> single = run(*l, x, s.m, aq);
    const std::string what = std::string(format_name(format)) + " " + aq_name(aq) +
                             " n_out=" + std::to_string(s.n_out) + " m=" + std::to_string(s.m);
    expect_identical(run(*l, x, s.m, aq, &pool2), single, what + " 2 threads");
    expect_identical(run(*l, x, s.m, aq, &pool3), single, what + " 3 threads");
  }
}

// Packing splits row groups across the pool's threads (a model loads on every
// kernel thread); each group's bytes are written by one thread, so the layer
// must compute exactly what the caller-packed one does, including the
// padding of a partial last group.
TEST_P(LinearQuantized, PackedOnAPoolEqualsPackedOnTheCaller) {
  const auto [format, aq] = GetParam();
  ThreadPool pool2(2), pool3(3);
  const bool k_quant =
      format == Format::kQ4_K || format == Format::kQ5_K || format == Format::kQ6_K;
  const Shape shapes[] = {
      {17, k_quant ? 768u : 96u, 3}, {300, k_quant ? 4352u : 4128u, 1}, {1000, 512, 5}};
  unsigned seed = 200;
  for (const Shape& s : shapes) {
    const QuantWeights w = make_weights(format, s.n_out, s.n_in, seed++);
    const std::vector<float> x = make_activations(s.m, s.n_in, seed++);
    absl::StatusOr<Linear> on_caller = make_linear(w);
    ASSERT_TRUE(on_caller.ok()) << on_caller.status();
    const std::vector<float> want = run(*on_caller, x, s.m, aq);
    for (ThreadPool* pool : {&pool2, &pool3}) {
      absl::StatusOr<Linear> on_pool = make_linear(w, pool);
      ASSERT_TRUE(on_pool.ok()) << on_pool.status();
      EXPECT_EQ(on_pool->weight_bytes(), on_caller->weight_bytes());
      expect_identical(run(*on_pool, x, s.m, aq), want,
                       std::string(format_name(format)) + " n_out=" + std::to_string(s.n_out) +
                           " packed on " + std::to_string(pool->threads()) + " threads");
    }
  }
}

// A model's projections are carved from one StreamedRegion: each computes
// exactly what it does packed alone, keeps the region alive after its last
// other owner lets go, and falls back to an allocation of its own when the
// region is full.
TEST_P(LinearQuantized, PackedIntoARegionEqualsPackedAlone) {
  const auto [format, aq] = GetParam();
  ThreadPool pool2(2);
  const bool k_quant =
      format == Format::kQ4_K || format == Format::kQ5_K || format == Format::kQ6_K;
  const Shape shapes[] = {{17, k_quant ? 768u : 96u, 3}, {300, k_quant ? 4352u : 4128u, 1}};
  std::vector<QuantWeights> weights;
  std::vector<std::vector<float>> xs, wants;
  std::size_t alone_bytes = 0;
  unsigned seed = 300;
  for (const Shape& s : shapes) {
    weights.push_back(make_weights(format, s.n_out, s.n_in, seed++));
    xs.push_back(make_activations(s.m, s.n_in, seed++));
    absl::StatusOr<Linear> alone = make_linear(weights.back());
    ASSERT_TRUE(alone.ok()) << alone.status();
    wants.push_back(run(*alone, xs.back(), s.m, aq));
    alone_bytes += alone->weight_bytes();
  }
  std::shared_ptr<StreamedRegion> region = StreamedRegion::reserve(alone_bytes + 1000);
  ASSERT_NE(region, nullptr);
  std::vector<Linear> carved;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    absl::StatusOr<Linear> l = make_linear(weights[i], Packing(i == 0 ? &pool2 : nullptr, region));
    ASSERT_TRUE(l.ok()) << l.status();
    carved.push_back(std::move(*l));
  }
  EXPECT_GE(region->used(), alone_bytes) << "every layer's weights came from the region";
  EXPECT_LT(region->used(), alone_bytes + 64 * weights.size());
  region.reset();  // the layers hold it now
  for (std::size_t i = 0; i < weights.size(); ++i)
    expect_identical(
        run(carved[i], xs[i], shapes[i].m, aq), wants[i],
        std::string(format_name(format)) + " layer " + std::to_string(i) + " from the region");

  std::shared_ptr<StreamedRegion> full = StreamedRegion::reserve(64);
  ASSERT_NE(full, nullptr);
  absl::StatusOr<Linear> own = make_linear(weights[1], Packing(nullptr, full));
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(full->used(), 0u) << "too large for the region: an allocation of its own";
  expect_identical(run(*own, xs[1], shapes[1].m, aq), wants[1],
                   std::string(format_name(format)) + " beside a full region");
}

// Q, K and V (or gate and up) in one call: bit-identical to one forward()
// each, on every thread count, for one token (the single parallel region over
// all layers' row groups, with partial row groups at layer boundaries) and for
// several (the per-layer path over activations quantized once). `formats`
// are the three layers' (n_out 300, 17 and 1000).
void expect_same_input_equals_separate(const Format (&formats)[3], AQ aq, const std::string& what) {
  ThreadPool pool2(2), pool3(3);
  const std::size_t n_in = 1024;
  std::vector<QuantWeights> ws;
  std::vector<Linear> ls;
  unsigned seed = 300;
  const std::size_t n_outs[] = {300, 17, 1000};
  for (int i = 0; i < 3; ++i) {
    ws.push_back(make_weights(formats[i], n_outs[i], n_in, seed++));
    absl::StatusOr<Linear> l = make_linear(ws.back());
    ASSERT_TRUE(l.ok()) << l.status();
    ls.push_back(*std::move(l));
  }
  const Linear* layers[] = {&ls[0], &ls[1], &ls[2]};
  for (std::size_t m : {1, 3, 130}) {
    const std::vector<float> x = make_activations(m, n_in, seed++);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      CachingAllocator scratch;
      std::vector<std::vector<float>> ys;
      std::vector<float*> outs;
      for (const Linear& l : ls) ys.emplace_back(m * l.n_out(), std::nanf(""));
      for (auto& y : ys) outs.push_back(y.data());
      // Decode tells the workers what they stream first (a prefetch only:
      // the results below must not change).
      if (m == 1) {
        EXPECT_EQ(Linear::hint_decode(layers, pool, 64 << 10),
                  pool == nullptr ? 0u : pool->threads() - 1)
            << what;
      }
      const absl::Status st =
          Linear::forward_same_input(layers, x.data(), m, outs, scratch, pool, aq);
      ASSERT_TRUE(st.ok()) << st;
      for (std::size_t i = 0; i < ls.size(); ++i)
        expect_identical(ys[i], run(ls[i], x, m, aq),
                         what + " layer " + std::to_string(i) + " m=" + std::to_string(m) +
                             " threads=" + std::to_string(pool == nullptr ? 1 : pool->threads()));
    }
  }
}

TEST_P(LinearQuantized, ForwardSameInputEqualsSeparateForwards) {
  const auto [format, aq] = GetParam();
  expect_same_input_equals_separate({format, format, format}, aq, format_name(format));
}

// The K-quants quantize their input alike, so a Q4_K_M file's Q and K
// (Q4_K) and V (Q6_K) share one quantization and one decode region; Q4_1
// and Q5_1 take the same activations (C = 1).
TEST(Linear, ForwardSameInputSharesTheKQuantsActivations) {
  for (AQ aq : {AQ::kPerGroup32, AQ::kPerToken}) {
    expect_same_input_equals_separate({Format::kQ4_K, Format::kQ6_K, Format::kQ5_K}, aq,
                                      "q4_k, q6_k, q5_k");
    expect_same_input_equals_separate({Format::kQ4_1, Format::kQ5_K, Format::kQ5_1}, aq,
                                      "q4_1, q5_k, q5_1");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, LinearQuantized,
    ::testing::Combine(::testing::Values(Format::kQ8_0, Format::kQ4_0, Format::kQ4_K, Format::kQ5_K,
                                         Format::kQ6_K, Format::kIQ4_NL, Format::kQ5_0,
                                         Format::kQ4_1, Format::kQ5_1),
                       ::testing::Values(AQ::kPerGroup32, AQ::kPerToken)),
    [](const auto& info) {
      return std::string(format_name(std::get<0>(info.param))) + "_" +
             (std::get<1>(info.param) == AQ::kPerGroup32 ? "PerGroup32" : "PerToken");
    });

// Hints go to workers only where decode splits the rows across the pool.
TEST(Linear, HintDecodeTellsWorkersOnlyWhenDecodeIsSplit) {
  const QuantWeights big = make_weights(Format::kQ8_0, 256, 2048, 5);  // 512K multiply-adds
  const QuantWeights small = make_weights(Format::kQ8_0, 16, 64, 6);
  const QuantWeights other = make_weights(Format::kQ4_0, 256, 2048, 7);
  absl::StatusOr<Linear> lb = make_linear(big), ls = make_linear(small), lo = make_linear(other);
  ASSERT_TRUE(lb.ok() && ls.ok() && lo.ok());
  std::vector<float> f(64 * 64, 0.5f);
  absl::StatusOr<Linear> lf = Linear::from_f32(f.data(), 64, 64);
  ASSERT_TRUE(lf.ok()) << lf.status();
  ThreadPool one(1), two(2), three(3);
  const Linear* b[] = {&*lb};
  const Linear* s[] = {&*ls};
  const Linear* mixed[] = {&*lb, &*lo};
  const QuantWeights q4_k = make_weights(Format::kQ4_K, 256, 2048, 8);
  const QuantWeights q6_k = make_weights(Format::kQ6_K, 64, 2048, 9);
  absl::StatusOr<Linear> l4 = make_linear(q4_k), l6 = make_linear(q6_k);
  ASSERT_TRUE(l4.ok() && l6.ok());
  const Linear* k_mix[] = {&*l4, &*l6};
  const Linear* fl[] = {&*lf};
  EXPECT_EQ(Linear::hint_decode(b, &two, 1 << 16), 1u);
  EXPECT_EQ(Linear::hint_decode(b, &three, 1 << 16), 2u);
  EXPECT_EQ(Linear::hint_decode(b, &one, 1 << 16), 0u);
  EXPECT_EQ(Linear::hint_decode(b, nullptr, 1 << 16), 0u);
  EXPECT_EQ(Linear::hint_decode(b, &two, 0), 0u);
  EXPECT_EQ(Linear::hint_decode(s, &two, 1 << 16), 0u) << "too small to split";
  EXPECT_EQ(Linear::hint_decode(mixed, &two, 1 << 16), 0u)
      << "Q8_0 and Q4_0 quantize their input differently: they run separately";
  EXPECT_EQ(Linear::hint_decode(k_mix, &two, 1 << 16), 1u) << "K-quants share one region";
  EXPECT_EQ(Linear::hint_decode(fl, &two, 1 << 16), 0u) << "float layers run in XNNPACK";
}

TEST(Linear, PackedBytesMatchTheGgufSize) {
  const QuantWeights q8 = make_weights(Format::kQ8_0, 64, 256, 3);
  const QuantWeights q4 = make_weights(Format::kQ4_0, 64, 256, 4);
  absl::StatusOr<Linear> l8 = make_linear(q8), l4 = make_linear(q4);
  ASSERT_TRUE(l8.ok() && l4.ok());
  EXPECT_EQ(l8->weight_bytes(), 64u * 256 / 32 * sizeof(BlockQ8_0));
  EXPECT_EQ(l4->weight_bytes(), 64u * 256 / 32 * sizeof(BlockQ4_0));
  EXPECT_EQ(l8->format(), Format::kQ8_0);
  EXPECT_EQ(l4->format(), Format::kQ4_0);
  EXPECT_EQ(l8->n_out(), 64u);
  EXPECT_EQ(l8->n_in(), 256u);
  // Q4_K and Q5_K keep their 6-bit scales and mins in the file's 12 bytes
  // per super-block and row (rearranged): exactly the file's size.
  const QuantWeights q4k = make_weights(Format::kQ4_K, 64, 1024, 5);
  absl::StatusOr<Linear> lk = make_linear(q4k);
  ASSERT_TRUE(lk.ok()) << lk.status();
  EXPECT_EQ(lk->format(), Format::kQ4_K);
  EXPECT_EQ(lk->weight_bytes(), 64u * 1024 / 256 * sizeof(BlockQ4_K));
  const QuantWeights q5k = make_weights(Format::kQ5_K, 64, 1024, 7);
  absl::StatusOr<Linear> l5 = make_linear(q5k);
  ASSERT_TRUE(l5.ok()) << l5.status();
  EXPECT_EQ(l5->weight_bytes(), 64u * 1024 / 256 * sizeof(BlockQ5_K));
  // Q6_K packs to exactly the file's size.
  const QuantWeights q6k = make_weights(Format::kQ6_K, 64, 1024, 6);
  absl::StatusOr<Linear> l6 = make_linear(q6k);
  ASSERT_TRUE(l6.ok()) << l6.status();
  EXPECT_EQ(l6->weight_bytes(), 64u * 1024 / 256 * sizeof(BlockQ6_K));
  // The older types too: Q5_0's and Q5_1's 5-bit q in Q5_K's steps, Q4_1's
  // and Q5_1's d and m beside them.
  const std::pair<Format, std::size_t> older[] = {{Format::kQ5_0, sizeof(BlockQ5_0)},
                                                  {Format::kQ4_1, sizeof(BlockQ4_1)},
                                                  {Format::kQ5_1, sizeof(BlockQ5_1)}};
  for (const auto& [format, block_bytes] : older) {
    absl::StatusOr<Linear> l = make_linear(make_weights(format, 64, 1024, 8));
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->format(), format);
    EXPECT_EQ(l->weight_bytes(), 64u * 1024 / 32 * block_bytes) << format_name(format);
  }
}

TEST(Linear, F32AndF16MatchANaiveMatmul) {
  unsigned seed = 40;
  for (const Shape& s : {Shape{1, 1, 1}, Shape{17, 96, 1}, Shape{33, 100, 7}, Shape{100, 4128, 9},
                         Shape{65, 300, 130}}) {
    std::mt19937 rng(seed++);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> w(s.n_out * s.n_in), x(s.m * s.n_in);
    for (float& v : w) v = dist(rng);
    for (float& v : x) v = dist(rng);
    std::vector<std::uint16_t> w16(w.size());
    std::vector<float> w16f(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      w16[i] = f32_to_fp16(w[i]);
      w16f[i] = fp16_to_f32(w16[i]);
    }
    absl::StatusOr<Linear> l32 = Linear::from_f32(w.data(), s.n_out, s.n_in);
    absl::StatusOr<Linear> l16 = Linear::from_f16(w16.data(), s.n_out, s.n_in);
    ASSERT_TRUE(l32.ok()) << l32.status();
    ASSERT_TRUE(l16.ok()) << l16.status();
    EXPECT_EQ(l32->format(), Format::kF32);
    EXPECT_EQ(l16->format(), Format::kF16);
    ThreadPool pool(2);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      const std::vector<float> y32 = run(*l32, x, s.m, AQ::kPerGroup32, p);
      const std::vector<float> y16 = run(*l16, x, s.m, AQ::kPerGroup32, p);
      std::vector<double> ref32, abs32, ref16, abs16;
      naive_matmul(w, x, s.m, s.n_out, s.n_in, &ref32, &abs32);
      naive_matmul(w16f, x, s.m, s.n_out, s.n_in, &ref16, &abs16);
      // Float summation in any order: |error| <= n_in * eps * sum |w x|
      // (the classic gamma_n bound; XNNPACK reassociates freely).
      for (std::size_t i = 0; i < y32.size(); ++i) {
        ASSERT_NEAR(y32[i], ref32[i], s.n_in * FLT_EPSILON * abs32[i]) << i;
        ASSERT_NEAR(y16[i], ref16[i], s.n_in * FLT_EPSILON * abs16[i]) << i;
      }
    }
    EXPECT_EQ(l32->weight_bytes(), s.n_out * (s.n_in + 1) * sizeof(float));
  }
}

TEST(Linear, BadSizesAreInvalidArgument) {
  std::vector<BlockQ8_0> q8(64);
  std::vector<BlockQ4_0> q4(64);
  std::vector<float> f(64 * 64);
  std::vector<std::uint16_t> h(64 * 64);
  absl::StatusOr<Linear> l = Linear::from_q8_0(q8.data(), 2, 48);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("n_in=48"), std::string::npos) << l.status();
  l = Linear::from_q4_0(q4.data(), 2, 100);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("n_in=100"), std::string::npos) << l.status();
  EXPECT_EQ(Linear::from_q8_0(q8.data(), 0, 32).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Linear::from_q4_0(q4.data(), 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Linear::from_q8_0(nullptr, 1, 32).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Linear::from_f32(f.data(), 0, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Linear::from_f16(h.data(), 4, 0).status().code(), absl::StatusCode::kInvalidArgument);
  // Q4_K rows are whole super-blocks.
  std::vector<BlockQ4_K> q4k(4);
  l = Linear::from_q4_k(q4k.data(), 2, 288);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("multiple of 256"), std::string::npos) << l.status();
  EXPECT_EQ(Linear::from_q4_k(nullptr, 1, 256).status().code(), absl::StatusCode::kInvalidArgument);
  // Float weights take any n_in.
  EXPECT_TRUE(Linear::from_f32(f.data(), 3, 5).ok());
}

class FailingAllocator final : public MemoryAllocator {
 public:
  void* allocate(std::size_t, std::size_t) noexcept override { return nullptr; }
  void reset() noexcept override {}
};

TEST(Linear, ForwardSameInputRefusesMismatchedLayers) {
  const QuantWeights a = make_weights(Format::kQ8_0, 16, 64, 1);
  const QuantWeights b = make_weights(Format::kQ8_0, 16, 96, 2);
  absl::StatusOr<Linear> la = make_linear(a), lb = make_linear(b);
  ASSERT_TRUE(la.ok() && lb.ok());
  const std::vector<float> x = make_activations(1, 64, 3);
  std::vector<float> ya(16), yb(16);
  CachingAllocator scratch;
  const Linear* layers[] = {&*la, &*lb};
  float* outs[] = {ya.data(), yb.data()};
  absl::Status s = Linear::forward_same_input(layers, x.data(), 1, outs, scratch, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 1 takes 96 inputs"), std::string::npos) << s;
  s = Linear::forward_same_input(std::span<const Linear* const>(layers, 1), x.data(), 1, outs,
                                 scratch, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(Linear, ScratchExhaustionIsAnErrorNotACrash) {
  const QuantWeights w = make_weights(Format::kQ8_0, 16, 64, 9);
  absl::StatusOr<Linear> l = make_linear(w);
  ASSERT_TRUE(l.ok());
  std::vector<float> x(64, 1.0f), y(16);
  FailingAllocator none;
  const absl::Status s = l->forward(x.data(), 1, y.data(), none, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  // m = 0 needs nothing.
  EXPECT_TRUE(l->forward(x.data(), 0, y.data(), none, nullptr).ok());
}

// After a warm-up, a forward takes all its memory from the (warm) caching
// scratch allocator: no heap call, single- or multi-threaded.
TEST(Linear, NoHeapAllocationInForwardAfterWarmUp) {
  ThreadPool pool(2);
  for (Format format : {Format::kQ8_0, Format::kQ4_0, Format::kQ4_K, Format::kQ5_K, Format::kQ6_K,
                        Format::kIQ4_NL, Format::kQ5_0, Format::kQ4_1, Format::kQ5_1}) {
    const QuantWeights w = make_weights(format, 256, 512, 21);
    absl::StatusOr<Linear> l = make_linear(w);
    ASSERT_TRUE(l.ok());
    for (std::size_t m : {1, 64}) {
      const std::vector<float> x = make_activations(m, 512, 22);
      std::vector<float> y(m * 256);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        for (AQ aq : {AQ::kPerGroup32, AQ::kPerToken}) {
          CachingAllocator scratch;
          ASSERT_TRUE(l->forward(x.data(), m, y.data(), scratch, p, aq).ok());
          scratch.reset();
          hearth::testing::HeapCounter counter;
          ASSERT_TRUE(l->forward(x.data(), m, y.data(), scratch, p, aq).ok());
          EXPECT_EQ(counter.allocations(), 0u)
              << format_name(format) << " m=" << m << (p ? " pooled" : " unpooled");
        }
      }
    }
  }
}

// XNNPACK's fully-connected setup and run (this Debian snapshot) make no heap
// allocation either: the operator's buffers are made at creation.
TEST(Linear, F32ForwardMakesNoHeapAllocationAfterWarmUp) {
  // XNNPACK allocates with malloc: only a counter that sees malloc can tell.
  if (!hearth::testing::HeapCounter::counts_malloc())
    GTEST_SKIP() << "malloc is not counted in this build (sanitizer)";
  ThreadPool pool(2);
  std::vector<float> w(256 * 512, 0.25f);
  absl::StatusOr<Linear> l = Linear::from_f32(w.data(), 256, 512);
  ASSERT_TRUE(l.ok());
  for (std::size_t m : {1, 64}) {
    std::vector<float> x(m * 512, 1.0f), y(m * 256);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      CachingAllocator scratch;
      ASSERT_TRUE(l->forward(x.data(), m, y.data(), scratch, p).ok());
      hearth::testing::HeapCounter counter;
      ASSERT_TRUE(l->forward(x.data(), m, y.data(), scratch, p).ok());
      EXPECT_EQ(counter.allocations(), 0u) << "m=" << m << (p ? " pooled" : " unpooled");
      EXPECT_EQ(y[0], 0.25f * 512);
    }
  }
}

// One Linear shared by several threads at once (each with its own scratch)
// gives every thread the single-threaded result.
TEST(Linear, ConcurrentForwardsOnASharedLinear) {
  const QuantWeights w = make_weights(Format::kQ4_0, 100, 256, 31);
  absl::StatusOr<Linear> lq = make_linear(w);
  absl::StatusOr<Linear> lf = Linear::from_f32(w.dequant.data(), 100, 256);
  ASSERT_TRUE(lq.ok() && lf.ok());
  const std::vector<float> x = make_activations(5, 256, 32);
  const std::vector<float> want_q = run(*lq, x, 5, AQ::kPerGroup32);
  const std::vector<float> want_f = run(*lf, x, 5, AQ::kPerGroup32);
  ThreadPool pool(2);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      CachingAllocator scratch;
      std::vector<float> y(5 * 100);
      bool good = true;
      for (int r = 0; r < 50; ++r) {
        const Linear& l = (r + i) % 2 ? *lq : *lf;
        good &= l.forward(x.data(), 5, y.data(), scratch, i % 2 ? &pool : nullptr).ok();
        good &= std::memcmp(y.data(), ((r + i) % 2 ? want_q : want_f).data(),
                            y.size() * sizeof(float)) == 0;
        scratch.reset();
      }
      ok[i] = good;
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(ok[i]) << "thread " << i;
}

}  // namespace
}  // namespace hearth::kernels
