#include "server/conversation.h"

#include <ctime>
#include <optional>
#include <utility>

#include "base/json_shape.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "server/invalid_argument.h"

namespace hearth::server {

bool has_tools(const chat::ChatContext& conversation) {
  return conversation.tools && conversation.tools->is_array() && !conversation.tools->empty();
}

absl::Status as_messages_error(const absl::Status& s) {
  const std::string m(s.message());
  if (!m.starts_with("prompt: ")) return s;
  absl::Status renamed(
      s.code(),
      str_cat("messages: the conversation as its chat template renders it: ", m.substr(8)));
  s.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { renamed.SetPayload(url, payload); });
  return renamed;
}

bool parse_tool_call_arguments(nlohmann::ordered_json& messages) {
  bool changed = false;
  for (nlohmann::ordered_json& m : messages) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (nlohmann::ordered_json& call : m["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        continue;
      nlohmann::ordered_json& function = call["function"];
      if (!function.contains("arguments") || !function["arguments"].is_string()) continue;
      const std::string& text = function["arguments"].get_ref<const std::string&>();
      if (!json_shape_problem(text).empty()) continue;
      nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(text, nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object()) continue;
      function["arguments"] = std::move(parsed);
      changed = true;
    }
  }
  return changed;
}

// The prompt text of a conversation. Tools that the template does not render
// for this conversation are refused: the prompt would be the same without
// them, so the model would not know the tools exist. Both renderings read one
// clock, so a template that prints the date does not differ only by the
// second it ran in.
absl::StatusOr<std::string> render_conversation(const chat::ChatPrompt& prompt,
                                                chat::ChatContext context,
                                                const std::string& model) {
  // Every rendering reads one clock, so a template that prints the date
  // does not differ only by the second it ran in.
  if (!context.now_unix_seconds) context.now_unix_seconds = std::time(nullptr);
  // A conversation that takes the template past its limits (steps, output
  // bytes) is the request's to change, not a rate limit: RESOURCE_EXHAUSTED
  // would be HTTP 429, which the OpenAI SDKs retry unchanged.
  auto limits = [](const absl::Status& s) {
    return invalid(str_cat("messages: the conversation takes the chat template past its limits: ",
                           s.message()));
  };
  // Tool-call arguments as objects when the template renders them so;
  // otherwise (some join them into the prompt as text: DeepSeek-R1's) as
  // sent, whose error, if it fails too, is the one about the client's data.
  std::optional<absl::StatusOr<std::string>> text;
  chat::ChatContext parsed = context;
  if (parse_tool_call_arguments(parsed.messages)) {
    absl::StatusOr<std::string> as_objects = prompt.render(parsed);
    if (as_objects.status().code() == absl::StatusCode::kResourceExhausted)
      return limits(as_objects.status());  // the budget is spent once, not twice
    if (as_objects.ok()) {
      context = std::move(parsed);
      text = std::move(as_objects);
    }
  }
  if (!text) text = prompt.render(context);
  if (text->status().code() == absl::StatusCode::kResourceExhausted) return limits(text->status());
  if (!text->ok() || !has_tools(context)) return *std::move(text);
  // Tools the template does not render for this conversation are refused:
  // the prompt would be the same without them, so the model would not know
  // the tools exist.
  context.tools.reset();
  const absl::StatusOr<std::string> without = prompt.render(context);
  if (without.ok() && *without == **text)
    return invalid(str_cat("tools: the chat template of model '", model,
                           "' does not render them for this conversation (the prompt is the "
                           "same without them); serve the model with a template that does "
                           "(--chat-template)"));
  return *std::move(text);
}

}  // namespace hearth::server
