// Loading a vocabulary from GGUF metadata, special tokens, and the parts of
// encoding and decoding both tokenizer models share.
#include "engine/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <utility>

#include "base/status_macros.h"
#include "base/str_cat.h"

namespace hearth::engine {
namespace {

constexpr std::string_view kModelKey = "tokenizer.ggml.model";
constexpr std::string_view kPreKey = "tokenizer.ggml.pre";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";
constexpr std::string_view kNameKey = "general.name";

// Texts of control tokens that end a turn in common chat formats; models
// rarely name them in the metadata, so they are recognized by text (as
// llama.cpp does).
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
    "<|endoftext|>", "<|eom_id|>", "<EOT>",   "<｜end▁of▁sentence｜>",
};

// C's isspace() in the "C" locale, which llama.cpp's rstrip uses.
bool is_ascii_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// A special token id from the metadata: `fallback` when the key is absent,
// -1 for the "none" encodings (-1 or 0xFFFFFFFF), an error when the id is
// outside the vocabulary.
absl::StatusOr<std::int32_t> read_token_id(const GgufFile& file, std::string_view key,
                                           std::int32_t fallback, std::size_t n_tokens) {
  if (file.find(key) == nullptr) {
    return (fallback >= 0 && static_cast<std::size_t>(fallback) < n_tokens) ? fallback : -1;
  }
  HEARTH_ASSIGN_OR_RETURN(auto v, file.get_int(key));
  if (v == -1 || v == 0xFFFFFFFFll) return -1;
  if (v < 0 || static_cast<std::uint64_t>(v) >= n_tokens) {
    return absl::InvalidArgumentError(str_cat(
        file.name(), ": ", key, " = ", v, " is outside the vocabulary of ", n_tokens, " tokens"));
  }
  return static_cast<std::int32_t>(v);
}

absl::StatusOr<bool> read_bool(const GgufFile& file, std::string_view key, bool fallback) {
  if (file.find(key) == nullptr) return fallback;
  return file.get_bool(key);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& file) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  HEARTH_RETURN_IF_ERROR(t->load_common(file));
  absl::Status s = t->kind_ == Kind::kSpm ? t->load_spm(file) : t->load_bpe(file);
  if (!s.ok()) return s;
  t->index_special_tokens();
  for (std::size_t i = 0; i + 1 < t->text_begin_.size(); ++i)
    t->max_text_bytes_ =
        std::max<std::size_t>(t->max_text_bytes_, t->text_begin_[i + 1] - t->text_begin_[i]);
  t->max_piece_bytes_ = 4;
  for (std::size_t i = 0; i + 1 < t->piece_begin_.size(); ++i)
    t->max_piece_bytes_ =
        std::max<std::size_t>(t->max_piece_bytes_, t->piece_begin_[i + 1] - t->piece_begin_[i]);
  // A byte without a token becomes the unknown token, or is dropped.
  const auto& byte_tokens = t->kind_ == Kind::kSpm ? t->byte_token_ : t->byte_char_token_;
  t->keeps_every_byte_ = t->unk_ >= 0 || std::all_of(byte_tokens.begin(), byte_tokens.end(),
                                                     [](std::int32_t id) { return id >= 0; });
  return t;
}

std::size_t Tokenizer::min_tokens(std::string_view text) const {
  // Each token's piece is at least as long as the text it matches: "▁" (3
  // bytes) for a space, the GPT-2 alphabet's 1-2 bytes for a byte, "<0xNN>"
  // for a byte; special tokens match their piece. The 1: a space the
  // tokenizer may add before the text.
  if (!keeps_every_byte_) return 0;
  return text.empty() ? 0 : (text.size() - 1) / max_piece_bytes_;
}

