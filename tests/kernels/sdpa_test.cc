#include "kernels/sdpa.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/kv_cache.h"
#include "kernels/thread_pool.h"
#include "memory/arena_allocator.h"
#include "memory/caching_allocator.h"
#include "tests/support/heap_counter.h"

namespace hearth::kernels {
namespace {

// ---- Tolerances -------------------------------------------------------------
//
// u = 2^-24 (float unit roundoff), gamma(n) = n u / (1 - n u). The int8 cache
// stores row p as codes c_pd, a scale and a zero point z_p: the dequantized
// element is k'_pd = k_scale_p (c_pd - z_p) (kernels/kv_cache.h).
//
// Float rounding (bound_round). Against exact attention in double on the same
// K/V, a float implementation errs in:
//  * each score s_p = dot(scale q, k_p): at most E = gamma(head_dim + 2) * S1,
//    S1 = max_p sum_d |scale q_d k_pd|, in any summation order (+2: the scale
//    multiplies);
//  * each weight exp(s_p - m): the argument errs by <= 2E + 64 u (scores,
//    running max, the subtraction of |s - m| <= 64), the exp itself by <= 4u
//    relative (libm or the ~2 ulp SIMD polynomial), and each of the T tile
//    rescalings (and a split merge) multiplies in one more such exp: relative
//    weight error eps_w = 2E + (4 (T + 2) + 64) u;
//  * o_d = sum_p w_p v_pd / sum_p w_p: weights off by eps_w each move o by
//    <= 2 eps_w max|v|, and summing ctx terms twice adds 2 gamma(ctx) max|v|.
//  bound_round_d = (2 eps_w + 2 gamma(ctx) + 4u) * max_p |v_pd|.
//
// Float rounding on the int8 cache (bound_round_int8): the same, but the
// kernels sum codes and zero points separately and subtract:
//  * a score is k_scale_p (dot(scale q, c_p) - z_p sum_d scale q_d): the two
//    sums err by gamma(head_dim) times sum_d |scale q_d| |c_pd| and
//    |z_p| sum_d |scale q_d|, the product, difference and scale add 3u, so
//    E8 = gamma(head_dim + 3) * max_p k_scale_p sum_d |scale q_d| (|c_pd| +
//    |z_p|), which can exceed S1 (cancellation) by up to 255 / max|c - z|.
//  * the AVX-512 VNNI path rounds each scaled query row to int16: steps of
//    a = scale * amax|q| / Qmax, Qmax = min(32767, floor((2^31 - 1) / (255 *
//    round_up(head_dim, 32)))) (kernels/sdpa_impl.h), and since its
//    zero-point correction uses the rounded row's exact sum, each score moves
//    by up to E_q16 = a / 2 * max_p sum_d |k'_pd| more.
//    eps_w8 = 2 (E8 + E_q16) + (4 (T + 2) + 64) u.
//  * the output sums w_p k_scale_p c_pd and, once per tile, w_p k_scale_p z_p
//    and subtracts: ctx + 2T + 2 roundings on terms of size w_p V8_d with
//    V8_d = max_p v_scale_p (|c_pd| + |z_p|) (<= 255 v_scale_p).
//  bound_round_int8_d = (2 eps_w8 + 4u) max_p |v'_pd|
//                       + 2 gamma(ctx + 2T + 2) V8_d.
// This is used for every path on the int8 cache; SIMD paths vs the scalar
// path: twice that (both err).
//
// int8 quantization (bound_quant). Each cached element errs by at most half
// a step, k_scale_p / 2 = (max_p - min_p) / 510 with the row's range widened
// to include 0, plus 2^-12 k_scale_p for the float rounding of the quantizer
// (quantize_test.cc derives it): h_p = k_scale_p (1/2 + 2^-12). So score p
// moves by at most
//   Delta_p = scale * sum_d |q_d| * h_p,  Delta = max_p Delta_p.
// Softmax weights then move by a factor within [e^-2Delta, e^2Delta]:
// |pi'_p - pi_p| <= pi_p (e^{2 Delta} - 1). Since sum_p (pi'_p - pi_p) = 0,
//   o'_d - o_d = sum_p (pi'_p - pi_p)(v_pd - o_d) + sum_p pi'_p (v'_pd - v_pd)
// so |o'_d - o_d| <= (e^{2 Delta} - 1) sum_p pi_p |v_pd - o_d|
//                     + e^{2 Delta} sum_p pi_p v_scale_p (1/2 + 2^-12),
// plus twice bound_round_int8 (float rounding on top, computed with the
// original K/V, whose magnitudes the dequantized ones exceed by < h_p).
// This worst case assumes every element's error lines up, so over a long,
// spread-out context it is larger than the outputs themselves. Hence also:
//
// int8 quantization, statistical (bound_stat). Rounding a continuous value
// leaves an error uniform on [-step/2, step/2], independent between elements:
// variance step^2 / 12. To first order in the score errors delta_p (the mean
// of delta drops out since sum_p pi_p (v_pd - o_d) = 0),
//   o'_d - o_d = sum_p pi_p delta_p (v_pd - o_d) + sum_p pi_p e_pd
// with Var(delta_p) = scale^2 sum_j q_j^2 k_scale_p^2 / 12 (+ a^2 sum_d
// k_pd^2 / 12 for the VNNI path's int16 query, step a as above) and
// Var(e_pd) = v_scale_p^2 / 12, so
//   sigma_d^2 = sum_p pi_p^2 [(v_pd - o_d)^2 Var(delta_p) + v_scale_p^2 / 12].
// bound_stat_d = 6 sigma_d + sum_p pi_p 9 Var(delta_p) |v_pd - o_d| (second
// order, at 3 sigma) + 2 bound_round_int8_d without its E_q16 (the int16
// query's rounding is already in Var(delta_p)). A Gaussian exceeds 6 sigma with
// probability 2e-9 per element; the data are fixed by seeds, so the test is
// deterministic. This is the int8 tolerance that catches bugs (wrong head,
// dropped tile: Sdpa.QuantizationBoundIsTightEnoughToCatchBugs); exact
// attention on the dequantized cache (bound_round_int8) catches arithmetic
// slips of any size above float rounding.

constexpr double kU = 1.0 / (1 << 24);
double gamma(double n) { return n * kU / (1 - n * kU); }
// A quantized element's largest error, in steps (see above).
constexpr double kHalfStep = 0.5 + 1.0 / 4096;

// The VNNI path's int16 query range (kernels/sdpa_impl.h).
double vnni_q_max(std::size_t head_dim) {
  const double limit = std::floor(2147483647.0 / (255.0 * ((head_dim + 31) / 32 * 32)));
  return std::min(limit, 32767.0);
}

struct Shape {
  std::size_t n_heads, n_kv_heads, head_dim, start_pos, n_tokens;
};

std::string describe(const Shape& s) {
  return "heads " + std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv_heads) + " hd " +
         std::to_string(s.head_dim) + " start " + std::to_string(s.start_pos) + " tokens " +
         std::to_string(s.n_tokens);
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;

// One problem: float K/V of every position and the queries, and both caches
// filled from them by kv_append. Cache slots past the context hold NaN (float)
// or NaN scales (int8, zero points -1), so reading a position that is not
// attended poisons the result.
struct Problem {
  Shape s;
  std::size_t ctx;  // positions attended by the last token
  float scale;
  std::vector<float> k, v;  // [ctx][n_kv_heads * head_dim]
  std::vector<float> q;     // [n_tokens][n_heads * head_dim]
  KvLayout layout;
  Buffer qmem, fmem;
  QuantizedKvView qkv;
  FloatKvView fkv;
};

std::unique_ptr<Problem> make_problem(const Shape& s, std::uint32_t seed, float q_mag = 1.5f) {
  auto p = std::make_unique<Problem>();
  p->s = s;
  p->ctx = s.start_pos + s.n_tokens;
  p->scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), f(0.5f, 1.5f);
  const std::size_t kv_width = s.n_kv_heads * s.head_dim;
  p->k.resize(p->ctx * kv_width);
  p->v.resize(p->ctx * kv_width);
  // Rows of different magnitudes, so per-row scales differ, and offsets: a
  // third of the rows are centred (zero points near 0), a third all >= 0 and
  // a third all <= 0 (zero points near -128 / 127, which the kernels must
  // subtract).
  for (auto* x : {&p->k, &p->v})
    for (std::size_t r = 0; r < p->ctx * s.n_kv_heads; ++r) {
      const float m = f(rng);
      const float offset = static_cast<float>(r % 3) - 1.0f;  // -1, 0, 1
      for (std::size_t d = 0; d < s.head_dim; ++d) (*x)[r * s.head_dim + d] = (u(rng) + offset) * m;
    }
  p->q.resize(s.n_tokens * s.n_heads * s.head_dim);
  for (float& x : p->q) x = u(rng) * q_mag;

