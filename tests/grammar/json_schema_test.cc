// JSON schema -> GBNF (grammar/json_schema.h). Part 1 checks the converter
// alone: the grammar text it writes for each keyword, and every refusal
// naming the JSON pointer and the keyword. Part 2 runs the grammars through
// the GBNF parser and matcher: valid instances are sentences, invalid ones
// (wrong type, missing property, too long, out of range) are not; integer
// ranges are checked exhaustively over -1200..1200; the ten schemas of
// tests/grammar/schemas yield only complete, bounded JSON when sampled at
// random.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/str_cat.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace hearth::grammar {
namespace {

std::string convert(std::string_view schema) {
  absl::StatusOr<std::string> g = json_schema_to_gbnf(schema);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << schema;
  return g.ok() ? *g : "";
}

std::string refusal(std::string_view schema) {
  absl::StatusOr<std::string> g = json_schema_to_gbnf(schema);
  EXPECT_FALSE(g.ok()) << schema << "\n" << (g.ok() ? *g : "");
  if (g.ok()) return "";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(g.status().message());
}

std::string int_schema(std::string_view keywords) {
  return str_cat(R"({"type":"integer",)", keywords, "}");
}

std::string array_schema(int min_items, int max_items) {
  return str_cat(R"({"type":"array","items":{"const":0},"minItems":)", min_items, R"(,"maxItems":)",
                 max_items, "}");
}

// `"name":value`, after a comma unless first.
std::string property(bool comma, char name, int value) {
  return str_cat(comma ? "," : "", "\"", name, "\":", value);
}

// A tree node with value `v` and one child.
std::string node(int v, std::string_view child) {
  return str_cat(R"({"v":)", v, R"(,"kids":[)", child, "]}");
}

// ===========================================================================
// Part 1: the converter's text and refusals (no parser involved).

TEST(JsonSchemaText, AnyJsonGrammarHasBoundedNumbersAndWhitespace) {
  const std::string g(any_json_gbnf());
  EXPECT_EQ(g.rfind("root ::= value\n", 0), 0u) << g;
  EXPECT_NE(g.find("ws ::= \" \"?\n"), std::string::npos) << g;
  EXPECT_NE(g.find("[0-9]{0,15}"), std::string::npos) << g;
  EXPECT_NE(g.find("[0-9]{1,16}"), std::string::npos) << g;
  EXPECT_NE(g.find("[0-9]{1,2}"), std::string::npos) << g;
}

TEST(JsonSchemaText, PrimitivesUseSharedRules) {
  EXPECT_EQ(convert(R"({"type":"boolean"})"),
            "root ::= boolean\nboolean ::= \"true\" | \"false\"\n");
  EXPECT_EQ(convert(R"({"type":"null"})"), "root ::= null\nnull ::= \"null\"\n");
  EXPECT_NE(convert(R"({"type":"string"})").find("root ::= string\n"), std::string::npos);
  EXPECT_NE(convert(R"({"type":"integer"})").find("root ::= integer\n"), std::string::npos);
  EXPECT_NE(convert(R"({"type":"number"})").find("root ::= number\n"), std::string::npos);
  EXPECT_NE(convert("true").find("root ::= value\n"), std::string::npos);
  EXPECT_NE(convert("{}").find("root ::= value\n"), std::string::npos);
  EXPECT_NE(convert(R"({"type":["string","null"]})").find("root ::= string | null\n"),
            std::string::npos);
}

TEST(JsonSchemaText, DescriptiveKeywordsAreIgnored) {
  EXPECT_EQ(convert(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x",
    "title":"t","description":"d","$comment":"c","examples":[true],"default":false,
    "deprecated":false,"readOnly":true,"writeOnly":false,"type":"boolean"})"),
            convert(R"({"type":"boolean"})"));
}

TEST(JsonSchemaText, IntegerRanges) {
  EXPECT_EQ(convert(R"({"type":"integer","minimum":-5,"maximum":-5})"), "root ::= \"-5\"\n");
  EXPECT_EQ(convert(R"({"type":"integer","minimum":0,"maximum":0})"), "root ::= \"0\"\n");
  EXPECT_EQ(convert(R"({"type":"integer","minimum":10,"maximum":99})"), "root ::= [1-9] [0-9]\n");
  EXPECT_EQ(convert(R"({"type":"integer","minimum":-15,"exclusiveMaximum":-9})"),
            "root ::= \"-1\" [0-5]\n");
  EXPECT_EQ(convert(R"({"type":"integer","minimum":0})"), "root ::= \"0\" | [1-9] [0-9]{0,15}\n");
  EXPECT_EQ(convert(R"({"type":"integer","minimum":1.5,"maximum":9.5})"), "root ::= [2-9]\n");
}

