// Text <-> token ids for llama-family GGUF models, from the vocabulary in the
// file's metadata. Two tokenizer models (`tokenizer.ggml.model`):
//
// * "llama": SentencePiece-style BPE over scored pieces (llama.cpp's "SPM"
//   algorithm). The text gets a leading space, spaces become "▁" (U+2581),
//   and the adjacent pair whose merged piece has the highest score is merged
//   until none is a piece; characters no piece covers fall back to byte
//   tokens `<0xNN>` (or the unknown token when there are none).
// * "gpt2": byte-level BPE. The text is split into words by the
//   pre-tokenizer named by `tokenizer.ggml.pre` (engine/pretokenizer.h), each
//   byte is mapped to GPT-2's printable alphabet, and `tokenizer.ggml.merges`
//   are applied lowest rank first.
//
// Special tokens. User-defined tokens (type 4) are always cut out of the text
// before the model runs, as Hugging Face's "added tokens" are; the reference
// ids depend on it (MPT's runs of spaces, DeepSeek's "ü"). Control (3) and
// unknown (2) tokens are cut out only when TokenizeOptions::parse_special is
// set; otherwise "<s>" is ordinary text. The text is scanned left to right and
// where several special tokens match at one position the longest wins. For "llama" models the text
// after a special token gets the leading space again, as at the start.
// Models whose `general.name` says Phi-3 ("phi-3" or "phi3", any case) drop
// the ASCII whitespace after each special token but <unk>, <s> and
// <|endoftext|>, as llama.cpp does for them (Hugging Face's `rstrip` on
// Phi-3's added tokens): "<|user|>\nHi" is <|user|> "▁Hi".
//
// Control, unknown, byte and unused tokens never come out of merging, so text
// can only produce them through parse_special or byte fallback.
//
// Ill-formed UTF-8 in the text is not an error: the bytes are tokenized as
// they are (byte tokens for "llama", the byte alphabet for "gpt2"). A byte the
// vocabulary cannot represent at all (no byte token or alphabet character and
// no unknown token; e.g. Falcon has none for 0x03 or 0xFF, MPT none for
// 0xC0, 0xC1, 0xF5..0xFF) is dropped, as the Hugging Face and llama.cpp
// tokenizers drop it. So decode(encode(s)) == s byte for byte whenever the
// vocabulary represents every byte of s, with one more exception: DeepSeek's
// vocabularies hold the alphabet characters of the bytes that never occur in
// UTF-8 (0xC0, 0xC1, 0xF5..0xFF) only as user-defined tokens, whose text is
// the character itself ("ü"), so such stray bytes decode as that character.
//
// A Tokenizer is immutable after loading and safe to share between threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/gguf.h"
#include "engine/pretokenizer.h"

namespace hearth::grammar {
class VocabularyIndex;
}

namespace hearth::engine {

// `tokenizer.ggml.token_type` values.
enum class TokenType : std::uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Note: GCC 12's -Wmissing-field-initializers (on under -Wextra) flags a
// designated initializer that omits a member, so name all three
// ({.add_bos = false, .add_eos = std::nullopt, .parse_special = true}) or
// assign members of a default-constructed value.
struct TokenizeOptions {
  // Unset: the model's default (Tokenizer::add_bos_default / add_eos_default).
  std::optional<bool> add_bos;
  std::optional<bool> add_eos;
  // Also cut control and unknown tokens ("<s>", "<|im_end|>") out of the text
  // (user-defined ones always are). Only for trusted text such as a chat
  // template's own markup: with it, user text can forge turn boundaries.
  bool parse_special = false;
};

class Tokenizer {
 public:
  // Reads the vocabulary from `file`'s metadata and copies what it needs (the
  // GgufFile may be closed afterwards). Errors name the key at fault:
  // missing or mistyped arrays, arrays whose lengths disagree, token types
  // outside 1..6, special token ids outside the vocabulary (0xFFFFFFFF and -1
  // mean "none"), malformed merges or byte pieces, add_bos_token without a
  // BOS id, an unsupported tokenizer.ggml.model (e.g. "bert") or an unknown
  // tokenizer.ggml.pre.
  //
  // Defaults when keys are absent, following llama.cpp:
  //   "llama": bos 1, eos 2, unk 0 (when the vocabulary has them), BOS added,
  //            leading space added (tokenizer.ggml.add_space_prefix).
  //   "gpt2":  no bos/eos/unk; BOS added only for Llama 3 ("llama-bpe"), see
  //            PreTokenizer::add_bos_default.
  //   EOS is never added unless tokenizer.ggml.add_eos_token says so.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);

