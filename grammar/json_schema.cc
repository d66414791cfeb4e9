#include "grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "base/json_shape.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "base/utf8.h"
#include "nlohmann/json.hpp"

namespace hearth::grammar {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::size_t kMaxSchemaText = 1 << 20;
constexpr std::size_t kMaxGrammarText = 1 << 20;
constexpr int kMaxDepth = 64;
// Raw JSON nesting checked before parsing, so a hostile text never reaches
// the parser: 64 subschema levels take at most two JSON levels each, plus
// the enum/const values inside the deepest one.
constexpr std::size_t kMaxJsonNesting = 256;
constexpr std::size_t kMaxMembers = 4096;
// The grammar notation's largest repetition bound.
constexpr std::uint64_t kMaxRepeat = 10000;
// Integer bounds beyond 18 digits could overflow the range arithmetic.
constexpr std::int64_t kMaxBound = 999'999'999'999'999'999;
// An integer with no bound on a side has at most 16 digits there.
constexpr std::int64_t kUnboundedInt = 9'999'999'999'999'999;
// Regex groups nest at most this deep: the grammar notation allows 64
// levels of parentheses, and the translation adds a few of its own.
constexpr int kMaxPatternNesting = 32;
// prefixItems nest one optional group per item.
constexpr std::size_t kMaxPrefixItems = 32;
constexpr std::uint64_t kInf = std::numeric_limits<std::uint64_t>::max();
constexpr char32_t kMaxChar = 0x10FFFF;

// ---------------------------------------------------------------------------
// GBNF text

// Code points of `s`. Strings from the JSON parser are valid UTF-8; a stray
// byte would decode as itself.
std::vector<char32_t> decode_utf8(std::string_view s) {
  std::vector<char32_t> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    if (n == 1 || i + n > s.size()) {
      out.push_back(b);
      ++i;
      continue;
    }
    char32_t c = b & (0x7F >> n);
    for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(c);
    i += n;
  }
  return out;
}

std::string hex(char32_t c, int width) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(width, '0');
  for (int i = width - 1; i >= 0; --i, c >>= 4) out[i] = kDigits[c & 0xF];
  return out;
}

// One code point as written inside a GBNF literal or character class.
// Everything outside printable ASCII is escaped, so the grammar text is
// plain ASCII whatever the schema holds.
std::string escape_char(char32_t c, bool in_class) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      break;
  }
  if (in_class && (c == '[' || c == ']' || c == '-' || c == '^'))
    return str_cat("\\", static_cast<char>(c));
  if (c < 0x20 || c == 0x7F) return str_cat("\\x", hex(c, 2));
  if (c > 0x7F) return c > 0xFFFF ? str_cat("\\U", hex(c, 8)) : str_cat("\\u", hex(c, 4));
  return std::string(1, static_cast<char>(c));
}

// A GBNF literal for the UTF-8 text `s`.
std::string literal(std::string_view s) {
  std::string out = "\"";
  for (char32_t c : decode_utf8(s)) out += escape_char(c, false);
  out += '"';
  return out;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

// A repetition suffix for `m` to `n` occurrences (n == kInf: unbounded);
// empty for exactly one.
std::string repeat(std::uint64_t m, std::uint64_t n) {
  if (m == 1 && n == 1) return "";
  if (m == 0 && n == 1) return "?";
  if (n == kInf) return m == 0 ? "*" : m == 1 ? "+" : str_cat("{", m, ",}");
  if (m == n) return str_cat("{", m, "}");
  return str_cat("{", m, ",", n, "}");
}

// ---------------------------------------------------------------------------
// Sets of code points

struct Range {
  char32_t lo, hi;  // inclusive
};
using CharSet = std::vector<Range>;  // sorted, disjoint, not adjacent once normalized

CharSet normalized(CharSet s) {
  std::sort(s.begin(), s.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
  CharSet out;
  for (const Range& r : s) {
    if (!out.empty() && r.lo <= out.back().hi + 1)
      out.back().hi = std::max(out.back().hi, r.hi);
    else
      out.push_back(r);
  }
  return out;
}

CharSet complement(const CharSet& s) {
  CharSet out;
  char32_t next = 0;
  for (const Range& r : s) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxChar) out.push_back({next, kMaxChar});
  return out;
}

CharSet intersect(const CharSet& a, const CharSet& b) {
  CharSet out;
  for (const Range& x : a)
    for (const Range& y : b)
      if (std::max(x.lo, y.lo) <= std::min(x.hi, y.hi))
        out.push_back({std::max(x.lo, y.lo), std::min(x.hi, y.hi)});
  return normalized(std::move(out));
}

bool holds(const CharSet& s, char32_t c) {
  return std::any_of(s.begin(), s.end(), [c](const Range& r) { return r.lo <= c && c <= r.hi; });
}

std::string ranges_text(const CharSet& s) {
  std::string out;
  for (const Range& r : s) {
    out += escape_char(r.lo, true);
    if (r.hi == r.lo) continue;
    if (r.hi > r.lo + 1) out += '-';
    out += escape_char(r.hi, true);
  }
  return out;
}

// A GBNF item for one code point of `s` (normalized, not empty): a literal,
// a class, or a negated class when that is shorter.
std::string class_text(const CharSet& s) {
  if (s.size() == 1 && s[0].lo == s[0].hi) {
    std::string c;
    encode_utf8(c, s[0].lo);
    return literal(c);
  }
  const CharSet neg = complement(s);
  if (neg.size() <= s.size()) return str_cat("[^", ranges_text(neg), "]");
  return str_cat("[", ranges_text(s), "]");
}

// Characters a JSON string holds as themselves: all but `"`, `\` and controls.
const CharSet kPlain = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxChar}};

// GBNF text with what a regex translation needs to know of it.
struct Gbnf {
  std::string text;
  bool single = true;    // one item: may take a repetition suffix as is
  bool literal = false;  // one "..." literal: may merge with a neighbouring literal
};

// The escape `\` + `tail` followed by one character of class `rest`
// (empty: none) as GBNF.
Gbnf escaped(std::string_view tail, const CharSet& rest) {
  if (rest.empty()) return Gbnf{literal(str_cat("\\", tail)), true, true};
  if (rest.size() == 1 && rest[0].lo == rest[0].hi) {
    std::string last;
    encode_utf8(last, rest[0].lo);
    return Gbnf{literal(str_cat("\\", tail, last)), true, true};
  }
  return Gbnf{str_cat(literal(str_cat("\\", tail)), " ", class_text(rest)), false, false};
}

// The letter of JSON's short escape for control character `c` (\b \t \n
// \f \r), or 0.
char short_escape(char32_t c) {
  switch (c) {
    case '\b':
      return 'b';
    case '\t':
      return 't';
    case '\n':
      return 'n';
    case '\f':
      return 'f';
    case '\r':
      return 'r';
    default:
      return 0;
  }
}

// The JSON string text of one code point of `s`: the character itself, or
// its escape (`\"`, `\\`, `\n`, `\u001f`: the spelling JSON encoders write).
Gbnf json_chars(const CharSet& s) {
  std::vector<Gbnf> alts;
  const CharSet plain = intersect(s, kPlain);
  if (!plain.empty()) {
    const std::string text = class_text(plain);
    alts.push_back(Gbnf{text, true, text.front() == '"'});
  }
  if (holds(s, '"')) alts.push_back(escaped("\"", {}));
  if (holds(s, '\\')) alts.push_back(escaped("\\", {}));
  CharSet short_escapes;
  CharSet low[2];  // \u000X and \u001X, by low nibble
  for (char32_t c = 0; c < 0x20; ++c) {
    if (!holds(s, c)) continue;
    if (const char e = short_escape(c); e != 0) {
      short_escapes.push_back({static_cast<char32_t>(e), static_cast<char32_t>(e)});
    } else {
      const char32_t d = c & 0xF, digit = d < 10 ? U'0' + d : U'a' + d - 10;
      low[c >> 4].push_back({digit, digit});
    }
  }
  if (!short_escapes.empty()) alts.push_back(escaped("", normalized(short_escapes)));
  for (int hi = 0; hi < 2; ++hi)
    if (!low[hi].empty()) alts.push_back(escaped(str_cat("u00", hi), normalized(low[hi])));
  if (alts.size() == 1) return alts[0];
  std::vector<std::string> texts;
  for (const Gbnf& a : alts) texts.push_back(a.text);
  return Gbnf{str_cat("( ", join(texts, " | "), " )"), true, false};
}

