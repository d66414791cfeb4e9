// server/openai_api.h: request bodies mapped to the request path's values,
// refusals naming the field, the response objects and events, and the
// error objects with their HTTP statuses. No server, no model.
#include "server/openai_api.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/sequence.h"
#include "grammar/matcher.h"
#include "nlohmann/json.hpp"
#include "server/model_registry.h"

namespace hearth::server::openai {
namespace {

using Json = nlohmann::ordered_json;
constexpr std::size_t kLimit = 4096;

absl::StatusOr<Request> completion(const std::string& body) {
  return parse_request(Endpoint::kCompletions, body, kLimit, 99);
}
absl::StatusOr<Request> chat(const std::string& body) {
  return parse_request(Endpoint::kChatCompletions, body, kLimit, 99);
}

// The refusal's message, or a note that there was none.
std::string refusal(const absl::StatusOr<Request>& r) {
  if (r.ok()) return "(accepted)";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  return std::string(r.status().message());
}

TEST(OpenAiRequest, CompletionMapsEveryField) {
  absl::StatusOr<Request> r = completion(R"({
    "model": "m", "prompt": "Once", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    "seed": 12, "stop": ["\n", "."], "presence_penalty": 0.25, "frequency_penalty": -0.5,
    "logprobs": 3, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
    "ignore_eos": true, "cache_prompt": false, "n": 1, "user": "u"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(r->generate.method, "Complete");
  EXPECT_EQ(r->generate.model, "m");
  EXPECT_FALSE(r->generate.reuse_prefix);
  const engine::GenerationRequest& g = r->generate.request;
  EXPECT_EQ(g.prompt, "Once");
  EXPECT_EQ(g.max_tokens, 7u);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_EQ(g.sampling.seed, 12u);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"\n", "."}));
  EXPECT_FLOAT_EQ(g.sampling.presence_penalty, 0.25f);
  EXPECT_FLOAT_EQ(g.sampling.frequency_penalty, -0.5f);
  EXPECT_TRUE(g.logprobs);
  EXPECT_EQ(g.top_logprobs, 3u);
  EXPECT_EQ(g.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(g.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(g.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(g.ignore_eos);
}

// llama.cpp's names for the repetition penalty and its window are read too.
TEST(OpenAiRequest, LlamaCppsRepeatPenaltyAndWindowAreRead) {
  absl::StatusOr<Request> r =
      completion(R"({"model": "m", "prompt": "x", "repeat_penalty": 1.3, "repeat_last_n": 128})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->generate.request.sampling.repetition_penalty, 1.3f);
  EXPECT_EQ(r->generate.request.sampling.penalty_last_n, 128);
  const std::string m = R"("model": "m", "prompt": "x")";
  EXPECT_EQ(refusal(completion("{" + m + R"(, "repeat_penalty": 1.3, "repetition_penalty": 1.1})")),
            "repeat_penalty: give repetition_penalty or repeat_penalty, not both");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "repeat_penalty": 0})")),
            "repeat_penalty: 0 is out of range: allowed (0, 10]");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "repeat_last_n": -1})")),
            "repeat_last_n: -1 is out of range: allowed [0, 4096]");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "repeat_last_n": 1.5})")),
            "repeat_last_n: must be an integer");
}

