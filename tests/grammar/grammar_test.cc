// The GBNF parser and the matcher: what each notation accepts and refuses
// (checked by matching text through it), and every refusal of a bad grammar
// naming its line and column.
#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include <string>

#include "grammar/matcher.h"

namespace hearth::grammar {
namespace {

std::shared_ptr<const Grammar> parse_ok(std::string_view text) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = Grammar::parse(text);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << text;
  return g.ok() ? *g : nullptr;
}

// Whether `text` is a whole sentence of `gbnf`.
bool matches(std::string_view gbnf, std::string_view text) {
  std::shared_ptr<const Grammar> g = parse_ok(gbnf);
  if (g == nullptr) return false;
  Matcher m(g);
  return m.accept(text) && m.complete();
}

// Whether `text` can start a sentence of `gbnf`.
bool prefix(std::string_view gbnf, std::string_view text) {
  std::shared_ptr<const Grammar> g = parse_ok(gbnf);
  return g != nullptr && Matcher(g).can_accept(text);
}

std::string parse_error(std::string_view text) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = Grammar::parse(text);
  EXPECT_FALSE(g.ok()) << text;
  return g.ok() ? "" : std::string(g.status().message());
}

TEST(Grammar, LiteralsAndAlternatives) {
  const char* g = "root ::= \"yes\" | \"no\"";
  EXPECT_TRUE(matches(g, "yes"));
  EXPECT_TRUE(matches(g, "no"));
  EXPECT_FALSE(matches(g, "ye"));
  EXPECT_TRUE(prefix(g, "ye"));
  EXPECT_FALSE(prefix(g, "yo"));
  EXPECT_FALSE(matches(g, "yes "));
  EXPECT_FALSE(matches(g, ""));
}

TEST(Grammar, ClassesRangesNegationAndAny) {
  EXPECT_TRUE(matches("root ::= [a-c0-9_]+", "ab_09c"));
  EXPECT_FALSE(matches("root ::= [a-c0-9_]+", "abd"));
  EXPECT_TRUE(matches("root ::= [^\"\\\\]*", "any thing ü"));
  EXPECT_FALSE(matches("root ::= [^\"\\\\]*", "a\"b"));
  EXPECT_TRUE(matches("root ::= . . .", "a€😀"));
  EXPECT_FALSE(matches("root ::= . . .", "ab"));
  EXPECT_TRUE(matches("root ::= [-a]+", "-a-"));  // leading dash is a character
  EXPECT_TRUE(matches("root ::= [a-]+", "a-"));   // so is a trailing one
}

TEST(Grammar, Escapes) {
  EXPECT_TRUE(matches(R"(root ::= "\n\t\"\\\x41\u00e9\U0001F600")", "\n\t\"\\Aé😀"));
  EXPECT_TRUE(matches(R"(root ::= [\x00-\x1f\]]+)", "\x01]\x1f"));
  EXPECT_FALSE(matches(R"(root ::= [\x00-\x1f\]]+)", "a"));
}

TEST(Grammar, Repetitions) {
  const char* g = "root ::= \"a\"{2,4} \"b\"? [0-9]{3} \"c\"{2,} \"d\"{,2}";
  EXPECT_TRUE(matches(g, "aa123cc"));
  EXPECT_TRUE(matches(g, "aaaab123cccccdd"));
  EXPECT_FALSE(matches(g, "a123cc"));      // too few a
  EXPECT_FALSE(matches(g, "aaaaa123cc"));  // too many a
  EXPECT_FALSE(matches(g, "aa12cc"));      // {3}
  EXPECT_FALSE(matches(g, "aa123c"));      // {2,}
  EXPECT_FALSE(matches(g, "aa123ccddd"));  // {,2}
  EXPECT_TRUE(matches("root ::= (\"ab\" | \"c\")* \"!\"", "abcab!"));
  EXPECT_TRUE(matches("root ::= \"ab\"+", "ababab"));
  EXPECT_FALSE(matches("root ::= \"ab\"+", "aba"));
  EXPECT_TRUE(matches("root ::= \"x\"{0} \"y\"", "y"));
}

TEST(Grammar, RulesRecursionCommentsAndLines) {
  const char* g = R"(# balanced brackets
root ::= item+   # at least one
item ::= "[" item* "]" |
    "<" (
      item
    )? ">"
)";
  EXPECT_TRUE(matches(g, "[[][<>]]<[]>"));
  EXPECT_FALSE(matches(g, "[[]"));
  EXPECT_TRUE(prefix(g, "[[<"));
}

TEST(Grammar, CompleteAndMustEnd) {
  auto g = parse_ok("root ::= \"a\" \"b\"?");
  Matcher m(g);
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(m.accept("a"));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.must_end());
  ASSERT_TRUE(m.accept("b"));
  EXPECT_TRUE(m.must_end());
  EXPECT_FALSE(m.accept("b"));
  EXPECT_TRUE(m.must_end());  // a refused accept leaves the state
}

TEST(Matcher, SplitsCharactersAcrossCalls) {
  auto g = parse_ok("root ::= \"é\" [€-€]");
  Matcher m(g);
  const std::string text = "é€";
  for (char c : text) ASSERT_TRUE(m.accept(std::string(1, c)));
  EXPECT_TRUE(m.must_end());
  // A lead byte no allowed character starts is refused at once.
  Matcher n(g);
  EXPECT_FALSE(n.can_accept("\xe2"));  // a 3-byte lead where é (2 bytes) must come
  EXPECT_TRUE(n.can_accept("\xc3"));
}