// ---------------------------------------------------------------------------
// Regular expressions (`pattern`): the ECMA-262 subset the docs list,
// translated to GBNF over the JSON text of the matched string.

struct Piece {
  std::string text;                // GBNF; empty for the empty string
  bool single = true;              // one item: may take a repetition suffix as is
  bool alts = false;               // alternatives at top level: needs parentheses in a sequence
  bool literal = false;            // one "..." literal: may merge with a neighbouring literal
  std::uint64_t min = 0, max = 0;  // length in code points; max kInf: unbounded
};

std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
  return (a == kInf || b == kInf || a > kInf - b) ? kInf : a + b;
}
std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b) {
  if (a == 0 || b == 0) return 0;
  return (a == kInf || b == kInf || a > kInf / b) ? kInf : a * b;
}

Piece char_piece(const CharSet& s) {
  const Gbnf g = json_chars(s);
  Piece p;
  p.text = g.text;
  p.single = g.single;
  p.literal = g.literal;
  p.min = p.max = 1;
  return p;
}

// `p` as an item of a sequence or of a repetition.
std::string grouped(const Piece& p, bool for_repeat) {
  if (p.alts || (for_repeat && !p.single)) return str_cat("( ", p.text, " )");
  return p.text;
}

Piece sequence(const std::vector<Piece>& parts) {
  std::vector<const Piece*> present;
  for (const Piece& p : parts)
    if (!p.text.empty()) present.push_back(&p);
  if (present.empty()) return Piece{};
  if (present.size() == 1) return *present[0];
  Piece out;
  std::vector<std::string> items;
  bool last_literal = false;
  for (const Piece* p : present) {
    out.min = sat_add(out.min, p->min);
    out.max = sat_add(out.max, p->max);
    if (p->literal && last_literal) {  // "ab" "c" -> "abc"
      items.back().pop_back();
      items.back() += p->text.substr(1);
      continue;
    }
    items.push_back(grouped(*p, false));
    last_literal = p->literal;
  }
  out.text = join(items, " ");
  out.single = out.literal = items.size() == 1;  // only literals merge into one item
  return out;
}

Piece alternatives(const std::vector<Piece>& alts) {
  if (alts.size() == 1) return alts[0];
  Piece out;
  out.min = kInf;
  std::vector<const Piece*> distinct;
  std::set<std::string_view> seen;
  bool optional = false;
  for (const Piece& p : alts) {
    out.min = std::min(out.min, p.min);
    out.max = std::max(out.max, p.max);
    if (p.text.empty())
      optional = true;  // `a|` is `(a)?`: the notation has no empty item
    else if (seen.insert(p.text).second)
      distinct.push_back(&p);
  }
  if (distinct.empty()) return Piece{};
  std::vector<std::string> texts;
  for (const Piece* p : distinct) texts.push_back(p->text);
  out.text = join(texts, " | ");
  out.alts = distinct.size() > 1;
  if (!out.alts) out.single = distinct[0]->single, out.literal = distinct[0]->literal;
  if (optional) {
    out.text = str_cat("( ", out.text, " )?");
    out.alts = out.literal = false;
    out.single = true;
    out.min = 0;
  }
  return out;
}

class Pattern {
 public:
  explicit Pattern(std::string_view pattern) : p_(decode_utf8(pattern)) {}

  // The GBNF for the JSON text of the strings the pattern matches (search
  // semantics: an end without an anchor lets any characters follow).
  absl::StatusOr<Piece> translate() {
    std::vector<Piece> alts;
    do {
      const bool start = eat('^');
      HEARTH_ASSIGN_OR_RETURN(Piece body, alternative(0));
      const bool end = eat('$');
      if (end && !at_end() && peek() != '|')
        return bad("the anchor $ is supported only at the end of the pattern");
      std::vector<Piece> parts;
      if (!start) parts.push_back(any_text());
      parts.push_back(std::move(body));
      if (!end) parts.push_back(any_text());
      alts.push_back(sequence(parts));
    } while (eat('|'));
    if (!at_end()) return bad("unbalanced )");
    return alternatives(std::move(alts));
  }

 private:
  bool at_end() const { return i_ >= p_.size(); }
  char32_t peek(std::size_t ahead = 0) const { return i_ + ahead < p_.size() ? p_[i_ + ahead] : 0; }
  bool eat(char32_t c) {
    if (at_end() || p_[i_] != c) return false;
    ++i_;
    return true;
  }
  static absl::Status bad(std::string_view why) {
    return absl::InvalidArgumentError(std::string(why));
  }

  // Any JSON string text: the shared `char` rule.
  static Piece any_text() {
    Piece p;
    p.text = "char*";
    p.max = kInf;
    return p;
  }

  absl::StatusOr<Piece> disjunction(int depth) {
    std::vector<Piece> alts;
    do {
      HEARTH_ASSIGN_OR_RETURN(Piece a, alternative(depth));
      alts.push_back(std::move(a));
    } while (eat('|'));
    return alternatives(std::move(alts));
  }

