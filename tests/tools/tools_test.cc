// hearth-generate and hearth-model run as a user runs them: real processes
// (posix_spawn), real files, stdout and stderr captured separately.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "engine/unicode.h"
#include "tests/support/server_process.h"
#include "tests/support/shared_data.h"
#include "tests/support/temp_dir_test.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using engine::GgmlType;
using engine::GgufFile;
using testing::read_file;
using testing::write_file;

// ---------------------------------------------------------------------------
// A small, strict JSON reader: enough to check that each line the tools print
// is one well-formed JSON value and to pull out the fields the tests need.

struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = Kind::kNull;
  bool b = false;
  double number = 0;
  std::string str;
  std::vector<Json> items;
  std::map<std::string, Json> fields;

  const Json* get(const std::string& key) const {
    auto it = fields.find(key);
    return it == fields.end() ? nullptr : &it->second;
  }
  std::vector<std::int64_t> ints() const {
    std::vector<std::int64_t> out;
    for (const Json& j : items) out.push_back(static_cast<std::int64_t>(j.number));
    return out;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}

  // The whole text must be exactly one value (surrounding whitespace allowed).
  bool parse(Json* out) {
    skip_ws();
    if (!value(out, 0)) return false;
    skip_ws();
    return pos_ == s_.size();
  }

 private:
  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool literal(const char* word) {
    const std::string w(word);
    if (s_.compare(pos_, w.size(), w) != 0) return false;
    pos_ += w.size();
    return true;
  }
  bool hex4(std::uint32_t* out) {
    if (pos_ + 4 > s_.size()) return false;
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<std::uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<std::uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<std::uint32_t>(c - 'A' + 10);
      } else {
        return false;
      }
    }
    *out = v;
    return true;
  }
  bool string(std::string* out) {
    if (pos_ >= s_.size() || s_[pos_] != '"') return false;
    ++pos_;
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;  // raw control characters
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (pos_ >= s_.size()) return false;
      const char e = s_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          *out += e;
          break;
        case 'b':
          *out += '\b';
          break;
        case 'f':
          *out += '\f';
          break;
        case 'n':
          *out += '\n';
          break;
        case 'r':
          *out += '\r';
          break;
        case 't':
          *out += '\t';
          break;
        case 'u': {
          std::uint32_t cp = 0;
          if (!hex4(&cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
            std::uint32_t lo = 0;
            if (!literal("\\u") || !hex4(&lo) || lo < 0xDC00 || lo >= 0xE000) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return false;
          }
          engine::append_utf8(*out, static_cast<char32_t>(cp));
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }
  bool number(double* out) {
    const std::size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const std::size_t d = pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      return pos_ - d;
    };
    const std::size_t int_start = pos_;
    const std::size_t n_int = digits();
    if (n_int == 0 || (n_int > 1 && s_[int_start] == '0')) return false;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return false;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) return false;
    }
    *out = std::strtod(s_.substr(start, pos_ - start).c_str(), nullptr);
    return true;
  }
  bool value(Json* out, int depth) {
    if (depth > 64 || pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '{') {
      out->kind = Json::Kind::kObject;
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, true;
      for (;;) {
        skip_ws();
        std::string key;
        if (!string(&key)) return false;
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_++] != ':') return false;
        skip_ws();
        Json v;
        if (!value(&v, depth + 1)) return false;
        if (!out->fields.emplace(key, std::move(v)).second) return false;  // duplicate key
        skip_ws();
        if (pos_ >= s_.size()) return false;
        if (s_[pos_] == '}') return ++pos_, true;
        if (s_[pos_++] != ',') return false;
      }
    }
    if (c == '[') {
      out->kind = Json::Kind::kArray;
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, true;
      for (;;) {
        skip_ws();
        Json v;
        if (!value(&v, depth + 1)) return false;
        out->items.push_back(std::move(v));
        skip_ws();
        if (pos_ >= s_.size()) return false;
        if (s_[pos_] == ']') return ++pos_, true;
        if (s_[pos_++] != ',') return false;
      }
    }
    if (c == '"') {
      out->kind = Json::Kind::kString;
      return string(&out->str);
    }
    if (literal("true")) {
      out->kind = Json::Kind::kBool;
      out->b = true;
      return true;
    }
    if (literal("false")) {
      out->kind = Json::Kind::kBool;
      return true;
    }
    if (literal("null")) return true;
    out->kind = Json::Kind::kNumber;
    return number(&out->number);
  }

  const std::string& s_;
  std::size_t pos_ = 0;
};

