#include "chat/strings.h"

#include <algorithm>

#include "chat/utf8.h"

namespace hearth::chat {

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, StripSide side) {
  const std::vector<char32_t> cps = utf8_decode(s);
  std::vector<char32_t> set;
  if (chars) set = utf8_decode(*chars);
  auto strip_this = [&](char32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
  };
  size_t b = 0, e = cps.size();
  if (side != StripSide::kRight)
    while (b < e && strip_this(cps[b])) ++b;
  if (side != StripSide::kLeft)
    while (e > b && strip_this(cps[e - 1])) --e;
  return utf8_encode(cps, b, e);
}

namespace {

std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit, bool from_right) {
  std::vector<char32_t> cps = utf8_decode(s);
  if (from_right) std::reverse(cps.begin(), cps.end());
  std::vector<std::string> out;
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_py_space(cps[i])) ++i;
    if (i == cps.size()) break;
    size_t j = i;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      j = cps.size();  // the rest, its far end's whitespace kept (as Python's)
    } else {
      while (j < cps.size() && !is_py_space(cps[j])) ++j;
    }
    std::vector<char32_t> piece(cps.begin() + static_cast<std::ptrdiff_t>(i),
                                cps.begin() + static_cast<std::ptrdiff_t>(j));
    if (from_right) std::reverse(piece.begin(), piece.end());
    out.push_back(utf8_encode(piece, 0, piece.size()));
    i = j;
  }
  if (from_right) std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
  if (!sep) return split_whitespace(s, maxsplit, from_right);
  std::vector<std::string> out;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t hit = s.find(*sep, start);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(start, hit - start));
      start = hit + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    const size_t hit = s.rfind(*sep, end - sep->size());
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
    end = hit;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  const std::vector<char32_t> cps = utf8_decode(s);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                     c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    out.push_back(utf8_encode(cps, start, i));
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < cps.size()) out.push_back(utf8_encode(cps, start, cps.size()));
  return out;
}

namespace {

// Simple (one code point to one code point) case mapping for the scripts
// chat text in European languages uses: ASCII, Latin-1, Latin Extended-A,
// Greek and Cyrillic. Other code points have no case here.
char32_t to_upper_cp(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 0x20;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c & ~1u;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1u) ? c : c - 1;
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 0x20;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 0x25;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 0x3F;
  if (c >= 0x430 && c <= 0x44F) return c - 0x20;
  if (c >= 0x450 && c <= 0x45F) return c - 0x50;
  return c;
}

char32_t to_lower_cp(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
  if (c == 0x178) return 0xFF;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c | 1u;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1u) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 0x25;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 0x3F;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  return c;
}

bool cased(char32_t c) { return to_upper_cp(c) != c || to_lower_cp(c) != c || c == 0xDF; }

template <typename F>
std::string map_cps(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  const std::vector<char32_t> cps = utf8_decode(s);
  for (size_t i = 0; i < cps.size(); ++i) utf8_append(out, f(cps[i], i, cps));
  return out;
}

}  // namespace

std::string py_lower(std::string_view s) {
  return map_cps(s, [](char32_t c, size_t, const auto&) { return to_lower_cp(c); });
}

std::string py_upper(std::string_view s) {
  std::string out = map_cps(s, [](char32_t c, size_t, const auto&) { return to_upper_cp(c); });
  // The one common letter whose upper case is two letters.
  for (size_t at = out.find("\xC3\x9F"); at != std::string::npos; at = out.find("\xC3\x9F", at))
    out.replace(at, 2, "SS");
  return out;
}

std::string py_title(std::string_view s) {
  return map_cps(s, [](char32_t c, size_t i, const auto& cps) {
    const bool after_cased = i > 0 && cased(cps[i - 1]);
    return after_cased ? to_lower_cp(c) : to_upper_cp(c);
  });
}

std::string py_capitalize(std::string_view s) {
  return map_cps(s, [](char32_t c, size_t i, const auto&) {
    return i == 0 ? to_upper_cp(c) : to_lower_cp(c);
  });
}

bool py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count,
                size_t max_bytes, std::string& out) {
  out.clear();
  if (old.empty()) {
    // Python inserts `repl` before every code point and at the end.
    const std::vector<char32_t> cps = utf8_decode(s);
    int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) out += repl, ++done;
      utf8_append(out, c);
      if (out.size() > max_bytes) return false;
    }
    if (count < 0 || done < count) out += repl;
    return out.size() <= max_bytes;
  }
  size_t start = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    const size_t hit = s.find(old, start);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(start, hit - start));
    out.append(repl);
    start = hit + old.size();
    if (out.size() > max_bytes) return false;
  }
  out.append(s.substr(start));
  return out.size() <= max_bytes;
}

}  // namespace hearth::chat