TEST(JsonSchemaText, ObjectsListPropertiesInOrderWithOptionalOnesOptional) {
  const std::string g = convert(R"({"type":"object","properties":{
    "a":{"type":"integer"},"b":{"type":"string"}},"required":["a"]})");
  EXPECT_NE(g.find(R"(root ::= "{" ws "\"a\":" ws integer ( "," ws "\"b\":" ws string )? ws "}")"),
            std::string::npos)
      << g;
  // All optional: any property may come first; longer lists share tails.
  const std::string h = convert(R"({"properties":{"a":{"type":"null"},"b":{"type":"null"},
    "c":{"type":"null"},"d":{"type":"null"}}})");
  EXPECT_NE(h.find(R"(root ::= "{" ws ( ( "\"a\":" ws null rest)"), std::string::npos) << h;
}

TEST(JsonSchemaText, RuleNamesComeFromPropertyNamesSanitizedAndUnique) {
  const std::string g = convert(R"({"type":"object","properties":{
    "first name!":{"type":"string","maxLength":3},
    "first-name":{"type":"string","maxLength":4},
    "value":{"type":"string","maxLength":5},
    "7up":{"type":"string","maxLength":6}},"required":["first name!"]})");
  EXPECT_NE(g.find("\nfirst-name ::= \"\\\"\" char{0,3} \"\\\"\"\n"), std::string::npos) << g;
  EXPECT_NE(g.find("\nfirst-name-2 ::= \"\\\"\" char{0,4} \"\\\"\"\n"), std::string::npos) << g;
  EXPECT_NE(g.find("\nvalue-2 ::= "), std::string::npos) << g;  // "value" is a shared rule
  EXPECT_NE(g.find("\nroot-7up ::= "), std::string::npos) << g;
  EXPECT_NE(g.find("\"\\\"first name!\\\":\""), std::string::npos) << g;
}

TEST(JsonSchemaText, EnumAndConstAreExactJsonText) {
  EXPECT_EQ(convert(R"({"enum":["a\"b",1.5,null,{"k":[1,true]}]})"),
            R"(root ::= "\"a\\\"b\"" | "1.5" | "null" | "{\"k\":[1,true]}")"
            "\n");
  EXPECT_EQ(convert(R"({"const":"ü"})"), "root ::= \"\\\"\\u00fc\\\"\"\n");
  // Values of another type than `type` are dropped.
  EXPECT_EQ(convert(R"({"type":"integer","enum":["1",1,2.0,2.5]})"), "root ::= \"1\" | \"2.0\"\n");
}

