// UTF-8 helpers for the template interpreter. Python strings count, index
// and slice by code point, and Python's str.strip()/split() treat Unicode
// whitespace as whitespace; these helpers give hearth the same view of a
// UTF-8 std::string. Invalid bytes decode as single code points (U+FFFD is
// never produced: each bad byte stands for itself, so no input is lost).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::chat {

// Decodes `s` into code points; an invalid byte b becomes the code point
// 0xDC00 + b (Python's surrogateescape), so encode(decode(s)) == s.
std::vector<char32_t> utf8_decode(std::string_view s);
void utf8_append(std::string& out, char32_t cp);
std::string utf8_encode(const std::vector<char32_t>& cps, size_t begin, size_t end);

// Number of code points in `s`.
size_t utf8_length(std::string_view s);
bool is_ascii(std::string_view s);

// Python's str.isspace() for one code point.
bool is_py_space(char32_t cp);

}  // namespace hearth::chat