std::optional<Json> parse_json(const std::string& text) {
  Json j;
  JsonParser p(text);
  if (!p.parse(&j)) return std::nullopt;
  return j;
}

TEST(JsonReader, AcceptsValidAndRejectsInvalidText) {
  auto j = parse_json(R"( {"a":[1,-2.5e3,true,null],"s":"x\n\u00e9\ud83d\ude00","o":{}} )");
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->get("a")->items.size(), 4u);
  EXPECT_DOUBLE_EQ(j->get("a")->items[1].number, -2500.0);
  EXPECT_EQ(j->get("s")->str, "x\n\xc3\xa9\xf0\x9f\x98\x80");
  for (const char* bad : {"", "{", "[1,]", "{\"a\":1,}", "01", "\"a\nb\"", "{\"a\" 1}", "[1] x",
                          "{\"a\":1,\"a\":2}", "\"\\x\"", "1.", "nul"}) {
    EXPECT_FALSE(parse_json(bad).has_value()) << bad;
  }
}

// ---------------------------------------------------------------------------
// Running the tools.

using hearth::testing::ProcessResult;

// A refused command line: a clean non-zero exit (no crash) whose stderr
// mentions `expected` (the flag or file at fault).
void expect_refused(const ProcessResult& r, const std::vector<std::string>& args,
                    const std::string& expected) {
  std::string cmd;
  for (const auto& a : args) cmd += " " + a;
  EXPECT_NE(r.exit_code, 0) << cmd;
  EXPECT_LT(r.exit_code, 128) << cmd << ": crashed";
  EXPECT_NE(r.err.find(expected), std::string::npos)
      << cmd << ": stderr should mention '" << expected << "' but is:\n"
      << r.err;
}

class ToolsTest : public testing::TempDirTest {
 protected:
  fs::path path(const std::string& name) const { return dir_ / name; }

  // Runs `binary args...` with `input` on stdin; stdout and stderr go to files
  // (no pipe can fill up and block the child).
  // Runs `binary args...` to completion (tests/support/server_process.h).
  ProcessResult run(const std::string& binary, const std::vector<std::string>& args,
                    const std::string& input = "") {
    ProcessResult r = hearth::testing::run_process(binary, args, input);
    EXPECT_NE(r.exit_code, -1) << r.err;
    return r;
  }
  ProcessResult generate(const std::vector<std::string>& args) {
    return run(HEARTH_GENERATE_BIN, args);
  }
  ProcessResult model(const std::vector<std::string>& args, const std::string& input = "") {
    return run(HEARTH_MODEL_BIN, args, input);
  }
};

std::string stories() { return (testing::shared_dir() / "models/stories260K.gguf").string(); }

// The reference continuation of "Once upon a time": its ids and its text, read
// from the reference file (the text is written there as a JSON string).
struct Reference {
  std::vector<std::int64_t> ids;
  std::string text;
};
Reference once_upon_a_time_reference() {
  const std::string md = read_file(testing::shared_dir() / "reference/stories260K-greedy.md");
  Reference r;
  const std::size_t section = md.find("## \"Once upon a time\"");
  EXPECT_NE(section, std::string::npos);
  if (section == std::string::npos) return r;
  auto line_after = [&](const std::string& label) {
    const std::size_t at = md.find(label, section);
    EXPECT_NE(at, std::string::npos) << label;
    if (at == std::string::npos) return std::string();
    const std::size_t begin = at + label.size();
    return md.substr(begin, md.find('\n', begin) - begin);
  };
  auto ids = parse_json(line_after("- generated ids: "));
  EXPECT_TRUE(ids.has_value());
  if (ids) r.ids = ids->ints();
  auto text = parse_json(line_after("- generated text: "));
  EXPECT_TRUE(text.has_value());
  if (text) r.text = text->str;
  EXPECT_EQ(r.ids.size(), 64u);
  return r;
}

// Every stdout line parsed as JSON; a line that is not one JSON object fails the test.
std::vector<Json> json_lines(const std::string& out) {
  std::vector<Json> lines;
  std::size_t start = 0;
  while (start < out.size()) {
    std::size_t end = out.find('\n', start);
    EXPECT_NE(end, std::string::npos) << "the last line has no newline";
    if (end == std::string::npos) end = out.size();
    const std::string line = out.substr(start, end - start);
    auto j = parse_json(line);
    EXPECT_TRUE(j.has_value() && j->kind == Json::Kind::kObject) << "not a JSON object: " << line;
    if (j) lines.push_back(std::move(*j));
    start = end + 1;
  }
  return lines;
}

// ---------------------------------------------------------------------------
// hearth-generate