absl::Status Tokenizer::load_common(const GgufFile& file) {
  HEARTH_ASSIGN_OR_RETURN(auto model, file.get_string(kModelKey));
  if (model == "llama") {
    kind_ = Kind::kSpm;
  } else if (model == "gpt2") {
    kind_ = Kind::kBpe;
  } else {
    return absl::UnimplementedError(
        str_cat(file.name(), ": ", kModelKey, " = '", model,
                "' is not supported; hearth tokenizes 'llama' (SentencePiece-style) and 'gpt2' "
                "(byte-level BPE) vocabularies"));
  }
  model_ = std::string(model);
  if (file.find(kNameKey) != nullptr) {
    HEARTH_ASSIGN_OR_RETURN(auto name, file.get_string(kNameKey));
    std::string lower(name);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    phi3_rstrip_ =
        lower.find("phi-3") != std::string::npos || lower.find("phi3") != std::string::npos;
  }
  if (file.find(kPreKey) != nullptr) {
    HEARTH_ASSIGN_OR_RETURN(auto pre, file.get_string(kPreKey));
    pre_ = std::string(pre);
  }

  HEARTH_ASSIGN_OR_RETURN(auto tokens, file.get_string_array(kTokensKey));
  const std::size_t n = tokens.size();
  if (n == 0)
    return absl::InvalidArgumentError(str_cat(file.name(), ": ", kTokensKey, " is empty"));
  if (n > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    return absl::InvalidArgumentError(str_cat(file.name(), ": ", kTokensKey, " has ", n,
                                              " entries, more than token ids can number"));
  }
  const auto length_error = [&](std::string_view key, std::size_t got) {
    return absl::InvalidArgumentError(
        str_cat(file.name(), ": ", key, " has ", got, " entries but ", kTokensKey, " has ", n));
  };

  scores_.assign(n, 0.0f);
  if (file.find(kScoresKey) != nullptr) {
    HEARTH_ASSIGN_OR_RETURN(auto scores, file.get_float_array(kScoresKey));
    if (scores.size() != n) return length_error(kScoresKey, scores.size());
    for (std::size_t i = 0; i < n; ++i) scores_[i] = static_cast<float>(scores[i]);
  }
  types_.assign(n, TokenType::kNormal);
  if (file.find(kTypesKey) != nullptr) {
    HEARTH_ASSIGN_OR_RETURN(auto types, file.get_int_array(kTypesKey));
    if (types.size() != n) return length_error(kTypesKey, types.size());
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t v = types[i];
      if (v < 1 || v > 6) {
        return absl::InvalidArgumentError(
            str_cat(file.name(), ": ", kTypesKey, "[", i, "] = ", v,
                    " is not a token type (1 normal, 2 unknown, 3 control, 4 user-defined, "
                    "5 unused, 6 byte)"));
      }
      types_[i] = static_cast<TokenType>(v);
    }
  }

  std::size_t total = 0;
  for (std::string_view p : tokens) total += p.size();
  if (total > std::numeric_limits<std::uint32_t>::max()) {
    return absl::InvalidArgumentError(
        str_cat(file.name(), ": ", kTokensKey, " holds ", total, " bytes of text, too many"));
  }
  pieces_.reserve(total);
  piece_begin_.reserve(n + 1);
  for (std::string_view p : tokens) {
    piece_begin_.push_back(static_cast<std::uint32_t>(pieces_.size()));
    pieces_.append(p);
  }
  piece_begin_.push_back(static_cast<std::uint32_t>(pieces_.size()));

  // Normal pieces first so that they win over user-defined duplicates; within
  // a type the lowest id wins (emplace keeps the first).
  mergeable_.reserve(n);
  for (TokenType type : {TokenType::kNormal, TokenType::kUserDefined}) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::string_view p = piece(static_cast<std::int32_t>(i));
      if (types_[i] == type && !p.empty()) mergeable_.emplace(p, static_cast<std::int32_t>(i));
    }
  }

  // Special ids. "llama" vocabularies without the keys use SentencePiece's
  // conventional ids, as llama.cpp does; "gpt2" ones have no defaults.
  const bool spm = kind_ == Kind::kSpm;
  absl::StatusOr<std::int32_t> bos =
      read_token_id(file, "tokenizer.ggml.bos_token_id", spm ? 1 : -1, n);
  if (!bos.ok()) return bos.status();
  absl::StatusOr<std::int32_t> eos =
      read_token_id(file, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, n);
  if (!eos.ok()) return eos.status();
  absl::StatusOr<std::int32_t> unk =
      read_token_id(file, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, n);
  if (!unk.ok()) return unk.status();
  HEARTH_ASSIGN_OR_RETURN(auto eot, read_token_id(file, "tokenizer.ggml.eot_token_id", -1, n));
  HEARTH_ASSIGN_OR_RETURN(auto eom, read_token_id(file, "tokenizer.ggml.eom_token_id", -1, n));
  bos_ = *bos;
  eos_ = *eos;
  unk_ = *unk;
  for (std::int32_t id : {eos_, eot, eom}) {
    if (id >= 0) eog_.push_back(id);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (types_[i] != TokenType::kControl) continue;
    const std::string_view p = piece(static_cast<std::int32_t>(i));
    if (std::find(std::begin(kEndOfTurnTexts), std::end(kEndOfTurnTexts), p) !=
        std::end(kEndOfTurnTexts)) {
      eog_.push_back(static_cast<std::int32_t>(i));
    }
  }
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
  return absl::OkStatus();
}

