#include "chat/chat_template.h"

#include <ctime>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/builtins.h"
#include "chat/json_value.h"
#include "chat/parser.h"

namespace hearth::chat {

absl::StatusOr<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  HEARTH_ASSIGN_OR_RETURN(Body body, parse_template(source));
  return ChatTemplate(std::make_shared<const Body>(std::move(body)));
}

namespace {

bool reserved_name(std::string_view name) {
  for (std::string_view set_by_context :
       {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
    if (name == set_by_context) return true;
  return !find_global(name).is_undefined();
}

}  // namespace

std::optional<std::string> first_reserved_name(const nlohmann::ordered_json& extra) {
  for (const auto& [key, value] : extra.items())
    if (reserved_name(key)) return key;
  return std::nullopt;
}

namespace {

absl::Status context_error(std::string_view field, const absl::Status& s) {
  return absl::Status(s.code(), str_cat("chat context field '", field, "': ", s.message()));
}

absl::StatusOr<std::shared_ptr<Scope>> root_scope(const ChatContext& c) {
  auto root = std::make_shared<Scope>();
  if (!c.extra.is_object())
    return absl::InvalidArgumentError("chat context field 'extra' must be a JSON object");
  if (const std::optional<std::string> key = first_reserved_name(c.extra))
    return absl::InvalidArgumentError(
        str_cat("chat context field 'extra': '", *key, "' is a name the context sets itself"));
  for (const auto& [key, value] : c.extra.items()) {
    auto v = value_from_json(value);
    if (!v.ok()) return context_error(key, v.status());
    root->set(key, std::move(*v));
  }
  if (!c.messages.is_array())
    return absl::InvalidArgumentError("chat context field 'messages' must be a JSON array");
  auto messages = value_from_json(c.messages);
  if (!messages.ok()) return context_error("messages", messages.status());
  root->set("messages", std::move(*messages));
  if (c.tools) {
    auto tools = value_from_json(*c.tools);
    if (!tools.ok()) return context_error("tools", tools.status());
    root->set("tools", std::move(*tools));
  }
  root->set("add_generation_prompt", Value::boolean(c.add_generation_prompt));
  root->set("bos_token", Value::string(c.bos_token));
  root->set("eos_token", Value::string(c.eos_token));
  return root;
}

}  // namespace

absl::StatusOr<std::string> ChatTemplate::render(const ChatContext& context,
                                                 const RenderLimits& limits) const {
  HEARTH_ASSIGN_OR_RETURN(std::shared_ptr<Scope> root, root_scope(context));
  const int64_t now = context.now_unix_seconds.value_or(static_cast<int64_t>(std::time(nullptr)));
  Evaluator ev(limits, now);
  return ev.render(*body_, std::move(root));
}

}  // namespace hearth::chat
