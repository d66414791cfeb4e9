#include "engine/pretokenizer.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "absl/status/status.h"
#include "base/str_cat.h"
#include "engine/unicode.h"

namespace hearth::engine {
namespace {

// The text as characters, each with the classes the rules test, computed once.
// kUpper and kLower are Tekken's and GPT-4o's letter classes
// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}]; only those
// rule lists need them, so they are looked up only when asked for.
enum : std::uint8_t {
  kWs = 1,
  kLetter = 2,
  kNumber = 4,
  kPunct = 8,
  kUpper = 16,
  kLower = 32,
};

// The kUpper/kLower bits of a character of major category `cat`.
std::uint8_t letter_case_classes(char32_t c, UnicodeCategory cat) {
  if (cat == UnicodeCategory::kMark) return kUpper | kLower;
  if (cat != UnicodeCategory::kLetter) return 0;
  switch (letter_category(c)) {
    case LetterCategory::kUppercase:
    case LetterCategory::kTitlecase:
      return kUpper;
    case LetterCategory::kLowercase:
      return kLower;
    case LetterCategory::kModifier:
    case LetterCategory::kOther:
      return kUpper | kLower;
    case LetterCategory::kNotALetter:
      break;
  }
  return 0;
}

struct Text {
  std::vector<char32_t> cp;
  std::vector<std::uint8_t> cls;
  std::vector<std::size_t> byte;  // byte offset of each character, then the text's size

  Text(std::string_view s, bool letter_case) {
    cp.reserve(s.size());
    cls.reserve(s.size());
    byte.reserve(s.size() + 1);
    for (std::size_t pos = 0; pos < s.size();) {
      const Utf8Char ch = decode_utf8(s, pos);
      // An ill-formed sequence stays one character: U+FFFD (a symbol) has none
      // of the classes below, which is how the reference regexes see a
      // character that is neither letter, number, punctuation nor space.
      const char32_t c = ch.code_point;
      std::uint8_t k = 0;
      const UnicodeCategory cat = unicode_category(c);
      if (letter_case) k = letter_case_classes(c, cat);
      if (is_unicode_whitespace(c)) {
        k |= kWs;
      } else {
        switch (cat) {
          case UnicodeCategory::kLetter:
            k |= kLetter;
            break;
          case UnicodeCategory::kNumber:
            k |= kNumber;
            break;
          case UnicodeCategory::kPunctuation:
            k |= kPunct;
            break;
          default:
            break;
        }
      }
      cp.push_back(c);
      cls.push_back(k);
      byte.push_back(pos);
      pos += ch.length;
    }
    byte.push_back(s.size());
  }