  p->layout = {s.n_kv_heads, s.head_dim, p->ctx + 5};
  const std::size_t qb = quantized_kv_bytes(p->layout), fb = float_kv_bytes(p->layout);
  p->qmem.reset(static_cast<std::byte*>(std::aligned_alloc(64, (qb + 63) / 64 * 64)));
  p->fmem.reset(static_cast<std::byte*>(std::aligned_alloc(64, (fb + 63) / 64 * 64)));
  std::memset(p->qmem.get(), 0xff, qb);  // int8 -1, float NaN
  std::memset(p->fmem.get(), 0xff, fb);
  p->qkv = quantized_kv_view(p->layout, p->qmem.get());
  p->fkv = float_kv_view(p->layout, p->fmem.get());
  // The context, then the new tokens, as the engine appends them.
  const float* kt = p->k.data() + s.start_pos * kv_width;
  const float* vt = p->v.data() + s.start_pos * kv_width;
  EXPECT_TRUE(kv_append(p->qkv, 0, p->k.data(), p->v.data(), s.start_pos).ok());
  EXPECT_TRUE(kv_append(p->qkv, s.start_pos, kt, vt, s.n_tokens).ok());
  EXPECT_TRUE(kv_append(p->fkv, 0, p->k.data(), p->v.data(), s.start_pos).ok());
  EXPECT_TRUE(kv_append(p->fkv, s.start_pos, kt, vt, s.n_tokens).ok());
  return p;
}

// Exact attention (double, full softmax) and the tolerances above.
struct Reference {
  std::vector<double> out, bound_round, bound_round_int8, bound_quant, bound_stat;
};

// K/V: [ctx][n_kv_heads * head_dim]. quantized: also fill bound_quant and
// bound_stat, using the int8 cache's scales. bound_round_int8 uses the int8
// cache's codes and zero points when the problem has a cache (p.qkv.k).
Reference naive(const Problem& p, const std::vector<double>& K, const std::vector<double>& V,
                bool quantized) {
  const Shape& s = p.s;
  const std::size_t hd = s.head_dim, G = s.n_heads / s.n_kv_heads, kvw = s.n_kv_heads * hd;
  const bool cache = p.qkv.k != nullptr;
  const std::size_t max_seq = p.layout.max_seq;
  const auto k_scale = [&](std::size_t g, std::size_t j) -> double {
    return p.qkv.k_scale[g * max_seq + j];
  };
  const auto v_scale = [&](std::size_t g, std::size_t j) -> double {
    return p.qkv.v_scale[g * max_seq + j];
  };
  Reference r;
  const std::size_t n = s.n_tokens * s.n_heads * hd;
  r.out.assign(n, 0.0);
  r.bound_round.assign(n, 0.0);
  r.bound_round_int8.assign(n, 0.0);
  r.bound_quant.assign(n, 0.0);
  r.bound_stat.assign(n, 0.0);
  for (std::size_t t = 0; t < s.n_tokens; ++t) {
    const std::size_t len = s.start_pos + t + 1;
    for (std::size_t h = 0; h < s.n_heads; ++h) {
      const std::size_t g = h / G;
      const float* q = &p.q[(t * s.n_heads + h) * hd];
      std::vector<double> sc(len);
      double mx = -INFINITY, s1 = 0, s1_8 = 0, q1 = 0, q2 = 0, qmax = 0, k1 = 0, delta = 0;
      std::vector<double> var_delta(len);
      for (std::size_t d = 0; d < hd; ++d) {
        q1 += std::fabs(static_cast<double>(q[d]));
        q2 += static_cast<double>(q[d]) * q[d];
        qmax = std::max(qmax, std::fabs(static_cast<double>(q[d])));
      }
      // Step of the VNNI path's int16 query row.
      const double a = p.scale * qmax / vnni_q_max(hd) * (1 + 1e-5);
      for (std::size_t j = 0; j < len; ++j) {
        double dot = 0, abs_dot = 0, abs_k = 0, k2 = 0;
        for (std::size_t d = 0; d < hd; ++d) {
          dot += q[d] * K[j * kvw + g * hd + d];
          abs_dot += std::fabs(q[d] * K[j * kvw + g * hd + d]);
          abs_k += std::fabs(K[j * kvw + g * hd + d]);
        }
        if (quantized) {  // the dequantized row's magnitudes: up to h_j more
          const double h_j = k_scale(g, j) * kHalfStep;
          for (std::size_t d = 0; d < hd; ++d)
            k2 += std::pow(std::fabs(K[j * kvw + g * hd + d]) + h_j, 2);
          abs_k += static_cast<double>(hd) * h_j;
          delta = std::max(delta, p.scale * q1 * h_j);
          var_delta[j] = (p.scale * p.scale * q2 * k_scale(g, j) * k_scale(g, j) + a * a * k2) / 12;
        }
        if (cache) {  // the int8 kernels' sums: codes and zero point apart
          const std::int8_t* c = &p.qkv.k[(g * max_seq + j) * hd];
          const double z = std::fabs(static_cast<double>(p.qkv.k_zero[g * max_seq + j]));
          double sum = 0;
          for (std::size_t d = 0; d < hd; ++d)
            sum += std::fabs(static_cast<double>(q[d])) * (std::abs(c[d]) + z);
          s1_8 = std::max(s1_8, p.scale * k_scale(g, j) * sum);
        }
        k1 = std::max(k1, abs_k);
        sc[j] = dot * p.scale;
        mx = std::max(mx, sc[j]);
        s1 = std::max(s1, abs_dot * p.scale);
      }
      double sum = 0;
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (double& x : sc) x /= sum;  // now pi_p
      const double tiles = std::ceil(static_cast<double>(len) / 128.0);
      const double exps = (4 * (tiles + 2) + 64) * kU;
      const double eps_w = 2 * gamma(static_cast<double>(hd) + 2) * s1 + exps;
      const double e_q16 = a / 2 * k1;
      const double eps_w8 = 2 * (gamma(static_cast<double>(hd) + 3) * s1_8 + e_q16) + exps;
      const double eps_w8_float = eps_w8 - 2 * e_q16;  // float rounding only
      const double grow = std::exp(2 * delta) - 1;
      for (std::size_t d = 0; d < hd; ++d) {
        // vmax8: max |v'|, the dequantized values' (up to a half step more
        // than the float ones when V is the original).
        double o = 0, vmax = 0, vmax8 = 0, v8 = 0;
        for (std::size_t j = 0; j < len; ++j) {
          o += sc[j] * V[j * kvw + g * hd + d];
          vmax = std::max(vmax, std::fabs(V[j * kvw + g * hd + d]));
          vmax8 = std::max(vmax8, std::fabs(V[j * kvw + g * hd + d]) +
                                      (quantized ? v_scale(g, j) * kHalfStep : 0.0));
          if (cache) {
            const std::size_t row = g * max_seq + j;
            v8 = std::max(v8, v_scale(g, j) * (std::abs(p.qkv.v[row * hd + d]) +
                                               std::abs(static_cast<int>(p.qkv.v_zero[row]))));
          }
        }
        const std::size_t i = (t * s.n_heads + h) * hd + d;
        r.out[i] = o;
        r.bound_round[i] = (2 * eps_w + 2 * gamma(static_cast<double>(len)) + 4 * kU) * vmax;
        r.bound_round_int8[i] = (2 * eps_w8 + 4 * kU) * vmax8 +
                                2 * gamma(static_cast<double>(len) + 2 * tiles + 2) * v8;
        if (quantized) {
          double mad = 0, vstep = 0, var = 0, second = 0;
          for (std::size_t j = 0; j < len; ++j) {
            const double dev = std::fabs(V[j * kvw + g * hd + d] - o);
            const double vs = v_scale(g, j);
            mad += sc[j] * dev;
            vstep += sc[j] * vs * kHalfStep;
            var += sc[j] * sc[j] * (dev * dev * var_delta[j] + vs * vs / 12);
            second += sc[j] * 9 * var_delta[j] * dev;
          }
          r.bound_quant[i] = grow * mad + (grow + 1) * vstep + 2 * r.bound_round_int8[i];
          // The int16 query's rounding is in var_delta, so only float
          // rounding is added on top.
          const double round_int8_float = (2 * eps_w8_float + 4 * kU) * vmax8 +
                                          2 * gamma(static_cast<double>(len) + 2 * tiles + 2) * v8;
          r.bound_stat[i] = 6 * std::sqrt(var) + second + 2 * round_int8_float;
        }
      }
    }
  }
  return r;
}

std::vector<double> to_double(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// The int8 cache dequantized, in the [ctx][n_kv_heads * head_dim] layout.
void dequantized(const Problem& p, std::vector<double>* K, std::vector<double>* V) {
  const std::size_t hd = p.s.head_dim, kvw = p.s.n_kv_heads * hd;
  K->assign(p.ctx * kvw, 0);
  V->assign(p.ctx * kvw, 0);
  for (std::size_t j = 0; j < p.ctx; ++j)
    for (std::size_t g = 0; g < p.s.n_kv_heads; ++g) {
      const std::size_t row = g * p.layout.max_seq + j;
      for (std::size_t d = 0; d < hd; ++d) {
        (*K)[j * kvw + g * hd + d] =
            static_cast<double>(p.qkv.k_scale[row]) * (p.qkv.k[row * hd + d] - p.qkv.k_zero[row]);
        (*V)[j * kvw + g * hd + d] =
            static_cast<double>(p.qkv.v_scale[row]) * (p.qkv.v[row * hd + d] - p.qkv.v_zero[row]);
      }
    }
}

std::vector<float> run(const Problem& p, bool quantized, ThreadPool* pool) {
  CachingAllocator scratch;
  std::vector<float> out(p.q.size(), NAN);
  const absl::Status st = quantized ? sdpa(p.q.data(), p.s.n_tokens, p.s.start_pos, p.s.n_heads,
                                           p.qkv, p.scale, out.data(), scratch, pool)
                                    : sdpa(p.q.data(), p.s.n_tokens, p.s.start_pos, p.s.n_heads,
                                           p.fkv, p.scale, out.data(), scratch, pool);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// Largest error / bound seen per check, printed by the main test.
std::map<std::string, double>& worst_ratio() {
  static std::map<std::string, double> m;
  return m;
}

// Every element within its bound (times `factor`); reports the first miss.
void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  const std::vector<double>& bound, double factor, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;  // largest error / bound seen
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= bound[i] * factor)) {
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i]
                    << " err " << err << " bound " << bound[i] * factor;
      return;
    }
    worst = std::max(worst, err / (bound[i] * factor));
  }
  double& w = worst_ratio()[what];
  w = std::max(w, worst);
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<double>& bound, double factor, const std::string& what) {
  expect_close(got, to_double(want), bound, factor, what);
}

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  // (context, n_tokens): decode at contexts 1, 31, 513 (513 = 4 tiles + 1);
  // prefill chunks of 7 and 64 tokens with start_pos > 0 and a whole 31-token
  // prompt.
  const std::size_t ctx_tokens[][2] = {{1, 1},   {31, 1},  {31, 7},  {31, 31},
                                       {513, 1}, {513, 7}, {513, 64}};
  // One head; 8 query heads on 2 KV heads.
  const std::size_t heads[][2] = {{1, 1}, {8, 2}};
  // 8: AVX2 on every SIMD level; 13: scalar on every level; 64, 128: the
  // usual; 80: AVX-512 with a partial register block.
  for (std::size_t hd : {8, 13, 64, 128, 80})
    for (const auto& h : heads)
      for (const auto& ct : ctx_tokens) {
        if ((hd == 80 || hd == 13) && ct[0] == 513 && ct[1] == 64) continue;  // keep the run short
        out.push_back({h[0], h[1], hd, ct[0] - ct[1], ct[1]});
      }
  out.push_back({6, 3, 24, 40, 5});   // AVX2 under AVX-512; G = 2
  out.push_back({4, 4, 64, 100, 3});  // no grouping
  out.push_back({16, 1, 32, 60, 9});  // G = 16: several row blocks per query block
  out.push_back({4, 2, 16, 30, 3});   // head_dim 16: VNNI's half-register tail only
  out.push_back({2, 1, 512, 40, 2});  // the largest head_dim on the VNNI path
  out.push_back({2, 1, 528, 20, 2});  // beyond it: AVX-512 float scores
  return out;
}

