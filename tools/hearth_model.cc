// hearth-model: look at, tokenize with, quantize, synthesize and measure GGUF models.
//
//   hearth-model inspect FILE
//   hearth-model tokenize FILE [--bos|--no-bos] [--parse-special|--no-parse-special] < text
//   hearth-model render-chat FILE --messages FILE.json [--template FILE] [--tools FILE.json]
//                            [--no-generation-prompt]
//   hearth-model quantize IN OUT --type q8_0|q4_0|q4_1|q5_0|q5_1
//   hearth-model perplexity FILE --text FILE [--context N --kv-cache int8|float
//                           --save-logits FILE | --kl-base FILE]
//   hearth-model synth OUT [--dim N --layers N --heads N --kv-heads N --ffn N --vocab N --context N
//                           --type f32|f16|q8_0|q4_0|q4_k|q4_k_m|q5_k|q5_k_m|q6_k --seed N --name
//                           TEXT --arch NAME --sliding-window N]
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/cli_flags.h"
#include "base/json_shape.h"
#include "base/read_file.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "base/write_file.h"
#include "chat/chat_prompt.h"
#include "engine/architecture.h"
#include "engine/gguf_writer.h"
#include "engine/module.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "kernels/fp16.h"
#include "kernels/gguf_blocks.h"
#include "kernels/gguf_kquants.h"
#include "kernels/gguf_legacy_blocks.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tools/perplexity.h"

