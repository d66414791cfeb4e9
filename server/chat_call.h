// ChatCall: a chat request in plain values, as a front end maps it from its
// wire format for RequestPath::chat (server/request_path.h). In a header of
// its own so that the chat interpreter's headers reach only the files that
// build or read one.
#pragma once

#include <string>

#include "chat/chat_template.h"
#include "engine/generation.h"

namespace hearth::server {

// The conversation and what the template sees, plus the generation options
// (request.prompt is left empty: the rendered template becomes the prompt).
struct ChatCall {
  std::string method;  // "Chat", "ChatComplete", ...
  std::string model;
  chat::ChatContext conversation;  // messages, add_generation_prompt, tools, extra
  engine::GenerationRequest request;
  bool reuse_prefix = true;
};

}  // namespace hearth::server
