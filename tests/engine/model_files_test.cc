// Whole model files through Module::load: the F16 tiny model, malformed copies
// of both real models, qwen2 and BF16 models, and files the engine must refuse.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>

#include "base/str_cat.h"
#include "engine/generation.h"
#include "engine/gguf_writer.h"
#include "engine/module.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "kernels/fp16.h"
#include "kernels/gguf_legacy_blocks.h"
#include "memory/thread_temp_allocator.h"
#include "tests/support/gguf_rewrite.h"
#include "tests/support/q8_0_twins.h"
#include "tests/support/shared_data.h"
#include "tests/support/temp_dir_test.h"

namespace hearth::engine {
namespace {

namespace fs = std::filesystem;
using testing::KvEdit;
using testing::read_file;
using testing::rewrite;
using testing::TensorEdit;
using testing::write_file;

std::string model_path(const char* name) {
  return (testing::shared_dir() / "models" / name).string();
}

// A fresh directory per test, removed at the end.
class ModelFiles : public testing::TempDirTest {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) {
    write_file(path(name), bytes);
    return path(name);
  }
};

std::vector<float> f32_of(const GgufTensorInfo& t) {
  EXPECT_EQ(t.type, GgmlType::kF32) << t.name;
  std::vector<float> x(t.n_elements);
  std::memcpy(x.data(), t.data, x.size() * sizeof(float));
  return x;
}
std::string bytes_of(const std::vector<float>& x) {
  return std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
}

// Round to nearest even, as every bf16 converter does (the data has no NaN).
std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

std::shared_ptr<const GgufFile> open_file(const std::string& p) {
  auto f = GgufFile::open(p);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? std::shared_ptr<const GgufFile>(std::move(*f)) : nullptr;
}

std::unique_ptr<Module> load(const std::string& p, KvCacheType kv = KvCacheType::kFloat) {
  ModuleOptions o;
  o.context_length = 64;
  o.kv_cache = kv;
  auto m = Module::load(p, o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// The logits of every position of `tokens` (one chunk).
std::vector<float> all_logits(Module& m, const std::vector<std::int32_t>& tokens) {
  std::vector<float> out(tokens.size() * m.config().n_vocab);
  auto r = m.forward(tokens, 0, out.data());
  EXPECT_TRUE(r.ok()) << r.status();
  thread_temp_allocator().reset();
  return out;
}

float max_abs(const std::vector<float>& x) {
  float m = 0;
  for (float v : x) m = std::max(m, std::fabs(v));
  return m;
}
float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b, std::size_t begin = 0,
                   std::size_t end = SIZE_MAX) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (std::size_t i = begin; i < std::min({end, a.size(), b.size()}); ++i)
    m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

const std::vector<std::int32_t> kTokens = {1, 300, 301, 4, 77, 290, 511, 260, 3, 299, 400, 17};

SyntheticModelSpec small_spec(const std::string& arch) {
  SyntheticModelSpec s;
  s.architecture = arch;
  s.n_embd = 64;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 128;
  s.n_vocab = 512;
  s.context_length = 256;
  s.weight_type = GgmlType::kF32;
  s.seed = 11;
  return s;
}

std::string synth(const SyntheticModelSpec& s) {
  auto b = synthesize_model(s);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *b : std::string();
}

// Every packed projection (all but float ones, which XNNPACK packs) was
// carved from the model's one region: one that fell back to an allocation
// of its own would leave the region's used bytes short of theirs.
void expect_one_region(const ModelWeights& w) {
  std::size_t bytes = 0, count = 0;
  auto add = [&](const kernels::Linear& l) {
    if (l.format() == kernels::Linear::Format::kF32) return;
    bytes += l.weight_bytes();
    ++count;
  };
  for (const LayerWeights& L : w.layers())
    for (const kernels::Linear* l : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      add(*l);
  add(w.output());
  ASSERT_NE(w.packed_region(), nullptr);
  EXPECT_GT(count, 0u);
  EXPECT_GE(w.packed_region()->used(), bytes) << w.type_summary();
  EXPECT_LT(w.packed_region()->used(), bytes + 64 * count) << w.type_summary();
}

// The loader reserves enough of the region for every packed type, fused
// tensors split into parts (Phi-3) and tied output tables included.
TEST_F(ModelFiles, PackedProjectionsAreCarvedFromOneRegion) {
  struct Case {
    const char* arch;
    GgmlType type;
    bool medium_mix;
  };
  for (const Case& k :
       {Case{"llama", GgmlType::kQ8_0, false}, Case{"llama", GgmlType::kQ4_0, false},
        Case{"llama", GgmlType::kF16, false}, Case{"llama", GgmlType::kQ4_K, true},
        Case{"phi3", GgmlType::kQ5_K, true}, Case{"gemma2", GgmlType::kQ6_K, false}}) {
    SCOPED_TRACE(str_cat(k.arch, " ", ggml_type_name(k.type)));
    SyntheticModelSpec s = small_spec(k.arch);
    s.n_embd = 256;
    s.n_ff = 512;
    s.weight_type = k.type;
    s.medium_mix = k.medium_mix;
    auto m = load(write("region.gguf", synth(s)));
    ASSERT_NE(m, nullptr);
    expect_one_region(m->weights());
  }
}

// ---------------------------------------------------------------------------
// llama-2-tiny-random: F16 weights, the full 32k Llama 2 vocabulary.

TEST_F(ModelFiles, TinyRandomF16LoadsAndGenerates) {
  HEARTH_REQUIRE_SHARED();
  const std::string p = model_path("llama-2-tiny-random.gguf");
  auto file = open_file(p);
  ASSERT_NE(file, nullptr);
  auto tokenizer = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  ModuleOptions o;
  o.context_length = 64;
  auto m = Module::load(file, o);
  ASSERT_TRUE(m.ok()) << m.status();
  Module& module = **m;
  const ModelConfig& c = module.config();
  EXPECT_EQ(c.n_layer, 1u);
  EXPECT_EQ(c.n_embd, 8u);
  EXPECT_EQ(c.n_head, 2u);
  EXPECT_EQ(c.n_head_kv, 2u);
  EXPECT_EQ(c.head_dim, 4u);
  EXPECT_EQ(c.n_ff, 32u);
  EXPECT_EQ(c.n_vocab, 32000u);
  EXPECT_FALSE(c.tied_output);
  // Every projection (7 + output) went through the F16 loader; the table is read in place as F16.
  EXPECT_EQ(module.weights().type_summary(), "F16 x 8");
  EXPECT_EQ(module.weights().quantization(), "F16");
  EXPECT_EQ(module.weights().embedding_type(), kernels::DType::kF16);
  EXPECT_EQ(module.weights().embedding(), file->find_tensor("token_embd.weight")->data);
  // A decode roofline's bytes: the projections as the file stores them.
  std::size_t projection_bytes = 0;
  for (const char* name :
       {"output.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
        "blk.0.attn_output.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight",
        "blk.0.ffn_down.weight"}) {
    const GgufTensorInfo* t = file->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    projection_bytes += t->n_bytes;
  }
  EXPECT_EQ(module.weights().projection_file_bytes(), projection_bytes);
  expect_one_region(module.weights());

  GenerationRequest req;
  req.prompt = "Hello world";
  req.max_tokens = 16;
  req.ignore_eos = true;
  auto r = generate(module, **tokenizer, req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_ids, (std::vector<std::int32_t>{1, 15043, 3186}));
  ASSERT_EQ(r->generated_ids.size(), 16u);
  for (std::int32_t id : r->generated_ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 32000);
  }
  EXPECT_EQ(r->finish, FinishReason::kMaxTokens);
  // Greedy is deterministic: a second run gives the same ids.
  auto again = generate(module, **tokenizer, req);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->generated_ids, r->generated_ids);
}

// The F16 Linear computes with the file's half-precision weights: checked
// against a dot product in double over the same fp16 values. Both sides use
// exactly the converted weights, so the only difference is float summation
// over 8 terms: |error| <= 8 * 2^-24 * sum|w x| (plus slack), far below 1e-5.
TEST_F(ModelFiles, TinyRandomF16LinearMatchesTheFileWeights) {
  HEARTH_REQUIRE_SHARED();
  auto file = open_file(model_path("llama-2-tiny-random.gguf"));
  ASSERT_NE(file, nullptr);
  auto w = ModelWeights::load(file);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.ffn_down.weight"}) {
    SCOPED_TRACE(name);
    const GgufTensorInfo* t = file->find_tensor(name);
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->type, GgmlType::kF16);
    const kernels::Linear& lin = std::string(name) == "blk.0.attn_q.weight"
                                     ? (*w)->layers()[0].wq
                                     : (*w)->layers()[0].w_down;
    const std::size_t n_in = t->dims[0], n_out = t->dims[1];
    ASSERT_EQ(lin.n_in(), n_in);
    ASSERT_EQ(lin.n_out(), n_out);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(n_in), y(n_out);
    for (float& v : x) v = u(rng);
    ASSERT_TRUE(lin.forward(x.data(), 1, y.data(), thread_temp_allocator(), nullptr).ok());
    thread_temp_allocator().reset();
    double worst = 0;
    for (std::size_t r = 0; r < n_out; ++r) {
      double ref = 0, mag = 0;
      for (std::size_t i = 0; i < n_in; ++i) {
        std::uint16_t h;
        std::memcpy(&h, t->data + 2 * (r * n_in + i), 2);
        const double p = static_cast<double>(kernels::fp16_to_f32(h)) * x[i];
        ref += p;
        mag += std::fabs(p);
      }
      EXPECT_NEAR(y[r], ref, 1e-5 * mag + 1e-7) << "row " << r;
      worst = std::max(worst, mag);
    }
    EXPECT_GT(worst, 0.0);  // the weights are not all zero: the check has teeth
  }
}

