#include "chat/lexer.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/utf8.h"

namespace hearth::chat {
namespace {

// "\r\n" and "\r" -> "\n", then one trailing newline dropped (jinja2's
// keep_trailing_newline=False).
std::string normalize_newlines(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      out.push_back(in[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_ascii_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's str.rstrip() (Unicode whitespace).
std::string_view rstrip_py(std::string_view s) {
  if (is_ascii(s)) {
    while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
    return s;
  }
  const std::vector<char32_t> cps = utf8_decode(s);
  size_t keep = cps.size();
  while (keep > 0 && is_py_space(cps[keep - 1])) --keep;
  return s.substr(0, utf8_encode(cps, 0, keep).size());
}

// Length of the run of Python whitespace at the start of s.
size_t leading_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (is_ascii_space(s[i])) {
      ++i;
      continue;
    }
    if (static_cast<unsigned char>(s[i]) < 0x80) break;
    const size_t len = std::min<size_t>(4, s.size() - i);
    const std::vector<char32_t> cps = utf8_decode(s.substr(i, len));
    if (cps.empty() || !is_py_space(cps[0])) break;
    std::string enc;
    utf8_append(enc, cps[0]);
    i += enc.size();
  }
  return i;
}

bool all_space(std::string_view s) { return !s.empty() && leading_space(s) == s.size(); }

const char* const kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                  "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                  ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  absl::StatusOr<std::vector<Token>> run() {
    while (pos_ < src_.size()) HEARTH_RETURN_IF_ERROR(next_segment());
    tokens_.push_back(Token{TokenType::kEof, "", pos_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  Pos pos_at(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return Pos{static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1] + 1)};
  }

  absl::Status error(size_t offset, std::string_view msg) const {
    const Pos p = pos_at(offset);
    return absl::InvalidArgumentError(
        str_cat("template syntax error at ", p.line, ":", p.col, ": ", msg));
  }

  bool at(size_t i, std::string_view s) const { return src_.compare(i, s.size(), s) == 0; }

  // Text up to the next tag, whitespace-controlled, then the tag itself.
  absl::Status next_segment() {
    size_t start = src_.find('{', pos_);
    while (start != std::string::npos && !(at(start, "{{") || at(start, "{%") || at(start, "{#")))
      start = src_.find('{', start + 1);
    if (start == std::string::npos) {
      emit_text(std::string_view(src_).substr(pos_), pos_);
      pos_ = src_.size();
      return absl::OkStatus();
    }
    const char kind = src_[start + 1];
    const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
    const bool raw = kind == '%' && is_raw_begin(start);
    std::string_view text = std::string_view(src_).substr(pos_, start - pos_);
    text = control_text(text, sign, kind != '{');
    emit_text(text, pos_);
    if (raw) return lex_raw(start);
    if (kind == '#') return skip_comment(start);
    return lex_tag(start, kind);
  }

  // Applies `{%-` / lstrip_blocks to the text before a tag.
  std::string_view control_text(std::string_view text, char sign, bool block_or_comment) const {
    if (sign == '-') return rstrip_py(text);
    if (sign == '+' || !block_or_comment) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting_) && all_space(text.substr(l_pos)))
      return text.substr(0, l_pos);
    return text;
  }

  void emit_text(std::string_view text, size_t offset) {
    if (!text.empty())
      tokens_.push_back(Token{TokenType::kText, std::string(text), pos_at(offset)});
  }

  // After an end tag: jinja2's "-%}\s*", "+%}" or "%}\n?" (trim_blocks).
  size_t consume_end(size_t i, std::string_view end, bool trim_newline) {
    if (src_[i] == '-') {
      i += 1 + end.size();
      i += leading_space(std::string_view(src_).substr(i));
    } else if (src_[i] == '+') {
      i += 1 + end.size();
    } else {
      i += end.size();
      if (trim_newline && i < src_.size() && src_[i] == '\n') ++i;
    }
    line_starting_ = src_[i - 1] == '\n';
    return i;
  }

  absl::Status skip_comment(size_t start) {
    size_t body = start + 2;
    if (body < src_.size() && (src_[body] == '-' || src_[body] == '+')) ++body;
    const size_t close = src_.find("#}", body);
    if (close == std::string::npos) return error(start, "missing end of comment tag");
    size_t end_at = close;
    if (close > body && (src_[close - 1] == '-' || src_[close - 1] == '+')) end_at = close - 1;
    pos_ = consume_end(end_at, "#}", true);
    return absl::OkStatus();
  }

