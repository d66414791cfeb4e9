// Incremental detokenization for streaming generated text.
//
// Tokens do not line up with characters: a multi-byte UTF-8 character can be
// split over several byte tokens ("日" = <0xE6><0x97><0xA5>), so text cannot be
// emitted token by token as decode() would produce it. TokenStreamDecoder
// holds back the bytes of an unfinished character until it completes, and
// replaces ill-formed bytes with U+FFFD, so every chunk it returns is
// well-formed UTF-8 (safe for a protobuf string field) and the chunks
// concatenate to exactly Tokenizer::decode() of the same ids whenever that is
// well-formed. The "llama" leading-space rule is applied exactly as decode()
// applies it.
//
// Not thread-safe; one decoder per sequence. The Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "engine/tokenizer.h"

namespace hearth::engine {

class TokenStreamDecoder {
 public:
  // Where the ids start. kSequenceStart: the first id begins the text, as in
  // decode() (a "llama" model's first leading space is dropped). kContinuation:
  // the ids continue text already shown, e.g. generation after a prompt, so
  // the first token's leading space is kept ("▁there" after "Once upon a time").
  enum class Start { kSequenceStart, kContinuation };

  explicit TokenStreamDecoder(const Tokenizer& tokenizer, Start start = Start::kSequenceStart);

  // Adds one id and appends to `out` the text that is now complete (possibly
  // none). No heap allocation: the held-back bytes are at most one
  // unfinished character plus one token's text, reserved at construction.
  void push(std::int32_t id, std::string& out);
  std::string push(std::int32_t id) {
    std::string out;
    push(id, out);
    return out;
  }
  // Ends the sequence: appends what is held back, an unfinished character
  // becoming U+FFFD. The decoder then starts over as if newly constructed.
  void flush(std::string& out);
  std::string flush() {
    std::string out;
    flush(out);
    return out;
  }

 private:
  const Tokenizer& tokenizer_;
  Start start_;
  Tokenizer::DecodeState state_;
  std::string pending_;  // bytes decoded but not yet returned
};

}  // namespace hearth::engine
