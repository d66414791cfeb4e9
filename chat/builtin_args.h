// Argument access shared by the filters, tests, globals and methods.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "chat/value.h"

namespace hearth::chat {

// Positional argument `index`, else keyword `name`, else nullptr.
const Value* arg(const CallArgs& a, size_t index, std::string_view name);

// Typed variants: `dflt` when absent; INVALID_ARGUMENT when of the wrong kind.
absl::StatusOr<int64_t> int_arg(const CallArgs& a, size_t index, std::string_view name,
                                int64_t dflt);
absl::StatusOr<bool> bool_arg(const CallArgs& a, size_t index, std::string_view name, bool dflt);
// A string argument; None counts as absent.
absl::StatusOr<std::optional<std::string>> str_arg(const CallArgs& a, size_t index,
                                                   std::string_view name);

}  // namespace hearth::chat