  absl::StatusOr<Piece> alternative(int depth) {
    std::vector<Piece> parts;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$' && depth == 0 && (i_ + 1 == p_.size() || peek(1) == '|')) break;
      HEARTH_ASSIGN_OR_RETURN(Piece atom, this->atom(depth));
      HEARTH_RETURN_IF_ERROR(quantify(atom));
      parts.push_back(std::move(atom));
    }
    if (depth > 0 && at_end()) return bad("unbalanced (");
    return sequence(parts);
  }

  absl::StatusOr<Piece> atom(int depth) {
    const char32_t c = p_[i_++];
    switch (c) {
      case '(':
        return group(depth);
      case '[': {
        HEARTH_ASSIGN_OR_RETURN(CharSet s, class_body());
        return char_piece(s);
      }
      case '.':
        return char_piece(complement(normalized({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})));
      case '\\':
        return escape_atom();
      case '^':
      case '$':
        return bad("the anchors ^ and $ are supported only at the ends of the pattern");
      case '*':
      case '+':
      case '?':
        return bad("nothing to repeat");
      case '{':
        if (quantifier_ahead(i_ - 1)) return bad("nothing to repeat");
        break;
      default:
        break;
    }
    return char_piece({{c, c}});
  }

  absl::StatusOr<Piece> group(int depth) {
    if (depth + 1 > kMaxPatternNesting)
      return bad(str_cat("groups nested deeper than ", kMaxPatternNesting));
    if (eat('?')) {
      if (eat(':')) {
      } else if (peek() == '<' && peek(1) != '=' && peek(1) != '!') {
        while (!at_end() && peek() != '>') ++i_;  // a named group: the name is irrelevant
        if (!eat('>')) return bad("unterminated group name");
      } else if (peek() == '=' || peek() == '!' || peek() == '<') {
        return bad("lookaround assertions are not supported");
      } else {
        return bad("unsupported group (?");
      }
    }
    HEARTH_ASSIGN_OR_RETURN(Piece inner, disjunction(depth + 1));
    if (!eat(')')) return bad("unbalanced (");
    return inner;
  }

  absl::StatusOr<Piece> escape_atom() {
    HEARTH_ASSIGN_OR_RETURN(CharSet s, escape(false));
    return char_piece(s);
  }

  // The set an escape (after `\`) stands for.
  absl::StatusOr<CharSet> escape(bool in_class) {
    if (at_end()) return bad("a trailing \\");
    const char32_t c = p_[i_++];
    switch (c) {
      case 'd':
      case 'D':
      case 'w':
      case 'W':
      case 's':
      case 'S': {
        CharSet s = class_escape(static_cast<char>(c | 0x20));
        return (c & 0x20) ? s : complement(s);
      }
      case 'b':
        if (in_class) return CharSet{{'\b', '\b'}};
        return bad("the word boundary \\b is not supported");
      case 'B':
        return bad("the word boundary \\B is not supported");
      case 't':
        return CharSet{{'\t', '\t'}};
      case 'n':
        return CharSet{{'\n', '\n'}};
      case 'r':
        return CharSet{{'\r', '\r'}};
      case 'v':
        return CharSet{{'\v', '\v'}};
      case 'f':
        return CharSet{{'\f', '\f'}};
      case '0':
        if (peek() >= '0' && peek() <= '9') return bad("octal escapes are not supported");
        return CharSet{{0, 0}};
      case 'x':
        return hex_escape(2);
      case 'u':
        return hex_escape(4);
      default:
        break;
    }
    if (c >= '1' && c <= '9') return bad("backreferences are not supported");
    if (c == 'k') return bad("backreferences are not supported");
    if (c == 'p' || c == 'P') return bad("Unicode property escapes are not supported");
    if (c < 0x80 && std::isalnum(static_cast<int>(c)))
      return bad(str_cat("unsupported escape \\", static_cast<char>(c)));
    return CharSet{{c, c}};
  }

  static CharSet class_escape(char kind) {
    if (kind == 'd') return {{'0', '9'}};
    if (kind == 'w') return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    // ECMA-262 WhiteSpace and LineTerminator.
    return normalized({{'\t', '\r'},
                       {' ', ' '},
                       {0xA0, 0xA0},
                       {0x1680, 0x1680},
                       {0x2000, 0x200A},
                       {0x2028, 0x2029},
                       {0x202F, 0x202F},
                       {0x205F, 0x205F},
                       {0x3000, 0x3000},
                       {0xFEFF, 0xFEFF}});
  }

  absl::StatusOr<CharSet> hex_escape(int digits) {
    char32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      const char32_t d = peek();
      if (!std::isxdigit(static_cast<int>(d < 0x80 ? d : 0)))
        return bad(digits == 2 ? "\\x needs 2 hex digits" : "\\u needs 4 hex digits");
      v = v * 16 + (d <= '9' ? d - '0' : (d | 0x20) - 'a' + 10);
      ++i_;
    }
    if (v >= 0xD800 && v <= 0xDFFF) return bad("surrogate escapes are not supported");
    return CharSet{{v, v}};
  }

  absl::StatusOr<CharSet> class_body() {
    const bool negate = eat('^');
    CharSet s;
    while (!eat(']')) {
      if (at_end()) return bad("unterminated character class");
      HEARTH_ASSIGN_OR_RETURN(CharSet lo, class_atom());
      if (peek() == '-' && peek(1) != ']' && peek(1) != 0) {
        ++i_;
        HEARTH_ASSIGN_OR_RETURN(CharSet hi, class_atom());
        if (lo.size() != 1 || hi.size() != 1 || lo[0].lo != lo[0].hi || hi[0].lo != hi[0].hi)
          return bad("a class escape cannot bound a range");
        if (lo[0].lo > hi[0].lo) return bad("a character range is out of order");
        s.push_back({lo[0].lo, hi[0].lo});
      } else {
        s.insert(s.end(), lo.begin(), lo.end());
      }
    }
    s = normalized(std::move(s));
    if (negate) s = complement(s);
    if (s.empty()) return bad("a character class that matches nothing");
    return s;
  }

  absl::StatusOr<CharSet> class_atom() {
    const char32_t c = p_[i_++];
    if (c == '\\') return escape(true);
    return CharSet{{c, c}};
  }

  // Whether a quantifier {m}, {m,} or {m,n} starts at `pos`.
  bool quantifier_ahead(std::size_t pos) const {
    std::size_t k = pos + 1, digits = 0;
    while (k < p_.size() && p_[k] >= '0' && p_[k] <= '9') ++k, ++digits;
    if (digits == 0) return false;
    if (k < p_.size() && p_[k] == ',') {
      ++k;
      while (k < p_.size() && p_[k] >= '0' && p_[k] <= '9') ++k;
    }
    return k < p_.size() && p_[k] == '}';
  }

  absl::StatusOr<std::uint64_t> number() {
    std::uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = std::min<std::uint64_t>(v * 10 + (p_[i_++] - '0'), kMaxRepeat + 1);
    }
    if (v > kMaxRepeat) return bad(str_cat("repetition counts above ", kMaxRepeat));
    return v;
  }

  absl::Status quantify(Piece& p) {
    std::uint64_t m, n;
    if (eat('*')) {
      m = 0, n = kInf;
    } else if (eat('+')) {
      m = 1, n = kInf;
    } else if (eat('?')) {
      m = 0, n = 1;
    } else if (peek() == '{' && quantifier_ahead(i_)) {
      ++i_;
      HEARTH_ASSIGN_OR_RETURN(m, number());
      n = m;
      if (eat(',')) {
        n = kInf;
        if (peek() != '}') {
          HEARTH_ASSIGN_OR_RETURN(n, number());
        }
      }
      eat('}');
      if (m > n) return bad("a repetition {m,n} with m greater than n");
    } else {
      return absl::OkStatus();
    }
    eat('?');  // a lazy quantifier matches the same strings
    if (peek() == '*' || peek() == '+' || peek() == '?' || (peek() == '{' && quantifier_ahead(i_)))
      return bad("nothing to repeat");
    if (p.text.empty() || (m == 1 && n == 1)) return absl::OkStatus();
    if (n == 0) {
      p = Piece{};
      return absl::OkStatus();
    }
    if (p.min == 0 && n > 1) return bad("a repeated part that can match the empty string");
    p.text = grouped(p, true) + repeat(m, n);
    p.single = true;
    p.alts = p.literal = false;
    p.min = sat_mul(p.min, m);
    p.max = sat_mul(p.max, n);
    return absl::OkStatus();
  }

  std::vector<char32_t> p_;
  std::size_t i_ = 0;
};

// ---------------------------------------------------------------------------
// Integer ranges: alternatives matching exactly the decimal integers (no
// leading zeros, no "-0") in [lo, hi].

std::string digit_class(int a, int b) {
  if (a == b) return str_cat("\"", static_cast<char>('0' + a), "\"");
  return str_cat("[", static_cast<char>('0' + a), "-", static_cast<char>('0' + b), "]");
}

std::string any_digits(std::size_t n) {
  if (n == 0) return "";
  return n == 1 ? "[0-9]" : str_cat("[0-9]{", n, "}");
}

void add_seq(std::vector<std::string>& items, std::string item) {
  if (!item.empty()) items.push_back(std::move(item));
}

// Appends digit `d` to a sequence of items, into its last literal if any ("2" "7" -> "27").
void push_digit(std::vector<std::string>& items, char d) {
  if (!items.empty() && items.back().size() > 2 && items.back().back() == '"')
    items.back().insert(items.back().size() - 1, 1, d);
  else
    items.push_back(str_cat("\"", d, "\""));
}

// Digit strings of x's length from x to y (x <= y, same length), each as a
// sequence of items after `prefix`, appended to `out`.
void same_length(std::string_view x, std::string_view y, std::vector<std::string> prefix,
                 std::vector<std::string>& out) {
  if (x.empty()) {
    out.push_back(join(prefix, " "));
    return;
  }
  const int a = x[0] - '0', b = y[0] - '0';
  const std::string_view rx = x.substr(1), ry = y.substr(1);
  const std::size_t m = rx.size();
  if (a == b) {
    push_digit(prefix, x[0]);
    same_length(rx, ry, std::move(prefix), out);
    return;
  }
  const bool low_full = rx.find_first_not_of('0') == std::string_view::npos;
  const bool high_full = ry.find_first_not_of('9') == std::string_view::npos;
  int mid_lo = a, mid_hi = b;
  if (!low_full) {
    std::vector<std::string> p = prefix;
    push_digit(p, x[0]);
    same_length(rx, std::string(m, '9'), std::move(p), out);
    mid_lo = a + 1;
  }
  if (!high_full) mid_hi = b - 1;
  if (mid_lo <= mid_hi) {
    std::vector<std::string> p = prefix;
    p.push_back(digit_class(mid_lo, mid_hi));
    add_seq(p, any_digits(m));
    out.push_back(join(p, " "));
  }
  if (!high_full) {
    push_digit(prefix, y[0]);
    same_length(std::string(m, '0'), ry, std::move(prefix), out);
  }
}

