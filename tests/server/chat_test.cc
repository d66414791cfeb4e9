// Chat and ChatComplete through a real hearth-server serving the trained
// stories260K model (../shared) under four names: "stories" with a Zephyr
// chat template, "strict" with Mistral's and "tooled" with Qwen2.5's (all
// given with --chat-template), "plain" with none (the file has no template).
//
// The expected prompt comes from Python's jinja2 (tests/chat/render_jinja2.py,
// Hugging Face's apply_chat_template configuration), not from hearth's
// interpreter: Chat must generate exactly what Generate generates on that
// text, with special-token text parsed and BOS added only when the rendered
// text does not begin with it.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/gguf_writer.h"
#include "nlohmann/json.hpp"
#include "tests/server/stories_model.h"
#include "tests/support/gguf_rewrite.h"
#include "tests/support/temp_dir_test.h"

namespace hearth::testing {
namespace {

const fs::path kTemplates = fs::path(HEARTH_SOURCE_DIR) / "tests/chat/templates";
const fs::path kZephyr = kTemplates / "HuggingFaceH4-zephyr-7b-beta.jinja";
const fs::path kMistral = kTemplates / "mistralai-Mistral-7B-Instruct-v0.2.jinja";
const fs::path kQwen = kTemplates / "Qwen-Qwen2.5-7B-Instruct.jinja";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in.good()) << p;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Message {
  std::string role, content;
};

// jinja2's rendering of `template_path` for `messages` (stories260K's BOS and
// EOS texts), or a failure naming jinja2's error.
std::string jinja2_render(const fs::path& template_path, const std::vector<Message>& messages,
                          bool add_generation_prompt) {
  nlohmann::json msgs = nlohmann::json::array();
  for (const Message& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  const nlohmann::json cases =
      nlohmann::json::array({{{"template", read_file(template_path)},
                              {"context",
                               {{"messages", msgs},
                                {"add_generation_prompt", add_generation_prompt},
                                {"bos_token", "<s>"},
                                {"eos_token", "</s>"}}}}});
  const fs::path in = fs::temp_directory_path() / ("hearth_chat_test_" + std::to_string(getpid()));
  {
    std::ofstream out(in);
    out << cases.dump();
  }
  const std::string cmd = "python3 " +
                          (fs::path(HEARTH_SOURCE_DIR) / "tests/chat/render_jinja2.py").string() +
                          " < " + in.string();
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << cmd << " (needs python3-jinja2)";
  }
  fs::remove(in);
  const nlohmann::json result = nlohmann::json::parse(out, nullptr, false);
  if (result.is_discarded() || !result.is_array() || result.empty()) {
    ADD_FAILURE() << "render_jinja2.py printed: " << out;
    return "";
  }
  EXPECT_TRUE(result[0]["ok"].get<bool>()) << result[0].dump();
  return result[0].value("output", "");
}

v1::ChatRequest chat_request(const std::string& model, const std::vector<Message>& messages) {
  v1::ChatRequest r;
  r.set_model(model);
  for (const Message& m : messages) {
    v1::ChatMessage* out = r.add_messages();
    out->set_role(m.role);
    out->set_content(m.content);
  }
  r.set_max_tokens(16);
  r.set_echo_prompt_ids(true);
  r.set_ignore_eos(true);
  return r;
}

StreamResult chat(v1::Inference::Stub& stub, const v1::ChatRequest& req) {
  grpc::ClientContext ctx;
  set_deadline(ctx);
  StreamResult r;
  auto reader = stub.Chat(&ctx, req);
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    if (msg.has_piece()) r.pieces.push_back(msg.piece());
    if (msg.has_done()) r.dones.push_back(msg.done());
  }
  r.status = reader->Finish();
  return r;
}

std::vector<std::int32_t> prompt_ids(const v1::Done& done) {
  return {done.usage().prompt_ids().begin(), done.usage().prompt_ids().end()};
}

// The Generate request a Chat must equal: its rendered `prompt` with
// special-token text parsed and BOS added only when the text lacks it
// (stories260K adds BOS by default), 16 tokens, EOS ignored.
v1::GenerateRequest generate_on_rendering(const std::string& model, const std::string& prompt) {
  v1::GenerateRequest gen = make_request(model, prompt, 16);
  gen.set_parse_special(true);
  gen.set_add_bos(prompt.rfind("<s>", 0) != 0);
  gen.set_echo_prompt_ids(true);
  gen.set_ignore_eos(true);
  return gen;
}

