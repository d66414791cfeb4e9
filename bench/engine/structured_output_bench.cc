// bench_structured_output: what structured output adds to a decode step.
//
// Runs generate() on MODEL.gguf at temperature 1 from the same prompt, for
// seeds 0..runs-1, three ways per seed:
//   warm: constrained by the grammar of SCHEMA.json, one Grammar for every
//         run and every state's mask already cached (a first pass over the
//         seeds fills the cache), as when the server sees a format again
//         (server/response_format.h keeps the last ones);
//   cold: the same, with a Grammar parsed anew for the run, as for a format
//         never seen before: each state's first mask is computed in its step;
//   free: unconstrained, ignoring end-of-sequence, for as many tokens as the
//         constrained run made, so every kind decodes at the same positions.
// The constrained runs end when their value is complete; both constrained
// kinds sample the same tokens. Prints the decode milliseconds per token of
// each, the constrained / free ratios, and the machine's streaming read
// bandwidth, so figures from different machines can be compared.
//
// The target is a 32k vocabulary: make the model with
//   hearth-model synth M.gguf $TINYLLAMA_SHAPE --vocab-from llama-2-tiny-random.gguf --type q4_0
// (bench/synth_model.sh has the shape).
//
// Run: build/release/bench/bench_structured_output MODEL.gguf SCHEMA.json
//        [--threads 2] [--runs 20]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "bench_support.h"
#include "engine/generation.h"
#include "engine/gguf.h"
#include "engine/module.h"
#include "engine/tokenizer.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "kernels/thread_pool.h"

namespace {

namespace engine = hearth::engine;

int fail(const std::string& what) {
  std::fprintf(stderr, "bench_structured_output: %s\n", what.c_str());
  return 1;
}

struct Totals {
  double decode_s = 0;
  std::size_t tokens = 0;  // decoded after the first (what decode_s covers)
  std::size_t runs = 0;
  double ms_per_token() const { return tokens ? 1000.0 * decode_s / tokens : 0; }
};

// Runs `r`, adding its decode time and tokens to `into`; the number of
// tokens it generated, or -1 (with `error`) on failure.
long run(engine::Module& m, const engine::Tokenizer& t, const engine::GenerationRequest& r,
         Totals* into, std::string* error) {
  auto out = engine::generate(m, t, r);
  if (!out.ok()) {
    *error = std::string(out.status().message());
    return -1;
  }
  if (into != nullptr && out->stats.generated_tokens > 1) {
    into->decode_s += out->stats.decode_s;
    into->tokens += out->stats.generated_tokens - 1;
    ++into->runs;
  }
  return static_cast<long>(out->stats.generated_tokens);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3)
    return fail("usage: bench_structured_output MODEL.gguf SCHEMA.json [--threads N] [--runs N]");
  std::size_t threads = 2, runs = 20;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::strtoul(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::strtoul(argv[i + 1], nullptr, 10);
  }
  std::ifstream in(argv[2], std::ios::binary);
  if (!in) return fail(std::string("cannot read ") + argv[2]);
  std::stringstream schema;
  schema << in.rdbuf();
  auto gbnf = hearth::grammar::json_schema_to_gbnf(schema.str());
  if (!gbnf.ok()) return fail(std::string(argv[2]) + ": " + std::string(gbnf.status().message()));
  auto grammar = hearth::grammar::Grammar::parse(*gbnf);
  if (!grammar.ok()) return fail(std::string(grammar.status().message()));
  const std::shared_ptr<const hearth::grammar::Grammar> warm_grammar = *grammar;

  auto file = engine::GgufFile::open(argv[1]);
  if (!file.ok()) return fail(std::string(file.status().message()));
  std::shared_ptr<const engine::GgufFile> shared = std::move(*file);
  auto tokenizer = engine::Tokenizer::from_gguf(*shared);
  if (!tokenizer.ok()) return fail(std::string(tokenizer.status().message()));
  hearth::kernels::ThreadPool& pool = hearth::bench::bench_pool(threads);
  engine::ModuleOptions mo;
  mo.pool = &pool;
  mo.context_length = 1024;
  auto module = engine::Module::load(shared, mo);
  if (!module.ok()) return fail(std::string(module.status().message()));
  (*tokenizer)->grammar_vocabulary();  // built once per model, at first use: not a step cost

  engine::GenerationRequest base;
  base.prompt = "Once upon a time";
  auto ids = (*tokenizer)->encode(base.prompt, base.tokenize);
  if (!ids.ok()) return fail(std::string(ids.status().message()));
  base.prompt_ids = *ids;
  base.sampling.temperature = 1.0f;

  const auto constrained = [&](std::uint64_t seed, bool fresh_grammar) {
    engine::GenerationRequest c = base;
    c.sampling.seed = seed;
    c.max_tokens = 512;
    c.grammar = fresh_grammar ? *hearth::grammar::Grammar::parse(*gbnf) : warm_grammar;
    return c;
  };
  std::string error;
  for (std::size_t i = 0; i < runs; ++i)  // fills the warm grammar's mask cache
    if (run(**module, **tokenizer, constrained(i, false), nullptr, &error) < 0) return fail(error);
  Totals free_runs, warm, cold;
  for (std::size_t i = 0; i < runs; ++i) {
    const long n = run(**module, **tokenizer, constrained(i, false), &warm, &error);
    if (n < 0 || run(**module, **tokenizer, constrained(i, true), &cold, &error) < 0)
      return fail(error);
    engine::GenerationRequest f = base;
    f.sampling.seed = i;
    f.ignore_eos = true;
    f.max_tokens = static_cast<std::size_t>(n);
    if (run(**module, **tokenizer, f, &free_runs, &error) < 0) return fail(error);
  }
  const double bw = hearth::bench::stream_read_gbps(threads);
  std::printf("bench_structured_output: %s, vocabulary %zu, schema %s, %zu threads\n", argv[1],
              (*tokenizer)->vocab_size(), argv[2], threads);
  std::printf("machine streaming read: %.1f GB/s (%zu threads)\n", bw, threads);
  std::printf("%-12s %6s %8s %14s\n", "decode", "runs", "tokens", "ms per token");
  std::printf("%-12s %6zu %8zu %14.3f\n", "free", free_runs.runs, free_runs.tokens,
              free_runs.ms_per_token());
  std::printf("%-12s %6zu %8zu %14.3f\n", "warm", warm.runs, warm.tokens, warm.ms_per_token());
  std::printf("%-12s %6zu %8zu %14.3f\n", "cold", cold.runs, cold.tokens, cold.ms_per_token());
  std::printf("constrained / free: warm %.3f, cold %.3f\n",
              warm.ms_per_token() / free_runs.ms_per_token(),
              cold.ms_per_token() / free_runs.ms_per_token());
  return 0;
}