TEST(Sdpa, EveryPathMatchesExactAttentionAndTheScalarReference) {
  std::uint32_t seed = 1;
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(describe(s));
    const auto p = make_problem(s, seed++);
    std::vector<double> Kd, Vd;
    dequantized(*p, &Kd, &Vd);
    const Reference on_float = naive(*p, to_double(p->k), to_double(p->v), true);
    const Reference on_deq = naive(*p, Kd, Vd, false);
    std::vector<float> scalar_q8, scalar_f32;
    for (Isa isa : supported_isas()) {
      SCOPED_TRACE(isa_name(isa));
      ScopedIsa forced(isa);
      const std::vector<float> q8 = run(*p, true, nullptr);
      const std::vector<float> f32 = run(*p, false, nullptr);
      expect_close(q8, on_deq.out, on_deq.bound_round_int8, 1, "int8 vs exact on dequantized");
      expect_close(q8, on_float.out, on_float.bound_quant, 1,
                   "int8 vs exact on float K/V, worst case");
      expect_close(q8, on_float.out, on_float.bound_stat, 1, "int8 vs exact on float K/V, 6 sigma");
      expect_close(f32, on_float.out, on_float.bound_round, 1, "float vs exact");
      if (isa == Isa::kScalar) {
        scalar_q8 = q8;
        scalar_f32 = f32;
      } else {
        expect_close(q8, scalar_q8, on_deq.bound_round_int8, 2, "int8 vs scalar path");
        expect_close(f32, scalar_f32, on_float.bound_round, 2, "float vs scalar path");
      }
    }
  }
  for (const auto& [what, ratio] : worst_ratio())
    std::printf("largest error / bound, %s: %.3g\n", what.c_str(), ratio);
}

