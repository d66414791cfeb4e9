// Follows output bytes through a Grammar: which bytes may come next, whether
// what came so far is a whole sentence.
//
// The state is the set of every way the output so far can be parsed (as in
// llama.cpp's grammar sampler): each a stack of element positions whose top
// is the character class to match next; an empty stack is a finished
// sentence. Output is bytes: a UTF-8 character split across tokens is held
// as a partial character, and a byte that no allowed character could start
// or continue is refused. Bytes that would make invalid UTF-8 (overlong
// forms, surrogates, stray continuation bytes) are always refused.
//
// Matcher is a value: not thread-safe, cheap to copy. The Grammar it holds
// is shared read-only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace hearth::grammar {

// One matcher state. `stacks` holds each parse as its depth followed by its
// positions, bottom first; parses are sorted and distinct, so equal states
// have equal representations (ParseState::key()).
struct ParseState {
  static constexpr std::size_t kMaxParses = 4096;
  static constexpr std::size_t kMaxDepth = 4096;

  std::vector<std::uint32_t> stacks;
  char32_t partial = 0;      // bits of a UTF-8 character begun but not finished
  std::uint8_t pending = 0;  // its continuation bytes still to come
  std::uint8_t length = 0;   // its whole length in bytes

  bool dead() const { return stacks.empty(); }
  // Whether the output so far is a whole sentence.
  bool complete() const { return pending == 0 && !stacks.empty() && stacks[0] == 0; }
  // Whether the output is a whole sentence that nothing may extend.
  bool must_end() const { return complete() && stacks.size() == 1; }
  // Appends the state's identity to `key` (after clearing it).
  void key(std::string& key) const;
};

// The state before any output.
ParseState initial_state(const Grammar& grammar);
// Advances `from` by one output byte into `to` (its storage reused). False
// when the grammar refuses the byte (`to` is then unspecified).
bool advance(const Grammar& grammar, const ParseState& from, unsigned char byte, ParseState& to);
// How many refusals of advance() and initial_state() on this thread were the
// bounds' (kMaxParses parses, kMaxDepth deep, 16 * kMaxParses expansion steps
// for one character), not the grammar's: a change across a call tells an
// error message which of the two refused.
std::uint64_t bound_refusals();
// How much work advance() has done on this thread: the parse positions it
// read and wrote, a measure of its time that does not depend on the machine.
std::uint64_t matcher_work();

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Whether the grammar allows `bytes` next.
  bool can_accept(std::string_view bytes) const;
  // Appends `bytes` when the grammar allows them all; otherwise returns
  // false and leaves the state as it was.
  bool accept(std::string_view bytes);
  bool complete() const { return state_.complete(); }
  bool must_end() const { return state_.must_end(); }
  const ParseState& state() const { return state_; }

 private:
  bool run(std::string_view bytes, ParseState& out) const;

  std::shared_ptr<const Grammar> grammar_;
  ParseState state_;
};

}  // namespace hearth::grammar