// ---------------------------------------------------------------------------
// Malformed copies of the real files: never a crash, always an error naming
// the file, and the tensor when the cut falls inside tensor data.

struct RealFile {
  const char* name;
  std::uint64_t tokens;
};
const RealFile kRealFiles[] = {{"stories260K.gguf", 512}, {"llama-2-tiny-random.gguf", 32000}};

TEST_F(ModelFiles, TruncatedRealModelsAreRefusedNamingFileAndTensor) {
  HEARTH_REQUIRE_SHARED();
  for (const RealFile& rf : kRealFiles) {
    SCOPED_TRACE(rf.name);
    const std::string bytes = read_file(testing::shared_dir() / "models" / rf.name);
    auto parsed =
        GgufFile::parse(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), rf.name);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const GgufFile& g = **parsed;
    const std::size_t infos = g.tensors().front().info_offset, data = g.data_offset(),
                      size = bytes.size();
    // Where each tensor's data ends, to check the tensor an error names.
    std::map<std::string, std::size_t> data_end;
    for (const auto& t : g.tensors()) data_end[std::string(t.name)] = data + t.offset + t.n_bytes;
    // Both files end exactly at their last tensor's last byte, so every cut loses data.
    ASSERT_EQ(std::max_element(data_end.begin(), data_end.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; })
                  ->second,
              size);
    std::vector<std::size_t> cuts = {0, 1, 4, 8, 15, 23, 24};  // in the fixed header
    for (int i = 0; i < 10; ++i) cuts.push_back(24 + (infos - 24) * (2 * i + 1) / 20);  // metadata
    for (int i = 0; i < 8; ++i) cuts.push_back(infos + (data - infos) * (2 * i + 1) / 16);  // infos
    cuts.push_back(data);
    for (int i = 0; i < 14; ++i) cuts.push_back(data + (size - data) * (2 * i + 1) / 28);  // data
    cuts.push_back(size - 1);
    ASSERT_EQ(cuts.size(), 41u);
    int naming_tensor = 0;
    for (std::size_t cut : cuts) {
      const std::string p = write(str_cat("cut_", cut, ".gguf"), bytes.substr(0, cut));
      auto m = Module::load(p);
      ASSERT_FALSE(m.ok()) << "cut at " << cut << " loaded";
      const std::string msg(m.status().message());
      EXPECT_NE(msg.find(p), std::string::npos) << "cut at " << cut << ": " << msg;
      if (cut >= data) {
        const std::size_t at = msg.find("tensor '");
        ASSERT_NE(at, std::string::npos) << "cut at " << cut << ": " << msg;
        const std::size_t begin = at + 8;
        const std::string name = msg.substr(begin, msg.find('\'', begin) - begin);
        ASSERT_TRUE(data_end.count(name)) << "cut at " << cut << ": no tensor '" << name << "'";
        EXPECT_GT(data_end[name], cut)
            << "cut at " << cut << " names a tensor it did not cut: " << msg;
        EXPECT_NE(msg.find("extends past the end"), std::string::npos) << msg;
        ++naming_tensor;
      }
      std::filesystem::remove(p);
    }
    EXPECT_EQ(naming_tensor, 16);
  }
}