// Non-negative integers in [a, b], a <= b.
std::vector<std::string> natural_range(std::uint64_t a, std::uint64_t b) {
  std::vector<std::string> out;
  if (a == 0) {
    out.push_back("\"0\"");
    if (b == 0) return out;
    a = 1;
  }
  const std::size_t digits = std::to_string(b).size();
  // Lengths whose every number is in range, as one run: [1-9] [0-9]{m,n}.
  std::size_t full_from = 0, full_to = 0;
  std::uint64_t low = 1;  // 10^(len-1)
  for (std::size_t len = 1; len <= digits; ++len, low *= 10) {
    const std::uint64_t high = low * 10 - 1;
    const std::uint64_t x = std::max(a, low), y = std::min(b, high);
    if (x > y) continue;
    if (x == low && y == high) {
      if (full_from == 0) full_from = len;
      full_to = len;
      continue;
    }
    same_length(std::to_string(x), std::to_string(y), {}, out);
  }
  if (full_from != 0) {
    std::string run = "[1-9]";
    if (full_to > 1) run += " [0-9]" + repeat(full_from - 1, full_to - 1);
    out.insert(out.begin() + (out.empty() || out[0] != "\"0\"" ? 0 : 1), run);
  }
  return out;
}

std::string integer_range(std::int64_t lo, std::int64_t hi) {
  std::vector<std::string> alts;
  if (lo < 0) {
    const std::uint64_t from = hi < 0 ? static_cast<std::uint64_t>(-hi) : 1;
    const std::vector<std::string> mags = natural_range(from, static_cast<std::uint64_t>(-lo));
    if (mags.size() > 1)
      alts.push_back(str_cat("\"-\" ( ", join(mags, " | "), " )"));
    else if (mags[0][0] == '"')
      alts.push_back("\"-" + mags[0].substr(1));  // "-" "5" -> "-5"
    else
      alts.push_back("\"-\" " + mags[0]);
  }
  if (hi >= 0) {
    const std::vector<std::string> pos = natural_range(std::max<std::int64_t>(lo, 0), hi);
    alts.insert(alts.end(), pos.begin(), pos.end());
  }
  return join(alts, " | ");
}

// ---------------------------------------------------------------------------
// Shared rules, emitted when used (with what they use).

struct Primitive {
  std::string_view name, body;
  std::string_view uses;  // the shared rules it refers to, space-separated
};

// Numbers are bounded (16 integer digits, 16 fraction digits, 2 exponent
// digits: 1e99 stays a finite double) so a random sampler always finishes.
// `ws` is one optional space. Strings never hold an escaped surrogate
// (\ud800-\udfff): a pair would count as two characters toward maxLength.
constexpr Primitive kPrimitives[] = {
    {"value", "object | array | string | number | boolean | null",
     "object array string number boolean null"},
    {"object", R"("{" ws ( member ( "," ws member )* ws )? "}")", "ws member"},
    {"member", R"(string ":" ws value)", "string ws value"},
    {"array", R"("[" ws ( value ( "," ws value )* ws )? "]")", "ws value"},
    {"string", R"("\"" char* "\"")", "char"},
    {"char", R"([^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" hex4 ))", "hex4"},
    {"hex4", R"([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})", ""},
    {"number", R"(integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?)", "integer"},
    {"integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))", ""},
    {"boolean", R"("true" | "false")", ""},
    {"null", R"("null")", ""},
    {"ws", R"(" "?)", ""},
    {"key", R"("\"" key-char* "\"")", "key-char"},
    {"key-char", R"([^"\\\x00-\x1f])", ""},
    {"date", R"(year "-" month-day | leap-year "-02-29")", "year month-day leap-year"},
    {"year", R"("000" [1-9] | "00" [1-9] [0-9] | "0" [1-9] [0-9]{2} | [1-9] [0-9]{3})", ""},
    {"leap-year", R"([0-9]{2} leap-yy | leap-yy "00")", "leap-yy"},
    {"leap-yy", R"([02468] [48] | [13579] [26] | [2468] "0")", ""},
    {"month-day",
     R"("0" [13578] "-" day31 | "1" [02] "-" day31 | "0" [469] "-" day30 | "11-" day30 | "02-" day28)",
     "day31 day30 day28"},
    {"day31", R"("0" [1-9] | [12] [0-9] | "3" [01])", ""},
    {"day30", R"("0" [1-9] | [12] [0-9] | "30")", ""},
    {"day28", R"("0" [1-9] | "1" [0-9] | "2" [0-8])", ""},
    {"time",
     R"(hour ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? ( "Z" | [+-] hour ":" [0-5] [0-9] ))",
     "hour"},
    {"hour", R"([01] [0-9] | "2" [0-3])", ""},
    {"date-time", R"(date "T" time)", "date time"},
    {"uuid",
     R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})",
     ""},
};

struct Format {
  std::string_view name;
  std::uint64_t min, max;  // length in characters
};
constexpr Format kFormats[] = {
    {"date", 10, 10}, {"time", 9, 24}, {"date-time", 20, 35}, {"uuid", 36, 36}};

// ---------------------------------------------------------------------------
// Schema keywords

constexpr std::string_view kDescriptive[] = {"title",    "description", "$schema", "$id",
                                             "$comment", "examples",    "default", "deprecated",
                                             "readOnly", "writeOnly",   "$defs",   "definitions"};