TEST(JsonSchemaText, RecursiveReferenceIsOneRule) {
  const std::string g = convert(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
    "properties":{"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}}}}})");
  EXPECT_NE(g.find("root ::= node\n"), std::string::npos) << g;
  EXPECT_NE(g.find("\nnode ::= \"{\" ws ( \"\\\"next\\\":\" ws node-next ws )? \"}\"\n"),
            std::string::npos)
      << g;
  EXPECT_NE(g.find("\nnode-next ::= node | null\n"), std::string::npos) << g;
  // A reference to the root, and JSON pointer escapes in a definition's name.
  EXPECT_NE(convert(R"({"type":"array","items":{"$ref":"#"},"maxItems":2})")
                .find(R"(root ::= "[" ws ( root ( "," ws root )? ws )? "]")"),
            std::string::npos);
  EXPECT_NE(convert(R"({"$ref":"#/definitions/a~1b~0c","definitions":{"a/b~c":{"type":"null"}}})")
                .find("root ::= a-b-c\na-b-c ::= null\n"),
            std::string::npos);
  EXPECT_NE(convert(R"({"$ref":"#/$defs/a%20b","$defs":{"a b":{"type":"null"}}})").find("a-b ::="),
            std::string::npos);
}

TEST(JsonSchemaText, PatternsBecomeJsonStringText) {
  EXPECT_EQ(convert(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})"),
            "root ::= \"\\\"\" [A-Z]{2} \"-\" [0-9]{3} \"\\\"\"\n");
  // A quote in the pattern is written escaped inside the JSON string.
  EXPECT_EQ(convert(R"({"type":"string","pattern":"^a\"b$"})"), R"(root ::= "\"a\\\"b\"")"
                                                                "\n");
  // Without anchors, anything may come before and after.
  EXPECT_NE(convert(R"({"type":"string","pattern":"ab"})").find(R"(char* "ab" char*)"),
            std::string::npos);
}

struct Refusal {
  std::string schema, message;
};

TEST(JsonSchemaErrors, EachRefusalNamesThePointerAndTheKeyword) {
  const std::string deep_items = [] {
    std::string s;
    for (int i = 0; i < 70; ++i) s += R"({"items":)";
    s += "true";
    for (int i = 0; i < 70; ++i) s += "}";
    return s;
  }();
  const std::string wide_object = [] {
    std::string s = R"({"properties":{)";
    for (int i = 0; i < 5000; ++i) s += str_cat(i ? "," : "", "\"p", i, "\":true");
    return s + "}}";
  }();
  const std::vector<Refusal> cases = {
      {R"({"type":"object","properties":{"age":{"type":"integer","minimum":10,"maximum":5}}})",
       "schema #/properties/age: minimum 10 is greater than maximum 5"},
      {R"({"type":"object","properties":{"x":{"not":{"type":"null"}}}})",
       "schema #/properties/x: unsupported keyword \"not\""},
      {R"({"type": )", "schema #: not valid JSON: "},
      {R"({"type":"string"} x)", "schema #: not valid JSON: "},
      {R"({"$ref":"#/$defs/missing"})", "schema #/$ref: unresolved reference \"#/$defs/missing\""},
      {R"({"$ref":"https://example.com/s.json"})", "schema #/$ref: unsupported reference"},
      {R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}}})",
       "schema #/$defs/b/anyOf/0/$ref: reference \"#/$defs/a\" loops back to itself"},
      {R"({"anyOf":[{"$ref":"#"},{"type":"null"}]})",
       "schema #/anyOf/0/$ref: reference \"#\" loops"},
      {R"({"properties":{"x":{"$ref":"#/$defs/a","maxLength":3}},"$defs":{"a":{"type":"string"}}})",
       "schema #/properties/x: \"maxLength\" alongside \"$ref\" is not supported"},
      {"false", "schema #: the schema false accepts no value"},
      {R"({"type":"array","items":false,"minItems":1})",
       "schema #: minItems 1 cannot be met: at most 0 items"},
      {R"({"type":"array","prefixItems":[{"type":"null"}],"minItems":2})",
       "schema #: minItems 2 cannot be met: at most 1 items"},
      {R"({"properties":{"a":false},"required":["a"]})",
       "schema #/properties/a: required property \"a\" has schema false"},
      {R"({"properties":{"a":{}},"required":["b"],"additionalProperties":false})",
       "schema #: required property \"b\" is not in properties and additionalProperties is "
       "false: no object satisfies the schema"},
      {R"({"anyOf":[false,false]})", "schema #/anyOf: no alternative accepts any value"},
      {R"({"type":"array","minItems":3,"maxItems":2})",
       "schema #: minItems 3 is greater than maxItems 2"},
      {R"({"items":{"type":"string","minLength":5,"maxLength":4}})",
       "schema #/items: minLength 5 is greater than maxLength 4"},
      {R"({"items":{"type":"string","maxLength":-1}})",
       "schema #/items: maxLength must be a non-negative integer"},
      {R"({"enum":[]})", "schema #: enum is empty"},
      {R"({"type":"string","enum":[1,2]})", "schema #: no value of enum/const"},
      {R"({"type":"integer","const":1.5})", "schema #: no value of enum/const"},
      {R"({"type":"integer","exclusiveMinimum":5,"exclusiveMaximum":6})",
       "schema #: no integer satisfies exclusiveMinimum 5 and exclusiveMaximum 6"},
      {R"({"type":"integer","minimum":0.5,"maximum":0.7})",
       "schema #: no integer satisfies minimum 0.5 and maximum 0.7"},
      {R"({"type":"integer","exclusiveMinimum":true})",
       "schema #: exclusiveMinimum must be a number"},
      {R"({"type":"integer","minimum":1e30})",
       "schema #: minimum 1e+30 is out of the supported range"},
      {R"({"type":"number","minimum":0})",
       "schema #: \"minimum\" is supported only with type integer"},
      {R"({"type":"string","format":"email"})", "schema #: unsupported format \"email\""},
      {R"({"type":"string","format":"date","maxLength":8})",
       "schema #: minLength/maxLength alongside format date"},
      {R"({"type":"string","pattern":"^a+$","maxLength":8})",
       "schema #: minLength/maxLength alongside pattern"},
      {R"({"type":"string","pattern":"^a$","format":"date"})",
       "schema #: \"pattern\" alongside \"format\" is not supported"},
      {R"({"properties":{"p":{"type":"string","pattern":"(a)\\1"}}})",
       "schema #/properties/p: pattern \"(a)\\\\1\": backreferences are not supported"},
      {R"j({"type":"string","pattern":"(?=a)"})j", "pattern \"(?=a)\": lookaround"},
      {R"({"type":"string","pattern":"(?<!a)b"})", "pattern \"(?<!a)b\": lookaround"},
      {R"({"type":"string","pattern":"a^b"})", "pattern \"a^b\": the anchors ^ and $"},
      {R"({"type":"string","pattern":"a$b"})", "pattern \"a$b\": the anchor"},
      {R"({"type":"string","pattern":"\\bword"})", "pattern \"\\\\bword\": the word boundary"},
      {R"({"type":"string","pattern":"a**"})", "nothing to repeat"},
      {R"({"type":"string","pattern":"*a"})", "nothing to repeat"},
      {R"({"type":"string","pattern":"(a*)*"})", "a repeated part that can match the empty string"},
      {R"({"type":"string","pattern":"[b-a]"})", "a character range is out of order"},
      {R"({"type":"string","pattern":"(ab"})", "unbalanced ("},
      {R"j({"type":"string","pattern":"ab)"})j", "unbalanced )"},
      {R"({"type":"string","pattern":"a{3,2}"})", "with m greater than n"},
      {R"({"type":"string","pattern":"a{10001}"})", "repetition counts above 10000"},
      {R"({"type":"string","pattern":"\\p{L}"})", "Unicode property escapes"},
      {R"({"type":"string","pattern":"[]"})", "a character class that matches nothing"},
      {R"({"properties":{"a/b":{"properties":{"c~d":{"type":"integer","minimum":3,"maximum":1}}}}})",
       "schema #/properties/a~1b/properties/c~0d: minimum 3 is greater than maximum 1"},
      {R"({"anyOf":[{"type":"string"},{"type":"strin"}]})",
       "schema #/anyOf/1/type: unknown type \"strin\""},
      {R"({"type":[]})", "schema #/type: an empty list of types accepts no value"},
      {R"({"anyOf":[{"type":"null"}],"oneOf":[{"type":"null"}]})",
       "schema #: \"oneOf\" alongside \"anyOf\" is not supported"},
      {R"({"type":"string","anyOf":[{"maxLength":2}]})",
       "schema #: \"type\" alongside \"anyOf\" is not supported"},
      {R"({"allOf":[{"type":"null"},{"type":"null"}]})",
       "schema #: allOf is supported only with exactly one schema"},
      {R"({"type":"array","uniqueItems":true})",
       "schema #: \"uniqueItems\" is supported only as false"},
      {R"({"type":"object","minProperties":1})", "schema #: unsupported keyword \"minProperties\""},
      {R"({"type":"object","patternProperties":{}})",
       "schema #: unsupported keyword \"patternProperties\""},
      {R"({"if":{},"then":{}})", "schema #: unsupported keyword \"if\""},
      {R"({"items":{"items":{"multipleOf":2}}})",
       "schema #/items/items: unsupported keyword \"multipleOf\""},
      {R"({"prefixItems":[{"type":"null"},{"$dynamicRef":"#x"}]})",
       "schema #/prefixItems/1: unsupported keyword \"$dynamicRef\""},
      {R"({"properties":{"a":3}})",
       "schema #/properties/a: a schema must be an object or a boolean"},
      {deep_items, "nested deeper than 64 levels"},
      {std::string(300, '[') + std::string(300, ']'), "schema #: nested deeper than 256 levels"},
      {wide_object, "schema #: an object with more than 4096 members"},
      {R"({"type":"string","pattern":")" + std::string(1 << 20, 'a') + "\"}",
       "schema #: longer than 1048576 bytes"},
  };
  for (const Refusal& c : cases) {
    const std::string message = refusal(c.schema);
    EXPECT_NE(message.find(c.message), std::string::npos)
        << "schema: " << c.schema.substr(0, 200) << "\nmessage: " << message
        << "\nexpected: " << c.message;
  }
}

