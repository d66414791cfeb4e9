// Splits template source into text and tag tokens the way jinja2's lexer
// does with trim_blocks and lstrip_blocks on: `{%-`/`-%}` strip whitespace,
// `{%+`/`+%}` keep it, a block or comment tag alone on its line loses its
// indentation and the newline after it, comments vanish, `{% raw %}` text
// passes through, "\r\n" and "\r" become "\n" and one trailing newline is
// dropped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace hearth::chat {

struct Pos {
  int line = 1;
  int col = 1;
};

enum class TokenType {
  kText,        // literal template text (already whitespace-controlled)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInt,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type;
  std::string text;
  Pos pos;
  int64_t int_value = 0;
  double float_value = 0;
};

// Errors (unterminated tag or string, unknown character, unbalanced
// brackets) are INVALID_ARGUMENT naming line:column.
absl::StatusOr<std::vector<Token>> tokenize(std::string_view source);

}  // namespace hearth::chat
