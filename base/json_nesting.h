// How deeply a JSON text nests, found by a scan before it is parsed.
// nlohmann::json parses and frees without recursion but copies and dumps
// with one call per level, so a request nested a million levels deep (2 MB
// of brackets) would overflow its thread's stack at the first copy, taking
// the server with it; a caller refuses such text before parsing it.
#pragma once

#include <cstddef>
#include <string_view>

namespace hearth {

// Nesting allowed in request JSON (a body, a gRPC field holding JSON): far
// beyond any real message, schema or tool list, far below a stack's reach.
inline constexpr std::size_t kMaxRequestJsonNesting = 512;

// Whether `text` opens more than `levels` objects or arrays inside one
// another (brackets inside strings do not count). Not a validator: any text
// gets an answer, and malformed text is the parser's to refuse.
inline bool json_nested_deeper_than(std::string_view text, std::size_t levels) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > levels) return true;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return false;
}

}  // namespace hearth