  // Token ids for `text` (any bytes), with BOS/EOS as `options` says. Fails
  // only when BOS/EOS is asked for but the vocabulary has none
  // (FailedPrecondition) or the text is over 512 MiB (InvalidArgument).
  absl::StatusOr<std::vector<std::int32_t>> encode(std::string_view text,
                                                   const TokenizeOptions& options = {}) const;

  // The text of a whole sequence: token_text() of each id, concatenated,
  // except that for "llama" models the space the encoder inserted is dropped
  // again: the first character of text after the start of the sequence, or
  // after a control or user-defined token, if it is a space. So
  // decode(encode(s)) == s. Ids outside the vocabulary contribute nothing.
  // The result is raw bytes: it can be ill-formed UTF-8 when the ids split a
  // character (TokenStreamDecoder sanitizes).
  std::string decode(std::span<const std::int32_t> ids) const;

  // The piece as stored in the vocabulary ("▁the", "<0x0A>", "Ġthe"); empty
  // for ids outside it.
  std::string_view piece(std::int32_t id) const;
  // The bytes the token contributes when decoding: "▁" becomes a space
  // ("llama"), byte tokens become their byte, GPT-2 alphabet characters become
  // the bytes they stand for ("gpt2"), user-defined tokens are their text;
  // control, unknown and unused tokens contribute nothing.
  std::string token_text(std::int32_t id) const;
  TokenType token_type(std::int32_t id) const;  // kUnused for ids outside the vocabulary
  // The longest token_text() of the vocabulary, in bytes: what one token can
  // add to decoded text (streaming decoders size their buffers by it).
  std::size_t max_text_bytes() const { return max_text_bytes_; }
  // The fewest tokens encode() can give for `text` (BOS and EOS aside),
  // known from its length alone: a token matches at most as many bytes of
  // text as its piece has (a byte or an unknown character: at most 4). 0
  // when the vocabulary drops bytes it has no token for (no byte tokens, no
  // unknown token), which makes no bound hold.
  std::size_t min_tokens(std::string_view text) const;

  std::size_t vocab_size() const { return types_.size(); }
  std::int32_t bos() const { return bos_; }  // -1: none
  std::int32_t eos() const { return eos_; }  // -1: none
  std::int32_t unk() const { return unk_; }  // -1: none
  // End of generation: EOS, EOT/EOM when the metadata names them, and control
  // tokens whose text is a known end-of-turn marker (<|eot_id|>, <|im_end|>,
  // <|end|>, <end_of_turn>, <|endoftext|>, <|eom_id|>, <EOT>,
  // <｜end▁of▁sentence｜>).
  bool is_eog(std::int32_t id) const;
  // Every end-of-generation id (EOS, EOT, ...), ascending.
  std::span<const std::int32_t> eog_tokens() const { return eog_; }

  // The vocabulary as structured output sees it (grammar/token_mask.h):
  // each token's token_text(), none for control, unknown and unused tokens
  // (a grammar never allows them). Built on first use, thread-safe, then
  // shared by every constrained sequence of the model.
  const std::shared_ptr<const grammar::VocabularyIndex>& grammar_vocabulary() const;
  bool add_bos_default() const { return add_bos_; }
  bool add_eos_default() const { return add_eos_; }
  // Whether the "llama" leading-space rule applies.
  bool add_space_prefix() const { return add_space_prefix_; }
  std::string_view model() const { return model_; }  // "llama" | "gpt2"
  std::string_view pre() const { return pre_; }      // tokenizer.ggml.pre, "" when absent

