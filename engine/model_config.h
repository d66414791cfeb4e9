// The hyperparameters of a model, read from GGUF metadata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/architecture.h"
#include "engine/gguf.h"
#include "kernels/activation_ops.h"

namespace hearth::engine {

// How one layer attends: its sliding window and rotary frequencies (Gemma
// alternates sliding and global layers, Gemma 3 with their own RoPE base).
struct LayerAttention {
  std::size_t window = 0;  // positions seen, own included; 0: all earlier ones
  float rope_base = 10000.0f;
  float rope_freq_scale = 1.0f;
};

// Everything the loader and the forward pass need, resolved from the
// architecture's entry (engine/architecture.h) and the file's keys: the
// forward pass reads these values, never the architecture's name.
struct ModelConfig {
  const ArchitectureSpec* arch = nullptr;  // never null after read_model_config
  std::string arch_name;                   // general.architecture
  std::string name;                        // general.name, or the file name
  std::size_t n_layer = 0;
  std::size_t n_embd = 0;
  std::size_t n_head = 0;
  std::size_t n_head_kv = 0;
  std::size_t head_dim = 0;
  std::size_t n_ff = 0;
  std::size_t n_vocab = 0;
  std::size_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  // Rotary embedding: rotated dimensions per head, base, linear scaling factor
  // (theta is multiplied by freq_scale = 1/factor), pairing, and the factor
  // cos/sin are multiplied by (Phi-3 long-rope's attn_factor).
  std::size_t rope_dim = 0;
  float rope_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  float rope_attn_factor = 1.0f;
  kernels::RopeStyle rope_style = kernels::RopeStyle::kNormal;
  bool has_rope_freq_factors = false;  // a rope_freqs.weight tensor (Llama 3.1 scaling)
  // Phi-3: rope_factors_long/short; sequences whose context exceeds this use
  // the long ones (0: no such factors).
  std::size_t rope_original_context = 0;
  bool attn_bias = false;    // the q/k/v projections carry biases
  bool tied_output = false;  // no output.weight: the embedding table is reused
  // Scales (1: none): embeddings on lookup, each block's output before the
  // residual add, logits after the output projection.
  float embedding_scale = 1.0f;
  float residual_scale = 1.0f;
  float logit_scale = 1.0f;
  float attention_scale = 0.0f;        // query scale in attention (always set)
  float attn_softcap = 0.0f;           // attention scores soft-capped (0: not)
  float final_softcap = 0.0f;          // logits soft-capped (0: not)
  std::vector<LayerAttention> layers;  // n_layer entries

  std::size_t q_dim() const { return n_head * head_dim; }
  std::size_t kv_dim() const { return n_head_kv * head_dim; }
};

// Reads and validates the hyperparameters. Unknown architectures and missing
// or inconsistent keys are refused with the key's name.
absl::StatusOr<ModelConfig> read_model_config(const GgufFile& file);

}  // namespace hearth::engine
