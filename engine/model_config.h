// The hyperparameters of a llama-family model, read from GGUF metadata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/gguf.h"

namespace hearth::engine {

enum class Architecture { kLlama, kQwen2 };

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  std::string arch_name;  // "llama" | "qwen2"
  std::string name;       // general.name, or the file name
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
  // (theta is multiplied by freq_scale = 1/factor), NeoX pairing for qwen2.
  std::size_t rope_dim = 0;
  float rope_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  bool rope_neox = false;
  bool has_rope_freq_factors = false;  // a rope_freqs.weight tensor (Llama 3.1 scaling)
  bool attn_bias = false;              // qwen2: q/k/v projections carry biases
  bool tied_output = false;            // no output.weight: the embedding table is reused

  std::size_t q_dim() const { return n_head * head_dim; }
  std::size_t kv_dim() const { return n_head_kv * head_dim; }
};

// Reads and validates the hyperparameters. Unknown architectures and missing
// or inconsistent keys are refused with the key's name.
absl::StatusOr<ModelConfig> read_model_config(const GgufFile& file);

}  // namespace hearth::engine