  // The incremental form of decode(), shared with TokenStreamDecoder: appends
  // what `id` contributes at this point of a sequence to `out`.
  struct DecodeState {
    // True at the start of text (sequence start, or after a control or
    // user-defined token), where a leading space from the encoder is dropped.
    bool at_text_start = true;
  };
  void decode_step(std::int32_t id, DecodeState& state, std::string& out) const;

 private:
  Tokenizer() = default;

  enum class Kind { kSpm, kBpe };
  struct Merge {
    std::int32_t rank;
    std::int32_t result;
  };
  struct SpecialToken {
    std::string_view text;  // into pieces_
    std::int32_t id;
    bool always;  // user-defined: matched even without parse_special
    bool rstrip;  // the whitespace after it is dropped
  };

  // tokenizer.cc
  absl::Status load_common(const GgufFile& file);
  void index_special_tokens();
  bool valid_id(std::int32_t id) const {
    return id >= 0 && static_cast<std::size_t>(id) < types_.size();
  }
  std::int32_t lookup(std::string_view text) const;  // mergeable piece, -1 if none
  absl::Status load_bos_eos_flags(const GgufFile& file, bool add_bos_default);
  // Appends `token` (a byte's own token), else the unknown token, else nothing.
  void push_byte(std::int32_t token, std::vector<std::int32_t>& out) const;
  // tokenizer_spm.cc
  absl::Status load_spm(const GgufFile& file);
  absl::Status encode_spm(std::string_view fragment, bool space_prefix,
                          std::vector<std::int32_t>& out) const;
  // tokenizer_bpe.cc
  absl::Status load_bpe(const GgufFile& file);
  absl::Status encode_bpe(std::string_view fragment, std::vector<std::int32_t>& out) const;

  Kind kind_ = Kind::kSpm;
  std::string model_;
  std::string pre_;
  bool phi3_rstrip_ = false;  // general.name says Phi-3: SpecialToken::rstrip

  // Piece i is pieces_[piece_begin_[i], piece_begin_[i + 1]); what it
  // contributes to decoded text is likewise in texts_ / text_begin_.
  std::string pieces_;
  std::vector<std::uint32_t> piece_begin_;
  std::string texts_;
  std::vector<std::uint32_t> text_begin_;
  std::size_t max_text_bytes_ = 0;
  std::size_t max_piece_bytes_ = 0;  // of pieces_, at least 4
  bool keeps_every_byte_ = false;    // no byte of a text is dropped by encode()
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  // Pieces that merging may produce (normal and user-defined tokens); when two
  // tokens share a piece a normal one wins, then the lowest id.
  std::unordered_map<std::string_view, std::int32_t> mergeable_;
  // Special tokens grouped by first byte, longest first within a group:
  // the group for byte b is special_[special_first_[b], special_first_[b + 1]).
  std::vector<SpecialToken> special_;
  std::array<std::uint32_t, 257> special_first_{};
  bool has_always_special_ = false;

  // "llama": the <0xNN> token for each byte, -1 where the vocabulary has none.
  std::array<std::int32_t, 256> byte_token_{};
  // "gpt2": the token of each byte's GPT-2 alphabet character, -1 if none;
  // merges keyed by (left id << 32 | right id).
  std::array<std::int32_t, 256> byte_char_token_{};
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::optional<PreTokenizer> pre_tokenizer_;

  std::int32_t bos_ = -1;
  std::int32_t eos_ = -1;
  std::int32_t unk_ = -1;
  std::vector<std::int32_t> eog_;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;

  // tokenizer_grammar.cc
  mutable std::once_flag grammar_vocabulary_once_;
  mutable std::shared_ptr<const grammar::VocabularyIndex> grammar_vocabulary_;
};

}  // namespace hearth::engine
