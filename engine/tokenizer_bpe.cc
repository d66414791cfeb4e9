// The "gpt2" tokenizer model: byte-level BPE over pre-tokenized words.
#include <array>
#include <cstdint>
#include <queue>
#include <vector>

#include "base/status_macros.h"
#include "base/str_cat.h"
#include "engine/tokenizer.h"
#include "engine/unicode.h"

namespace hearth::engine {
namespace {

// GPT-2's byte alphabet: every byte is shown as a printable character so that
// vocabularies hold no raw spaces or control bytes. Printable Latin-1 bytes
// stand for themselves; the other 68 take U+0100 onwards in byte order
// (so a space is "Ġ" U+0120 and a newline "Ċ" U+010A).
constexpr bool byte_is_itself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<char32_t, 256> make_byte_to_char() {
  std::array<char32_t, 256> table{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) table[b] = byte_is_itself(b) ? static_cast<char32_t>(b) : next++;
  return table;
}
constexpr std::array<char32_t, 256> kByteToChar = make_byte_to_char();

constexpr std::size_t kCharRange = 0x100 + 68;  // every character of the alphabet is below this
constexpr std::array<std::int16_t, kCharRange> make_char_to_byte() {
  std::array<std::int16_t, kCharRange> table{};
  for (auto& v : table) v = -1;
  for (int b = 0; b < 256; ++b) table[kByteToChar[b]] = static_cast<std::int16_t>(b);
  return table;
}
constexpr std::array<std::int16_t, kCharRange> kCharToByte = make_char_to_byte();

// A normal token's piece as bytes. Characters outside the alphabet (which
// well-formed vocabularies do not have) are kept as they are.
std::string byte_level_decode(std::string_view piece) {
  std::string out;
  for (std::size_t pos = 0; pos < piece.size();) {
    const Utf8Char ch = decode_utf8(piece, pos);
    if (ch.status == Utf8Status::kOk && ch.code_point < kCharRange &&
        kCharToByte[ch.code_point] >= 0) {
      out.push_back(static_cast<char>(kCharToByte[ch.code_point]));
    } else {
      out.append(piece.substr(pos, ch.length));
    }
    pos += ch.length;
  }
  return out;
}

struct BpeSymbol {
  std::int32_t id;  // token of the symbol's text, -1 if none (a byte with no token)
  std::int32_t prev;
  std::int32_t next;  // -1 at the ends
  bool alive;
};

struct BpeBigram {
  std::int32_t rank;
  std::int32_t left;
  std::int32_t right;
  std::int32_t left_id;  // the pair as queued, to detect stale entries
  std::int32_t right_id;
  std::int32_t result;
};

// Lowest merge rank first; on ties the leftmost pair.
struct BpeBigramOrder {
  bool operator()(const BpeBigram& a, const BpeBigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

std::uint64_t merge_key(std::int32_t left, std::int32_t right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
         static_cast<std::uint32_t>(right);
}

}  // namespace

absl::Status Tokenizer::load_bpe(const GgufFile& file) {
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::for_name(pre_);
  if (!pre.ok())
    return absl::Status(pre.status().code(), str_cat(file.name(), ": ", pre.status().message()));
  pre_tokenizer_ = *pre;
  add_space_prefix_ = false;

  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(ch, kByteToChar[b]);
    byte_char_token_[b] = lookup(ch);
  }

  // Merges as token-id pairs. A merge whose halves or result are not tokens
  // can never apply (symbols are always tokens), so it is dropped.
  const std::string_view merges_key = "tokenizer.ggml.merges";
  HEARTH_ASSIGN_OR_RETURN(auto merges, file.get_string_array(merges_key));
  merges_.reserve(merges.size());
  std::string joined;
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string_view m = merges[i];
    // The separator is the first space after the first character, so a left
    // half that is itself a space still parses.
    const std::size_t sep = m.empty() ? std::string_view::npos : m.find(' ', 1);
    if (sep == std::string_view::npos) {
      return absl::InvalidArgumentError(str_cat(file.name(), ": ", merges_key, "[", i, "] = '", m,
                                                "' is not two pieces separated by a space"));
    }
    const std::string_view left = m.substr(0, sep);
    const std::string_view right = m.substr(sep + 1);
    joined.assign(left);
    joined.append(right);
    const std::int32_t l = lookup(left);
    const std::int32_t r = lookup(right);
    const std::int32_t result = lookup(joined);
    if (l < 0 || r < 0 || result < 0) continue;
    merges_.emplace(merge_key(l, r),
                    Merge{static_cast<std::int32_t>(i), result});  // first rank wins
  }