TEST(OpenAiRequest, DefaultsAreOpenAis) {
  absl::StatusOr<Request> c = completion(R"({"model": "m", "prompt": ["one prompt"]})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->generate.request.prompt, "one prompt");
  EXPECT_EQ(c->generate.request.max_tokens, 16u);
  EXPECT_FLOAT_EQ(c->generate.request.sampling.temperature, 1.0f);
  EXPECT_EQ(c->generate.request.sampling.seed, 99u);  // the caller's default seed
  // -1 is llama.cpp's "random seed": the default too; other values as given.
  absl::StatusOr<Request> random = completion(R"({"model": "m", "prompt": "x", "seed": -1})");
  ASSERT_TRUE(random.ok()) << random.status();
  EXPECT_EQ(random->generate.request.sampling.seed, 99u);
  absl::StatusOr<Request> minus_two = completion(R"({"model": "m", "prompt": "x", "seed": -2})");
  ASSERT_TRUE(minus_two.ok()) << minus_two.status();
  EXPECT_EQ(minus_two->generate.request.sampling.seed, static_cast<std::uint64_t>(-2));
  EXPECT_FALSE(c->generate.request.logprobs);
  EXPECT_TRUE(c->generate.reuse_prefix);

  absl::StatusOr<Request> h =
      chat(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                       "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->chat.method, "Chat");
  EXPECT_EQ(h->chat.request.max_tokens, kLimit);
  EXPECT_TRUE(h->chat.conversation.add_generation_prompt);
  EXPECT_TRUE(h->stream);
  EXPECT_TRUE(h->include_usage);
}

TEST(OpenAiRequest, ChatMessagesReachTheTemplateAsGiven) {
  absl::StatusOr<Request> r = chat(R"({"model": "m", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null,
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"}],
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 2,
    "add_generation_prompt": false, "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const chat::ChatContext& c = r->chat.conversation;
  ASSERT_EQ(c.messages.size(), 4u);
  EXPECT_EQ(c.messages[1]["content"], "ab");
  EXPECT_EQ(c.messages[2]["content"], "");
  EXPECT_EQ(c.messages[2]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(c.messages[2]["tool_calls"][0]["function"]["arguments"], "{}");
  EXPECT_EQ(c.messages[3]["tool_call_id"], "c1");
  EXPECT_EQ(c.messages[3]["name"], "f");
  ASSERT_TRUE(c.tools.has_value());
  EXPECT_EQ((*c.tools)[0]["function"]["name"], "f");
  EXPECT_FALSE(c.add_generation_prompt);
  EXPECT_EQ(c.extra["enable_thinking"], false);
  EXPECT_EQ(r->chat.method, "ChatComplete");
  EXPECT_EQ(r->chat.request.max_tokens, 9u);
  EXPECT_TRUE(r->chat.request.logprobs);
  EXPECT_EQ(r->chat.request.top_logprobs, 2u);
}

// tool_choice "auto" (the default) offers the tools, "none" leaves them out
// of the prompt; forcing a call, and the older `functions`, are refused
// rather than ignored.
TEST(OpenAiRequest, ToolChoiceAutoOffersToolsNoneLeavesThemOut) {
  const std::string head = R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}])";
  absl::StatusOr<Request> automatic = chat(head + R"(, "tool_choice": "auto"})");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_TRUE(automatic->chat.conversation.tools.has_value());
  absl::StatusOr<Request> none = chat(head + R"(, "tool_choice": "none"})");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->chat.conversation.tools.has_value());
  EXPECT_EQ(refusal(chat(head + R"(, "tool_choice": "required"})")),
            R"(tool_choice: "required" is not supported (only "auto" and "none"))");
  EXPECT_EQ(
      refusal(chat(head + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}})")),
      R"(tool_choice: {"type":"function","function":{"name":"f"}} is not supported (only "auto" and "none"))");
  EXPECT_EQ(refusal(chat(head + R"(, "functions": [{"name": "f"}]})")),
            "functions: not supported (OpenAI's older form; send tools)");
}

