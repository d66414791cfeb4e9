// PieceSink: where a generation's pieces go, whatever the transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/logprobs.h"
#include "engine/tokenizer.h"

namespace hearth::server {

// A generated token's log-probabilities and the tokenizer that gives its
// tokens' text; valid during the call that receives it.
struct PieceLogprobs {
  const engine::TokenLogprobs& values;
  const engine::Tokenizer& tokenizer;
};

// Called on the model's step loop thread (server/step_loop.h).
class PieceSink {
 public:
  virtual ~PieceSink() = default;
  // Whether `pieces` more can be taken now without waiting. A sequence whose
  // sink has no room for a step's pieces (at most two) is not stepped.
  virtual bool has_room(std::size_t pieces) const = 0;
  // One piece: text (possibly empty) and its token (-1: text held back until
  // the end), with the token's log-probabilities when the request asked for
  // them (else nullptr). Must not block.
  virtual void piece(std::string_view text, std::int32_t token, const PieceLogprobs* logprobs) = 0;
  // The client can no longer be reached: the generation is cancelled.
  virtual bool failed() const = 0;
};

}  // namespace hearth::server
