// server/conversation.h in-process: a Chat call's prompt text from the
// model's template, as every front end gets it.
#include "server/conversation.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/sequence.h"

namespace hearth::server {
namespace {

using Json = nlohmann::ordered_json;

chat::ChatPrompt prompt_of(std::string_view source) {
  absl::StatusOr<chat::ChatPrompt> p = chat::ChatPrompt::create(source, "test", "<s>", "</s>");
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

// An assistant turn that called a tool, its arguments as OpenAI sends them.
chat::ChatContext replayed_call() {
  chat::ChatContext c;
  c.messages = Json::parse(R"([
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"id": "c1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}])");
  return c;
}

// Templates that print the arguments with tojson get the object (the text
// would be quoted a second time); one that joins them as text (DeepSeek-R1's
// form) gets the text as sent instead of a type error.
TEST(Conversation, ToolCallArgumentsGoAsObjectsUnlessTheTemplateJoinsText) {
  const chat::ChatPrompt tojson = prompt_of(
      "{% for m in messages %}{% for c in m.tool_calls or [] %}"
      "{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}");
  absl::StatusOr<std::string> text = render_conversation(tojson, replayed_call(), "m");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, R"({"city": "Paris"})");

  const chat::ChatPrompt joined = prompt_of(
      "{% for m in messages %}{% for c in m.tool_calls or [] %}"
      "{{ 'args: ' + c.function.arguments }}{% endfor %}{% endfor %}");
  text = render_conversation(joined, replayed_call(), "m");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, R"(args: {"city": "Paris"})");

  // When the text form fails too, its error is the one the client sees (about
  // what it sent), not the objects' type error.
  const chat::ChatPrompt joined_then_refused = prompt_of(
      "{% for m in messages %}{% for c in m.tool_calls or [] %}"
      "{{ 'args: ' + c.function.arguments }}{% endfor %}{% endfor %}"
      "{{ raise_exception('roles must alternate') }}");
  text = render_conversation(joined_then_refused, replayed_call(), "m");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(text.status().message().find("roles must alternate"), std::string::npos)
      << text.status();

  // Text that is not an object's JSON stays text.
  Json messages = replayed_call().messages;
  messages[1]["tool_calls"][0]["function"]["arguments"] = "[1, 2";
  EXPECT_FALSE(parse_tool_call_arguments(messages));
  EXPECT_EQ(messages[1]["tool_calls"][0]["function"]["arguments"], "[1, 2");
}

TEST(Conversation, TemplateErrorsAndUnrenderedToolsAreRefused) {
  chat::ChatContext c;
  c.messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  const chat::ChatPrompt failing = prompt_of("{{ raise_exception('roles must alternate') }}");
  absl::StatusOr<std::string> text = render_conversation(failing, c, "m");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(text.status().message().find("roles must alternate"), std::string::npos);

  c.tools = Json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  const chat::ChatPrompt plain = prompt_of("{% for m in messages %}{{ m.content }}{% endfor %}");
  text = render_conversation(plain, c, "m");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(text.status().message().find("tools: the chat template of model 'm' does not render"),
            std::string::npos)
      << text.status();
}

// Errors about the prompt name messages in a chat call, keeping the mark
// that the OpenAI front end turns into context_length_exceeded.
TEST(Conversation, PromptErrorsNameMessages) {
  const absl::Status renamed =
      as_messages_error(engine::context_length_exceeded("prompt: 9 tokens do not fit"));
  EXPECT_EQ(renamed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(renamed.message(),
            "messages: the conversation as its chat template renders it: 9 tokens do not fit");
  EXPECT_TRUE(engine::is_context_length_exceeded(renamed));
  const absl::Status other = absl::InvalidArgumentError("sampling.top_p: bad");
  EXPECT_EQ(as_messages_error(other), other);
}

}  // namespace
}  // namespace hearth::server