TEST(JsonSchemaErrors, RefusesAGrammarLargerThanOneMebibyte) {
  std::string pattern;
  for (int i = 0; i < 20000; ++i) pattern += "[^a]";
  const std::string message = refusal(R"({"type":"string","pattern":"^)" + pattern + "$\"}");
  EXPECT_NE(message.find("schema #: the grammar would exceed 1048576 bytes"), std::string::npos)
      << message;
}

// ===========================================================================
// Part 2: the grammars through the GBNF parser and the matcher.

std::shared_ptr<const Grammar> compile(std::string_view schema) {
  const std::string gbnf = convert(schema);
  absl::StatusOr<std::shared_ptr<const Grammar>> g = Grammar::parse(gbnf);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << gbnf;
  return g.ok() ? *g : nullptr;
}

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  if (g == nullptr) return false;
  Matcher m(g);
  return m.accept(text) && m.complete();
}

// Checks that `schema` accepts each of `good` and refuses each of `bad`.
void expect_language(std::string_view schema, const std::vector<std::string>& good,
                     const std::vector<std::string>& bad) {
  const std::shared_ptr<const Grammar> g = compile(schema);
  ASSERT_NE(g, nullptr);
  for (const std::string& t : good)
    EXPECT_TRUE(matches(g, t)) << schema << "\nshould accept: " << t;
  for (const std::string& t : bad)
    EXPECT_FALSE(matches(g, t)) << schema << "\nshould refuse: " << t;
}

TEST(JsonSchemaMatch, AnyJson) {
  absl::StatusOr<std::shared_ptr<const Grammar>> parsed = Grammar::parse(any_json_gbnf());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::shared_ptr<const Grammar> g = *parsed;
  for (const char* t : {"null",
                        "true",
                        "false",
                        "0",
                        "-0",
                        "12",
                        "-3.25",
                        "1e5",
                        "1.5E-10",
                        "6.02e+23",
                        "\"\"",
                        "\"a\\\"b\\\\c\\/\\n\\u00e9\"",
                        "\"ü😀\"",
                        "[]",
                        "[ ]",
                        "[1, \"x\", [null]]",
                        "{}",
                        "{ }",
                        R"({"a": {"b": [1, {"c": null}]}, "d": -1})",
                        R"({ "a": 1 })",
                        "1234567890123456",
                        "0.1234567890123456",
                        "1e99"})
    EXPECT_TRUE(matches(g, t)) << t;
  for (const char* t : {"",
                        "nul",
                        "01",
                        "+1",
                        "1.",
                        ".5",
                        "1e",
                        "12345678901234567",
                        "0.12345678901234567",
                        "1e100",
                        "\"\\x\"",
                        "\"\\ud800\"",
                        "\"a\nb\"",
                        "[1,]",
                        "{\"a\":1,}",
                        "{a:1}",
                        "[1  ,2]",
                        "[1 ,2]",
                        " 1",
                        "1 ",
                        "{\"a\":1}\n",
                        "[\n1]",
                        "NaN",
                        "Infinity",
                        "'a'"})
    EXPECT_FALSE(matches(g, t)) << t;
}

