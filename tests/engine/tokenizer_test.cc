#include "engine/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <sstream>

#include "engine/gguf_writer.h"
#include "engine/pretokenizer.h"
#include "engine/token_stream_decoder.h"
#include "engine/unicode.h"
#include "tests/support/gguf_rewrite.h"
#include "tests/support/shared_data.h"

namespace hearth::engine {
namespace {

using Ids = std::vector<std::int32_t>;
using Words = std::vector<std::string>;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::filesystem::path vocab_dir() { return testing::shared_dir() / "reference/tokenizer"; }

// A reference suite: the strings of X.gguf.inp and the ids of X.gguf.out.
struct Suite {
  std::vector<std::string> inputs;
  std::vector<Ids> expected;
};

Suite read_suite(const std::filesystem::path& gguf) {
  Suite s;
  const std::string inp = read_file(gguf.string() + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  // The file ends with a separator, so every string is followed by one.
  for (std::size_t pos = 0;;) {
    const std::size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    s.inputs.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(read_file(gguf.string() + ".out"));
  for (std::string line; std::getline(out, line);) {
    std::istringstream ids(line);
    Ids v;
    for (std::int32_t id; ids >> id;) v.push_back(id);
    s.expected.push_back(std::move(v));
  }
  return s;
}

struct Loaded {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

Loaded load(const std::filesystem::path& p) {
  Loaded l;
  auto f = GgufFile::open(p.string());
  EXPECT_TRUE(f.ok()) << p << ": " << f.status();
  if (!f.ok()) return l;
  l.file = std::move(*f);
  auto t = Tokenizer::from_gguf(*l.file);
  EXPECT_TRUE(t.ok()) << p << ": " << t.status();
  if (t.ok()) l.tok = std::move(*t);
  return l;
}

// `l`'s file with metadata key `key` written anew by `write`, and its tokenizer.
Loaded with_key(const Loaded& l, std::string_view key,
                const std::function<void(GgufWriter&)>& write) {
  Loaded out;
  auto f = GgufFile::parse(testing::rewrite(
                               *l.file,
                               [&](const GgufKv& kv, GgufWriter& w) {
                                 if (kv.key != key) return false;
                                 write(w);
                                 return true;
                               },
                               nullptr),
                           "rewritten.gguf");
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return out;
  out.file = std::move(*f);
  auto t = Tokenizer::from_gguf(*out.file);
  EXPECT_TRUE(t.ok()) << t.status();
  if (t.ok()) out.tok = std::move(*t);
  return out;
}

constexpr TokenizeOptions kRaw{.add_bos = false, .add_eos = false, .parse_special = false};

std::string ids_text(const Ids& ids) {
  std::string s;
  for (std::int32_t id : ids) {
    s.push_back(' ');
    s.append(std::to_string(id));
  }
  return s;
}

// Streams `ids` through a TokenStreamDecoder, checking every chunk is
// well-formed UTF-8; returns the concatenated text.
std::string stream(const Tokenizer& tok, const Ids& ids,
                   TokenStreamDecoder::Start start = TokenStreamDecoder::Start::kSequenceStart) {
  TokenStreamDecoder d(tok, start);
  std::string all;
  for (std::int32_t id : ids) {
    const std::string chunk = d.push(id);
    EXPECT_TRUE(is_valid_utf8(chunk)) << "after id " << id;
    all += chunk;
  }
  const std::string rest = d.flush();
  EXPECT_TRUE(is_valid_utf8(rest));
  return all + rest;
}

// ---- Reference suites ---------------------------------------------------------------------------

// Every llama/gpt2 suite in the reference folder (46 strings each).
const std::vector<std::string>& suite_names() {
  static const std::vector<std::string> kSuites = {
      "ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf",          "ggml-vocab-gpt-2.gguf",
      "ggml-vocab-mpt.gguf",       "ggml-vocab-starcoder.gguf",      "ggml-vocab-refact.gguf",
      "ggml-vocab-falcon.gguf",    "ggml-vocab-deepseek-coder.gguf", "ggml-vocab-deepseek-llm.gguf",
  };
  return kSuites;
}

// Each test gets the suite's strings and ids (s) and its vocabulary (l).
class ReferenceSuite : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    HEARTH_REQUIRE_SHARED();
    const std::filesystem::path p = vocab_dir() / GetParam();
    s = read_suite(p);
    l = load(p);
    ASSERT_NE(l.tok, nullptr);
  }
  Suite s;
  Loaded l;
};

TEST_P(ReferenceSuite, EveryStringTokenizesToTheReferenceIds) {
  ASSERT_EQ(s.inputs.size(), s.expected.size());
  ASSERT_EQ(s.inputs.size(), 46u);
  int failures = 0;
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    auto ids = l.tok->encode(s.inputs[i], kRaw);
    ASSERT_TRUE(ids.ok()) << ids.status();
    if (*ids != s.expected[i]) ++failures;
    EXPECT_EQ(*ids, s.expected[i])
        << "string " << i << ": '" << s.inputs[i] << "'\n got:" << ids_text(*ids)
        << "\nwant:" << ids_text(s.expected[i]);
  }
  std::cout << GetParam() << ": " << s.inputs.size() - failures << "/" << s.inputs.size()
            << " strings match\n";
}

// decode(encode(s)) == s, with the model's default BOS. Every suite string is
// representable: the "llama" vocabularies have byte fallback and the "gpt2"
// ones a token for every byte.
TEST_P(ReferenceSuite, DecodeInvertsEncode) {
  for (const std::string& text : s.inputs) {
    auto ids = l.tok->encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(l.tok->decode(*ids), text) << ids_text(*ids);
    auto raw = l.tok->encode(text, kRaw);
    ASSERT_TRUE(raw.ok());
    EXPECT_EQ(l.tok->decode(*raw), text);
  }
}

// min_tokens() is a lower bound of what encode() gives: on every suite
// string, on runs that long pieces match (spaces, line breaks, the longest
// token text repeated) and on special tokens' text, parsed as specials or
// not. It is 0 (no bound) only for a vocabulary that drops some byte.
TEST_P(ReferenceSuite, MinTokensNeverExceedsTheTokens) {
  const Tokenizer& tok = *l.tok;
  std::vector<std::string> texts = s.inputs;
  texts.push_back(std::string(4000, ' '));
  texts.push_back(std::string(4000, '\n'));
  std::int32_t longest = 0;
  std::string specials;
  for (std::int32_t id = 0; id < static_cast<std::int32_t>(tok.vocab_size()); ++id) {
    if (tok.token_text(id).size() > tok.token_text(longest).size()) longest = id;
    if (tok.token_type(id) == TokenType::kControl || tok.token_type(id) == TokenType::kUserDefined)
      specials.append(tok.piece(id));
  }
  std::string repeated;
  for (int i = 0; i < 200; ++i) repeated += tok.token_text(longest);
  texts.push_back(repeated);
  texts.push_back(specials);
  for (const std::string& text : texts) {
    for (bool special : {false, true}) {
      TokenizeOptions options = kRaw;
      options.parse_special = special;
      auto ids = tok.encode(text, options);
      ASSERT_TRUE(ids.ok()) << ids.status();
      EXPECT_GE(ids->size(), tok.min_tokens(text)) << text.size() << " bytes, parse_special "
                                                   << special << ": '" << text.substr(0, 60) << "'";
    }
  }
  // No bound only where some byte has no token to become (falcon's).
  if (tok.min_tokens(std::string(4000, 'a')) == 0) {
    bool drops = false;
    for (int b = 0; b < 256 && !drops; ++b) {
      auto ids = tok.encode(std::string(1, static_cast<char>(b)), kRaw);
      drops = ids.ok() && ids->empty();
    }
    EXPECT_TRUE(drops) << "min_tokens() gives no bound, yet every byte has a token";
  }
}

TEST_P(ReferenceSuite, StreamingMatchesDecodeAndIsAlwaysValidUtf8) {
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    for (const Ids& ids : {s.expected[i], *l.tok->encode(s.inputs[i])}) {
      const std::string whole = l.tok->decode(ids);
      ASSERT_TRUE(is_valid_utf8(whole));
      EXPECT_EQ(stream(*l.tok, ids), whole) << "string " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, ReferenceSuite, ::testing::ValuesIn(suite_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param.substr(11);  // after "ggml-vocab-"
                           n = n.substr(0, n.size() - 5);          // before ".gguf"
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

// The list above is every llama/gpt2 suite there is; all vocabularies load.
TEST(Tokenizer, EveryReferenceVocabularyLoadsAndEverySuiteIsCovered) {
  HEARTH_REQUIRE_SHARED();
  int loaded = 0;
  for (const auto& e : std::filesystem::directory_iterator(vocab_dir())) {
    if (e.path().extension() != ".gguf") continue;
    auto f = GgufFile::open(e.path().string());
    ASSERT_TRUE(f.ok()) << f.status();
    const std::string model(*(*f)->get_string("tokenizer.ggml.model"));
    auto t = Tokenizer::from_gguf(**f);
    if (model != "llama" && model != "gpt2") {
      // bert (WordPiece) is out of scope: refused, naming the model.
      ASSERT_FALSE(t.ok()) << e.path();
      EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
      EXPECT_NE(t.status().message().find("'" + model + "'"), std::string::npos) << t.status();
      continue;
    }
    ASSERT_TRUE(t.ok()) << e.path() << ": " << t.status();
    ++loaded;
    EXPECT_EQ((*t)->model(), model);
    EXPECT_EQ((*t)->vocab_size(), (*f)->get_string_array("tokenizer.ggml.tokens")->size());
    if (std::filesystem::exists(e.path().string() + ".inp")) {
      EXPECT_NE(std::find(suite_names().begin(), suite_names().end(), e.path().filename().string()),
                suite_names().end())
          << "suite not covered: " << e.path();
    }
    // Every vocabulary round-trips a mixed string.
    const std::string text = "Hello, wörld! 日本 \t\n 42";
    auto ids = (*t)->encode(text);
    ASSERT_TRUE(ids.ok()) << e.path() << ": " << ids.status();
    EXPECT_EQ((*t)->decode(*ids), text) << e.path();
  }
  EXPECT_EQ(loaded, 11);  // 9 suites + baichuan + gpt-neox
}

// GPT-NeoX records no pre-tokenizer; "default" means the GPT-2 rules, which
// reproduce MPT's reference ids (MPT uses the GPT-NeoX-20B tokenizer).
TEST(Tokenizer, GptNeoxWithoutPreTokenizerMatchesTheMptSuite) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load(vocab_dir() / "ggml-vocab-gpt-neox.gguf");
  ASSERT_NE(l.tok, nullptr);
  EXPECT_EQ(l.tok->pre(), "");
  const Suite s = read_suite(vocab_dir() / "ggml-vocab-mpt.gguf");
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    EXPECT_EQ(*l.tok->encode(s.inputs[i], kRaw), s.expected[i]) << "string " << i;
  }
}

// The tiny random model carries the stock Llama 2 vocabulary.
TEST(Tokenizer, Llama2TinyRandomMatchesTheLlamaSpmSuite) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load(testing::shared_dir() / "models/llama-2-tiny-random.gguf");
  ASSERT_NE(l.tok, nullptr);
  const Suite s = read_suite(vocab_dir() / "ggml-vocab-llama-spm.gguf");
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    EXPECT_EQ(*l.tok->encode(s.inputs[i], kRaw), s.expected[i]) << "string " << i;
  }
}

TEST(Tokenizer, MetadataDefaults) {
  HEARTH_REQUIRE_SHARED();
  Loaded spm = load(vocab_dir() / "ggml-vocab-llama-spm.gguf");
  ASSERT_NE(spm.tok, nullptr);
  EXPECT_EQ(spm.tok->model(), "llama");
  EXPECT_EQ(spm.tok->bos(), 1);
  EXPECT_EQ(spm.tok->eos(), 2);
  EXPECT_EQ(spm.tok->unk(), 0);
  EXPECT_TRUE(spm.tok->add_bos_default());
  EXPECT_FALSE(spm.tok->add_eos_default());
  EXPECT_TRUE(spm.tok->is_eog(2));
  EXPECT_FALSE(spm.tok->is_eog(1));
  EXPECT_EQ(spm.tok->token_type(1), TokenType::kControl);
  EXPECT_EQ(spm.tok->token_type(3), TokenType::kByte);

  Loaded gpt2 = load(vocab_dir() / "ggml-vocab-gpt-2.gguf");
  ASSERT_NE(gpt2.tok, nullptr);
  EXPECT_EQ(gpt2.tok->pre(), "gpt-2");
  EXPECT_FALSE(gpt2.tok->add_bos_default());  // no add_bos_token key: GPT-2 adds no BOS
  EXPECT_EQ(gpt2.tok->bos(), 50256);
  EXPECT_TRUE(gpt2.tok->is_eog(50256));
  EXPECT_EQ(*gpt2.tok->encode("Hello"), (Ids{15496}));
  EXPECT_EQ(gpt2.tok->piece(15496), "Hello");
  EXPECT_EQ(gpt2.tok->token_text(18435), " Hello");  // "ĠHello"
  EXPECT_EQ(gpt2.tok->piece(18435), "\xC4\xA0Hello");

  Loaded ds = load(vocab_dir() / "ggml-vocab-deepseek-coder.gguf");
  ASSERT_NE(ds.tok, nullptr);
  EXPECT_TRUE(ds.tok->add_bos_default());  // add_bos_token = true in the file
  EXPECT_EQ(ds.tok->encode("a")->front(), 32013);
  EXPECT_TRUE(ds.tok->is_eog(32014));

  Loaded phi3 = load(vocab_dir() / "ggml-vocab-phi-3.gguf");
  ASSERT_NE(phi3.tok, nullptr);
  EXPECT_TRUE(phi3.tok->is_eog(32000));   // eos <|endoftext|>
  EXPECT_TRUE(phi3.tok->is_eog(32007));   // <|end|>, recognized by its text
  EXPECT_FALSE(phi3.tok->is_eog(32010));  // <|user|>

  // Llama 3.1's <|eom_id|> (end of a tool-calling message) ends generation
  // by its text too, as llama.cpp's list has it: <|user|> renamed so.
  const Loaded eom = with_key(phi3, "tokenizer.ggml.tokens", [&](GgufWriter& w) {
    auto tokens = phi3.file->get_string_array("tokenizer.ggml.tokens");
    std::vector<std::string> renamed(tokens->begin(), tokens->end());
    renamed[32010] = "<|eom_id|>";
    w.add_string_array("tokenizer.ggml.tokens", renamed);
  });
  ASSERT_NE(eom.tok, nullptr);
  EXPECT_TRUE(eom.tok->is_eog(32010));
}

// ---- Special tokens -----------------------------------------------------------------------------

// A model named Phi-3 drops the whitespace after its special tokens (but
// <s>, <unk> and <|endoftext|>), as llama.cpp does for it; the ids are
// llama.cpp's (c392e5094, llama-server /tokenize on a synthetic Phi-3 file
// with this vocabulary). The same vocabulary under another name keeps it.
TEST(Tokenizer, Phi3ModelsDropTheWhitespaceAfterSpecialTokens) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load(vocab_dir() / "ggml-vocab-phi-3.gguf");  // general.name "Phi3"
  ASSERT_NE(l.tok, nullptr);
  const Tokenizer& t = *l.tok;
  const TokenizeOptions chat{.add_bos = true, .add_eos = false, .parse_special = true};
  EXPECT_EQ(*t.encode("<|user|>\nHi<|end|>\n<|assistant|>\n", chat),
            (Ids{1, 32010, 6324, 32007, 32001}));
  EXPECT_EQ(*t.encode("<|system|>\nSYS<|end|>", chat), (Ids{1, 32006, 317, 21554, 32007}));
  EXPECT_EQ(*t.encode("<|end|> \t\r\n x", chat), (Ids{1, 32007, 921}));
  EXPECT_EQ(*t.encode("</s>  y", kRaw), (Ids{2, 343}));  // user-defined: without parse_special
  // <s> and <|endoftext|> keep what follows them.
  const TokenizeOptions special{.add_bos = false, .add_eos = false, .parse_special = true};
  EXPECT_EQ(*t.encode("<s> y", special), (Ids{1, 29871, 343}));
  EXPECT_EQ(*t.encode("<|endoftext|> y", special), (Ids{32000, 29871, 343}));

