// Token masks: the trie walk over the sorted vocabulary gives, for every
// state met along random walks, exactly the tokens a plain per-token check
// (Matcher::can_accept on each token's bytes) allows; the mask cache is
// shared by every output under one grammar.
#include "grammar/token_mask.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace hearth::grammar {
namespace {

std::shared_ptr<const Grammar> parse_ok(std::string_view text) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = Grammar::parse(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

bool bit(std::span<const std::uint64_t> mask, std::size_t id) {
  return (mask[id / 64] >> (id % 64)) & 1;
}

// Tokens of 1-5 pieces drawn from ASCII, JSON punctuation and the bytes of
// 2-, 3- and 4-byte characters (so many tokens hold partial characters),
// plus the empty token (never allowed).
std::vector<std::string> random_vocabulary(std::size_t n, std::uint32_t seed) {
  const std::vector<std::string> pieces = {
      "a",    "b",    "z",        "0",    "7",        " ",        "\n",   "\"",  "\\",   "{",
      "}",    "[",    "]",        ":",    ",",        "-",        ".",    "e",   "true", "null",
      "\xc3", "\xa9", "\xe2\x82", "\xac", "\xf0\x9f", "\x98\x80", "\x80", "\xff"};
  std::mt19937 rng(seed);
  std::vector<std::string> vocab = {""};
  while (vocab.size() < n) {
    std::string t;
    const int parts = 1 + static_cast<int>(rng() % 5);
    for (int i = 0; i < parts; ++i) t += pieces[rng() % pieces.size()];
    vocab.push_back(t);
  }
  return vocab;
}

void check_walks(std::string_view gbnf, std::uint32_t seed) {
  auto grammar = parse_ok(gbnf);
  const std::vector<std::string> vocab_bytes = random_vocabulary(3000, seed);
  auto vocab = std::make_shared<const VocabularyIndex>(vocab_bytes);
  std::mt19937 rng(seed);
  for (int walk = 0; walk < 8; ++walk) {
    ConstrainedOutput out(grammar, vocab);
    Matcher reference(grammar);
    for (int step = 0; step < 30 && !out.must_end(); ++step) {
      const std::span<const std::uint64_t> mask = out.allowed().value();
      std::vector<std::int32_t> allowed;
      for (std::size_t id = 0; id < vocab_bytes.size(); ++id) {
        const bool expect = !vocab_bytes[id].empty() && reference.can_accept(vocab_bytes[id]);
        ASSERT_EQ(bit(mask, id), expect)
            << gbnf << "\nwalk " << walk << " step " << step << " token " << id;
        if (expect) allowed.push_back(static_cast<std::int32_t>(id));
      }
      if (allowed.empty()) break;
      const std::int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(out.accept_token(pick));
      ASSERT_TRUE(reference.accept(vocab_bytes[static_cast<std::size_t>(pick)]));
      EXPECT_EQ(out.complete(), reference.complete());
      EXPECT_EQ(out.must_end(), reference.must_end());
    }
  }
}

TEST(TokenMask, MatchesPerTokenCheckOnJson) {
  check_walks(R"(root ::= value
value ::= object | array | string | number | "true" | "null"
object ::= "{" ws (string ":" ws value ("," ws string ":" ws value)*)? "}"
array ::= "[" ws (value ("," ws value)*)? "]"
string ::= "\"" ([^"\\\x00-\x1f] | "\\" ["\\/bfnrt])* "\""
number ::= "-"? [0-9]+ ("." [0-9]+)? ("e" [0-9]{1,3})?
ws ::= [ \n]{0,2})",
              1);
}

TEST(TokenMask, MatchesPerTokenCheckOnMultibyteClasses) {
  check_walks("root ::= ([a-z] | [\\u00e0-\\u00ff] | \"€\" | [\\U0001F600-\\U0001F64F])* \".\"", 2);
  check_walks("root ::= [^a-z\"]{1,6} \"b\"", 3);
}

TEST(TokenMask, RefusesWhatTheGrammarRefuses) {
  auto grammar = parse_ok("root ::= \"ab\"");
  auto vocab = std::make_shared<const VocabularyIndex>(
      std::vector<std::string>{"a", "ab", "abc", "b", "", "x"});
  ConstrainedOutput out(grammar, vocab);
  std::span<const std::uint64_t> mask = out.allowed().value();
  EXPECT_EQ(mask[0], 0b000011u);  // "a" and "ab"
  EXPECT_FALSE(out.accept_token(2));
  EXPECT_FALSE(out.accept_token(4));   // empty token
  EXPECT_FALSE(out.accept_token(99));  // out of range
  ASSERT_TRUE(out.accept_token(0));
  EXPECT_EQ(out.allowed().value()[0], 0b001000u);
  ASSERT_TRUE(out.accept_token(3));
  EXPECT_TRUE(out.must_end());
  EXPECT_EQ(out.allowed().value()[0], 0u);
}

// An empty mask says whether the matcher's bounds or the grammar refused:
// after "x", a "y" opens 10001 parses (each count of optional "a"s), past
// ParseState::kMaxParses.
TEST(TokenMask, TellsTheBoundsRefusalsFromTheGrammars) {
  auto vocab = std::make_shared<const VocabularyIndex>(std::vector<std::string>{"x", "y", "z"});
  ConstrainedOutput ambiguous(parse_ok("root ::= \"x\" \"y\" (\"a\"?){10000} \"b\""), vocab);
  EXPECT_EQ(ambiguous.allowed().value()[0], 0b001u);
  EXPECT_EQ(ambiguous.why_empty(), ConstrainedOutput::EmptyMaskCause::kGrammar);
  ASSERT_TRUE(ambiguous.accept_token(0));
  EXPECT_EQ(ambiguous.allowed().value()[0], 0u);
  EXPECT_EQ(ambiguous.why_empty(), ConstrainedOutput::EmptyMaskCause::kBounds);

  ConstrainedOutput plain(parse_ok("root ::= \"x\" \"q\""), vocab);
  ASSERT_TRUE(plain.accept_token(0));
  EXPECT_EQ(plain.allowed().value()[0], 0u);
  EXPECT_EQ(plain.why_empty(), ConstrainedOutput::EmptyMaskCause::kGrammar);
}

// The masks one output walks share a work budget that grows with the
// tokens it generates. With a repetition whose every count is a new state
// of about the same cost, an output allowed the widest mask per token
// generates 100 tokens, which needs the per-token allowance (the bank holds
// 16 tokens' worth); one allowed much less runs out once its banked start
// is spent, and then stays out; a second output of the same grammar reads
// the masks the first computed from the cache for free.
TEST(TokenMask, AnOutputsMaskWalksSpendAWorkBudgetPerToken) {
  const std::string gbnf = "root ::= [ab]{0,200} \"c\"";
  auto vocab = std::make_shared<const VocabularyIndex>(std::vector<std::string>{"a", "b", "c"});
  std::uint64_t widest = 0, total = 0;
  {
    ConstrainedOutput measured(parse_ok(gbnf), vocab);  // its own grammar: its own cache
    for (int i = 0; i < 100; ++i) {
      const std::uint64_t before = matcher_work();
      ASSERT_EQ(measured.allowed().value()[0], 0b111u);
      widest = std::max(widest, matcher_work() - before);
      total += matcher_work() - before;
      ASSERT_TRUE(measured.accept_token(0));
    }
  }
  ASSERT_GT(total, ConstrainedOutput::kBankTokens * widest) << "the bank alone would pay for all";
  ConstrainedOutput enough(parse_ok(gbnf), vocab, widest);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(enough.allowed().ok()) << "token " << i;
    ASSERT_TRUE(enough.accept_token(0));
  }