const std::string kWeatherTool =
    R"([{"type": "function", "function": {"name": "get_weather", "description": )"
    R"("The weather in a city", "parameters": {"type": "object", "properties": )"
    R"({"city": {"type": "string"}}}}}])";

const std::vector<Message> kConversation = {
    {"system", "You tell short stories."},
    {"user", "Tell me about Lily and her dog \xF0\x9F\x99\x82 in the park."},
    {"assistant", "Lily had a big dog."},
    {"user", "What did they do?"},
};

class ChatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HEARTH_REQUIRE_SHARED();
    const std::string path = stories_path().string();
    HEARTH_START_SERVER(
        server_,
        server_args({"--model", "stories=" + path, "--model", "strict=" + path, "--model",
                     "plain=" + path, "--model", "tooled=" + path, "--chat-template",
                     "stories=" + kZephyr.string(), "--chat-template",
                     "strict=" + kMistral.string(), "--chat-template", "tooled=" + kQwen.string(),
                     "--instances", "1", "--kv-cache", "float"}));
    stub_ = make_stub(plain_channel(server_.grpc_address()));
  }

  // Chat on `messages` equals Generate on jinja2's rendering of them.
  void expect_chat_is_generate_on_the_rendering(const std::vector<Message>& messages,
                                                bool add_generation_prompt) {
    const std::string prompt = jinja2_render(kZephyr, messages, add_generation_prompt);
    ASSERT_FALSE(prompt.empty());
    v1::ChatRequest req = chat_request("stories", messages);
    req.set_add_generation_prompt(add_generation_prompt);
    const StreamResult got = chat(*stub_, req);
    ASSERT_TRUE(got.status.ok()) << status_text(got.status);
    ASSERT_EQ(got.dones.size(), 1u);

    const StreamResult want = generate(*stub_, generate_on_rendering("stories", prompt));
    ASSERT_TRUE(want.status.ok()) << status_text(want.status);
    EXPECT_EQ(prompt_ids(got.dones[0]), prompt_ids(want.dones[0]));
    EXPECT_EQ(got.ids(), want.ids());
    EXPECT_EQ(got.text(), want.text());
    // The template's markers became special tokens: "</s>" is one token.
    const auto ids = prompt_ids(got.dones[0]);
    EXPECT_GE(std::count(ids.begin(), ids.end(), 2), 1) << "no </s> token in the prompt";
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 1) << "exactly one BOS";

    v1::CompleteResponse unary;
    grpc::ClientContext ctx;
    set_deadline(ctx);
    const grpc::Status st = stub_->ChatComplete(&ctx, req, &unary);
    ASSERT_TRUE(st.ok()) << status_text(st);
    EXPECT_EQ(unary.text(), got.text());
    EXPECT_EQ(std::vector<std::int32_t>(unary.token_ids().begin(), unary.token_ids().end()),
              got.ids());
  }

  ServerProcess server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

TEST_F(ChatTest, ReplyIsGenerateOnTheTemplateRenderedAsJinja2Does) {
  expect_chat_is_generate_on_the_rendering(kConversation, true);
}

TEST_F(ChatTest, WithoutTheGenerationPrompt) {
  const std::string with = jinja2_render(kZephyr, kConversation, true);
  const std::string without = jinja2_render(kZephyr, kConversation, false);
  EXPECT_NE(with, without);
  expect_chat_is_generate_on_the_rendering(kConversation, false);
}

TEST_F(ChatTest, LogprobsAndSamplingOptionsApply) {
  v1::ChatRequest req = chat_request("stories", {{"user", "Hello"}});
  req.set_logprobs(true);
  req.set_top_logprobs(2);
  req.mutable_sampling()->set_temperature(0.8f);
  req.mutable_sampling()->set_seed(5);
  req.add_stop("zzzz");
  const StreamResult a = chat(*stub_, req);
  ASSERT_TRUE(a.status.ok()) << status_text(a.status);
  for (const v1::Piece& p : a.pieces) {
    if (p.token_id() < 0) continue;
    ASSERT_TRUE(p.has_logprobs());
    EXPECT_EQ(p.logprobs().top_size(), 2);
  }
  const StreamResult b = chat(*stub_, req);
  EXPECT_EQ(a.ids(), b.ids()) << "the same seed draws the same tokens";
  EXPECT_EQ(a.ids().size(), 16u);
}