constexpr std::string_view kKeywords[] = {"type",
                                          "enum",
                                          "const",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "items",
                                          "prefixItems",
                                          "minItems",
                                          "maxItems",
                                          "uniqueItems",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "format",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref"};
constexpr std::string_view kTypes[] = {"object",  "array",   "string", "number",
                                       "integer", "boolean", "null"};

template <std::size_t N>
bool in(const std::string_view (&list)[N], std::string_view s) {
  return std::find(std::begin(list), std::end(list), s) != std::end(list);
}

// The JSON pointer token for `key` (RFC 6901 escapes).
std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

// A rule name made from `hint`: letters, digits and single dashes.
std::string sanitize(std::string_view hint) {
  std::string out;
  for (char c : hint) {
    if (std::isalnum(static_cast<unsigned char>(c)) && static_cast<unsigned char>(c) < 0x80)
      out += c;
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  if (out.size() > 48) out.resize(48);
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.empty()) return "x";
  return std::isdigit(static_cast<unsigned char>(out[0])) ? "x-" + out : out;
}

// A rule name for part `part` of the value of rule `parent`.
std::string child_hint(const std::string& parent, std::string_view part) {
  if (parent == "root" && !part.empty() && !std::isdigit(static_cast<unsigned char>(part[0])))
    return std::string(part);
  return str_cat(parent, "-", part);
}

// The JSON types a value has (an integral float is also an integer).
bool has_type(const Json& v, std::string_view type) {
  switch (v.type()) {
    case Json::value_t::null:
      return type == "null";
    case Json::value_t::boolean:
      return type == "boolean";
    case Json::value_t::string:
      return type == "string";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return type == "integer" || type == "number";
    case Json::value_t::number_float: {
      const double d = v.get<double>();
      return type == "number" || (type == "integer" && std::isfinite(d) && d == std::floor(d));
    }
    case Json::value_t::array:
      return type == "array";
    case Json::value_t::object:
      return type == "object";
    default:
      return false;
  }
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The value at JSON pointer `pointer` ("" or "/a/b") in `doc`, or null.
const Json* resolve(const Json& doc, std::string_view pointer, std::string* last) {
  const Json* at = &doc;
  *last = "";
  std::size_t i = 0;
  while (i < pointer.size()) {
    if (pointer[i] != '/') return nullptr;
    const std::size_t end = std::min(pointer.find('/', i + 1), pointer.size());
    std::string token;
    for (std::size_t k = i + 1; k < end; ++k) {
      if (pointer[k] == '~' && k + 1 < end && (pointer[k + 1] == '0' || pointer[k + 1] == '1'))
        token += pointer[++k] == '0' ? '~' : '/';
      else
        token += pointer[k];
    }
    if (at->is_object()) {
      auto it = at->find(token);
      if (it == at->end()) return nullptr;
      at = &*it;
    } else if (at->is_array()) {
      if (token.empty() || token.size() > 9 ||
          token.find_first_not_of("0123456789") != token.npos ||
          (token.size() > 1 && token[0] == '0'))
        return nullptr;
      const std::size_t index = std::stoul(token);
      if (index >= at->size()) return nullptr;
      at = &(*at)[index];
    } else {
      return nullptr;
    }
    *last = token;
    i = end;
  }
  return at;
}

// A GBNF body: one item (usable as is in a sequence) or not.
struct Body {
  std::string text;
  bool single = false;
};

// Holds one level of a depth counter for the duration of a scope.
class Level {
 public:
  explicit Level(int& depth) : depth_(depth) { ++depth_; }
  ~Level() { --depth_; }
  Level(const Level&) = delete;
  Level& operator=(const Level&) = delete;

 private:
  int& depth_;
};

class Converter {
 public:
  explicit Converter(const Json& doc) : doc_(doc) {
    for (const Primitive& p : kPrimitives) names_.insert(std::string(p.name));
  }

  absl::StatusOr<std::string> run() {
    const std::string root = reserve("root");
    refs_[""] = Ref{root, 0, false};
    HEARTH_ASSIGN_OR_RETURN(Body body, schema(doc_, "", root));
    define(root, body.text);
    std::string out;
    for (const Rule& r : rules_)
      if (!r.name.empty()) out += str_cat(r.name, " ::= ", r.body, "\n");
    for (const Primitive& p : kPrimitives)
      if (used_.count(std::string(p.name))) out += str_cat(p.name, " ::= ", p.body, "\n");
    if (out.size() > kMaxGrammarText)
      return error("", str_cat("the grammar would exceed ", kMaxGrammarText, " bytes"));
    return out;
  }

 private:
  struct Rule {
    std::string name;  // empty once released
    std::string body;
  };
  struct Ref {
    std::string name;
    int struct_depth;  // struct_depth_ where its conversion started
    bool done;
  };

  static absl::Status error(std::string_view ptr, std::string_view why) {
    return absl::InvalidArgumentError(str_cat("schema #", ptr, ": ", why));
  }

  // A new unique rule name from `hint`, holding its place in the output.
  std::string reserve(std::string_view hint) {
    const std::string base = sanitize(hint);
    std::string name = base;
    if (names_.count(name)) {
      int& k = suffixes_[base];  // the next suffix to try: linear time over many equal hints
      k = std::max(k, 2);
      do name = str_cat(base, "-", k++);
      while (names_.count(name));
    }
    names_.insert(name);
    slots_[name] = rules_.size();
    rules_.push_back(Rule{name, ""});
    return name;
  }
  void define(const std::string& name, std::string body) {
    rules_[slots_[name]].body = std::move(body);
  }
  void release(const std::string& name) {
    rules_[slots_[name]].name.clear();
    names_.erase(name);
    slots_.erase(name);
  }
  // A shared rule, emitted with those it uses.
  std::string use(std::string_view name) {
    if (used_.insert(std::string(name)).second)
      for (const Primitive& p : kPrimitives)
        if (p.name == name)
          for (std::size_t i = 0; i < p.uses.size();) {
            const std::size_t end = std::min(p.uses.find(' ', i), p.uses.size());
            use(p.uses.substr(i, end - i));
            i = end + 1;
          }
    return std::string(name);
  }

  // The schema `s` as one item: a rule named from `hint` when it needs one.
  absl::StatusOr<std::string> item(const Json& s, const std::string& ptr, std::string_view hint) {
    const std::string name = reserve(hint);
    absl::StatusOr<Body> body = schema(s, ptr, name);
    if (!body.ok()) return body.status();
    if (body->single) {
      release(name);
      return body->text;
    }
    define(name, body->text);
    return name;
  }

  absl::StatusOr<Body> schema(const Json& s, const std::string& ptr, const std::string& hint) {
    if (depth_ >= kMaxDepth)
      return error(ptr, str_cat("nested deeper than ", kMaxDepth, " levels"));
    Level level(depth_);
    if (s.is_boolean()) {
      if (!s.get<bool>()) return error(ptr, "the schema false accepts no value");
      return Body{use("value"), true};
    }
    if (!s.is_object()) return error(ptr, "a schema must be an object or a boolean");
    for (const auto& entry : s.items()) {
      const std::string& key = entry.key();
      if (!in(kDescriptive, key) && !in(kKeywords, key))
        return error(ptr, str_cat("unsupported keyword \"", key, "\""));
    }
    if (s.contains("$ref")) return ref(s, ptr);
    if (s.contains("allOf")) return all_of(s, ptr, hint);
    if (s.contains("anyOf") || s.contains("oneOf")) return any_of(s, ptr, hint);
    if (s.contains("enum") || s.contains("const")) return enumeration(s, ptr);
    return typed(s, ptr, hint);
  }

  // Refuses any keyword of `s` besides the descriptive ones and `allowed`.
  static absl::Status only(const Json& s, const std::string& ptr, std::string_view keyword,
                           std::initializer_list<std::string_view> allowed) {
    for (const auto& entry : s.items()) {
      const std::string& key = entry.key();
      if (key == keyword || in(kDescriptive, key) ||
          std::find(allowed.begin(), allowed.end(), key) != allowed.end())
        continue;
      return error(ptr, str_cat("\"", key, "\" alongside \"", keyword, "\" is not supported"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Body> ref(const Json& s, const std::string& ptr) {
    HEARTH_RETURN_IF_ERROR(only(s, ptr, "$ref", {}));
    const std::string at = ptr + "/$ref";
    if (!s["$ref"].is_string()) return error(at, "must be a string");
    const std::string target = s["$ref"].get<std::string>();
    if (target.empty() || target[0] != '#')
      return error(at, str_cat("unsupported reference \"", target,
                               "\" (only references inside the schema, \"#...\")"));
    const std::string pointer = percent_decode(std::string_view(target).substr(1));
    if (auto it = refs_.find(pointer); it != refs_.end()) {
      if (!it->second.done && it->second.struct_depth == struct_depth_)
        return error(at, str_cat("reference \"", target,
                                 "\" loops back to itself before any character is written"));
      return Body{it->second.name, true};
    }
    std::string last;
    const Json* def = resolve(doc_, pointer, &last);
    if (def == nullptr) return error(at, str_cat("unresolved reference \"", target, "\""));
    const std::string name = reserve(last.empty() ? "def" : last);
    refs_[pointer] = Ref{name, struct_depth_, false};
    HEARTH_ASSIGN_OR_RETURN(Body body, schema(*def, pointer, name));
    define(name, body.text);
    refs_[pointer].done = true;
    return Body{name, true};
  }

  absl::StatusOr<Body> all_of(const Json& s, const std::string& ptr, const std::string& hint) {
    HEARTH_RETURN_IF_ERROR(only(s, ptr, "allOf", {}));
    const Json& list = s["allOf"];
    if (!list.is_array() || list.size() != 1)
      return error(ptr, "allOf is supported only with exactly one schema");
    return schema(list[0], ptr + "/allOf/0", hint);
  }

  absl::StatusOr<Body> any_of(const Json& s, const std::string& ptr, const std::string& hint) {
    if (s.contains("anyOf") && s.contains("oneOf"))
      return error(ptr, "\"oneOf\" alongside \"anyOf\" is not supported");
    const std::string keyword = s.contains("anyOf") ? "anyOf" : "oneOf";
    HEARTH_RETURN_IF_ERROR(only(s, ptr, keyword, {}));
    const Json& list = s[keyword];
    const std::string at = str_cat(ptr, "/", keyword);
    if (!list.is_array() || list.empty()) return error(at, "must be a non-empty array");
    std::vector<std::string> alts;
    std::set<std::string> seen;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (list[i].is_boolean() && !list[i].get<bool>()) continue;  // matches nothing
      HEARTH_ASSIGN_OR_RETURN(std::string alt,
                              item(list[i], str_cat(at, "/", i), child_hint(hint, str_cat(i))));
      if (seen.insert(alt).second) alts.push_back(alt);
    }
    if (alts.empty()) return error(at, "no alternative accepts any value");
    return Body{join(alts, " | "), alts.size() == 1};
  }

  absl::StatusOr<std::vector<std::string>> types(const Json& s, const std::string& ptr) {
    std::vector<std::string> out;
    if (!s.contains("type")) return out;
    const Json& t = s["type"];
    const Json list = t.is_array() ? t : Json::array({t});
    for (const Json& v : list) {
      if (!v.is_string() || !in(kTypes, v.get<std::string>()))
        return error(ptr + "/type", str_cat("unknown type ", v.dump()));
      if (std::find(out.begin(), out.end(), v.get<std::string>()) == out.end())
        out.push_back(v.get<std::string>());
    }
    if (out.empty()) return error(ptr + "/type", "an empty list of types accepts no value");
    return out;
  }

  absl::StatusOr<Body> enumeration(const Json& s, const std::string& ptr) {
    HEARTH_RETURN_IF_ERROR(
        only(s, ptr, s.contains("enum") ? "enum" : "const", {"type", "enum", "const"}));
    HEARTH_ASSIGN_OR_RETURN(std::vector<std::string> allowed, types(s, ptr));
    if (s.contains("enum") && !s["enum"].is_array()) return error(ptr, "enum must be an array");
    if (s.contains("enum") && s["enum"].empty()) return error(ptr, "enum is empty");
    const Json values = s.contains("enum") ? s["enum"] : Json::array({s["const"]});
    std::vector<std::string> alts;
    std::set<std::string> seen;
    for (const Json& v : values) {
      if (s.contains("const") && v != s["const"]) continue;
      if (!allowed.empty() && std::none_of(allowed.begin(), allowed.end(),
                                           [&](const std::string& t) { return has_type(v, t); }))
        continue;
      std::string text = literal(v.dump());
      if (seen.insert(text).second) alts.push_back(std::move(text));
    }
    if (alts.empty()) return error(ptr, "no value of enum/const satisfies the schema's type");
    return Body{join(alts, " | "), alts.size() == 1};
  }

  // The types that keywords imply when `type` is absent (JSON schema would
  // also accept any value of another type; the grammar does not).
  static std::vector<std::string> implied_types(const Json& s) {
    std::vector<std::string> out;
    auto any = [&](std::initializer_list<std::string_view> keys) {
      return std::any_of(keys.begin(), keys.end(),
                         [&](std::string_view k) { return s.contains(std::string(k)); });
    };
    if (any({"properties", "required", "additionalProperties"})) out.push_back("object");
    if (any({"items", "prefixItems", "minItems", "maxItems", "uniqueItems"}))
      out.push_back("array");
    if (any({"minLength", "maxLength", "pattern", "format"})) out.push_back("string");
    if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
      out.push_back("number");
    return out;
  }

  absl::StatusOr<Body> typed(const Json& s, const std::string& ptr, const std::string& hint) {
    HEARTH_ASSIGN_OR_RETURN(std::vector<std::string> list, types(s, ptr));
    if (list.empty()) list = implied_types(s);
    if (list.empty()) return Body{use("value"), true};
    if (std::find(list.begin(), list.end(), "number") != list.end())
      list.erase(std::remove(list.begin(), list.end(), "integer"), list.end());
    if (list.size() == 1) return one_type(s, ptr, hint, list[0]);
    std::vector<std::string> alts;
    for (const std::string& t : list) {
      const std::string name = reserve(child_hint(hint, t));
      absl::StatusOr<Body> body = one_type(s, ptr, name, t);
      if (!body.ok()) return body.status();
      if (body->single) {
        release(name);
        alts.push_back(body->text);
      } else {
        define(name, body->text);
        alts.push_back(name);
      }
    }
    return Body{join(alts, " | "), false};
  }

  absl::StatusOr<Body> one_type(const Json& s, const std::string& ptr, const std::string& hint,
                                const std::string& type) {
    if (type == "null" || type == "boolean") return Body{use(type), true};
    if (type == "integer") return integer(s, ptr);
    if (type == "number") return number(s, ptr);
    if (type == "string") return string(s, ptr);
    if (type == "array") return array(s, ptr, hint);
    return object(s, ptr, hint);
  }

  // --- numbers

  struct Bound {
    std::string keyword;  // empty: none
    std::int64_t value = 0;
  };

  // The integer bound keyword `kw` sets (lower: from below), as an inclusive bound.
  static absl::StatusOr<Bound> int_bound(const Json& s, const std::string& ptr,
                                         const std::string& kw, bool lower) {
    if (!s.contains(kw)) return Bound{};
    const Json& v = s[kw];
    const bool exclusive = kw.starts_with("exclusive");
    if (!v.is_number()) return error(ptr, str_cat(kw, " must be a number"));
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(kMaxBound))
        return error(ptr, str_cat(kw, " ", v.dump(), " is out of the supported range (18 digits)"));
      const double b = lower ? (exclusive ? std::floor(d) + 1 : std::ceil(d))
                             : (exclusive ? std::ceil(d) - 1 : std::floor(d));
      return Bound{kw, static_cast<std::int64_t>(b)};
    }
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxBound))
      return error(ptr, str_cat(kw, " ", v.dump(), " is out of the supported range (18 digits)"));
    const std::int64_t i = v.get<std::int64_t>();
    if (i > kMaxBound || i < -kMaxBound)
      return error(ptr, str_cat(kw, " ", v.dump(), " is out of the supported range (18 digits)"));
    return Bound{kw, exclusive ? (lower ? i + 1 : i - 1) : i};
  }

  // The tighter of two bounds.
  static Bound tighter(const Bound& a, const Bound& b, bool lower) {
    if (a.keyword.empty()) return b;
    if (b.keyword.empty()) return a;
    return (lower ? a.value >= b.value : a.value <= b.value) ? a : b;
  }

  static std::int64_t widest_of_length(std::int64_t v) {
    std::int64_t w = 9;
    while (w < v) w = w * 10 + 9;
    return w;
  }

  absl::StatusOr<Body> integer(const Json& s, const std::string& ptr) {
    HEARTH_ASSIGN_OR_RETURN(Bound min, int_bound(s, ptr, "minimum", true));
    HEARTH_ASSIGN_OR_RETURN(Bound xmin, int_bound(s, ptr, "exclusiveMinimum", true));
    HEARTH_ASSIGN_OR_RETURN(Bound max, int_bound(s, ptr, "maximum", false));
    HEARTH_ASSIGN_OR_RETURN(Bound xmax, int_bound(s, ptr, "exclusiveMaximum", false));
    const Bound lo = tighter(min, xmin, true), hi = tighter(max, xmax, false);
    if (lo.keyword.empty() && hi.keyword.empty()) return Body{use("integer"), true};
    if (!lo.keyword.empty() && !hi.keyword.empty() && lo.value > hi.value) {
      const Json &a = s[lo.keyword], &b = s[hi.keyword];
      if (a.get<double>() > b.get<double>())
        return error(ptr, str_cat(lo.keyword, " ", a.dump(), " is greater than ", hi.keyword, " ",
                                  b.dump()));
      return error(ptr, str_cat("no integer satisfies ", lo.keyword, " ", a.dump(), " and ",
                                hi.keyword, " ", b.dump()));
    }
    std::int64_t from = lo.value, to = hi.value;
    if (lo.keyword.empty()) from = -std::max(kUnboundedInt, widest_of_length(-to));
    if (hi.keyword.empty()) to = std::max(kUnboundedInt, widest_of_length(from));
    const std::string text = integer_range(from, to);
    return Body{text, text.find('|') == std::string::npos && text.find(' ') == std::string::npos};
  }

  absl::StatusOr<Body> number(const Json& s, const std::string& ptr) {
    for (const char* kw : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(kw))
        return error(ptr, str_cat("\"", kw, "\" is supported only with type integer"));
    return Body{use("number"), true};
  }

  // --- strings

  static absl::StatusOr<std::optional<std::uint64_t>> count(const Json& s, const std::string& ptr,
                                                            const std::string& kw) {
    if (!s.contains(kw)) return std::nullopt;
    const Json& v = s[kw];
    if (v.is_number_float() && v.get<double>() >= 0 &&
        v.get<double>() == std::floor(v.get<double>()) && v.get<double>() < 1e18)
      return static_cast<std::uint64_t>(v.get<double>());
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
      return error(ptr, str_cat(kw, " must be a non-negative integer"));
    return v.get<std::uint64_t>();
  }

  // minX and maxX: the range, refused when empty; a maximum above the
  // notation's repetition bound means no maximum.
  static absl::StatusOr<std::pair<std::uint64_t, std::uint64_t>> count_range(
      const Json& s, const std::string& ptr, const std::string& min_kw, const std::string& max_kw) {
    HEARTH_ASSIGN_OR_RETURN(std::optional<std::uint64_t> min, count(s, ptr, min_kw));
    HEARTH_ASSIGN_OR_RETURN(std::optional<std::uint64_t> max, count(s, ptr, max_kw));
    if (min && max && *min > *max)
      return error(ptr, str_cat(min_kw, " ", *min, " is greater than ", max_kw, " ", *max));
    if (min && *min > kMaxRepeat)
      return error(ptr, str_cat(min_kw, " above ", kMaxRepeat, " is not supported"));
    return std::pair{min.value_or(0), max && *max <= kMaxRepeat ? *max : kInf};
  }

  absl::StatusOr<Body> string(const Json& s, const std::string& ptr) {
    HEARTH_ASSIGN_OR_RETURN(auto len, count_range(s, ptr, "minLength", "maxLength"));
    const bool limited = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format")) {
      if (s.contains("pattern"))
        return error(ptr, "\"pattern\" alongside \"format\" is not supported");
      return formatted(s, ptr, len, limited);
    }
    if (s.contains("pattern")) return patterned(s, ptr, len, limited);
    if (len.first == 0 && len.second == kInf) return Body{use("string"), true};
    if (len.second == 0) return Body{R"("\"\"")", true};
    return Body{str_cat(R"("\"" )", use("char"), repeat(len.first, len.second), R"( "\"")"), false};
  }

  static absl::Status fits(const std::string& ptr, std::pair<std::uint64_t, std::uint64_t> len,
                           std::uint64_t min, std::uint64_t max, std::string_view what) {
    if (min >= len.first && max <= len.second) return absl::OkStatus();
    return error(ptr, str_cat("minLength/maxLength alongside ", what,
                              " are supported only when every string it allows has such a length"));
  }

  absl::StatusOr<Body> formatted(const Json& s, const std::string& ptr,
                                 std::pair<std::uint64_t, std::uint64_t> len, bool limited) {
    const Json& f = s["format"];
    const std::string name = f.is_string() ? f.get<std::string>() : f.dump();
    for (const Format& format : kFormats) {
      if (format.name != name) continue;
      if (limited)
        HEARTH_RETURN_IF_ERROR(fits(ptr, len, format.min, format.max, str_cat("format ", name)));
      return Body{str_cat(R"("\"" )", use(format.name), R"( "\"")"), false};
    }
    return error(
        ptr, str_cat("unsupported format \"", name, "\" (supported: date, time, date-time, uuid)"));
  }

  absl::StatusOr<Body> patterned(const Json& s, const std::string& ptr,
                                 std::pair<std::uint64_t, std::uint64_t> len, bool limited) {
    if (!s["pattern"].is_string()) return error(ptr, "pattern must be a string");
    const std::string source = s["pattern"].get<std::string>();
    absl::StatusOr<Piece> piece = Pattern(source).translate();
    if (!piece.ok())
      return error(ptr, str_cat("pattern ", Json(source).dump(), ": ", piece.status().message()));
    if (limited) HEARTH_RETURN_IF_ERROR(fits(ptr, len, piece->min, piece->max, "pattern"));
    if (piece->text.find("char") != std::string::npos) use("char");
    Piece quote;
    quote.text = R"("\"")";
    quote.literal = true;
    const Piece whole = sequence({quote, *piece, quote});
    return Body{whole.text, whole.single};
  }

  // --- arrays

  absl::StatusOr<Body> array(const Json& s, const std::string& ptr, const std::string& hint) {
    if (s.contains("uniqueItems") && s["uniqueItems"] != Json(false))
      return error(ptr, "\"uniqueItems\" is supported only as false");
    HEARTH_ASSIGN_OR_RETURN(auto count, count_range(s, ptr, "minItems", "maxItems"));
    auto [lo, hi] = count;
    const Json prefix = s.value("prefixItems", Json::array());
    if (!prefix.is_array()) return error(ptr, "prefixItems must be an array");
    if (prefix.size() > kMaxPrefixItems)
      return error(ptr, str_cat("prefixItems longer than ", kMaxPrefixItems, " is not supported"));
    Level inside(struct_depth_);
    std::vector<std::string> elements;
    for (std::size_t i = 0; i < prefix.size(); ++i) {
      if (prefix[i] == Json(false)) break;  // no element may stand at i
      HEARTH_ASSIGN_OR_RETURN(std::string e, item(prefix[i], str_cat(ptr, "/prefixItems/", i),
                                                  child_hint(hint, str_cat(i))));
      elements.push_back(e);
    }
    // Without "items", an array with prefixItems ends after them (docs).
    std::optional<std::string> extra;
    const bool cut = elements.size() < prefix.size();
    if (!cut && s.contains("items") && s["items"] != Json(false)) {
      HEARTH_ASSIGN_OR_RETURN(extra, item(s["items"], ptr + "/items", child_hint(hint, "item")));
    } else if (!cut && !s.contains("items") && prefix.empty()) {
      extra = use("value");
    }
    const std::uint64_t k = elements.size();
    if (!extra) hi = std::min<std::uint64_t>(hi, k);
    if (lo > hi)
      return error(ptr, str_cat("minItems ", lo, " cannot be met: at most ", hi, " items"));
    use("ws");
    return Body{array_text(elements, extra, lo, hi), false};
  }

  static std::string array_text(const std::vector<std::string>& elements,
                                const std::optional<std::string>& extra, std::uint64_t lo,
                                std::uint64_t hi) {
    const std::uint64_t k = elements.size();
    std::string inner;
    if (extra) {
      if (k == 0) {
        if (hi == 0) return R"("[" ws "]")";
        inner = str_cat(*extra, hi == 1 ? "" : str_cat(R"( ( "," ws )", *extra, " )"),
                        hi == 1 ? "" : repeat(lo > 1 ? lo - 1 : 0, hi == kInf ? kInf : hi - 1));
      } else if (hi > k) {
        inner = str_cat(R"(( "," ws )", *extra, " )",
                        repeat(lo > k ? lo - k : 0, hi == kInf ? kInf : hi - k));
      }
    }
    for (std::uint64_t pos = k; pos-- > 0;) {
      if (pos >= hi) continue;
      std::string seg = pos == 0 ? elements[0] : str_cat(R"("," ws )", elements[pos]);
      if (!inner.empty()) seg += " " + inner;
      inner = (pos < lo || pos == 0) ? seg : str_cat("( ", seg, " )?");
    }
    if (inner.empty()) return R"("[" ws "]")";
    if (lo == 0) return str_cat(R"("[" ws ( )", inner, R"( ws )? "]")");
    return str_cat(R"("[" ws )", inner, R"( ws "]")");
  }

  // --- objects

  struct Property {
    std::string name, item;
    bool required;
  };

  absl::StatusOr<Body> object(const Json& s, const std::string& ptr, const std::string& hint) {
    const Json props = s.value("properties", Json::object());
    const Json required = s.value("required", Json::array());
    if (!props.is_object()) return error(ptr, "properties must be an object");
    if (!required.is_array() ||
        !std::all_of(required.begin(), required.end(), [](const Json& v) { return v.is_string(); }))
      return error(ptr, "required must be an array of strings");
    std::set<std::string> required_names, described;
    for (const Json& name : required) required_names.insert(name.get<std::string>());
    auto is_required = [&](const std::string& name) { return required_names.count(name) > 0; };
    Level inside(struct_depth_);
    std::vector<Property> list;
    for (const auto& [name, sub] : props.items()) {
      const std::string at = str_cat(ptr, "/properties/", pointer_token(name));
      described.insert(name);
      if (sub == Json(false)) {
        if (is_required(name))
          return error(at, str_cat("required property \"", name, "\" has schema false"));
        continue;
      }
      HEARTH_ASSIGN_OR_RETURN(std::string value, item(sub, at, child_hint(hint, name)));
      list.push_back(Property{name, value, is_required(name)});
    }
    const bool closed =
        s.contains("additionalProperties") && s["additionalProperties"] == Json(false);
    for (const Json& name : required) {  // required but not described: any value
      if (!described.insert(name.get<std::string>()).second) continue;
      if (closed)
        return error(ptr, str_cat("required property \"", name.get<std::string>(),
                                  "\" is not in properties and additionalProperties is false: "
                                  "no object satisfies the schema"));
      list.push_back(Property{name.get<std::string>(), use("value"), true});
    }
    std::optional<std::string> extra;
    if (s.contains("additionalProperties") && s["additionalProperties"] != Json(false)) {
      HEARTH_ASSIGN_OR_RETURN(std::string value,
                              item(s["additionalProperties"], ptr + "/additionalProperties",
                                   child_hint(hint, "extra")));
      extra = str_cat(key_rule(list, hint), " \":\" ws ", value);
    }
    use("ws");
    return Body{object_text(list, extra, hint), false};
  }

  // The key of an additional property: any string without escapes that is
  // not a declared property's name.
  std::string key_rule(const std::vector<Property>& list, const std::string& hint) {
    struct Node {
      std::map<char32_t, std::size_t> next;
      bool terminal = false;
      std::string name;
    };
    std::vector<Node> trie(1);
    for (const Property& p : list) {
      const std::vector<char32_t> cps = decode_utf8(p.name);
      if (std::any_of(cps.begin(), cps.end(), [](char32_t c) { return !holds(kPlain, c); }))
        continue;  // a key without escapes never equals it
      std::size_t at = 0;
      for (char32_t c : cps) {
        auto [it, fresh] = trie[at].next.emplace(c, trie.size());
        if (fresh) trie.emplace_back();
        at = it->second;
      }
      trie[at].terminal = true;
    }
    if (trie.size() == 1) return use("key");
    use("key-char");
    for (Node& n : trie) n.name = reserve(child_hint(hint, "extra-key"));
    for (const Node& n : trie) {
      std::vector<std::string> alts;
      CharSet taken = {{'"', '"'}, {'\\', '\\'}, {0, 0x1F}};
      for (const auto& [c, child] : n.next) {
        std::string ch;
        encode_utf8(ch, c);
        alts.push_back(str_cat(literal(ch), " ", trie[child].name));
        taken.push_back({c, c});
      }
      alts.push_back(str_cat(class_text(complement(normalized(taken))), " key-char*"));
      const std::string body = join(alts, " | ");
      define(n.name, n.terminal ? body : str_cat("( ", body, " )?"));
    }
    return str_cat(R"("\"" )", trie[0].name, R"( "\"")");
  }

  std::string object_text(const std::vector<Property>& list,
                          const std::optional<std::string>& extra, const std::string& hint) {
    const std::size_t n = list.size();
    std::vector<std::string> kv(n), comma(n);
    for (std::size_t i = 0; i < n; ++i) {
      kv[i] = str_cat(literal(Json(list[i].name).dump() + ":"), " ws ", list[i].item);
      comma[i] =
          list[i].required ? str_cat(R"("," ws )", kv[i]) : str_cat(R"(( "," ws )", kv[i], " )?");
    }
    std::size_t first_required = n;
    for (std::size_t i = 0; i < n; ++i)
      if (list[i].required) {
        first_required = i;
        break;
      }
    // Alternative j: property j is the first written; those after it follow
    // with their commas. More than two alternatives share the tails as rules.
    const std::size_t alts_count = std::min(first_required + 1, n);
    // tails[i]: the properties from i on, each after its comma.
    std::vector<std::string> tails(n + 1);
    if (alts_count <= 2) {
      for (std::size_t j = 1; j <= alts_count && j < n; ++j)
        tails[j] = join(std::vector<std::string>(comma.begin() + j, comma.end()), " ");
    } else {
      for (std::size_t i = n; i-- > 1;) {
        if (i + 1 == n) {
          tails[i] = comma[i];
          continue;
        }
        tails[i] = reserve(child_hint(hint, "rest"));
        define(tails[i], str_cat(comma[i], " ", tails[i + 1]));
      }
    }
    const std::string more = extra ? str_cat(R"(( "," ws )", *extra, " )*") : "";
    std::vector<std::string> alts;
    for (std::size_t j = 0; j < alts_count; ++j) {
      std::string a = kv[j];
      if (!tails[j + 1].empty()) a += " " + tails[j + 1];
      if (!more.empty()) a += " " + more;
      alts.push_back(a);
    }
    const bool may_be_empty = first_required == n;
    if (extra && may_be_empty) alts.push_back(str_cat(*extra, " ", more));
    if (alts.empty()) return R"("{" ws "}")";
    const std::string body = alts.size() == 1 ? alts[0] : str_cat("( ", join(alts, " | "), " )");
    if (may_be_empty) return str_cat(R"("{" ws ( )", body, R"( ws )? "}")");
    return str_cat(R"("{" ws )", body, R"( ws "}")");
  }

  const Json& doc_;
  std::vector<Rule> rules_;
  std::map<std::string, std::size_t> slots_;
  std::set<std::string> names_;
  std::map<std::string, int> suffixes_;
  std::set<std::string> used_;
  std::map<std::string, Ref> refs_;
  int depth_ = 0;         // subschemas being converted
  int struct_depth_ = 0;  // objects and arrays entered: characters written since
};

}  // namespace

