#include "engine/model_config.h"

#include <filesystem>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"

namespace hearth::engine {
namespace {

absl::Status invalid(const GgufFile& f, std::string_view what) {
  return absl::InvalidArgumentError(str_cat("model '", f.name(), "': ", what));
}

// A required positive integer key.
absl::StatusOr<std::size_t> positive(const GgufFile& f, const std::string& key) {
  auto v = f.get_uint(key);
  if (!v.ok()) {
    if (v.status().code() == absl::StatusCode::kNotFound) {
      return absl::InvalidArgumentError(
          str_cat("model '", f.name(), "' is missing the required key '", key, "'"));
    }
    return v.status();
  }
  if (*v == 0 || *v > (1u << 24))
    return invalid(f, str_cat("key '", key, "' = ", *v, " is out of range"));
  return static_cast<std::size_t>(*v);
}

}  // namespace

absl::StatusOr<ModelConfig> read_model_config(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.get_string("general.architecture");
  if (!arch.ok()) return invalid(f, "has no 'general.architecture' key; is it a model file?");
  c.arch_name = std::string(*arch);
  if (c.arch_name == "llama") {
    c.arch = Architecture::kLlama;
  } else if (c.arch_name == "qwen2") {
    c.arch = Architecture::kQwen2;
    c.rope_neox = true;
    c.attn_bias = true;
  } else {
    return absl::UnimplementedError(str_cat("model '", f.name(), "': architecture '", c.arch_name,
                                            "' is not supported (llama, qwen2)"));
  }
  if (auto n = f.get_string("general.name"); n.ok()) {
    c.name = std::string(*n);
  } else {
    c.name = std::filesystem::path(f.name()).stem().string();
  }
  const std::string& a = c.arch_name;
  auto need = [&](const std::string& key, std::size_t* out) -> absl::Status {
    HEARTH_ASSIGN_OR_RETURN(auto v, positive(f, key));
    *out = v;
    return absl::OkStatus();
  };
  if (auto s = need(a + ".block_count", &c.n_layer); !s.ok()) return s;
  if (auto s = need(a + ".embedding_length", &c.n_embd); !s.ok()) return s;
  if (auto s = need(a + ".attention.head_count", &c.n_head); !s.ok()) return s;
  if (auto s = need(a + ".feed_forward_length", &c.n_ff); !s.ok()) return s;
  if (auto s = need(a + ".context_length", &c.n_ctx_train); !s.ok()) return s;
  c.n_head_kv = c.n_head;
  if (f.find(a + ".attention.head_count_kv") != nullptr) {
    if (auto s = need(a + ".attention.head_count_kv", &c.n_head_kv); !s.ok()) return s;
  }
  if (c.n_head % c.n_head_kv != 0) {
    return invalid(
        f, str_cat("head_count ", c.n_head, " is not a multiple of head_count_kv ", c.n_head_kv));
  }
  if (c.n_embd % c.n_head != 0 && f.find(a + ".attention.key_length") == nullptr) {
    return invalid(
        f, str_cat("embedding_length ", c.n_embd, " is not a multiple of head_count ", c.n_head));
  }
  c.head_dim = c.n_embd / c.n_head;
  if (f.find(a + ".attention.key_length") != nullptr) {
    if (auto s = need(a + ".attention.key_length", &c.head_dim); !s.ok()) return s;
    std::size_t value_length = c.head_dim;
    if (f.find(a + ".attention.value_length") != nullptr) {
      if (auto s = need(a + ".attention.value_length", &value_length); !s.ok()) return s;
    }
    if (value_length != c.head_dim) {
      return invalid(f, str_cat("attention.value_length ", value_length,
                                " differs from key_length ", c.head_dim, " (not supported)"));
    }
  }
  if (c.head_dim % 2 != 0) return invalid(f, str_cat("head dimension ", c.head_dim, " is odd"));
  if (auto eps = f.get_float(a + ".attention.layer_norm_rms_epsilon"); eps.ok()) {
    if (!(*eps > 0 && *eps < 1))
      return invalid(f, str_cat("layer_norm_rms_epsilon ", *eps, " is out of range"));
    c.rms_eps = static_cast<float>(*eps);
  } else {
    return invalid(
        f, str_cat("is missing the required key '", a, ".attention.layer_norm_rms_epsilon'"));
  }
  c.rope_dim = c.head_dim;
  if (f.find(a + ".rope.dimension_count") != nullptr) {
    if (auto s = need(a + ".rope.dimension_count", &c.rope_dim); !s.ok()) return s;
    if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
      return invalid(f, str_cat("rope.dimension_count ", c.rope_dim,
                                " must be even and at most the head dimension ", c.head_dim));
    }
  }
  if (auto base = f.get_float(a + ".rope.freq_base"); base.ok()) {
    if (!(*base > 1))
      return invalid(f, str_cat("rope.freq_base ", *base, " must be greater than 1"));
    c.rope_base = static_cast<float>(*base);
  }
  if (auto type = f.get_string(a + ".rope.scaling.type"); type.ok() && *type != "none") {
    if (*type != "linear") {
      return absl::UnimplementedError(str_cat("model '", f.name(), "': rope scaling type '", *type,
                                              "' is not supported (none, linear)"));
    }
    auto factor = f.get_float(a + ".rope.scaling.factor");
    if (!factor.ok() || !(*factor > 0))
      return invalid(f, "linear rope scaling needs a positive rope.scaling.factor");
    c.rope_freq_scale = static_cast<float>(1.0 / *factor);
  } else if (auto factor = f.get_float(a + ".rope.scale_linear"); factor.ok() && *factor > 0) {
    c.rope_freq_scale = static_cast<float>(1.0 / *factor);
  }
  c.has_rope_freq_factors = f.find_tensor("rope_freqs.weight") != nullptr;
  auto tokens = f.find("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->type != GgufValueType::kArray) {
    return invalid(f, "is missing the required key 'tokenizer.ggml.tokens'");
  }
  c.n_vocab = static_cast<std::size_t>(tokens->array_count);
  if (f.find(a + ".vocab_size") != nullptr) {
    std::size_t n = 0;
    if (auto s = need(a + ".vocab_size", &n); !s.ok()) return s;
    if (n != c.n_vocab) {
      return invalid(
          f, str_cat("vocab_size ", n, " differs from the ", c.n_vocab, " tokenizer tokens"));
    }
  }
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  return c;
}

}  // namespace hearth::engine
