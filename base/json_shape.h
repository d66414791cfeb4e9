// The shape of a JSON text, checked by a scan before it is parsed.
// nlohmann::json parses and frees without recursion but copies and dumps
// with one call per level, so a request nested a million levels deep (2 MB
// of brackets) would overflow its thread's stack at the first copy, taking
// the server with it; and an ordered_json object finds each new key by a
// linear search of the keys before it, so one object of 350k members (a
// 4 MB body) takes minutes to parse. A caller refuses such text first.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/str_cat.h"

namespace hearth {

// Limits of request JSON (a body, a gRPC field holding JSON): far beyond any
// real message, schema or tool list, far below a stack's or a minute's reach.
inline constexpr std::size_t kMaxRequestJsonNesting = 512;
inline constexpr std::size_t kMaxRequestJsonMembers = 4096;  // per object

// What makes `text` exceed those limits, or others (a JSON schema has its
// own), e.g. "nested deeper than 512 levels", "an object with more than 4096
// members"; "" when it does not (brackets and commas inside strings do not
// count). Not a validator: any text gets an answer, and malformed text is
// the parser's to refuse.
inline std::string json_shape_problem(std::string_view text,
                                      std::size_t max_levels = kMaxRequestJsonNesting,
                                      std::size_t max_members = kMaxRequestJsonMembers) {
  std::vector<std::pair<bool, std::size_t>> open;  // per level: an object?, its commas
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
      if (open.size() == max_levels) return str_cat("nested deeper than ", max_levels, " levels");
      open.emplace_back(c == '{', 0);
    } else if ((c == '}' || c == ']') && !open.empty()) {
      open.pop_back();
    } else if (c == ',' && !open.empty() && open.back().first &&
               ++open.back().second >= max_members) {
      return str_cat("an object with more than ", max_members, " members");
    }
  }
  return "";
}

}  // namespace hearth