TEST(OpenAiRequest, ResponseFormatsCompileToGrammars) {
  absl::StatusOr<Request> any =
      chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                         "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(any.ok()) << any.status();
  ASSERT_NE(any->chat.request.grammar, nullptr);
  // JSON mode is an object, not any JSON value.
  grammar::Matcher json_mode(any->chat.request.grammar);
  EXPECT_TRUE(json_mode.can_accept(R"({"a": [1, "x"]})"));
  EXPECT_FALSE(json_mode.can_accept(R"("a string")"));
  EXPECT_FALSE(json_mode.can_accept("[1]"));
  absl::StatusOr<Request> schema =
      chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true,
        "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  EXPECT_NE(schema->chat.request.grammar, nullptr);
  absl::StatusOr<Request> text =
      completion(R"({"model": "m", "prompt": "x", "response_format": {"type": "text"}})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->generate.request.grammar, nullptr);
}

// "developer" is OpenAI's newer name for "system", the role templates know
// (they dropped it silently); roles OpenAI does not have are refused.
TEST(OpenAiRequest, DeveloperIsSystemAndUnknownRolesAreRefused) {
  absl::StatusOr<Request> r = chat(R"({"model": "m", "messages": [
      {"role": "developer", "content": "Be a pirate."}, {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "",
       "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1, 2"}}]}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chat.conversation.messages[0]["role"], "system");
  EXPECT_EQ(refusal(chat(R"({"model": "m", "messages": [{"role": "bogus", "content": "x"}]})")),
            "messages[0].role: 'bogus' is not one of system, developer, user, assistant, tool");
  EXPECT_EQ(refusal(chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                             "modalities": ["text", "audio"]})")),
            "modalities[1]: only \"text\" is supported");
  EXPECT_EQ(refusal(chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                             "audio": {"voice": "alloy", "format": "wav"}})")),
            "audio: not supported (text output only)");
}

