// The tekken and gpt-4o pre-tokenizers against reference splits made outside
// hearth: tests/engine/data/pretokenizer_tekken_gpt4o.json, written by
// tests/support/make_pretokenizer_reference.py, which runs the Hugging Face
// regexes with Python's third-party `regex` module (its own Unicode tables and
// backtracking engine) over a corpus of tricky strings.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/pretokenizer.h"
#include "engine/unicode.h"

namespace hearth::engine {
namespace {

const std::filesystem::path kReference =
    std::filesystem::path(HEARTH_SOURCE_DIR) / "tests/engine/data/pretokenizer_tekken_gpt4o.json";

nlohmann::json load_reference() {
  std::ifstream in(kReference);
  EXPECT_TRUE(in.good()) << kReference;
  return nlohmann::json::parse(in);
}

// Printable for failure messages: control characters escaped.
std::string show(const std::vector<std::string>& words) {
  std::string out = "[";
  for (const std::string& w : words) {
    if (out.size() > 1) out += ", ";
    out += '"';
    for (const char ch : w) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == '\t') {
        out += "\\t";
      } else {
        out += ch;
      }
    }
    out += '"';
  }
  return out + "]";
}

TEST(PreTokenizerReference, ReferenceIsForTheTablesUnicodeVersion) {
  const nlohmann::json doc = load_reference();
  // The script refuses code points whose category changed after this version.
  EXPECT_EQ(doc.at("unicode_version").get<std::string>(), unicode_version());
  EXPECT_GE(doc.at("cases").size(), 60u);
}

TEST(PreTokenizerReference, TekkenAndGpt4oMatchTheHuggingFaceRegexes) {
  const nlohmann::json doc = load_reference();
  for (const char* pre : {"tekken", "gpt-4o"}) {
    auto p = PreTokenizer::for_name(pre);
    ASSERT_TRUE(p.ok()) << p.status();
    int checked = 0;
    for (const nlohmann::json& c : doc.at("cases")) {
      const std::string name = c.at("name").get<std::string>();
      const std::string text = c.at("text").get<std::string>();
      const auto want = c.at(pre).get<std::vector<std::string>>();
      const std::vector<std::string> got = p->split(text);
      EXPECT_EQ(got, want) << pre << " case '" << name << "': got " << show(got) << ", want "
                           << show(want);
      ++checked;
    }
    EXPECT_EQ(checked, static_cast<int>(doc.at("cases").size()));
  }
}

}  // namespace
}  // namespace hearth::engine