// The statistical int8 bound must catch gross bugs that the worst-case one
// cannot (over a long context the worst case exceeds the outputs). On a decode
// over 513 positions, compare it with what two plausible bugs would produce:
// using the wrong KV head, and dropping the last tiles (positions 384..512).
TEST(Sdpa, QuantizationBoundIsTightEnoughToCatchBugs) {
  const Shape s{8, 2, 128, 512, 1};
  const auto p = make_problem(s, 99);
  const Reference r = naive(*p, to_double(p->k), to_double(p->v), true);
  // Wrong head: swap the two KV heads' data.
  std::vector<double> Ks = to_double(p->k), Vs = to_double(p->v);
  for (std::size_t j = 0; j < 513; ++j)
    for (std::size_t d = 0; d < 128; ++d) {
      std::swap(Ks[j * 256 + d], Ks[j * 256 + 128 + d]);
      std::swap(Vs[j * 256 + d], Vs[j * 256 + 128 + d]);
    }
  const Reference wrong_head = naive(*p, Ks, Vs, false);
  // Dropped tiles: attention over positions 0..383 only.
  Problem truncated_shape = {};
  truncated_shape.s = {8, 2, 128, 383, 1};
  truncated_shape.ctx = 384;
  truncated_shape.scale = p->scale;
  truncated_shape.q = p->q;
  const Reference dropped = naive(truncated_shape, to_double(p->k), to_double(p->v), false);
  double bound = 0, worst_case = 0, out = 0;
  std::size_t caught_head = 0, caught_tile = 0;
  for (std::size_t i = 0; i < r.out.size(); ++i) {
    bound += r.bound_stat[i];
    worst_case += r.bound_quant[i];
    out += std::fabs(r.out[i]);
    caught_head += std::fabs(wrong_head.out[i] - r.out[i]) > r.bound_stat[i];
    caught_tile += std::fabs(dropped.out[i] - r.out[i]) > r.bound_stat[i];
  }
  std::printf(
      "mean |out| %.4g; mean int8 bound: 6 sigma %.4g, worst case %.4g; caught by the 6 sigma "
      "bound: wrong head %zu, dropped tile %zu of %zu\n",
      out / r.out.size(), bound / r.out.size(), worst_case / r.out.size(), caught_head, caught_tile,
      r.out.size());
  EXPECT_GT(caught_head, r.out.size() * 3 / 4);
  EXPECT_GT(caught_tile, r.out.size() * 3 / 4);
}