TEST_F(ModelFiles, CorruptCountsInRealModelsAreRefusedNamingTheFile) {
  HEARTH_REQUIRE_SHARED();
  for (const RealFile& rf : kRealFiles) {
    SCOPED_TRACE(rf.name);
    const std::string bytes = read_file(testing::shared_dir() / "models" / rf.name);
    auto parsed =
        GgufFile::parse(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), rf.name);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const GgufFile& g = **parsed;
    auto u64_at = [&](std::size_t at) {
      std::uint64_t v;
      std::memcpy(&v, bytes.data() + at, 8);
      return v;
    };
    // Where the fields live.
    const std::size_t tensor_count_at = 8, kv_count_at = 16;
    const GgufValue* tokens = g.find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    const std::size_t array_len_at = tokens->file_offset + 4;  // after the element type
    const GgufTensorInfo* q = g.find_tensor("blk.0.attn_q.weight");
    ASSERT_NE(q, nullptr);
    const std::size_t dims_at = q->info_offset + 8 + q->name.size() + 4;
    const std::size_t q_offset_at = dims_at + 8 * q->n_dims + 4;
    const GgufTensorInfo* last = &g.tensors().front();
    for (const auto& t : g.tensors())
      if (t.offset > last->offset) last = &t;
    const std::size_t last_offset_at =
        last->info_offset + 8 + last->name.size() + 4 + 8 * last->n_dims + 4;
    // The fields hold what the header facts say, so the patches hit them.
    ASSERT_EQ(u64_at(tensor_count_at), g.tensors().size());
    ASSERT_EQ(u64_at(kv_count_at), g.metadata().size());
    ASSERT_EQ(u64_at(array_len_at), rf.tokens);
    ASSERT_EQ(u64_at(dims_at + 8), q->dims[1]);
    ASSERT_EQ(u64_at(q_offset_at), q->offset);
    ASSERT_EQ(u64_at(last_offset_at), last->offset);

    struct Patch {
      const char* what;
      std::size_t at;
      std::uint64_t value;
    };
    const std::uint64_t n_t = g.tensors().size(), n_kv = g.metadata().size();
    const std::vector<Patch> patches = {
        {"tensor count all ones", tensor_count_at, ~0ull},
        {"tensor count high bit", tensor_count_at, n_t ^ (1ull << 40)},
        {"tensor count + 1", tensor_count_at, n_t + 1},
        // Not n_t - 1: that drops only the last tensor info, which in
        // llama-2-tiny-random is output.weight, leaving a valid model with a
        // tied output (it loads, rightly). Two fewer also drops output_norm.
        {"tensor count - 2", tensor_count_at, n_t - 2},
        {"tensor count 0", tensor_count_at, 0},
        {"kv count all ones", kv_count_at, ~0ull},
        {"kv count high bit", kv_count_at, n_kv ^ (1ull << 40)},
        {"kv count + 1", kv_count_at, n_kv + 1},
        {"kv count - 1", kv_count_at, n_kv - 1},
        {"kv count 0", kv_count_at, 0},
        {"token array length all ones", array_len_at, ~0ull},
        {"token array length high bit", array_len_at, rf.tokens ^ (1ull << 33)},
        {"token array length + 1", array_len_at, rf.tokens + 1},
        {"token array length - 1", array_len_at, rf.tokens - 1},
        {"tensor dim all ones", dims_at + 8, ~0ull},
        {"tensor dim high bit", dims_at + 8, q->dims[1] ^ (1ull << 40)},
        {"tensor dim + 1", dims_at + 8, q->dims[1] + 1},
        {"tensor dim x 2", dims_at + 8, q->dims[1] * 2},
        {"tensor dim 0", dims_at, 0},
        {"tensor offset all ones", q_offset_at, ~0ull},
        {"tensor offset high bit", q_offset_at, q->offset ^ (1ull << 40)},
        {"tensor offset misaligned", q_offset_at, q->offset + 1},
        {"tensor offset = file size", q_offset_at, bytes.size()},
        {"last tensor offset + alignment", last_offset_at, last->offset + g.alignment()},
    };
    for (const Patch& patch : patches) {
      std::string b = bytes;
      std::memcpy(b.data() + patch.at, &patch.value, 8);
      const std::string p = write("patched.gguf", b);
      auto m = Module::load(p);
      ASSERT_FALSE(m.ok()) << patch.what << ": loaded";
      EXPECT_NE(m.status().message().find(p), std::string::npos)
          << patch.what << ": " << m.status();
      if (std::string_view(patch.what).starts_with("tensor dim") ||
          std::string_view(patch.what).starts_with("tensor offset")) {
        EXPECT_NE(m.status().message().find("blk.0.attn_q.weight"), std::string::npos)
            << patch.what << ": " << m.status();
      }
    }
  }
}

// ---------------------------------------------------------------------------
// qwen2

TEST_F(ModelFiles, SyntheticQwen2LoadsAndGenerates) {
  const SyntheticModelSpec spec = small_spec("qwen2");
  const std::string p = write("qwen2.gguf", synth(spec));
  auto file = open_file(p);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(*file->get_string("general.architecture"), "qwen2");
  EXPECT_EQ(*file->get_uint("qwen2.block_count"), 2u);
  EXPECT_EQ(file->find("llama.block_count"), nullptr);
  ModuleOptions o;
  o.context_length = 64;
  auto m = Module::load(file, o);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.arch, find_architecture("qwen2"));
  EXPECT_EQ(c.arch_name, "qwen2");
  EXPECT_TRUE(c.attn_bias);
  EXPECT_EQ(c.rope_style, kernels::RopeStyle::kNeox);
  EXPECT_EQ(c.n_head_kv, 2u);
  // The biases are loaded as written: uniform in [-bias_scale, bias_scale], not all zero.
  const LayerWeights& l1 = (*m)->weights().layers()[1];
  ASSERT_EQ(l1.bq.size(), 64u);
  ASSERT_EQ(l1.bk.size(), 32u);
  ASSERT_EQ(l1.bv.size(), 32u);
  EXPECT_EQ(l1.bk, f32_of(*file->find_tensor("blk.1.attn_k.bias")));
  const float bmax = std::max({max_abs(l1.bq), max_abs(l1.bk), max_abs(l1.bv)});
  EXPECT_LE(bmax, spec.bias_scale);
  EXPECT_GT(bmax, spec.bias_scale / 2);

  auto tokenizer = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  GenerationRequest req;
  req.prompt = "the cat sat";
  req.max_tokens = 10;
  req.ignore_eos = true;
  auto r = generate(**m, **tokenizer, req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generated_ids.size(), 10u);
  EXPECT_EQ(r->finish, FinishReason::kMaxTokens);
}

