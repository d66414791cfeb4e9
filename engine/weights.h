// A model's weights, loaded once and shared read-only by every warm instance.
//
// The tensors loaded are those the architecture's entry names
// (engine/architecture.h). Projections become kernels::Linear objects in the layout their kernel
// wants (packed at load). F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K and
// Q6_K run natively, without loss, in their file's size. Any other type is refused by name. The
// embedding table is read in place from the mapped file.
//
// Thread safety: immutable after load(); every method is const and safe from
// any thread. Owned through std::shared_ptr by the Modules that use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf.h"
#include "engine/model_config.h"
#include "kernels/dtype.h"
#include "kernels/linear.h"
#include "memory/streamed_region.h"

namespace hearth::engine {

struct LoadOptions {
  // Re-quantize float (F32/F16/BF16) projection weights at load. Projections
  // whose input width is not a multiple of 32 stay float.
  enum class Convert { kNone, kQ8_0, kQ4_0 };
  Convert convert = Convert::kNone;
  // K-quant projections run natively by default or, to measure what the
  // int8 activations cost, are kept exactly as decoded floats.
  bool kquants_as_f32 = false;
  // Threads that repack quantized weights side by side; nullptr: the
  // loading thread alone.
  kernels::ThreadPool* pool = nullptr;
};

// Aggregate-initialised by the loader (Linear has no empty state). Which of
// the vectors are filled follows the architecture (engine/architecture.h);
// fused files (attn_qkv, gate+up in ffn_up) are split into the separate
// projections at load, so the forward pass sees one shape.
struct LayerWeights {
  kernels::Linear wq, wk, wv, wo, w_gate, w_up, w_down;
  std::vector<float> attn_norm, ffn_norm;            // empty without pre-norms (OLMo 2)
  std::vector<float> bq, bk, bv;                     // empty without biases
  std::vector<float> q_norm, k_norm;                 // empty without q/k norms
  std::vector<float> post_attn_norm, post_ffn_norm;  // empty without post-norms
};

class ModelWeights {
 public:
  static absl::StatusOr<std::shared_ptr<const ModelWeights>> load(
      std::shared_ptr<const GgufFile> file, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return *file_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const std::vector<float>& output_norm() const { return output_norm_; }
  const kernels::Linear& output() const { return *output_; }
  // Token embedding table [vocab][n_embd] in `embedding_type()`'s layout.
  const void* embedding() const { return embedding_; }
  kernels::DType embedding_type() const { return embedding_type_; }
  // llama3 rope frequency factors (rot_dim/2 values), or empty.
  const std::vector<float>& rope_freq_factors() const { return rope_freqs_; }
  // Phi-3's factors for sequences whose context is within / beyond the
  // original context (config().rope_original_context), or empty.
  const std::vector<float>& rope_factors_short() const { return rope_short_; }
  const std::vector<float>& rope_factors_long() const { return rope_long_; }

  // Bytes the projections read per token (the packed weights), the same
  // projections' bytes as the file stores them (a decode roofline's bytes,
  // when the types run as stored: LoadOptions::convert reads fewer),
  // and bytes of the mapped file; a summary of tensor types ("Q8_0 x 154,
  // F32 x 45").
  std::size_t packed_bytes() const { return packed_bytes_; }
  std::size_t projection_file_bytes() const { return projection_file_bytes_; }
  std::size_t mapped_bytes() const { return file_->size(); }
  const std::string& type_summary() const { return type_summary_; }
  // The region the packed projections were carved from, back to back
  // (memory/streamed_region.h); nullptr if it could not be reserved, and
  // then each has an allocation of its own.
  const StreamedRegion* packed_region() const { return packed_region_.get(); }
  // The predominant projection type: "Q8_0", "Q4_0", "F32", "F16", ...
  const std::string& quantization() const { return quantization_; }

 private:
  ModelWeights() = default;

  ModelConfig config_;
  std::shared_ptr<const GgufFile> file_;
  std::vector<LayerWeights> layers_;
  std::vector<float> output_norm_;
  std::optional<kernels::Linear> output_;  // set by load()
  const void* embedding_ = nullptr;
  kernels::DType embedding_type_ = kernels::DType::kF32;
  std::vector<float> rope_freqs_, rope_short_, rope_long_;
  std::shared_ptr<const StreamedRegion> packed_region_;  // the Linears share it too
  std::size_t packed_bytes_ = 0;
  std::size_t projection_file_bytes_ = 0;
  std::string type_summary_;
  std::string quantization_;
};

}  // namespace hearth::engine
