// Fuzz target: the GGUF reader and everything that trusts what it returns
// (hyperparameters, weights, tokenizer). Any input must give either a model
// or a clear error, never a crash, an out-of-bounds read or a hang.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "engine/gguf.h"
#include "engine/model_config.h"
#include "engine/tokenizer.h"
#include "engine/weights.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hearth::engine;
  auto file = GgufFile::parse(data, size, "fuzz.gguf");
  if (!file.ok()) return 0;
  std::shared_ptr<const GgufFile> shared = std::move(*file);
  // Touch every metadata value and tensor the reader accepted.
  std::size_t sink = 0;
  for (const GgufKv& kv : shared->metadata()) sink += kv.key.size();
  for (const GgufTensorInfo& t : shared->tensors()) sink += t.n_bytes ? t.data[0] : 0;
  (void)sink;
  (void)Tokenizer::from_gguf(*shared);
  (void)ModelWeights::load(shared);
  return 0;
}
