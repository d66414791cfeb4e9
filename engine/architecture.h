// The model architectures hearth runs, described as data.
//
// Each entry says which tensors a GGUF file of that architecture holds
// (names as llama.cpp writes them) and how the forward pass treats them:
// fused projections, norm placement, q/k norms, biases, activation, rotary
// pairing, scales, soft-capping and sliding-window layers. model_config.cc
// reads the entry's metadata keys into a ModelConfig, weights.cc loads the
// tensors it names, and forward_pass.cc follows the resolved ModelConfig; no
// other code branches on an architecture's name. Adding an architecture that
// recombines these traits is one entry here (and one in synthetic_model.cc's
// writer, which reads the same entry).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "kernels/activation_ops.h"

namespace hearth::engine {

enum class FfnActivation {
  kSilu,      // SwiGLU: silu(gate) * up
  kGeluTanh,  // GeGLU: gelu_tanh(gate) * up (Gemma)
};

enum class QkNorm {
  kNone,
  kPerHead,  // RMS norm of each head of q and k, weight [head_dim] (Qwen3, Gemma 3)
  kWhole,    // RMS norm of the whole q and k projections, weight [q_dim] / [kv_dim] (OLMo 2)
};

enum class Presence { kAbsent, kOptional, kRequired };

// A window llama.cpp assumes for files of a family converted before the
// {arch}.attention.sliding_window key existed, matched on the file's layer
// count and training context (0: any).
struct LegacyWindow {
  std::size_t n_layer = 0;
  std::size_t n_ctx_train = 0;
  std::size_t window = 0;
};

// What {arch}.attention.sliding_window means for an architecture.
enum class WindowKey {
  kIgnored,  // no sliding layers; the key is ignored, as llama.cpp does (Qwen 2)
  kRefused,  // sliding layers hearth does not run (OLMo 3's, written as olmo2)
  kUsed,
};

// When the file sets {arch}.attention.sliding_window, which layers use it:
// layer l slides unless (l + 1) is a multiple of global_every (0: every
// layer slides). Gemma 2 alternates (2: even layers slide), Gemma 3 has one
// global layer in 6.
struct SlidingWindowRule {
  WindowKey key = WindowKey::kIgnored;
  std::size_t global_every = 0;
  // RoPE base of sliding layers (Gemma 3: 10000, its global layers use the
  // file's base and rope scaling); 0: the same as every layer.
  float rope_base = 0.0f;
  // Files of the family always carry the key (0: no window); the synthetic
  // writer follows it.
  bool always_in_file = false;
  // The window hearth-model synth writes unless told: the family's own
  // where real files never hold 0 (llama.cpp aborts on Gemma's 0).
  std::size_t synthetic_default = 0;
  // Without the key: the first matching legacy window, else no window (as
  // llama.cpp loads such files today; older builds refused Phi-3's).
  std::span<const LegacyWindow> when_absent = {};
};

// {arch}.attn_logit_softcapping and final_logit_softcapping (Gemma 2), and
// the values files converted before the keys existed were made for (0: no
// capping).
struct SoftCapRule {
  bool read = false;
  float attention_when_absent = 0.0f;
  float final_when_absent = 0.0f;
};

struct ArchitectureSpec {
  std::string_view name;  // general.architecture
  kernels::RopeStyle rope_style = kernels::RopeStyle::kNormal;
  FfnActivation activation = FfnActivation::kSilu;
  bool fused_qkv = false;                 // blk.N.attn_qkv.weight: rows q, then k, then v
  bool fused_gate_up = false;             // blk.N.ffn_up.weight: 2 * n_ff rows, gate then up
  Presence qkv_bias = Presence::kAbsent;  // blk.N.attn_{q,k,v}.bias
  QkNorm qk_norm = QkNorm::kNone;         // blk.N.attn_{q,k}_norm.weight, before RoPE
  bool pre_norms = true;                  // blk.N.attn_norm / ffn_norm on each block's input
  bool post_norms = false;                // blk.N.post_attention_norm / post_ffw_norm on its output
  bool embedding_scale_sqrt_dim = false;  // embeddings multiplied by sqrt(n_embd) (Gemma)
  // {arch}.embedding_scale, residual_scale, attention.scale, logit_scale (Granite).
  bool granite_scales = false;
  SoftCapRule softcaps = {};
  SlidingWindowRule sliding_window = {};
  // rope_factors_long.weight / rope_factors_short.weight, chosen by the
  // context against {arch}.rope.scaling.original_context_length (Phi-3).
  bool long_short_rope_factors = false;
  // Gemma's query scale: 1/sqrt(n_embd / n_head) instead of 1/sqrt(head_dim)
  // for the one size whose query_pre_attn_scalar is that (GGUF does not
  // store it; llama.cpp picks it by layer count, as here). 0: never.
  std::size_t embd_per_head_query_scale_layers = 0;
  // Files of this family share the embedding table with the output (no
  // output.weight); the loader takes either, the synthetic writer follows it.
  bool tied_output = false;
};

// The supported architectures, in the order error messages list them.
std::span<const ArchitectureSpec> architectures();

// The entry named `name`, or nullptr.
const ArchitectureSpec* find_architecture(std::string_view name);

// "llama, qwen2, ..." for messages.
std::string_view architecture_names();

}  // namespace hearth::engine
