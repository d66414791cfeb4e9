// Fuzz target: structured output's grammar library. The first byte picks
// the input's kind:
//   'j': the rest is a JSON schema -> json_schema_to_gbnf; a schema the
//        converter accepts must give a grammar the parser accepts.
//   else: the rest is GBNF text, optionally followed by a NUL byte and
//        output bytes -> Grammar::parse, then the matcher follows the
//        output byte by byte, and the token mask of the states it meets
//        (over a small fixed vocabulary) must agree with a per-token check.
// Must never crash, leak or hang; every refusal must be INVALID_ARGUMENT.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"

namespace {

using hearth::grammar::Grammar;
using hearth::grammar::Matcher;
using hearth::grammar::VocabularyIndex;

const std::shared_ptr<const VocabularyIndex>& vocabulary() {
  static const auto vocab =
      std::make_shared<const VocabularyIndex>(std::vector<std::string>{"",
                                                                       "a",
                                                                       "ab",
                                                                       "b",
                                                                       "{",
                                                                       "}",
                                                                       "\"",
                                                                       "\\",
                                                                       " ",
                                                                       "\n",
                                                                       "0",
                                                                       "12",
                                                                       "-",
                                                                       ".",
                                                                       "true",
                                                                       "null",
                                                                       ",",
                                                                       ":",
                                                                       "[",
                                                                       "]",
                                                                       "\xc3",
                                                                       "\xa9",
                                                                       "\xc3\xa9",
                                                                       "\xe2\x82\xac",
                                                                       "\xf0\x9f\x98\x80",
                                                                       "\x80",
                                                                       "é\"",
                                                                       "\":",
                                                                       "x\"}"});
  return vocab;
}

void fuzz_schema(std::string_view schema) {
  absl::StatusOr<std::string> gbnf = hearth::grammar::json_schema_to_gbnf(schema);
  if (!gbnf.ok()) {
    if (gbnf.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return;
  }
  if (!Grammar::parse(*gbnf).ok()) std::abort();  // the converter wrote a bad grammar
}

void fuzz_grammar(std::string_view input) {
  const std::size_t nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  const std::string_view output = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  absl::StatusOr<std::shared_ptr<const Grammar>> g = Grammar::parse(text);
  if (!g.ok()) {
    if (g.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return;
  }
  Matcher m(*g);
  const VocabularyIndex& v = *vocabulary();
  // The mask is checked against every token's can_accept at bytes 0, 16
  // and 32: with a grammar of many nullable repeats ((.*){81}, a regression
  // input) each check costs the whole vocabulary's expansions, about 1 s
  // under ASan, and checking every 4th byte of 64 took 9-12 s per input
  // (past libFuzzer's 10 s timeout), though the server masks it in
  // milliseconds.
  for (std::size_t i = 0; i <= output.size() && i <= 32; ++i) {
    if (i % 16 == 0) {
      const hearth::grammar::TokenMask mask = v.mask(**g, m.state());
      for (std::size_t id = 0; id < v.size(); ++id) {
        const bool bit = (mask[id / 64] >> (id % 64)) & 1;
        const std::string& t = v.bytes(static_cast<std::int32_t>(id));
        if (bit != (!t.empty() && m.can_accept(t))) std::abort();
      }
    }
    if (i == output.size() || !m.accept(output.substr(i, 1))) break;
  }
  (void)m.complete();
  (void)m.must_end();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == 'j')
    fuzz_schema(input);
  else
    fuzz_grammar(input);
  return 0;
}