// Same seed, same tensors: the architectures differ only in the key prefix
// and the bias tensors (the llama output of synthesize_model is unchanged).
TEST_F(ModelFiles, Qwen2AndLlamaSynthesesShareEveryOtherTensor) {
  const std::string q = synth(small_spec("qwen2")), l = synth(small_spec("llama"));
  auto fq = GgufFile::parse(reinterpret_cast<const std::uint8_t*>(q.data()), q.size(), "q");
  auto fl = GgufFile::parse(reinterpret_cast<const std::uint8_t*>(l.data()), l.size(), "l");
  ASSERT_TRUE(fq.ok() && fl.ok());
  EXPECT_EQ((*fq)->tensors().size(), (*fl)->tensors().size() + 3 * 2);
  EXPECT_EQ((*fq)->metadata().size(), (*fl)->metadata().size());
  for (const auto& t : (*fl)->tensors()) {
    const GgufTensorInfo* o = (*fq)->find_tensor(t.name);
    ASSERT_NE(o, nullptr) << t.name;
    ASSERT_EQ(o->n_bytes, t.n_bytes);
    EXPECT_EQ(std::memcmp(o->data, t.data, t.n_bytes), 0) << t.name;
  }
  SyntheticModelSpec bad = small_spec("gpt-j");
  auto r = synthesize_model(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gpt-j"), std::string::npos);
  bad = small_spec("qwen2");
  bad.bias_scale = -1;
  EXPECT_FALSE(synthesize_model(bad).ok());
}

TEST_F(ModelFiles, Qwen2BiasesChangeTheLogits) {
  SyntheticModelSpec spec = small_spec("qwen2");
  auto with = load(write("with.gguf", synth(spec)));
  spec.bias_scale = 0;
  auto without = load(write("without.gguf", synth(spec)));
  ASSERT_TRUE(with && without);
  EXPECT_TRUE(without->weights().layers()[0].bq ==
              std::vector<float>(without->config().q_dim(), 0.0f));
  const auto a = all_logits(*with, kTokens), b = all_logits(*without, kTokens);
  const float diff = max_abs_diff(a, b), scale = max_abs(a);
  std::printf("[qwen2] biases of amplitude 0.5 move the logits by up to %.4f (max |logit| %.4f)\n",
              diff, scale);
  // A bias of amplitude 0.5 on q/k/v (whose entries are ~unit size) is no
  // rounding-level effect: ask for at least 5% of the logit scale.
  EXPECT_GT(diff, 0.05f * scale);
}

// NeoX rotary pairs (x[i], x[i + d/2]); llama's pairs (x[2i], x[2i+1]), with the
// same frequency for pair i. So a llama model whose q and k rows (and biases)
// are permuted per head, row 2i <- row i and row 2i+1 <- row i + d/2, computes
// the same attention scores as the qwen2 model: q'.k' = (Pq).(Pk) = q.k. Its
// logits must match the qwen2 model's at every position (up to float
// summation order), while the unpermuted llama copy must not.
TEST_F(ModelFiles, Qwen2UsesNeoxRopeAndAddsBiasesBeforeIt) {
  const SyntheticModelSpec spec = small_spec("qwen2");
  const std::string qwen2_path = write("qwen2.gguf", synth(spec));
  auto src = open_file(qwen2_path);
  ASSERT_NE(src, nullptr);
  const std::size_t d = spec.n_embd / spec.n_head;
  auto permute_rows = [&](const GgufTensorInfo& t) {
    const std::size_t n_in = t.n_dims == 2 ? t.dims[0] : 1, n_out = t.n_elements / n_in;
    const std::vector<float> x = f32_of(t);
    std::vector<float> y(x.size());
    for (std::size_t head = 0; head < n_out / d; ++head)
      for (std::size_t i = 0; i < d / 2; ++i)
        for (int half = 0; half < 2; ++half) {
          const std::size_t to = head * d + 2 * i + half, from = head * d + i + half * d / 2;
          std::memcpy(&y[to * n_in], &x[from * n_in], n_in * sizeof(float));
        }
    return bytes_of(y);
  };
  auto as_llama = [&](bool permute) {
    return rewrite(
        *src,
        [](const GgufKv& kv, GgufWriter& w) {
          if (kv.key == "general.architecture") {
            w.add_string(kv.key, "llama");
            return true;
          }
          if (kv.key.starts_with("qwen2.")) {
            w.add_value(str_cat("llama.", kv.key.substr(6)), kv.value);
            return true;
          }
          return false;
        },
        [&](const GgufTensorInfo& t, GgufWriter& w) {
          const std::string_view n = t.name;
          if (!permute || !(n.ends_with("attn_q.weight") || n.ends_with("attn_k.weight") ||
                            n.ends_with("attn_q.bias") || n.ends_with("attn_k.bias")))
            return false;
          w.add_tensor(t.name, std::vector<std::uint64_t>(t.dims, t.dims + t.n_dims), t.type,
                       permute_rows(t));
          return true;
        });
  };
  auto qwen2 = load(qwen2_path);
  auto permuted = load(write("llama_permuted.gguf", as_llama(true)));
  auto plain = load(write("llama_plain.gguf", as_llama(false)));
  ASSERT_TRUE(qwen2 && permuted && plain);
  EXPECT_EQ(permuted->config().rope_style, kernels::RopeStyle::kNormal);
  // A llama file that carries biases gets them applied (they are optional).
  EXPECT_TRUE(permuted->config().attn_bias);
  EXPECT_EQ(permuted->weights().layers()[0].bq.size(), 64u);
  const auto a = all_logits(*qwen2, kTokens), b = all_logits(*permuted, kTokens),
             c = all_logits(*plain, kTokens);
  const float scale = max_abs(a), v = static_cast<float>(spec.n_vocab);
  const float same = max_abs_diff(a, b), differs = max_abs_diff(a, c, 1 * spec.n_vocab);
  std::printf(
      "[qwen2] NeoX vs permuted llama: max |diff| %.3g; vs unpermuted llama (positions >= 1): "
      "%.3g; max |logit| %.3g\n",
      same, differs, scale);
  // float32 summations of 16-64 terms in a different order: relative error of
  // a few 2^-24 per operation, amplified by at most a few layers: 1e-4 is ample.
  EXPECT_LE(same, 1e-4f * scale);
  EXPECT_GT(differs, 0.01f * scale);
  // Position 0 is not rotated at all (angle 0), so there even the unpermuted copy agrees.
  EXPECT_LE(max_abs_diff(a, c, 0, static_cast<std::size_t>(v)), 1e-4f * scale);
}

// ---------------------------------------------------------------------------
// BF16

// bf16 keeps 8 significant bits: rounding to nearest moves each weight and
// embedding value by a relative |delta| <= 2^-8 (0.39%). One projection's
// output then moves by at most 2^-8 * sum|w_i x_i|, about 2^-8 of its size
// (for these random weights sum|w_i x_i| and |y| are of the same order; the
// rounding errors are independent, so typically ~2^-8/sqrt(3)). Along the
// residual path of this 2-layer model a value passes through 10 rounded
// tensors in sequence (embedding; per layer q/k/v then o, gate/up then down;
// output); rms-norm divides out scale, so relative errors add at worst:
// 10 x 2^-8 = 3.9% of the logit scale. The bound asked for is 4% of the
// largest logit; the typical error is several times smaller (printed).
TEST_F(ModelFiles, Bf16ModelMatchesItsF32SourceWithinBf16Precision) {
  const std::string f32_path = write("f32.gguf", synth(small_spec("llama")));
  auto src = open_file(f32_path);
  ASSERT_NE(src, nullptr);
  auto to_bf16 = [](const GgufTensorInfo& t, bool as_bf16) {
    const std::vector<float> x = f32_of(t);
    std::string out;
    if (as_bf16) {
      out.resize(x.size() * 2);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const std::uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
    } else {  // the same values, stored as F32
      std::vector<float> y(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) y[i] = kernels::bf16_to_f32(f32_to_bf16(x[i]));
      out = bytes_of(y);
    }
    return out;
  };
  auto convert = [&](bool as_bf16) {
    return rewrite(*src, nullptr, [&](const GgufTensorInfo& t, GgufWriter& w) {
      if (t.n_dims != 2) return false;  // norms stay F32
      w.add_tensor(t.name, {t.dims[0], t.dims[1]}, as_bf16 ? GgmlType::kBF16 : GgmlType::kF32,
                   to_bf16(t, as_bf16));
      return true;
    });
  };
  const std::string bf16_path = write("bf16.gguf", convert(true));
  auto bf16_file = open_file(bf16_path);
  ASSERT_NE(bf16_file, nullptr);
  EXPECT_EQ(bf16_file->find_tensor("blk.0.ffn_up.weight")->type, GgmlType::kBF16);
  EXPECT_EQ(bf16_file->find_tensor("token_embd.weight")->type, GgmlType::kBF16);
  auto f32 = load(f32_path);
  auto bf16 = load(bf16_path);
  auto rounded = load(write("rounded.gguf", convert(false)));
  ASSERT_TRUE(f32 && bf16 && rounded);
  EXPECT_EQ(bf16->weights().embedding_type(), kernels::DType::kBF16);
  EXPECT_NE(bf16->weights().type_summary().find("BF16"), std::string::npos)
      << bf16->weights().type_summary();
  const auto a = all_logits(*f32, kTokens), b = all_logits(*bf16, kTokens),
             r = all_logits(*rounded, kTokens);
  const float scale = max_abs(a), err = max_abs_diff(a, b);
  std::printf("[bf16] max |logit diff| vs F32: %.4g = %.3f%% of max |logit| %.4g (bound 4%%)\n",
              err, 100 * err / scale, scale);
  EXPECT_LE(err, 0.04f * scale);
  EXPECT_GT(err, 0.0f) << "the BF16 file should not be bit-identical to F32";
  // bf16 -> f32 is exact, so the BF16 model is the F32 model of the rounded
  // values: the same float kernels on the same numbers.
  EXPECT_LE(max_abs_diff(b, r), 1e-6f * scale);
}

// ---------------------------------------------------------------------------
// Refusals

TEST_F(ModelFiles, UnknownArchitectureAndMissingKeysAreRefusedByName) {
  auto src = open_file(write("base.gguf", synth(small_spec("llama"))));
  ASSERT_NE(src, nullptr);
  const std::string gptj = write("gptj.gguf", rewrite(
                                                  *src,
                                                  [](const GgufKv& kv, GgufWriter& w) {
                                                    if (kv.key != "general.architecture")
                                                      return false;
                                                    w.add_string(kv.key, "gpt-j");
                                                    return true;
                                                  },
                                                  nullptr));
  auto m = Module::load(gptj);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'gpt-j'"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find(gptj), std::string::npos) << m.status();

  for (const char* key : {"llama.block_count", "llama.embedding_length",
                          "llama.attention.head_count", "llama.attention.layer_norm_rms_epsilon",
                          "tokenizer.ggml.tokens", "general.architecture"}) {
    const std::string p =
        write("missing.gguf",
              rewrite(
                  *src, [&](const GgufKv& kv, GgufWriter&) { return kv.key == key; }, nullptr));
    m = Module::load(p);
    ASSERT_FALSE(m.ok()) << key;
    EXPECT_NE(m.status().message().find(key), std::string::npos) << m.status();
    EXPECT_NE(m.status().message().find(p), std::string::npos) << m.status();
  }
}

// Each architecture's own keys and tensors (engine/architecture.h) are
// checked like the common ones: a bad value or a missing tensor is refused
// naming it and the file.
TEST_F(ModelFiles, ArchitectureKeysAndTensorsAreRefusedByName) {
  struct Case {
    const char* arch;
    std::size_t window;
    const char* key;  // set to `value`, or added when absent
    float value;
    const char* tensor;  // dropped (nullptr: none)
    const char* named;   // what the message must name
  };
  const Case cases[] = {
      {"gemma2", 4, "gemma2.attn_logit_softcapping", -5.0f, nullptr,
       "gemma2.attn_logit_softcapping"},
      {"gemma2", 4, "gemma2.final_logit_softcapping", NAN, nullptr,
       "gemma2.final_logit_softcapping"},
      {"granite", 0, "granite.logit_scale", 0.0f, nullptr, "granite.logit_scale"},
      {"granite", 0, "granite.residual_scale", INFINITY, nullptr, "granite.residual_scale"},
      // Subnormal: positive and finite, but the forward pass takes its
      // reciprocal (infinite), and every logit turned NaN.
      {"granite", 0, "granite.logit_scale", 1e-45f, nullptr, "granite.logit_scale"},
      {"gemma2", 4, "gemma2.attn_logit_softcapping", 1e-45f, nullptr,
       "gemma2.attn_logit_softcapping"},
      {"llama", 0, "llama.rope.scale_linear", 1e-45f, nullptr, "rope.scale_linear"},
      {"llama", 0, "llama.rope.freq_base", INFINITY, nullptr, "rope.freq_base"},
      {"phi3", 4, "phi3.rope.scaling.original_context_length", 64.0f, nullptr,
       "phi3.rope.scaling.original_context_length"},
      {"gemma2", 4, "gemma2.attention.sliding_window", 4.0f, nullptr,
       "gemma2.attention.sliding_window"},
      {"phi3", 4, "phi3.rope.scaling.attn_factor", -1.0f, nullptr, "phi3.rope.scaling.attn_factor"},
      {"phi3", 4, nullptr, 0, "rope_factors_short.weight", "rope_factors_short.weight"},
      {"phi3", 4, nullptr, 0, "blk.1.attn_qkv.weight", "blk.1.attn_qkv.weight"},
      {"olmo2", 0, nullptr, 0, "blk.0.post_ffw_norm.weight", "blk.0.post_ffw_norm.weight"},
      {"qwen3", 0, nullptr, 0, "blk.1.attn_k_norm.weight", "blk.1.attn_k_norm.weight"},
      {"gemma3", 4, nullptr, 0, "blk.0.post_attention_norm.weight",
       "blk.0.post_attention_norm.weight"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.named);
    SyntheticModelSpec spec = small_spec(c.arch);
    spec.sliding_window = c.window;
    auto src = open_file(write("arch.gguf", synth(spec)));
    ASSERT_NE(src, nullptr);
    ASSERT_TRUE(Module::load(path("arch.gguf")).ok()) << "the unedited file loads";
    // The key set to c.value (a float: integer keys are then refused as the
    // wrong type), or added after general.architecture when the file has none.
    const bool present = c.key != nullptr && src->find(c.key) != nullptr;
    const KvEdit set_key = [&](const GgufKv& kv, GgufWriter& w) {
      if (c.key == nullptr) return false;
      if (kv.key == c.key) {
        w.add_float32(kv.key, c.value);
        return true;
      }
      if (present || kv.key != "general.architecture") return false;
      w.add_value(kv.key, kv.value);
      w.add_float32(c.key, c.value);
      return true;
    };
    const TensorEdit drop_tensor = [&](const GgufTensorInfo& t, GgufWriter&) {
      return c.tensor != nullptr && t.name == c.tensor;
    };
    const std::string p = write("edited.gguf", rewrite(*src, set_key, drop_tensor));
    auto m = Module::load(p);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(c.named), std::string::npos) << m.status();
    EXPECT_NE(m.status().message().find(p), std::string::npos) << m.status();
  }
}

