// Unit tests of the chat template interpreter: one behaviour per test, with
// the expected text written out (the conformance test checks the same
// behaviours against jinja2 itself).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "chat/chat_template.h"

namespace hearth::chat {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

absl::StatusOr<std::string> render(std::string_view source, Json extra = Json::object(),
                                   const RenderLimits& limits = {}) {
  auto t = ChatTemplate::parse(source);
  if (!t.ok()) return t.status();
  ChatContext ctx;
  if (extra.contains("messages")) ctx.messages = extra["messages"], extra.erase("messages");
  ctx.extra = std::move(extra);
  ctx.now_unix_seconds = 1721995200;  // 2024-07-26 12:00:00 UTC
  return t->render(ctx, limits);
}

std::string ok(std::string_view source, Json extra = Json::object()) {
  auto r = render(source, std::move(extra));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : "<error>";
}

TEST(ChatInterpreter, TrimBlocksAndLstripBlocks) {
  EXPECT_EQ(ok("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(ok("x\n    {% if true %}\n    y\n    {% endif %}\nz"), "x\n    y\nz");
  EXPECT_EQ(ok("a\n  {# note #}\nb"), "a\nb");
  EXPECT_EQ(ok("    {{ 'v' }}\n"), "    v");  // output tags are not stripped; one final \n dropped
}

TEST(ChatInterpreter, ExplicitWhitespaceControl) {
  EXPECT_EQ(ok("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(ok("a \n {{- 'b' -}} \n c"), "abc");
  EXPECT_EQ(ok("a\n    {%+ if true %}b{% endif +%}\nc"), "a\n    b\nc");
}

TEST(ChatInterpreter, LoopVariables) {
  EXPECT_EQ(ok("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
               "{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}"),
            "103TrueFalse3 212FalseFalse3 321FalseTrue3 ");
  EXPECT_EQ(ok("{% for m in ms if m != 2 %}{{ loop.index }}{{ m }}{% else %}none{% endfor %}",
               {{"ms", {1, 2, 3}}}),
            "1123");
  EXPECT_EQ(ok("{% for m in [] %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(ok("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"a", 1}}}}),
            "a=1;");
  EXPECT_EQ(ok("{% for i in range(9) %}{% if i == 1 %}{% continue %}{% endif %}"
               "{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "02");
}

TEST(ChatInterpreter, NamespaceOutlivesLoopScope) {
  EXPECT_EQ(ok("{% set ns = namespace(n=0) %}{% set x = 0 %}{% for i in range(4) %}"
               "{% set ns.n = ns.n + i %}{% set x = i %}{% endfor %}{{ ns.n }} {{ x }}"),
            "6 0");
  auto r = render("{% set x = 1 %}{% set x.a = 2 %}");
  EXPECT_THAT(r.status().message(), HasSubstr("non-namespace"));
}

TEST(ChatInterpreter, Macros) {
  EXPECT_EQ(ok("{% macro m(a, b='d') %}{{ a }}-{{ b }}{% endmacro %}"
               "{{ m(1) }} {{ m(1, 2) }} {{ m(b=3, a=4) }} [{{ m() }}]"),
            "1-d 1-2 4-3 [-d]");
}

TEST(ChatInterpreter, Slicing) {
  EXPECT_EQ(ok("{{ [1,2,3,4][1:3] }} {{ [1,2,3][::-1] }} {{ 'héllo'[1:3] }} {{ 'abc'[-1] }}"),
            "[2, 3] [3, 2, 1] él c");
}

TEST(ChatInterpreter, PythonPrinting) {
  EXPECT_EQ(ok("{{ [1, 'a', none, true, 1.0, (1,)] }} {{ {'k': \"it's\"} }}"),
            "[1, 'a', None, True, 1.0, (1,)] {'k': \"it's\"}");
  EXPECT_EQ(ok("{{ 1/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7 % 3 }} {{ 1e20 }} {{ 0.1 + 0.2 }}"),
            "0.5 2.0 3 2 1e+20 0.30000000000000004");
}

TEST(ChatInterpreter, Filters) {
  EXPECT_EQ(ok("{{ '  a  ' | trim }}|{{ 'AbC' | lower }}|{{ [1, 2] | join(',') }}|"
               "{{ x | default('d') }}|{{ '' | default('d', true) }}|{{ 'héllo' | length }}"),
            "a|abc|1,2|d|d|5");
  EXPECT_EQ(ok("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }}",
               {{"ms", {{{"role", "user"}, {"c", 1}}, {{"role", "bot"}, {"c", 2}}}}}),
            "[1]");
  EXPECT_EQ(ok("{{ 'a\\nb' | indent(2, true) }}"), "  a\n  b");
}

TEST(ChatInterpreter, TojsonMatchesJsonDumps) {
  const Json x = {{"b", {1, 2.5, true, nullptr, "é\"\n"}}, {"a", Json::object()}};
  EXPECT_EQ(ok("{{ x | tojson }}", {{"x", x}}),
            "{\"b\": [1, 2.5, true, null, \"é\\\"\\n\"], \"a\": {}}");
  EXPECT_EQ(ok("{{ x | tojson(indent=2, sort_keys=true) }}", {{"x", {{"b", 1}, {"a", {1}}}}}),
            "{\n  \"a\": [\n    1\n  ],\n  \"b\": 1\n}");
  EXPECT_EQ(
      ok("{{ 'é' | tojson(ensure_ascii=true) }} {{ [1, 2] | tojson(separators=(',', ':')) }}"),
      "\"\\u00e9\" [1,2]");
}

TEST(ChatInterpreter, UndefinedFollowsJinja2) {
  EXPECT_EQ(ok("[{{ nope }}] {{ nope is defined }} {{ nope | length }} [{{ d.missing }}]",
               {{"d", Json::object()}}),
            "[] False 0 []");
  auto r = render("{{ nope.attr }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("'nope' is undefined"));
}

TEST(ChatInterpreter, ErrorsNameConstructAndPosition) {
  auto r = render("line one\n{{ raise_exception('roles must alternate') }}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("2:"));
  EXPECT_THAT(r.status().message(), HasSubstr("raise_exception"));
  EXPECT_THAT(r.status().message(), HasSubstr("roles must alternate"));

  auto p = ChatTemplate::parse("ok\n  {% include 'x' %}");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("2:6"));
  EXPECT_THAT(p.status().message(), HasSubstr("unsupported tag 'include'"));

  p = ChatTemplate::parse("{{ x | nosuch }}");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("1:8: unknown filter 'nosuch'"));

  r = render("{{ 'a' + 1 }}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("1:8 in operator '+'"));
}

TEST(ChatInterpreter, SandboxRefusesMutation) {
  auto r = render("{% set l = [1] %}{{ l.append(2) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("unsafe"));
}

TEST(ChatInterpreter, StrftimeNowUsesPinnedClock) {
  EXPECT_EQ(ok("{{ strftime_now('%d %b %Y') }}"), "26 Jul 2024");
}

TEST(ChatInterpreter, RecursionIsBounded) {
  auto r = render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ChatInterpreter, EvaluationDepthIsBounded) {
  RenderLimits limits;
  limits.max_eval_depth = 50;
  auto r = render("{% macro f(n) %}{{ (((f(n + 1)))) }}{% endmacro %}{{ f(0) }}", Json::object(),
                  limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ok("{{ '' * 1000000000000 }}{{ [] * 1000000000000 }}"), "[]");
}

TEST(ChatInterpreter, OutputSizeIsBounded) {
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  auto r = render("{% for i in range(100) %}{{ 'x' * 20 }}{% endfor %}", Json::object(), limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  r = render(
      "{% set ns = namespace(s='ab') %}{% for i in range(40) %}"
      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      Json::object(), limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ChatInterpreter, StepsAreBounded) {
  RenderLimits limits;
  limits.max_steps = 100000;
  auto r = render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                  Json::object(), limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
}

// Copies cost: a list repeated shares its strings (a thousand 8 MB
// strings took 8 GB and crashed), a string grown by concatenation in a loop
// spends the step budget by the bytes it copies (it ran for hours within
// it), a string iterates into at most the list limit of characters, and a
// container's text stops growing past what any string may hold.
TEST(ChatInterpreter, CopiesCountAgainstTheLimits) {
  EXPECT_EQ(ok("{% set l = ['x' * 8000000] * 1000 %}{{ l | length }} {{ l[999] | length }}"),
            "1000 8000000");
  RenderLimits limits;
  limits.max_steps = 1000000;
  auto r = render(
      "{% set ns = namespace(s='') %}{% for i in range(2000) %}"
      "{% set ns.s = ns.s ~ ('y' * 1000) %}{% endfor %}{{ ns.s | length }}",
      Json::object(), limits);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  r = render(
      "{% set ns = namespace(s='') %}{% for i in range(200) %}"
      "{% set ns.s = ns.s ~ ('y' * 1000) %}{% endfor %}{{ ns.s | length }}",
      Json::object(), limits);
  EXPECT_EQ(r.value_or("<error>"), "200000");
  r = render("{{ (['yyyyyyyy'] * 1000000) | sum(start='') | length }}", Json::object(), limits);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  // Reading a long string costs too (a slice, a filter, a method decode or
  // copy all of it: a loop of them ran for hours within the budget).
  limits.max_steps = 100000;
  for (const char* op : {"s[1:]", "s | trim", "s.upper()", "s[-1]", "'y' in s", "s == s"}) {
    r = render(std::string("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{% set t = ") + op +
                   " %}{% endfor %}",
               Json::object(), limits);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << op << ": " << r.status();
  }
  r = render("{{ ('x' * 8000000) | list | length }}");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  r = render("{% set l = ['x' * 4000000] * 200 %}{{ l ~ '' }}");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
}

TEST(ChatInterpreter, DeepNestingIsRefusedAtParse) {
  std::string deep(5000, '(');
  EXPECT_FALSE(ChatTemplate::parse("{{ " + deep + " }}").ok());
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  EXPECT_FALSE(ChatTemplate::parse(chain + " }}").ok());
}

TEST(ChatInterpreter, OneTemplateRendersOnManyThreads) {
  auto t = ChatTemplate::parse(
      "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}");
  ASSERT_TRUE(t.ok());
  std::vector<std::thread> threads;
  std::vector<std::string> out(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      ChatContext ctx;
      ctx.messages = Json::array({{{"role", "user"}, {"content", " hi " + std::to_string(i)}}});
      for (int k = 0; k < 200; ++k) out[i] = t->render(ctx).value_or("<error>");
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], "<user>hi " + std::to_string(i));
}

}  // namespace
}  // namespace hearth::chat
