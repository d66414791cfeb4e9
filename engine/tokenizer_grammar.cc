// The tokenizer's view for structured output: what each token adds to the
// output, as bytes, for grammar::VocabularyIndex.
#include "engine/tokenizer.h"
#include "grammar/token_mask.h"

namespace hearth::engine {

const std::shared_ptr<const grammar::VocabularyIndex>& Tokenizer::grammar_vocabulary() const {
  std::call_once(grammar_vocabulary_once_, [this] {
    std::vector<std::string> bytes(types_.size());
    for (std::size_t id = 0; id < types_.size(); ++id) {
      const TokenType t = types_[id];
      // Generated text continues the prompt, so a token adds exactly its
      // token_text() (TokenStreamDecoder::Start::kContinuation).
      if (t == TokenType::kNormal || t == TokenType::kByte || t == TokenType::kUserDefined)
        bytes[id] = token_text(static_cast<std::int32_t>(id));
    }
    grammar_vocabulary_ = std::make_shared<const grammar::VocabularyIndex>(std::move(bytes));
  });
  return grammar_vocabulary_;
}

}  // namespace hearth::engine
