// Unicode helpers for the tokenizers: strict UTF-8 decoding and encoding, and
// the character classes the pre-tokenizer rules are written in (\p{L}, \p{N},
// \p{P}, \s, and the letter subcategories \p{Lu}, \p{Ll}, ...).
//
// The category data is generated from Python's `unicodedata` by
// engine/gen_unicode_tables.py into engine/unicode_tables.cc (see
// unicode_version() for the Unicode version it holds). No ICU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hearth::engine {

// A code point's general category folded to its major class, as regexes
// written with \p{L}, \p{N}, ... see it.
enum class UnicodeCategory : std::uint8_t {
  kUnassigned = 0,   // Cn (and anything past U+10FFFF)
  kLetter = 1,       // Lu Ll Lt Lm Lo
  kMark = 2,         // Mn Mc Me
  kNumber = 3,       // Nd Nl No
  kPunctuation = 4,  // Pc Pd Ps Pe Pi Pf Po
  kSymbol = 5,       // Sm Sc Sk So
  kSeparator = 6,    // Zs Zl Zp
  kOther = 7,        // Cc Cf Cs Co
};

UnicodeCategory unicode_category(char32_t c);

// A letter's general category, for regexes that tell letters apart by case
// (\p{Lu}, \p{Ll}, \p{Lt}, \p{Lm}, \p{Lo}). Every code point whose
// unicode_category() is kLetter has one of the five; all others (marks
// included) are kNotALetter.
enum class LetterCategory : std::uint8_t {
  kNotALetter = 0,
  kUppercase = 1,  // Lu
  kLowercase = 2,  // Ll
  kTitlecase = 3,  // Lt
  kModifier = 4,   // Lm
  kOther = 5,      // Lo
};

LetterCategory letter_category(char32_t c);
inline bool is_unicode_letter(char32_t c) {
  return unicode_category(c) == UnicodeCategory::kLetter;
}
inline bool is_unicode_number(char32_t c) {
  return unicode_category(c) == UnicodeCategory::kNumber;
}
inline bool is_unicode_punctuation(char32_t c) {
  return unicode_category(c) == UnicodeCategory::kPunctuation;
}
// The White_Space property: what \s means in the tokenizers' regexes. Note it
// includes U+0085 and U+00A0 but not U+200B or U+FEFF.
bool is_unicode_whitespace(char32_t c);

// The Unicode version of the generated tables, e.g. "14.0.0".
const char* unicode_version();

// ---- UTF-8 -----------------------------------------------------------------

enum class Utf8Status : std::uint8_t {
  kOk,          // a well-formed character
  kIncomplete,  // the text ends inside a character that could still be well-formed
  kInvalid,     // an ill-formed sequence
};

struct Utf8Char {
  char32_t code_point = 0;  // U+FFFD unless status is kOk
  std::uint8_t length = 0;  // bytes consumed, always >= 1 when pos < text.size()
  Utf8Status status = Utf8Status::kOk;
};

// Decodes the character starting at `pos` (< text.size()). Strict UTF-8 (RFC
// 3629): overlong forms, surrogates and code points past U+10FFFF are
// ill-formed. An ill-formed sequence consumes its "maximal subpart" (Unicode
// §3.9, as Python and browsers do), so each gives exactly one U+FFFD when
// replaced; an unfinished sequence at the end consumes the rest of the text.
Utf8Char decode_utf8(std::string_view text, std::size_t pos);

// Appends `c` as UTF-8 (1-4 bytes). Surrogates and values past U+10FFFF are
// written as U+FFFD so the output is always well-formed.
void append_utf8(std::string& out, char32_t c);

bool is_valid_utf8(std::string_view text);
// The offset of the first ill-formed or unfinished sequence; text.size()
// when the whole text is well-formed.
std::size_t first_invalid_utf8(std::string_view text);

// `text` with each ill-formed or unfinished sequence replaced by U+FFFD.
std::string sanitize_utf8(std::string_view text);

}  // namespace hearth::engine