TEST(Sdpa, ThreadedRunsAndSplitsMatchTheSingleThreadedResult) {
  // Shapes with fewer (kv head x query block) items than threads take the
  // split-and-merge path; the rest split over heads and query blocks only.
  const std::vector<Shape> cases = {
      {8, 1, 64, 512, 1},    // decode, one KV head: split across threads
      {8, 1, 64, 506, 7},    // prefill chunk, one item: split, with the causal mask
      {8, 2, 128, 1000, 1},  // decode, 2 items
      {8, 2, 64, 449, 64},   // prefill: 16 query blocks
      {1, 1, 128, 600, 1},   // one head
  };
  ThreadPool two(2), three(3);
  std::uint32_t seed = 100;
  for (const Shape& s : cases) {
    SCOPED_TRACE(describe(s));
    const auto p = make_problem(s, seed++);
    std::vector<double> Kd, Vd;
    dequantized(*p, &Kd, &Vd);
    const Reference on_deq = naive(*p, Kd, Vd, false);
    const Reference on_float = naive(*p, to_double(p->k), to_double(p->v), false);
    const std::vector<float> single_q8 = run(*p, true, nullptr);
    const std::vector<float> single_f32 = run(*p, false, nullptr);
    for (ThreadPool* pool : {&two, &three}) {
      SCOPED_TRACE(pool->threads());
      const std::vector<float> q8 = run(*p, true, pool);
      const std::vector<float> f32 = run(*p, false, pool);
      expect_close(q8, on_deq.out, on_deq.bound_round_int8, 1, "threaded int8 vs exact");
      expect_close(f32, on_float.out, on_float.bound_round, 1, "threaded float vs exact");
      expect_close(q8, single_q8, on_deq.bound_round_int8, 2, "threaded int8 vs single");
      expect_close(f32, single_f32, on_float.bound_round, 2, "threaded float vs single");
    }
  }
}