// Reads add_bos/add_eos after the model-specific loader has settled the
// default (it depends on the pre-tokenizer for "gpt2").
absl::Status Tokenizer::load_bos_eos_flags(const GgufFile& file, bool add_bos_default) {
  HEARTH_ASSIGN_OR_RETURN(auto add_bos,
                          read_bool(file, "tokenizer.ggml.add_bos_token", add_bos_default));
  HEARTH_ASSIGN_OR_RETURN(auto add_eos, read_bool(file, "tokenizer.ggml.add_eos_token", false));
  add_bos_ = add_bos;
  add_eos_ = add_eos;
  if (add_bos_ && bos_ < 0) {
    return absl::InvalidArgumentError(
        str_cat(file.name(), ": BOS is to be added (tokenizer.ggml.add_bos_token or the ", model_,
                " default) but there is no tokenizer.ggml.bos_token_id"));
  }
  if (add_eos_ && eos_ < 0) {
    return absl::InvalidArgumentError(str_cat(
        file.name(),
        ": tokenizer.ggml.add_eos_token is true but there is no tokenizer.ggml.eos_token_id"));
  }
  return absl::OkStatus();
}

void Tokenizer::index_special_tokens() {
  special_.clear();
  for (std::size_t i = 0; i < types_.size(); ++i) {
    const TokenType t = types_[i];
    const std::string_view p = piece(static_cast<std::int32_t>(i));
    if (p.empty()) continue;
    if (t == TokenType::kUserDefined || t == TokenType::kControl || t == TokenType::kUnknown) {
      const bool rstrip = phi3_rstrip_ && p != "<unk>" && p != "<s>" && p != "<|endoftext|>";
      special_.push_back({p, static_cast<std::int32_t>(i), t == TokenType::kUserDefined, rstrip});
      has_always_special_ = has_always_special_ || t == TokenType::kUserDefined;
    }
  }
  std::stable_sort(special_.begin(), special_.end(),
                   [](const SpecialToken& a, const SpecialToken& b) {
                     const auto fa = static_cast<unsigned char>(a.text[0]);
                     const auto fb = static_cast<unsigned char>(b.text[0]);
                     if (fa != fb) return fa < fb;
                     return a.text.size() > b.text.size();
                   });
  std::size_t k = 0;
  for (std::size_t b = 0; b <= 256; ++b) {
    while (k < special_.size() && static_cast<unsigned char>(special_[k].text[0]) < b) ++k;
    special_first_[b] = static_cast<std::uint32_t>(k);
  }
}

std::int32_t Tokenizer::lookup(std::string_view text) const {
  const auto it = mergeable_.find(text);
  return it == mergeable_.end() ? -1 : it->second;
}

