// A model's chat template (the Jinja text in tokenizer.chat_template),
// parsed once at load time and rendered per request into the prompt text,
// with Hugging Face apply_chat_template's semantics: jinja2's immutable
// sandbox with trim_blocks, lstrip_blocks and loop controls, plus
// raise_exception(), strftime_now() and json.dumps-compatible tojson.
//
// A ChatTemplate is immutable after parse(): one instance may be rendered
// from many threads at once. Each render() allocates its own state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "chat/ast.h"
#include "chat/evaluator.h"
#include "nlohmann/json.hpp"

namespace hearth::chat {

struct ChatContext {
  // A list of message objects; every field (role, content, tool_calls,
  // name, tool_call_id, ...) is visible to the template as given.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  bool add_generation_prompt = false;
  // Function schemas; when absent, `tools` is undefined in the template.
  std::optional<nlohmann::ordered_json> tools;
  std::string bos_token;
  std::string eos_token;
  // Further template variables (an object), e.g. enable_thinking; none may
  // take a name first_reserved_name() finds.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // The clock strftime_now() reads (seconds since the epoch, formatted as
  // UTC); unset = the current time.
  std::optional<int64_t> now_unix_seconds;
};

// The first key of `extra` (a JSON object) that names what the context sets
// itself (messages, tools, add_generation_prompt, bos_token, eos_token) or
// one of the template functions (raise_exception, strftime_now, namespace,
// range, dict), if any: an extra variable of that name would replace it,
// e.g. bring tools past the server's checks or silence raise_exception.
std::optional<std::string> first_reserved_name(const nlohmann::ordered_json& extra);

class ChatTemplate {
 public:
  // Unsupported or malformed syntax is INVALID_ARGUMENT naming the
  // construct and its line:column.
  static absl::StatusOr<ChatTemplate> parse(std::string_view source);

  // Errors the template raises (raise_exception, undefined values used,
  // type errors) are INVALID_ARGUMENT naming the construct and line:column;
  // exceeding `limits` is RESOURCE_EXHAUSTED.
  absl::StatusOr<std::string> render(const ChatContext& context,
                                     const RenderLimits& limits = {}) const;

 private:
  explicit ChatTemplate(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

}  // namespace hearth::chat
