// Fuzz target: both tokenizers, encode and streaming decode.
//
// The vocabulary comes from $HEARTH_FUZZ_VOCAB (a GGUF file: run once with a
// `llama` (SentencePiece) vocabulary and once with a `gpt2` (byte-level BPE)
// one), or, when unset, from the built-in synthetic demo model. The first
// input byte picks the options (BOS, special-token parsing); the rest is the
// text. Checked properties, beyond "no crash":
//   - every id encode() returns is inside the vocabulary;
//   - streaming decode of those ids, piece by piece, equals decode() of all
//     of them, and never emits a broken UTF-8 sequence (each piece is valid
//     UTF-8 on its own);
//   - arbitrary ids (the text's bytes read as ids) decode without crashing.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf.h"
#include "engine/synthetic_model.h"
#include "engine/token_stream_decoder.h"
#include "engine/tokenizer.h"

namespace {

using namespace hearth::engine;

struct Vocab {
  std::string bytes;  // the synthetic model's image, when used
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
};

Vocab* load() {
  auto* v = new Vocab;
  if (const char* path = std::getenv("HEARTH_FUZZ_VOCAB")) {
    auto f = GgufFile::open(path);
    if (!f.ok()) {
      std::fprintf(stderr, "HEARTH_FUZZ_VOCAB=%s: %s\n", path,
                   std::string(f.status().message()).c_str());
      std::abort();
    }
    v->file = std::move(*f);
  } else {
    SyntheticModelSpec spec = demo_model_spec();
    spec.n_layer = 1;
    auto bytes = synthesize_model(spec);
    if (!bytes.ok()) std::abort();
    v->bytes = std::move(*bytes);
    auto f = GgufFile::parse(reinterpret_cast<const std::uint8_t*>(v->bytes.data()),
                             v->bytes.size(), "demo");
    if (!f.ok()) std::abort();
    v->file = std::move(*f);
  }
  auto t = Tokenizer::from_gguf(*v->file);
  if (!t.ok()) {
    std::fprintf(stderr, "vocabulary: %s\n", std::string(t.status().message()).c_str());
    std::abort();
  }
  v->tokenizer = std::move(*t);
  return v;
}

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing past
// U+10FFFF.
bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    unsigned char lo = 0x80, hi = 0xbf;  // range of the second byte
    if (c < 0x80) {
      n = 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
      n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf)) return false;
    }
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Vocab* vocab = load();
  if (size == 0) return 0;
  const Tokenizer& tok = *vocab->tokenizer;
  TokenizeOptions options;
  options.add_bos = (data[0] & 1) != 0;
  options.parse_special = (data[0] & 2) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  auto ids = tok.encode(text, options);
  if (ids.ok()) {
    for (std::int32_t id : *ids)
      if (id < 0 || static_cast<std::size_t>(id) >= tok.vocab_size()) std::abort();
    TokenStreamDecoder stream(tok);
    std::string streamed;
    for (std::int32_t id : *ids) {
      const std::string piece = stream.push(id);
      if (!valid_utf8(piece)) std::abort();
      streamed += piece;
    }
    const std::string tail = stream.flush();
    if (!valid_utf8(tail)) std::abort();
    streamed += tail;
    if (valid_utf8(tok.decode(*ids)) && streamed != tok.decode(*ids)) std::abort();
  }
  // Arbitrary ids, including out-of-vocabulary ones.
  std::vector<std::int32_t> raw;
  for (std::size_t i = 1; i + 1 < size; i += 2)
    raw.push_back(static_cast<std::int32_t>(data[i] | (data[i + 1] << 8)) - 256);
  TokenStreamDecoder stream(tok);
  for (std::int32_t id : raw)
    if (!valid_utf8(stream.push(id))) std::abort();
  if (!valid_utf8(stream.flush())) std::abort();
  (void)tok.decode(raw);
  return 0;
}