  // `{%(-|+)? raw (-)?%}` at start.
  bool is_raw_begin(size_t start) const {
    size_t i = start + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    while (i < src_.size() && is_ascii_space(src_[i])) ++i;
    if (!at(i, "raw")) return false;
    i += 3;
    while (i < src_.size() && is_ascii_space(src_[i])) ++i;
    return at(i, "%}") || at(i, "-%}");
  }

  absl::Status lex_raw(size_t start) {
    size_t i = src_.find("%}", start) + 2;
    if (src_[i - 3] == '-') i += leading_space(std::string_view(src_).substr(i));
    line_starting_ = src_[i - 1] == '\n';
    for (size_t search = i;;) {
      const size_t tag = src_.find("{%", search);
      if (tag == std::string::npos) return error(start, "missing end of raw directive");
      size_t j = tag + 2;
      const char sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : '\0';
      if (sign != '\0') ++j;
      while (j < src_.size() && is_ascii_space(src_[j])) ++j;
      if (!at(j, "endraw")) {
        search = tag + 2;
        continue;
      }
      j += 6;
      while (j < src_.size() && is_ascii_space(src_[j])) ++j;
      if (!(at(j, "%}") || at(j, "-%}") || at(j, "+%}"))) {
        search = tag + 2;
        continue;
      }
      emit_text(control_text(std::string_view(src_).substr(i, tag - i), sign, true), i);
      pos_ = consume_end(j, "%}", true);
      return absl::OkStatus();
    }
  }

  absl::Status lex_tag(size_t start, char kind) {
    const bool block = kind == '%';
    const std::string_view end = block ? "%}" : "}}";
    tokens_.push_back(Token{block ? TokenType::kBlockBegin : TokenType::kVarBegin,
                            block ? "{%" : "{{", pos_at(start)});
    size_t i = start + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    std::vector<char> balance;
    while (true) {
      if (i >= src_.size()) return error(start, "unexpected end of template inside a tag");
      if (balance.empty()) {
        const bool dash_end = src_[i] == '-' && at(i + 1, end);
        const bool plus_end = block && src_[i] == '+' && at(i + 1, end);
        if (at(i, end) || dash_end || plus_end) {
          tokens_.push_back(Token{block ? TokenType::kBlockEnd : TokenType::kVarEnd,
                                  std::string(end), pos_at(i)});
          pos_ = consume_end(i, end, block);
          return absl::OkStatus();
        }
      }
      if (is_ascii_space(src_[i])) {
        ++i;
        continue;
      }
      HEARTH_ASSIGN_OR_RETURN(i, lex_token(i, balance));
    }
  }

  absl::StatusOr<size_t> lex_token(size_t i, std::vector<char>& balance) {
    const char c = src_[i];
    if (is_digit(c)) return lex_number(i);
    if (is_name_start(c)) {
      size_t j = i;
      while (j < src_.size() && is_name_char(src_[j])) ++j;
      tokens_.push_back(Token{TokenType::kName, src_.substr(i, j - i), pos_at(i)});
      return j;
    }
    if (c == '\'' || c == '"') return lex_string(i);
    for (const char* op : kOperators) {
      if (!at(i, op)) continue;
      const std::string_view o(op);
      if (o == "(" || o == "[" || o == "{")
        balance.push_back(o == "(" ? ')' : o == "[" ? ']' : '}');
      if (o == ")" || o == "]" || o == "}") {
        if (balance.empty()) return error(i, str_cat("unexpected '", o, "'"));
        if (balance.back() != o[0])
          return error(i, str_cat("unexpected '", o, "', expected '", balance.back(), "'"));
        balance.pop_back();
      }
      tokens_.push_back(Token{TokenType::kOperator, std::string(o), pos_at(i)});
      return i + o.size();
    }
    return error(i, str_cat("unexpected char '", std::string(1, c), "'"));
  }

  // Digits with optional '_' separators between digits.
  size_t scan_digits(size_t i, bool (*ok)(char)) const {
    size_t j = i;
    while (j < src_.size() &&
           (ok(src_[j]) || (src_[j] == '_' && j > i && j + 1 < src_.size() && ok(src_[j + 1]))))
      ++j;
    return j;
  }