// What the entries resolve to, for the layered ones: Gemma 2 slides on even
// layers, Gemma 3 on five of six with RoPE base 10000 (its global layers:
// the file's base and linear scaling), Granite's scales, Phi-3's factors.
TEST_F(ModelFiles, ArchitectureTraitsResolveIntoTheConfig) {
  auto config_of = [&](const char* arch, std::size_t layers, std::size_t window) {
    SyntheticModelSpec spec = small_spec(arch);
    spec.n_layer = layers;
    spec.sliding_window = window;
    auto m = Module::load(write(str_cat(arch, ".gguf"), synth(spec)));
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? (*m)->config() : ModelConfig{};
  };
  const ModelConfig g2 = config_of("gemma2", 4, 32);
  ASSERT_EQ(g2.layers.size(), 4u);
  EXPECT_EQ(g2.layers[0].window, 32u);
  EXPECT_EQ(g2.layers[1].window, 0u);
  EXPECT_EQ(g2.layers[2].window, 32u);
  EXPECT_EQ(g2.attn_softcap, 50.0f);
  EXPECT_EQ(g2.final_softcap, 30.0f);
  EXPECT_FLOAT_EQ(g2.embedding_scale, 8.0f);  // sqrt(64)
  EXPECT_TRUE(g2.tied_output);
  const ModelConfig g3 = config_of("gemma3", 7, 16);
  for (std::size_t l = 0; l < 7; ++l) {
    SCOPED_TRACE(l);
    const bool global = l == 5;
    EXPECT_EQ(g3.layers[l].window, global ? 0u : 16u);
    EXPECT_EQ(g3.layers[l].rope_base, global ? 1000000.0f : 10000.0f);
    EXPECT_EQ(g3.layers[l].rope_freq_scale, global ? 0.125f : 1.0f);
  }
  const ModelConfig gr = config_of("granite", 2, 0);
  EXPECT_EQ(gr.embedding_scale, 12.0f);
  EXPECT_EQ(gr.residual_scale, 0.22f);
  EXPECT_EQ(gr.logit_scale, 0.125f);
  EXPECT_EQ(gr.attention_scale, 4.0f / 64.0f);
  const ModelConfig phi = config_of("phi3", 2, 0);
  EXPECT_EQ(phi.rope_original_context, 64u);
  EXPECT_EQ(phi.rope_attn_factor, 1.19f);
  EXPECT_EQ(phi.layers[0].window, 0u);  // the file's 0: no window
  EXPECT_EQ(phi.rope_style, kernels::RopeStyle::kNeox);

  // An architecture without sliding-window layers ignores the key, as
  // llama.cpp does (Qwen 2's configs carry one they do not use).
  auto qwen2 = open_file(write("qwen2.gguf", synth(small_spec("qwen2"))));
  ASSERT_NE(qwen2, nullptr);
  const std::string with_window =
      write("qwen2_window.gguf", rewrite(
                                     *qwen2,
                                     [](const GgufKv& kv, GgufWriter& w) {
                                       if (kv.key != "general.architecture") return false;
                                       w.add_value(kv.key, kv.value);
                                       w.add_uint32("qwen2.attention.sliding_window", 8);
                                       return true;
                                     },
                                     nullptr));
  auto m = Module::load(with_window);
  ASSERT_TRUE(m.ok()) << m.status();
  for (const LayerAttention& l : (*m)->config().layers) EXPECT_EQ(l.window, 0u);
}