TEST(JsonSchemaMatch, Types) {
  expect_language(R"({"type":"string"})", {"\"\"", "\"abc\"", "\"\\u0041\""}, {"abc", "1", "null"});
  expect_language(R"({"type":"integer"})", {"0", "-7", "1234567890123456"},
                  {"1.0", "1e3", "007", "\"1\"", "12345678901234567"});
  expect_language(R"({"type":"number"})", {"0", "-7.5", "3e-7"}, {"\"1\"", "-", "1.5.5"});
  expect_language(R"({"type":"boolean"})", {"true", "false"}, {"null", "1", "True"});
  expect_language(R"({"type":["integer","null"]})", {"5", "null"}, {"true", "5.5"});
  expect_language(R"({"type":["number","integer"]})", {"5", "5.5"}, {"\"5\""});
  expect_language("true", {"1", "{\"a\":[]}"}, {"x"});
  expect_language(R"({"description":"anything"})", {"1", "\"a\"", "[{}]"}, {""});
}

struct IntCase {
  std::string keywords;
  std::int64_t lo, hi;  // the integers they allow within -1200..1200
};

TEST(JsonSchemaMatch, IntegerRangesAreExactOverMinus1200To1200) {
  const std::vector<IntCase> cases = {
      {R"("minimum":0,"maximum":0)", 0, 0},
      {R"("minimum":-1,"maximum":1)", -1, 1},
      {R"("minimum":-1000,"maximum":-1)", -1000, -1},
      {R"("minimum":-999,"maximum":999)", -999, 999},
      {R"("minimum":7,"maximum":1100)", 7, 1100},
      {R"("minimum":-1100,"maximum":-7)", -1100, -7},
      {R"("minimum":13,"maximum":13)", 13, 13},
      {R"("minimum":-37,"maximum":250)", -37, 250},
      {R"("minimum":100,"maximum":199)", 100, 199},
      {R"("minimum":101,"maximum":1099)", 101, 1099},
      {R"("minimum":-1200,"maximum":1200)", -1200, 1200},
      {R"("minimum":-1,"maximum":0)", -1, 0},
      {R"("minimum":10,"maximum":10)", 10, 10},
      {R"("minimum":-120,"maximum":-119)", -120, -119},
      {R"("minimum":0,"maximum":9)", 0, 9},
      {R"("minimum":1,"maximum":1000)", 1, 1000},
      {R"("minimum":17)", 17, 1200},
      {R"("maximum":-3)", -1200, -3},
      {R"("minimum":0)", 0, 1200},
      {R"("maximum":0)", -1200, 0},
      {R"("exclusiveMinimum":-10,"exclusiveMaximum":10)", -9, 9},
      {R"("exclusiveMinimum":-1000,"maximum":-990)", -999, -990},
      {R"("minimum":5,"exclusiveMinimum":8,"maximum":900,"exclusiveMaximum":850)", 9, 849},
      {R"("minimum":2.5,"maximum":11.99)", 3, 11},
      {R"("exclusiveMinimum":-2.5,"exclusiveMaximum":3.0)", -2, 2},
      {R"("minimum":-1e3,"maximum":1e3)", -1000, 1000},
  };
  for (const IntCase& c : cases) {
    const std::string schema = int_schema(c.keywords);
    const std::shared_ptr<const Grammar> g = compile(schema);
    ASSERT_NE(g, nullptr) << schema;
    int wrong = 0;
    for (std::int64_t v = -1200; v <= 1200 && wrong < 5; ++v) {
      const bool in = c.lo <= v && v <= c.hi;
      if (matches(g, std::to_string(v)) != in) {
        ++wrong;
        ADD_FAILURE() << schema << ": " << v << (in ? " refused" : " accepted");
      }
    }
    for (const char* t : {"-0", "00", "01", "+1", "1.0", " 1", "--1"})
      EXPECT_FALSE(matches(g, t)) << schema << ": " << t;
  }
}

TEST(JsonSchemaMatch, IntegerRangesWithLargeBounds) {
  const std::shared_ptr<const Grammar> g =
      compile(R"({"type":"integer","minimum":-123456789012,"maximum":987654321098765432})");
  for (const char* t : {"-123456789012", "-123456789011", "-99999999999", "0", "987654321098765432",
                        "987654321098765431", "99999999999999999"})
    EXPECT_TRUE(matches(g, t)) << t;
  for (const char* t : {"-123456789013", "-999999999999", "987654321098765433",
                        "999999999999999999", "1000000000000000000"})
    EXPECT_FALSE(matches(g, t)) << t;
  // A minimum alone beyond 16 digits allows the numbers of its length above it.
  const std::shared_ptr<const Grammar> h =
      compile(R"({"type":"integer","minimum":50000000000000000})");
  EXPECT_TRUE(matches(h, "50000000000000000"));
  EXPECT_TRUE(matches(h, "99999999999999999"));
  EXPECT_FALSE(matches(h, "49999999999999999"));
  EXPECT_FALSE(matches(h, "100000000000000000"));
}