TEST(OpenAiRequest, RefusalsNameTheField) {
  const std::string m = R"("model": "m", "prompt": "x")";
  EXPECT_EQ(refusal(completion("{")), "request body: not valid JSON (byte 2)");
  EXPECT_EQ(refusal(completion("{\"prompt\": \"\xff\"}")),
            "request body: not valid UTF-8 (byte 12)");
  EXPECT_EQ(refusal(completion("[1]")), "request body: must be a JSON object");
  EXPECT_TRUE(
      refusal(completion(R"({"model": 1e999})")).starts_with("request body: not valid JSON"))
      << "a number beyond a double's range (found by openai_request_fuzz)";
  EXPECT_EQ(refusal(completion(R"({"prompt": "x"})")),
            "model: missing (GET /v1/models lists them)");
  EXPECT_EQ(refusal(completion(R"({"model": "m"})")), "prompt: missing");
  EXPECT_EQ(refusal(completion(R"({"model": "m", "prompt": ["a", "b"]})")),
            "prompt: an array of 2 prompts is not supported (send one string)");
  EXPECT_EQ(refusal(completion(R"({"model": "m", "prompt": [1, 2]})")),
            "prompt: token ids are not supported (send the prompt as one string)");
  EXPECT_EQ(refusal(completion(R"({"model": "m", "prompt": [-1]})")),
            "prompt: token ids are not supported (send the prompt as one string)");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "temperature": "hot"})")),
            "temperature: must be a number");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "temperature": 1e308})")),
            "temperature: 1e+308 is out of range");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "top_p": -1e39})")), "top_p: -1e+39 is out of range");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "max_tokens": 0})")),
            "max_tokens: 0 is out of range: allowed [1, 4096]");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "max_tokens": 5000})")),
            "max_tokens: 5000 is out of range: allowed [1, 4096]");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "max_tokens": 1.5})")),
            "max_tokens: must be an integer");
  // Past INT64_MAX: refused, where it wrapped to -1 (a random seed, for seed).
  EXPECT_EQ(refusal(completion("{" + m + R"(, "seed": 18446744073709551615})")),
            "seed: 18446744073709551615 is too large");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "max_tokens": 9223372036854775808})")),
            "max_tokens: 9223372036854775808 is too large");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "n": 2})")), "n: 2 is not supported (only 1)");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "echo": true})")), "echo: true is not supported");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "logit_bias": {"1": 5}})")),
            "logit_bias: not supported");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "logprobs": 21})")),
            "logprobs: 21 is out of range: allowed [0, 20]");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "stop": ["a", 3]})")), "stop[1]: must be a string");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "stream_options": {"include_usage": true}})")),
            "stream_options.include_usage: only with stream: true");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "response_format": {"type": "xml"}})")),
            "response_format.type: 'xml' is not text, json_object or json_schema");
  // Nested fields are named by their path (found by openai_request_fuzz).
  EXPECT_EQ(refusal(completion("{" + m + R"(, "response_format": {"type": 1}})")),
            "response_format.type: must be a string");
  EXPECT_EQ(refusal(completion("{" + m + R"(, "stream": true,
                                            "stream_options": {"include_usage": 1}})")),
            "stream_options.include_usage: must be true or false");
  EXPECT_EQ(refusal(chat(R"({"model": "m", "messages": [{"role": 1, "content": "x"}]})")),
            "messages[0].role: must be a string");
  EXPECT_EQ(refusal(chat(R"({"model": "m", "messages": [{"role": "user", "content": "x",
                                                          "name": 2}]})")),
            "messages[0].name: must be a string");
  EXPECT_EQ(refusal(chat(R"({"model": "m", "messages": [{"role": "user", "content": "x",
                                                          "tool_call_id": []}]})")),
            "messages[0].tool_call_id: must be a string");
  EXPECT_EQ(refusal(chat(R"({"model": "m", "messages": [{"role": "user", "content":
                              [{"type": "text", "text": 3}]}]})")),
            "messages[0].content[0].text: must be a string");
  EXPECT_EQ(refusal(chat(R"({"model": "m", "messages": [{"role": "user", "content":
                              [{"type": false}]}]})")),
            "messages[0].content[0].type: must be a string");
  EXPECT_EQ(refusal(chat(R"({"model": "m", "messages": []})")),
            "messages: must be a non-empty array");
  EXPECT_EQ(refusal(chat(R"({"model": "m", "messages": [{"content": "x"}]})")),
            "messages[0].role: must not be empty");
  EXPECT_EQ(refusal(chat(R"({"model": "m", "messages": [{"role": "user", "content":
                              [{"type": "image_url", "image_url": {"url": "x"}}]}]})")),
            "messages[0].content[0].type: 'image_url' is not supported (only text)");
  EXPECT_EQ(refusal(chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                             "top_logprobs": 30})")),
            "top_logprobs: 30 is out of range: allowed [0, 20]");
  // Template variables may not replace what the server sets or the template
  // functions (tools past the server's checks, a silenced raise_exception).
  for (const char* name : {"tools", "messages", "add_generation_prompt", "bos_token",
                           "raise_exception", "strftime_now", "namespace"}) {
    EXPECT_EQ(refusal(chat(std::string(R"({"model": "m", "messages": [{"role": "user",
                              "content": "x"}], "chat_template_kwargs": {")") +
                           name + R"(": 1}})")),
              std::string("chat_template_kwargs.") + name +
                  ": the server sets this name itself (send messages, tools and "
                  "add_generation_prompt as the request's own fields)");
  }
}

// A body nested past kMaxRequestJsonNesting is refused before it is parsed:
// copying or printing a million levels (2 MB of brackets, in a schema or a
// tool list) recursed until the handler's stack ran out. Brackets inside
// strings do not count.
TEST(OpenAiRequest, DeeplyNestedBodiesAreRefusedBeforeTheyAreParsed) {
  const auto nested = [](std::size_t levels) {
    return R"({"model": "m", "prompt": "x", "response_format": {"type": "json_schema",
      "json_schema": {"name": "p", "schema": )" +
           std::string(levels, '[') + std::string(levels, ']') + "}}}";
  };
  EXPECT_EQ(refusal(completion(nested(1000000))), "request body: nested deeper than 512 levels");
  // Three levels wrap the schema: 512 in all pass this check (the schema's
  // own limit, 256 levels, is the grammar's).
  EXPECT_EQ(refusal(completion(nested(509))),
            "response_format.json_schema: schema #: nested deeper than 256 levels");
  EXPECT_EQ(refusal(completion(nested(510))), "request body: nested deeper than 512 levels");
  const std::string brackets_in_text = std::string(1000, '[') + std::string(1000, '{');
  absl::StatusOr<Request> text =
      completion(R"({"model": "m", "prompt": ")" + brackets_in_text + R"(\"["})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->generate.request.prompt, brackets_in_text + "\"[");
}