  text_begin_.reserve(types_.size() + 1);
  for (std::size_t i = 0; i < types_.size(); ++i) {
    const std::string_view p = piece(static_cast<std::int32_t>(i));
    text_begin_.push_back(static_cast<std::uint32_t>(texts_.size()));
    if (types_[i] == TokenType::kNormal) {
      texts_.append(byte_level_decode(p));
    } else if (types_[i] == TokenType::kUserDefined) {
      texts_.append(p);  // added tokens are stored as plain text, not in the byte alphabet
    }
  }
  text_begin_.push_back(static_cast<std::uint32_t>(texts_.size()));
  return load_bos_eos_flags(file, pre_tokenizer_->add_bos_default());
}

absl::Status Tokenizer::encode_bpe(std::string_view fragment,
                                   std::vector<std::int32_t>& out) const {
  if (fragment.size() > static_cast<std::size_t>(INT32_MAX) / 4) {
    return absl::InvalidArgumentError(str_cat("text of ", fragment.size(), " bytes is too long"));
  }
  std::vector<WordSpan> words;
  pre_tokenizer_->split(fragment, words);

  std::vector<BpeSymbol> symbols;
  std::vector<BpeBigram> storage;
  std::string encoded;
  for (const WordSpan& w : words) {
    const std::string_view word = fragment.substr(w.begin, w.end - w.begin);
    if (pre_tokenizer_->ignore_merges()) {
      encoded.clear();
      for (char c : word) append_utf8(encoded, kByteToChar[static_cast<unsigned char>(c)]);
      if (const std::int32_t id = lookup(encoded); id >= 0) {
        out.push_back(id);
        continue;
      }
    }

    // One symbol per byte: each byte is one character of the alphabet.
    symbols.clear();
    for (std::size_t i = 0; i < word.size(); ++i) {
      const auto index = static_cast<std::int32_t>(i);
      symbols.push_back({byte_char_token_[static_cast<unsigned char>(word[i])], index - 1,
                         i + 1 < word.size() ? index + 1 : -1, true});
    }
    storage.clear();
    std::priority_queue<BpeBigram, std::vector<BpeBigram>, BpeBigramOrder> queue(
        BpeBigramOrder{}, std::move(storage));
    const auto try_add = [&](std::int32_t left, std::int32_t right) {
      if (left < 0 || right < 0) return;
      const std::int32_t lid = symbols[left].id;
      const std::int32_t rid = symbols[right].id;
      if (lid < 0 || rid < 0) return;
      const auto it = merges_.find(merge_key(lid, rid));
      if (it == merges_.end()) return;
      queue.push({it->second.rank, left, right, lid, rid, it->second.result});
    };
    for (std::size_t i = 1; i < symbols.size(); ++i) {
      try_add(static_cast<std::int32_t>(i - 1), static_cast<std::int32_t>(i));
    }
    while (!queue.empty()) {
      const BpeBigram b = queue.top();
      queue.pop();
      BpeSymbol& l = symbols[b.left];
      BpeSymbol& r = symbols[b.right];
      // A symbol's id only changes by growing, so unchanged ids on two
      // neighbours mean the pair is still current.
      if (!l.alive || !r.alive || l.next != b.right || l.id != b.left_id || r.id != b.right_id) {
        continue;
      }
      l.id = b.result;
      r.alive = false;
      l.next = r.next;
      if (r.next >= 0) symbols[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }

    for (std::int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
      if (symbols[i].id >= 0) {
        out.push_back(symbols[i].id);
      } else {
        push_byte(-1, out);  // only an unmerged single byte can lack a token
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace hearth::engine