void Tokenizer::push_byte(std::int32_t token, std::vector<std::int32_t>& out) const {
  if (token >= 0) {
    out.push_back(token);
  } else if (unk_ >= 0) {
    out.push_back(unk_);
  }
  // Otherwise the byte is dropped, as the reference tokenizers drop it.
}

absl::StatusOr<std::vector<std::int32_t>> Tokenizer::encode(std::string_view text,
                                                            const TokenizeOptions& options) const {
  const bool add_bos = options.add_bos.value_or(add_bos_);
  const bool add_eos = options.add_eos.value_or(add_eos_);
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 2 + 2);
  if (add_bos) {
    if (bos_ < 0)
      return absl::FailedPreconditionError("add_bos is set but the vocabulary has no BOS token");
    out.push_back(bos_);
  }

  // Raw text between special tokens goes through the model; for "llama" a
  // fragment that starts the text or follows a special token gets the
  // leading space.
  bool after_special = true;
  std::size_t fragment_begin = 0;
  const auto encode_fragment = [&](std::size_t end) -> absl::Status {
    if (end <= fragment_begin) return absl::OkStatus();
    const std::string_view fragment = text.substr(fragment_begin, end - fragment_begin);
    absl::Status s = kind_ == Kind::kSpm
                         ? encode_spm(fragment, add_space_prefix_ && after_special, out)
                         : encode_bpe(fragment, out);
    after_special = false;
    return s;
  };

  if (options.parse_special || has_always_special_) {
    for (std::size_t i = 0; i < text.size();) {
      const auto first = static_cast<unsigned char>(text[i]);
      const SpecialToken* hit = nullptr;
      for (std::uint32_t k = special_first_[first]; k < special_first_[first + 1]; ++k) {
        const SpecialToken& s = special_[k];
        if ((s.always || options.parse_special) && text.substr(i, s.text.size()) == s.text) {
          hit = &s;  // the group is sorted longest first
          break;
        }
      }
      if (hit == nullptr) {
        ++i;
        continue;
      }
      HEARTH_RETURN_IF_ERROR(encode_fragment(i));
      out.push_back(hit->id);
      after_special = true;
      i += hit->text.size();
      if (hit->rstrip)
        while (i < text.size() && is_ascii_space(static_cast<unsigned char>(text[i]))) ++i;
      fragment_begin = i;
    }
  }
  HEARTH_RETURN_IF_ERROR(encode_fragment(text.size()));

  if (add_eos) {
    if (eos_ < 0)
      return absl::FailedPreconditionError("add_eos is set but the vocabulary has no EOS token");
    out.push_back(eos_);
  }
  return out;
}

void Tokenizer::decode_step(std::int32_t id, DecodeState& state, std::string& out) const {
  if (!valid_id(id)) return;
  std::string_view text(texts_.data() + text_begin_[id], text_begin_[id + 1] - text_begin_[id]);
  const TokenType type = types_[id];
  if (type == TokenType::kControl || type == TokenType::kUserDefined) {
    out.append(text);
    state.at_text_start = true;  // the encoder restarts the leading-space rule here
    return;
  }
  if (text.empty()) return;
  if (state.at_text_start && add_space_prefix_ && text.front() == ' ') text.remove_prefix(1);
  state.at_text_start = false;
  out.append(text);
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  DecodeState state;
  for (std::int32_t id : ids) decode_step(id, state, out);
  return out;
}

std::string_view Tokenizer::piece(std::int32_t id) const {
  if (!valid_id(id)) return {};
  return std::string_view(pieces_.data() + piece_begin_[id],
                          piece_begin_[id + 1] - piece_begin_[id]);
}

std::string Tokenizer::token_text(std::int32_t id) const {
  if (!valid_id(id)) return {};
  return texts_.substr(text_begin_[id], text_begin_[id + 1] - text_begin_[id]);
}

TokenType Tokenizer::token_type(std::int32_t id) const {
  return valid_id(id) ? types_[id] : TokenType::kUnused;
}

bool Tokenizer::is_eog(std::int32_t id) const {
  return std::binary_search(eog_.begin(), eog_.end(), id);
}

}  // namespace hearth::engine