std::string_view any_json_gbnf() {
  static const std::string* const kText = [] {
    auto* text = new std::string("root ::= value\n");
    for (const Primitive& p : kPrimitives) {
      if (p.name == "key") break;  // the rules after it serve schemas only
      *text += str_cat(p.name, " ::= ", p.body, "\n");
    }
    return text;
  }();
  return *kText;
}

absl::StatusOr<std::string> json_schema_to_gbnf(std::string_view schema_json) {
  if (schema_json.size() > kMaxSchemaText)
    return absl::InvalidArgumentError(str_cat("schema #: longer than ", kMaxSchemaText, " bytes"));
  // Refused before it is parsed: nlohmann copies deep values recursively,
  // and its order-keeping objects check each new key against all the others.
  if (const std::string problem = json_shape_problem(schema_json, kMaxJsonNesting, kMaxMembers);
      !problem.empty())
    return absl::InvalidArgumentError(str_cat("schema #: ", problem));
  Json doc;
  try {
    doc = Json::parse(schema_json);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a huge number
    std::string_view why = e.what();
    if (const std::size_t end = why.find("] "); why.starts_with("[json") && end != why.npos)
      why.remove_prefix(end + 2);
    return absl::InvalidArgumentError(str_cat("schema #: not valid JSON: ", why));
  }
  return Converter(doc).run();
}

}  // namespace hearth::grammar
