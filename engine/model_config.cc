#include "engine/model_config.h"

#include <cmath>
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

// Whether `v` is a positive float that is neither subnormal nor infinite
// (so its reciprocal, which the forward pass takes of some, is finite too).
bool positive_normal_float(double v) {
  const float x = static_cast<float>(v);
  return x > 0 && std::isnormal(x);
}

// Whether a linear rope factor and its reciprocal (the frequency scale the
// forward pass uses) are both positive normal floats.
bool rope_factor_ok(double factor) {
  return positive_normal_float(factor) && positive_normal_float(1.0 / factor);
}

// An optional float key: `fallback` when absent; refused unless a positive
// normal float (or 0 with allow_zero).
absl::StatusOr<float> optional_float(const GgufFile& f, const std::string& key, float fallback,
                                     bool allow_zero = false) {
  if (f.find(key) == nullptr) return fallback;
  auto v = f.get_float(key);
  if (!v.ok()) return v.status();
  if (!positive_normal_float(*v) && !(*v == 0 && allow_zero))
    return invalid(f, str_cat("key '", key, "' = ", *v, " is out of range"));
  return static_cast<float>(*v);
}

// The file's sliding window (0: none), as its architecture's rule reads
// {arch}.attention.sliding_window (engine/architecture.h).
absl::StatusOr<std::size_t> sliding_window(const GgufFile& f, const ModelConfig& c) {
  const SlidingWindowRule& rule = c.arch->sliding_window;
  const std::string key = c.arch_name + ".attention.sliding_window";
  if (rule.key == WindowKey::kIgnored) return 0;
  if (f.find(key) != nullptr) {
    auto w = f.get_uint(key);
    if (!w.ok()) return w.status();
    if (*w != 0 && rule.key == WindowKey::kRefused)
      return absl::UnimplementedError(str_cat("model '", f.name(), "': key '", key, "' = ", *w,
                                              ": sliding-window layers of ", c.arch_name,
                                              " files are not supported"));
    return static_cast<std::size_t>(*w);  // 0: no window (files write 0 for "none")
  }
  auto matches = [](std::size_t want, std::size_t have) { return want == 0 || want == have; };
  for (const LegacyWindow& l : rule.when_absent)
    if (matches(l.n_layer, c.n_layer) && matches(l.n_ctx_train, c.n_ctx_train)) return l.window;
  return 0;
}

// The keys an architecture's entry adds: scales, soft-capping, sliding
// windows, long/short rope factors; then each layer's attention.
absl::Status read_architecture_traits(const GgufFile& f, ModelConfig& c) {
  const ArchitectureSpec& arch = *c.arch;
  const std::string& a = c.arch_name;
  c.attn_bias =
      arch.qkv_bias == Presence::kRequired ||
      (arch.qkv_bias == Presence::kOptional && f.find_tensor("blk.0.attn_q.bias") != nullptr);
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (arch.embd_per_head_query_scale_layers != 0 &&
      c.n_layer == arch.embd_per_head_query_scale_layers) {
    if (c.n_embd < c.n_head)
      return invalid(f, str_cat("embedding_length ", c.n_embd, " is less than head_count ",
                                c.n_head, " (its query scale is 1 / sqrt(their quotient))"));
    c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
  }
  if (arch.embedding_scale_sqrt_dim) c.embedding_scale = std::sqrt(static_cast<float>(c.n_embd));
  if (arch.granite_scales) {
    HEARTH_ASSIGN_OR_RETURN(c.embedding_scale, optional_float(f, a + ".embedding_scale", 1.0f));
    HEARTH_ASSIGN_OR_RETURN(c.residual_scale, optional_float(f, a + ".residual_scale", 1.0f));
    HEARTH_ASSIGN_OR_RETURN(c.attention_scale,
                            optional_float(f, a + ".attention.scale", c.attention_scale));
    HEARTH_ASSIGN_OR_RETURN(float logit_divisor, optional_float(f, a + ".logit_scale", 1.0f));
    c.logit_scale = 1.0f / logit_divisor;
  }
  if (arch.softcaps.read) {
    HEARTH_ASSIGN_OR_RETURN(c.attn_softcap,
                            optional_float(f, a + ".attn_logit_softcapping",
                                           arch.softcaps.attention_when_absent, true));
    HEARTH_ASSIGN_OR_RETURN(c.final_softcap, optional_float(f, a + ".final_logit_softcapping",
                                                            arch.softcaps.final_when_absent, true));
  }
  if (arch.long_short_rope_factors && f.find_tensor("rope_factors_long.weight") != nullptr) {
    std::size_t original = c.n_ctx_train;
    const std::string key = a + ".rope.scaling.original_context_length";
    if (f.find(key) != nullptr) {
      HEARTH_ASSIGN_OR_RETURN(original, positive(f, key));
    }
    c.rope_original_context = original;
    HEARTH_ASSIGN_OR_RETURN(c.rope_attn_factor,
                            optional_float(f, a + ".rope.scaling.attn_factor", 1.0f));
  }
  HEARTH_ASSIGN_OR_RETURN(const std::size_t window, sliding_window(f, c));
  c.layers.assign(c.n_layer, LayerAttention{0, c.rope_base, c.rope_freq_scale});
  const SlidingWindowRule& rule = arch.sliding_window;
  for (std::size_t l = 0; l < c.n_layer && window != 0; ++l) {
    if (rule.global_every != 0 && (l + 1) % rule.global_every == 0) continue;
    c.layers[l].window = window;
    if (rule.rope_base != 0.0f) c.layers[l] = {window, rule.rope_base, 1.0f};
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> read_model_config(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.get_string("general.architecture");
  if (!arch.ok()) return invalid(f, "has no 'general.architecture' key; is it a model file?");
  c.arch_name = std::string(*arch);
  c.arch = find_architecture(c.arch_name);
  if (c.arch == nullptr) {
    return absl::UnimplementedError(str_cat("model '", f.name(), "': architecture '", c.arch_name,
                                            "' is not supported (", architecture_names(), ")"));
  }
  c.rope_style = c.arch->rope_style;
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
    if (!(*base > 1) || !positive_normal_float(*base))
      return invalid(f, str_cat("rope.freq_base ", *base, " must be a finite number above 1"));
    c.rope_base = static_cast<float>(*base);
  }
  if (auto type = f.get_string(a + ".rope.scaling.type"); type.ok() && *type != "none") {
    if (*type != "linear") {
      return absl::UnimplementedError(str_cat("model '", f.name(), "': rope scaling type '", *type,
                                              "' is not supported (none, linear)"));
    }
    auto factor = f.get_float(a + ".rope.scaling.factor");
    if (!factor.ok() || !rope_factor_ok(*factor))
      return invalid(f, "linear rope scaling needs a positive, finite rope.scaling.factor");
    c.rope_freq_scale = static_cast<float>(1.0 / *factor);
  } else if (auto factor = f.get_float(a + ".rope.scale_linear"); factor.ok() && *factor > 0) {
    if (!rope_factor_ok(*factor))
      return invalid(f, str_cat("rope.scale_linear ", *factor, " is out of range"));
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
  HEARTH_RETURN_IF_ERROR(read_architecture_traits(f, c));
  return c;
}

}  // namespace hearth::engine
