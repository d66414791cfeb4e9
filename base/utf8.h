// UTF-8 encoding of one code point, the one piece of UTF-8 every layer
// needs (engine/unicode.h, chat/utf8.h and grammar/ add their own policies
// for invalid input around it).
#pragma once

#include <string>

namespace hearth {

// Appends the UTF-8 bytes of `c`, which must be a Unicode scalar value
// (at most U+10FFFF, not a surrogate): callers decide what stands in for
// anything else.
inline void encode_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace hearth