TEST(Sdpa, OutputMayBeTheQueryArray) {
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), new ThreadPool(2)}) {
    for (const Shape& s :
         {Shape{8, 2, 64, 300, 1}, Shape{8, 1, 64, 300, 9}, Shape{4, 2, 32, 0, 70}}) {
      const auto p = make_problem(s, 7);
      const std::vector<float> want = run(*p, true, pool);
      std::vector<float> inplace = p->q;
      CachingAllocator scratch;
      ASSERT_TRUE(sdpa(inplace.data(), s.n_tokens, s.start_pos, s.n_heads, p->qkv, p->scale,
                       inplace.data(), scratch, pool)
                      .ok());
      EXPECT_EQ(inplace, want) << describe(s);
    }
    delete pool;
  }
}

TEST(Sdpa, ValidatesArgumentsNamingTheField) {
  const auto p = make_problem({8, 2, 16, 4, 2}, 3);
  CachingAllocator scratch;
  std::vector<float> out(p->q.size());
  const auto call = [&](const float* q, std::size_t n_tokens, std::size_t start, std::size_t heads,
                        const QuantizedKvView& kv, float scale, float* o) {
    return sdpa(q, n_tokens, start, heads, kv, scale, o, scratch, nullptr);
  };
  const auto expect_invalid = [](const absl::Status& s, const char* field) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(field), std::string::npos) << s << " should name " << field;
  };
  expect_invalid(call(p->q.data(), 2, 4, 7, p->qkv, p->scale, out.data()), "n_heads 7");
  expect_invalid(call(p->q.data(), 2, 4, 0, p->qkv, p->scale, out.data()), "n_heads");
  expect_invalid(call(p->q.data(), 3, p->layout.max_seq - 2, 8, p->qkv, p->scale, out.data()),
                 "max_seq");
  expect_invalid(call(p->q.data(), 1, SIZE_MAX, 8, p->qkv, p->scale, out.data()), "start_pos");
  expect_invalid(call(nullptr, 2, 4, 8, p->qkv, p->scale, out.data()), "q");
  expect_invalid(call(p->q.data(), 2, 4, 8, p->qkv, p->scale, nullptr), "out");
  expect_invalid(call(p->q.data(), 2, 4, 8, p->qkv, NAN, out.data()), "scale");
  QuantizedKvView broken = p->qkv;
  broken.k_scale = nullptr;
  expect_invalid(call(p->q.data(), 2, 4, 8, broken, p->scale, out.data()), "kv");
  broken = p->qkv;
  broken.layout.n_kv_heads = 0;
  expect_invalid(call(p->q.data(), 2, 4, 8, broken, p->scale, out.data()), "n_kv_heads");
  FloatKvView fbroken = p->fkv;
  fbroken.v = nullptr;
  expect_invalid(sdpa(p->q.data(), 2, 4, 8, fbroken, p->scale, out.data(), scratch, nullptr), "kv");
  // n_tokens = 0 is a no-op, even at the end of the cache.
  EXPECT_TRUE(call(nullptr, 0, p->layout.max_seq, 8, p->qkv, p->scale, nullptr).ok());
}

class FailingAllocator final : public MemoryAllocator {
 public:
  void* allocate(std::size_t, std::size_t) noexcept override { return nullptr; }
  void reset() noexcept override {}
};

TEST(Sdpa, ScratchFailureIsResourceExhausted) {
  const auto p = make_problem({8, 2, 16, 4, 2}, 4);
  FailingAllocator failing;
  std::vector<float> out(p->q.size());
  const absl::Status s = sdpa(p->q.data(), 2, 4, 8, p->qkv, p->scale, out.data(), failing, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("scratch"), std::string::npos) << s;
}

TEST(Sdpa, MakesNoHeapAllocationAfterWarmUp) {
  ThreadPool pool(2);
  // Decode and a prefill chunk, both large enough to run on the pool.
  for (const Shape& s :
       {Shape{32, 8, 128, 700, 1}, Shape{8, 2, 64, 200, 64}, Shape{8, 1, 64, 800, 1}}) {
    const auto p = make_problem(s, 5);
    std::vector<float> out(p->q.size());
    for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
      for (bool quantized : {true, false}) {
        CachingAllocator scratch;
        const auto call = [&] {
          return quantized ? sdpa(p->q.data(), s.n_tokens, s.start_pos, s.n_heads, p->qkv, p->scale,
                                  out.data(), scratch, tp)
                           : sdpa(p->q.data(), s.n_tokens, s.start_pos, s.n_heads, p->fkv, p->scale,
                                  out.data(), scratch, tp);
        };
        ASSERT_TRUE(call().ok());  // warm-up fills the cache
        scratch.reset();
        hearth::testing::HeapCounter counter;
        const absl::Status st = call();
        EXPECT_EQ(counter.allocations(), 0u)
            << describe(s) << (tp ? " threaded" : " single") << (quantized ? " int8" : " float");
        EXPECT_TRUE(st.ok()) << st;
        scratch.reset();
      }
    }
  }
}

