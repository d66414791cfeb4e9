// Conformance: hearth's chat template interpreter against Python's jinja2,
// configured as Hugging Face's apply_chat_template configures it
// (render_jinja2.py). Every real template under templates/ is rendered with
// every conversation under conversations/, and every feature snippet in
// snippets.json with its context; the outputs must be byte-identical, and
// where jinja2 raises, hearth must return an error.
//
// python3 with jinja2 is required: without it these tests fail (never skip).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace hearth::chat {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// The clock both renderers give strftime_now: 2024-07-26 12:00:00 UTC.
constexpr int64_t kPinnedNow = 1721995200;

fs::path chat_dir() { return fs::path(HEARTH_SOURCE_DIR) / "tests" / "chat"; }

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Case {
  std::string name;
  std::string source;
  Json context;
};

// Runs render_jinja2.py over all cases at once (one interpreter start).
std::vector<Json> render_with_jinja2(const std::vector<Case>& cases) {
  Json input = Json::array();
  for (const Case& c : cases) input.push_back(Json{{"template", c.source}, {"context", c.context}});
  const fs::path dir = fs::temp_directory_path() / ("hearth_chat_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "in.json", std::ios::binary) << input.dump();
  const std::string cmd = std::string(HEARTH_PYTHON3) + " " +
                          (chat_dir() / "render_jinja2.py").string() + " < " +
                          (dir / "in.json").string() + " > " + (dir / "out.json").string();
  const int rc = std::system(cmd.c_str());
  std::vector<Json> results;
  if (rc == 0) {
    for (auto& r : Json::parse(read_file(dir / "out.json"))) results.push_back(r);
  }
  fs::remove_all(dir);
  EXPECT_EQ(rc, 0) << "the reference renderer failed: `" << cmd
                   << "` (python3 with jinja2 is required: Debian package python3-jinja2)";
  return results;
}

ChatContext to_context(const Json& c) {
  ChatContext ctx;
  ctx.messages = c.at("messages");
  ctx.add_generation_prompt = c.value("add_generation_prompt", false);
  if (c.contains("tools")) ctx.tools = c.at("tools");
  ctx.bos_token = c.value("bos_token", "");
  ctx.eos_token = c.value("eos_token", "");
  if (c.contains("extra")) ctx.extra = c.at("extra");
  ctx.now_unix_seconds = c.value("now", kPinnedNow);
  return ctx;
}

std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) +
         "\n  jinja2: " + Json(want.substr(from, 120)).dump() +
         "\n  hearth: " + Json(got.substr(from, 120)).dump();
}

// Compares every case; returns the number where both renderers succeeded.
int compare_all(const std::vector<Case>& cases) {
  const std::vector<Json> want = render_with_jinja2(cases);
  if (want.size() != cases.size()) {
    ADD_FAILURE() << "jinja2 gave " << want.size() << " results for " << cases.size() << " cases";
    return 0;
  }
  int both_ok = 0, both_failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    auto tmpl = ChatTemplate::parse(c.source);
    absl::StatusOr<std::string> got = tmpl.ok() ? tmpl->render(to_context(c.context))
                                                : absl::StatusOr<std::string>(tmpl.status());
    if (want[i].at("ok").get<bool>()) {
      const std::string expected = want[i].at("output").get<std::string>();
      if (!got.ok()) {
        ADD_FAILURE() << c.name << ": jinja2 rendered, hearth failed: " << got.status();
      } else if (*got != expected) {
        ADD_FAILURE() << c.name << ": outputs differ, " << first_difference(expected, *got);
      } else {
        ++both_ok;
      }
    } else if (got.ok()) {
      ADD_FAILURE() << c.name << ": jinja2 raised (" << want[i].at("error").get<std::string>()
                    << ") but hearth rendered " << Json(*got).dump();
    } else {
      ++both_failed;
    }
  }
  std::printf("%zu cases: %d identical outputs, %d errors on both sides\n", cases.size(), both_ok,
              both_failed);
  return both_ok;
}

TEST(ChatConformance, RealTemplatesMatchJinja2) {
  const Json tokens = Json::parse(read_file(chat_dir() / "templates" / "tokens.json"));
  std::vector<fs::path> templates, conversations;
  for (const auto& e : fs::directory_iterator(chat_dir() / "templates"))
    if (e.path().extension() == ".jinja") templates.push_back(e.path());
  for (const auto& e : fs::directory_iterator(chat_dir() / "conversations"))
    if (e.path().extension() == ".json") conversations.push_back(e.path());
  std::sort(templates.begin(), templates.end());
  std::sort(conversations.begin(), conversations.end());
  ASSERT_GE(templates.size(), 20u);
  ASSERT_GE(conversations.size(), 5u);
  std::vector<Case> cases;
  for (const fs::path& t : templates) {
    const std::string name = t.stem().string();
    ASSERT_TRUE(tokens.contains(name)) << name << " has no entry in templates/tokens.json";
    const std::string source = read_file(t);
    for (const fs::path& c : conversations) {
      Json context = Json::parse(read_file(c));
      context["bos_token"] = tokens[name]["bos_token"];
      context["eos_token"] = tokens[name]["eos_token"];
      // Variables a template needs beyond the standard ones (tokens.json "extra").
      if (tokens[name].contains("extra"))
        for (const auto& [k, v] : tokens[name]["extra"].items()) context["extra"][k] = v;
      context["now"] = kPinnedNow;
      cases.push_back(Case{name + " x " + c.stem().string(), source, std::move(context)});
    }
  }
  const int both_ok = compare_all(cases);
  // Most conversations must render (not merely fail alike) for the test to mean anything.
  EXPECT_GE(both_ok, static_cast<int>(cases.size() * 6 / 10));
}

TEST(ChatConformance, FeatureSnippetsMatchJinja2) {
  const Json snippets = Json::parse(read_file(chat_dir() / "snippets.json"));
  std::vector<Case> cases;
  for (const auto& s : snippets) {
    Json context = s.contains("context") ? s.at("context") : Json::object();
    if (!context.contains("messages")) context["messages"] = Json::array();
    context["now"] = kPinnedNow;
    cases.push_back(Case{s.at("name").get<std::string>(), s.at("template").get<std::string>(),
                         std::move(context)});
  }
  ASSERT_FALSE(cases.empty());
  // Most snippets render (60 of 82); the rest check that both refuse.
  EXPECT_GE(compare_all(cases), static_cast<int>(cases.size() / 2));
}

}  // namespace
}  // namespace hearth::chat