// An object of more than kMaxRequestJsonMembers members is refused before it
// is parsed: nlohmann's ordered objects look each new key up among the keys
// before it, so 350k members (a 4 MB body) took minutes. Commas in strings
// and in arrays do not count.
TEST(OpenAiRequest, ObjectsOfTooManyMembersAreRefusedBeforeTheyAreParsed) {
  const auto with_members = [](std::size_t n) {
    std::string body = R"({"model": "m", "prompt": "a, b, c", "metadata": {)";
    for (std::size_t i = 0; i < n; ++i) body += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": 0";
    return body + R"(}, "stop": [",", ",", ","]})";
  };
  EXPECT_EQ(refusal(completion(with_members(350000))),
            "request body: an object with more than 4096 members");
  EXPECT_EQ(refusal(completion(with_members(4097))),
            "request body: an object with more than 4096 members");
  EXPECT_TRUE(completion(with_members(4096)).ok());
}

// OpenAI's top_p is in [0, 1]; 0 keeps the most likely token alone.
TEST(OpenAiRequest, TopPZeroKeepsTheMostLikelyToken) {
  absl::StatusOr<Request> r = completion(R"({"model": "m", "prompt": "x", "top_p": 0})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->generate.request.sampling.top_p, 1.0f);
  EXPECT_EQ(r->generate.request.sampling.top_k, 1);
}

TEST(OpenAiResponse, UnaryChatCarriesTextLogprobsAndUsage) {
  ResponseBuilder b({Endpoint::kChatCompletions, "chatcmpl-1", 1700000000, "m"});
  b.add_piece("Hel", 5, nullptr);
  b.add_piece("lo", -1, nullptr);
  GenerateOutcome o;
  o.finish = engine::FinishReason::kMaxTokens;
  o.prompt_ids = {1, 2, 3};
  o.generated_tokens = 2;
  o.cached_tokens = 1;
  const Json j = Json::parse(b.finish(o));
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
}

TEST(OpenAiResponse, EventsAreFramedChunks) {
  const ResponseHead head{Endpoint::kCompletions, "cmpl-1", 5, "m"};
  const std::string e = piece_event(head, "a\"b", Json::array());
  ASSERT_TRUE(e.starts_with("data: ") && e.ends_with("\n\n")) << e;
  const Json j = Json::parse(e.substr(6));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "a\"b");
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(piece_event(head, "", Json::array()), "");  // nothing to send

  GenerateOutcome o;
  o.finish = engine::FinishReason::kStopString;
  const Json fin = Json::parse(finish_event(head, o).substr(6));
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
  const Json usage = Json::parse(usage_event(head, o).substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 0);

  const ResponseHead chat_head{Endpoint::kChatCompletions, "chatcmpl-1", 5, "m"};
  const Json role = Json::parse(role_event(chat_head).substr(6));
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  const Json piece = Json::parse(piece_event(chat_head, "x", Json::array()).substr(6));
  EXPECT_EQ(piece["choices"][0]["delta"]["content"], "x");
  EXPECT_FALSE(piece.contains("usage"));
  // With stream_options.include_usage every chunk carries usage: null but
  // the last, which holds the counts.
  ResponseHead usage_head = chat_head;
  usage_head.usage_in_chunks = true;
  const Json with_null = Json::parse(piece_event(usage_head, "x", Json::array()).substr(6));
  ASSERT_TRUE(with_null.contains("usage"));
  EXPECT_TRUE(with_null["usage"].is_null());
  EXPECT_TRUE(Json::parse(finish_event(usage_head, o).substr(6))["usage"].is_null());
  EXPECT_EQ(Json::parse(usage_event(usage_head, o).substr(6))["usage"]["total_tokens"], 0);
}