TEST(Sdpa, ScratchDoesNotGrowWithTheContext) {
  ThreadPool pool(2);
  const std::size_t hd = 64;
  const KvLayout layout{2, hd, 4096};
  Buffer mem(static_cast<std::byte*>(std::aligned_alloc(64, quantized_kv_bytes(layout))));
  const QuantizedKvView kv = quantized_kv_view(layout, mem.get());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> rows(4096 * 2 * hd);
  for (float& x : rows) x = u(rng);
  ASSERT_TRUE(kv_append(kv, 0, rows.data(), rows.data(), 4096).ok());
  for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (std::size_t n_tokens : {1, 64}) {
      for (std::size_t n_heads : {8, 2}) {  // 2 heads on 2 KV heads: split when threaded
        std::vector<float> q(n_tokens * n_heads * hd, 0.5f), out(q.size());
        std::uint64_t peak[2];
        int i = 0;
        for (std::size_t ctx : {128, 4096}) {
          CachingAllocator scratch;
          ASSERT_TRUE(
              sdpa(q.data(), n_tokens, ctx - n_tokens, n_heads, kv, 0.125f, out.data(), scratch, tp)
                  .ok());
          scratch.reset();
          peak[i++] = scratch.stats().peak_bytes;
        }
        EXPECT_EQ(peak[0], peak[1])
            << "tokens " << n_tokens << " heads " << n_heads << (tp ? " threaded" : " single");
      }
    }
  }
}

// sdpa_scratch_bytes is what a call on the calling thread takes: that much
// (from a 64-byte aligned buffer) is enough, for odd shapes and both caches,
// and it is not loose: 65 bytes less, alignment slack and one byte, fails.
TEST(Sdpa, SerialScratchIsWhatSdpaScratchBytesSays) {
  for (const Shape& s : {Shape{1, 1, 8, 3, 1}, Shape{6, 2, 24, 40, 1}, Shape{32, 4, 64, 90, 1},
                         Shape{12, 3, 40, 17, 23}, Shape{128, 1, 16, 5, 2}}) {
    const auto p = make_problem(s, 21);
    std::vector<float> out(p->q.size());
    const std::size_t bytes = sdpa_scratch_bytes(s.n_tokens, s.n_heads, s.n_kv_heads, s.head_dim);
    Buffer mem(static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    for (bool quantized : {true, false}) {
      for (std::size_t size : {bytes, bytes - 65}) {
        ArenaAllocator scratch(mem.get(), size);
        const absl::Status st = quantized ? sdpa(p->q.data(), s.n_tokens, s.start_pos, s.n_heads,
                                                 p->qkv, p->scale, out.data(), scratch, nullptr)
                                          : sdpa(p->q.data(), s.n_tokens, s.start_pos, s.n_heads,
                                                 p->fkv, p->scale, out.data(), scratch, nullptr);
        const std::string what = describe(s) + (quantized ? " int8" : " float") + " with " +
                                 std::to_string(size) + " of " + std::to_string(bytes) + " bytes";
        if (size == bytes) {
          EXPECT_TRUE(st.ok()) << what << ": " << st;
        } else {
          EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << what << ": " << st;
        }
      }
    }
  }
}

// ---- Sliding window and soft-capping ----------------------------------------

// Exact attention (double) with a window and soft-capping: token t at
// position start_pos + t sees positions (pos - window, pos]; each scaled
// score s becomes cap * tanh(s / cap).
std::vector<double> naive_masked(const Problem& p, const std::vector<double>& K,
                                 const std::vector<double>& V, const AttentionOptions& o) {
  const Shape& s = p.s;
  const std::size_t hd = s.head_dim, G = s.n_heads / s.n_kv_heads, kvw = s.n_kv_heads * hd;
  std::vector<double> out(s.n_tokens * s.n_heads * hd, 0.0);
  for (std::size_t t = 0; t < s.n_tokens; ++t) {
    const std::size_t pos = s.start_pos + t;
    const std::size_t lo = o.window != 0 && pos >= o.window ? pos - o.window + 1 : 0;
    for (std::size_t h = 0; h < s.n_heads; ++h) {
      const std::size_t g = h / G;
      const float* q = &p.q[(t * s.n_heads + h) * hd];
      std::vector<double> w(pos + 1, 0.0);
      double mx = -INFINITY, sum = 0;
      for (std::size_t j = lo; j <= pos; ++j) {
        double dot = 0;
        for (std::size_t d = 0; d < hd; ++d) dot += q[d] * K[j * kvw + g * hd + d];
        w[j] = dot * p.scale;
        if (o.softcap > 0) w[j] = o.softcap * std::tanh(w[j] / o.softcap);
        mx = std::max(mx, w[j]);
      }
      for (std::size_t j = lo; j <= pos; ++j) sum += (w[j] = std::exp(w[j] - mx));
      double* o_row = &out[(t * s.n_heads + h) * hd];
      for (std::size_t j = lo; j <= pos; ++j)
        for (std::size_t d = 0; d < hd; ++d) o_row[d] += w[j] / sum * V[j * kvw + g * hd + d];
    }
  }
  return out;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::fabs(v));
  return m;
}