TEST(JsonSchemaMatch, StringLengthsCountCharactersAndEscapesAsOne) {
  expect_language(R"({"type":"string","minLength":2,"maxLength":3})",
                  {"\"ab\"", "\"abc\"", "\"é😀\"", "\"\\n\\u00e9\"", "\"a\\\"b\""},
                  {"\"a\"", "\"abcd\"", "\"\\n\\u00e9xy\"", "\"a\tb\"", "\"\\ud83d\\ude00\""});
  expect_language(R"({"type":"string","maxLength":0})", {"\"\""}, {"\"a\""});
}

TEST(JsonSchemaMatch, ObjectsWriteRequiredPropertiesAndAnySubsetOfOptionalOnes) {
  const std::string schema = R"({"type":"object","properties":{
    "a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["b"]})";
  expect_language(
      schema,
      {R"({"b":2})", R"({"a":1,"b":2})", R"({"b":2,"c":3})", R"({"a":1,"b":2,"c":3})",
       R"({ "a": 1, "b": 2, "c": 3 })"},
      {"{}", R"({"a":1})", R"({"c":3})", R"({"b":2,"a":1})", R"({"b":2,"d":4})", R"({"b":2,})",
       R"({"b":2,"b":2})", R"({"b":"2"})", R"({"b":2 ,"c":3})", R"({"b":  2})", "{\n\"b\":2}"});
  // All optional, many of them: every subset in the declared order.
  const std::string all = R"({"properties":{"a":{"const":1},"b":{"const":2},"c":{"const":3},
    "d":{"const":4},"e":{"const":5}}})";
  const std::shared_ptr<const Grammar> g = compile(all);
  for (int mask = 0; mask < 32; ++mask) {
    std::string text = "{";
    for (int i = 0; i < 5; ++i)
      if (mask & (1 << i)) text += property(text.size() > 1, static_cast<char>('a' + i), i + 1);
    text += "}";
    EXPECT_TRUE(matches(g, text)) << text;
  }
  EXPECT_FALSE(matches(g, R"({"b":2,"a":1})"));
  EXPECT_FALSE(matches(g, R"({,"a":1})"));
  // Required properties that `properties` does not describe take any value.
  expect_language(R"({"required":["x"]})", {R"({"x":[1]})"}, {"{}"});
}

TEST(JsonSchemaMatch, AdditionalProperties) {
  const std::string schema = R"({"type":"object","properties":{"ab":{"type":"integer"}},
    "required":["ab"],"additionalProperties":{"type":"boolean"}})";
  expect_language(schema,
                  {R"({"ab":1})", R"({"ab":1,"a":true})", R"({"ab":1,"abc":false,"b":true})",
                   R"({"ab":1,"":true})"},
                  {R"({"ab":1,"ab":true})", R"({"ab":1,"x":1})", R"({"a":true,"ab":1})",
                   R"({"ab":1,"\u0061":true})"});
  expect_language(R"({"properties":{"a":{"type":"null"}},"additionalProperties":true})",
                  {"{}", R"({"a":null})", R"({"b":[1,2]})", R"({"a":null,"b":{}})"},
                  {R"({"a":1})", R"({"a":null,"a":null})"});
  expect_language(R"({"type":"object","additionalProperties":{"type":"integer"}})",
                  {"{}", R"({"x":1,"y":2})"}, {R"({"x":"1"})"});
  // Absent or false: only the declared properties.
  expect_language(R"({"properties":{"a":{"type":"null"}}})", {"{}", R"({"a":null})"},
                  {R"({"b":null})"});
  expect_language(R"({"type":"object","additionalProperties":false})", {"{}", "{ }"},
                  {R"({"a":1})"});
}

TEST(JsonSchemaMatch, ArraysCountItemsExactly) {
  for (int lo = 0; lo <= 3; ++lo)
    for (int hi = lo; hi <= 4; ++hi) {
      const std::shared_ptr<const Grammar> g = compile(array_schema(lo, hi));
      std::string text = "[";
      for (int n = 0; n <= 6; ++n) {
        EXPECT_EQ(matches(g, text + "]"), lo <= n && n <= hi) << lo << ".." << hi << ": " << text;
        text += n == 0 ? "0" : ", 0";
      }
    }
  expect_language(R"({"type":"array","items":{"type":"string","maxLength":1},"minItems":1})",
                  {"[\"a\"]", "[\"a\",\"b\",\"\"]", "[ \"a\" ]"}, {"[]", "[\"ab\"]", "[1]"});
  expect_language(R"({"type":"array"})", {"[]", "[1, \"a\", null]"}, {"{}"});
}