TEST_F(ChatTest, TemplateRefusalIsInvalidArgumentWithItsMessage) {
  const StreamResult r = chat(*stub_, chat_request("strict", {{"user", "a"}, {"user", "b"}}));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status_text(r.status);
  EXPECT_NE(r.status.error_message().find("Conversation roles must alternate"), std::string::npos)
      << status_text(r.status);
  EXPECT_TRUE(r.pieces.empty());
  // The same conversation in turns is accepted.
  const StreamResult ok =
      chat(*stub_, chat_request("strict", {{"user", "a"}, {"assistant", "b"}, {"user", "c"}}));
  EXPECT_TRUE(ok.status.ok()) << status_text(ok.status);
}

// A chat request has no prompt field: a conversation too long for the
// context is refused naming messages (the OpenAI front end adds its code
// context_length_exceeded).
TEST_F(ChatTest, AConversationLongerThanTheContextNamesMessages) {
  std::string words;
  for (int i = 0; i < 3000; ++i) words += "Lily ran. ";
  const StreamResult r = chat(*stub_, chat_request("stories", {{"user", words}}));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status_text(r.status);
  EXPECT_TRUE(r.status.error_message().starts_with(
      "messages: the conversation as its chat template renders it: "))
      << status_text(r.status);
  EXPECT_NE(r.status.error_message().find("fit the context of"), std::string::npos)
      << status_text(r.status);
}

TEST_F(ChatTest, ModelWithoutTemplateIsFailedPreconditionNamingIt) {
  const StreamResult r = chat(*stub_, chat_request("plain", {{"user", "hi"}}));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status_text(r.status);
  EXPECT_NE(r.status.error_message().find("'plain'"), std::string::npos) << status_text(r.status);
  EXPECT_NE(r.status.error_message().find("chat template"), std::string::npos);
  // Generate still serves it.
  EXPECT_TRUE(generate(*stub_, make_request("plain", "Once", 4)).status.ok());
}

