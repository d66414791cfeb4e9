// hearth-model: look at, tokenize with, quantize and synthesize GGUF models.
//
//   hearth-model inspect FILE
//   hearth-model tokenize FILE [--bos|--no-bos] [--parse-special|--no-parse-special] < text
//   hearth-model render-chat FILE --messages FILE.json [--template FILE] [--tools FILE.json]
//                            [--no-generation-prompt]
//   hearth-model quantize IN OUT --type q8_0|q4_0
//   hearth-model synth OUT [--dim N --layers N --heads N --kv-heads N --ffn N --vocab N --context N
//                           --type f32|f16|q8_0|q4_0|q4_k|q4_k_m|q5_k|q5_k_m|q6_k --seed N --name
//                           TEXT --arch NAME --sliding-window N]
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/cli_flags.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/chat_prompt.h"
#include "engine/gguf_writer.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "kernels/fp16.h"
#include "kernels/gguf_blocks.h"

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
  hearth-model quantize IN OUT --type q8_0|q4_0
                                         F32/F16/BF16 2-D weights -> Q8_0 or Q4_0; rows whose length is
                                         not a multiple of 32 stay as they are; 1-D tensors stay F32
  hearth-model synth OUT [--dim 256 --layers 4 --heads 8 --kv-heads 8 --ffn 704 --vocab 4096
                          --context 2048 --type q8_0 --seed 1 --name TEXT --vocab-from GGUF
                          --arch llama --sliding-window 0]
                                         (--type f32, f16, q8_0, q4_0, q4_k[_m], q5_k[_m] or q6_k;
                                         --vocab-from: another file's "llama" vocabulary, e.g.
                                         Llama 2's 32,000 pieces, instead of the built-in one)
                                         --arch: llama, qwen2, qwen3, phi3, gemma2, gemma3,
                                         granite or olmo2 (each with its own tensors and keys);
                                         --sliding-window N: {arch}.attention.sliding_window
                                         a deterministic synthetic model with random weights
)";

int fail(const std::string& m) {
  std::fprintf(stderr, "%s\n", m.c_str());
  return 2;
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
  const std::string text(std::istreambuf_iterator<char>(std::cin), {});
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
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(str_cat("cannot read '", path, "'"));
  nlohmann::ordered_json value = nlohmann::ordered_json::parse(in, nullptr, false);
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
      std::string(t.eos() >= 0 ? t.piece(t.eos()) : std::string_view()));
  if (!prompt.ok()) return fail("hearth-model: " + std::string(prompt.status().message()));
  absl::StatusOr<std::string> text = prompt->render(std::move(context));
  if (!text.ok()) {
    std::fprintf(stderr, "hearth-model: %s\n", std::string(text.status().message()).c_str());
    return 1;
  }
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}

// A 2-D float tensor as floats (F32, F16 or BF16), or nullopt for other types.
std::optional<std::vector<float>> float_data(const engine::GgufTensorInfo& t) {
  std::vector<float> x(t.n_elements);
  if (t.type == GgmlType::kF32) {
    std::memcpy(x.data(), t.data, x.size() * 4);
  } else if (t.type == GgmlType::kF16 || t.type == GgmlType::kBF16) {
    for (std::size_t i = 0; i < x.size(); ++i) {
      std::uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      x[i] = t.type == GgmlType::kF16 ? kernels::fp16_to_f32(h) : kernels::bf16_to_f32(h);
    }
  } else {
    return std::nullopt;
  }
  return x;
}

int quantize(int argc, char** argv) {
  hearth::Flags flags("hearth-model quantize", {"type"}, {});
  if (!flags.parse(argc, argv, 2)) return fail(flags.error());
  if (flags.positional().size() != 2)
    return fail("hearth-model quantize: expected IN and OUT files");
  const std::string type = flags.get("type");
  if (type != "q8_0" && type != "q4_0")
    return fail("hearth-model quantize: --type must be q8_0 or q4_0");
  const bool q8 = type == "q8_0";
  auto f = open(flags.positional()[0]);
  if (!f.ok()) return fail("hearth-model: " + std::string(f.status().message()));
  const auto& g = **f;
  engine::GgufWriter w(g.alignment());
  for (const auto& kv : g.metadata()) {
    if (kv.key == "general.alignment") continue;  // the writer adds it
    if (kv.key == "general.file_type") {
      w.add_uint32("general.file_type", q8 ? 7 : 2);  // MOSTLY_Q8_0 / MOSTLY_Q4_0
      continue;
    }
    w.add_value(kv.key, kv.value);
  }
  if (g.find("general.file_type") == nullptr) w.add_uint32("general.file_type", q8 ? 7 : 2);
  int converted = 0, kept = 0;
  for (const auto& t : g.tensors()) {
    std::vector<std::uint64_t> dims(t.dims, t.dims + t.n_dims);
    const std::string_view raw(reinterpret_cast<const char*>(t.data), t.n_bytes);
    std::optional<std::vector<float>> x;
    if (t.n_dims == 2 && t.dims[0] % 32 == 0) x = float_data(t);
    if (!x) {
      // 1-D tensors (norms), rows not a multiple of 32, and already-quantized tensors stay as they
      // are.
      w.add_tensor(t.name, dims, t.type, raw);
      ++kept;
      continue;
    }
    std::string out;
    if (q8) {
      out.resize(x->size() / 32 * sizeof(kernels::BlockQ8_0));
      kernels::quantize_row_q8_0(x->data(), reinterpret_cast<kernels::BlockQ8_0*>(out.data()),
                                 x->size());
    } else {
      out.resize(x->size() / 32 * sizeof(kernels::BlockQ4_0));
      kernels::quantize_row_q4_0(x->data(), reinterpret_cast<kernels::BlockQ4_0*>(out.data()),
                                 x->size());
    }
    w.add_tensor(t.name, dims, q8 ? GgmlType::kQ8_0 : GgmlType::kQ4_0, out);
    ++converted;
  }
  if (auto s = w.write(flags.positional()[1]); !s.ok())
    return fail("hearth-model: " + std::string(s.message()));
  std::fprintf(stderr, "hearth-model: wrote %s: %d tensors quantized to %s, %d kept as they were\n",
               flags.positional()[1].c_str(), converted, q8 ? "Q8_0" : "Q4_0", kept);
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
  auto bytes = engine::synthesize_model(s);
  if (!bytes.ok()) return fail("hearth-model synth: " + std::string(bytes.status().message()));
  std::FILE* out = std::fopen(flags.positional()[0].c_str(), "wb");
  if (out == nullptr)
    return fail("hearth-model synth: cannot create '" + flags.positional()[0] + "'");
  const bool written = std::fwrite(bytes->data(), 1, bytes->size(), out) == bytes->size();
  if (std::fclose(out) != 0 || !written)
    return fail("hearth-model synth: cannot write '" + flags.positional()[0] + "'");
  std::fprintf(stderr, "hearth-model: wrote %s (%zu bytes)\n", flags.positional()[0].c_str(),
               bytes->size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "inspect") return inspect(argc, argv);
  if (cmd == "tokenize") return tokenize(argc, argv);
  if (cmd == "render-chat") return render_chat(argc, argv);
  if (cmd == "quantize") return quantize(argc, argv);
  if (cmd == "synth") return synth(argc, argv);
  return fail(("hearth-model: unknown command '" + cmd + "'\n").append(kUsage));
}
