#include "engine/weights.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string_view>
#include <unordered_set>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "kernels/activation_ops.h"
#include "kernels/gguf_blocks.h"
#include "kernels/gguf_kquants.h"
#include "kernels/gguf_legacy_blocks.h"

namespace hearth::engine {
namespace {

using kernels::BlockQ4_K;
using kernels::BlockQ5_K;
using kernels::BlockQ6_K;
using kernels::Linear;

absl::Status bad_tensor(const GgufFile& f, const GgufTensorInfo& t, std::string_view problem) {
  return absl::InvalidArgumentError(str_cat("model '", f.name(), "': tensor '", t.name, "' (",
                                            ggml_type_name(t.type), ", info at offset ",
                                            t.info_offset, "): ", problem));
}

absl::Status check_shape(const GgufFile& f, const GgufTensorInfo& t, std::uint64_t ne0,
                         std::uint64_t ne1) {
  const bool ok = ne1 == 0 ? (t.n_dims == 1 && t.dims[0] == ne0)
                           : (t.n_dims == 2 && t.dims[0] == ne0 && t.dims[1] == ne1);
  if (ok) return absl::OkStatus();
  std::string got = str_cat(t.dims[0]);
  for (std::uint32_t d = 1; d < t.n_dims; ++d) got += str_cat(" x ", t.dims[d]);
  return bad_tensor(
      f, t, str_cat("has shape [", got, "], expected [", ne0, ne1 ? str_cat(" x ", ne1) : "", "]"));
}

// Decodes any supported tensor type to float (used for norms, and for float
// or K-quant weights converted at load); `pool` widens F16 and BF16.
absl::StatusOr<std::vector<float>> to_float(const GgufFile& f, const GgufTensorInfo& t,
                                            kernels::ThreadPool* pool = nullptr) {
  std::vector<float> out(t.n_elements);
  const std::size_t n = out.size();
  switch (t.type) {
    case GgmlType::kF32:
      std::memcpy(out.data(), t.data, n * 4);
      break;
    case GgmlType::kF16:
      kernels::widen_f16(reinterpret_cast<const std::uint16_t*>(t.data), n, out.data(), pool);
      break;
    case GgmlType::kBF16:
      kernels::widen_bf16(reinterpret_cast<const std::uint16_t*>(t.data), n, out.data(), pool);
      break;
    case GgmlType::kQ8_0:
      kernels::dequantize_row_q8_0(reinterpret_cast<const kernels::BlockQ8_0*>(t.data), out.data(),
                                   n);
      break;
    case GgmlType::kQ4_0:
      kernels::dequantize_row_q4_0(reinterpret_cast<const kernels::BlockQ4_0*>(t.data), out.data(),
                                   n);
      break;
    case GgmlType::kQ4_K:
      dequantize_row_q4_k(reinterpret_cast<const BlockQ4_K*>(t.data), out.data(), n);
      break;
    case GgmlType::kQ5_K:
      dequantize_row_q5_k(reinterpret_cast<const BlockQ5_K*>(t.data), out.data(), n);
      break;
    case GgmlType::kQ6_K:
      dequantize_row_q6_k(reinterpret_cast<const BlockQ6_K*>(t.data), out.data(), n);
      break;
    case GgmlType::kQ4_1:
      kernels::dequantize_row_q4_1(reinterpret_cast<const kernels::BlockQ4_1*>(t.data), out.data(),
                                   n);
      break;
    case GgmlType::kQ5_0:
      kernels::dequantize_row_q5_0(reinterpret_cast<const kernels::BlockQ5_0*>(t.data), out.data(),
                                   n);
      break;
    case GgmlType::kQ5_1:
      kernels::dequantize_row_q5_1(reinterpret_cast<const kernels::BlockQ5_1*>(t.data), out.data(),
                                   n);
      break;
    case GgmlType::kIQ4_NL:
      kernels::dequantize_row_iq4_nl(reinterpret_cast<const kernels::BlockIQ4_NL*>(t.data),
                                     out.data(), n);
      break;
    default:
      return bad_tensor(f, t,
                        str_cat("type ", ggml_type_name(t.type),
                                " is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                                "Q5_1, IQ4_NL, Q4_K, Q5_K, Q6_K)"));
  }
  return out;
}

std::vector<kernels::BlockQ8_0> to_q8_0(const std::vector<float>& x) {
  std::vector<kernels::BlockQ8_0> q(x.size() / 32);
  kernels::quantize_row_q8_0(x.data(), q.data(), x.size());
  return q;
}

// More address space than the packed projections of `f` can take: 2 bytes
// a weight (halves; Q8_0 takes 1.0625) plus a row group's padding and
// scales per 16 rows, for every tensor of two or more dimensions (a fused
// tensor's parts each pad their last row group). Only what is written
// becomes resident.
std::size_t packed_bytes_bound(const GgufFile& f) {
  std::size_t bound = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.n_dims < 2) continue;
    const std::size_t n_in = t.dims[0], rows = t.n_elements / n_in;
    bound += (rows + 64) * (2 * n_in + 64);
  }
  return bound;
}

struct Loader {
  const GgufFile& f;
  const LoadOptions& options;
  std::map<std::string, int> type_counts;
  std::size_t packed_bytes = 0;
  std::size_t file_bytes = 0;  // the same projections as the file stores them
  // Every projection's packed weights, back to back on huge pages (nullptr:
  // each gets an allocation of its own).
  std::shared_ptr<StreamedRegion> region;