  const Loaded other = with_key(
      l, "general.name", [](GgufWriter& w) { w.add_string("general.name", "Mini Instruct"); });
  ASSERT_NE(other.tok, nullptr);
  EXPECT_EQ(*other.tok->encode("<|user|>\nHi", special), (Ids{32010, 29871, 13, 18567}));
  EXPECT_EQ(*other.tok->encode("</s>  y", kRaw), (Ids{2, 259, 343}));
}

TEST(Tokenizer, SpecialTokensAreParsedOnlyWhenAsked) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load(vocab_dir() / "ggml-vocab-phi-3.gguf");
  ASSERT_NE(l.tok, nullptr);
  const Tokenizer& t = *l.tok;
  // Control tokens: text unless parse_special.
  auto plain = t.encode("<|user|>\nHi", kRaw);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(std::count(plain->begin(), plain->end(), 32010), 0);
  EXPECT_EQ(t.decode(*plain), "<|user|>\nHi");
  auto parsed =
      t.encode("<|user|>\nHi", {.add_bos = false, .add_eos = std::nullopt, .parse_special = true});
  ASSERT_TRUE(parsed.ok());
  ASSERT_FALSE(parsed->empty());
  EXPECT_EQ(parsed->front(), 32010);
  // After a special token the text gets the leading space again, and
  // decoding drops it again; Phi-3 drops the "\n" (below).
  EXPECT_EQ(*parsed, (Ids{32010, 6324}));  // "▁Hi"
  EXPECT_EQ(t.decode(*parsed), "Hi");      // control tokens render as nothing
  // A user-defined token ("</s>" in Phi-3) is cut out even without parse_special.
  auto ud = t.encode("a</s>b", kRaw);
  ASSERT_TRUE(ud.ok());
  EXPECT_EQ(*ud, (Ids{263, 2, 289}));
  EXPECT_EQ(t.decode(*ud), "a</s>b");
}

