#include "engine/token_stream_decoder.h"

#include "engine/unicode.h"

namespace hearth::engine {

TokenStreamDecoder::TokenStreamDecoder(const Tokenizer& tokenizer, Start start)
    : tokenizer_(tokenizer), start_(start) {
  state_.at_text_start = start_ == Start::kSequenceStart;
  pending_.reserve(tokenizer_.max_text_bytes() + 8);
}

void TokenStreamDecoder::push(std::int32_t id, std::string& out) {
  tokenizer_.decode_step(id, state_, pending_);
  std::size_t pos = 0;
  while (pos < pending_.size()) {
    const Utf8Char ch = decode_utf8(pending_, pos);
    if (ch.status == Utf8Status::kIncomplete) break;  // wait for the rest of the character
    if (ch.status == Utf8Status::kOk) {
      out.append(pending_, pos, ch.length);
    } else {
      append_utf8(out, 0xFFFD);
    }
    pos += ch.length;
  }
  pending_.erase(0, pos);
}

void TokenStreamDecoder::flush(std::string& out) {
  out.append(sanitize_utf8(pending_));
  pending_.clear();
  state_ = Tokenizer::DecodeState{};
  state_.at_text_start = start_ == Start::kSequenceStart;
}

}  // namespace hearth::engine
