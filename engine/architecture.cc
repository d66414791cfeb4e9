#include "engine/architecture.h"

#include <array>
#include <string>

namespace hearth::engine {
namespace {

using kernels::RopeStyle;

// llama.cpp's defaults (llama-model.cpp, "for backward compatibility"):
// Phi-3 mini and medium 4k slide over 2047 positions, their 128k variants
// over more than their context; Gemma 2 over 4096.
constexpr LegacyWindow kPhi3LegacyWindows[] = {
    {32, 4096, 2047}, {40, 4096, 2047}, {32, 131072, 262144}, {40, 131072, 131072}};
constexpr LegacyWindow kGemma2LegacyWindows[] = {{0, 0, 4096}};

// Rotary pairing follows llama.cpp's llama_model_rope_type: adjacent pairs
// for llama-like files (their q/k rows are permuted at conversion), halves
// (NeoX) for the rest.
constexpr std::array<ArchitectureSpec, 8> kArchitectures = {{
    {.name = "llama",
     .qkv_bias = Presence::kOptional,
     .sliding_window = {.key = WindowKey::kUsed}},  // Mistral-style, where the file asks for it
    {.name = "qwen2", .rope_style = RopeStyle::kNeox, .qkv_bias = Presence::kRequired},
    {.name = "qwen3", .rope_style = RopeStyle::kNeox, .qk_norm = QkNorm::kPerHead},
    {.name = "phi3",
     .rope_style = RopeStyle::kNeox,
     .fused_qkv = true,
     .fused_gate_up = true,
     .sliding_window = {.key = WindowKey::kUsed,
                        .always_in_file = true,
                        .when_absent = kPhi3LegacyWindows},
     .long_short_rope_factors = true},
    {.name = "gemma2",
     .rope_style = RopeStyle::kNeox,
     .activation = FfnActivation::kGeluTanh,
     .post_norms = true,
     .embedding_scale_sqrt_dim = true,
     .softcaps = {.read = true, .attention_when_absent = 50.0f, .final_when_absent = 30.0f},
     .sliding_window = {.key = WindowKey::kUsed,
                        .global_every = 2,
                        .always_in_file = true,
                        .synthetic_default = 4096,
                        .when_absent = kGemma2LegacyWindows},
     .embd_per_head_query_scale_layers = 46,  // Gemma 2 27B
     .tied_output = true},
    {.name = "gemma3",
     .rope_style = RopeStyle::kNeox,
     .activation = FfnActivation::kGeluTanh,
     .qk_norm = QkNorm::kPerHead,
     .post_norms = true,
     .embedding_scale_sqrt_dim = true,
     .sliding_window = {.key = WindowKey::kUsed,
                        .global_every = 6,
                        .rope_base = 10000.0f,
                        .always_in_file = true,
                        .synthetic_default = 1024},  // Gemma 3 4B-27B
     .embd_per_head_query_scale_layers = 62,         // Gemma 3 27B
     .tied_output = true},
    {.name = "granite", .qkv_bias = Presence::kOptional, .granite_scales = true},
    {.name = "olmo2",
     .rope_style = RopeStyle::kNeox,
     .qk_norm = QkNorm::kWhole,
     .pre_norms = false,
     .post_norms = true,
     .sliding_window = {.key = WindowKey::kRefused}},
}};

}  // namespace

std::span<const ArchitectureSpec> architectures() { return kArchitectures; }

const ArchitectureSpec* find_architecture(std::string_view name) {
  for (const ArchitectureSpec& a : kArchitectures)
    if (a.name == name) return &a;
  return nullptr;
}

std::string_view architecture_names() {
  static const std::string names = [] {
    std::string s;
    for (const ArchitectureSpec& a : kArchitectures) {
      if (!s.empty()) s += ", ";
      s += a.name;
    }
    return s;
  }();
  return names;
}

}  // namespace hearth::engine
