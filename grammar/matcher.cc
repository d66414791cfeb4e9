#include "grammar/matcher.h"

#include <algorithm>
#include <cstring>
#include <span>

namespace hearth::grammar {
namespace {

using Kind = Element::Kind;

// Scratch of advance(), reused by each thread so a warm step allocates
// nothing: parses waiting for expansion (each its positions followed by its
// depth, so the last one pops off the end), and the sort order of new ones.
struct Scratch {
  std::vector<std::uint32_t> work;
  std::vector<std::uint32_t> parse;
  std::vector<std::uint32_t> offsets;
  std::vector<std::uint32_t> sorted;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// bound_refusals()'s count, per thread.
thread_local std::uint64_t bound_refusal_count = 0;
// matcher_work()'s count, per thread.
thread_local std::uint64_t work_count = 0;

void push_work(std::vector<std::uint32_t>& work, std::span<const std::uint32_t> parse) {
  work.insert(work.end(), parse.begin(), parse.end());
  work.push_back(static_cast<std::uint32_t>(parse.size()));
}

// Expands every parse in `s.work` until its top is a character class (or
// it is empty: a finished sentence), appending the results to `out` as
// [depth, positions...]. False (counted in bound_refusal_count) when the
// parses or their depth exceed the bounds.
bool expand_within_bounds(const Grammar& g, Scratch& s, std::vector<std::uint32_t>& out) {
  std::size_t emitted = 0;
  std::size_t budget = 16 * ParseState::kMaxParses;  // expansion steps
  while (!s.work.empty()) {
    if (budget-- == 0) return false;
    const std::uint32_t depth = s.work.back();
    work_count += depth + 1;
    s.parse.assign(s.work.end() - 1 - depth, s.work.end() - 1);
    s.work.resize(s.work.size() - 1 - depth);
    const Element* top = s.parse.empty() ? nullptr : &g.element(s.parse.back());
    if (top == nullptr || top->kind == Kind::kChars) {
      if (++emitted > ParseState::kMaxParses || s.parse.size() > ParseState::kMaxDepth)
        return false;
      out.push_back(static_cast<std::uint32_t>(s.parse.size()));
      out.insert(out.end(), s.parse.begin(), s.parse.end());
      continue;
    }
    // A rule: replace it by each alternative, keeping what follows it.
    const std::uint32_t at = s.parse.back();
    s.parse.pop_back();
    if (g.element(at + 1).kind != Kind::kEnd) s.parse.push_back(at + 1);
    for (std::uint32_t alt : g.alternatives(top->index)) {
      if (g.element(alt).kind != Kind::kEnd) s.parse.push_back(alt);
      push_work(s.work, s.parse);
      if (g.element(alt).kind != Kind::kEnd) s.parse.pop_back();
    }
  }
  return true;
}

bool expand(const Grammar& g, Scratch& s, std::vector<std::uint32_t>& out) {
  if (expand_within_bounds(g, s, out)) return true;
  ++bound_refusal_count;
  return false;
}

// Sorts the parses of `stacks` and drops repeats.
void canonicalize(std::vector<std::uint32_t>& stacks, Scratch& s) {
  s.offsets.clear();
  for (std::size_t i = 0; i < stacks.size(); i += stacks[i] + 1)
    s.offsets.push_back(static_cast<std::uint32_t>(i));
  if (s.offsets.size() < 2) return;
  const auto parse = [&](std::uint32_t off) {
    return std::span<const std::uint32_t>(stacks.data() + off, stacks[off] + 1);
  };
  std::sort(s.offsets.begin(), s.offsets.end(), [&](std::uint32_t a, std::uint32_t b) {
    const auto pa = parse(a), pb = parse(b);
    return std::lexicographical_compare(pa.begin(), pa.end(), pb.begin(), pb.end());
  });
  s.sorted.clear();
  std::span<const std::uint32_t> last;
  for (std::uint32_t off : s.offsets) {
    const auto p = parse(off);
    if (!last.empty() && std::equal(p.begin(), p.end(), last.begin(), last.end())) continue;
    s.sorted.insert(s.sorted.end(), p.begin(), p.end());
    last = p;
  }
  stacks.swap(s.sorted);
}

// Moves every parse of `from` whose top class holds `c` past it.
bool advance_char(const Grammar& g, const ParseState& from, char32_t c, ParseState& to) {
  Scratch& s = scratch();
  s.work.clear();
  to.stacks.clear();
  to.partial = 0;
  to.pending = to.length = 0;
  const std::vector<std::uint32_t>& st = from.stacks;
  work_count += st.size();
  for (std::size_t i = 0; i < st.size(); i += st[i] + 1) {
    const std::uint32_t depth = st[i];
    if (depth == 0) continue;
    const std::uint32_t top = st[i + depth];
    if (!g.class_holds(g.element(top).index, c)) continue;
    s.parse.assign(st.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                   st.begin() + static_cast<std::ptrdiff_t>(i + depth));
    if (g.element(top + 1).kind != Kind::kEnd) s.parse.push_back(top + 1);
    push_work(s.work, s.parse);
  }
  if (!expand(g, s, to.stacks)) {
    to.stacks.clear();
    return false;
  }
  canonicalize(to.stacks, s);
  return !to.stacks.empty();
}

// Whether some parse's top class holds a character in [lo, hi].
bool some_class_meets(const Grammar& g, const ParseState& state, char32_t lo, char32_t hi) {
  const std::vector<std::uint32_t>& st = state.stacks;
  work_count += st.size();
  for (std::size_t i = 0; i < st.size(); i += st[i] + 1)
    if (st[i] != 0 && g.class_meets(g.element(st[i + st[i]]).index, lo, hi)) return true;
  return false;
}

// The code points a partial character can still become.
bool partial_viable(const Grammar& g, const ParseState& s) {
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  const int bits = 6 * s.pending;
  char32_t lo = s.partial << bits;
  char32_t hi = lo | ((char32_t{1} << bits) - 1);
  lo = std::max(lo, kMin[s.length]);
  hi = std::min<char32_t>(hi, 0x10FFFF);
  return lo <= hi && some_class_meets(g, s, lo, hi);
}

}  // namespace

std::uint64_t bound_refusals() { return bound_refusal_count; }

std::uint64_t matcher_work() { return work_count; }

void ParseState::key(std::string& key) const {
  key.clear();
  key.append(reinterpret_cast<const char*>(stacks.data()), stacks.size() * sizeof(std::uint32_t));
  key.append(reinterpret_cast<const char*>(&partial), sizeof partial);
  key.push_back(static_cast<char>(pending));
  key.push_back(static_cast<char>(length));
}

ParseState initial_state(const Grammar& g) {
  Scratch& s = scratch();
  s.work.clear();
  for (std::uint32_t alt : g.alternatives(g.root())) {
    if (g.element(alt).kind == Kind::kEnd) {
      s.work.push_back(0);
    } else {
      s.work.push_back(alt);
      s.work.push_back(1);
    }
  }
  ParseState state;
  if (!expand(g, s, state.stacks)) state.stacks.clear();
  canonicalize(state.stacks, s);
  return state;
}

bool advance(const Grammar& g, const ParseState& from, unsigned char byte, ParseState& to) {
  if (from.pending == 0) {
    if (byte < 0x80) return advance_char(g, from, byte, to);
    const int len = (byte >> 5) == 6 ? 2 : (byte >> 4) == 14 ? 3 : (byte >> 3) == 30 ? 4 : 0;
    if (len == 0) return false;
    to.stacks = from.stacks;
    to.length = static_cast<std::uint8_t>(len);
    to.pending = static_cast<std::uint8_t>(len - 1);
    to.partial = byte & (0x7F >> len);
    return partial_viable(g, to);
  }
  if ((byte & 0xC0) != 0x80) return false;
  const char32_t c = (from.partial << 6) | (byte & 0x3F);
  if (from.pending > 1) {
    to.stacks = from.stacks;
    to.length = from.length;
    to.pending = static_cast<std::uint8_t>(from.pending - 1);
    to.partial = c;
    return partial_viable(g, to);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMin[from.length] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
  return advance_char(g, from, c, to);
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)), state_(initial_state(*grammar_)) {}

bool Matcher::run(std::string_view bytes, ParseState& out) const {
  out = state_;
  ParseState next;
  for (char b : bytes) {
    if (!advance(*grammar_, out, static_cast<unsigned char>(b), next)) return false;
    std::swap(out, next);
  }
  return !out.dead();
}

bool Matcher::can_accept(std::string_view bytes) const {
  ParseState out;
  return run(bytes, out);
}

bool Matcher::accept(std::string_view bytes) {
  ParseState out;
  if (!run(bytes, out)) return false;
  state_ = std::move(out);
  return true;
}

}  // namespace hearth::grammar