TEST(JsonSchemaMatch, PrefixItems) {
  const std::string schema = R"({"type":"array","prefixItems":[{"type":"integer"},
    {"type":"string"},{"type":"boolean"}],"minItems":1})";
  expect_language(schema, {"[1]", "[1,\"a\"]", "[1,\"a\",true]"},
                  {"[]", "[\"a\"]", "[1,2]", "[1,\"a\",true,null]"});
  expect_language(R"({"prefixItems":[{"type":"integer"}],"items":{"type":"null"},"maxItems":3})",
                  {"[]", "[1]", "[1,null]", "[1,null,null]"}, {"[null]", "[1,null,null,null]"});
  expect_language(R"({"prefixItems":[{"type":"integer"},false]})", {"[]", "[1]"}, {"[1,2]"});
  expect_language(R"({"prefixItems":[{"type":"integer"},{"type":"integer"}],"maxItems":1})",
                  {"[]", "[1]"}, {"[1,2]"});
}

TEST(JsonSchemaMatch, EnumConstAndAlternatives) {
  expect_language(R"({"enum":["red","green",1,null,[1,2],{"a":true}]})",
                  {"\"red\"", "\"green\"", "1", "null", "[1,2]", "{\"a\":true}"},
                  {"\"blue\"", "2", "[1, 2]", "{\"a\": true}", "\"Red\""});
  expect_language(R"({"const":"x"})", {"\"x\""}, {"\"y\""});
  expect_language(R"({"anyOf":[{"type":"integer","minimum":0,"maximum":9},{"type":"string",
    "maxLength":2}]})",
                  {"5", "\"ab\""}, {"10", "\"abc\"", "null"});
  expect_language(R"({"oneOf":[{"type":"null"},{"type":"boolean"}]})", {"null", "true"}, {"0"});
  expect_language(R"({"allOf":[{"type":"null"}]})", {"null"}, {"0"});
}

TEST(JsonSchemaMatch, Patterns) {
  auto pattern = [](std::string_view p) {
    return str_cat(R"({"type":"string","pattern":)", nlohmann::json(std::string(p)).dump(), "}");
  };
  expect_language(pattern("^[A-Z]{2}-\\d{3}$"), {"\"AB-123\""},
                  {"\"AB-12\"", "\"ab-123\"", "\"AB-1234\"", "\"xAB-123\""});
  expect_language(pattern("^(ab|c)+x?$"), {"\"ab\"", "\"cabx\"", "\"ccc\""},
                  {"\"\"", "\"a\"", "\"abxx\""});
  expect_language(pattern("^a.c$"),
                  {"\"abc\"", "\"a.c\"", "\"aéc\"", "\"a\\\"c\"", "\"a\\\\c\"", "\"a\\tc\""},
                  {"\"ac\"", "\"a\\nc\"", "\"abbc\""});
  expect_language(pattern("^[^a-c]$"), {"\"d\"", "\"\\\"\"", "\"\\u0001\"", "\"\\n\""},
                  {"\"a\"", "\"\\u0061\""});
  expect_language(pattern("^\"q\\\\$"), {"\"\\\"q\\\\\""}, {"\"\"q\\\"\""});
  expect_language(pattern("^(?:x|y){2,3}$"), {"\"xy\"", "\"yyy\""}, {"\"x\"", "\"xyxy\""});
  expect_language(pattern("^(?<n>\\w+)\\s\\.$"), {"\"a_1 .\"", "\"Z\\t.\""},
                  {"\"a .x\"", "\" .\""});
  expect_language(pattern("^a|b$"), {"\"a\"", "\"axyz\"", "\"b\"", "\"xyzb\""},
                  {"\"xa\"", "\"bx\""});
  expect_language(pattern("cat"), {"\"cat\"", "\"a cat!\""}, {"\"ca\"", "\"dog\""});
  expect_language(pattern("^\\x41\\u00e9[\\-\\]]\\/$"), {"\"Aé-/\"", "\"Aé]/\""}, {"\"Aéx/\""});
  // Control characters: written \n or \u00XX, one character each.
  expect_language(pattern("^\\u0000+[\\u0001-\\u0003\\n]a$"),
                  {"\"\\u0000\\u0000\\u0002a\"", "\"\\u0000\\na\""},
                  {"\"\\u00000\\u0002a\"", "\"\\u0002a\"", "\"\\u0000\\u000aa\""});
  expect_language(pattern("^a{0}b?$"), {"\"\"", "\"b\""}, {"\"a\""});
  // minLength/maxLength alongside a pattern that always satisfies them.
  expect_language(R"({"type":"string","pattern":"^[a-z]{2,4}$","minLength":1,"maxLength":6})",
                  {"\"ab\""}, {"\"a\""});
}