  bool ws(std::size_t i) const { return cls[i] & kWs; }
  bool letter(std::size_t i) const { return cls[i] & kLetter; }
  bool number(std::size_t i) const { return cls[i] & kNumber; }
  bool punct(std::size_t i) const { return cls[i] & kPunct; }
  bool upper(std::size_t i) const { return cls[i] & kUpper; }
  bool lower(std::size_t i) const { return cls[i] & kLower; }
  // [^\s\p{L}\p{N}]
  bool other(std::size_t i) const { return (cls[i] & (kWs | kLetter | kNumber)) == 0; }
  bool newline(std::size_t i) const { return cp[i] == '\r' || cp[i] == '\n'; }
};

// A rule's match at one position: its length in characters, 0 for none. The
// character range is [pos, end): lookaheads treat `end` as the end of text.
using MatchAt = std::size_t (*)(const Text&, std::size_t pos, std::size_t end);

struct Match {
  std::size_t start;
  std::size_t length;  // 0: no match in the range
};
// The leftmost match in [from, end), as a regex search finds it.
using Find = Match (*)(const Text&, std::size_t from, std::size_t end);

template <MatchAt match_at>
Match find_first(const Text& t, std::size_t from, std::size_t end) {
  for (std::size_t p = from; p < end; ++p) {
    if (const std::size_t n = match_at(t, p, end); n > 0) return {p, n};
  }
  return {end, 0};
}

// Length of the run of characters from `pos` satisfying `pred`.
template <typename Pred>
std::size_t run(std::size_t pos, std::size_t end, Pred pred) {
  std::size_t p = pos;
  while (p < end && pred(p)) ++p;
  return p - pos;
}

char32_t ascii_lower(char32_t c) { return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c; }

enum class Fold {
  kNone,
  kAscii,    // ASCII letters only, as llama.cpp does for Llama 3
  kUnicode,  // (?i) with Unicode simple case folding, which adds U+017F ſ -> s
};

char32_t fold_contraction_letter(char32_t c, Fold fold) {
  if (fold == Fold::kNone) return c;
  // Of the letters s t r e v m l d, only s has a fold-equivalent beyond its
  // ASCII capital (the long s); Hugging Face's (?i) matches it.
  if (fold == Fold::kUnicode && c == 0x017F) return 's';
  return ascii_lower(c);
}

// 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive.
std::size_t contraction(const Text& t, std::size_t pos, std::size_t end, Fold fold) {
  if (pos >= end || t.cp[pos] != '\'' || pos + 1 >= end) return 0;
  const auto at = [&](std::size_t i) { return fold_contraction_letter(t.cp[i], fold); };
  const char32_t a = at(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= end) return 0;
  const char32_t b = at(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at a whitespace character: a run followed by a non-space
// gives that non-space's preceding space to the next word (" word"), unless
// the run is a single character.
std::size_t whitespace_run(const Text& t, std::size_t pos, std::size_t end) {
  const std::size_t n = run(pos, end, [&](std::size_t i) { return t.ws(i); });
  if (n > 1 && pos + n < end) return n - 1;
  return n;
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::size_t gpt2_at(const Text& t, std::size_t pos, std::size_t end) {
  if (const std::size_t n = contraction(t, pos, end, Fold::kNone)) return n;
  // The optional leading space joins whichever class follows it.
  const std::size_t lead = (t.cp[pos] == ' ' && pos + 1 < end) ? 1 : 0;
  const std::size_t body = pos + lead;
  if (t.letter(body)) return lead + run(body, end, [&](std::size_t i) { return t.letter(i); });
  if (t.number(body)) return lead + run(body, end, [&](std::size_t i) { return t.number(i); });
  if (t.other(body)) return lead + run(body, end, [&](std::size_t i) { return t.other(i); });
  return whitespace_run(t, pos, end);
}

// \s*[\r\n]+|\s+(?!\S)|\s+, the tail of the Llama 3 family's rules, at a
// character no earlier branch matched.
std::size_t line_breaks_or_whitespace_at(const Text& t, std::size_t pos, std::size_t end) {
  // \s*[\r\n]+ takes the run up to and including its last line break
  // (backtracking \s* gives back everything after it).
  const std::size_t n = run(pos, end, [&](std::size_t i) { return t.ws(i); });
  for (std::size_t i = pos + n; i > pos; --i) {
    if (t.newline(i - 1)) return i - pos;
  }
  if (n > 1 && pos + n < end) return n - 1;  // \s+(?!\S)
  return std::max<std::size_t>(n, 1);        // \s+ (every character matches some branch)
}

// \p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+, the
// branches after the letters that the Llama 3 family and Tekken / GPT-4o share
// (the latter two end the symbol run with [\r\n/]*: '/' already belongs to
// the class, so that tail only matters after line breaks: ";\n/" is one word).
template <std::size_t max_digits, bool slash_tail>
std::size_t numbers_symbols_or_whitespace_at(const Text& t, std::size_t pos, std::size_t end) {
  if (t.number(pos)) {
    return std::min(max_digits, run(pos, end, [&](std::size_t i) { return t.number(i); }));
  }
  const std::size_t lead = (t.cp[pos] == ' ' && pos + 1 < end) ? 1 : 0;
  if (t.other(pos + lead)) {
    std::size_t p = pos + lead;
    p += run(p, end, [&](std::size_t i) { return t.other(i); });
    p += run(p, end, [&](std::size_t i) { return t.newline(i) || (slash_tail && t.cp[i] == '/'); });
    return p - pos;
  }
  return line_breaks_or_whitespace_at(t, pos, end);
}

// Llama 3 / Qwen 2 (max_digits 3 / 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}
// | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
template <std::size_t max_digits>
std::size_t llama3_at(const Text& t, std::size_t pos, std::size_t end) {
  if (const std::size_t n = contraction(t, pos, end, Fold::kAscii)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+: one character of any other class may lead a letter run.
  if (!t.newline(pos) && !t.number(pos)) {
    if (t.letter(pos) || (pos + 1 < end && t.letter(pos + 1))) {
      return 1 + run(pos + 1, end, [&](std::size_t i) { return t.letter(i); });
    }
  }
  return numbers_symbols_or_whitespace_at<max_digits, false>(t, pos, end);
}

// ---- Tekken / GPT-4o ----------------------------------------------------------
//
// Their letter words split runs at case changes with two overlapping classes,
// U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and L = [\p{Ll}\p{Lm}\p{Lo}\p{M}]:
//   [^\r\n\p{L}\p{N}]?U*L+  |  [^\r\n\p{L}\p{N}]?U+L*
// Lm, Lo and marks are in both, so U* can swallow what L+ needs and must
// give it back (backtracking); marks are not \p{L}, so a mark can also be the
// optional lead character, and when taking it leaves no word the regex tries
// again without it. The matchers below replay that search order.

constexpr std::size_t kNoMatch = static_cast<std::size_t>(-1);

// U*L+ from `s`: its end, or kNoMatch. U* is greedy: the longest U-run is
// tried first, then shorter ones, until L+ can start where it stops. The
// longest U-run stops at a non-U character, which is in L only if it is Ll.
std::size_t upper_then_lower_end(const Text& t, std::size_t s, std::size_t end) {
  const std::size_t u = run(s, end, [&](std::size_t i) { return t.upper(i); });
  for (std::size_t k = u + 1; k-- > 0;) {
    const std::size_t l = s + k;
    if (l < end && t.lower(l)) return l + run(l, end, [&](std::size_t i) { return t.lower(i); });
  }
  return kNoMatch;
}

// U+L* from `s`: its end, or kNoMatch. Both greedy, and L* cannot fail.
std::size_t upper_then_optional_lower_end(const Text& t, std::size_t s, std::size_t end) {
  const std::size_t u = run(s, end, [&](std::size_t i) { return t.upper(i); });
  if (u == 0) return kNoMatch;
  return s + u + run(s + u, end, [&](std::size_t i) { return t.lower(i); });
}

// [^\r\n\p{L}\p{N}]?U*L+|[^\r\n\p{L}\p{N}]?U+L* at `pos`: the match's end,
// or kNoMatch. Each alternative tries the lead character first (when there
// is one) and then the same pattern without it, before the next alternative.
std::size_t cased_letters_end(const Text& t, std::size_t pos, std::size_t end) {
  const bool lead = !t.newline(pos) && !t.letter(pos) && !t.number(pos);
  const std::size_t starts[] = {pos + 1, pos};  // with the lead character, without
  const std::size_t first = lead ? 0 : 1;
  for (std::size_t i = first; i < 2; ++i) {
    if (const std::size_t e = upper_then_lower_end(t, starts[i], end); e != kNoMatch) return e;
  }
  for (std::size_t i = first; i < 2; ++i) {
    const std::size_t e = upper_then_optional_lower_end(t, starts[i], end);
    if (e != kNoMatch) return e;
  }
  return kNoMatch;
}

// Tekken (max_digits 1, no contractions) / GPT-4o (3, contractions):
// [^\r\n\p{L}\p{N}]?U*L+C?|[^\r\n\p{L}\p{N}]?U+L*C?|\p{N}{1,max}
// | ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// with C = (?i:'s|'t|'re|'ve|'m|'ll|'d) for GPT-4o, nothing for Tekken.
template <std::size_t max_digits, bool contractions>
std::size_t cased_words_at(const Text& t, std::size_t pos, std::size_t end) {
  if (const std::size_t e = cased_letters_end(t, pos, end); e != kNoMatch) {
    // The optional contraction is greedy, and L+/L* already took all they
    // could, so it is simply appended when present.
    if (contractions) return e - pos + contraction(t, e, end, Fold::kUnicode);
    return e - pos;
  }
  return numbers_symbols_or_whitespace_at<max_digits, true>(t, pos, end);
}

// \p{N}
std::size_t single_number_at(const Text& t, std::size_t pos, std::size_t) {
  return t.number(pos) ? 1 : 0;
}
// \p{N}+
std::size_t number_run_at(const Text& t, std::size_t pos, std::size_t end) {
  return run(pos, end, [&](std::size_t i) { return t.number(i); });
}
// [\r\n]
std::size_t newline_at(const Text& t, std::size_t pos, std::size_t) {
  return t.newline(pos) ? 1 : 0;
}

// \s?[class]+ for a character class given as a predicate on code points.
template <typename InClass>
std::size_t optional_space_then_run(const Text& t, std::size_t pos, std::size_t end,
                                    InClass in_class) {
  const auto member = [&](std::size_t i) { return in_class(t, i); };
  if (t.ws(pos) && pos + 1 < end && member(pos + 1)) return 1 + run(pos + 1, end, member);
  return run(pos, end, member);
}

// Falcon: [\p{P}\$\+<=>\^~\|`]+
std::size_t falcon_punct_at(const Text& t, std::size_t pos, std::size_t end) {
  return run(pos, end, [&](std::size_t i) {
    const char32_t c = t.cp[i];
    return t.punct(i) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' ||
           c == '~' || c == '|' || c == '`';
  });
}

// Falcon: [0-9][0-9][0-9]
std::size_t three_ascii_digits_at(const Text& t, std::size_t pos, std::size_t end) {
  const auto digit = [&](std::size_t i) { return t.cp[i] >= '0' && t.cp[i] <= '9'; };
  return (pos + 3 <= end && digit(pos) && digit(pos + 1) && digit(pos + 2)) ? 3 : 0;
}

// DeepSeek: [一-龥ࠀ-一가-퟿]+ (CJK ideographs, everything from U+0800 to U+4E00, Hangul)
bool deepseek_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x0800 && c <= 0x4E00) ||
         (c >= 0xAC00 && c <= 0xD7FF);
}
std::size_t deepseek_cjk_at(const Text& t, std::size_t pos, std::size_t end) {
  return run(pos, end, [&](std::size_t i) { return deepseek_cjk(t.cp[i]); });
}

// DeepSeek Coder: \s?\p{L}+ and \s?\p{P}+
std::size_t space_letters_at(const Text& t, std::size_t pos, std::size_t end) {
  return optional_space_then_run(t, pos, end,
                                 [](const Text& x, std::size_t i) { return x.letter(i); });
}
std::size_t space_punct_at(const Text& t, std::size_t pos, std::size_t end) {
  return optional_space_then_run(t, pos, end,
                                 [](const Text& x, std::size_t i) { return x.punct(i); });
}

// DeepSeek LLM's letter class: the cased letters as its tokenizer.json spells
// them out (A-Za-zµÀ-ÖØ-öø-ƺ...), inclusive code point ranges.
constexpr char32_t kDeepseekLetters[][2] = {
    {0x0041, 0x005A},   {0x0061, 0x007A},   {0x00B5, 0x00B5},   {0x00C0, 0x00D6},
    {0x00D8, 0x00F6},   {0x00F8, 0x01BA},   {0x01BC, 0x01BF},   {0x01C4, 0x0293},
    {0x0295, 0x02AF},   {0x0370, 0x0373},   {0x0376, 0x0377},   {0x037B, 0x037D},
    {0x037F, 0x037F},   {0x0386, 0x0386},   {0x0388, 0x038A},   {0x038C, 0x038C},
    {0x038E, 0x03A1},   {0x03A3, 0x03F5},   {0x03F7, 0x0481},   {0x048A, 0x052F},
    {0x0531, 0x0556},   {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

bool deepseek_letter(char32_t c) {
  // Ranges are sorted and disjoint: find the last one starting at or before c.
  const auto* it = std::upper_bound(std::begin(kDeepseekLetters), std::end(kDeepseekLetters), c,
                                    [](char32_t v, const char32_t(&r)[2]) { return v < r[0]; });
  return it != std::begin(kDeepseekLetters) && c <= it[-1][1];
}

// DeepSeek LLM: [!-/:-~！-／：-～‘-‟　-。] (ASCII punctuation and letters past
// the earlier rules, their full-width forms, curly quotes, CJK space and stops)
bool deepseek_punct(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) || (c >= 0xFF01 && c <= 0xFF0F) ||
         (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) ||
         (c >= 0x3000 && c <= 0x3002);
}

std::size_t space_deepseek_letters_at(const Text& t, std::size_t pos, std::size_t end) {
  return optional_space_then_run(
      t, pos, end, [](const Text& x, std::size_t i) { return deepseek_letter(x.cp[i]); });
}
std::size_t space_deepseek_punct_at(const Text& t, std::size_t pos, std::size_t end) {
  return optional_space_then_run(
      t, pos, end, [](const Text& x, std::size_t i) { return deepseek_punct(x.cp[i]); });
}

// \s+$ : the whitespace that ends the piece, if any. Found directly, since a
// position-by-position search would rescan long inner runs of spaces.
Match find_trailing_whitespace(const Text& t, std::size_t from, std::size_t end) {
  std::size_t start = end;
  while (start > from && t.ws(start - 1)) --start;
  if (start == end) return {end, 0};
  return {start, end - start};
}

struct RuleList {
  const Find* steps;
  std::size_t count;
};

constexpr Find kGpt2Steps[] = {find_first<gpt2_at>};
constexpr Find kLlama3Steps[] = {find_first<llama3_at<3>>};
constexpr Find kQwen2Steps[] = {find_first<llama3_at<1>>};
constexpr Find kTekkenSteps[] = {find_first<cased_words_at<1, false>>};
constexpr Find kGpt4oSteps[] = {find_first<cased_words_at<3, true>>};
constexpr Find kStarcoderSteps[] = {find_first<single_number_at>, find_first<gpt2_at>};
constexpr Find kFalconSteps[] = {find_first<falcon_punct_at>, find_first<gpt2_at>,
                                 find_first<three_ascii_digits_at>};
constexpr Find kDeepseekCoderSteps[] = {find_first<newline_at>, find_first<space_letters_at>,
                                        find_first<space_punct_at>, find_first<deepseek_cjk_at>,
                                        find_first<single_number_at>};
constexpr Find kDeepseekLlmSteps[] = {find_first<newline_at>,
                                      find_first<space_deepseek_letters_at>,
                                      find_first<space_deepseek_punct_at>,
                                      find_trailing_whitespace,
                                      find_first<deepseek_cjk_at>,
                                      find_first<number_run_at>};

RuleList rule_list(PreTokenizerRules rules) {
  switch (rules) {
    case PreTokenizerRules::kGpt2:
      return {kGpt2Steps, std::size(kGpt2Steps)};
    case PreTokenizerRules::kLlama3:
      return {kLlama3Steps, std::size(kLlama3Steps)};
    case PreTokenizerRules::kQwen2:
      return {kQwen2Steps, std::size(kQwen2Steps)};
    case PreTokenizerRules::kStarcoder:
      return {kStarcoderSteps, std::size(kStarcoderSteps)};
    case PreTokenizerRules::kFalcon:
      return {kFalconSteps, std::size(kFalconSteps)};
    case PreTokenizerRules::kDeepseekCoder:
      return {kDeepseekCoderSteps, std::size(kDeepseekCoderSteps)};
    case PreTokenizerRules::kDeepseekLlm:
      return {kDeepseekLlmSteps, std::size(kDeepseekLlmSteps)};
    case PreTokenizerRules::kTekken:
      return {kTekkenSteps, std::size(kTekkenSteps)};
    case PreTokenizerRules::kGpt4o:
      return {kGpt4oSteps, std::size(kGpt4oSteps)};
  }
  return {kGpt2Steps, std::size(kGpt2Steps)};
}

struct CharSpan {
  std::size_t begin;
  std::size_t end;
};

// One regex step over every current piece: matches and the gaps between them
// both become pieces.
void apply_step(Find find, const Text& t, const std::vector<CharSpan>& in,
                std::vector<CharSpan>& out) {
  out.clear();
  for (const CharSpan& piece : in) {
    std::size_t pos = piece.begin;
    while (pos < piece.end) {
      const Match m = find(t, pos, piece.end);
      if (m.length == 0) break;
      if (m.start > pos) out.push_back({pos, m.start});
      out.push_back({m.start, m.start + m.length});
      pos = m.start + m.length;
    }
    if (pos < piece.end) out.push_back({pos, piece.end});
  }
}

}  // namespace

absl::StatusOr<PreTokenizer> PreTokenizer::for_name(std::string_view pre) {
  struct Name {
    std::string_view name;
    PreTokenizerRules rules;
    bool llama3_flags = false;  // Llama 3's ignore_merges and BOS default
  };
  static constexpr Name kNames[] = {
      {"", PreTokenizerRules::kGpt2},
      {"default", PreTokenizerRules::kGpt2},
      {"gpt-2", PreTokenizerRules::kGpt2},
      {"mpt", PreTokenizerRules::kGpt2},
      {"phi-2", PreTokenizerRules::kGpt2},
      {"olmo", PreTokenizerRules::kGpt2},
      {"llama-bpe", PreTokenizerRules::kLlama3, true},
      {"llama3", PreTokenizerRules::kLlama3, true},
      {"llama-v3", PreTokenizerRules::kLlama3, true},
      {"falcon3", PreTokenizerRules::kLlama3, true},
      {"dbrx", PreTokenizerRules::kLlama3},
      {"smaug-bpe", PreTokenizerRules::kLlama3},
      {"qwen2", PreTokenizerRules::kQwen2},
      {"deepseek-r1-qwen", PreTokenizerRules::kQwen2},
      {"stablelm2", PreTokenizerRules::kQwen2},
      {"starcoder", PreTokenizerRules::kStarcoder},
      {"refact", PreTokenizerRules::kStarcoder},
      {"command-r", PreTokenizerRules::kStarcoder},
      {"smollm", PreTokenizerRules::kStarcoder},
      {"codeshell", PreTokenizerRules::kStarcoder},
      {"exaone", PreTokenizerRules::kStarcoder},
      {"falcon", PreTokenizerRules::kFalcon},
      {"deepseek-coder", PreTokenizerRules::kDeepseekCoder},
      {"deepseek-llm", PreTokenizerRules::kDeepseekLlm},
      // llama.cpp gives Mistral's Tekken Llama 3's ignore_merges and BOS
      // default, and GPT-4o neither.
      {"tekken", PreTokenizerRules::kTekken, true},
      {"gpt-4o", PreTokenizerRules::kGpt4o},
  };
  for (const Name& n : kNames) {
    if (n.name == pre) return PreTokenizer(n.rules, n.llama3_flags);
  }
  return absl::InvalidArgumentError(
      str_cat("tokenizer.ggml.pre = '", pre,
              "' is not a pre-tokenizer hearth knows (known: default, gpt-2, mpt, phi-2, olmo, "
              "llama-bpe, llama3, llama-v3, falcon3, dbrx, smaug-bpe, qwen2, deepseek-r1-qwen, "
              "stablelm2, starcoder, refact, "
              "command-r, smollm, codeshell, exaone, falcon, deepseek-coder, deepseek-llm, tekken, "
              "gpt-4o)"));
}

void PreTokenizer::split(std::string_view text, std::vector<WordSpan>& words) const {
  words.clear();
  if (text.empty()) return;
  const bool letter_case =
      rules_ == PreTokenizerRules::kTekken || rules_ == PreTokenizerRules::kGpt4o;
  const Text t(text, letter_case);
  const RuleList rules = rule_list(rules_);
  std::vector<CharSpan> pieces{{0, t.cp.size()}};
  std::vector<CharSpan> next;
  next.reserve(t.cp.size());
  for (std::size_t i = 0; i < rules.count; ++i) {
    apply_step(rules.steps[i], t, pieces, next);
    pieces.swap(next);
  }
  words.reserve(pieces.size());
  for (const CharSpan& p : pieces) words.push_back({t.byte[p.begin], t.byte[p.end]});
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  std::vector<WordSpan> spans;
  split(text, spans);
  std::vector<std::string> out;
  out.reserve(spans.size());
  for (const WordSpan& w : spans) out.emplace_back(text.substr(w.begin, w.end - w.begin));
  return out;
}

}  // namespace hearth::engine
