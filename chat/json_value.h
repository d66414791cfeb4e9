// Conversion between JSON (the request's messages, tools and extra
// variables) and template values, and the `tojson` filter's output, which
// must equal Python's json.dumps byte for byte.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "chat/value.h"
#include "nlohmann/json.hpp"

namespace hearth::chat {

// Objects keep their key order, as Python's json.loads does. Nesting deeper
// than `max_depth` is INVALID_ARGUMENT (it would only recurse deeper later).
absl::StatusOr<Value> value_from_json(const nlohmann::ordered_json& json, int max_depth = 64);

// The arguments of json.dumps that Hugging Face's tojson forwards.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;          // None, or the string one level indents by
  std::optional<std::string> item_separator;  // default ", " (or "," with indent)
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
};

// json.dumps(value, ...). Undefined, namespaces and callables are not JSON
// (a TypeError in Python): INVALID_ARGUMENT. Output beyond `max_bytes` is
// RESOURCE_EXHAUSTED.
absl::StatusOr<std::string> json_dumps(const Value& value, const JsonDumpOptions& options,
                                       size_t max_bytes);

}  // namespace hearth::chat