// ---- stories260K --------------------------------------------------------------------------------

struct StoriesCase {
  std::string text;
  Ids ids;
};

TEST(Tokenizer, Stories260KTokenizationsMatchTheReference) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load(testing::shared_dir() / "models/stories260K.gguf");
  ASSERT_NE(l.tok, nullptr);
  const Tokenizer& t = *l.tok;
  EXPECT_EQ(t.vocab_size(), 512u);
  EXPECT_TRUE(t.add_bos_default());  // no add_bos_token key: "llama" adds BOS
  const StoriesCase cases[] = {
      {"Once upon a time", {1, 403, 407, 261, 378}},
      {"Hello world", {1, 346, 306, 414, 263, 304, 341}},
      {" Hello world", {1, 410, 346, 306, 414, 263, 304, 341}},
      {"Hello  world", {1, 346, 306, 414, 410, 263, 304, 341}},
      {"naïve café 123", {1, 297, 412, 198, 178, 360, 280, 412, 431, 485, 410, 475, 479, 472}},
      {"日本", {1, 410, 233, 154, 168, 233, 159, 175}},
      {"", {1}},
      {"\n\nLine two", {1, 410, 13, 13, 438, 271, 411, 259, 424, 414}},
      {"<s>Once</s>", {1, 1, 403, 2}},
      {"Lily and Tom went to the park", {1, 317, 269, 274, 287, 263, 377, 267, 265, 282, 295, 433}},
  };
  for (const StoriesCase& c : cases) {
    auto ids =
        t.encode(c.text, {.add_bos = std::nullopt, .add_eos = std::nullopt, .parse_special = true});
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c.ids) << "'" << c.text << "' got" << ids_text(*ids);
    if (c.text != "<s>Once</s>") {
      EXPECT_EQ(t.decode(*ids), c.text);
    }
  }
  // Without parse_special "<s>" is text.
  auto plain = t.encode("<s>", {});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(std::count(plain->begin(), plain->end(), 1), 1);  // only the added BOS
  EXPECT_EQ(t.decode(*plain), "<s>");
}