// Files converted before a family's soft-capping or window keys existed get
// the values llama.cpp assumes for them (llama-model.cpp, "for backward
// compatibility"): Gemma 2 caps at 50 / 30 and slides over 4096; Phi-3 4k
// of 32 or 40 layers over 2047; other Phi-3 files without the key run
// without a window, as llama.cpp loads them today.
TEST_F(ModelFiles, FilesWithoutLaterKeysGetLlamaCppsLegacyValues) {
  auto without = [&](const SyntheticModelSpec& spec, std::initializer_list<std::string> keys) {
    auto src = open_file(write("src.gguf", synth(spec)));
    EXPECT_NE(src, nullptr);
    for (const std::string& k : keys) EXPECT_NE(src->find(k), nullptr) << k;
    const std::string p =
        write("legacy.gguf", rewrite(
                                 *src,
                                 [&](const GgufKv& kv, GgufWriter&) {
                                   return std::find(keys.begin(), keys.end(), kv.key) != keys.end();
                                 },
                                 nullptr));
    return std::make_pair(p, Module::load(p));
  };
  SyntheticModelSpec g2 = small_spec("gemma2");
  g2.n_layer = 3;
  auto [g2_path, gemma2] =
      without(g2, {"gemma2.attn_logit_softcapping", "gemma2.final_logit_softcapping",
                   "gemma2.attention.sliding_window"});
  ASSERT_TRUE(gemma2.ok()) << gemma2.status();
  const ModelConfig& gc = (*gemma2)->config();
  EXPECT_EQ(gc.attn_softcap, 50.0f);
  EXPECT_EQ(gc.final_softcap, 30.0f);
  EXPECT_EQ(gc.layers[0].window, 4096u);
  EXPECT_EQ(gc.layers[1].window, 0u);
  EXPECT_EQ(gc.layers[2].window, 4096u);

  SyntheticModelSpec phi = small_spec("phi3");
  phi.n_layer = 32;
  phi.context_length = 4096;
  auto [phi_path, phi4k] = without(phi, {"phi3.attention.sliding_window"});
  ASSERT_TRUE(phi4k.ok()) << phi4k.status();
  for (const LayerAttention& l : (*phi4k)->config().layers) EXPECT_EQ(l.window, 2047u);

  phi.n_layer = 2;
  auto [other_path, other] = without(phi, {"phi3.attention.sliding_window"});
  ASSERT_TRUE(other.ok()) << other.status();
  for (const LayerAttention& l : (*other)->config().layers) EXPECT_EQ(l.window, 0u);
}