TEST_F(ToolsTest, GenerateRefusesBadArgumentsNamingTheFlagOrFile) {
  HEARTH_REQUIRE_SHARED();
  const std::string text_file = path("notes.txt").string();
  write_file(text_file, "this is a text file, not a model\n");
  const std::string missing = path("no-such-model.gguf").string();
  struct Case {
    std::vector<std::string> args;
    std::string expected;  // in stderr
  };
  const std::vector<Case> cases = {
      {{"--prompt", "hi"}, "--model is required"},
      {{"--model", missing, "--prompt", "hi"}, missing},
      {{"--model", text_file, "--prompt", "hi"}, text_file},
      {{"--model", text_file, "--prompt", "hi"}, "not a GGUF file"},
      {{"--model", stories(), "--prompt", "hi", "--frobnicate"}, "--frobnicate"},
      {{"--model", stories(), "--prompt", "hi", "--max-tokens", "abc"}, "--max-tokens"},
      {{"--model", stories(), "--prompt", "hi", "--max-tokens", "abc"}, "'abc'"},
      {{"--model", stories(), "--prompt", "hi", "--temperature", "1000"}, "--temperature"},
      {{"--model", stories(), "--prompt", "hi", "--temperature", "1000"}, "out of range"},
      {{"--model", stories(), "--prompt", "hi", "--temperature", "-1"}, "--temperature"},
  };
  for (const Case& c : cases) {
    const ProcessResult r = generate(c.args);
    expect_refused(r, c.args, c.expected);
    EXPECT_EQ(r.out, "") << c.expected << ": nothing belongs on stdout";
  }
}

