// The operations on activations of a llama block (element- and row-wise), around the
// matrix products and attention: RMSNorm, rotary position embedding, SwiGLU,
// softmax, a vectorised exp, and the small vector helpers the engine needs for
// residuals, biases and scaling. The embedding lookup is in kernels/embedding.h.
//
// The math follows the reference llama implementation (llama.cpp / ggml) so
// that a model gives the same activations here as there, up to float rounding;
// each function says where it differs and by how much.
//
// Layouts: activations are row-major float32, one row per token, rows packed
// (row t starts at t * row_length). Every function dispatches on active_isa()
// (kernels/cpu_features.h) to a scalar, AVX2 or AVX-512 path.
//
// Memory: none of these take scratch memory or touch the heap, so they have no
// allocator parameter; rope keeps its per-token cos/sin table on the stack.
//
// Threads: `pool` (nullptr = the calling thread only) splits rows, or runs of
// elements, across threads only when the call has at least
// kActivationOpsParallelMinElements elements; below that the hand-off costs more
// than it saves. Results do not depend on the pool: each row (or element) is
// computed by the same code whichever thread runs it.
//
// Aliasing: unless a function says otherwise, input and output arrays either
// are the same array (in place) or do not overlap at all.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/thread_pool.h"

namespace hearth::kernels {

// Work (elements) below which a call runs on the calling thread alone.
inline constexpr std::size_t kActivationOpsParallelMinElements = std::size_t{1} << 15;

// --- RMSNorm --------------------------------------------------------------

// For each of `tokens` rows of `dim` floats:
//   scale = 1 / sqrt(mean_i(x[t][i]^2) + eps);   y[t][i] = (x[t][i] * scale) * w[i]
// as ggml_rms_norm followed by ggml_mul with the norm weight (two roundings per
// output, in that order). w may be nullptr (weight 1: the bare norm). y == x is
// allowed.
//
// Accumulation: the sum of squares is accumulated in float, in interleaved
// partial sums (the scalar path 8, AVX2 4 x 8, AVX-512 4 x 16; a row's last
// partial vectors go to the first register), which are then added pairwise.
// ggml accumulates in double; since every term is non-negative, the float
// sum's relative error is at most (ceil(dim/8) + 10) * 2^-24 on every path,
// and the outputs' relative error at most ((ceil(dim/8) + 10) / 2 + 5.5) * 2^-24
// (1.6e-5 for dim 4096; typically ~1e-7). sqrt and the division are IEEE
// (no approximate rsqrt).
void rms_norm(const float* x, const float* w, std::size_t tokens, std::size_t dim, float eps,
              float* y, ThreadPool* pool = nullptr);

// --- Rotary position embedding ---------------------------------------------

enum class RopeStyle {
  kNormal,  // llama / GGUF "rope type 0": pair i is (x[2i], x[2i+1])
  kNeox,    // GPT-NeoX, Qwen, Phi...: pair i is (x[i], x[i + rot_dim/2])
};

struct RopeConfig {
  RopeStyle style = RopeStyle::kNormal;
  // Leading dimensions of each head that are rotated: even, 2 <= rot_dim <= head_dim.
  // Dimensions rot_dim..head_dim-1 are left untouched (partial rotary).
  std::size_t rot_dim = 0;
  float base = 10000.0f;    // rope_freq_base
  float freq_scale = 1.0f;  // linear scaling: 1 / rope_scaling.factor
  // Optional per-pair divisors, rot_dim/2 of them (llama3's rope_freqs tensor,
  // "rope_freqs.weight" in GGUF). nullptr = all 1.
  const float* freq_factors = nullptr;
  // Multiplies cos and sin (ggml's attn_factor / YaRN mscale; Phi-3's
  // long-rope scaling): the rotated dimensions come out scaled by it.
  float attn_factor = 1.0f;
};

// Rotates each head of each token in place. x is [tokens][n_heads * head_dim]
// (head h of token t at x + t * n_heads * head_dim + h * head_dim); token t is
// at position positions[t] (any int32, need not be sorted or distinct).
//
// For pair i in [0, rot_dim/2), with p the position:
//   theta_i = ((p * base^(-2i/rot_dim)) / freq_factors[i]) * freq_scale
//   (a, b) <- (a cos theta_i - b sin theta_i,  a sin theta_i + b cos theta_i)
// where (a, b) is the pair given by cfg.style.
//
// Like ggml (ggml_rope_cache_init / rope_yarn without YaRN), theta is computed
// in float: theta_0 = float(p), theta_{i+1} = theta_i * powf(base, -2/rot_dim),
// then divided by the factor, multiplied by freq_scale, and cos/sin taken with
// the float libm functions (cosf / sinf). This reproduces ggml's angles bit for
// bit; against exact arithmetic each angle has a relative error of about
// (2i + 6) * 2^-24 (for p = 4095: ~1e-3 rad at worst, ~1e-4 typically, which is
// what float positions allow anyway). The angles are computed once per token
// and shared by its heads, and are identical on every ISA path; the paths
// differ only in whether the rotation uses fused multiply-adds (<= 1 ulp).
// Cost: the rotation is vectorised; the rot_dim/2 cosf + sinf per token stay
// scalar libm calls (bit-exact with ggml) and take most of RoPE's time
// (docs/performance.md).
//
// Preconditions: cfg.rot_dim even, 2 <= rot_dim <= head_dim; base > 0.
void rope(float* x, std::size_t tokens, std::size_t n_heads, std::size_t head_dim,
          const std::int32_t* positions, const RopeConfig& cfg, ThreadPool* pool = nullptr);
// As above with positions start_pos, start_pos + 1, ... (a contiguous batch).
void rope(float* x, std::size_t tokens, std::size_t n_heads, std::size_t head_dim,
          std::size_t start_pos, const RopeConfig& cfg, ThreadPool* pool = nullptr);

// --- Activations ------------------------------------------------------------

// out[i] = silu(gate[i]) * up[i],  silu(g) = g / (1 + exp(-g))   (ggml_swiglu).
// out may be gate or up. Very negative g gives -0 (exp(-g) overflows to inf),
// never NaN. The scalar path uses std::exp; SIMD paths use the vectorised exp
// below: relative error <= kExpMaxRelError + 3 * 2^-24.
void swiglu(const float* gate, const float* up, std::size_t n, float* out,
            ThreadPool* pool = nullptr);

// out[i] = gelu(gate[i]) * up[i] with GELU's tanh approximation
// (Gemma's "gelu_pytorch_tanh"; ggml_gelu, which llama.cpp's CPU backend
// reads from an fp16 table, differs from it by up to ~1e-3 relative):
//   gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))),
// computed as g / (1 + exp(-2u)). out may be gate or up. Error as swiglu's.
void geglu(const float* gate, const float* up, std::size_t n, float* out,
           ThreadPool* pool = nullptr);

// In place: x[i] <- cap * tanh(x[i] / cap) (Gemma 2's logit soft-capping),
// cap > 0. The scalar path is std::tanh; the SIMD paths compute tanh from
// the vectorised exp, absolute error <= 4e-7 * cap.
void softcap(float* x, std::size_t n, float cap, ThreadPool* pool = nullptr);

// In place, for each of `rows` rows of length n (n >= 1):
//   x[i] <- exp(x[i] - max) / sum_j exp(x[j] - max)
// computed as ggml_soft_max does: the exponentials are stored, summed, and the
// row multiplied by 1 / sum. The sum is accumulated in float with the same
// partial sums as rms_norm (ggml: double), relative error
// <= (ceil(n/8) + 10) * 2^-24 beyond the exponentials' own. Entries of -inf
// (masked) give exactly 0; a row must hold at least one finite value (a row of
// only -inf gives NaN, as in ggml).
void softmax(float* x, std::size_t rows, std::size_t n, ThreadPool* pool = nullptr);

// y[i] = exp(x[i]) for i < n; y == x allowed. The scalar path is std::exp; the
// SIMD paths use a range reduction x = k ln2 + r, |r| <= ln2/2, and a degree-7
// polynomial for e^r (Cephes expf), then scale by 2^k with one rounding
// (AVX2: two exact products by powers of two; AVX-512: vscalefps), so that
// results down to the smallest subnormal and up to FLT_MAX are right:
//   exp(x) = +inf for x > ln(FLT_MAX) ~ 88.72, 0 for x < ~ -103.97,
//   NaN for NaN, 0 for -inf, +inf for +inf.
// Relative error <= kExpMaxRelError (~0.85 ulp of 2^-23) for normal results,
// absolute error <= 2^-149 (one subnormal step) for subnormal ones: the worst
// case over every float in [-104, 89] against double exp is 8.46e-8 (at
// x = 26.690403); the tests check every 251st float of that range.
inline constexpr double kExpMaxRelError = 1e-7;
void exp_f32(const float* x, std::size_t n, float* y, ThreadPool* pool = nullptr);

// --- Vector helpers -----------------------------------------------------------
// Each output is one correctly rounded float operation, so every ISA path gives
// the same bits.

// y[i] += x[i] for i < n (residual connections).
void add_inplace(float* y, const float* x, std::size_t n, ThreadPool* pool = nullptr);
// y[r][i] += bias[i] for each of `rows` rows of length n (bias of a projection).
void add_rows_inplace(float* y, const float* bias, std::size_t rows, std::size_t n,
                      ThreadPool* pool = nullptr);
// y[i] *= s for i < n.
void scale_inplace(float* y, float s, std::size_t n, ThreadPool* pool = nullptr);
// y[i] = x[i] for i < n, x IEEE fp16 (widen_f16) or bf16 (widen_bf16): exact
// conversions, for float weights widened at load.
void widen_f16(const std::uint16_t* x, std::size_t n, float* y, ThreadPool* pool = nullptr);
void widen_bf16(const std::uint16_t* x, std::size_t n, float* y, ThreadPool* pool = nullptr);

}  // namespace hearth::kernels