TEST(Matcher, RefusesInvalidUtf8) {
  auto g = parse_ok("root ::= .*");
  Matcher m(g);
  EXPECT_TRUE(m.can_accept("ok ü"));
  EXPECT_FALSE(m.can_accept("\x80"));          // stray continuation
  EXPECT_FALSE(m.can_accept("\xc0\xaf"));      // overlong '/'
  EXPECT_FALSE(m.can_accept("\xed\xa0\x80"));  // a surrogate
  EXPECT_FALSE(m.can_accept("\xf5\x80\x80\x80"));
  EXPECT_FALSE(
      m.can_accept("\xc3"
                   "a"));
  EXPECT_TRUE(m.complete());  // .* holds the empty text
  ASSERT_TRUE(m.accept("\xc3"));
  EXPECT_FALSE(m.complete());  // half a character is not a sentence
  ASSERT_TRUE(m.accept("\xbc"));
  EXPECT_TRUE(m.complete());
}

TEST(Matcher, AmbiguityStaysBounded) {
  // Each character doubles the ways to parse without dedup; the matcher
  // keeps distinct parses only.
  auto g = parse_ok("root ::= (\"a\" | \"a\" | [a-z])*");
  Matcher m(g);
  EXPECT_TRUE(m.accept(std::string(2000, 'a')));
  EXPECT_TRUE(m.complete());
}

TEST(Matcher, DeepNestingIsRefusedNotFatal) {
  auto g = parse_ok("root ::= \"(\" root \")\" | \"x\"");
  Matcher m(g);
  EXPECT_TRUE(m.accept(std::string(100, '(')));
  EXPECT_FALSE(m.accept(std::string(ParseState::kMaxDepth + 10, '(')));
}

TEST(GrammarErrors, NameLineAndColumn) {
  EXPECT_EQ(parse_error("root ::= \"a\"\nitem ::= [a-"),
            "line 2, column 10: unterminated character class");
  EXPECT_EQ(parse_error("root ::= item"),
            "line 1, column 10: rule \"item\" is used but not defined");
  EXPECT_EQ(parse_error("item ::= \"a\""), "the grammar has no rule named \"root\"");
  EXPECT_EQ(parse_error(""), "the grammar is empty");
  EXPECT_EQ(parse_error("root ::= \"a\"\nroot ::= \"b\""),
            "line 2, column 1: rule \"root\" is defined twice");
  EXPECT_EQ(parse_error("root ::= \"a"), "line 1, column 10: unterminated string literal");
  EXPECT_EQ(parse_error("root = \"a\""), "line 1, column 6: expected ::= after \"root\"");
  EXPECT_EQ(parse_error("root ::= * \"a\""), "line 1, column 10: '*' follows nothing");
  EXPECT_EQ(parse_error("root ::= (\"a\""), "line 1, column 14: expected ')'");
  EXPECT_EQ(parse_error("root ::= \"a\"{3,2}"),
            "line 1, column 18: repetition {3,2}: the maximum is below the minimum");
  EXPECT_EQ(parse_error("root ::= \"a\"{20000}"),
            "line 1, column 14: repetition bound above 10000");
  EXPECT_EQ(parse_error("root ::= \"\\q\""), "line 1, column 11: unknown escape");
  EXPECT_EQ(parse_error("root ::= \"\\xZZ\""), "line 1, column 13: expected 2 hex digits");
  EXPECT_EQ(parse_error("root ::= [z-a]"), "line 1, column 14: character range is backwards");
  EXPECT_EQ(parse_error("root ::= []"), "line 1, column 10: character class matches nothing");
  EXPECT_EQ(parse_error("root ::= \"a\" )"), "line 1, column 14: unexpected ')' in rule \"root\"");
  EXPECT_EQ(parse_error("root ::= \"\xff\""), "line 1, column 11: invalid UTF-8");
}

TEST(GrammarErrors, LeftRecursion) {
  EXPECT_NE(parse_error("root ::= root \"a\" | \"b\"").find("rule \"root\" is left-recursive"),
            std::string::npos);
  EXPECT_NE(parse_error("root ::= x\nx ::= y? root\ny ::= \"b\"").find("left-recursive"),
            std::string::npos);
  // A repetition of something that may be empty would expand forever too.
  EXPECT_NE(parse_error("root ::= (\"a\"?)*").find("left-recursive"), std::string::npos);
  // Right recursion is fine.
  EXPECT_TRUE(matches("root ::= \"a\" root | \"b\"", "aaab"));
}

TEST(GrammarErrors, Limits) {
  // Too ambiguous from its start: each optional item doubles the parses.
  EXPECT_NE(parse_error("root ::= (\"a\"?){10000}").find("the grammar's start has more than 4096"),
            std::string::npos);
  EXPECT_TRUE(matches("root ::= (\"a\"?){10}", "aaa"));
  std::string deep = "root ::= " + std::string(65, '(') + "\"a\"" + std::string(65, ')');
  EXPECT_NE(parse_error(deep).find("nested deeper than 64"), std::string::npos);
  std::string ok = "root ::= " + std::string(64, '(') + "\"a\"" + std::string(64, ')');
  EXPECT_TRUE(matches(ok, "a"));
  std::string huge = "root ::=";
  for (int i = 0; i < 101; ++i) huge += " \"a\"{10000}";
  EXPECT_NE(parse_error(huge).find("more than 1000000 elements"), std::string::npos);
  EXPECT_NE(parse_error(std::string(Grammar::kMaxText + 1, ' ')).find("bytes, more than"),
            std::string::npos);
}

}  // namespace
}  // namespace hearth::grammar