  absl::StatusOr<size_t> lex_number(size_t i) {
    const Pos p = pos_at(i);
    if (src_[i] == '0' && i + 1 < src_.size() &&
        std::string_view("xXoObB").find(src_[i + 1]) != std::string_view::npos)
      return lex_radix_int(i);
    size_t j = scan_digits(i, is_digit);
    bool is_float = false;
    // jinja2's float rule does not apply right after a '.' (x.0.1 is items).
    const bool after_dot = i > 0 && src_[i - 1] == '.';
    if (!after_dot && j + 1 < src_.size() && src_[j] == '.' && is_digit(src_[j + 1])) {
      j = scan_digits(j + 1, is_digit), is_float = true;
    }
    if (!after_dot && j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t k = j + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && is_digit(src_[k])) j = scan_digits(k, is_digit), is_float = true;
    }
    std::string digits;
    for (size_t k = i; k < j; ++k)
      if (src_[k] != '_') digits.push_back(src_[k]);
    Token t{is_float ? TokenType::kFloat : TokenType::kInt, src_.substr(i, j - i), p};
    if (is_float) {
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      HEARTH_ASSIGN_OR_RETURN(t.int_value, parse_int(digits, 10, i));
    }
    tokens_.push_back(std::move(t));
    return j;
  }

  absl::StatusOr<size_t> lex_radix_int(size_t i) {
    const char r = static_cast<char>(src_[i + 1] | 0x20);
    const int base = r == 'x' ? 16 : r == 'o' ? 8 : 2;
    size_t j = i + 2;
    std::string digits;
    while (j < src_.size()) {
      const char c = static_cast<char>(src_[j] | 0x20);
      const int d = is_digit(src_[j]) ? src_[j] - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : 99;
      if (src_[j] == '_') {
        ++j;
        continue;
      }
      if (d >= base) break;
      digits.push_back(src_[j]);
      ++j;
    }
    if (digits.empty()) return error(i, "invalid integer literal");
    Token t{TokenType::kInt, src_.substr(i, j - i), pos_at(i)};
    HEARTH_ASSIGN_OR_RETURN(t.int_value, parse_int(digits, base, i));
    tokens_.push_back(std::move(t));
    return j;
  }

  absl::StatusOr<int64_t> parse_int(const std::string& digits, int base, size_t at_offset) const {
    int64_t v = 0;
    for (char ch : digits) {
      const char c = static_cast<char>(ch | 0x20);
      const int d = is_digit(ch) ? ch - '0' : c - 'a' + 10;
      if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v))
        return error(at_offset, "integer literal out of range");
    }
    return v;
  }

  absl::StatusOr<size_t> lex_string(size_t i) {
    const char quote = src_[i];
    size_t j = i + 1;
    while (j < src_.size() && src_[j] != quote) j += src_[j] == '\\' ? 2 : 1;
    if (j >= src_.size()) return error(i, "unterminated string literal");
    HEARTH_ASSIGN_OR_RETURN(std::string value,
                            unescape(std::string_view(src_).substr(i + 1, j - i - 1), i));
    tokens_.push_back(Token{TokenType::kString, std::move(value), pos_at(i)});
    return j + 1;
  }

  // Python's "unicode-escape" decoding, as jinja2 applies it to literals.
  absl::StatusOr<std::string> unescape(std::string_view s, size_t offset) const {
    std::string out;
    for (size_t k = 0; k < s.size(); ++k) {
      if (s[k] != '\\' || k + 1 >= s.size()) {
        out.push_back(s[k]);
        continue;
      }
      const char e = s[++k];
      switch (e) {
        case '\n':
          break;
        case '\\':
        case '\'':
        case '"':
          out.push_back(e);
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          HEARTH_ASSIGN_OR_RETURN(char32_t cp, hex_escape(s, k + 1, n, offset));
          utf8_append(out, cp);
          k += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = 0;
            size_t n = 0;
            while (n < 3 && k + n < s.size() && s[k + n] >= '0' && s[k + n] <= '7')
              cp = cp * 8 + static_cast<char32_t>(s[k + n] - '0'), ++n;
            utf8_append(out, cp);
            k += n - 1;
          } else if (e == 'N') {
            return error(offset, "\\N{...} escapes are not supported");
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    return out;
  }

  absl::StatusOr<char32_t> hex_escape(std::string_view s, size_t at_k, size_t n,
                                      size_t offset) const {
    char32_t cp = 0;
    for (size_t d = 0; d < n; ++d) {
      if (at_k + d >= s.size()) return error(offset, "truncated \\xXX escape");
      const char c = static_cast<char>(s[at_k + d] | 0x20);
      if (!is_digit(s[at_k + d]) && !(c >= 'a' && c <= 'f'))
        return error(offset, "truncated \\xXX escape");
      cp =
          cp * 16 + static_cast<char32_t>(is_digit(s[at_k + d]) ? s[at_k + d] - '0' : c - 'a' + 10);
    }
    if (cp > 0x10FFFF) return error(offset, "illegal Unicode character");
    return cp;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

}  // namespace

absl::StatusOr<std::vector<Token>> tokenize(std::string_view source) {
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace hearth::chat
