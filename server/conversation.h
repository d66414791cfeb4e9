// The prompt text of a Chat call: the conversation rendered by the model's
// chat template, with what every front end needs around it (transport
// neutral: server/request_path.cc calls it for gRPC and HTTP alike).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chat/chat_prompt.h"
#include "nlohmann/json.hpp"

namespace hearth::server {

// Whether a conversation comes with tools: a non-empty list (an empty one
// goes to the template unchecked).
bool has_tools(const chat::ChatContext& conversation);

// Assistant tool calls whose function.arguments is JSON text (as OpenAI
// clients send it) get the object instead, which most Hugging Face
// templates print with tojson (the text would be quoted a second time).
// Text that is not an object's JSON stays. Whether any changed.
bool parse_tool_call_arguments(nlohmann::ordered_json& messages);

// The conversation's prompt text. Tool-call arguments go as objects unless
// the template refuses them (some join them into the prompt as text:
// DeepSeek-R1's), then as sent. A conversation past the template's limits
// is INVALID_ARGUMENT naming messages; tools the template does not render
// for it are refused (the model would never see them).
absl::StatusOr<std::string> render_conversation(const chat::ChatPrompt& prompt,
                                                chat::ChatContext context,
                                                const std::string& model);

// A chat request has no prompt field: an error about the prompt (the
// rendered conversation) names messages instead, keeping code and payloads.
absl::Status as_messages_error(const absl::Status& s);

}  // namespace hearth::server