TEST(Tokenizer, Stories260KGeneratedTextDecodes) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load(testing::shared_dir() / "models/stories260K.gguf");
  ASSERT_NE(l.tok, nullptr);
  const Ids generated = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401,
                         396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433,
                         426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388,
                         426, 338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267,
                         414, 270, 333, 415, 426, 13,  438, 310, 439, 419, 357, 336};
  const std::string text =
      ", there was a little girl named Lily. She loved to play outside in the park. One day, she "
      "saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said";
  EXPECT_EQ(l.tok->decode(generated), text);
  EXPECT_EQ(stream(*l.tok, generated), text);
  // As a continuation of the prompt the text is the same (its first token has
  // no leading space); the whole sequence reads as prompt + continuation.
  EXPECT_EQ(stream(*l.tok, generated, TokenStreamDecoder::Start::kContinuation), text);
  Ids all = {1, 403, 407, 261, 378};
  all.insert(all.end(), generated.begin(), generated.end());
  EXPECT_EQ(l.tok->decode(all), "Once upon a time" + text);

  const Ids generated2 = {426, 342, 394, 261, 370, 268, 414, 444, 335, 261, 370, 268, 414,
                          444, 426, 342, 391, 266, 267, 337, 335, 312, 426, 342, 391, 266,
                          267, 337, 335, 265, 268, 414, 444, 426, 342, 391, 266, 267, 337,
                          335, 265, 268, 414, 444, 426, 13,  436, 438, 347, 433, 432, 392,
                          287, 443, 436, 317, 336, 426, 313, 438, 316, 439, 419, 298};
  EXPECT_EQ(l.tok->decode(generated2),
            ". They saw a big box with a big box. They wanted to play with it. They wanted to play "
            "with the box. They wanted to play with the box.\n\"Look, Mom!\" Lily said. \"Let's g");
}