// A tensor the architecture's forward pass would not read (an output or FFN
// bias on a llama file, say) is refused by name, as llama.cpp refuses a
// file with tensors it did not create, instead of running without it; so
// are OLMo 3's sliding-window layers, written under olmo2.
TEST_F(ModelFiles, TensorsAndWindowsTheForwardPassWouldIgnoreAreRefusedByName) {
  auto src = open_file(write("base.gguf", synth(small_spec("llama"))));
  ASSERT_NE(src, nullptr);
  for (const char* extra : {"blk.0.attn_output.bias", "blk.1.ffn_down.bias", "output.bias"}) {
    SCOPED_TRACE(extra);
    const std::string p =
        write("extra.gguf", rewrite(*src, nullptr, [&](const GgufTensorInfo& t, GgufWriter& w) {
                if (t.name != "output_norm.weight") return false;
                w.add_tensor(t.name, {t.dims[0]}, t.type,
                             std::string_view(reinterpret_cast<const char*>(t.data), t.n_bytes));
                w.add_tensor(extra, {t.dims[0]}, GgmlType::kF32, std::string(4 * t.dims[0], '\0'));
                return true;
              }));
    auto m = Module::load(p);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented) << m.status();
    EXPECT_NE(m.status().message().find(str_cat("'", extra, "'")), std::string::npos) << m.status();
    EXPECT_NE(m.status().message().find(p), std::string::npos) << m.status();
  }

  auto olmo = open_file(write("olmo2.gguf", synth(small_spec("olmo2"))));
  ASSERT_NE(olmo, nullptr);
  for (std::uint32_t window : {0u, 16u}) {
    SCOPED_TRACE(window);
    const std::string p =
        write("olmo3.gguf", rewrite(
                                *olmo,
                                [&](const GgufKv& kv, GgufWriter& w) {
                                  if (kv.key != "general.architecture") return false;
                                  w.add_value(kv.key, kv.value);
                                  w.add_uint32("olmo2.attention.sliding_window", window);
                                  return true;
                                },
                                nullptr));
    auto m = Module::load(p);
    if (window == 0) {
      EXPECT_TRUE(m.ok()) << m.status();  // files write 0 for "no window"
      continue;
    }
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("olmo2.attention.sliding_window"), std::string::npos)
        << m.status();
  }
}

