// Structured output end to end in the engine: seeded samples at temperature
// 1 from a random-weight model and from stories260K, for each of the ten
// schemas under tests/grammar/schemas/ (increasing difficulty), constrained
// by the grammar hearth compiles from the schema. Every output must be a
// complete value (generation ended because the value was complete) that
// parses and validates against its schema. The check is Python's json module
// and the jsonschema package (tests/grammar/validate_samples.py), which
// share nothing with hearth's converter or matcher.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/generation.h"
#include "engine/gguf.h"
#include "engine/module.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "tests/support/shared_data.h"

namespace hearth::engine {
namespace {

#if defined(HEARTH_SANITIZER_ADDRESS) || defined(HEARTH_SANITIZER_THREAD)
constexpr int kSamples = 10;  // sanitizers run the same path, fewer times
#else
constexpr int kSamples = 200;
#endif

std::filesystem::path schema_dir() {
  return std::filesystem::path(HEARTH_SOURCE_DIR) / "tests/grammar/schemas";
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A JSON string literal for `s` (bytes outside ASCII as \u escapes of
// Latin-1 would corrupt UTF-8, so only the JSON-special bytes are escaped).
std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

struct Model {
  std::string name;
  std::string bytes;  // the synthetic model's file, which `file` points into
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Module> module;
};

std::unique_ptr<Model> load(const std::string& name) {
  auto m = std::make_unique<Model>();
  m->name = name;
  if (name == "stories260K") {
    auto f = GgufFile::open((testing::shared_dir() / "models/stories260K.gguf").string());
    if (!f.ok()) return ADD_FAILURE() << f.status(), nullptr;
    m->file = std::move(*f);
  } else {
    SyntheticModelSpec spec;  // random weights, a 4096-token byte-fallback vocabulary
    spec.n_embd = 64;
    spec.n_layer = 2;
    spec.n_head = 4;
    spec.n_head_kv = 4;
    spec.n_ff = 128;
    spec.context_length = 1024;
    auto bytes = synthesize_model(spec);
    if (!bytes.ok()) return ADD_FAILURE() << bytes.status(), nullptr;
    m->bytes = std::move(*bytes);
    auto f = GgufFile::parse(reinterpret_cast<const std::uint8_t*>(m->bytes.data()),
                             m->bytes.size(), "synthetic");
    if (!f.ok()) return ADD_FAILURE() << f.status(), nullptr;
    m->file = std::move(*f);
  }
  auto t = Tokenizer::from_gguf(*m->file);
  if (!t.ok()) return ADD_FAILURE() << t.status(), nullptr;
  m->tokenizer = std::move(*t);
  ModuleOptions o;
  o.context_length = 1024;
  auto mod = Module::load(m->file, o);
  if (!mod.ok()) return ADD_FAILURE() << mod.status(), nullptr;
  m->module = std::move(*mod);
  return m;
}

class StructuredOutput : public ::testing::TestWithParam<std::string> {};

TEST_P(StructuredOutput, EverySampleIsACompleteValidValueOfItsSchema) {
  if (GetParam() == "stories260K") HEARTH_REQUIRE_SHARED();
  std::unique_ptr<Model> model = load(GetParam());
  ASSERT_NE(model, nullptr);
  std::vector<std::filesystem::path> schemas;
  for (const auto& e : std::filesystem::directory_iterator(schema_dir()))
    if (e.path().extension() == ".json") schemas.push_back(e.path());
  std::sort(schemas.begin(), schemas.end());
  ASSERT_EQ(schemas.size(), 10u) << "the ten schemas of " << schema_dir();

  std::string samples = "[";
  std::size_t tokens = 0;
  for (const std::filesystem::path& schema : schemas) {
    absl::StatusOr<std::string> gbnf = grammar::json_schema_to_gbnf(read_file(schema));
    ASSERT_TRUE(gbnf.ok()) << schema << ": " << gbnf.status();
    absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g = grammar::Grammar::parse(*gbnf);
    ASSERT_TRUE(g.ok()) << schema << ": " << g.status() << "\n" << *gbnf;
    for (int seed = 0; seed < kSamples; ++seed) {
      GenerationRequest r;
      r.prompt = "Once upon a time";
      r.sampling.temperature = 1.0f;
      r.sampling.seed = static_cast<std::uint64_t>(seed);
      r.max_tokens = 400;
      r.grammar = *g;
      absl::StatusOr<GenerationResult> out = generate(*model->module, *model->tokenizer, r);
      ASSERT_TRUE(out.ok()) << schema.filename() << " seed " << seed << ": " << out.status();
      tokens += out->generated_ids.size();
      if (samples.size() > 1) samples += ",\n";
      samples += "{\"schema\": " + json_quote(schema.filename().string()) +
                 ", \"seed\": " + std::to_string(seed) +
                 ", \"finish\": " + json_quote(finish_reason_name(out->finish)) +
                 ", \"text\": " + json_quote(out->text) + "}";
    }
  }
  samples += "]\n";
  const std::filesystem::path file =
      std::filesystem::path(::testing::TempDir()) / ("structured_output_" + GetParam() + ".json");
  std::ofstream(file, std::ios::binary) << samples;

  const std::string cmd = "python3 " +
                          (schema_dir().parent_path() / "validate_samples.py").string() + " " +
                          schema_dir().string() + " " + file.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string report;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) report.append(buf, n);
  const int status = pclose(p);
  EXPECT_EQ(status, 0) << "`" << cmd << "` (python3-jsonschema is required):\n" << report;
  std::printf("%s: %d samples x %zu schemas, %zu tokens\n%s", GetParam().c_str(), kSamples,
              schemas.size(), tokens, report.c_str());
}

INSTANTIATE_TEST_SUITE_P(Models, StructuredOutput,
                         ::testing::Values("random_weights", "stories260K"));

}  // namespace
}  // namespace hearth::engine
