// Parses tokens into statements. Everything the chat templates of real
// models use is accepted; anything else (extends, include, import, call,
// filter blocks, recursive loops, ...) is INVALID_ARGUMENT naming the
// construct and its line:column, so an unsupported template fails at load
// time, not on a user's request.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "chat/ast.h"

namespace hearth::chat {

absl::StatusOr<Body> parse_template(std::string_view source);

}  // namespace hearth::chat
