// GBNF text -> Grammar (docs/grammar.md). A recursive-descent parser over
// the text; groups and repetitions become generated rules; then the checks
// that need the whole grammar (defined rules, root, left recursion) and the
// flattening into one element array.
#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"

namespace hearth::grammar {

using Sequence = std::vector<Element>;
using Alternatives = std::vector<Sequence>;

class GrammarBuilder {
 public:
  explicit GrammarBuilder(std::string_view text) : text_(text) {}
  absl::StatusOr<std::shared_ptr<const Grammar>> build();

 private:
  struct Rule {
    std::string name;
    Alternatives body;
    bool defined = false;
    std::size_t used_at = std::string_view::npos;  // first reference, for errors
    std::size_t defined_at = 0;
  };

  absl::Status error_at(std::size_t at, std::string_view what) const;
  absl::Status error(std::string_view what) const { return error_at(pos_, what); }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek(std::size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  void skip_space(bool newlines);
  absl::Status parse_rule();
  absl::StatusOr<std::string> parse_name();
  absl::StatusOr<Alternatives> parse_alternatives(bool nested, int depth);
  absl::StatusOr<Sequence> parse_sequence(bool nested, int depth);
  absl::StatusOr<Sequence> parse_item(bool nested, int depth);
  absl::Status parse_repetition(Sequence& item);
  absl::StatusOr<Sequence> parse_literal();
  absl::StatusOr<Element> parse_class();
  absl::StatusOr<char32_t> parse_char();
  absl::StatusOr<char32_t> parse_escape();
  absl::StatusOr<char32_t> parse_hex(int digits);
  absl::StatusOr<std::uint32_t> parse_count();

  std::uint32_t rule_id(const std::string& name, std::size_t used_at);
  std::uint32_t new_rule(Alternatives body);
  Element intern_class(std::vector<CharRange> ranges, bool negated);
  absl::Status count_elements(std::size_t n);
  absl::Status check_rules() const;
  absl::Status check_left_recursion() const;
  std::shared_ptr<const Grammar> flatten();

  std::string_view text_;
  std::size_t pos_ = 0;
  std::string current_rule_;  // the named rule being parsed: generated rules take its name
  std::size_t current_rule_at_ = 0;
  std::vector<Rule> rules_;
  absl::flat_hash_map<std::string, std::uint32_t> rule_ids_;
  std::vector<std::vector<CharRange>> classes_;
  std::map<std::vector<std::pair<char32_t, char32_t>>, std::uint32_t> class_ids_;
  std::size_t element_count_ = 0;
  std::size_t generated_ = 0;
};

absl::Status GrammarBuilder::error_at(std::size_t at, std::string_view what) const {
  at = std::min(at, text_.size());
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < at; ++i) {
    if (text_[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return absl::InvalidArgumentError(str_cat("line ", line, ", column ", column, ": ", what));
}

void GrammarBuilder::skip_space(bool newlines) {
  while (!at_end()) {
    const char c = peek();
    if (c == ' ' || c == '\t') {
      ++pos_;
    } else if (c == '#') {
      while (!at_end() && peek() != '\n') ++pos_;
    } else if (newlines && (c == '\n' || c == '\r')) {
      ++pos_;
    } else {
      return;
    }
  }
}

absl::Status GrammarBuilder::count_elements(std::size_t n) {
  element_count_ += n;
  // ResourceExhausted, not a syntax error: a valid grammar (or a schema
  // converted to one) can be this large.
  if (element_count_ > Grammar::kMaxElements)
    return absl::ResourceExhaustedError(
        error(str_cat("the grammar compiles to more than ", Grammar::kMaxElements, " elements"))
            .message());
  return absl::OkStatus();
}

std::uint32_t GrammarBuilder::rule_id(const std::string& name, std::size_t used_at) {
  auto [it, inserted] = rule_ids_.try_emplace(name, static_cast<std::uint32_t>(rules_.size()));
  if (inserted) rules_.push_back(Rule{name, {}, false, used_at, 0});
  return it->second;
}

std::uint32_t GrammarBuilder::new_rule(Alternatives body) {
  Rule r;
  r.name = str_cat(current_rule_, "-", ++generated_);
  r.body = std::move(body);
  r.defined = true;
  r.defined_at = current_rule_at_;
  rules_.push_back(std::move(r));
  return static_cast<std::uint32_t>(rules_.size() - 1);
}

Element GrammarBuilder::intern_class(std::vector<CharRange> ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end(),
            [](const CharRange& a, const CharRange& b) { return a.lo < b.lo; });
  std::vector<std::pair<char32_t, char32_t>> merged;
  for (const CharRange& r : ranges) {
    if (!merged.empty() && r.lo <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, r.hi);
    else
      merged.emplace_back(r.lo, r.hi);
  }
  if (negated) {
    // The complement leaves out the surrogates, which UTF-8 cannot encode.
    merged.emplace_back(0xD800, 0xDFFF);
    std::sort(merged.begin(), merged.end());
    std::vector<std::pair<char32_t, char32_t>> complement;
    char32_t next = 0;
    for (const auto& [lo, hi] : merged) {
      if (lo > next) complement.emplace_back(next, lo - 1);
      next = std::max<char32_t>(next, hi + 1);
    }
    if (next <= 0x10FFFF) complement.emplace_back(next, 0x10FFFF);
    merged = std::move(complement);
  }
  auto [it, inserted] = class_ids_.try_emplace(merged, static_cast<std::uint32_t>(classes_.size()));
  if (inserted) {
    std::vector<CharRange> stored;
    for (const auto& [lo, hi] : merged) stored.push_back({lo, hi});
    classes_.push_back(std::move(stored));
  }
  return {Element::Kind::kChars, it->second};
}

absl::StatusOr<std::shared_ptr<const Grammar>> GrammarBuilder::build() {
  if (text_.size() > Grammar::kMaxText)
    return absl::InvalidArgumentError(
        str_cat("the grammar has ", text_.size(), " bytes, more than ", Grammar::kMaxText));
  for (;;) {
    skip_space(true);
    if (at_end()) break;
    HEARTH_RETURN_IF_ERROR(parse_rule());
  }
  HEARTH_RETURN_IF_ERROR(check_rules());
  HEARTH_RETURN_IF_ERROR(check_left_recursion());
  std::shared_ptr<const Grammar> grammar = flatten();
  // A matcher follows at most kMaxParses parses, kMaxDepth deep: a grammar
  // that needs more before its first character could produce nothing.
  if (initial_state(*grammar).dead())
    return absl::InvalidArgumentError(
        str_cat("the grammar's start has more than ", ParseState::kMaxParses,
                " ways to parse at once (or nests deeper than ", ParseState::kMaxDepth,
                " rules): too ambiguous to follow; write the repetition without optional items"));
  return grammar;
}

absl::Status GrammarBuilder::parse_rule() {
  const std::size_t start = pos_;
  HEARTH_ASSIGN_OR_RETURN(std::string name, parse_name());
  skip_space(false);
  if (text_.substr(pos_, 3) != "::=") return error(str_cat("expected ::= after \"", name, "\""));
  pos_ += 3;
  skip_space(true);
  const std::uint32_t id = rule_id(name, std::string_view::npos);
  if (rules_[id].defined) return error_at(start, str_cat("rule \"", name, "\" is defined twice"));
  current_rule_ = name;
  current_rule_at_ = start;
  HEARTH_ASSIGN_OR_RETURN(Alternatives body, parse_alternatives(false, 0));
  rules_[id].body = std::move(body);
  rules_[id].defined = true;
  rules_[id].defined_at = start;
  skip_space(false);
  if (!at_end() && peek() != '\n' && peek() != '\r')
    return error(str_cat("unexpected '", std::string(1, peek()), "' in rule \"", name, "\""));
  return absl::OkStatus();
}

absl::StatusOr<std::string> GrammarBuilder::parse_name() {
  const std::size_t start = pos_;
  while (!at_end() &&
         (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '-' || peek() == '_'))
    ++pos_;
  if (pos_ == start) return error("expected a rule name");
  return std::string(text_.substr(start, pos_ - start));
}

absl::StatusOr<Alternatives> GrammarBuilder::parse_alternatives(bool nested, int depth) {
  Alternatives alts;
  HEARTH_ASSIGN_OR_RETURN(Sequence first, parse_sequence(nested, depth));
  alts.push_back(std::move(first));
  while (peek() == '|') {
    ++pos_;
    skip_space(true);
    HEARTH_ASSIGN_OR_RETURN(Sequence next, parse_sequence(nested, depth));
    alts.push_back(std::move(next));
  }
  for (const Sequence& s : alts) HEARTH_RETURN_IF_ERROR(count_elements(s.size() + 1));
  return alts;
}

absl::StatusOr<Sequence> GrammarBuilder::parse_sequence(bool nested, int depth) {
  Sequence seq;
  Sequence last;  // the latest item, which a repetition applies to
  for (;;) {
    const char c = peek();
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (last.empty()) return error(str_cat("'", std::string(1, c), "' follows nothing"));
      HEARTH_RETURN_IF_ERROR(parse_repetition(last));
    } else if (c == '"' || c == '[' || c == '.' || c == '(' ||
               std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') {
      seq.insert(seq.end(), last.begin(), last.end());
      HEARTH_ASSIGN_OR_RETURN(last, parse_item(nested, depth));
    } else {
      break;
    }
    skip_space(nested);
  }
  seq.insert(seq.end(), last.begin(), last.end());
  return seq;
}

absl::StatusOr<Sequence> GrammarBuilder::parse_item(bool nested, int depth) {
  const char c = peek();
  if (c == '"') return parse_literal();
  if (c == '[') {
    HEARTH_ASSIGN_OR_RETURN(Element e, parse_class());
    return Sequence{e};
  }
  if (c == '.') {
    ++pos_;
    return Sequence{intern_class({}, true)};
  }
  if (c == '(') {
    if (depth + 1 > Grammar::kMaxNesting)
      return error(str_cat("parentheses nested deeper than ", Grammar::kMaxNesting));
    ++pos_;
    skip_space(true);
    HEARTH_ASSIGN_OR_RETURN(Alternatives alts, parse_alternatives(true, depth + 1));
    if (peek() != ')') return error("expected ')'");
    ++pos_;
    return Sequence{{Element::Kind::kRule, new_rule(std::move(alts))}};
  }
  const std::size_t at = pos_;
  HEARTH_ASSIGN_OR_RETURN(std::string name, parse_name());
  (void)nested;
  return Sequence{{Element::Kind::kRule, rule_id(name, at)}};
}

// Applies the repetition at pos_ to `item` (rewritten in place).
absl::Status GrammarBuilder::parse_repetition(Sequence& item) {
  // A multi-element item (a literal) repeats as a whole.
  if (item.size() != 1) item = {{Element::Kind::kRule, new_rule({item})}};
  const Element x = item[0];
  const auto star = [&] {
    const std::uint32_t r = new_rule({});
    rules_[r].body = {{x, {Element::Kind::kRule, r}}, {}};
    return Element{Element::Kind::kRule, r};
  };
  const char c = peek();
  ++pos_;
  if (c == '*') {
    item = {star()};
    return count_elements(5);
  }
  if (c == '+') {
    item = {x, star()};
    return count_elements(6);
  }
  if (c == '?') {
    item = {{Element::Kind::kRule, new_rule({{x}, {}})}};
    return count_elements(4);
  }
  // {m}, {m,}, {m,n}, {,n}
  skip_space(false);
  std::uint32_t min = 0, max = 0;
  bool unbounded = false;
  if (peek() != ',') {
    HEARTH_ASSIGN_OR_RETURN(min, parse_count());
  }
  skip_space(false);
  if (peek() == ',') {
    ++pos_;
    skip_space(false);
    if (peek() == '}') {
      unbounded = true;
    } else {
      HEARTH_ASSIGN_OR_RETURN(max, parse_count());
    }
  } else {
    max = min;
  }
  skip_space(false);
  if (peek() != '}') return error("expected '}' to close the repetition");
  ++pos_;
  if (!unbounded && max < min)
    return error(str_cat("repetition {", min, ",", max, "}: the maximum is below the minimum"));
  HEARTH_RETURN_IF_ERROR(count_elements(min + 4 * (unbounded ? 1 : max - min + 1)));
  Sequence out(min, x);
  if (unbounded) {
    out.push_back(star());
  } else if (max > min) {
    // x{0,k}: o_k ::= x o_{k-1} | ; o_1 ::= x | .
    std::uint32_t opt = new_rule({{x}, {}});
    for (std::uint32_t k = 1; k < max - min; ++k)
      opt = new_rule({{x, {Element::Kind::kRule, opt}}, {}});
    out.push_back({Element::Kind::kRule, opt});
  }
  if (out.empty()) out.push_back({Element::Kind::kRule, new_rule({{}})});  // x{0}
  item = std::move(out);
  return absl::OkStatus();
}

absl::StatusOr<std::uint32_t> GrammarBuilder::parse_count() {
  const std::size_t start = pos_;
  std::uint64_t v = 0;
  while (std::isdigit(static_cast<unsigned char>(peek()))) {
    v = v * 10 + static_cast<std::uint64_t>(peek() - '0');
    if (v > Grammar::kMaxRepetition)
      return error_at(start, str_cat("repetition bound above ", Grammar::kMaxRepetition));
    ++pos_;
  }
  if (pos_ == start) return error("expected a number in the repetition");
  return static_cast<std::uint32_t>(v);
}

absl::StatusOr<Sequence> GrammarBuilder::parse_literal() {
  const std::size_t start = pos_;
  ++pos_;  // "
  Sequence seq;
  while (peek() != '"') {
    if (at_end() || peek() == '\n') return error_at(start, "unterminated string literal");
    HEARTH_ASSIGN_OR_RETURN(char32_t c, parse_char());
    seq.push_back(intern_class({{c, c}}, false));
  }
  ++pos_;
  if (seq.empty()) seq.push_back({Element::Kind::kRule, new_rule({{}})});  // ""
  return seq;
}

absl::StatusOr<Element> GrammarBuilder::parse_class() {
  const std::size_t start = pos_;
  ++pos_;  // [
  const bool negated = peek() == '^';
  if (negated) ++pos_;
  std::vector<CharRange> ranges;
  while (peek() != ']') {
    if (at_end() || peek() == '\n') return error_at(start, "unterminated character class");
    HEARTH_ASSIGN_OR_RETURN(char32_t lo, parse_char());
    char32_t hi = lo;
    if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
      ++pos_;
      HEARTH_ASSIGN_OR_RETURN(hi, parse_char());
      if (hi < lo) return error("character range is backwards");
    }
    ranges.push_back({lo, hi});
  }
  ++pos_;
  if (ranges.empty() && !negated) return error_at(start, "character class matches nothing");
  return intern_class(std::move(ranges), negated);
}

// One character of a literal or class: an escape or one UTF-8 character.
absl::StatusOr<char32_t> GrammarBuilder::parse_char() {
  if (peek() == '\\') return parse_escape();
  const auto b = static_cast<unsigned char>(peek());
  int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (len == 0 || pos_ + len > text_.size()) return error("invalid UTF-8");
  char32_t c = len == 1 ? b : b & (0x7F >> len);
  for (int i = 1; i < len; ++i) {
    const auto cb = static_cast<unsigned char>(text_[pos_ + i]);
    if ((cb & 0xC0) != 0x80) return error("invalid UTF-8");
    c = (c << 6) | (cb & 0x3F);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMin[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return error("invalid UTF-8");
  pos_ += len;
  return c;
}

absl::StatusOr<char32_t> GrammarBuilder::parse_escape() {
  ++pos_;  // backslash
  const char c = peek();
  ++pos_;
  switch (c) {
    case 'n':
      return U'\n';
    case 'r':
      return U'\r';
    case 't':
      return U'\t';
    case '\\':
    case '"':
    case '\'':
    case '[':
    case ']':
    case '-':
    case '^':
    case '/':
      return static_cast<char32_t>(c);
    case 'x':
      return parse_hex(2);
    case 'u':
      return parse_hex(4);
    case 'U':
      return parse_hex(8);
    default:
      pos_ -= 2;
      return error(at_end() ? "escape at the end of the text" : "unknown escape");
  }
}

absl::StatusOr<char32_t> GrammarBuilder::parse_hex(int digits) {
  std::uint32_t v = 0;
  for (int i = 0; i < digits; ++i) {
    const char h = peek();
    const int d = h >= '0' && h <= '9'   ? h - '0'
                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                         : -1;
    if (d < 0) return error(str_cat("expected ", digits, " hex digits"));
    v = v * 16 + static_cast<std::uint32_t>(d);
    ++pos_;
  }
  if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
    return error("escape names no Unicode character");
  return static_cast<char32_t>(v);
}

absl::Status GrammarBuilder::check_rules() const {
  for (const Rule& r : rules_)
    if (!r.defined)
      return error_at(r.used_at, str_cat("rule \"", r.name, "\" is used but not defined"));
  if (!rule_ids_.contains("root"))
    return absl::InvalidArgumentError(rules_.empty() ? "the grammar is empty"
                                                     : "the grammar has no rule named \"root\"");
  return absl::OkStatus();
}

// A rule that can reach itself before consuming a character would make a
// matcher expand forever.
absl::Status GrammarBuilder::check_left_recursion() const {
  const std::size_t n = rules_.size();
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Sequence& alt : rules_[r].body) {
        const bool empty = std::all_of(alt.begin(), alt.end(), [&](const Element& e) {
          return e.kind == Element::Kind::kRule && nullable[e.index];
        });
        if (empty) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // left_edges[r]: rules r may expand to before consuming a character.
  std::vector<std::vector<std::uint32_t>> left_edges(n);
  for (std::size_t r = 0; r < n; ++r)
    for (const Sequence& alt : rules_[r].body)
      for (const Element& e : alt) {
        if (e.kind != Element::Kind::kRule) break;
        left_edges[r].push_back(e.index);
        if (!nullable[e.index]) break;
      }
  // Iterative depth-first search for a cycle (0 new, 1 on the path, 2 done).
  std::vector<std::uint8_t> state(n, 0);
  for (std::uint32_t start = 0; start < n; ++start) {
    if (state[start] != 0) continue;
    std::vector<std::pair<std::uint32_t, std::size_t>> path{{start, 0}};
    state[start] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == left_edges[r].size()) {
        state[r] = 2;
        path.pop_back();
        continue;
      }
      const std::uint32_t to = left_edges[r][next++];
      if (state[to] == 1) {
        const Rule& rule = rules_[to];
        return error_at(rule.defined_at,
                        str_cat("rule \"", rule.name,
                                "\" is left-recursive: it can reach itself before matching a "
                                "character (left recursion, or a repetition of something that "
                                "may be empty)"));
      }
      if (state[to] == 0) {
        state[to] = 1;
        path.emplace_back(to, 0);
      }
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<const Grammar> GrammarBuilder::flatten() {
  std::shared_ptr<Grammar> g(new Grammar());
  g->elements_.reserve(element_count_);
  for (Rule& r : rules_) {
    std::vector<std::uint32_t> starts;
    for (const Sequence& alt : r.body) {
      starts.push_back(static_cast<std::uint32_t>(g->elements_.size()));
      g->elements_.insert(g->elements_.end(), alt.begin(), alt.end());
      g->elements_.push_back({Element::Kind::kEnd, 0});
    }
    g->rules_.push_back(std::move(starts));
    g->names_.push_back(std::move(r.name));
  }
  g->classes_ = std::move(classes_);
  g->root_ = rule_ids_.at("root");
  return g;
}

absl::StatusOr<std::shared_ptr<const Grammar>> Grammar::parse(std::string_view gbnf) {
  return GrammarBuilder(gbnf).build();
}

}  // namespace hearth::grammar
