// A context-free grammar in llama.cpp's GBNF notation (docs/grammar.md),
// compiled for matching (grammar/matcher.h).
//
// Compiled form: every rule is a list of alternatives; an alternative is a
// run of elements in one flat array, ended by kEnd. An element is a
// character class (sorted, merged code-point ranges; negation and `.` are
// complemented at parse time) or a reference to a rule. Repetitions become
// generated rules (`x*` is `r ::= x r |`), so a matcher only ever meets
// classes, references and ends.
//
// A Grammar is immutable once parsed and shared read-only by every matcher
// that uses it; the token-mask cache it carries (mask_cache()) has its own
// lock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace hearth::grammar {

class MaskCache;  // grammar/token_mask.h

struct CharRange {
  char32_t lo, hi;  // inclusive
};

struct Element {
  enum class Kind : std::uint8_t { kEnd, kChars, kRule };
  Kind kind;
  std::uint32_t index;  // kChars: class index; kRule: rule index
};

class Grammar {
 public:
  static constexpr std::size_t kMaxText = 1 << 20;
  static constexpr int kMaxNesting = 64;
  static constexpr std::uint32_t kMaxRepetition = 10000;
  static constexpr std::size_t kMaxElements = 1000000;

  // Parses GBNF text. Errors name "line L, column C" and what is wrong.
  static absl::StatusOr<std::shared_ptr<const Grammar>> parse(std::string_view gbnf);

  ~Grammar();

  std::uint32_t root() const { return root_; }
  const Element& element(std::uint32_t pos) const { return elements_[pos]; }
  // Start positions of the alternatives of `rule` (each a run ending in kEnd).
  const std::vector<std::uint32_t>& alternatives(std::uint32_t rule) const { return rules_[rule]; }
  // Whether class `index` holds `c`.
  bool class_holds(std::uint32_t index, char32_t c) const;
  // Whether class `index` holds some code point in [lo, hi].
  bool class_meets(std::uint32_t index, char32_t lo, char32_t hi) const;
  std::size_t rule_count() const { return rules_.size(); }
  const std::string& rule_name(std::uint32_t rule) const { return names_[rule]; }

  // Token masks per matcher state, shared by every sequence constrained by
  // this grammar (grammar/token_mask.h).
  MaskCache& mask_cache() const { return *mask_cache_; }

 private:
  friend class GrammarBuilder;
  Grammar();

  std::vector<Element> elements_;
  std::vector<std::vector<std::uint32_t>> rules_;  // alternatives' start positions
  std::vector<std::string> names_;                 // per rule (generated: "name-N")
  std::vector<std::vector<CharRange>> classes_;    // sorted, disjoint
  std::uint32_t root_ = 0;
  std::unique_ptr<MaskCache> mask_cache_;
};

}  // namespace hearth::grammar
