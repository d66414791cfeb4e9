#include "engine/synthetic_model.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "engine/architecture.h"
#include "engine/gguf_writer.h"
#include "kernels/fp16.h"
#include "kernels/gguf_blocks.h"
#include "kernels/gguf_kquants.h"

namespace hearth::engine {
namespace {

// splitmix64: a fast, well-mixed stream; each tensor gets its own seed.
class Stream {
 public:
  explicit Stream(std::uint64_t seed) : s_(seed) {}
  float uniform_pm1() {  // [-1, 1)
    s_ += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = s_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }

 private:
  std::uint64_t s_;
};

std::uint64_t hash(std::uint64_t seed, std::string_view name) {
  std::uint64_t h = seed ^ 0xcbf29ce484222325ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

// Encodes rows x cols floats (produced on the fly) in `type`.
std::string encode(GgmlType type, std::size_t rows, std::size_t cols, Stream& rng, float amplitude,
                   float offset) {
  std::vector<float> row(cols);
  std::string out;
  const std::size_t row_bytes = type == GgmlType::kF32    ? cols * 4
                                : type == GgmlType::kF16  ? cols * 2
                                : type == GgmlType::kQ8_0 ? cols / 32 * sizeof(kernels::BlockQ8_0)
                                : type == GgmlType::kQ4_K ? cols / 256 * sizeof(kernels::BlockQ4_K)
                                : type == GgmlType::kQ5_K ? cols / 256 * sizeof(kernels::BlockQ5_K)
                                : type == GgmlType::kQ6_K ? cols / 256 * sizeof(kernels::BlockQ6_K)
                                                          : cols / 32 * sizeof(kernels::BlockQ4_0);
  out.resize(rows * row_bytes);
  for (std::size_t r = 0; r < rows; ++r) {
    for (float& v : row) v = offset + amplitude * rng.uniform_pm1();
    char* dst = out.data() + r * row_bytes;
    switch (type) {
      case GgmlType::kF32:
        std::memcpy(dst, row.data(), row_bytes);
        break;
      case GgmlType::kF16:
        for (std::size_t i = 0; i < cols; ++i) {
          const std::uint16_t h = kernels::f32_to_fp16(row[i]);
          std::memcpy(dst + 2 * i, &h, 2);
        }
        break;
      case GgmlType::kQ8_0:
        kernels::quantize_row_q8_0(row.data(), reinterpret_cast<kernels::BlockQ8_0*>(dst), cols);
        break;
      case GgmlType::kQ4_K:
        kernels::quantize_row_q4_k(row.data(), reinterpret_cast<kernels::BlockQ4_K*>(dst), cols);
        break;
      case GgmlType::kQ5_K:
        kernels::quantize_row_q5_k(row.data(), reinterpret_cast<kernels::BlockQ5_K*>(dst), cols);
        break;
      case GgmlType::kQ6_K:
        kernels::quantize_row_q6_k(row.data(), reinterpret_cast<kernels::BlockQ6_K*>(dst), cols);
        break;
      default:
        kernels::quantize_row_q4_0(row.data(), reinterpret_cast<kernels::BlockQ4_0*>(dst), cols);
        break;
    }
  }
  return out;
}

std::vector<std::string> vocabulary(std::size_t n) {
  std::vector<std::string> v = {"<unk>", "<s>", "</s>"};
  static const char hex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) v.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
  v.push_back("\xe2\x96\x81");  // "▁"
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  for (char c : letters) v.push_back(std::string(1, c));
  for (char c : letters) v.push_back("\xe2\x96\x81" + std::string(1, c));
  // Two- and three-letter pieces, with and without the word-start marker.
  for (std::size_t len = 2; v.size() < n && len <= 3; ++len) {
    std::vector<std::string> level = {""};
    for (std::size_t k = 0; k < len; ++k) {
      std::vector<std::string> next;
      for (const auto& p : level)
        for (char c : letters) next.push_back(p + c);
      level = std::move(next);
    }
    for (const auto& p : level) {
      if (v.size() < n) v.push_back("\xe2\x96\x81" + p);
      if (v.size() < n) v.push_back(p);
    }
  }
  for (std::size_t i = 0; v.size() < n; ++i) v.push_back(str_cat("<extra_", i, ">"));
  v.resize(n);
  return v;
}

SyntheticModelSpec::Vocabulary builtin_vocabulary(std::size_t n) {
  SyntheticModelSpec::Vocabulary v;
  v.tokens = vocabulary(n);
  v.scores.assign(n, 0.0f);
  v.types.assign(n, 1);
  v.types[0] = 2;
  v.types[1] = v.types[2] = 3;
  for (int b = 0; b < 256; ++b) v.types[3 + b] = 6;
  for (std::size_t i = 259; i < n; ++i) v.scores[i] = -static_cast<float>(v.tokens[i].size());
  return v;
}

constexpr float kGraniteEmbeddingScale = 12.0f;

// The keys an architecture's entry reads, with values like its real models'.
void add_architecture_keys(GgufWriter& w, const ArchitectureSpec& arch,
                           const SyntheticModelSpec& s) {
  const std::string& a = s.architecture;
  const bool gemma3_rope = arch.sliding_window.rope_base != 0.0f;
  w.add_float32(a + ".rope.freq_base", gemma3_rope ? 1000000.0f : 10000.0f);
  if (gemma3_rope) {  // global layers: linear scaling 8 (Gemma 3 4B and up)
    w.add_string(a + ".rope.scaling.type", "linear");
    w.add_float32(a + ".rope.scaling.factor", 8.0f);
  }
  if (s.sliding_window != 0 || arch.sliding_window.always_in_file)
    w.add_uint32(a + ".attention.sliding_window", static_cast<std::uint32_t>(s.sliding_window));
  if (arch.softcaps.read) {  // Gemma 2's values
    w.add_float32(a + ".attn_logit_softcapping", 50.0f);
    w.add_float32(a + ".final_logit_softcapping", 30.0f);
  }
  if (arch.granite_scales) {  // Granite 3.0 2B's multipliers; attention 1/head_dim
    w.add_float32(a + ".embedding_scale", kGraniteEmbeddingScale);
    w.add_float32(a + ".residual_scale", 0.22f);
    w.add_float32(a + ".attention.scale", static_cast<float>(s.n_head) / s.n_embd);
    w.add_float32(a + ".logit_scale", 8.0f);
  }
  if (arch.long_short_rope_factors) {  // the short factors until 1/4 of the context
    w.add_uint32(a + ".rope.scaling.original_context_length",
                 static_cast<std::uint32_t>(s.context_length / 4));
    w.add_float32(a + ".rope.scaling.attn_factor", 1.19f);
  }
}

}  // namespace

absl::StatusOr<SyntheticModelSpec::Vocabulary> vocabulary_of(const GgufFile& file) {
  HEARTH_ASSIGN_OR_RETURN(const std::string_view model, file.get_string("tokenizer.ggml.model"));
  if (model != "llama")
    return absl::InvalidArgumentError(
        str_cat("tokenizer.ggml.model: '", model, "' (only a \"llama\" vocabulary can be copied)"));
  SyntheticModelSpec::Vocabulary v;
  HEARTH_ASSIGN_OR_RETURN(const std::vector<std::string_view> tokens,
                          file.get_string_array("tokenizer.ggml.tokens"));
  HEARTH_ASSIGN_OR_RETURN(const std::vector<double> scores,
                          file.get_float_array("tokenizer.ggml.scores"));
  HEARTH_ASSIGN_OR_RETURN(const std::vector<std::int64_t> types,
                          file.get_int_array("tokenizer.ggml.token_type"));
  if (scores.size() != tokens.size() || types.size() != tokens.size())
    return absl::InvalidArgumentError(
        "tokenizer.ggml.scores / token_type: lengths differ from tokens");
  v.tokens.assign(tokens.begin(), tokens.end());
  v.scores.assign(scores.begin(), scores.end());
  v.types.assign(types.begin(), types.end());
  auto id = [&](std::string_view key, std::uint32_t fallback) -> std::uint32_t {
    absl::StatusOr<std::uint64_t> i = file.get_uint(key);
    return i.ok() ? static_cast<std::uint32_t>(*i) : fallback;
  };
  v.bos = id("tokenizer.ggml.bos_token_id", 1);
  v.eos = id("tokenizer.ggml.eos_token_id", 2);
  v.unk = id("tokenizer.ggml.unknown_token_id", 0);
  return v;
}

SyntheticModelSpec demo_model_spec() {
  SyntheticModelSpec s;
  s.name = "hearth-demo (synthetic, random weights)";
  return s;
}

absl::StatusOr<std::string> synthesize_model(const SyntheticModelSpec& s) {
  auto bad = [](std::string_view what) {
    return absl::InvalidArgumentError(str_cat("synthetic model: ", what));
  };
  if (s.n_embd == 0 || s.n_layer == 0 || s.n_head == 0 || s.n_head_kv == 0 || s.n_ff == 0) {
    return bad("every dimension must be positive");
  }
  if (s.n_embd % s.n_head != 0)
    return bad(str_cat("dim ", s.n_embd, " is not a multiple of heads ", s.n_head));
  if (s.n_head % s.n_head_kv != 0)
    return bad(str_cat("heads ", s.n_head, " is not a multiple of kv heads ", s.n_head_kv));
  if ((s.n_embd / s.n_head) % 2 != 0) return bad("the head dimension must be even");
  if (s.n_vocab < 300) return bad(str_cat("vocab ", s.n_vocab, " is below the minimum of 300"));
  if (s.vocabulary &&
      (s.vocabulary->tokens.size() != s.n_vocab || s.vocabulary->scores.size() != s.n_vocab ||
       s.vocabulary->types.size() != s.n_vocab))
    return bad(str_cat("vocab ", s.n_vocab, " differs from the given vocabulary's ",
                       s.vocabulary->tokens.size(), " tokens, scores or types"));
  const ArchitectureSpec* arch = find_architecture(s.architecture);
  if (arch == nullptr)
    return bad(str_cat("architecture '", s.architecture, "' is not one of ", architecture_names()));
  if (s.sliding_window != 0 && arch->sliding_window.key != WindowKey::kUsed)
    return bad(str_cat("a sliding window is not part of ", s.architecture, " models"));
  if (!(s.bias_scale >= 0.0f && std::isfinite(s.bias_scale)))
    return bad(str_cat("bias_scale ", s.bias_scale, " must be finite and non-negative"));
  const bool k_quant = s.weight_type == GgmlType::kQ4_K || s.weight_type == GgmlType::kQ5_K ||
                       s.weight_type == GgmlType::kQ6_K;
  if (s.medium_mix && s.weight_type != GgmlType::kQ4_K && s.weight_type != GgmlType::kQ5_K)
    return bad(str_cat("the _M mix puts Q6_K among Q4_K or Q5_K weights, not ",
                       ggml_type_name(s.weight_type)));
  const bool blocks =
      s.weight_type == GgmlType::kQ8_0 || s.weight_type == GgmlType::kQ4_0 || k_quant;
  if (!blocks && s.weight_type != GgmlType::kF32 && s.weight_type != GgmlType::kF16) {
    return bad(str_cat("weight type ", ggml_type_name(s.weight_type),
                       " is not one of F32, F16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"));
  }
  const std::size_t row_multiple = k_quant ? 256 : 32;
  if (blocks && (s.n_embd % row_multiple != 0 || s.n_ff % row_multiple != 0)) {
    return bad(str_cat("dim ", s.n_embd, " and ffn ", s.n_ff, " must be multiples of ",
                       row_multiple, " for ", ggml_type_name(s.weight_type)));
  }
  const std::size_t head_dim = s.n_embd / s.n_head, kv_dim = head_dim * s.n_head_kv;
  GgufWriter w;
  const std::string& a = s.architecture;  // the metadata key prefix
  w.add_string("general.architecture", a);
  w.add_string("general.name", s.name);
  // llama.cpp's file types: MOSTLY_Q4_K_S 14, _M 15, Q5_K_S 16, _M 17, Q6_K 18.
  std::uint32_t file_type = 2;  // MOSTLY_Q4_0
  if (s.weight_type == GgmlType::kF32) file_type = 0;
  if (s.weight_type == GgmlType::kF16) file_type = 1;
  if (s.weight_type == GgmlType::kQ8_0) file_type = 7;
  if (s.weight_type == GgmlType::kQ4_K) file_type = s.medium_mix ? 15 : 14;
  if (s.weight_type == GgmlType::kQ5_K) file_type = s.medium_mix ? 17 : 16;
  if (s.weight_type == GgmlType::kQ6_K) file_type = 18;
  w.add_uint32("general.file_type", file_type);
  w.add_uint32(a + ".block_count", static_cast<std::uint32_t>(s.n_layer));
  w.add_uint32(a + ".embedding_length", static_cast<std::uint32_t>(s.n_embd));
  w.add_uint32(a + ".attention.head_count", static_cast<std::uint32_t>(s.n_head));
  w.add_uint32(a + ".attention.head_count_kv", static_cast<std::uint32_t>(s.n_head_kv));
  w.add_uint32(a + ".feed_forward_length", static_cast<std::uint32_t>(s.n_ff));
  w.add_uint32(a + ".context_length", static_cast<std::uint32_t>(s.context_length));
  w.add_uint32(a + ".rope.dimension_count", static_cast<std::uint32_t>(head_dim));
  w.add_float32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  add_architecture_keys(w, *arch, s);
  const SyntheticModelSpec::Vocabulary v =
      s.vocabulary ? *s.vocabulary : builtin_vocabulary(s.n_vocab);
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  w.add_float32_array("tokenizer.ggml.scores", v.scores);
  w.add_int32_array("tokenizer.ggml.token_type", v.types);
  w.add_uint32("tokenizer.ggml.bos_token_id", v.bos);
  w.add_uint32("tokenizer.ggml.eos_token_id", v.eos);
  w.add_uint32("tokenizer.ggml.unknown_token_id", v.unk);

  // Q4_K_M / Q5_K_M as llama.cpp's quantizer makes them: Q6_K for the output and for
  // attn_v and ffn_down of the first and last eighth of the layers and every
  // third one between.
  auto more_bits = [&](std::size_t layer) {
    const std::size_t n = s.n_layer;
    return layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2;
  };
  auto matrix = [&](const std::string& name, std::size_t n_in, std::size_t n_out,
                    bool q6_k_in_mix = false) {
    Stream rng(hash(s.seed, name));
    const GgmlType type = s.medium_mix && q6_k_in_mix ? GgmlType::kQ6_K : s.weight_type;
    w.add_tensor(name, {n_in, n_out}, type,
                 encode(type, n_out, n_in, rng, std::sqrt(3.0f / static_cast<float>(n_in)), 0.0f));
  };
  auto vector = [&](const std::string& name, std::size_t n, float amplitude, float offset) {
    Stream rng(hash(s.seed, name));
    w.add_tensor(name, {n}, GgmlType::kF32, encode(GgmlType::kF32, 1, n, rng, amplitude, offset));
  };
  auto norm = [&](const std::string& name, std::size_t n) { vector(name, n, 0.1f, 1.0f); };
  {
    // Rows of amplitude 1, divided by what the architecture multiplies them
    // by (Gemma sqrt(n_embd), Granite 12), so every stream starts alike.
    float amplitude = 1.0f;
    if (arch->embedding_scale_sqrt_dim) amplitude /= std::sqrt(static_cast<float>(s.n_embd));
    if (arch->granite_scales) amplitude /= kGraniteEmbeddingScale;
    Stream rng(hash(s.seed, "token_embd.weight"));
    w.add_tensor("token_embd.weight", {s.n_embd, s.n_vocab}, s.weight_type,
                 encode(s.weight_type, s.n_vocab, s.n_embd, rng, amplitude, 0.0f));
  }
  if (arch->long_short_rope_factors) {
    // Divisors of each pair's frequency, >= 1 as Phi-3's are.
    vector("rope_factors_long.weight", head_dim / 2, 0.5f, 1.5f);
    vector("rope_factors_short.weight", head_dim / 2, 0.05f, 1.05f);
  }
  const bool bias = arch->qkv_bias == Presence::kRequired;
  for (std::size_t l = 0; l < s.n_layer; ++l) {
    const std::string p = str_cat("blk.", l, ".");
    if (arch->pre_norms) norm(p + "attn_norm.weight", s.n_embd);
    if (arch->fused_qkv) {
      matrix(p + "attn_qkv.weight", s.n_embd, s.n_embd + 2 * kv_dim);
    } else {
      matrix(p + "attn_q.weight", s.n_embd, s.n_embd);
      if (bias) vector(p + "attn_q.bias", s.n_embd, s.bias_scale, 0.0f);
      matrix(p + "attn_k.weight", s.n_embd, kv_dim);
      if (bias) vector(p + "attn_k.bias", kv_dim, s.bias_scale, 0.0f);
      matrix(p + "attn_v.weight", s.n_embd, kv_dim, more_bits(l));
      if (bias) vector(p + "attn_v.bias", kv_dim, s.bias_scale, 0.0f);
    }
    if (arch->qk_norm != QkNorm::kNone) {
      const bool per_head = arch->qk_norm == QkNorm::kPerHead;
      norm(p + "attn_q_norm.weight", per_head ? head_dim : s.n_embd);
      norm(p + "attn_k_norm.weight", per_head ? head_dim : kv_dim);
    }
    matrix(p + "attn_output.weight", s.n_embd, s.n_embd);
    if (arch->post_norms) norm(p + "post_attention_norm.weight", s.n_embd);
    if (arch->pre_norms) norm(p + "ffn_norm.weight", s.n_embd);
    if (arch->fused_gate_up) {
      matrix(p + "ffn_up.weight", s.n_embd, 2 * s.n_ff);
    } else {
      matrix(p + "ffn_gate.weight", s.n_embd, s.n_ff);
      matrix(p + "ffn_up.weight", s.n_embd, s.n_ff);
    }
    matrix(p + "ffn_down.weight", s.n_ff, s.n_embd, more_bits(l));
    if (arch->post_norms) norm(p + "post_ffw_norm.weight", s.n_embd);
  }
  norm("output_norm.weight", s.n_embd);
  if (!arch->tied_output) matrix("output.weight", s.n_embd, s.n_vocab, true);
  return w.serialize();
}

}  // namespace hearth::engine
