// The "llama" tokenizer model: SentencePiece-style BPE over scored pieces.
#include <cstdint>
#include <queue>
#include <vector>

#include "base/status_macros.h"
#include "base/str_cat.h"
#include "engine/tokenizer.h"
#include "engine/unicode.h"

namespace hearth::engine {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // "▁" U+2581, SentencePiece's space

// "<0x0A>" -> 10; -1 when `piece` is not of that form.
int parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (d < 0) return -1;
    value = value * 16 + d;
  }
  return value;
}

// One per character of the text, and a queue entry per candidate merge: 16
// bytes each (offsets fit 32 bits: encode_spm refuses longer texts), since a
// multi-megabyte text has millions of both.
struct SpmSymbol {
  std::uint32_t begin;   // in the escaped text
  std::uint32_t length;  // bytes; 0 once merged into its left neighbour
  std::int32_t prev;
  std::int32_t next;  // -1 at the ends
};

struct SpmBigram {
  float score;  // of the merged piece
  std::int32_t left;
  std::int32_t right;
  std::uint32_t length;  // of the merged piece, to detect stale entries
};

// Highest score first; on ties the leftmost pair, so merging is deterministic
// and matches the reference implementation.
struct SpmBigramOrder {
  bool operator()(const SpmBigram& a, const SpmBigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

absl::Status Tokenizer::load_spm(const GgufFile& file) {
  const std::string_view prefix_key = "tokenizer.ggml.add_space_prefix";
  if (file.find(prefix_key) != nullptr) {
    HEARTH_ASSIGN_OR_RETURN(auto v, file.get_bool(prefix_key));
    add_space_prefix_ = v;
  } else {
    add_space_prefix_ = true;
  }

  byte_token_.fill(-1);
  text_begin_.reserve(types_.size() + 1);
  for (std::size_t i = 0; i < types_.size(); ++i) {
    const auto id = static_cast<std::int32_t>(i);
    const std::string_view p = piece(id);
    text_begin_.push_back(static_cast<std::uint32_t>(texts_.size()));
    switch (types_[i]) {
      case TokenType::kNormal:
        // "▁" stands for a space.
        for (std::size_t pos = 0; pos < p.size();) {
          if (p.substr(pos, kSpaceMark.size()) == kSpaceMark) {
            texts_.push_back(' ');
            pos += kSpaceMark.size();
          } else {
            texts_.push_back(p[pos++]);
          }
        }
        break;
      case TokenType::kUserDefined:
        texts_.append(p);
        break;
      case TokenType::kByte: {
        const int b = parse_byte_piece(p);
        if (b < 0) {
          return absl::InvalidArgumentError(str_cat(file.name(), ": token ", i, " '", p,
                                                    "' has type byte (6) but is not <0xNN>"));
        }
        if (byte_token_[b] < 0) byte_token_[b] = id;
        texts_.push_back(static_cast<char>(b));
        break;
      }
      case TokenType::kUnknown:
      case TokenType::kControl:
      case TokenType::kUnused:
        break;
    }
  }
  text_begin_.push_back(static_cast<std::uint32_t>(texts_.size()));
  return load_bos_eos_flags(file, /*add_bos_default=*/true);
}

absl::Status Tokenizer::encode_spm(std::string_view fragment, bool space_prefix,
                                   std::vector<std::int32_t>& out) const {
  if (fragment.size() > static_cast<std::size_t>(INT32_MAX) / 4) {
    return absl::InvalidArgumentError(str_cat("text of ", fragment.size(), " bytes is too long"));
  }
  std::string text;
  text.reserve(fragment.size() + 2 * kSpaceMark.size());
  if (space_prefix) text.append(kSpaceMark);
  for (char c : fragment) {
    if (c == ' ') {
      text.append(kSpaceMark);
    } else {
      text.push_back(c);
    }
  }

  // One symbol per character (an ill-formed UTF-8 sequence is one symbol too;
  // no piece matches it, so it falls back to byte tokens).
  std::vector<SpmSymbol> symbols;
  symbols.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t len = decode_utf8(text, pos).length;
    const auto index = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({static_cast<std::uint32_t>(pos), static_cast<std::uint32_t>(len), index - 1,
                       pos + len < text.size() ? index + 1 : -1});
    pos += len;
  }

  std::priority_queue<SpmBigram, std::vector<SpmBigram>, SpmBigramOrder> queue;
  const auto try_add = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right < 0) return;
    const SpmSymbol& l = symbols[left];
    const SpmSymbol& r = symbols[right];
    const std::uint32_t length = l.length + r.length;  // the two are adjacent in `text`
    const std::int32_t id = lookup(std::string_view(text).substr(l.begin, length));
    if (id < 0) return;
    queue.push({scores_[id], left, right, length});
  };
  for (std::size_t i = 1; i < symbols.size(); ++i) {
    try_add(static_cast<std::int32_t>(i - 1), static_cast<std::int32_t>(i));
  }
  while (!queue.empty()) {
    const SpmBigram b = queue.top();
    queue.pop();
    SpmSymbol& l = symbols[b.left];
    SpmSymbol& r = symbols[b.right];
    // Either side changed since this pair was queued: it is stale.
    if (l.length == 0 || r.length == 0 || l.length + r.length != b.length) continue;
    l.length += r.length;
    r.length = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  if (symbols.empty()) return absl::OkStatus();
  for (std::int32_t i = 0; i >= 0; i = symbols[i].next) {
    const SpmSymbol& s = symbols[i];
    const std::string_view sym_text = std::string_view(text).substr(s.begin, s.length);
    if (const std::int32_t id = lookup(sym_text); id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : sym_text) {
      push_byte(byte_token_[static_cast<unsigned char>(c)], out);
    }
  }
  return absl::OkStatus();
}

}  // namespace hearth::engine
