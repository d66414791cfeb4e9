// Private to kernels/: the per-ISA entry points behind kernels/activation_ops.h
// and kernels/embedding.h. Each ISA file (activation_ops_avx2.cc,
// activation_ops_avx512.cc) fills a ActivationOpsKernels table; activation_ops.cc holds the
// scalar table and picks one (PerIsaTables, kernels/cpu_features.h).
//
// Every entry works on one row (or one run of elements) on the calling thread;
// threading, positions and argument checks live in the dispatchers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gguf_blocks.h"

namespace hearth::kernels::internal {

// Most pairs a rope entry is given at once (the dispatcher walks longer
// rotations in blocks of this many); lets the SIMD paths keep tables on the stack.
inline constexpr std::size_t kRopeMaxPairs = 64;

// GELU's tanh approximation as a logistic: gelu(g) = g / (1 + exp(-z)) with
// z = 2 sqrt(2/pi) (g + 0.044715 g^3) (0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u))).
inline constexpr float kGeluTwiceSqrt2OverPi = 1.5957691216057308f;
inline constexpr float kGeluCubic = 0.044715f;

struct ActivationOpsKernels {
  // One row of rms_norm (w may be nullptr).
  void (*rms_norm_row)(const float* x, const float* w, std::size_t dim, float eps, float* y);
  void (*swiglu)(const float* gate, const float* up, std::size_t n, float* out);
  void (*geglu)(const float* gate, const float* up, std::size_t n, float* out);
  void (*softcap)(float* x, std::size_t n, float cap);
  void (*softmax_row)(float* x, std::size_t n);
  void (*exp)(const float* x, std::size_t n, float* y);
  void (*add)(float* y, const float* x, std::size_t n);
  void (*scale)(float* y, float s, std::size_t n);

  // Rotates `n_heads` heads (head h at x + h * head_stride) by one token's angles.
  //  normal: pairs (x[2i], x[2i+1]) for i < n_pairs; cs[i] = cos theta_i, sn[i] = sin theta_i.
  //  neox:   pairs (x[i], x[i + half]) for i < n_pairs.
  // n_pairs <= kRopeMaxPairs.
  void (*rope_normal)(float* x, std::size_t n_heads, std::size_t head_stride, const float* cs,
                      const float* sn, std::size_t n_pairs);
  void (*rope_neox)(float* x, std::size_t n_heads, std::size_t head_stride, std::size_t half,
                    const float* cs, const float* sn, std::size_t n_pairs);

  // Row dequantisation for the embedding lookup; n a multiple of 32 for blocks.
  // Bit-identical to the scalar reference (each output is one product d * q,
  // or an exact conversion).
  void (*dequant_q8_0)(const BlockQ8_0* in, float* y, std::size_t n);
  void (*dequant_q4_0)(const BlockQ4_0* in, float* y, std::size_t n);
  void (*dequant_f16)(const std::uint16_t* in, float* y, std::size_t n);
  void (*dequant_bf16)(const std::uint16_t* in, float* y, std::size_t n);
};

extern const ActivationOpsKernels kActivationOpsScalar;
extern const ActivationOpsKernels kActivationOpsAvx2;
extern const ActivationOpsKernels kActivationOpsAvx512;

// The table for active_isa() (AVX-512 VNNI reuses AVX-512).
const ActivationOpsKernels& activation_ops_kernels();

}  // namespace hearth::kernels::internal
