#include "chat/utf8.h"

#include "base/utf8.h"

namespace hearth::chat {
namespace {

// Length of the valid sequence starting at s[i], or 0 when s[i] does not
// start one (bad lead byte, truncated, overlong, surrogate, > U+10FFFF).
size_t sequence_length(std::string_view s, size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t n = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const size_t n = sequence_length(s, i, cp);
    if (n == 0) {
      out.push_back(0xDC00 + static_cast<unsigned char>(s[i]));
      ++i;
    } else {
      out.push_back(cp);
      i += n;
    }
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an escaped invalid byte
    out.push_back(static_cast<char>(cp - 0xDC00));
  } else {
    encode_utf8(out, cp);
  }
}

std::string utf8_encode(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  out.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) utf8_append(out, cps[i]);
  return out;
}

size_t utf8_length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  return utf8_decode(s).size();
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

bool is_py_space(char32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace hearth::chat
