#include "engine/unicode.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace hearth::engine {
namespace {

using Cat = UnicodeCategory;

TEST(Unicode, CategoriesOfKnownCharacters) {
  struct Case {
    char32_t c;
    Cat want;
  };
  const Case cases[] = {
      {'A', Cat::kLetter},
      {'z', Cat::kLetter},
      {0x00E9, Cat::kLetter},  // é
      {0x65E5, Cat::kLetter},
      {0x0416, Cat::kLetter},
      {0x02B0, Cat::kLetter},  // 日 Ж ʰ (Lm)
      {'0', Cat::kNumber},
      {0x0663, Cat::kNumber},
      {0x00BD, Cat::kNumber},  // ٣ ½
      {0x2167, Cat::kNumber},  // Ⅷ (Nl)
      {'!', Cat::kPunctuation},
      {'_', Cat::kPunctuation},
      {'{', Cat::kPunctuation},
      {0x3002, Cat::kPunctuation},
      {0x201C, Cat::kPunctuation},  // 。 “
      {'$', Cat::kSymbol},
      {'+', Cat::kSymbol},
      {'~', Cat::kSymbol},
      {'`', Cat::kSymbol},
      {0x1F999, Cat::kSymbol},
      {0xFFFD, Cat::kSymbol},  // 🦙 �
      {0x0301, Cat::kMark},
      {0xFE0F, Cat::kMark},
      {0x0E31, Cat::kMark},
      {' ', Cat::kSeparator},
      {0x00A0, Cat::kSeparator},
      {0x3000, Cat::kSeparator},
      {0x2028, Cat::kSeparator},
      {'\n', Cat::kOther},
      {0x200D, Cat::kOther},  // ZWJ (Cf)
      {0xE000, Cat::kOther},
      {0x0378, Cat::kUnassigned},
      {0x10FFFF, Cat::kUnassigned},
      {0x110000, Cat::kUnassigned},
      {0xFFFFFFFF, Cat::kUnassigned},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(unicode_category(c.c), c.want) << "U+" << std::hex << static_cast<std::uint32_t>(c.c);
  }
  EXPECT_TRUE(is_unicode_letter(0x00C0));
  EXPECT_TRUE(is_unicode_number('7'));
  EXPECT_TRUE(is_unicode_punctuation(','));
  EXPECT_FALSE(is_unicode_punctuation('+'));
}

TEST(Unicode, LetterSubcategoriesOfKnownCharacters) {
  using L = LetterCategory;
  struct Case {
    char32_t c;
    L want;
  };
  const Case cases[] = {
      {'A', L::kUppercase},     {'Z', L::kUppercase},       {0x00C9, L::kUppercase},  // É
      {0x0416, L::kUppercase},                                                        // Ж
      {'a', L::kLowercase},     {'z', L::kLowercase},       {0x00E9, L::kLowercase},  // é
      {0x00DF, L::kLowercase},  {0x00B5, L::kLowercase},                              // ß µ
      {0x01C5, L::kTitlecase},  {0x1F88, L::kTitlecase},                              // ǅ ᾈ
      {0x02B0, L::kModifier},   {0x3005, L::kModifier},     {0xFF70, L::kModifier},   // ʰ 々 ｰ
      {0x4E00, L::kOther},      {0x00AA, L::kOther},        {0xAC00, L::kOther},      // 一 ª 가
      {0x0627, L::kOther},      {0x0939, L::kOther},        {0x20000, L::kOther},     // ا ह 𠀀
      {0x0301, L::kNotALetter}, {0x093F, L::kNotALetter},                             // marks
      {'0', L::kNotALetter},    {' ', L::kNotALetter},      {'\'', L::kNotALetter},
      {0x0378, L::kNotALetter}, {0x10FFFF, L::kNotALetter}, {0x110000, L::kNotALetter},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(letter_category(c.c), c.want) << "U+" << std::hex << static_cast<std::uint32_t>(c.c);
  }
}

TEST(Unicode, LetterSubcategoriesAgreeWithTheMajorCategory) {
  // The two tables are generated separately; a letter has exactly one
  // subcategory and nothing else has one.
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    const bool letter = unicode_category(c) == UnicodeCategory::kLetter;
    ASSERT_EQ(letter_category(c) != LetterCategory::kNotALetter, letter)
        << "U+" << std::hex << static_cast<std::uint32_t>(c);
  }
}

TEST(Unicode, WhitespaceIsTheWhiteSpaceProperty) {
  for (char32_t c :
       std::vector<char32_t>{0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x2005,
                             0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000}) {
    EXPECT_TRUE(is_unicode_whitespace(c)) << std::hex << static_cast<std::uint32_t>(c);
  }
  for (char32_t c : std::vector<char32_t>{0x00, 0x08, 0x0E, 0x1C, 0x1F, 0x21, 'a', 0x180E, 0x200B,
                                          0x2060, 0xFEFF, 0x10FFFF}) {
    EXPECT_FALSE(is_unicode_whitespace(c)) << std::hex << static_cast<std::uint32_t>(c);
  }
}