TEST(JsonSchemaMatch, Formats) {
  expect_language(
      R"({"type":"string","format":"date"})",
      {"\"2024-01-31\"", "\"2024-02-29\"", "\"2000-02-29\"", "\"1996-02-29\"", "\"2023-02-28\"",
       "\"2023-04-30\"", "\"0001-12-31\"", "\"2400-02-29\""},
      {"\"2023-02-29\"", "\"1900-02-29\"", "\"2100-02-29\"", "\"2023-04-31\"", "\"2023-13-01\"",
       "\"2023-00-10\"", "\"2023-01-00\"", "\"0000-01-01\"", "\"2023-1-01\"", "\"2023-01-32\""});
  expect_language(R"({"type":"string","format":"time"})",
                  {"\"00:00:00Z\"", "\"23:59:59Z\"", "\"12:30:00.123Z\"", "\"12:30:00Z\"",
                   "\"12:30:00.5+05:30\"", "\"12:30:00-23:59\""},
                  {"\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:00:60Z\"", "\"12:00Z\"",
                   "\"12:00:00.Z\"", "\"12:00:00z\"", "\"12:00:00+5:00\"",
                   // RFC 3339's full-time: the offset is required
                   "\"12:00:00\"", "\"12:30:00.123\""});
  expect_language(
      R"({"type":"string","format":"date-time"})",
      {"\"2024-02-29T23:59:59Z\"", "\"1999-12-31T00:00:00.25-08:00\""},
      {"\"2024-02-29 23:59:59\"", "\"2024-02-30T00:00:00Z\"", "\"2024-02-29T23:59:59\""});
  expect_language(
      R"({"type":"string","format":"uuid"})",
      {"\"123e4567-e89b-12d3-a456-426614174000\"", "\"ABCDEF01-2345-6789-abcd-ef0123456789\""},
      {"\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400\"",
       "\"g23e4567-e89b-12d3-a456-426614174000\""});
}

TEST(JsonSchemaMatch, RecursiveReferences) {
  const std::string schema = R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
    "properties":{"v":{"type":"integer","minimum":-9,"maximum":9},
    "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"]}}})";
  std::string deep = R"({"v":1})";
  for (int i = 0; i < 30; ++i) deep = node(i % 10 - 5, deep);
  expect_language(schema,
                  {R"({"v":1})", R"({"v":1,"kids":[]})",
                   R"({"v":-1,"kids":[{"v":2},{"v":3,"kids":[{"v":4}]}]})", deep},
                  {R"({"kids":[]})", R"({"v":1,"kids":[{"v":10}]})",
                   R"({"v":1,"kids":[{"v":1},{"v":1},{"v":1}]})"});
  // Mutual recursion through a list, and a reference to the root.
  expect_language(R"({"type":"array","items":{"anyOf":[{"type":"integer"},{"$ref":"#"}]}})",
                  {"[]", "[1,[2,[3,[]]]]"}, {"[1,[2,[3,[]]]", "[[\"a\"]]"});
}

TEST(JsonSchemaMatch, CompleteValuesMustEndWhereNothingMayFollow) {
  const std::shared_ptr<const Grammar> g = compile(R"({"enum":["red","green"]})");
  Matcher m(g);
  ASSERT_TRUE(m.accept("\"red\""));
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.must_end());
  const std::shared_ptr<const Grammar> h =
      compile(R"({"type":"integer","minimum":0,"maximum":15})");
  Matcher n(h);
  ASSERT_TRUE(n.accept("1"));
  EXPECT_TRUE(n.complete());
  EXPECT_FALSE(n.must_end());
  ASSERT_TRUE(n.accept("5"));
  EXPECT_TRUE(n.must_end());
}

// A sentence of `g` built by picking, at each step, any allowed byte (or
// the end, once complete) at random; empty if it fails to end in 1000 bytes.
std::string random_sentence(const std::shared_ptr<const Grammar>& g, std::mt19937& rng) {
  Matcher m(g);
  std::string text;
  while (!m.must_end() && text.size() < 1000) {
    std::vector<int> choices;
    for (int b = 0; b < 256; ++b) {
      const char c = static_cast<char>(b);
      if (m.can_accept(std::string_view(&c, 1))) choices.push_back(b);
    }
    if (m.complete()) choices.push_back(-1);
    if (choices.empty()) return "";
    const int pick =
        choices[std::uniform_int_distribution<std::size_t>(0, choices.size() - 1)(rng)];
    if (pick < 0) return text;
    const char c = static_cast<char>(pick);
    m.accept(std::string_view(&c, 1));
    text += c;
  }
  return m.complete() ? text : "";
}

// The schema files the end-to-end test samples: each converts and parses,
// and a sampler that picks any allowed byte at random always reaches a
// complete JSON value within a few hundred bytes.
TEST(JsonSchemaMatch, SchemaFilesSampleToCompleteBoundedJson) {
  const std::filesystem::path dir =
      std::filesystem::path(HEARTH_SOURCE_DIR) / "tests/grammar/schemas";
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 10u);
  std::mt19937 rng(7);
  for (const std::filesystem::path& file : files) {
    std::ifstream in(file);
    const std::string schema((std::istreambuf_iterator<char>(in)), {});
    const std::shared_ptr<const Grammar> g = compile(schema);
    ASSERT_NE(g, nullptr) << file;
    for (int sample = 0; sample < 20; ++sample) {
      const std::string text = random_sentence(g, rng);
      EXPECT_FALSE(text.empty()) << file;
      EXPECT_LE(text.size(), 250u) << file << ": " << text;
      EXPECT_FALSE(nlohmann::json::parse(text, nullptr, false).is_discarded())
          << file << ": " << text;
    }
  }
}

}  // namespace
}  // namespace hearth::grammar