// ---- Streaming ----------------------------------------------------------------------------------

TEST(TokenStreamDecoder, HoldsSplitCharactersUntilComplete) {
  HEARTH_REQUIRE_SHARED();
  Loaded l = load(testing::shared_dir() / "models/stories260K.gguf");
  ASSERT_NE(l.tok, nullptr);
  // "日" = E6 97 A5 as byte tokens (id = byte + 3).
  TokenStreamDecoder d(*l.tok);
  EXPECT_EQ(d.push(0xE6 + 3), "");
  EXPECT_EQ(d.push(0x97 + 3), "");
  EXPECT_EQ(d.push(0xA5 + 3), "日");
  EXPECT_EQ(d.push(0xE6 + 3), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");  // unfinished at the end: U+FFFD
  // An ill-formed byte is replaced at once, and what follows still comes out.
  EXPECT_EQ(d.push(0xFF + 3), "\xEF\xBF\xBD");
  EXPECT_EQ(d.push(0xE6 + 3), "");
  EXPECT_EQ(d.push('A' + 3),
            "\xEF\xBF\xBD"
            "A");
  EXPECT_EQ(d.flush(), "");
  // The leading space of the first text is dropped, as decode() does; in
  // continuation mode it is kept.
  EXPECT_EQ(d.push(403), "Once");
  EXPECT_EQ(d.push(407), " upon");
  d.flush();
  TokenStreamDecoder c(*l.tok, TokenStreamDecoder::Start::kContinuation);
  EXPECT_EQ(c.push(403), " Once");
  // Ids outside the vocabulary contribute nothing.
  EXPECT_EQ(c.push(-5), "");
  EXPECT_EQ(c.push(100000), "");
}

// ---- Hostile input ------------------------------------------------------------------------------

// Ill-formed UTF-8 is tokenized as bytes, never refused. It decodes back
// where the vocabulary has a token for every byte (Llama 2's byte fallback,
// GPT-2's full alphabet); MPT and Falcon drop the bytes they have no token
// for (0xC0, 0xC1, 0xF5..0xFF), and DeepSeek decodes them as the characters
// its user-defined tokens hold (see engine/tokenizer.h).
TEST(Tokenizer, IllFormedUtf8IsTokenizedAsBytes) {
  HEARTH_REQUIRE_SHARED();
  const std::string texts[] = {"\xFF\xFE", "a\xE6\x97", "\xC0\x80 \xED\xA0\x80 x",
                               "ok \x80\x80\x80 <s> \xF4\x90\x80\x80"};
  std::mt19937 rng(7);
  for (const char* name :
       {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-mpt.gguf",
        "ggml-vocab-falcon.gguf", "ggml-vocab-deepseek-llm.gguf"}) {
    Loaded l = load(vocab_dir() / name);
    ASSERT_NE(l.tok, nullptr);
    const bool every_byte = l.tok->model() == "llama" || l.tok->pre() == "gpt-2";
    for (const std::string& text : texts) {
      auto ids = l.tok->encode(text, kRaw);
      ASSERT_TRUE(ids.ok()) << name << ": " << ids.status();
      if (every_byte) {
        EXPECT_EQ(l.tok->decode(*ids), text) << name;
      }
      EXPECT_TRUE(is_valid_utf8(stream(*l.tok, *ids)));
    }
    for (int trial = 0; trial < 50; ++trial) {
      std::string text(1 + rng() % 64, '\0');
      for (char& c : text) c = static_cast<char>(rng());
      auto ids = l.tok->encode(
          text, {.add_bos = std::nullopt, .add_eos = std::nullopt, .parse_special = true});
      ASSERT_TRUE(ids.ok()) << name << ": " << ids.status();
      if (every_byte) {
        EXPECT_EQ(l.tok->decode(*ids), text) << name;
      }
    }
  }
  Loaded falcon = load(vocab_dir() / "ggml-vocab-falcon.gguf");
  ASSERT_NE(falcon.tok, nullptr);
  EXPECT_EQ(falcon.tok->decode(*falcon.tok->encode("a\xFF\x03"
                                                   "b",
                                                   kRaw)),
            "ab");
  Loaded ds = load(vocab_dir() / "ggml-vocab-deepseek-llm.gguf");
  ASSERT_NE(ds.tok, nullptr);
  EXPECT_EQ(ds.tok->decode(*ds.tok->encode("\xFF", kRaw)), "\xC3\xBF");  // "ÿ"
}

// A small "llama" vocabulary built in memory, to break one thing at a time.
struct Synth {
  std::vector<std::string> tokens = {"<unk>",
                                     "<s>",
                                     "</s>",
                                     "\xE2\x96\x81",
                                     "a",
                                     "b",
                                     "\xE2\x96\x81"
                                     "a"};
  std::vector<float> scores = {0, 0, 0, -1, -2, -3, -0.5f};
  std::vector<std::int32_t> types = {2, 3, 3, 1, 1, 1, 1};
  std::string model = "llama";

  std::string bytes(const std::function<void(GgufWriter&)>& extra = {}) const {
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", model);
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_float32_array("tokenizer.ggml.scores", scores);
    w.add_int32_array("tokenizer.ggml.token_type", types);
    if (extra) extra(w);
    return w.serialize();
  }
};

absl::StatusOr<std::unique_ptr<Tokenizer>> from_bytes(const std::string& bytes) {
  auto f = GgufFile::parse(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(),
                           "synth.gguf");
  if (!f.ok()) return f.status();
  return Tokenizer::from_gguf(**f);  // the tokenizer copies what it needs
}

void expect_error(const absl::StatusOr<std::unique_ptr<Tokenizer>>& r, std::string_view needle) {
  ASSERT_FALSE(r.ok()) << "expected an error mentioning " << needle;
  EXPECT_NE(std::string(r.status().message()).find(needle), std::string::npos) << r.status();
}

TEST(Tokenizer, SynthesizedVocabularyWorks) {
  Synth s;
  auto t = from_bytes(s.bytes());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->encode("a a"), (Ids{1, 6, 6}));  // "▁a▁a"
  EXPECT_EQ((*t)->decode(Ids{1, 6, 6}), "a a");
  // No byte tokens: what has no piece becomes <unk>.
  EXPECT_EQ(*(*t)->encode("ac", kRaw), (Ids{6, 0}));
}