TEST_F(ChatTest, BadFieldsAreInvalidArgumentNamingThem) {
  struct Case {
    const char* what;
    v1::ChatRequest req;
    const char* field;
  };
  std::vector<Case> cases;
  cases.push_back({"no messages", chat_request("stories", {}), "messages"});
  cases.push_back({"empty role", chat_request("stories", {{"", "x"}}), "messages[0].role"});
  v1::ChatRequest tools = chat_request("stories", {{"user", "x"}});
  tools.set_tools("[{\"type\": ");
  cases.push_back({"tools not JSON", tools, "tools: not valid JSON"});
  tools.set_tools("{}");
  cases.push_back({"tools not a list", tools, "tools: must be a JSON array"});
  // A million levels (2 MB) would overflow the handler's stack when the
  // parsed list is copied into the template's context.
  tools.set_tools(std::string(1000000, '[') + std::string(1000000, ']'));
  cases.push_back({"tools nested deep", tools, "tools: nested deeper than 512 levels"});
  v1::ChatRequest kwargs = chat_request("stories", {{"user", "x"}});
  kwargs.set_template_kwargs("[1]");
  cases.push_back({"kwargs not an object", kwargs, "template_kwargs"});
  v1::ChatRequest reserved = chat_request("stories", {{"user", "x"}});
  reserved.set_template_kwargs(R"({"tools": [{"type": "function"}]})");
  cases.push_back(
      {"kwargs naming tools", reserved, "template_kwargs: 'tools' is a name the server"});
  v1::ChatRequest calls = chat_request("stories", {{"user", "x"}, {"assistant", ""}});
  calls.mutable_messages(1)->set_tool_calls("not json");
  cases.push_back({"tool_calls not JSON", calls, "messages[1].tool_calls"});
  v1::ChatRequest top = chat_request("stories", {{"user", "x"}});
  top.set_top_logprobs(3);
  cases.push_back({"top_logprobs without logprobs", top, "top_logprobs"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const StreamResult r = chat(*stub_, c.req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status_text(r.status);
    EXPECT_NE(r.status.error_message().find(c.field), std::string::npos) << status_text(r.status);
  }
  const StreamResult unknown = chat(*stub_, chat_request("nope", {{"user", "x"}}));
  EXPECT_EQ(unknown.status.error_code(), grpc::StatusCode::NOT_FOUND);
}

// Tools reach the model only through its template. A template that never
// reads them would drop them without a word, so they are refused naming the
// field; a template that reads them puts them in the prompt; an empty list
// is no tools.
TEST_F(ChatTest, ToolsTheTemplateDoesNotReadAreRefused) {
  v1::ChatRequest zephyr = chat_request("stories", {{"user", "Weather in Paris?"}});
  zephyr.set_tools(kWeatherTool);
  const StreamResult refused = chat(*stub_, zephyr);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << status_text(refused.status);
  EXPECT_NE(refused.status.error_message().find(
                "tools: the chat template of model 'stories' does not render them"),
            std::string::npos)
      << status_text(refused.status);
  EXPECT_TRUE(refused.pieces.empty());
  zephyr.set_tools("[]");
  const StreamResult none = chat(*stub_, zephyr);
  EXPECT_TRUE(none.status.ok()) << status_text(none.status);

  v1::ChatRequest qwen = chat_request("tooled", {{"user", "Weather in Paris?"}});
  const StreamResult without = chat(*stub_, qwen);
  qwen.set_tools(kWeatherTool);
  const StreamResult with = chat(*stub_, qwen);
  ASSERT_TRUE(without.status.ok()) << status_text(without.status);
  ASSERT_TRUE(with.status.ok()) << status_text(with.status);
  ASSERT_EQ(without.dones.size(), 1u);
  ASSERT_EQ(with.dones.size(), 1u);
  // The tool's description is in the prompt: more tokens than without it.
  EXPECT_GT(prompt_ids(with.dones[0]).size(), prompt_ids(without.dones[0]).size() + 20);
}

// `hearth chat`: one message, and a conversation on stdin whose history
// goes with every turn (the second turn's prompt holds the first exchange).
TEST_F(ChatTest, CliChatsOnceAndInteractivelyKeepingTheHistory) {
  const std::vector<std::string> common = {"--server", server_.grpc_address(), "chat", "--model",
                                           "stories",  "--max-tokens",         "8"};
  std::vector<std::string> once = common;
  once.insert(once.end(), {"--message", "Hello"});
  const ProcessResult one = run_process(HEARTH_CLI_BIN, once);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  v1::CompleteResponse unary;
  grpc::ClientContext ctx;
  set_deadline(ctx);
  v1::ChatRequest req = chat_request("stories", {{"user", "Hello"}});
  req.set_max_tokens(8);
  req.set_ignore_eos(false);
  ASSERT_TRUE(stub_->ChatComplete(&ctx, req, &unary).ok());
  EXPECT_EQ(one.out, unary.text() + "\n");

  const ProcessResult talk = run_process(HEARTH_CLI_BIN, common, "Hello\n\nWhat next?\n/exit\n");
  ASSERT_EQ(talk.exit_code, 0) << talk.err;
  std::vector<std::pair<int, int>> turns;  // prompt, generated tokens
  for (std::size_t at = 0; (at = talk.err.find("| prompt ", at)) != std::string::npos; ++at) {
    int prompt = 0, generated = 0;
    ASSERT_EQ(
        std::sscanf(talk.err.c_str() + at, "| prompt %d tokens, generated %d", &prompt, &generated),
        2)
        << talk.err;
    turns.emplace_back(prompt, generated);
  }
  ASSERT_EQ(turns.size(), 2u) << talk.err;
  EXPECT_EQ(turns[0].first, static_cast<int>(unary.done().usage().prompt_tokens()));
  EXPECT_GT(turns[1].first, turns[0].first + turns[0].second)
      << "the second turn's prompt holds the first exchange";
  EXPECT_EQ(talk.out.substr(0, one.out.size()), one.out);
}

// A file with a second template for requests with tools
// (tokenizer.chat_template.tool_use, as Hermes 2 Pro's GGUF carries) serves
// them with it, and every other request with its first template.
class ChatToolUseTest : public TempDirTest {};

TEST_F(ChatToolUseTest, TheFilesToolUseTemplateServesRequestsWithTools) {
  HEARTH_REQUIRE_SHARED();
  auto src = engine::GgufFile::open(stories_path().string());
  ASSERT_TRUE(src.ok()) << src.status();
  const std::string zephyr = read_file(kZephyr), qwen = read_file(kQwen);
  const fs::path file = dir_ / "tool-use.gguf";
  write_file(file, rewrite(
                       **src,
                       [&](const engine::GgufKv& kv, engine::GgufWriter& w) {
                         if (kv.key != "general.architecture") return false;
                         w.add_value(kv.key, kv.value);
                         w.add_string("tokenizer.chat_template", zephyr);
                         w.add_string("tokenizer.chat_template.tool_use", qwen);
                         return true;
                       },
                       nullptr));
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args({"--model", "m=" + file.string(), "--instances", "1",
                                           "--kv-cache", "float"}));
  auto stub = make_stub(plain_channel(server.grpc_address()));
  const std::vector<Message> messages = {{"user", "Weather in Paris?"}};

  // Without tools: the first template, as jinja2 renders it.
  v1::ChatRequest req = chat_request("m", messages);
  const StreamResult plain = chat(*stub, req);
  ASSERT_TRUE(plain.status.ok()) << status_text(plain.status);
  const std::string prompt = jinja2_render(kZephyr, messages, true);
  const StreamResult want = generate(*stub, generate_on_rendering("m", prompt));
  ASSERT_TRUE(want.status.ok()) << status_text(want.status);
  ASSERT_EQ(plain.dones.size(), 1u);
  ASSERT_EQ(want.dones.size(), 1u);
  EXPECT_EQ(prompt_ids(plain.dones[0]), prompt_ids(want.dones[0]));

  // With tools: the tool-use template (Zephyr's would refuse them).
  req.set_tools(kWeatherTool);
  const StreamResult with = chat(*stub, req);
  ASSERT_TRUE(with.status.ok()) << status_text(with.status);
  ASSERT_EQ(with.dones.size(), 1u);
  EXPECT_GT(prompt_ids(with.dones[0]).size(), prompt_ids(plain.dones[0]).size() + 20);
}

// A conversation that takes the template past its limits (here a string:
// the template repeats a message as many times as it has characters) is the
// request's problem: INVALID_ARGUMENT naming messages, not
// RESOURCE_EXHAUSTED, which HTTP maps to 429 and the OpenAI SDKs retry
// unchanged. (One string operation: a limit reached through millions of
// small outputs took minutes under TSan.)
TEST(ChatLimitsTest, AConversationBeyondTheTemplatesLimitsIsInvalidArgument) {
  HEARTH_REQUIRE_SHARED();
  const fs::path quadratic = scratch_dir() / "quadratic.jinja";
  std::ofstream(quadratic)
      << "{% for m in messages %}{{ m['content'] * (m['content'] | length) }}{% endfor %}";
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args({"--model", "s=" + stories_path().string(),
                                           "--chat-template", quadratic.string()}));
  auto stub = make_stub(plain_channel(server.grpc_address()));
  v1::ChatRequest small = chat_request("s", {{"user", "Once upon a time"}});
  small.set_max_tokens(2);
  EXPECT_TRUE(chat(*stub, small).status.ok());
  const StreamResult r = chat(*stub, chat_request("s", {{"user", std::string(3000, 'x')}}));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status_text(r.status);
  EXPECT_NE(r.status.error_message().find("messages: the conversation takes the chat template "
                                          "past its limits"),
            std::string::npos)
      << status_text(r.status);
}

TEST(ChatStartupTest, UnreadableOrBrokenTemplateFailsTheStartNamingTheFile) {
  HEARTH_REQUIRE_SHARED();
  const std::string path = stories_path().string();
  const std::string missing =
      (fs::temp_directory_path() / "hearth-no-such-template.jinja").string();
  std::string err;
  EXPECT_EQ(expect_startup_failure(
                server_args({"--model", "s=" + path, "--chat-template", missing}), &err),
            1)
      << err;
  EXPECT_NE(err.find(missing), std::string::npos) << err;
  const fs::path broken = fs::temp_directory_path() / ("hearth-broken-" + std::to_string(getpid()));
  {
    std::ofstream out(broken);
    out << "{% for m in messages %}{{ m.content }";
  }
  EXPECT_EQ(expect_startup_failure(
                server_args({"--model", "s=" + path, "--chat-template", broken.string()}), &err),
            1)
      << err;
  EXPECT_NE(err.find(broken.string()), std::string::npos) << err;
  fs::remove(broken);
}

}  // namespace
}  // namespace hearth::testing