namespace {

using namespace hearth;
using engine::GgmlType;
using engine::GgufValueType;

constexpr const char* kUsage = R"(usage:
  hearth-model inspect FILE              metadata and tensors
  hearth-model tokenize FILE [flags]     text on stdin -> token ids (one JSON array) on stdout
      --bos / --no-bos                   add BOS (default: the model's rule; llama vocabularies add it)
      --parse-special / --no-parse-special
                                         turn special-token text such as <s> into its id (default: off)
  hearth-model render-chat FILE --messages FILE.json [flags]
                                         the prompt text the server's Chat would tokenize for
                                         these messages (a JSON list), exactly, on stdout; a
                                         template error on stderr and exit status 1
      --template FILE                    a Jinja chat template instead of the model's own
      --tools FILE.json                  tool definitions (a JSON list) the template sees
      --no-generation-prompt             end without opening the assistant's turn
  hearth-model quantize IN OUT --type q8_0|q4_0|q4_1|q5_0|q5_1
                                         F32/F16/BF16 2-D weights -> that type; rows whose length is
                                         not a multiple of 32 stay as they are; 1-D tensors stay F32;
                                         for the 4- and 5-bit types the output projection (or the
                                         tied embedding) is Q6_K, or Q8_0 for rows not a multiple of
                                         256, as llama-quantize writes it
  hearth-model perplexity FILE --text FILE [flags]
                                         perplexity of the model over a text (llama.cpp's method:
                                         chunks of --context tokens from an empty KV cache, BOS
                                         first, the second half of each chunk scored)
      --context N                        tokens per chunk (default: 512, or the model's context
                                         if smaller; with --kl-base, the base's)
      --kv-cache int8|float              KV cache type (default int8, as the server)
      --save-logits FILE                 save the scored tokens' log-probabilities (float32)
      --kl-base FILE                     compare with a saved run of the same text: KL divergence
                                         (mean, p99, max), top-1 agreement, both PPLs
  hearth-model synth OUT [--dim 256 --layers 4 --heads 8 --kv-heads 8 --ffn 704 --vocab 4096
                          --context 2048 --type q8_0 --seed 1 --name TEXT --vocab-from GGUF
                          --arch llama --sliding-window 0]
                                         (--type f32, f16, q8_0, q4_0, q4_k[_m], q5_k[_m] or q6_k;
                                         --vocab-from: another file's "llama" vocabulary, e.g.
                                         Llama 2's 32,000 pieces, instead of the built-in one)
                                         --arch: llama, qwen2, qwen3, phi3, gemma2, gemma3,
                                         granite or olmo2 (each with its own tensors and keys);
                                         --sliding-window N: {arch}.attention.sliding_window
                                         (default 0: none; Gemma 2 4096, Gemma 3 1024)
                                         a deterministic synthetic model with random weights
)";

int fail(const std::string& m) {
  std::fprintf(stderr, "%s\n", m.c_str());
  return 2;
}

// `status` with `prefix` (the flag or file it concerns) before its message.
absl::Status prefixed(const std::string& prefix, const absl::Status& status) {
  return absl::Status(status.code(), prefix + std::string(status.message()));
}

std::string describe(const engine::GgufValue& v) {
  switch (v.type) {
    case GgufValueType::kString:
      return hearth::json_string(std::string(v.str.substr(0, 200)));
    case GgufValueType::kBool:
      return v.scalar.b ? "true" : "false";
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64:
      return hearth::str_cat(v.scalar.f64);
    case GgufValueType::kInt8:
    case GgufValueType::kInt16:
    case GgufValueType::kInt32:
    case GgufValueType::kInt64:
      return hearth::str_cat(v.scalar.i64);
    case GgufValueType::kArray:
      return hearth::str_cat("[", engine::gguf_value_type_name(v.array_type), " x ", v.array_count,
                             "]");
    default:
      return hearth::str_cat(v.scalar.u64);
  }
}

absl::StatusOr<std::shared_ptr<const engine::GgufFile>> open(const std::string& path) {
  HEARTH_ASSIGN_OR_RETURN(auto f, engine::GgufFile::open(path));
  return std::shared_ptr<const engine::GgufFile>(std::move(f));
}

int inspect(int argc, char** argv) {
  hearth::Flags flags("hearth-model inspect", {}, {});
  if (!flags.parse(argc, argv, 2)) return fail(flags.error());
  if (flags.positional().size() != 1) return fail("hearth-model inspect: expected one FILE");
  auto f = open(flags.positional()[0]);
  if (!f.ok()) return fail("hearth-model: " + std::string(f.status().message()));
  const auto& g = **f;
  std::printf(
      "file: %s\nGGUF version %u, %zu bytes, alignment %zu, tensor data at %zu\n\nmetadata "
      "(%zu):\n",
      g.name().c_str(), g.version(), g.size(), g.alignment(), g.data_offset(), g.metadata().size());
  for (const auto& kv : g.metadata()) {
    std::printf("  %-48s %-8s %s\n", std::string(kv.key).c_str(),
                engine::gguf_value_type_name(kv.value.type), describe(kv.value).c_str());
  }
  std::printf("\ntensors (%zu):\n", g.tensors().size());
  std::map<std::string, std::uint64_t> bytes_by_type;
  for (const auto& t : g.tensors()) {
    std::string dims = std::to_string(t.dims[0]);
    for (std::uint32_t d = 1; d < t.n_dims; ++d) dims += " x " + std::to_string(t.dims[d]);
    std::printf("  %-36s %-6s [%s] offset %llu, %llu bytes\n", std::string(t.name).c_str(),
                engine::ggml_type_name(t.type).c_str(), dims.c_str(),
                static_cast<unsigned long long>(t.offset),
                static_cast<unsigned long long>(t.n_bytes));
    bytes_by_type[engine::ggml_type_name(t.type)] += t.n_bytes;
  }
  std::printf("\nbytes by type:");
  for (const auto& [type, b] : bytes_by_type)
    std::printf(" %s %llu;", type.c_str(), static_cast<unsigned long long>(b));
  std::printf("\n");
  return 0;
}

int tokenize(int argc, char** argv) {
  hearth::Flags flags("hearth-model tokenize", {}, {"bos", "parse-special"});
  if (!flags.parse(argc, argv, 2)) return fail(flags.error());
  if (flags.positional().size() != 1)
    return fail("hearth-model tokenize: expected one FILE (text comes on stdin)");
  auto f = open(flags.positional()[0]);
  if (!f.ok()) return fail("hearth-model: " + std::string(f.status().message()));
  auto tok = engine::Tokenizer::from_gguf(**f);
  if (!tok.ok()) return fail("hearth-model: " + std::string(tok.status().message()));
  absl::StatusOr<std::string> read = read_whole_fd(0, "stdin");
  if (!read.ok())
    return fail("hearth-model tokenize: the text on stdin: " +
                std::string(read.status().message()));
  const std::string text = std::move(*read);
  engine::TokenizeOptions o;
  o.add_bos = flags.get_bool("bos");
  o.parse_special = flags.get_bool("parse-special").value_or(false);
  auto ids = (*tok)->encode(text, o);
  if (!ids.ok()) return fail("hearth-model: " + std::string(ids.status().message()));
  std::string out = "[";
  for (std::size_t i = 0; i < ids->size(); ++i) {
    if (i) out += ", ";
    out += std::to_string((*ids)[i]);
  }
  std::printf("%s]\n", out.c_str());
  return 0;
}

// The JSON in `path`, or a message naming the file.
absl::StatusOr<nlohmann::ordered_json> read_json(const std::string& path) {
  HEARTH_ASSIGN_OR_RETURN(const std::string text, read_whole_file(path));
  if (const std::string problem = json_shape_problem(text); !problem.empty())
    return absl::InvalidArgumentError(str_cat("'", path, "': ", problem));
  nlohmann::ordered_json value = nlohmann::ordered_json::parse(text, nullptr, false);
  if (value.is_discarded()) return absl::InvalidArgumentError(str_cat("'", path, "': not JSON"));
  return value;
}

int render_chat(int argc, char** argv) {
  hearth::Flags flags("hearth-model render-chat", {"messages", "template", "tools"},
                      {"generation-prompt"});
  if (!flags.parse(argc, argv, 2)) return fail(flags.error());
  if (flags.positional().size() != 1 || !flags.has("messages"))
    return fail("hearth-model render-chat: expected FILE and --messages FILE.json");
  auto f = open(flags.positional()[0]);
  if (!f.ok()) return fail("hearth-model: " + std::string(f.status().message()));
  auto tok = engine::Tokenizer::from_gguf(**f);
  if (!tok.ok()) return fail("hearth-model: " + std::string(tok.status().message()));
  chat::ChatContext context;
  absl::StatusOr<nlohmann::ordered_json> messages = read_json(flags.get("messages"));
  if (!messages.ok())
    return fail("hearth-model: --messages: " + std::string(messages.status().message()));
  if (!messages->is_array())
    return fail("hearth-model: --messages: '" + flags.get("messages") + "' is not a JSON list");
  context.messages = std::move(*messages);
  if (flags.has("tools")) {
    absl::StatusOr<nlohmann::ordered_json> tools = read_json(flags.get("tools"));
    if (!tools.ok()) return fail("hearth-model: --tools: " + std::string(tools.status().message()));
    context.tools = std::move(*tools);
  }
  context.add_generation_prompt = flags.get_bool("generation-prompt").value_or(true);
  const engine::Tokenizer& t = **tok;
  absl::StatusOr<std::string_view> own = (*f)->get_string("tokenizer.chat_template");
  absl::StatusOr<chat::ChatPrompt> prompt = chat::ChatPrompt::load(
      flags.get("template"), own.ok() ? std::optional<std::string_view>(*own) : std::nullopt,
      std::string(t.bos() >= 0 ? t.piece(t.bos()) : std::string_view()),
      std::string(t.eos() >= 0 ? t.piece(t.eos()) : std::string_view()), "--template");
  if (!prompt.ok()) return fail("hearth-model: " + std::string(prompt.status().message()));
  absl::StatusOr<std::string> text = prompt->render(std::move(context));
  if (!text.ok()) {
    std::fprintf(stderr, "hearth-model: %s\n", std::string(text.status().message()).c_str());
    return 1;
  }
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}

// The float types `quantize` reads.
bool is_float(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16;
}

// A 2-D float tensor as floats (F32, F16 or BF16), or nullopt for other types.
std::optional<std::vector<float>> float_data(const engine::GgufTensorInfo& t) {
  if (!is_float(t.type)) return std::nullopt;
  std::vector<float> x(t.n_elements);
  if (t.type == GgmlType::kF32) {
    std::memcpy(x.data(), t.data, x.size() * 4);
    return x;
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::uint16_t h;
    std::memcpy(&h, t.data + 2 * i, 2);
    x[i] = t.type == GgmlType::kF16 ? kernels::fp16_to_f32(h) : kernels::bf16_to_f32(h);
  }
  return x;
}

// The block types `hearth-model quantize` writes: GGUF type, general.file_type
// (llama.cpp's MOSTLY_* value), bytes per 32 weights and the encoder.
struct QuantizeType {
  const char* name;
  GgmlType ggml;
  std::uint32_t file_type;
  std::size_t block_elements, block_bytes;
  void (*encode)(const float* x, char* out, std::size_t n);
};

template <typename Block, void (*kEncode)(const float*, Block*, std::size_t)>
void encode_blocks(const float* x, char* out, std::size_t n) {
  kEncode(x, reinterpret_cast<Block*>(out), n);
}

const QuantizeType* quantize_type(const std::string& name) {
  using namespace kernels;
  static constexpr QuantizeType kTypes[] = {
      {"q8_0", GgmlType::kQ8_0, 7, 32, sizeof(BlockQ8_0),
       encode_blocks<BlockQ8_0, quantize_row_q8_0>},
      {"q4_0", GgmlType::kQ4_0, 2, 32, sizeof(BlockQ4_0),
       encode_blocks<BlockQ4_0, quantize_row_q4_0>},
      {"q4_1", GgmlType::kQ4_1, 3, 32, sizeof(BlockQ4_1),
       encode_blocks<BlockQ4_1, quantize_row_q4_1>},
      {"q5_0", GgmlType::kQ5_0, 8, 32, sizeof(BlockQ5_0),
       encode_blocks<BlockQ5_0, quantize_row_q5_0>},
      {"q5_1", GgmlType::kQ5_1, 9, 32, sizeof(BlockQ5_1),
       encode_blocks<BlockQ5_1, quantize_row_q5_1>},
  };
  for (const QuantizeType& t : kTypes)
    if (name == t.name) return &t;
  return nullptr;
}

// The output projection's type (the token embedding's when the file ties
// the two): more precise than a 4- or 5-bit target, as llama-quantize
// chooses: Q6_K where its rows are whole 256-element blocks, else Q8_0.
const QuantizeType& output_type(const QuantizeType& target, std::uint64_t row) {
  using namespace kernels;
  static constexpr QuantizeType kQ6_K = {
      "q6_k", GgmlType::kQ6_K,   18,
      256,    sizeof(BlockQ6_K), encode_blocks<BlockQ6_K, quantize_row_q6_k>};
  if (target.ggml == GgmlType::kQ8_0) return target;
  return row % 256 == 0 ? kQ6_K : *quantize_type("q8_0");
}

int quantize(int argc, char** argv) {
  hearth::Flags flags("hearth-model quantize", {"type"}, {});
  if (!flags.parse(argc, argv, 2)) return fail(flags.error());
  if (flags.positional().size() != 2)
    return fail("hearth-model quantize: expected IN and OUT files");
  const QuantizeType* qt = quantize_type(flags.get("type"));
  if (qt == nullptr)
    return fail("hearth-model quantize: --type must be q8_0, q4_0, q4_1, q5_0 or q5_1");
  const std::string& in = flags.positional()[0];
  const std::string& out_path = flags.positional()[1];
  std::error_code same_error;
  if (std::filesystem::equivalent(in, out_path, same_error))
    return fail("hearth-model quantize: OUT '" + out_path +
                "' is IN; write the quantized copy to another file");
  auto f = open(in);
  if (!f.ok()) return fail("hearth-model: " + std::string(f.status().message()));
  const auto& g = **f;
  // A quantized weight would be copied as it is under a file type that
  // claims the new one (llama-quantize refuses to requantize too).
  for (const auto& t : g.tensors()) {
    if (t.n_dims == 2 && !is_float(t.type))
      return fail("hearth-model quantize: '" + in + "': tensor '" + std::string(t.name) +
                  "' is already " + engine::ggml_type_name(t.type) +
                  "; quantize from an F32, F16 or BF16 file");
  }
  engine::GgufWriter w(g.alignment());
  for (const auto& kv : g.metadata()) {
    if (kv.key == "general.alignment") continue;  // the writer adds it
    if (kv.key == "general.file_type") {
      w.add_uint32("general.file_type", qt->file_type);
      continue;
    }
    w.add_value(kv.key, kv.value);
  }
  if (g.find("general.file_type") == nullptr) w.add_uint32("general.file_type", qt->file_type);
  // The block layouts' version, as llama-quantize writes it (ggml's
  // GGML_QNT_VERSION; 2 since the Q4/Q5/Q8 layouts of May 2023).
  if (g.find("general.quantization_version") == nullptr)
    w.add_uint32("general.quantization_version", 2);
  const std::string_view output_name =
      g.find_tensor("output.weight") != nullptr ? "output.weight" : "token_embd.weight";
  int converted = 0, kept = 0;
  for (const auto& t : g.tensors()) {
    std::vector<std::uint64_t> dims(t.dims, t.dims + t.n_dims);
    const std::string_view raw(reinterpret_cast<const char*>(t.data), t.n_bytes);
    std::optional<std::vector<float>> x;
    if (t.n_dims == 2 && t.dims[0] % 32 == 0) x = float_data(t);
    if (!x) {
      // 1-D tensors (norms) and rows not a multiple of 32 stay as they are.
      w.add_tensor(t.name, dims, t.type, raw);
      ++kept;
      continue;
    }
    const QuantizeType& type = t.name == output_name ? output_type(*qt, t.dims[0]) : *qt;
    std::string out(x->size() / type.block_elements * type.block_bytes, '\0');
    type.encode(x->data(), out.data(), x->size());
    w.add_tensor(t.name, dims, type.ggml, out);
    if (&type != qt)
      std::fprintf(stderr, "hearth-model: %s as %s, as llama-quantize keeps it\n",
                   std::string(t.name).c_str(), engine::ggml_type_name(type.ggml).c_str());
    ++converted;
  }
  if (auto s = w.write(out_path); !s.ok()) return fail("hearth-model: " + std::string(s.message()));
  std::fprintf(stderr, "hearth-model: wrote %s: %d tensors quantized to %s, %d kept as they were\n",
               out_path.c_str(), converted, engine::ggml_type_name(qt->ggml).c_str(), kept);
  return 0;
}

int synth(int argc, char** argv) {
  hearth::Flags flags("hearth-model synth",
                      {"dim", "layers", "heads", "kv-heads", "ffn", "vocab", "vocab-from",
                       "context", "type", "seed", "name", "arch", "sliding-window"},
                      {});
  if (!flags.parse(argc, argv, 2)) return fail(flags.error());
  if (flags.positional().size() != 1) return fail("hearth-model synth: expected one OUT file");
  engine::SyntheticModelSpec s;
  std::int64_t dim = static_cast<std::int64_t>(s.n_embd),
               layers = static_cast<std::int64_t>(s.n_layer),
               heads = static_cast<std::int64_t>(s.n_head), kv_heads = -1,
               ffn = static_cast<std::int64_t>(s.n_ff),
               vocab = static_cast<std::int64_t>(s.n_vocab),
               context = static_cast<std::int64_t>(s.context_length),
               seed = static_cast<std::int64_t>(s.seed), window = 0;
  const bool ok =
      flags.get_int("dim", 1, 65536, &dim) && flags.get_int("layers", 1, 1024, &layers) &&
      flags.get_int("heads", 1, 1024, &heads) && flags.get_int("kv-heads", 1, 1024, &kv_heads) &&
      flags.get_int("ffn", 1, 1 << 20, &ffn) && flags.get_int("vocab", 300, 1 << 20, &vocab) &&
      flags.get_int("context", 1, 1 << 20, &context) &&
      flags.get_int("seed", 0, INT64_MAX, &seed) &&
      flags.get_int("sliding-window", 0, 1 << 20, &window);
  if (!ok) return fail(flags.error());
  s.n_embd = static_cast<std::size_t>(dim);
  s.n_layer = static_cast<std::size_t>(layers);
  s.n_head = static_cast<std::size_t>(heads);
  s.n_head_kv = static_cast<std::size_t>(kv_heads < 0 ? heads : kv_heads);
  s.n_ff = static_cast<std::size_t>(ffn);
  s.n_vocab = static_cast<std::size_t>(vocab);
  s.context_length = static_cast<std::size_t>(context);
  s.seed = static_cast<std::uint64_t>(seed);
  s.sliding_window = static_cast<std::size_t>(window);
  s.architecture = flags.get("arch", "llama");
  if (const engine::ArchitectureSpec* arch = engine::find_architecture(s.architecture);
      arch != nullptr && !flags.has("sliding-window"))
    s.sliding_window = arch->sliding_window.synthetic_default;
  if (flags.has("name")) s.name = flags.get("name");
  if (flags.has("vocab-from")) {
    const std::string path = flags.get("vocab-from");
    auto file = engine::GgufFile::open(path);
    if (!file.ok())
      return fail("hearth-model synth: --vocab-from: " + std::string(file.status().message()));
    auto v = engine::vocabulary_of(**file);
    if (!v.ok())
      return fail("hearth-model synth: --vocab-from '" + path +
                  "': " + std::string(v.status().message()));
    s.n_vocab = v->tokens.size();
    s.vocabulary = std::move(*v);
  }
  const std::string type = flags.get("type", "q8_0");
  if (type == "f32") {
    s.weight_type = GgmlType::kF32;
  } else if (type == "f16") {
    s.weight_type = GgmlType::kF16;
  } else if (type == "q8_0") {
    s.weight_type = GgmlType::kQ8_0;
  } else if (type == "q4_0") {
    s.weight_type = GgmlType::kQ4_0;
  } else if (type == "q4_k") {
    s.weight_type = GgmlType::kQ4_K;
  } else if (type == "q4_k_m") {
    s.weight_type = GgmlType::kQ4_K;
    s.medium_mix = true;
  } else if (type == "q5_k" || type == "q5_k_m") {
    s.weight_type = GgmlType::kQ5_K;
    s.medium_mix = type == "q5_k_m";
  } else if (type == "q6_k") {
    s.weight_type = GgmlType::kQ6_K;
  } else {
    return fail("hearth-model synth: --type: '" + type +
                "' is not f32, f16, q8_0, q4_0, q4_k, q4_k_m, q5_k, q5_k_m or q6_k");
  }
  // The file is built in memory: a shape the flags allow may not fit.
  absl::StatusOr<std::string> bytes = absl::UnknownError("not built");
  try {
    bytes = engine::synthesize_model(s);
  } catch (const std::bad_alloc&) {
    return fail("hearth-model synth: not enough memory to build a model of this shape (--dim " +
                std::to_string(s.n_embd) + ", --layers " + std::to_string(s.n_layer) + ", --ffn " +
                std::to_string(s.n_ff) + ", --vocab " + std::to_string(s.n_vocab) + ")");
  }
  if (!bytes.ok()) return fail("hearth-model synth: " + std::string(bytes.status().message()));
  if (absl::Status written = hearth::write_whole_file(flags.positional()[0], *bytes); !written.ok())
    return fail("hearth-model synth: " + std::string(written.message()));
  std::fprintf(stderr, "hearth-model: wrote %s (%zu bytes)\n", flags.positional()[0].c_str(),
               bytes->size());
  return 0;
}

// ---------------------------------------------------------------------------
// perplexity

struct PerplexityArgs {
  std::string model, text, save_logits, kl_base;
  std::int64_t context = 0;  // 0: not given
  engine::KvCacheType kv_cache = engine::KvCacheType::kInt8;
};

// The flags, or a message naming the one that is wrong.
absl::StatusOr<PerplexityArgs> perplexity_args(int argc, char** argv) {
  hearth::Flags flags("hearth-model perplexity",
                      {"text", "context", "kv-cache", "save-logits", "kl-base"}, {});
  PerplexityArgs a;
  if (!flags.parse(argc, argv, 2) ||
      !flags.get_int("context", static_cast<std::int64_t>(quality::kMinContext), 1 << 20,
                     &a.context))
    return absl::InvalidArgumentError(flags.error());
  if (flags.positional().size() != 1 || !flags.has("text"))
    return absl::InvalidArgumentError("hearth-model perplexity: expected FILE and --text FILE");
  a.model = flags.positional()[0];
  a.text = flags.get("text");
  a.save_logits = flags.get("save-logits");
  a.kl_base = flags.get("kl-base");
  if (!a.save_logits.empty() && !a.kl_base.empty())
    return absl::InvalidArgumentError(
        "hearth-model perplexity: --save-logits and --kl-base: give one (save a base run, or "
        "compare with one)");
  for (const std::string* input : {&a.model, &a.text}) {
    std::error_code ec;
    if (!a.save_logits.empty() && std::filesystem::equivalent(a.save_logits, *input, ec))
      return absl::InvalidArgumentError("hearth-model perplexity: --save-logits '" + a.save_logits +
                                        "' is the run's own input '" + *input +
                                        "'; save the logits to another file");
  }
  const std::string kv = flags.get("kv-cache", "int8");
  if (kv != "int8" && kv != "float")
    return absl::InvalidArgumentError("hearth-model perplexity: --kv-cache: '" + kv +
                                      "' is not int8 or float");
  a.kv_cache = kv == "int8" ? engine::KvCacheType::kInt8 : engine::KvCacheType::kFloat;
  return a;
}

// The text of --text: refused when unreadable or empty.
absl::StatusOr<std::string> read_text(const std::string& path) {
  absl::StatusOr<std::string> read = read_whole_file(path);
  if (!read.ok())
    return absl::Status(read.status().code(), str_cat("--text: ", read.status().message()));
  std::string text = std::move(*read);
  if (text.empty()) return absl::InvalidArgumentError("--text: '" + path + "' is empty");
  return text;
}

// Tokens per chunk: --context, else the base's, else 512 (llama.cpp's
// default), never more than the model was trained for.
absl::StatusOr<std::size_t> choose_context(const PerplexityArgs& a, std::size_t n_ctx_train,
                                           const quality::LogitsReader* base) {
  std::size_t context = std::min<std::size_t>(512, n_ctx_train);
  if (base != nullptr) {
    context = base->header().context;
    if (a.context != 0 && static_cast<std::size_t>(a.context) != context)
      return absl::InvalidArgumentError(str_cat("--context ", a.context,
                                                " differs from the --kl-base file's (", context,
                                                "); leave --context out to use it"));
  } else if (a.context != 0) {
    context = static_cast<std::size_t>(a.context);
  }
  if (context > n_ctx_train)
    return absl::InvalidArgumentError(str_cat(
        "--context ", context, " is larger than the model's context (", n_ctx_train, " tokens)"));
  return context;
}

void print_chunk(std::size_t chunk, const quality::PerplexityResult& r) {
  std::printf("chunk %zu/%zu: PPL %.4f", chunk + 1, r.plan.n_chunks, r.nll.ppl());
  if (r.kl) std::printf(", KL mean %.6g, top-1 %.2f%%", r.kl->mean(), 100 * r.kl->top1_agreement());
  std::printf("\n");
  std::fflush(stdout);
}

void print_result(const quality::PerplexityResult& r, const quality::LogitsReader* base) {
  std::printf("Final estimate: PPL = %.4f +/- %.4f over %zu scored tokens (%zu chunks of %zu)\n",
              r.nll.ppl(), r.nll.ppl_uncertainty(), r.nll.count, r.plan.n_chunks, r.plan.context);
  if (!r.kl) return;
  const quality::KlStats& kl = *r.kl;
  std::printf("base PPL = %.4f +/- %.4f (%s)\n", kl.base.ppl(), kl.base.ppl_uncertainty(),
              base->header().description.c_str());
  std::printf("KL divergence (base || this run): mean %.6g, p99 %.6g, max %.6g\n", kl.mean(),
              kl.percentile(0.99), kl.max());
  std::printf("top-1 agreement: %.2f%% (%zu of %zu)\n", 100 * kl.top1_agreement(), kl.same_top,
              kl.kl.size());
}

// Loads what the run needs and checks every input before the first forward.
absl::StatusOr<quality::PerplexityResult> run_perplexity(const PerplexityArgs& a) {
  HEARTH_ASSIGN_OR_RETURN(const std::string text, read_text(a.text));
  HEARTH_ASSIGN_OR_RETURN(auto file, open(a.model));
  HEARTH_ASSIGN_OR_RETURN(const engine::ModelConfig config, engine::read_model_config(*file));
  HEARTH_ASSIGN_OR_RETURN(auto tokenizer, engine::Tokenizer::from_gguf(*file));
  HEARTH_ASSIGN_OR_RETURN(const std::vector<std::int32_t> tokens, tokenizer->encode(text, {}));
  std::unique_ptr<quality::LogitsReader> base;
  if (!a.kl_base.empty()) {
    auto opened = quality::LogitsReader::open(a.kl_base);
    if (!opened.ok()) return prefixed("--kl-base: ", opened.status());
    base = std::move(*opened);
  }
  HEARTH_ASSIGN_OR_RETURN(const std::size_t context,
                          choose_context(a, config.n_ctx_train, base.get()));
  auto plan = quality::plan_chunks(tokens.size(), context);
  if (!plan.ok()) return prefixed("--text '" + a.text + "': ", plan.status());
  if (base) {
    const std::span<const std::int32_t> evaluated(tokens.data(), plan->n_chunks * context);
    if (auto s = quality::check_base(base->header(), config.n_vocab, evaluated); !s.ok())
      return prefixed("--kl-base '" + a.kl_base + "': ", s);
  }
  engine::ModuleOptions options;
  options.context_length = context;
  options.kv_cache = a.kv_cache;
  HEARTH_ASSIGN_OR_RETURN(auto module, engine::Module::load(file, options));
  const std::string description = str_cat(std::filesystem::path(a.model).filename().string(), " ",
                                          module->weights().quantization(), ", ",
                                          engine::kv_cache_type_name(a.kv_cache), " KV cache");
  std::unique_ptr<quality::LogitsWriter> save;
  if (!a.save_logits.empty()) {
    auto created = quality::LogitsWriter::create(
        a.save_logits, quality::header_for_run(*plan, config.n_vocab, tokens, description));
    if (!created.ok()) return prefixed("--save-logits: ", created.status());
    save = std::move(*created);
  }
  std::fprintf(stderr, "hearth-model perplexity: %s: %zu tokens, %zu chunks of %zu, %zu scored\n",
               description.c_str(), tokens.size(), plan->n_chunks, context, plan->scored());
  quality::EvaluateOptions eval;
  eval.context = context;
  if (tokenizer->add_bos_default() && tokenizer->bos() >= 0) eval.bos = tokenizer->bos();
  eval.save = save.get();
  eval.base = base.get();
  eval.on_chunk = print_chunk;
  HEARTH_ASSIGN_OR_RETURN(quality::PerplexityResult result,
                          quality::evaluate(*module, tokens, eval));
  print_result(result, base.get());
  return result;
}

int perplexity(int argc, char** argv) {
  // The instance's load report is a log: stdout carries only the figures.
  spdlog::set_default_logger(spdlog::stderr_color_mt("hearth"));
  absl::StatusOr<PerplexityArgs> args = perplexity_args(argc, argv);
  if (!args.ok()) return fail(std::string(args.status().message()));
  absl::StatusOr<quality::PerplexityResult> result = run_perplexity(*args);
  if (!result.ok())
    return fail("hearth-model perplexity: " + std::string(result.status().message()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  // `hearth-model COMMAND --help`: the usage covers every command.
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  if (cmd == "inspect") return inspect(argc, argv);
  if (cmd == "tokenize") return tokenize(argc, argv);
  if (cmd == "render-chat") return render_chat(argc, argv);
  if (cmd == "quantize") return quantize(argc, argv);
  if (cmd == "synth") return synth(argc, argv);
  if (cmd == "perplexity") return perplexity(argc, argv);
  return fail(("hearth-model: unknown command '" + cmd + "'\n").append(kUsage));
}