TEST(Tokenizer, BrokenVocabulariesAreRefusedWithTheirKey) {
  {
    Synth s;
    s.scores.pop_back();
    expect_error(from_bytes(s.bytes()),
                 "tokenizer.ggml.scores has 6 entries but tokenizer.ggml.tokens has 7");
  }
  {
    Synth s;
    s.types.push_back(1);
    expect_error(from_bytes(s.bytes()), "tokenizer.ggml.token_type has 8 entries");
  }
  {
    Synth s;
    s.types[4] = 9;
    expect_error(from_bytes(s.bytes()), "tokenizer.ggml.token_type[4] = 9");
  }
  {
    Synth s;
    expect_error(
        from_bytes(s.bytes([](GgufWriter& w) { w.add_uint32("tokenizer.ggml.bos_token_id", 7); })),
        "tokenizer.ggml.bos_token_id = 7 is outside the vocabulary of 7 tokens");
  }
  {
    Synth s;
    expect_error(
        from_bytes(s.bytes([](GgufWriter& w) { w.add_int32("tokenizer.ggml.eos_token_id", -3); })),
        "tokenizer.ggml.eos_token_id = -3");
  }
  {
    Synth s;  // 0xFFFFFFFF means "none"; then BOS cannot be added by default
    expect_error(from_bytes(s.bytes([](GgufWriter& w) {
                   w.add_uint32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
                 })),
                 "no tokenizer.ggml.bos_token_id");
    auto ok = from_bytes(s.bytes([](GgufWriter& w) {
      w.add_uint32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
      w.add_bool("tokenizer.ggml.add_bos_token", false);
    }));
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ((*ok)->bos(), -1);
    EXPECT_EQ((*ok)
                  ->encode("a", {.add_bos = true, .add_eos = std::nullopt, .parse_special = false})
                  .status()
                  .code(),
              absl::StatusCode::kFailedPrecondition);
  }
  {
    Synth s;
    s.types[5] = 6;  // "b" as a byte token
    expect_error(from_bytes(s.bytes()), "token 5 'b' has type byte (6) but is not <0xNN>");
  }
  {
    Synth s;
    s.model = "bert";
    auto r = from_bytes(s.bytes());
    expect_error(r, "tokenizer.ggml.model = 'bert' is not supported");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  }
  {
    Synth s;
    s.tokens.clear();
    s.scores.clear();
    s.types.clear();
    expect_error(from_bytes(s.bytes()), "tokenizer.ggml.tokens is empty");
  }
  {
    GgufWriter w;  // no tokens at all
    w.add_string("tokenizer.ggml.model", "llama");
    expect_error(from_bytes(w.serialize()), "tokenizer.ggml.tokens");
  }
}

TEST(Tokenizer, BrokenGpt2VocabulariesAreRefused) {
  const auto gpt2 = [](const std::string& pre, const std::vector<std::string>& merges) {
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    if (!pre.empty()) w.add_string("tokenizer.ggml.pre", pre);
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "ab", "\xC4\xA0",
                                                 "\xC4\xA0"
                                                 "ab"});
    if (!merges.empty()) w.add_string_array("tokenizer.ggml.merges", merges);
    return w.serialize();
  };
  auto ok = from_bytes(gpt2("gpt-2", {"a b", "\xC4\xA0 ab"}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*(*ok)->encode("ab ab"), (Ids{2, 4}));
  EXPECT_EQ((*ok)->decode(Ids{2, 4}), "ab ab");
  // A byte with no token and no unknown token is dropped.
  EXPECT_EQ(*(*ok)->encode("abc"), (Ids{2}));

  expect_error(from_bytes(gpt2("tekken-9000", {"a b"})), "tokenizer.ggml.pre = 'tekken-9000'");
  expect_error(from_bytes(gpt2("gpt-2", {"ab"})),
               "tokenizer.ggml.merges[0] = 'ab' is not two pieces");
  expect_error(from_bytes(gpt2("gpt-2", {})), "tokenizer.ggml.merges");
}

