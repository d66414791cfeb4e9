// Pre-tokenizers for byte-level BPE ("gpt2") vocabularies: split text into the
// words that BPE merges never cross, as named by `tokenizer.ggml.pre`.
//
// Each model family's Hugging Face tokenizer splits with one or more regexes
// applied in sequence: every regex splits each piece left by the previous one
// into its matches and the unmatched text between them (both kept, in order;
// lookaheads and `$` see only the current piece). The regexes are implemented
// here as hand-written matchers over Unicode categories (engine/unicode.h),
// not with a regex engine, following the rule lists llama.cpp uses for the
// same names (for tekken and gpt-4o, the Hugging Face regexes themselves, with
// real Unicode letter subcategories where llama.cpp approximates case with
// ASCII tests):
//
//   gpt2        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama3      (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//               | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2       llama3 with \p{N} (single digits) instead of \p{N}{1,3}
//   starcoder   \p{N}  then gpt2
//   falcon      [\p{P}\$\+<=>\^~\|`]+  then gpt2  then [0-9][0-9][0-9]
//   deepseek-coder  [\r\n]  then \s?\p{L}+  then \s?\p{P}+  then [一-龥ࠀ-一가-퟿]+  then
//   \p{N} deepseek-llm    [\r\n]  then \s?[cased letters]+  then \s?[!-/:-~！-／：-～‘-‟　-。]+
//                   then \s+$  then [一-龥ࠀ-一가-퟿]+  then \p{N}+
//   tekken      [^\r\n\p{L}\p{N}]?U*L+|[^\r\n\p{L}\p{N}]?U+L*|\p{N}
//               | ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//               where U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], L = [\p{Ll}\p{Lm}\p{Lo}\p{M}]
//   gpt-4o      tekken with C = (?i:'s|'t|'re|'ve|'m|'ll|'d) optional after U*L+
//               and after U+L*, and \p{N}{1,3} instead of \p{N}
//
// \s is the Unicode White_Space property. Bytes that are not well-formed UTF-8
// are kept (each ill-formed sequence is one pseudo-character of no letter,
// number, punctuation or space class), so splitting never fails and the words
// always cover the input exactly.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace hearth::engine {

enum class PreTokenizerRules {
  kGpt2,
  kLlama3,
  kQwen2,
  kStarcoder,
  kFalcon,
  kDeepseekCoder,
  kDeepseekLlm,
  kTekken,
  kGpt4o,
};

// A word: bytes [begin, end) of the split text.
struct WordSpan {
  std::size_t begin = 0;
  std::size_t end = 0;
};

class PreTokenizer {
 public:
  // The pre-tokenizer for a `tokenizer.ggml.pre` value. Accepted names:
  //   gpt2 rules:      "" (key absent), "default", "gpt-2", "mpt", "phi-2", "olmo"
  //   llama3 rules:    "llama-bpe", "llama3", "llama-v3", "falcon3" (with Llama 3's
  //                    ignore_merges and BOS), "dbrx", "smaug-bpe" (without: OLMo 2,
  //                    Phi-4, Smaug)
  //   qwen2 rules:     "qwen2", "deepseek-r1-qwen", "stablelm2"
  //   starcoder rules: "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone"
  //   "falcon", "deepseek-coder", "deepseek-llm"
  //   "tekken" (with Llama 3's ignore_merges and BOS, as llama.cpp gives Mistral
  //   Nemo's tokenizer), "gpt-4o"
  // "default"/absent use the gpt2 rules, which is what GPT-2-style tokenizers
  // without a recorded pre-tokenizer (e.g. GPT-NeoX's) actually do; llama.cpp
  // uses a different fallback there. Any other name is InvalidArgument naming it.
  static absl::StatusOr<PreTokenizer> for_name(std::string_view pre);
  explicit PreTokenizer(PreTokenizerRules rules)
      : PreTokenizer(rules,
                     rules == PreTokenizerRules::kLlama3 || rules == PreTokenizerRules::kTekken) {}
  // llama3_flags: Llama 3's ignore_merges and BOS default (below), which
  // llama.cpp also gives tekken.
  PreTokenizer(PreTokenizerRules rules, bool llama3_flags)
      : rules_(rules), llama3_flags_(llama3_flags) {}

  PreTokenizerRules rules() const { return rules_; }
  // Llama 3 tokenizers skip the merges for a word that is itself a token
  // (Hugging Face's `ignore_merges`).
  bool ignore_merges() const { return llama3_flags_; }
  // Whether these models add BOS when `tokenizer.ggml.add_bos_token` is absent
  // (llama.cpp's per-pre-tokenizer defaults: only Llama 3 and tekken do).
  bool add_bos_default() const { return llama3_flags_; }

  // Splits `text` (any bytes) into words that cover it in order; empty words
  // are never produced. Replaces the contents of `words`.
  void split(std::string_view text, std::vector<WordSpan>& words) const;
  // Convenience for tests: the words as strings.
  std::vector<std::string> split(std::string_view text) const;

 private:
  PreTokenizerRules rules_;
  bool llama3_flags_;
};

}  // namespace hearth::engine
