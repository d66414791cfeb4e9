// Scalar reference paths of the activation operations, and the dispatchers that
// check nothing (hot paths with documented preconditions), split work across
// the pool and call the table for active_isa().
#include "kernels/activation_ops.h"

#include <cmath>
#include <cstring>

#include "kernels/activation_ops_impl.h"
#include "kernels/cpu_features.h"
#include "kernels/fp16.h"

namespace hearth::kernels {
namespace internal {
namespace {

// Sums in 8 interleaved partial sums (element i into partial i mod 8), then
// pairwise: the order the header's error bounds assume.
struct Partials8 {
  float acc[8] = {};
  float total() const {
    float s[4], t[2];
    for (int j = 0; j < 4; ++j) s[j] = acc[j] + acc[j + 4];
    for (int j = 0; j < 2; ++j) t[j] = s[j] + s[j + 2];
    return t[0] + t[1];
  }
};

void rms_norm_row_scalar(const float* x, const float* w, std::size_t dim, float eps, float* y) {
  Partials8 p;
  for (std::size_t i = 0; i < dim; ++i) p.acc[i % 8] += x[i] * x[i];
  const float mean = p.total() / static_cast<float>(dim);
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (w == nullptr) {
    for (std::size_t i = 0; i < dim; ++i) y[i] = x[i] * scale;
  } else {
    for (std::size_t i = 0; i < dim; ++i) y[i] = (x[i] * scale) * w[i];
  }
}

void swiglu_scalar(const float* gate, const float* up, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

// gelu(g) = 0.5 g (1 + tanh(u)) = g / (1 + exp(-2u)),  u = sqrt(2/pi) (g + 0.044715 g^3)
void geglu_scalar(const float* gate, const float* up, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float z = kGeluTwiceSqrt2OverPi * (g + kGeluCubic * g * g * g);
    out[i] = g / (1.0f + std::exp(-z)) * up[i];
  }
}

void softcap_scalar(float* x, std::size_t n, float cap) {
  for (std::size_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void softmax_row_scalar(float* x, std::size_t n) {
  float max = x[0];
  for (std::size_t i = 1; i < n; ++i) max = x[i] > max ? x[i] : max;
  Partials8 p;
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    p.acc[i % 8] += x[i];
  }
  const float inv = 1.0f / p.total();
  for (std::size_t i = 0; i < n; ++i) x[i] *= inv;
}

void exp_scalar(const float* x, std::size_t n, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

void add_scalar(float* y, const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

void scale_scalar(float* y, float s, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] *= s;
}

// As ggml's rotate_pairs: two products, then one subtraction / addition.
void rope_normal_scalar(float* x, std::size_t n_heads, std::size_t head_stride, const float* cs,
                        const float* sn, std::size_t n_pairs) {
  for (std::size_t h = 0; h < n_heads; ++h, x += head_stride) {
    for (std::size_t i = 0; i < n_pairs; ++i) {
      const float a = x[2 * i], b = x[2 * i + 1];
      x[2 * i] = a * cs[i] - b * sn[i];
      x[2 * i + 1] = a * sn[i] + b * cs[i];
    }
  }
}

void rope_neox_scalar(float* x, std::size_t n_heads, std::size_t head_stride, std::size_t half,
                      const float* cs, const float* sn, std::size_t n_pairs) {
  for (std::size_t h = 0; h < n_heads; ++h, x += head_stride) {
    for (std::size_t i = 0; i < n_pairs; ++i) {
      const float a = x[i], b = x[i + half];
      x[i] = a * cs[i] - b * sn[i];
      x[i + half] = a * sn[i] + b * cs[i];
    }
  }
}

void dequant_q8_0_scalar(const BlockQ8_0* in, float* y, std::size_t n) {
  dequantize_row_q8_0(in, y, n);
}

void dequant_q4_0_scalar(const BlockQ4_0* in, float* y, std::size_t n) {
  dequantize_row_q4_0(in, y, n);
}

void dequant_f16_scalar(const std::uint16_t* in, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = fp16_to_f32(in[i]);
}

void dequant_bf16_scalar(const std::uint16_t* in, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = bf16_to_f32(in[i]);
}

}  // namespace

const ActivationOpsKernels kActivationOpsScalar = {
    rms_norm_row_scalar, swiglu_scalar,       geglu_scalar,        softcap_scalar,
    softmax_row_scalar,  exp_scalar,          add_scalar,          scale_scalar,
    rope_normal_scalar,  rope_neox_scalar,    dequant_q8_0_scalar, dequant_q4_0_scalar,
    dequant_f16_scalar,  dequant_bf16_scalar,
};

const ActivationOpsKernels& activation_ops_kernels() {
  // AVX-512 VNNI has nothing of its own here: it uses the AVX-512 table.
  static constexpr PerIsaTables<ActivationOpsKernels> kTables{
      &kActivationOpsScalar, HEARTH_SIMD_TABLE(kActivationOpsAvx2),
      HEARTH_SIMD_TABLE(kActivationOpsAvx512), nullptr};
  return kTables.active();
}

}  // namespace internal

namespace {

using internal::ActivationOpsKernels;

// Calls fn(begin, end) over [0, rows), split across `pool` when the call has
// enough work (rows * row_elements elements) to pay for the hand-off; each
// chunk then has at least kActivationOpsParallelMinElements elements.
template <typename F>
void for_rows(ThreadPool* pool, std::size_t rows, std::size_t row_elements, F&& fn) {
  if (rows == 0) return;
  const std::size_t total = rows * row_elements;
  if (pool == nullptr || pool->threads() <= 1 || rows < 2 ||
      total < kActivationOpsParallelMinElements) {
    fn(std::size_t{0}, rows);
    return;
  }
  const std::size_t grain =
      row_elements == 0 ? rows
                        : (kActivationOpsParallelMinElements + row_elements - 1) / row_elements;
  pool->parallel_for(rows, grain, fn);
}

// Calls fn(begin, end) over element runs of [0, n); split runs start on a
// 64-byte multiple of the arrays' start so threads do not share cache lines.
template <typename F>
void for_elements(ThreadPool* pool, std::size_t n, F&& fn) {
  constexpr std::size_t kUnit = 16;
  const std::size_t units = (n + kUnit - 1) / kUnit;
  for_rows(pool, units, kUnit, [&](std::size_t b, std::size_t e) {
    const std::size_t end = e * kUnit < n ? e * kUnit : n;
    fn(b * kUnit, end);
  });
}

// The angles of one token, computed as ggml_rope_cache_init does, and the
// rotation of its heads, kRopeMaxPairs pairs at a time.
void rope_token(const ActivationOpsKernels& k, float* x, std::size_t n_heads, std::size_t head_dim,
                std::int32_t pos, const RopeConfig& cfg, float theta_scale) {
  const std::size_t n_pairs = cfg.rot_dim / 2;
  float cs[internal::kRopeMaxPairs], sn[internal::kRopeMaxPairs];
  float theta = static_cast<float>(pos);
  for (std::size_t b = 0; b < n_pairs; b += internal::kRopeMaxPairs) {
    const std::size_t m =
        n_pairs - b < internal::kRopeMaxPairs ? n_pairs - b : internal::kRopeMaxPairs;
    for (std::size_t i = 0; i < m; ++i) {
      const float ff = cfg.freq_factors != nullptr ? cfg.freq_factors[b + i] : 1.0f;
      const float t = cfg.freq_scale * (theta / ff);
      cs[i] = std::cos(t) * cfg.attn_factor;
      sn[i] = std::sin(t) * cfg.attn_factor;
      theta *= theta_scale;
    }
    if (cfg.style == RopeStyle::kNormal) {
      k.rope_normal(x + 2 * b, n_heads, head_dim, cs, sn, m);
    } else {
      k.rope_neox(x + b, n_heads, head_dim, n_pairs, cs, sn, m);
    }
  }
}

template <typename PositionOf>
void rope_impl(float* x, std::size_t tokens, std::size_t n_heads, std::size_t head_dim,
               PositionOf position_of, const RopeConfig& cfg, ThreadPool* pool) {
  const ActivationOpsKernels& k = internal::activation_ops_kernels();
  // ggml: theta_scale = powf(freq_base, -2.0f/n_dims).
  const float theta_scale = std::pow(cfg.base, -2.0f / static_cast<float>(cfg.rot_dim));
  const std::size_t row = n_heads * head_dim;
  for_rows(pool, tokens, row, [&](std::size_t b, std::size_t e) {
    for (std::size_t t = b; t < e; ++t)
      rope_token(k, x + t * row, n_heads, head_dim, position_of(t), cfg, theta_scale);
  });
}

}  // namespace

void rms_norm(const float* x, const float* w, std::size_t tokens, std::size_t dim, float eps,
              float* y, ThreadPool* pool) {
  if (dim == 0) return;
  const ActivationOpsKernels& k = internal::activation_ops_kernels();
  for_rows(pool, tokens, dim, [&](std::size_t b, std::size_t e) {
    for (std::size_t t = b; t < e; ++t) k.rms_norm_row(x + t * dim, w, dim, eps, y + t * dim);
  });
}

void rope(float* x, std::size_t tokens, std::size_t n_heads, std::size_t head_dim,
          const std::int32_t* positions, const RopeConfig& cfg, ThreadPool* pool) {
  rope_impl(
      x, tokens, n_heads, head_dim, [positions](std::size_t t) { return positions[t]; }, cfg, pool);
}

void rope(float* x, std::size_t tokens, std::size_t n_heads, std::size_t head_dim,
          std::size_t start_pos, const RopeConfig& cfg, ThreadPool* pool) {
  rope_impl(
      x, tokens, n_heads, head_dim,
      [start_pos](std::size_t t) { return static_cast<std::int32_t>(start_pos + t); }, cfg, pool);
}

void swiglu(const float* gate, const float* up, std::size_t n, float* out, ThreadPool* pool) {
  const ActivationOpsKernels& k = internal::activation_ops_kernels();
  for_elements(pool, n,
               [&](std::size_t b, std::size_t e) { k.swiglu(gate + b, up + b, e - b, out + b); });
}

void geglu(const float* gate, const float* up, std::size_t n, float* out, ThreadPool* pool) {
  const ActivationOpsKernels& k = internal::activation_ops_kernels();
  for_elements(pool, n,
               [&](std::size_t b, std::size_t e) { k.geglu(gate + b, up + b, e - b, out + b); });
}

void softcap(float* x, std::size_t n, float cap, ThreadPool* pool) {
  const ActivationOpsKernels& k = internal::activation_ops_kernels();
  for_elements(pool, n, [&](std::size_t b, std::size_t e) { k.softcap(x + b, e - b, cap); });
}

void softmax(float* x, std::size_t rows, std::size_t n, ThreadPool* pool) {
  if (n == 0) return;
  const ActivationOpsKernels& k = internal::activation_ops_kernels();
  for_rows(pool, rows, n, [&](std::size_t b, std::size_t e) {
    for (std::size_t r = b; r < e; ++r) k.softmax_row(x + r * n, n);
  });
}

void exp_f32(const float* x, std::size_t n, float* y, ThreadPool* pool) {
  const ActivationOpsKernels& k = internal::activation_ops_kernels();
  for_elements(pool, n, [&](std::size_t b, std::size_t e) { k.exp(x + b, e - b, y + b); });
}

void add_inplace(float* y, const float* x, std::size_t n, ThreadPool* pool) {
  const ActivationOpsKernels& k = internal::activation_ops_kernels();
  for_elements(pool, n, [&](std::size_t b, std::size_t e) { k.add(y + b, x + b, e - b); });
}

void add_rows_inplace(float* y, const float* bias, std::size_t rows, std::size_t n,
                      ThreadPool* pool) {
  if (n == 0) return;
  const ActivationOpsKernels& k = internal::activation_ops_kernels();
  for_rows(pool, rows, n, [&](std::size_t b, std::size_t e) {
    for (std::size_t r = b; r < e; ++r) k.add(y + r * n, bias, n);
  });
}

void scale_inplace(float* y, float s, std::size_t n, ThreadPool* pool) {
  const ActivationOpsKernels& k = internal::activation_ops_kernels();
  for_elements(pool, n, [&](std::size_t b, std::size_t e) { k.scale(y + b, s, e - b); });
}

void widen_f16(const std::uint16_t* x, std::size_t n, float* y, ThreadPool* pool) {
  const ActivationOpsKernels& k = internal::activation_ops_kernels();
  for_elements(pool, n, [&](std::size_t b, std::size_t e) { k.dequant_f16(x + b, y + b, e - b); });
}

void widen_bf16(const std::uint16_t* x, std::size_t n, float* y, ThreadPool* pool) {
  const ActivationOpsKernels& k = internal::activation_ops_kernels();
  for_elements(pool, n, [&](std::size_t b, std::size_t e) { k.dequant_bf16(x + b, y + b, e - b); });
}

}  // namespace hearth::kernels
