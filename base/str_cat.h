// str_cat: absl::StrCat for std::string_view too. Debian's Abseil
// (20220623) has its own absl::string_view, which absl::StrCat's AlphaNum does
// not accept from a std::string_view; messages here mix both freely.
#pragma once

#include <charconv>
#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/string_view.h"

namespace hearth {
namespace str_cat_internal {

inline void append(std::string& out, std::string_view s) { out.append(s); }
inline void append(std::string& out, const char* s) { out.append(s); }
inline void append(std::string& out, const std::string& s) { out.append(s); }
inline void append(std::string& out, char c) { out.push_back(c); }
#if !defined(ABSL_USES_STD_STRING_VIEW)
inline void append(std::string& out, absl::string_view s) { out.append(s.data(), s.size()); }
#endif
template <typename T>
requires(std::integral<T> && !std::same_as<T, char> &&
         !std::same_as<T, bool>) void append(std::string& out, T v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}
inline void append(std::string& out, bool v) { out.append(v ? "true" : "false"); }
template <typename T>
requires std::floating_point<T>
void append(std::string& out, T v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace str_cat_internal

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::string out;
  (str_cat_internal::append(out, args), ...);
  return out;
}

}  // namespace hearth