TEST_F(ToolsTest, GenerateGreedyPrintsTheReferenceText) {
  HEARTH_REQUIRE_SHARED();
  const Reference ref = once_upon_a_time_reference();
  const ProcessResult r = generate({"--model", stories(), "--prompt", "Once upon a time",
                                    "--max-tokens", "64", "--temperature", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Exactly the text and a newline: logs and statistics belong on stderr.
  EXPECT_EQ(r.out, ref.text + "\n");
  EXPECT_NE(r.err.find("finish: length"), std::string::npos) << r.err;
}

TEST_F(ToolsTest, GenerateJsonPrintsOneObjectPerLineAndASummary) {
  HEARTH_REQUIRE_SHARED();
  const Reference ref = once_upon_a_time_reference();
  const ProcessResult r = generate({"--model", stories(), "--prompt", "Once upon a time",
                                    "--max-tokens", "64", "--temperature", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<Json> lines = json_lines(r.out);
  ASSERT_GE(lines.size(), 2u) << r.out;
  // The pieces: text and token, in generation order, adding up to the text.
  std::string streamed;
  std::vector<std::int64_t> streamed_ids;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    const Json* text = lines[i].get("text");
    const Json* token = lines[i].get("token");
    ASSERT_TRUE(text != nullptr && text->kind == Json::Kind::kString) << "line " << i;
    ASSERT_TRUE(token != nullptr && token->kind == Json::Kind::kNumber) << "line " << i;
    streamed += text->str;
    if (token->number >= 0) streamed_ids.push_back(static_cast<std::int64_t>(token->number));
  }
  EXPECT_EQ(streamed, ref.text);
  EXPECT_EQ(streamed_ids, ref.ids);
  // The summary.
  const Json& s = lines.back();
  ASSERT_NE(s.get("prompt_ids"), nullptr);
  ASSERT_NE(s.get("generated_ids"), nullptr);
  ASSERT_NE(s.get("finish_reason"), nullptr);
  ASSERT_NE(s.get("stats"), nullptr);
  EXPECT_EQ(s.get("prompt_ids")->ints(), (std::vector<std::int64_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(s.get("generated_ids")->ints(), ref.ids);
  EXPECT_EQ(s.get("finish_reason")->str, "length");
  ASSERT_NE(s.get("text"), nullptr);
  EXPECT_EQ(s.get("text")->str, ref.text);
  const Json& stats = *s.get("stats");
  ASSERT_EQ(stats.kind, Json::Kind::kObject);
  ASSERT_NE(stats.get("prompt_tokens"), nullptr);
  ASSERT_NE(stats.get("generated_tokens"), nullptr);
  EXPECT_EQ(stats.get("prompt_tokens")->number, 5);
  EXPECT_EQ(stats.get("generated_tokens")->number, 64);
  for (const char* key : {"time_to_first_token_s", "decode_tokens_per_s", "total_s"}) {
    ASSERT_NE(stats.get(key), nullptr) << key;
    EXPECT_GT(stats.get(key)->number, 0) << key;
  }
}

// ---------------------------------------------------------------------------
// hearth-model

TEST_F(ToolsTest, InspectShowsTheHeaderFacts) {
  HEARTH_REQUIRE_SHARED();
  const ProcessResult r = model({"inspect", stories()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Facts from models/SOURCES.md.
  for (const char* fact :
       {"GGUF version 3", "1185376 bytes", "alignment 32", "tensor data at 14176",
        "metadata (19):", "tensors (48):", "bytes by type: F32 1171200;"}) {
    EXPECT_NE(r.out.find(fact), std::string::npos) << fact << "\n" << r.out;
  }
  auto line_of = [&](const std::string& name) {
    const std::size_t at = r.out.find("  " + name + " ");
    if (at == std::string::npos) return std::string();
    return r.out.substr(at, r.out.find('\n', at) - at);
  };
  const std::string down = line_of("blk.0.ffn_down.weight");
  EXPECT_NE(down.find("F32"), std::string::npos) << down;
  EXPECT_NE(down.find("[172 x 64]"), std::string::npos) << down;
  EXPECT_NE(down.find("44032 bytes"), std::string::npos) << down;
  const std::string embd = line_of("token_embd.weight");
  EXPECT_NE(embd.find("[64 x 512]"), std::string::npos) << embd;
  EXPECT_NE(line_of("output_norm.weight").find("[64]"), std::string::npos);
  const std::string heads = line_of("llama.attention.head_count_kv");
  EXPECT_NE(heads.find("uint32"), std::string::npos) << heads;
  EXPECT_EQ(heads.substr(heads.find_last_of(' ') + 1), "4") << heads;
}

TEST_F(ToolsTest, TokenizeReadsStdinAndPrintsAJsonArray) {
  HEARTH_REQUIRE_SHARED();
  auto ids = [&](const std::vector<std::string>& flags, const std::string& text) {
    std::vector<std::string> args = {"tokenize", stories()};
    args.insert(args.end(), flags.begin(), flags.end());
    const ProcessResult r = model(args, text);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.empty() ? '\0' : r.out.back(), '\n');
    auto j = parse_json(r.out);
    EXPECT_TRUE(j.has_value() && j->kind == Json::Kind::kArray) << r.out;
    return j ? j->ints() : std::vector<std::int64_t>{};
  };
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(ids({}, "Hello world"), (V{1, 346, 306, 414, 263, 304, 341}));
  EXPECT_EQ(ids({"--bos"}, "Hello world"), (V{1, 346, 306, 414, 263, 304, 341}));
  EXPECT_EQ(ids({"--no-bos"}, "Hello world"), (V{346, 306, 414, 263, 304, 341}));
  EXPECT_EQ(ids({}, ""), (V{1}));
  EXPECT_EQ(ids({"--parse-special"}, "<s>Once</s>"), (V{1, 1, 403, 2}));
  // Without --parse-special "<s>" is text: no control id after the BOS.
  const V plain = ids({}, "<s>Once</s>");
  ASSERT_GT(plain.size(), 4u);
  EXPECT_EQ(plain[0], 1);
  for (std::size_t i = 1; i < plain.size(); ++i) {
    EXPECT_NE(plain[i], 1) << "at " << i;
    EXPECT_NE(plain[i], 2) << "at " << i;
  }
  EXPECT_EQ(ids({"--no-parse-special"}, "<s>Once</s>"), plain);
}

TEST_F(ToolsTest, QuantizeWritesLoadableFilesOfEachType) {
  HEARTH_REQUIRE_SHARED();
  auto src = GgufFile::open(stories());
  ASSERT_TRUE(src.ok()) << src.status();
  for (const auto& [type, ggml, file_type] :
       {std::tuple{"q8_0", GgmlType::kQ8_0, 7u}, std::tuple{"q4_0", GgmlType::kQ4_0, 2u},
        std::tuple{"q4_1", GgmlType::kQ4_1, 3u}, std::tuple{"q5_0", GgmlType::kQ5_0, 8u},
        std::tuple{"q5_1", GgmlType::kQ5_1, 9u}}) {
    SCOPED_TRACE(type);
    const std::string out = path(std::string("stories-") + type + ".gguf").string();
    const ProcessResult r = model({"quantize", stories(), out, "--type", type});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto q = GgufFile::open(out);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(*(*q)->get_uint("general.file_type"), file_type);
    // Every key of the source survives (plus general.file_type and
    // general.quantization_version, which it lacks).
    EXPECT_EQ((*q)->metadata().size(), (*src)->metadata().size() + 2);
    ASSERT_EQ((*q)->tensors().size(), 48u);
    int quantized = 0, down = 0, norms = 0;
    for (const auto& t : (*q)->tensors()) {
      const std::string name(t.name);
      const engine::GgufTensorInfo* orig = (*src)->find_tensor(t.name);
      ASSERT_NE(orig, nullptr) << name;
      EXPECT_EQ(t.n_dims, orig->n_dims) << name;
      EXPECT_EQ(t.n_elements, orig->n_elements) << name;
      if (name.find("ffn_down.weight") != std::string::npos) {
        // 172 wide: not a multiple of 32, kept as F32, byte for byte.
        EXPECT_EQ(t.type, GgmlType::kF32) << name;
        EXPECT_EQ(std::memcmp(t.data, orig->data, t.n_bytes), 0) << name;
        ++down;
      } else if (t.n_dims == 1) {
        EXPECT_EQ(t.type, GgmlType::kF32) << name;
        EXPECT_EQ(std::memcmp(t.data, orig->data, t.n_bytes), 0) << name;
        ++norms;
      } else if (name == "output.weight" && ggml != GgmlType::kQ8_0) {
        // The output projection keeps more precision, as llama-quantize's:
        // Q6_K for rows of whole 256-blocks, else (64 wide here) Q8_0.
        EXPECT_EQ(t.type, GgmlType::kQ8_0) << name;
        ++quantized;
      } else {
        EXPECT_EQ(t.type, ggml) << name;
        ++quantized;
      }
    }
    EXPECT_EQ(down, 5);
    EXPECT_EQ(norms, 11);               // 5 x (attn_norm, ffn_norm) + output_norm
    EXPECT_EQ(quantized, 48 - 5 - 11);  // token_embd, output, 5 x 6 projections
    EXPECT_NE(r.err.find("32 tensors quantized"), std::string::npos) << r.err;
  }
  // The Q8_0 file generates: 64 tokens, and greedy decoding stays on the F32
  // reference path at least at the start (Q8_0's relative error per weight is
  // below 1/254; teacher-forced top-1 agreement is >= 95% in quantization_quality_test).
  const Reference ref = once_upon_a_time_reference();
  const ProcessResult g =
      generate({"--model", path("stories-q8_0.gguf").string(), "--prompt", "Once upon a time",
                "--max-tokens", "64", "--ignore-eos", "--json"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const std::vector<Json> lines = json_lines(g.out);
  ASSERT_FALSE(lines.empty());
  ASSERT_NE(lines.back().get("generated_ids"), nullptr) << g.out;
  const std::vector<std::int64_t> got = lines.back().get("generated_ids")->ints();
  ASSERT_EQ(got.size(), 64u);
  EXPECT_EQ(lines.back().get("finish_reason")->str, "length");
  EXPECT_EQ(std::vector<std::int64_t>(got.begin(), got.begin() + 8),
            std::vector<std::int64_t>(ref.ids.begin(), ref.ids.begin() + 8));
  // The older types' files run (natively) as well.
  for (const char* type : {"q4_1", "q5_0", "q5_1"}) {
    const ProcessResult o =
        generate({"--model", path(std::string("stories-") + type + ".gguf").string(), "--prompt",
                  "Once upon a time", "--max-tokens", "16", "--ignore-eos", "--json"});
    ASSERT_EQ(o.exit_code, 0) << type << ": " << o.err;
    const std::vector<Json> out = json_lines(o.out);
    ASSERT_FALSE(out.empty()) << type;
    ASSERT_NE(out.back().get("generated_ids"), nullptr) << type << ": " << o.out;
    EXPECT_EQ(out.back().get("generated_ids")->ints().size(), 16u) << type;
  }
}

TEST_F(ToolsTest, QuantizeRefusesBadArguments) {
  HEARTH_REQUIRE_SHARED();
  ProcessResult r = model({"quantize", stories(), path("x.gguf").string(), "--type", "q2_k"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--type"), std::string::npos) << r.err;
  r = model({"quantize", path("missing.gguf").string(), path("x.gguf").string(), "--type", "q8_0"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(path("missing.gguf").string()), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("x.gguf")));

  // A quantized source is refused (its weights were copied as they were,
  // under a file type that named the new one).
  const std::string q8 = path("q8.gguf").string();
  ASSERT_EQ(model({"quantize", stories(), q8, "--type", "q8_0"}).exit_code, 0);
  {
    auto f = GgufFile::open(q8);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(*(*f)->get_uint("general.quantization_version"), 2u);  // as llama-quantize writes
  }
  r = model({"quantize", q8, path("x.gguf").string(), "--type", "q4_0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("' is already Q8_0; quantize from an F32, F16 or BF16 file"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(path("x.gguf")));
  // OUT the same file as IN (here through another name) is refused, the file untouched.
  const std::string before = read_file(q8);
  r = model({"quantize", q8, (path("") / "." / "q8.gguf").string(), "--type", "q8_0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is IN; write the quantized copy to another file"), std::string::npos)
      << r.err;
  EXPECT_TRUE(read_file(q8) == before);
  // A write that fails (OUT is a directory) leaves no partial file beside it.
  fs::create_directory(path("out-dir"));
  r = model({"quantize", stories(), path("out-dir").string(), "--type", "q8_0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cannot write '" + path("out-dir").string() + "': Is a directory"),
            std::string::npos)
      << r.err;
  for (const auto& e : fs::directory_iterator(path("")))
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();
}

// Rows of whole 256-blocks give the output projection Q6_K (llama-quantize's
// choice for 4- and 5-bit files), and the file generates.
TEST_F(ToolsTest, QuantizeGivesTheOutputProjectionQ6KWhereItFits) {
  const std::string f32 = path("f32.gguf").string(), q4 = path("q4.gguf").string();
  ASSERT_EQ(model({"synth", f32, "--type", "f32", "--dim", "256", "--layers", "2", "--heads", "4",
                   "--ffn", "512", "--vocab", "512", "--context", "128"})
                .exit_code,
            0);
  const ProcessResult r = model({"quantize", f32, q4, "--type", "q4_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("output.weight as Q6_K"), std::string::npos) << r.err;
  auto f = GgufFile::open(q4);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->find_tensor("output.weight")->type, GgmlType::kQ6_K);
  EXPECT_EQ((*f)->find_tensor("blk.0.ffn_up.weight")->type, GgmlType::kQ4_0);
  const ProcessResult g =
      generate({"--model", q4, "--prompt", "the cat", "--max-tokens", "8", "--ignore-eos"});
  EXPECT_EQ(g.exit_code, 0) << g.err;
}

// Gemma files always carry a window, and llama.cpp aborts on 0: a synthetic
// Gemma gets the family's own unless told.
TEST_F(ToolsTest, SynthGivesGemmaItsOwnWindowUnlessTold) {
  const std::vector<std::string> shape = {"--dim", "64",    "--layers", "2",       "--heads",
                                          "4",     "--ffn", "128",      "--vocab", "512"};
  const auto window_of = [&](const std::string& arch, std::vector<std::string> extra) {
    std::vector<std::string> args = {"synth", path(arch + ".gguf").string(), "--arch", arch};
    args.insert(args.end(), shape.begin(), shape.end());
    args.insert(args.end(), extra.begin(), extra.end());
    const ProcessResult r = model(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto f = GgufFile::open(path(arch + ".gguf").string());
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? *(*f)->get_uint(arch + ".attention.sliding_window") : 0;
  };
  EXPECT_EQ(window_of("gemma2", {}), 4096u);
  EXPECT_EQ(window_of("gemma3", {}), 1024u);
  EXPECT_EQ(window_of("gemma2", {"--sliding-window", "16"}), 16u);
}

TEST_F(ToolsTest, SynthIsDeterministicAndItsModelGenerates) {
  const std::vector<std::string> shape = {"--dim",     "64",    "--layers", "2",       "--heads",
                                          "4",         "--ffn", "128",      "--vocab", "512",
                                          "--context", "256",   "--type",   "q8_0"};
  auto synth = [&](const std::string& name, const std::string& seed) {
    std::vector<std::string> args = {"synth", path(name).string(), "--seed", seed};
    args.insert(args.end(), shape.begin(), shape.end());
    const ProcessResult r = model(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return read_file(path(name));
  };
  const std::string a = synth("a.gguf", "5"), b = synth("b.gguf", "5"), c = synth("c.gguf", "6");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "same flags, different bytes";
  EXPECT_EQ(a.size(), c.size());
  EXPECT_FALSE(a == c) << "a different seed gave the same bytes";
  auto f = GgufFile::open(path("a.gguf").string());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->get_uint("llama.embedding_length"), 64u);
  EXPECT_EQ(*(*f)->get_uint("llama.block_count"), 2u);
  EXPECT_EQ(*(*f)->get_uint("general.file_type"), 7u);
  EXPECT_EQ((*f)->find_tensor("blk.1.ffn_up.weight")->type, GgmlType::kQ8_0);
  EXPECT_EQ((*f)->get_string_array("tokenizer.ggml.tokens")->size(), 512u);

  const ProcessResult g = generate({"--model", path("a.gguf").string(), "--prompt", "the cat",
                                    "--max-tokens", "12", "--ignore-eos", "--json"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const std::vector<Json> lines = json_lines(g.out);
  ASSERT_FALSE(lines.empty());
  ASSERT_NE(lines.back().get("generated_ids"), nullptr) << g.out;
  const std::vector<std::int64_t> ids = lines.back().get("generated_ids")->ints();
  EXPECT_EQ(ids.size(), 12u);
  for (std::int64_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 512);
  }
}

// --vocab-from: the synthetic model carries another file's vocabulary
// (pieces, scores, types, special ids), and the tokenizer built from it
// tokenizes as the original's does.
TEST_F(ToolsTest, SynthTakesAnotherFilesVocabulary) {
  HEARTH_REQUIRE_SHARED();
  const std::string source = (testing::shared_dir() / "models/llama-2-tiny-random.gguf").string();
  const std::string out = path("vocab.gguf").string();
  const ProcessResult r = model({"synth", out, "--dim", "64", "--layers", "1", "--heads", "4",
                                 "--ffn", "128", "--context", "128", "--vocab-from", source});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto original = GgufFile::open(source);
  auto synthetic = GgufFile::open(out);
  ASSERT_TRUE(original.ok() && synthetic.ok());
  EXPECT_EQ(*(*original)->get_string_array("tokenizer.ggml.tokens"),
            *(*synthetic)->get_string_array("tokenizer.ggml.tokens"));
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"})
    EXPECT_EQ(*(*original)->get_uint(key), *(*synthetic)->get_uint(key)) << key;
  auto a = engine::Tokenizer::from_gguf(**original);
  auto b = engine::Tokenizer::from_gguf(**synthetic);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string text = "Once upon a time, {\"name\": \"Lily\"} naïve 42";
  EXPECT_EQ(*(*a)->encode(text, {}), *(*b)->encode(text, {}));

  const ProcessResult bad =
      model({"synth", path("bad.gguf").string(), "--vocab-from", path("absent.gguf").string()});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--vocab-from"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find(path("absent.gguf").string()), std::string::npos) << bad.err;
}

// The K-quant types, as a llama.cpp quantizer would lay them out: Q6_K where
// the _M types put it (the output; attn_v and ffn_down of the first and last
// eighth of the layers and every third between), loadable and generating.
TEST_F(ToolsTest, SynthWritesKQuantMixesThatGenerate) {
  struct Case {
    std::string type;
    std::uint32_t file_type;
    GgmlType main, v0, v1;  // ffn_up, attn_v of layers 0 and 1 (of 8)
  };
  const Case cases[] = {{"q4_k", 14, GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ4_K},
                        {"q4_k_m", 15, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ4_K},
                        {"q5_k_m", 17, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ5_K},
                        {"q6_k", 18, GgmlType::kQ6_K, GgmlType::kQ6_K, GgmlType::kQ6_K}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.type);
    const std::string out = path("k-" + c.type + ".gguf").string();
    const ProcessResult r =
        model({"synth", out, "--dim", "256", "--layers", "8", "--heads", "4", "--ffn", "512",
               "--vocab", "512", "--context", "128", "--type", c.type});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto f = GgufFile::open(out);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(*(*f)->get_uint("general.file_type"), c.file_type);
    EXPECT_EQ((*f)->find_tensor("blk.3.ffn_up.weight")->type, c.main);
    EXPECT_EQ((*f)->find_tensor("blk.0.attn_v.weight")->type, c.v0);
    EXPECT_EQ((*f)->find_tensor("blk.1.attn_v.weight")->type, c.v1);
    EXPECT_EQ((*f)->find_tensor("output.weight")->type,
              c.type == "q4_k" ? GgmlType::kQ4_K : GgmlType::kQ6_K);
    const ProcessResult g = generate(
        {"--model", out, "--prompt", "the cat", "--max-tokens", "6", "--ignore-eos", "--json"});
    ASSERT_EQ(g.exit_code, 0) << g.err;
    const std::vector<Json> lines = json_lines(g.out);
    ASSERT_FALSE(lines.empty());
    ASSERT_NE(lines.back().get("generated_ids"), nullptr) << g.out;
    EXPECT_EQ(lines.back().get("generated_ids")->ints().size(), 6u);
  }
}

// render-chat prints exactly the text Chat would tokenize. The expected
// texts are Python jinja2's renderings of the same template and messages
// (tests/chat/render_jinja2.py, bos_token "<s>", eos_token "</s>").
TEST_F(ToolsTest, RenderChatPrintsTheTemplatesTextExactly) {
  HEARTH_REQUIRE_SHARED();
  const std::string templates = std::string(HEARTH_SOURCE_DIR) + "/tests/chat/templates/";
  const std::string zephyr = templates + "HuggingFaceH4-zephyr-7b-beta.jinja";
  const std::string mistral = templates + "mistralai-Mistral-7B-Instruct-v0.2.jinja";
  const std::string messages = (dir_ / "messages.json").string();
  {
    std::ofstream out(messages);
    out << R"([{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "h\u00e9llo \u4e16\u754c"}])";
  }
  ProcessResult r = model({"render-chat", stories(), "--messages", messages, "--template", zephyr});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "<|system|>\nBe brief.</s>\n<|user|>\nh\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C</s>\n"
            "<|assistant|>\n");
  r = model({"render-chat", stories(), "--messages", messages, "--template", zephyr,
             "--no-generation-prompt"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "<|system|>\nBe brief.</s>\n<|user|>\nh\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C</s>\n");
  // The template refuses a system message: its message, exit status 1.
  r = model({"render-chat", stories(), "--messages", messages, "--template", mistral});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("Conversation roles must alternate"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("chat template (--template)"), std::string::npos)
      << r.err;  // this tool's flag
  // stories260K carries no template of its own; bad files are named.
  r = model({"render-chat", stories(), "--messages", messages});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no chat template"), std::string::npos) << r.err;
  const std::string missing = (dir_ / "missing.json").string();
  r = model({"render-chat", stories(), "--messages", missing, "--template", zephyr});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
  r = model({"render-chat", stories(), "--messages", messages, "--template", missing});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
  // Directories as --messages, --tools or --template: named, where reading
  // one aborted the tool (an uncaught stream exception) or read an empty
  // template.
  const std::string a_dir = dir_.string();
  for (const char* flag : {"--messages", "--tools", "--template"}) {
    std::vector<std::string> args = {"render-chat", stories(),    "--messages",
                                     messages,      "--template", zephyr};
    if (std::string(flag) == "--tools") {
      args.push_back(flag);
      args.push_back(a_dir);
    } else {
      args[std::string(flag) == "--messages" ? 3 : 5] = a_dir;
    }
    r = model(args);
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.err;
    EXPECT_NE(r.err.find("cannot read '" + a_dir + "': it is a directory"), std::string::npos)
        << flag << ": " << r.err;
  }
  // A million levels of brackets: refused, not followed into a stack overflow.
  const std::string deep = (dir_ / "deep.json").string();
  std::ofstream(deep) << std::string(1000000, '[') << std::string(1000000, ']');
  r = model({"render-chat", stories(), "--messages", deep, "--template", zephyr});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(deep + "': nested deeper than 512 levels"), std::string::npos) << r.err;
}

TEST_F(ToolsTest, SynthAndUnknownCommandsRefuseBadArguments) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::string out = path("bad.gguf").string();
  const std::vector<Case> cases = {
      {{"synth", out, "--dim", "100", "--heads", "8"}, "dim 100 is not a multiple of heads 8"},
      {{"synth", out, "--type", "q5_0"}, "--type: 'q5_0'"},
      {{"synth", out, "--dim", "48", "--heads", "3", "--type", "q8_0"}, "multiples of 32"},
      {{"synth", out, "--dim", "96", "--heads", "3", "--type", "q4_k"}, "multiples of 256"},
      {{"synth", out, "--vocab", "10"}, "--vocab"},
      {{"synth", out, "--layers", "two"}, "--layers"},
      {{"synth"}, "expected one OUT file"},
      {{"frobnicate", out}, "unknown command 'frobnicate'"},
      {{"inspect", path("absent.gguf").string()}, path("absent.gguf").string()},
  };
  for (const Case& c : cases) {
    expect_refused(model(c.args), c.args, c.expected);
  }
  EXPECT_FALSE(fs::exists(out)) << "a refused synth must not leave a file";
  // No arguments at all: usage on stderr, non-zero.
  const ProcessResult r = model({});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("usage:"), std::string::npos);
  // COMMAND --help prints the usage (it was "unknown flag --help (see --help)").
  for (const char* command :
       {"inspect", "tokenize", "render-chat", "quantize", "synth", "perplexity"}) {
    const ProcessResult help = model({command, "--help"});
    EXPECT_EQ(help.exit_code, 0) << command << ": " << help.err;
    EXPECT_NE(help.out.find("usage:"), std::string::npos) << command;
  }
}

}  // namespace
}  // namespace hearth
