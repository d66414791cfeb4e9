// bench_batched_step: what one BatchedForward step costs as it grows, on a
// real GGUF file: M sequences decoding one token each (M = 1, 2, 4, 8, 12,
// 16), then 8 decoding sequences plus a prompt chunk of K tokens (the steps
// that admit a prompt under a token budget of 8 + K). Each figure is the
// median of `--steps` steps, printed with its ratio to the single-sequence
// decode step of the same run: the ratios are what the step loop's token
// budget trades (inter-token latency while prompts are admitted against
// their time to first token), and M / ratio(M) is the aggregate speed-up of
// M streams over one.
//
// Run: build/release/bench/bench_batched_step MODEL.gguf [--threads 2] [--steps 24]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/batched_forward.h"
#include "engine/gguf.h"
#include "engine/module.h"
#include "kernels/thread_pool.h"
#include "memory/thread_temp_allocator.h"

namespace {

using hearth::engine::BatchedForward;
using hearth::engine::Module;
using hearth::engine::StepInput;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kSequences = 16;
constexpr std::size_t kPrompt = 32;
constexpr std::size_t kChunks[] = {8, 16, 24, 56};

int fail(const std::string& what) {
  std::fprintf(stderr, "bench_batched_step: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: bench_batched_step MODEL.gguf [--threads N] [--steps N]");
  std::size_t threads = 2, steps = 24;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::strtoul(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::strtoul(argv[i + 1], nullptr, 10);
  }
  auto file = hearth::engine::GgufFile::open(argv[1]);
  if (!file.ok()) return fail(std::string(file.status().message()));
  auto weights = hearth::engine::ModelWeights::load(std::move(*file));
  if (!weights.ok()) return fail(std::string(weights.status().message()));
  hearth::kernels::ThreadPool pool(threads);
  hearth::engine::ModuleOptions mo;
  mo.pool = &pool;
  mo.context_length = kPrompt + 2 * steps * 8 + 64;
  mo.kv_cache = hearth::engine::KvCacheType::kInt8;
  std::vector<std::unique_ptr<Module>> instances;
  for (std::size_t i = 0; i < kSequences + 1; ++i) {
    auto m = Module::load(*weights, mo);
    if (!m.ok()) return fail(std::string(m.status().message()));
    instances.push_back(std::move(*m));
  }
  hearth::engine::BatchOptions bo;
  bo.max_sequences = kSequences + 1;
  bo.max_tokens = 8 + 56;
  bo.pool = &pool;
  auto batch = BatchedForward::create(*weights, bo);
  if (!batch.ok()) return fail(std::string(batch.status().message()));
  const std::size_t vocab = (*weights)->config().n_vocab;
  std::vector<std::int32_t> prompt(kPrompt + 56);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<std::int32_t>(1 + i % (vocab - 1));
  std::vector<std::size_t> pos(kSequences, 0);
  // Every sequence has a prompt in its cache, as a decoding stream would.
  for (std::size_t s = 0; s < kSequences; ++s) {
    hearth::TempAllocatorLease temp;
    StepInput in{instances[s].get(), std::span<const std::int32_t>(prompt.data(), kPrompt), 0,
                 false};
    if (auto r = (*batch)->step({&in, 1}); !r.ok()) return fail(std::string(r.status().message()));
    pos[s] = kPrompt;
  }
  const std::int32_t token = 7;
  // Median milliseconds of `steps` steps of `m` decoding sequences plus a
  // chunk of `chunk` prompt tokens on the spare instance (restarted at 0).
  auto measure = [&](std::size_t m, std::size_t chunk) {
    std::vector<double> ms;
    for (std::size_t i = 0; i < steps + 2; ++i) {
      std::vector<StepInput> in;
      for (std::size_t s = 0; s < m; ++s)
        in.push_back({instances[s].get(), {&token, 1}, pos[s]++, true});
      if (chunk > 0)
        in.push_back({instances[kSequences].get(),
                      std::span<const std::int32_t>(prompt.data(), chunk), 0, false});
      hearth::TempAllocatorLease temp;
      const auto t0 = Clock::now();
      auto r = (*batch)->step(in);
      const auto t1 = Clock::now();
      if (!r.ok()) std::abort();
      if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    for (std::size_t s = 0; s < m; ++s)
      pos[s] -= steps + 2;  // the next run overwrites the same positions
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  std::printf(
      "bench_batched_step: %s, %zu threads, median of %zu steps (int8 KV, %zu-token prompts "
      "cached)\n",
      argv[1], threads, steps, kPrompt);
  const double one = measure(1, 0);
  std::printf("%-28s %9s %12s %14s\n", "step", "ms", "x 1 decode", "tokens/s");
  for (std::size_t m : {1, 2, 4, 8, 12, 16}) {
    const double t = m == 1 ? one : measure(m, 0);
    std::printf("%2zu decode                    %9.2f %12.2f %14.1f\n", m, t, t / one,
                m * 1000.0 / t);
  }
  for (std::size_t k : kChunks) {
    const double t = measure(8, k);
    std::printf(" 8 decode + %2zu prompt tokens  %9.2f %12.2f %14.1f\n", k, t, t / one,
                (8 + k) * 1000.0 / t);
  }
  return 0;
}