TEST(Unicode, TablesAreGenerated) {
  const std::string v = unicode_version();
  EXPECT_GE(v.size(), 5u);  // "14.0.0"
  EXPECT_NE(v.find('.'), std::string::npos);
}

TEST(Utf8, DecodesWellFormedCharacters) {
  const std::string s = "a\xC3\xA9\xE6\x97\xA5\xF0\x9F\xA6\x99";  // a é 日 🦙
  Utf8Char c = decode_utf8(s, 0);
  EXPECT_EQ(c.code_point, U'a');
  EXPECT_EQ(c.length, 1);
  c = decode_utf8(s, 1);
  EXPECT_EQ(c.code_point, 0xE9u);
  EXPECT_EQ(c.length, 2);
  c = decode_utf8(s, 3);
  EXPECT_EQ(c.code_point, 0x65E5u);
  EXPECT_EQ(c.length, 3);
  c = decode_utf8(s, 6);
  EXPECT_EQ(c.code_point, 0x1F999u);
  EXPECT_EQ(c.length, 4);
  EXPECT_EQ(c.status, Utf8Status::kOk);
  EXPECT_TRUE(is_valid_utf8(s));
}

TEST(Utf8, IllFormedSequencesConsumeTheirMaximalSubpart) {
  struct Case {
    std::string bytes;
    int length;
    Utf8Status status;
  };
  const Case cases[] = {
      {"\x80", 1, Utf8Status::kInvalid},          // lone continuation byte
      {"\xC0\x80", 1, Utf8Status::kInvalid},      // overlong NUL: C0 can never start a character
      {"\xC1\xBF", 1, Utf8Status::kInvalid},      // overlong
      {"\xE0\x80\x80", 1, Utf8Status::kInvalid},  // overlong 3-byte form
      {"\xED\xA0\x80", 1, Utf8Status::kInvalid},  // surrogate U+D800
      {"\xF4\x90\x80\x80", 1, Utf8Status::kInvalid},  // U+110000
      {"\xF5\x80\x80\x80", 1, Utf8Status::kInvalid},  // F5 never starts a character
      {"\xFF", 1, Utf8Status::kInvalid},
      {"\xE6\x41", 1, Utf8Status::kInvalid},          // cut short by an ASCII byte
      {"\xF0\x9F\xA6\x41", 3, Utf8Status::kInvalid},  // three good bytes, then not a continuation
      {"\xE6\x97", 2, Utf8Status::kIncomplete},       // the text ends inside 日
      {"\xF0\x9F", 2, Utf8Status::kIncomplete},
      {"\xC3", 1, Utf8Status::kIncomplete},
  };
  for (const Case& c : cases) {
    const Utf8Char ch = decode_utf8(c.bytes, 0);
    EXPECT_EQ(ch.length, c.length) << ::testing::PrintToString(c.bytes);
    EXPECT_EQ(ch.status, c.status) << ::testing::PrintToString(c.bytes);
    EXPECT_EQ(ch.code_point, 0xFFFDu);
    EXPECT_FALSE(is_valid_utf8(c.bytes));
  }
}

TEST(Utf8, SanitizeReplacesEachMaximalSubpartOnce) {
  // The same results as Python's bytes.decode("utf-8", "replace").
  EXPECT_EQ(sanitize_utf8("ok"), "ok");
  EXPECT_EQ(sanitize_utf8("\xE6\x97"
                          "A"),
            "\xEF\xBF\xBD"
            "A");
  EXPECT_EQ(sanitize_utf8("\xF0\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(sanitize_utf8("a\xE6\x97"), "a\xEF\xBF\xBD");
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(sanitize_utf8(std::string("a\0b", 3)), std::string("a\0b", 3));
  EXPECT_TRUE(is_valid_utf8(""));
}

TEST(Utf8, EveryScalarValueRoundTrips) {
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    std::string s;
    append_utf8(s, c);
    const Utf8Char ch = decode_utf8(s, 0);
    ASSERT_EQ(ch.status, Utf8Status::kOk) << std::hex << static_cast<std::uint32_t>(c);
    ASSERT_EQ(ch.code_point, c);
    ASSERT_EQ(ch.length, s.size());
  }
  std::string s;
  append_utf8(s, 0xD800);  // not a scalar value: written as U+FFFD
  append_utf8(s, 0x110000);
  EXPECT_EQ(s, "\xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace
}  // namespace hearth::engine