TEST_F(ModelFiles, UnsupportedTensorTypeIsRefusedNamingTensorAndType) {
  auto src = open_file(write("base.gguf", synth(small_spec("llama"))));
  ASSERT_NE(src, nullptr);
  std::size_t block_elems = 0, block_bytes = 0;
  ASSERT_TRUE(ggml_type_block(GgmlType::kQ8_1, &block_elems, &block_bytes));
  ASSERT_EQ(block_elems, 32u);
  ASSERT_EQ(block_bytes, 36u);  // fp16 scale and sum, 32 int8
  for (const char* target : {"blk.1.ffn_gate.weight", "token_embd.weight", "output.weight"}) {
    SCOPED_TRACE(target);
    const std::string p =
        write("q8_1.gguf", rewrite(*src, nullptr, [&](const GgufTensorInfo& t, GgufWriter& w) {
                if (t.name != target) return false;
                w.add_tensor(t.name, {t.dims[0], t.dims[1]}, GgmlType::kQ8_1,
                             std::string(t.n_elements / 32 * 36, '\x11'));
                return true;
              }));
    auto f = GgufFile::open(p);
    ASSERT_TRUE(f.ok()) << f.status();  // a well-formed file...
    EXPECT_EQ((*f)->find_tensor(target)->type, GgmlType::kQ8_1);
    auto m = Module::load(p);  // ...that the engine cannot run
    ASSERT_FALSE(m.ok());
    const std::string msg(m.status().message());
    EXPECT_NE(msg.find(str_cat("'", target, "'")), std::string::npos) << msg;
    EXPECT_NE(msg.find("Q8_1"), std::string::npos) << msg;
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

// ---------------------------------------------------------------------------
// Q4_1, Q5_0, Q5_1, IQ4_NL: natively

// Every 2-D tensor (projections, embedding, output) of a file rewritten in an
// older type, from blocks with pseudo-random codes and scales near those of
// the weights. Each runs natively, in its file's size (projections packed
// from the file's blocks, the embedding table read in place). Q5_0 and
// IQ4_NL are Q8_0 blocks in disguise (an fp16 scale times an integer in
// [-127, 127]): the model gives exactly the logits of the same file with
// those Q8_0 blocks written instead. Q4_1 and Q5_1 (w = d * q + m) have no
// Q8_0 twin: their logits stay within the activations' int8 rounding of the
// file's own values stored as F32 (printed beside the same file decoded and
// re-quantized to Q8_0, as hearth ran them before).
TEST_F(ModelFiles, OlderBlockTypesRunNatively) {
  auto src = open_file(write("base.gguf", synth(small_spec("llama"))));
  ASSERT_NE(src, nullptr);
  struct Type {
    GgmlType type;
    std::size_t bytes;
    void (*decode)(const std::uint8_t*, float*, std::size_t);
    void (*to_q8_0)(const std::uint8_t*, kernels::BlockQ8_0*, std::size_t);  // exact ones
    kernels::DType embedding;
  };
  const Type types[] = {
      {GgmlType::kQ4_1, 20,
       [](const std::uint8_t* b, float* y, std::size_t n) {
         kernels::dequantize_row_q4_1(reinterpret_cast<const kernels::BlockQ4_1*>(b), y, n);
       },
       nullptr, kernels::DType::kQ4_1},
      {GgmlType::kQ5_0, 22,
       [](const std::uint8_t* b, float* y, std::size_t n) {
         kernels::dequantize_row_q5_0(reinterpret_cast<const kernels::BlockQ5_0*>(b), y, n);
       },
       [](const std::uint8_t* b, kernels::BlockQ8_0* q, std::size_t n) {
         hearth::testing::q5_0_to_q8_0(reinterpret_cast<const kernels::BlockQ5_0*>(b), q, n);
       },
       kernels::DType::kQ5_0},
      {GgmlType::kQ5_1, 24,
       [](const std::uint8_t* b, float* y, std::size_t n) {
         kernels::dequantize_row_q5_1(reinterpret_cast<const kernels::BlockQ5_1*>(b), y, n);
       },
       nullptr, kernels::DType::kQ5_1},
      {GgmlType::kIQ4_NL, 18,
       [](const std::uint8_t* b, float* y, std::size_t n) {
         kernels::dequantize_row_iq4_nl(reinterpret_cast<const kernels::BlockIQ4_NL*>(b), y, n);
       },
       [](const std::uint8_t* b, kernels::BlockQ8_0* q, std::size_t n) {
         hearth::testing::iq4_nl_to_q8_0(reinterpret_cast<const kernels::BlockIQ4_NL*>(b), q, n);
       },
       kernels::DType::kIQ4_NL},
  };
  for (const Type& type : types) {
    SCOPED_TRACE(ggml_type_name(type.type));
    // Blocks: fp16 scales (and minimums) of about 1/64 .. 1/32, random codes.
    auto blocks_of = [&](const GgufTensorInfo& t) {
      std::mt19937 rng(static_cast<unsigned>(t.n_elements));
      std::string b(t.n_elements / 32 * type.bytes, '\0');
      for (char& c : b) c = static_cast<char>(rng());
      const std::size_t scales =
          type.type == GgmlType::kQ4_1 || type.type == GgmlType::kQ5_1 ? 2 : 1;
      for (std::size_t i = 0; i < b.size(); i += type.bytes)
        for (std::size_t s = 0; s < scales; ++s) {
          const std::uint16_t h = kernels::f32_to_fp16((s == 0 ? 1.0f : -8.0f) / (32 + rng() % 32));
          std::memcpy(&b[i + 2 * s], &h, 2);
        }
      return b;
    };
    // 0: the type, 1: its values as F32, 2: Q8_0 blocks (exact, or decoded
    // and re-quantized)
    auto as = [&](int how) {
      return rewrite(*src, nullptr, [&](const GgufTensorInfo& t, GgufWriter& w) {
        if (t.n_dims != 2) return false;
        const std::string b = blocks_of(t);
        const auto* raw = reinterpret_cast<const std::uint8_t*>(b.data());
        if (how == 0) {
          w.add_tensor(t.name, {t.dims[0], t.dims[1]}, type.type, b);
        } else if (how == 1) {
          std::vector<float> y(t.n_elements);
          type.decode(raw, y.data(), y.size());
          w.add_tensor(t.name, {t.dims[0], t.dims[1]}, GgmlType::kF32, bytes_of(y));
        } else {
          std::vector<kernels::BlockQ8_0> q(t.n_elements / 32);
          if (type.to_q8_0 != nullptr) {
            type.to_q8_0(raw, q.data(), t.n_elements);
          } else {  // decoded, then re-quantized
            std::vector<float> y(t.n_elements);
            type.decode(raw, y.data(), y.size());
            kernels::quantize_row_q8_0(y.data(), q.data(), y.size());
          }
          w.add_tensor(t.name, {t.dims[0], t.dims[1]}, GgmlType::kQ8_0,
                       std::string(reinterpret_cast<const char*>(q.data()), q.size() * 34));
        }
        return true;
      });
    };
    auto m = load(write("older.gguf", as(0)));
    ASSERT_NE(m, nullptr);
    const std::string label = str_cat(ggml_type_name(type.type), " x");
    EXPECT_NE(m->weights().type_summary().find(label), std::string::npos)
        << m->weights().type_summary();
    EXPECT_EQ(m->weights().type_summary().find("Q8_0"), std::string::npos)
        << m->weights().type_summary();
    EXPECT_EQ(m->weights().embedding_type(), type.embedding);
    // Packed in the file's bytes (this model's rows fill whole row groups).
    std::size_t projection_bytes = 0;
    for (const GgufTensorInfo& t : m->weights().file().tensors())
      if (t.n_dims == 2 && t.name != "token_embd.weight") projection_bytes += t.n_bytes;
    EXPECT_EQ(m->weights().projection_file_bytes(), projection_bytes);
    EXPECT_EQ(m->weights().packed_bytes(), projection_bytes);
    expect_one_region(m->weights());
    const auto got = all_logits(*m, kTokens);
    auto q8 = load(write("as_q8_0.gguf", as(2)));
    ASSERT_NE(q8, nullptr);
    const auto via_q8_0 = all_logits(*q8, kTokens);
    if (type.to_q8_0 != nullptr) {
      EXPECT_EQ(got, via_q8_0);
    } else {
      auto f32 = load(write("as_f32.gguf", as(1)));
      ASSERT_NE(f32, nullptr);
      const auto want = all_logits(*f32, kTokens);
      const float scale = max_abs(want), err = max_abs_diff(got, want);
      const float err_q8_0 = max_abs_diff(via_q8_0, want);
      std::printf(
          "[%s] max |logit diff| vs its values as F32: %.3g (re-quantized to Q8_0: %.3g) "
          "of max |logit| %.3g\n",
          std::string(ggml_type_name(type.type)).c_str(), err, err_q8_0, scale);
      // int8 activations (1/254 of a block's range), through 10 projections
      // in sequence: well under 10% of the logit scale.
      EXPECT_LE(err, 0.1f * scale);
    }
  }
}

}  // namespace
}  // namespace hearth::engine