  auto grammar = parse_ok(gbnf);
  ConstrainedOutput starved(grammar, vocab, widest / 4);
  int served = 0;
  absl::StatusOr<std::span<const std::uint64_t>> mask = starved.allowed();
  for (; mask.ok() && served < 100; mask = starved.allowed()) {
    ++served;
    ASSERT_TRUE(starved.accept_token(0));
  }
  EXPECT_GT(served, 0);  // the banked start pays for the first masks
  EXPECT_LT(served, 100);
  EXPECT_EQ(mask.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(mask.status().message().find("response_format: following the grammar took more than"),
            std::string_view::npos)
      << mask.status();
  EXPECT_FALSE(starved.allowed().ok());  // the budget stays spent

  ConstrainedOutput cached(grammar, vocab, 1);
  for (int i = 0; i < served; ++i) {
    ASSERT_EQ(cached.allowed().value()[0], 0b111u);
    ASSERT_TRUE(cached.accept_token(0));
  }
}

TEST(TokenMask, CacheIsSharedByOutputsOfOneGrammar) {
  auto grammar = parse_ok("root ::= [a-z]{0,3} \".\"");
  auto vocab =
      std::make_shared<const VocabularyIndex>(std::vector<std::string>{"a", "bc", ".", "d."});
  ConstrainedOutput first(grammar, vocab);
  for (std::int32_t t : {0, 1}) {
    first.allowed().value();
    ASSERT_TRUE(first.accept_token(t));
  }
  first.allowed().value();
  EXPECT_EQ(first.masks_computed(), 3u);
  EXPECT_EQ(first.masks_cached(), 0u);
  ConstrainedOutput second(grammar, vocab);
  for (std::int32_t t : {0, 1}) {
    second.allowed().value();
    ASSERT_TRUE(second.accept_token(t));
  }
  const std::span<const std::uint64_t> last = second.allowed().value();
  EXPECT_EQ(second.masks_computed(), 0u);
  EXPECT_EQ(second.masks_cached(), 3u);
  EXPECT_EQ(last[0], 0b0100u);  // after "abc" only "."
  // Another vocabulary has masks of its own.
  auto other = std::make_shared<const VocabularyIndex>(std::vector<std::string>{"a", "."});
  ConstrainedOutput third(grammar, other);
  EXPECT_EQ(third.allowed().value()[0], 0b11u);
  EXPECT_EQ(third.masks_computed(), 1u);
}

}  // namespace
}  // namespace hearth::grammar
