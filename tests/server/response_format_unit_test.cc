// compile_response_format: requests that repeat a format share one compiled
// Grammar (and so its cached token masks); the table keeps the last
// RecentFormats::kCapacity (8) formats; a refused format is not kept; many
// threads compiling at once get consistent results (TSan).
#include "server/response_format.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace hearth::server {
namespace {

v1::ResponseFormat grammar_format(int n) {
  v1::ResponseFormat f;
  f.set_grammar("root ::= \"" + std::to_string(n) + "\"");
  return f;
}

TEST(ResponseFormat, NoneIsNull) {
  absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g =
      compile_response_format(v1::ResponseFormat());
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, nullptr);
}

TEST(ResponseFormat, ARepeatedFormatSharesItsGrammarUntilEightOthersFollow) {
  auto first = compile_response_format(grammar_format(1000));
  auto again = compile_response_format(grammar_format(1000));
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(*first, *again);
  v1::ResponseFormat schema;
  schema.set_json_schema(R"({"type": "integer", "minimum": 0, "maximum": 9})");
  auto s1 = compile_response_format(schema);
  auto s2 = compile_response_format(schema);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(*s1, *s2);
  EXPECT_NE(*s1, *first);
  // Eight other formats push 1000 out (the schema was used after it).
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(compile_response_format(grammar_format(i)).ok());
  auto later = compile_response_format(grammar_format(1000));
  ASSERT_TRUE(later.ok());
  EXPECT_NE(*later, *first);
}

TEST(ResponseFormat, RefusalsNameTheFieldAndAreNotKept) {
  v1::ResponseFormat bad;
  bad.set_grammar("root ::= [a-");
  for (int i = 0; i < 2; ++i) {
    auto g = compile_response_format(bad);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(g.status().message(),
              "response_format.grammar: line 1, column 10: unterminated character class");
  }
  v1::ResponseFormat schema;
  schema.set_json_schema(R"({"type": "string", "minLength": 5, "maxLength": 2})");
  auto s = compile_response_format(schema);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message().rfind("response_format.json_schema: schema #: ", 0), 0u)
      << s.status();
  // A valid schema too large for the grammar's limits is the client's to
  // shrink (INVALID_ARGUMENT), not hearth's bug (it was INTERNAL: HTTP 500);
  // a grammar as large likewise, not RESOURCE_EXHAUSTED (a 429 to retry).
  std::string properties;
  for (int i = 0; i < 25; ++i)
    properties += (i ? ", " : "") + std::string("\"p") + std::to_string(i) +
                  "\": {\"type\": \"string\", \"maxLength\": 10000}";
  v1::ResponseFormat large;
  large.set_json_schema("{\"type\": \"object\", \"properties\": {" + properties + "}}");
  s = compile_response_format(large);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  EXPECT_NE(s.status().message().find("the schema is too large"), std::string::npos) << s.status();
  std::string huge = "root ::=";
  for (int i = 0; i < 101; ++i) huge += " \"a\"{10000}";
  v1::ResponseFormat huge_grammar;
  huge_grammar.set_grammar(huge);
  s = compile_response_format(huge_grammar);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
}

TEST(ResponseFormat, ThreadsCompilingAtOnceAgree) {
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<const grammar::Grammar>> seen(8);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        auto g = compile_response_format(grammar_format(2000 + i % 3));
        ASSERT_TRUE(g.ok());
        if (i == 49) seen[t] = *g;  // 49 % 3 == 1: format 2001
      }
    });
  for (std::thread& th : threads) th.join();
  // By then every thread finds the one grammar the table kept for 2001.
  for (const auto& g : seen) EXPECT_EQ(g, seen[0]);
  EXPECT_NE(seen[0], nullptr);
}

}  // namespace
}  // namespace hearth::server
