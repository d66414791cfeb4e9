// Deterministic synthetic llama models: the server's built-in demo model and
// the shapes every speed benchmark runs on (`hearth-model synth`).
//
// Every architecture of engine/architecture.h: the file holds the tensors
// and keys its entry names (fused projections, q/k norms, post-norms, rope
// factors, biases for qwen2, Gemma 2's soft-capping values, Granite's scales,
// a sliding window where spec.sliding_window asks for one, Gemma 3's global
// layers with linear rope scaling 8 and freq_base 1e6). Tensors the
// architectures share are the same given the same spec and seed (each
// tensor's stream is seeded from the seed and its name).
//
// The weights are pseudo-random (uniform, scaled by 1/sqrt(fan-in) so
// activations keep their magnitude through the layers); the vocabulary is a
// SentencePiece-style ("llama") one: <unk>, <s>, </s>, the 256 byte tokens,
// then "▁"-prefixed and plain pieces built from letters. The text it generates
// is meaningless, but every code path of a real model runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf.h"

namespace hearth::engine {

struct SyntheticModelSpec {
  std::string name = "hearth-synthetic";
  std::size_t n_embd = 256;
  std::size_t n_layer = 4;
  std::size_t n_head = 8;
  std::size_t n_head_kv = 8;
  std::size_t n_ff = 704;
  std::size_t n_vocab = 4096;
  std::size_t context_length = 2048;
  // F32, F16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K (rows multiples of 256 for the
  // K-quants) for projections and embeddings.
  GgmlType weight_type = GgmlType::kQ8_0;
  // With Q4_K or Q5_K: Q6_K where llama.cpp's _M types put it (the output,
  // and attn_v and ffn_down of some layers).
  bool medium_mix = false;
  std::uint64_t seed = 1;
  std::string architecture = "llama";  // any name engine/architecture.h lists
  float bias_scale = 0.5f;             // qwen2: amplitude of the q/k/v biases (0: all zero)
  // {arch}.attention.sliding_window (0: not written); for the architectures
  // that allow one.
  std::size_t sliding_window = 0;
  // A real "llama" (SentencePiece) vocabulary instead of the built-in one,
  // for benchmarks whose cost depends on the tokens (structured output's
  // masks): pieces, scores and token types of equal length, which then
  // replace n_vocab; ids of BOS, EOS and the unknown token.
  struct Vocabulary {
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<std::int32_t> types;
    std::uint32_t bos = 1, eos = 2, unk = 0;
  };
  std::optional<Vocabulary> vocabulary;
};

// The built-in demo model: small enough to load in well under a second.
SyntheticModelSpec demo_model_spec();

// Copies the "llama" vocabulary of `file` (tokenizer.ggml.*); InvalidArgument
// names a missing key or another tokenizer model.
absl::StatusOr<SyntheticModelSpec::Vocabulary> vocabulary_of(const GgufFile& file);

// The whole GGUF file in memory. InvalidArgument names an inconsistent field
// (heads not dividing the width, a block type with rows not a multiple of 32,
// an unknown architecture, a window the architecture does not take...).
absl::StatusOr<std::string> synthesize_model(const SyntheticModelSpec& spec);

}  // namespace hearth::engine