// Llama 3 ("llama-bpe") takes a word that is itself a token whole, without
// merging (Hugging Face's ignore_merges), and adds BOS by default.
TEST(Tokenizer, Llama3SkipsMergesForWholeWordTokens) {
  const auto vocab = [](const std::string& pre) {
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", pre);
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "c", "ab", "abc", "<|begin_of_text|>"});
    w.add_int32_array("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 3});
    w.add_string_array("tokenizer.ggml.merges", {"a b"});
    w.add_uint32("tokenizer.ggml.bos_token_id", 5);
    return w.serialize();
  };
  auto gpt2 = from_bytes(vocab("gpt-2"));
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_FALSE((*gpt2)->add_bos_default());
  EXPECT_EQ(*(*gpt2)->encode("abc"), (Ids{3, 2}));
  auto llama3 = from_bytes(vocab("llama-bpe"));
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  EXPECT_TRUE((*llama3)->add_bos_default());
  EXPECT_EQ(*(*llama3)->encode("abc"), (Ids{5, 4}));
  EXPECT_EQ(*(*llama3)->encode("abcab", kRaw), (Ids{3, 2, 3}));  // not a token: merges as usual
  EXPECT_EQ((*llama3)->decode(Ids{5, 4}), "abc");
}

// Random corruption of a real header never crashes the loader or the tokenizer.
TEST(Tokenizer, RandomByteFlipsNeverCrash) {
  HEARTH_REQUIRE_SHARED();
  const std::string model = read_file(testing::shared_dir() / "models/stories260K.gguf");
  std::mt19937 rng(99);
  int loaded = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::uint8_t> b(model.begin(), model.end());
    // Flip bits in the metadata and tensor infos (the first 14176 bytes).
    for (int i = 0; i < 3; ++i) b[rng() % 14176] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
    auto f = GgufFile::parse(b.data(), b.size(), "flipped.gguf");
    if (!f.ok()) continue;
    auto t = Tokenizer::from_gguf(**f);
    if (!t.ok()) continue;
    ++loaded;
    auto ids =
        (*t)->encode("Once upon a time, <s> naïve 日本",
                     {.add_bos = std::nullopt, .add_eos = std::nullopt, .parse_special = true});
    if (ids.ok()) (void)(*t)->decode(*ids);
  }
  EXPECT_GT(loaded, 0);
}

// ---- Performance --------------------------------------------------------------------------------

// 10 KB prompts of the shapes that would expose a pass quadratic in the
// length (mixed text, one long word, a run of spaces) round-trip. How fast
// they encode is measured by bench/engine/tokenizer_bench.cc, not here.
TEST(Tokenizer, TenKilobytePromptsRoundTrip) {
  HEARTH_REQUIRE_SHARED();
  std::string prompt;
  const std::string para =
      "Once upon a time, in a land far away, there lived 1234 curious foxes; naïve café "
      "日本語 🦙 \t\n";
  while (prompt.size() < 10000) prompt += para;
  const std::string one_word(10000, 'a');
  const std::string spaces(10000, ' ');
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                           "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-mpt.gguf"}) {
    Loaded l = load(vocab_dir() / name);
    ASSERT_NE(l.tok, nullptr);
    for (const std::string* text : std::vector<const std::string*>{&prompt, &one_word, &spaces}) {
      auto ids = l.tok->encode(*text);
      ASSERT_TRUE(ids.ok()) << name;
      EXPECT_EQ(l.tok->decode(*ids), *text) << name;
    }
  }
}

// ---- Pre-tokenizer rules on hand-made strings
// ----------------------------------------------------- Expected splits are derived by hand from
// each documented regex (see engine/pretokenizer.h), alternative by alternative.

Words split(std::string_view pre, std::string_view text) {
  auto p = PreTokenizer::for_name(pre);
  EXPECT_TRUE(p.ok()) << p.status();
  return p->split(text);
}

TEST(PreTokenizer, Gpt2Rules) {
  // "Hello" \p{L}+; " world" ' ?\p{L}+'; "'s" contraction; " 3" ' ?\p{N}+'; "."
  // ' ?[^\s\p{L}\p{N}]+'; "14"; two spaces before "ok": \s+(?!\S) takes one, the
  // other leads " ok"; the final "\n" is \s+ at the end.
  EXPECT_EQ(split("gpt-2", "Hello world's 3.14  ok\n"),
            (Words{"Hello", " world", "'s", " 3", ".", "14", " ", " ok", "\n"}));
  // Contractions are case-sensitive in GPT-2: "'S" is punctuation then a letter.
  EXPECT_EQ(split("gpt-2", "IT'S"), (Words{"IT", "'", "S"}));
  // A tab does not join the word after it (only a plain space does).
  EXPECT_EQ(split("gpt-2", "a\tb"), (Words{"a", "\t", "b"}));
  EXPECT_EQ(split("", "x  "), (Words{"x", "  "}));  // "default"/absent: the same rules
  EXPECT_TRUE(split("gpt-2", "").empty());
}