// Every path, alone and threaded (the split-and-merge path included), on
// windows that end inside a query block, cut tiles, skip whole tiles, and see
// the query's own position only; with and without soft-capping. Tolerance:
// float rounding of scores and weights over at most a few hundred positions
// stays far below 1e-5 of the largest value (the exact-attention test above
// derives the bounds); int8 is compared with exact attention on the
// dequantized cache, so the cache's quantization does not enter, but the
// AVX-512 VNNI path's int16 query does (a step of 1/32767 of each row's
// largest element, ~3e-5 of the outputs here): 3e-4. A mask off by one
// position, or a cap not applied, moves outputs by ~1e-2 or more (checked).
TEST(Sdpa, SlidingWindowAndSoftcapMatchExactAttention) {
  struct Case {
    Shape shape;
    AttentionOptions options;
  };
  const std::vector<Case> cases = {
      {{4, 2, 32, 39, 1}, {8, 0.0f}},      // decode: 8 of 40 positions
      {{4, 2, 32, 31, 9}, {5, 0.0f}},      // prefill chunk, each row its own window
      {{8, 1, 64, 299, 1}, {200, 0.0f}},   // decode: first tile skipped, split
      {{6, 3, 24, 150, 70}, {129, 0.0f}},  // windows crossing tiles, AVX2 under AVX-512
      {{2, 1, 13, 19, 5}, {1, 0.0f}},      // only the own position; scalar head_dim
      {{8, 2, 64, 60, 12}, {0, 5.0f}},     // soft-capping alone
      {{8, 2, 32, 200, 3}, {64, 3.0f}},    // both
  };
  ThreadPool two(2), three(3);
  std::uint32_t seed = 500;
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c.shape) + " window " + std::to_string(c.options.window) + " softcap " +
                 std::to_string(c.options.softcap));
    const auto p = make_problem(c.shape, seed++, /*q_mag=*/4.0f);
    std::vector<double> Kd, Vd;
    dequantized(*p, &Kd, &Vd);
    const std::vector<double> want_f32 =
        naive_masked(*p, to_double(p->k), to_double(p->v), c.options);
    const std::vector<double> want_q8 = naive_masked(*p, Kd, Vd, c.options);
    const double tol = 1e-5 * max_abs(want_f32), tol_q8 = 3e-4 * max_abs(want_q8);
    // The same problem without the options differs: the test can fail.
    const std::vector<double> unmasked = naive_masked(*p, to_double(p->k), to_double(p->v), {});
    double moved = 0;
    for (std::size_t i = 0; i < unmasked.size(); ++i)
      moved = std::max(moved, std::fabs(unmasked[i] - want_f32[i]));
    EXPECT_GT(moved, 10 * tol_q8);
    for (Isa isa : supported_isas()) {
      ScopedIsa forced(isa);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two, &three}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " threads " +
                     std::to_string(pool ? pool->threads() : 1));
        for (bool q8 : {false, true}) {
          CachingAllocator scratch;
          std::vector<float> out(p->q.size(), NAN);
          const Shape& s = c.shape;
          const absl::Status st = q8 ? sdpa(p->q.data(), s.n_tokens, s.start_pos, s.n_heads, p->qkv,
                                            p->scale, out.data(), scratch, pool, c.options)
                                     : sdpa(p->q.data(), s.n_tokens, s.start_pos, s.n_heads, p->fkv,
                                            p->scale, out.data(), scratch, pool, c.options);
          ASSERT_TRUE(st.ok()) << st;
          const std::vector<double>& want = q8 ? want_q8 : want_f32;
          for (std::size_t i = 0; i < out.size(); ++i)
            ASSERT_NEAR(out[i], want[i], q8 ? tol_q8 : tol)
                << (q8 ? "int8" : "float") << " element " << i;
        }
      }
    }
  }
}

// With a window, a query's result does not depend on the chunk it came in:
// the last row of a 7-token chunk at 294 and the same query alone at 300
// (window 200: their first visible positions differ) give the same bits, on
// one thread (tiles at fixed positions; a threaded split of positions is
// not covered by this).
TEST(Sdpa, AWindowedRowGivesTheSameBitsInAnyChunk) {
  const Shape chunk{4, 2, 32, 294, 7};
  const auto p = make_problem(chunk, 71, /*q_mag=*/4.0f);
  const AttentionOptions window{200, 0.0f};
  const std::size_t row = chunk.n_heads * chunk.head_dim;
  for (Isa isa : supported_isas()) {
    ScopedIsa forced(isa);
    for (bool q8 : {false, true}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + (q8 ? " int8" : " float"));
      CachingAllocator scratch;
      std::vector<float> whole(p->q.size()), alone(row);
      const float* last_q = p->q.data() + 6 * row;
      const absl::Status a = q8 ? sdpa(p->q.data(), 7, 294, 4, p->qkv, p->scale, whole.data(),
                                       scratch, nullptr, window)
                                : sdpa(p->q.data(), 7, 294, 4, p->fkv, p->scale, whole.data(),
                                       scratch, nullptr, window);
      const absl::Status b =
          q8 ? sdpa(last_q, 1, 300, 4, p->qkv, p->scale, alone.data(), scratch, nullptr, window)
             : sdpa(last_q, 1, 300, 4, p->fkv, p->scale, alone.data(), scratch, nullptr, window);
      ASSERT_TRUE(a.ok()) << a;
      ASSERT_TRUE(b.ok()) << b;
      for (std::size_t i = 0; i < row; ++i)
        ASSERT_EQ(whole[6 * row + i], alone[i]) << "element " << i;
    }
  }
}

TEST(Sdpa, RefusesANegativeOrNonFiniteSoftcap) {
  const auto p = make_problem({2, 1, 16, 3, 1}, 7);
  CachingAllocator scratch;
  std::vector<float> out(p->q.size());
  for (float cap : {-1.0f, NAN, INFINITY}) {
    const absl::Status st =
        sdpa(p->q.data(), 1, 3, 2, p->fkv, p->scale, out.data(), scratch, nullptr, {0, cap});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("softcap"), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace hearth::kernels
