#include "engine/unicode.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "base/utf8.h"

namespace hearth::engine {

// Defined in the generated engine/unicode_tables.cc.
namespace unicode_data {
extern const char kUnicodeVersion[];
extern const std::size_t kCategoryRunCount;
extern const std::uint32_t kCategoryRuns[];
extern const std::size_t kLetterRunCount;
extern const std::uint32_t kLetterRuns[];
extern const std::size_t kWhitespaceRangeCount;
extern const std::uint32_t kWhitespaceRanges[][2];
}  // namespace unicode_data

namespace {

// The value of the run holding c (<= U+10FFFF) in a generated run table.
std::uint8_t run_value(const std::uint32_t* runs, std::size_t count, char32_t c) {
  // The last run whose first code point is <= c. Entries are sorted by first
  // code point, and comparing packed entries compares first code points,
  // because c << 8 | 0xFF is at least every entry that starts at c.
  const std::uint32_t key = (static_cast<std::uint32_t>(c) << 8) | 0xFFu;
  const std::uint32_t* it = std::upper_bound(runs, runs + count, key);
  // The first run starts at U+0000, so `it` is never `runs`.
  return static_cast<std::uint8_t>(it[-1] & 0xFFu);
}

}  // namespace

UnicodeCategory unicode_category(char32_t c) {
  if (c > 0x10FFFF) return UnicodeCategory::kUnassigned;
  return static_cast<UnicodeCategory>(
      run_value(unicode_data::kCategoryRuns, unicode_data::kCategoryRunCount, c));
}

LetterCategory letter_category(char32_t c) {
  if (c > 0x10FFFF) return LetterCategory::kNotALetter;
  return static_cast<LetterCategory>(
      run_value(unicode_data::kLetterRuns, unicode_data::kLetterRunCount, c));
}

bool is_unicode_whitespace(char32_t c) {
  for (std::size_t i = 0; i < unicode_data::kWhitespaceRangeCount; ++i) {
    if (c < unicode_data::kWhitespaceRanges[i][0]) return false;  // ranges are sorted
    if (c <= unicode_data::kWhitespaceRanges[i][1]) return true;
  }
  return false;
}

const char* unicode_version() { return unicode_data::kUnicodeVersion; }

Utf8Char decode_utf8(std::string_view text, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(pos);
  if (b0 < 0x80) return {b0, 1, Utf8Status::kOk};

  // Length of the sequence and the allowed range of its second byte (the
  // narrower ranges exclude overlong forms, surrogates and > U+10FFFF).
  int length = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0xFFFD, 1, Utf8Status::kInvalid};  // continuation byte, C0, C1 or F5..FF
  }
  for (int i = 1; i < length; ++i) {
    if (pos + i >= text.size()) {
      return {0xFFFD, static_cast<std::uint8_t>(text.size() - pos), Utf8Status::kIncomplete};
    }
    const unsigned char b = byte(pos + i);
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {0xFFFD, static_cast<std::uint8_t>(i), Utf8Status::kInvalid};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, static_cast<std::uint8_t>(length), Utf8Status::kOk};
}

void append_utf8(std::string& out, char32_t c) {
  if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) c = 0xFFFD;
  encode_utf8(out, c);
}

std::size_t first_invalid_utf8(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Char ch = decode_utf8(text, pos);
    if (ch.status != Utf8Status::kOk) break;
    pos += ch.length;
  }
  return pos;
}

bool is_valid_utf8(std::string_view text) { return first_invalid_utf8(text) == text.size(); }

std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) {
    const Utf8Char ch = decode_utf8(text, pos);
    if (ch.status == Utf8Status::kOk) {
      out.append(text.substr(pos, ch.length));
    } else {
      append_utf8(out, 0xFFFD);
    }
    pos += ch.length;
  }
  return out;
}

}  // namespace hearth::engine
