// Python's str methods on UTF-8 strings, as chat templates call them
// (directly, or through jinja2 filters built on them). Case mapping covers
// ASCII letters only; other letters pass through unchanged.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::chat {

enum class StripSide { kBoth, kLeft, kRight };
// str.strip(chars): chars absent = Unicode whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, StripSide side);

// str.split(sep, maxsplit); sep absent = runs of whitespace. maxsplit < 0 = all.
// rsplit when `from_right`.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right = false);
// str.splitlines() (without keepends).
std::vector<std::string> py_splitlines(std::string_view s);

std::string py_lower(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
// str.replace(old, new, count); count < 0 = all. Stops (returning false)
// once the result would exceed max_bytes.
bool py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count,
                size_t max_bytes, std::string& out);

}  // namespace hearth::chat