  // The names of the tensors read so far: a file holding any other is
  // refused (unused_tensor()), as llama.cpp refuses one, rather than run
  // without, say, a bias the model was trained with.
  std::unordered_set<std::string_view> used;

  kernels::Packing packing() const { return {options.pool, region}; }

  absl::StatusOr<const GgufTensorInfo*> find(const std::string& name) {
    const GgufTensorInfo* t = f.find_tensor(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          str_cat("model '", f.name(), "' is missing the tensor '", name, "'"));
    }
    used.insert(t->name);
    return t;
  }

  // A refusal naming the first tensor of the file whose name starts with
  // `prefix` and that no one read.
  absl::Status unused_tensor(const ModelConfig& c, std::string_view prefix) const {
    for (const GgufTensorInfo& t : f.tensors()) {
      if (!t.name.starts_with(prefix) || used.contains(t.name)) continue;
      return absl::UnimplementedError(str_cat("model '", f.name(), "': tensor '", t.name,
                                              "' is not part of ", c.arch_name,
                                              " models as hearth runs them"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Linear> linear(const std::string& name, std::size_t n_in, std::size_t n_out,
                                bool keep_pages = false) {
    HEARTH_ASSIGN_OR_RETURN(auto t, find(name));
    if (auto s = check_shape(f, *t, n_in, n_out); !s.ok()) return s;
    auto l = build(*t, n_in, n_out);
    if (!keep_pages) f.release_pages(*t);
    return l;
  }

  // A fused tensor's consecutive row ranges, each its own projection (Phi-3's
  // attn_qkv and gate+up): a row is whole blocks, so a range is a slice.
  absl::Status linear_parts(const std::string& name, std::size_t n_in,
                            std::initializer_list<std::size_t> parts, std::vector<Linear>& out) {
    HEARTH_ASSIGN_OR_RETURN(auto t, find(name));
    std::size_t rows = 0;
    for (std::size_t p : parts) rows += p;
    if (auto s = check_shape(f, *t, n_in, rows); !s.ok()) return s;
    std::size_t block_elems = 0, block_bytes = 0;
    if (!ggml_type_block(t->type, &block_elems, &block_bytes) || n_in % block_elems != 0)
      return bad_tensor(f, *t, "cannot be split into row ranges");
    const std::size_t row_bytes = n_in / block_elems * block_bytes;
    std::size_t row0 = 0;
    for (std::size_t p : parts) {
      GgufTensorInfo slice = *t;
      slice.dims[1] = p;
      slice.n_elements = p * n_in;
      slice.n_bytes = p * row_bytes;
      slice.data = t->data + row0 * row_bytes;
      HEARTH_ASSIGN_OR_RETURN(auto l, build(slice, n_in, p));
      out.push_back(std::move(l));
      row0 += p;
    }
    f.release_pages(*t);
    return absl::OkStatus();
  }

  // The projection of tensor `ti` (shape checked by the caller).
  absl::StatusOr<Linear> build(const GgufTensorInfo& ti, std::size_t n_in, std::size_t n_out) {
    absl::StatusOr<Linear> l = absl::InternalError("unset");
    const bool is_float =
        ti.type == GgmlType::kF32 || ti.type == GgmlType::kF16 || ti.type == GgmlType::kBF16;
    // Float weights are re-quantized on request when their rows allow blocks of 32.
    const bool converted =
        is_float && options.convert != LoadOptions::Convert::kNone && n_in % 32 == 0;
    if (converted) {
      HEARTH_ASSIGN_OR_RETURN(auto x, to_float(f, ti, options.pool));
      if (options.convert == LoadOptions::Convert::kQ8_0) {
        l = Linear::from_q8_0(to_q8_0(x).data(), n_out, n_in, packing());
      } else {
        std::vector<kernels::BlockQ4_0> q(x.size() / 32);
        kernels::quantize_row_q4_0(x.data(), q.data(), x.size());
        l = Linear::from_q4_0(q.data(), n_out, n_in, packing());
      }
    } else {
      switch (ti.type) {
        case GgmlType::kF32:
          l = Linear::from_f32(reinterpret_cast<const float*>(ti.data), n_out, n_in);
          break;
        case GgmlType::kF16:
          l = Linear::from_f16(reinterpret_cast<const std::uint16_t*>(ti.data), n_out, n_in,
                               packing());
          break;
        case GgmlType::kBF16:
          l = Linear::from_bf16(reinterpret_cast<const std::uint16_t*>(ti.data), n_out, n_in,
                                packing());
          break;
        case GgmlType::kQ8_0:
          l = Linear::from_q8_0(reinterpret_cast<const kernels::BlockQ8_0*>(ti.data), n_out, n_in,
                                packing());
          break;
        case GgmlType::kQ4_0:
          l = Linear::from_q4_0(reinterpret_cast<const kernels::BlockQ4_0*>(ti.data), n_out, n_in,
                                packing());
          break;
        case GgmlType::kIQ4_NL:
          l = Linear::from_iq4_nl(reinterpret_cast<const kernels::BlockIQ4_NL*>(ti.data), n_out,
                                  n_in, packing());
          break;
        case GgmlType::kQ4_1:
          l = Linear::from_q4_1(reinterpret_cast<const kernels::BlockQ4_1*>(ti.data), n_out, n_in,
                                packing());
          break;
        case GgmlType::kQ5_0:
          l = Linear::from_q5_0(reinterpret_cast<const kernels::BlockQ5_0*>(ti.data), n_out, n_in,
                                packing());
          break;
        case GgmlType::kQ5_1:
          l = Linear::from_q5_1(reinterpret_cast<const kernels::BlockQ5_1*>(ti.data), n_out, n_in,
                                packing());
          break;
        case GgmlType::kQ4_K:
        case GgmlType::kQ5_K:
        case GgmlType::kQ6_K: {
          if (options.kquants_as_f32) {
            HEARTH_ASSIGN_OR_RETURN(auto x, to_float(f, ti));
            l = Linear::from_f32(x.data(), n_out, n_in);
          } else if (ti.type == GgmlType::kQ4_K) {
            l = Linear::from_q4_k(reinterpret_cast<const BlockQ4_K*>(ti.data), n_out, n_in,
                                  packing());
          } else if (ti.type == GgmlType::kQ5_K) {
            l = Linear::from_q5_k(reinterpret_cast<const BlockQ5_K*>(ti.data), n_out, n_in,
                                  packing());
          } else {
            l = Linear::from_q6_k(reinterpret_cast<const BlockQ6_K*>(ti.data), n_out, n_in,
                                  packing());
          }
          break;
        }
        default:  // to_float() refuses every type not handled here, naming it
          return to_float(f, ti).status();
      }
    }
    if (!l.ok()) return bad_tensor(f, ti, std::string(l.status().message()));
    std::string type = ggml_type_name(ti.type);
    if (converted) type += options.convert == LoadOptions::Convert::kQ8_0 ? "->Q8_0" : "->Q4_0";
    ++type_counts[type];
    packed_bytes += l->weight_bytes();
    file_bytes += ti.n_bytes;
    return l;
  }

  absl::StatusOr<std::vector<float>> vector(const std::string& name, std::size_t n) {
    HEARTH_ASSIGN_OR_RETURN(auto t, find(name));
    if (auto s = check_shape(f, *t, n, 0); !s.ok()) return s;
    return to_float(f, *t);
  }
};

// One layer's tensors, as the architecture's entry names them. The norms
// come first and the projections in file order (q, k, v, o, gate, up,
// down): a projection's file pages are dropped once it is packed, and a
// read out of order could fault released neighbours back in (the kernel
// maps page-cache folios larger than a page).
absl::StatusOr<LayerWeights> load_layer(Loader& ld, const ModelConfig& c, const std::string& p) {
  const ArchitectureSpec& arch = *c.arch;
  const std::size_t d = c.n_embd;
  struct Norms {
    std::vector<float> attn, ffn, post_attn, post_ffn, q, k;
  } n;
  auto vec = [&](std::vector<float>& out, const char* name, std::size_t size,
                 bool wanted) -> absl::Status {
    if (!wanted) return absl::OkStatus();
    HEARTH_ASSIGN_OR_RETURN(out, ld.vector(p + name + ".weight", size));
    return absl::OkStatus();
  };
  const bool per_head = arch.qk_norm == QkNorm::kPerHead;
  const bool qk = arch.qk_norm != QkNorm::kNone;
  HEARTH_RETURN_IF_ERROR(vec(n.attn, "attn_norm", d, arch.pre_norms));
  HEARTH_RETURN_IF_ERROR(vec(n.ffn, "ffn_norm", d, arch.pre_norms));
  HEARTH_RETURN_IF_ERROR(vec(n.post_attn, "post_attention_norm", d, arch.post_norms));
  HEARTH_RETURN_IF_ERROR(vec(n.post_ffn, "post_ffw_norm", d, arch.post_norms));
  HEARTH_RETURN_IF_ERROR(vec(n.q, "attn_q_norm", per_head ? c.head_dim : c.q_dim(), qk));
  HEARTH_RETURN_IF_ERROR(vec(n.k, "attn_k_norm", per_head ? c.head_dim : c.kv_dim(), qk));

  std::vector<Linear> qkv, gate_up;
  if (arch.fused_qkv) {
    HEARTH_RETURN_IF_ERROR(
        ld.linear_parts(p + "attn_qkv.weight", d, {c.q_dim(), c.kv_dim(), c.kv_dim()}, qkv));
  } else {
    for (const char* name : {"attn_q", "attn_k", "attn_v"}) {
      const std::size_t rows = name[5] == 'q' ? c.q_dim() : c.kv_dim();
      HEARTH_ASSIGN_OR_RETURN(auto l, ld.linear(p + name + ".weight", d, rows));
      qkv.push_back(std::move(l));
    }
  }
  HEARTH_ASSIGN_OR_RETURN(auto wo, ld.linear(p + "attn_output.weight", c.q_dim(), d));
  if (arch.fused_gate_up) {
    HEARTH_RETURN_IF_ERROR(ld.linear_parts(p + "ffn_up.weight", d, {c.n_ff, c.n_ff}, gate_up));
  } else {
    for (const char* name : {"ffn_gate", "ffn_up"}) {
      HEARTH_ASSIGN_OR_RETURN(auto l, ld.linear(p + name + ".weight", d, c.n_ff));
      gate_up.push_back(std::move(l));
    }
  }
  HEARTH_ASSIGN_OR_RETURN(auto wd, ld.linear(p + "ffn_down.weight", c.n_ff, d));
  LayerWeights L{std::move(qkv[0]),
                 std::move(qkv[1]),
                 std::move(qkv[2]),
                 std::move(wo),
                 std::move(gate_up[0]),
                 std::move(gate_up[1]),
                 std::move(wd),
                 std::move(n.attn),
                 std::move(n.ffn),
                 {},
                 {},
                 {},
                 std::move(n.q),
                 std::move(n.k),
                 std::move(n.post_attn),
                 std::move(n.post_ffn)};
  if (c.attn_bias) {
    HEARTH_ASSIGN_OR_RETURN(L.bq, ld.vector(p + "attn_q.bias", c.q_dim()));
    HEARTH_ASSIGN_OR_RETURN(L.bk, ld.vector(p + "attn_k.bias", c.kv_dim()));
    HEARTH_ASSIGN_OR_RETURN(L.bv, ld.vector(p + "attn_v.bias", c.kv_dim()));
  }
  return L;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ModelWeights>> ModelWeights::load(
    std::shared_ptr<const GgufFile> file, const LoadOptions& options) {
  HEARTH_ASSIGN_OR_RETURN(auto config, read_model_config(*file));
  std::shared_ptr<ModelWeights> w(new ModelWeights());
  w->config_ = config;
  w->file_ = file;
  const ModelConfig& c = w->config_;
  const GgufFile& f = *file;
  Loader ld{f, options, {}, 0, 0, StreamedRegion::reserve(packed_bytes_bound(f)), {}};
  w->packed_region_ = ld.region;

  for (std::size_t i = 0; i < c.n_layer; ++i) {
    const std::string prefix = str_cat("blk.", i, ".");
    HEARTH_ASSIGN_OR_RETURN(auto layer, load_layer(ld, c, prefix));
    // Layer 0's extras are refused before the others are packed.
    if (i == 0) HEARTH_RETURN_IF_ERROR(ld.unused_tensor(c, prefix));
    w->layers_.push_back(std::move(layer));
  }
  HEARTH_ASSIGN_OR_RETURN(auto norm, ld.vector("output_norm.weight", c.n_embd));
  w->output_norm_ = std::move(norm);

  // The embedding table, read in place when its type is native.
  HEARTH_ASSIGN_OR_RETURN(auto emb, ld.find("token_embd.weight"));
  const GgufTensorInfo& et = *emb;
  if (auto s = check_shape(f, et, c.n_embd, c.n_vocab); !s.ok()) return s;
  switch (et.type) {
    case GgmlType::kF32:
      w->embedding_type_ = kernels::DType::kF32;
      break;
    case GgmlType::kF16:
      w->embedding_type_ = kernels::DType::kF16;
      break;
    case GgmlType::kBF16:
      w->embedding_type_ = kernels::DType::kBF16;
      break;
    case GgmlType::kQ8_0:
      w->embedding_type_ = kernels::DType::kQ8_0;
      break;
    case GgmlType::kQ4_0:
      w->embedding_type_ = kernels::DType::kQ4_0;
      break;
    case GgmlType::kQ4_K:
      w->embedding_type_ = kernels::DType::kQ4_K;
      break;
    case GgmlType::kQ5_K:
      w->embedding_type_ = kernels::DType::kQ5_K;
      break;
    case GgmlType::kQ6_K:
      w->embedding_type_ = kernels::DType::kQ6_K;
      break;
    case GgmlType::kIQ4_NL:
      w->embedding_type_ = kernels::DType::kIQ4_NL;
      break;
    case GgmlType::kQ4_1:
      w->embedding_type_ = kernels::DType::kQ4_1;
      break;
    case GgmlType::kQ5_0:
      w->embedding_type_ = kernels::DType::kQ5_0;
      break;
    case GgmlType::kQ5_1:
      w->embedding_type_ = kernels::DType::kQ5_1;
      break;
    default:
      // Every other type to_float() reads has a case above; it refuses the
      // rest, naming the type.
      return to_float(f, et).status();
  }
  w->embedding_ = et.data;

  // The output projection, or the embedding table reused (tied weights). Tied
  // tables keep their pages: the embedding lookup still reads them in place.
  auto out = ld.linear(c.tied_output ? "token_embd.weight" : "output.weight", c.n_embd, c.n_vocab,
                       /*keep_pages=*/c.tied_output);
  if (!out.ok()) return out.status();
  w->output_.emplace(std::move(*out));

  if (c.has_rope_freq_factors) {
    HEARTH_ASSIGN_OR_RETURN(w->rope_freqs_, ld.vector("rope_freqs.weight", c.rope_dim / 2));
  }
  if (c.rope_original_context != 0) {
    HEARTH_ASSIGN_OR_RETURN(w->rope_long_, ld.vector("rope_factors_long.weight", c.rope_dim / 2));
    HEARTH_ASSIGN_OR_RETURN(w->rope_short_, ld.vector("rope_factors_short.weight", c.rope_dim / 2));
  }
  HEARTH_RETURN_IF_ERROR(ld.unused_tensor(c, ""));
  if (ld.region != nullptr) ld.region->release_unused();
  w->packed_bytes_ = ld.packed_bytes;
  w->projection_file_bytes_ = ld.file_bytes;
  int best = 0;
  for (const auto& [type, count] : ld.type_counts) {
    if (!w->type_summary_.empty()) w->type_summary_ += ", ";
    w->type_summary_ += str_cat(type, " x ", count);
    if (count > best) {
      best = count;
      w->quantization_ = type;
    }
  }
  return std::shared_ptr<const ModelWeights>(std::move(w));
}

}  // namespace hearth::engine