// A model that failed to load (--keep-going) is the server's fault and lasts
// until a restart: 500, not a 400 blaming the request or a retried 429.
TEST(OpenAiError, AModelThatFailedToLoadIs500) {
  ModelSpec broken;
  broken.name = "broken";
  broken.path = "/nonexistent/broken.gguf";
  ModelRegistry registry({broken});
  EXPECT_FALSE(registry.load_all(nullptr, /*keep_going=*/true, nullptr).ok());
  const absl::StatusOr<ModelPool*> found = registry.find("broken");
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), absl::StatusCode::kFailedPrecondition) << found.status();
  EXPECT_TRUE(is_model_load_failure(found.status()));
  EXPECT_EQ(http_status(found.status(), false), 500);
  EXPECT_EQ(http_status(absl::FailedPreconditionError("no chat template"), false), 400);
}

TEST(OpenAiError, StatusesAndBodies) {
  EXPECT_EQ(http_status(absl::InvalidArgumentError("x"), false), 400);
  EXPECT_EQ(http_status(absl::FailedPreconditionError("x"), false), 400);
  EXPECT_EQ(http_status(absl::UnauthenticatedError("x"), false), 401);
  EXPECT_EQ(http_status(absl::NotFoundError("x"), false), 404);
  EXPECT_EQ(http_status(absl::UnavailableError("x"), false), 429);
  EXPECT_EQ(http_status(absl::UnavailableError("x"), true), 503);
  EXPECT_EQ(http_status(absl::DeadlineExceededError("x"), false), 504);
  EXPECT_EQ(http_status(absl::InternalError("x"), false), 500);

  const Json bad = Json::parse(
      error_body(absl::InvalidArgumentError("sampling.top_p = 2 is out of range"), false));
  EXPECT_EQ(bad["error"]["message"], "top_p = 2 is out of range");
  EXPECT_EQ(bad["error"]["type"], "invalid_request_error");
  EXPECT_EQ(bad["error"]["param"], "top_p");
  const Json field = Json::parse(
      error_body(absl::InvalidArgumentError("messages[2].role: must not be empty"), false));
  EXPECT_EQ(field["error"]["param"], "messages[2].role");
  const Json body = Json::parse(
      error_body(absl::InvalidArgumentError("request body: not valid JSON (byte 2)"), false));
  EXPECT_TRUE(body["error"]["param"].is_null());
  const Json missing =
      Json::parse(error_body(absl::NotFoundError("model: no model named 'x' is served"), false));
  EXPECT_EQ(missing["error"]["param"], "model");
  EXPECT_EQ(missing["error"]["code"], "model_not_found");
  const Json auth = Json::parse(error_body(absl::UnauthenticatedError("authorization: x"), false));
  EXPECT_EQ(auth["error"]["type"], "authentication_error");
  EXPECT_EQ(auth["error"]["code"], "invalid_api_key");
  // A prompt longer than the context: the code clients key on to trim history.
  const Json context = Json::parse(
      error_body(engine::context_length_exceeded("messages: 9113 tokens do not fit"), false));
  EXPECT_EQ(context["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(context["error"]["param"], "messages");
  // A chat template's refusal is about the conversation (it named "chat").
  const Json refused = Json::parse(error_body(
      absl::InvalidArgumentError("chat template (tokenizer.chat_template): roles must alternate"),
      false));
  EXPECT_EQ(refused["error"]["param"], "messages");
}

}  // namespace
}  // namespace hearth::server::openai
