// Tokenizing long prompts: 10 KB of mixed text, one 10,000-byte word and
// 10,000 spaces (the shapes that would expose a pass quadratic in the
// length) with four reference vocabularies, and 4x each to show the growth.
//
// Run: build/release/bench/bench_tokenizer [DIR]   (DIR: the folder of the
// ggml-vocab-*.gguf files; default ../shared/reference/tokenizer, or
// $HEARTH_SHARED_DIR/reference/tokenizer)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/tokenizer.h"

namespace hearth::engine {
namespace {

std::string vocab_dir = [] {
  const char* shared = std::getenv("HEARTH_SHARED_DIR");
  return std::string(shared != nullptr ? shared : "../shared") + "/reference/tokenizer";
}();

std::string text_of(int shape, std::size_t bytes) {
  if (shape == 1) return std::string(bytes, 'a');
  if (shape == 2) return std::string(bytes, ' ');
  const std::string para =
      "Once upon a time, in a land far away, there lived 1234 curious foxes; naïve café "
      "日本語 🦙 \t\n";
  std::string out;
  while (out.size() < bytes) out += para;
  return out;
}

void encode(benchmark::State& state, const char* vocab) {
  auto file = GgufFile::open(vocab_dir + "/" + vocab);
  if (!file.ok()) return state.SkipWithError(std::string(file.status().message()).c_str());
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok.ok()) return state.SkipWithError(std::string(tok.status().message()).c_str());
  const std::string text =
      text_of(static_cast<int>(state.range(0)), static_cast<std::size_t>(state.range(1)));
  for (auto _ : state) {
    auto ids = (*tok)->encode(text);
    if (!ids.ok()) return state.SkipWithError(std::string(ids.status().message()).c_str());
    benchmark::DoNotOptimize(ids->data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}

// Args: {shape (0 mixed text, 1 one word, 2 spaces), bytes}.
void shapes(benchmark::internal::Benchmark* b) {
  for (int shape : {0, 1, 2})
    for (int bytes : {10000, 40000}) b->Args({shape, bytes});
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(encode, llama_spm, "ggml-vocab-llama-spm.gguf")->Apply(shapes);
BENCHMARK_CAPTURE(encode, gpt_2, "ggml-vocab-gpt-2.gguf")->Apply(shapes);
BENCHMARK_CAPTURE(encode, deepseek_llm, "ggml-vocab-deepseek-llm.gguf")->Apply(shapes);
BENCHMARK_CAPTURE(encode, mpt, "ggml-vocab-mpt.gguf")->Apply(shapes);

}  // namespace
}  // namespace hearth::engine

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (argc > 1) hearth::engine::vocab_dir = argv[1];
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