TEST(PreTokenizer, Llama3Rules) {
  // "I" \p{L}+; "'VE" (?i:'ve); " " alone (no branch takes " 1" together: \s+
  // is the only match); "123" "45" \p{N}{1,3}; " apples" [^\r\n\p{L}\p{N}]?\p{L}+;
  // "!!\n\n" ' ?[^\s\p{L}\p{N}]+[\r\n]*'.
  EXPECT_EQ(split("llama-bpe", "I'VE 12345 apples!!\n\n"),
            (Words{"I", "'VE", " ", "123", "45", " apples", "!!\n\n"}));
  // \s*[\r\n]+ takes the spaces up to the last line break; of the two spaces
  // before "x", \s+(?!\S) takes one and " x" the other.
  EXPECT_EQ(split("llama-bpe", "  \n\n  x"), (Words{"  \n\n", " ", " x"}));
  // Any one non-letter, non-digit, non-newline character may lead a word.
  EXPECT_EQ(split("llama-bpe", "$x \xC2\xA0y"), (Words{"$x", " ", "\xC2\xA0y"}));
  // ...but not a newline.
  EXPECT_EQ(split("llama-bpe", "\nx"), (Words{"\n", "x"}));
  EXPECT_EQ(split("llama-bpe", "don't"), (Words{"don", "'t"}));
  EXPECT_EQ(split("llama-bpe", "a.\r\nb"), (Words{"a", ".\r\n", "b"}));
  EXPECT_EQ(split("llama-bpe", "ab  "), (Words{"ab", "  "}));
  EXPECT_EQ(split("llama-bpe", "1234567"), (Words{"123", "456", "7"}));
  // Non-Latin letters and numbers follow the same categories.
  EXPECT_EQ(split("llama-bpe", "Привет мир ٣٤٥٦"), (Words{"Привет", " мир", " ", "٣٤٥", "٦"}));
}

TEST(PreTokenizer, Qwen2Rules) {
  // As Llama 3, but digits one at a time; "年" is a letter (Lo).
  EXPECT_EQ(split("qwen2", "I'm 2024年"), (Words{"I", "'m", " ", "2", "0", "2", "4", "年"}));
  EXPECT_EQ(split("qwen2", "1234567"), (Words{"1", "2", "3", "4", "5", "6", "7"}));
  EXPECT_EQ(split("qwen2", "x=1;\n\n  y"), (Words{"x", "=", "1", ";\n\n", " ", " y"}));
}

TEST(PreTokenizer, Llama3FamilyNamesShareTheRulesNotTheFlags) {
  // OLMo 2's and Phi-4's "dbrx" and Smaug's "smaug-bpe" split as Llama 3 but
  // keep merges and BOS to the file (llama.cpp's defaults); "falcon3" is Llama 3.
  for (std::string_view pre : {"dbrx", "smaug-bpe", "falcon3"}) {
    SCOPED_TRACE(pre);
    auto p = PreTokenizer::for_name(pre);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->rules(), PreTokenizerRules::kLlama3);
    EXPECT_EQ(p->split("I'VE 12345 apples!!\n\n"),
              (Words{"I", "'VE", " ", "123", "45", " apples", "!!\n\n"}));
    EXPECT_EQ(p->ignore_merges(), pre == "falcon3");
    EXPECT_EQ(p->add_bos_default(), pre == "falcon3");
  }
}

TEST(PreTokenizer, TekkenAndGpt4oNamesAndFlags) {
  // llama.cpp gives "tekken" Llama 3's ignore_merges and BOS default, and
  // "gpt-4o" neither.
  auto tekken = PreTokenizer::for_name("tekken");
  ASSERT_TRUE(tekken.ok()) << tekken.status();
  EXPECT_EQ(tekken->rules(), PreTokenizerRules::kTekken);
  EXPECT_TRUE(tekken->ignore_merges());
  EXPECT_TRUE(tekken->add_bos_default());
  auto gpt4o = PreTokenizer::for_name("gpt-4o");
  ASSERT_TRUE(gpt4o.ok()) << gpt4o.status();
  EXPECT_EQ(gpt4o->rules(), PreTokenizerRules::kGpt4o);
  EXPECT_FALSE(gpt4o->ignore_merges());
  EXPECT_FALSE(gpt4o->add_bos_default());
}

TEST(PreTokenizer, UnknownNamesAreRefused) {
  auto p = PreTokenizer::for_name("chameleon");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("'chameleon'"), std::string::npos);
}

TEST(PreTokenizer, WordsAlwaysCoverTheText) {
  std::mt19937 rng(3);
  const char* pieces[] = {"a",    "Z",        "1",  " ",        "\n",   "\r",
                          "'",    "s",        "日", "é",        "🦙", "!",
                          "\xFF", "\xE6\x97", "\t", "\xC2\xA0", "/",    "\xCC\x81" /* U+0301 */,
                          "ǅ",    "ʰ"};
  for (const char* pre : {"gpt-2", "llama-bpe", "qwen2", "starcoder", "falcon", "deepseek-coder",
                          "deepseek-llm", "tekken", "gpt-4o"}) {
    for (int trial = 0; trial < 200; ++trial) {
      std::string text;
      for (int i = 0; i < 30; ++i) text += pieces[rng() % std::size(pieces)];
      const Words words = split(pre, text);
      std::string joined;
      for (const std::string& w : words) {
        EXPECT_FALSE(w.empty()) << pre;
        joined += w;
      }
      EXPECT_EQ(joined, text) << pre;
    }
  }
}

}  // namespace
}  // namespace hearth::engine
