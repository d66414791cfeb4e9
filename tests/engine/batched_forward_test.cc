// Continuous batching: BatchedForward steps several warm instances of one
// model at once, each instance driving its own engine::Sequence, and every
// sequence must get exactly what it gets alone.
//
// Models: the real stories260K (F32 weights: the XNNPACK float path) and
// three small synthetic models with Q8_0, Q4_0 and F16 weights (embedding,
// projections and output all of that type), so that the int8, int4 and half
// GEMM kernels run with M > 1 rows mixing several sequences; each with a
// float and an int8 KV cache. The stories260K cases skip when ../shared is
// absent.
//
// Everything is deterministic: fixed prompts and seeds, greedy or seeded
// sampling, no sleeps and no clocks. The references are the same requests run
// alone on fresh instances, stepped as engine::generate() steps them (and
// checked against engine::generate() itself), once with the prompt in the
// same chunks as in the batch (must be bit-identical) and once in
// generate()'s chunks of 64 (must be bit-identical too: a prompt chunk's
// query rows are attended in KV tiles that end at the chunk's last position,
// so a row's tile is wider than its causal window by the rows after it, and
// every kernel path gives those masked positions exactly 0 weight in every
// sum, so the tile's width never changes a bit).
#include "engine/batched_forward.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "engine/generation.h"
#include "engine/sequence.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"
#include "memory/thread_temp_allocator.h"
#include "spdlog/spdlog.h"
#include "tests/support/heap_counter.h"
#include "tests/support/shared_data.h"

namespace hearth::engine {
namespace {

// Two kernel threads whatever the machine reports, so that the paths that
// deal a step's work out to the pool's threads (decode rows' attention, one
// sequence per thread) run, and are compared with generate(), everywhere.
const bool kTwoKernelThreads = kernels::set_default_thread_count(2);

// ---------------------------------------------------------------- models

enum class Weights { kStoriesF32, kSyntheticQ8_0, kSyntheticQ4_0, kSyntheticF16 };

const char* weights_name(Weights w) {
  switch (w) {
    case Weights::kStoriesF32:
      return "Stories260K_F32";
    case Weights::kSyntheticQ8_0:
      return "SyntheticQ8_0";
    case Weights::kSyntheticQ4_0:
      return "SyntheticQ4_0";
    case Weights::kSyntheticF16:
      return "SyntheticF16";
  }
  return "?";
}

// One loaded model: weights shared by every instance a test makes.
struct Model {
  Weights kind = Weights::kStoriesF32;
  std::string bytes;  // a synthetic model's GGUF file; `file` points into it
  std::shared_ptr<const GgufFile> file;
  std::shared_ptr<const ModelWeights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::size_t vocab() const { return weights->config().n_vocab; }
};

// Small, so the suite stays quick on two cores, but with the shapes that
// matter: grouped-query attention (4 heads, 2 KV heads), every projection
// and the embedding quantized (widths multiples of 32), two layers.
SyntheticModelSpec synthetic_spec(GgmlType type) {
  SyntheticModelSpec s;
  s.name = "batched-forward-test";
  s.n_embd = 128;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 320;
  s.n_vocab = 512;
  s.context_length = 512;
  s.weight_type = type;
  s.seed = 7;
  return s;
}

// Loads `which` (ADD_FAILURE and nullptr on error). Call HEARTH_REQUIRE_SHARED()
// first for stories260K.
std::unique_ptr<Model> load_model(Weights which) {
  // Every instance load logs its memory report; keep the test output readable.
  spdlog::set_level(spdlog::level::warn);
  auto m = std::make_unique<Model>();
  m->kind = which;
  if (which == Weights::kStoriesF32) {
    auto f = GgufFile::open((testing::shared_dir() / "models/stories260K.gguf").string());
    if (!f.ok()) {
      ADD_FAILURE() << f.status();
      return nullptr;
    }
    m->file = std::move(*f);
  } else {
    auto bytes =
        synthesize_model(synthetic_spec(which == Weights::kSyntheticQ8_0   ? GgmlType::kQ8_0
                                        : which == Weights::kSyntheticQ4_0 ? GgmlType::kQ4_0
                                                                           : GgmlType::kF16));
    if (!bytes.ok()) {
      ADD_FAILURE() << bytes.status();
      return nullptr;
    }
    m->bytes = std::move(*bytes);
    auto f = GgufFile::parse(reinterpret_cast<const std::uint8_t*>(m->bytes.data()),
                             m->bytes.size(), "synthetic");
    if (!f.ok()) {
      ADD_FAILURE() << f.status();
      return nullptr;
    }
    m->file = std::move(*f);
  }
  auto w = ModelWeights::load(m->file);
  if (!w.ok()) {
    ADD_FAILURE() << w.status();
    return nullptr;
  }
  m->weights = std::move(*w);
  auto t = Tokenizer::from_gguf(*m->file);
  if (!t.ok()) {
    ADD_FAILURE() << t.status();
    return nullptr;
  }
  m->tokenizer = std::move(*t);
  return m;
}

constexpr std::size_t kContext = 256;

// A fresh warm instance of `m` (its own KV cache), sharing m's weights.
std::unique_ptr<Module> new_instance(const Model& m, KvCacheType kv,
                                     std::size_t context = kContext) {
  ModuleOptions o;
  o.kv_cache = kv;
  o.context_length = context;
  auto r = Module::load(m.weights, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : nullptr;
}

// Eight prompts of different lengths: 1 token (BOS alone) up to more than
// one max_chunk (64), so the alone reference prefills in two chunks.
std::vector<std::vector<std::int32_t>> eight_prompts(const Model& m) {
  std::vector<std::vector<std::int32_t>> out;
  if (m.kind == Weights::kStoriesF32) {
    const char* texts[] = {
        "Once upon a time",
        "Lily and Tom",
        "The cat sat on the mat and looked at the big red ball.",
        "One day",
        "Tim had a little dog. The dog liked to run in the park. One day, the dog saw a bird "
        "in a tree. The bird was sad because it could not fly. Tim and his dog wanted to "
        "help the bird, so they",
        "Sue",
        "The sun was hot and the sky was blue. Mom said",
    };
    out.push_back({m.tokenizer->bos()});  // BOS alone
    for (const char* t : texts) {
      auto ids = m.tokenizer->encode(t);
      EXPECT_TRUE(ids.ok()) << ids.status();
      out.push_back(ids.ok() ? *ids : std::vector<std::int32_t>{1});
    }
    return out;
  }
  // Synthetic: fixed pseudo-random ids past the control tokens (<unk>, <s>, </s>).
  const std::size_t lengths[] = {1, 3, 6, 10, 17, 29, 41, 70};
  std::uint32_t x = 12345;
  for (std::size_t len : lengths) {
    std::vector<std::int32_t> p;
    for (std::size_t i = 0; i < len; ++i) {
      x = x * 1664525u + 1013904223u;
      p.push_back(static_cast<std::int32_t>(3 + (x >> 8) % (m.vocab() - 3)));
    }
    out.push_back(std::move(p));
  }
  return out;
}

GenerationRequest make_request(std::vector<std::int32_t> prompt, std::size_t max_tokens) {
  GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  return r;
}

// ---------------------------------------------------------------- drivers

// What one sequence produced: its tokens, its text, and the logits of every
// step it sampled from (concatenated, vocab floats each).
struct Trace {
  std::vector<std::int32_t> generated;
  std::string text;
  FinishReason finish = FinishReason::kMaxTokens;
  std::vector<float> logits;
};

// The reference: `req` alone on a fresh instance, stepped as engine::generate()
// steps it: prompt chunks of max_chunk (64) or, with `chunk`, of that many
// tokens, then one token per Module::forward.
void run_alone(const Model& m, KvCacheType kv, const GenerationRequest& req, Trace* out,
               std::size_t chunk = 0) {
  std::unique_ptr<Module> inst = new_instance(m, kv);
  ASSERT_NE(inst, nullptr);
  auto started = Sequence::start(*m.tokenizer, req, inst->context_length(), m.vocab());
  ASSERT_TRUE(started.ok()) << started.status();
  Sequence& seq = **started;
  Trace t;
  const TokenCallback emit = [&t](std::string_view text, std::int32_t) { t.text.append(text); };
  TempAllocatorLease lease;
  while (!seq.finished()) {
    const std::span<const std::int32_t> tokens =
        seq.next_tokens(chunk != 0 ? chunk : inst->max_chunk());
    const bool want = seq.wants_logits(tokens.size());
    auto logits = inst->forward(tokens, seq.position());
    ASSERT_TRUE(logits.ok()) << logits.status();
    if (want) t.logits.insert(t.logits.end(), logits->begin(), logits->end());
    const absl::Status s =
        seq.advance(tokens.size(), want ? logits->data() : nullptr, lease.allocator(), emit);
    ASSERT_TRUE(s.ok()) << s;
    lease.allocator().reset();
  }
  t.generated.assign(seq.generated_ids().begin(), seq.generated_ids().end());
  t.finish = seq.finish();
  *out = std::move(t);
}

// One sequence of a batched run.
struct Lane {
  GenerationRequest request;
  std::size_t join_step = 0;  // the step at which it is admitted (it prefills from there)
  std::size_t chunk = 4;      // prompt tokens it runs per step while prefilling
  // Set by run_batched:
  std::unique_ptr<Module> instance;
  std::unique_ptr<Sequence> sequence;
  TokenCallback emit;
  Trace trace;
};

struct RunStats {
  std::size_t steps = 0;
  std::size_t max_rows = 0;     // most rows in one step
  std::size_t mixed_steps = 0;  // steps with prefill rows and decode rows together
};

BatchOptions batch_options() {
  BatchOptions o;
  o.max_tokens = 64;  // 8 lanes x at most 7 prompt tokens each fit
  o.max_sequences = 8;
  return o;
}

// Steps every lane through one BatchedForward, as a step loop does: each step
// takes every admitted, unfinished lane, decoding ones with their one token
// and prefilling ones with their next chunk, in `lanes` order.
void run_batched(const Model& m, KvCacheType kv, std::vector<Lane>& lanes, RunStats* stats) {
  auto batch = BatchedForward::create(m.weights, batch_options());
  ASSERT_TRUE(batch.ok()) << batch.status();
  for (Lane& lane : lanes) {
    lane.instance = new_instance(m, kv);
    ASSERT_NE(lane.instance, nullptr);
    auto s =
        Sequence::start(*m.tokenizer, lane.request, lane.instance->context_length(), m.vocab());
    ASSERT_TRUE(s.ok()) << s.status();
    lane.sequence = std::move(*s);
    lane.trace = {};
    Trace* t = &lane.trace;
    lane.emit = [t](std::string_view text, std::int32_t) { t->text.append(text); };
  }
  std::vector<StepInput> inputs;
  std::vector<Lane*> owners;
  RunStats st;
  for (std::size_t step = 0;; ++step) {
    ASSERT_LT(step, 10000u) << "runaway batched run";
    inputs.clear();
    owners.clear();
    bool unfinished = false, prefill = false, decode = false;
    for (Lane& lane : lanes) {
      Sequence& s = *lane.sequence;
      if (s.finished()) continue;
      unfinished = true;
      if (step < lane.join_step) continue;
      (s.prefilling() ? prefill : decode) = true;
      const std::span<const std::int32_t> tokens = s.next_tokens(s.prefilling() ? lane.chunk : 1);
      inputs.push_back({lane.instance.get(), tokens, s.position(), s.wants_logits(tokens.size())});
      owners.push_back(&lane);
    }
    if (!unfinished) break;
    if (inputs.empty()) continue;  // nobody admitted yet
    std::size_t rows = 0;
    for (const StepInput& in : inputs) rows += in.tokens.size();
    st.steps++;
    st.max_rows = std::max(st.max_rows, rows);
    st.mixed_steps += prefill && decode;

    TempAllocatorLease lease;  // this step's scratch, reset when it ends
    auto logits = batch.value()->step(inputs);
    ASSERT_TRUE(logits.ok()) << logits.status();
    std::size_t row = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const float* l = nullptr;
      if (inputs[i].want_logits) l = logits->data() + row++ * m.vocab();
      Trace& t = owners[i]->trace;
      if (l != nullptr) t.logits.insert(t.logits.end(), l, l + m.vocab());
      const absl::Status s = owners[i]->sequence->advance(inputs[i].tokens.size(), l,
                                                          lease.allocator(), owners[i]->emit);
      ASSERT_TRUE(s.ok()) << s;
    }
    ASSERT_EQ(logits->size(), row * m.vocab()) << "one logits row per input that wants them";
  }
  for (Lane& lane : lanes) {
    lane.trace.generated.assign(lane.sequence->generated_ids().begin(),
                                lane.sequence->generated_ids().end());
    lane.trace.finish = lane.sequence->finish();
  }
  if (stats != nullptr) *stats = st;
}

// ---------------------------------------------------------------- comparisons

struct LogitsDiff {
  bool same_shape = false;
  bool bit_identical = false;
  float max_abs = 0;  // over every logit of every sampled step
};

LogitsDiff diff(const std::vector<float>& a, const std::vector<float>& b) {
  LogitsDiff d;
  d.same_shape = a.size() == b.size();
  if (!d.same_shape) return d;
  d.bit_identical = a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  for (std::size_t i = 0; i < a.size(); ++i) d.max_abs = std::max(d.max_abs, std::abs(a[i] - b[i]));
  return d;
}

// Same tokens, text and finish, and logits bit for bit.
void expect_same_trace(const Trace& want, const Trace& got, const std::string& what) {
  EXPECT_EQ(got.generated, want.generated) << what;
  EXPECT_EQ(got.text, want.text) << what;
  EXPECT_EQ(finish_reason_name(got.finish), std::string(finish_reason_name(want.finish))) << what;
  const LogitsDiff d = diff(want.logits, got.logits);
  ASSERT_TRUE(d.same_shape) << what << ": " << got.logits.size() << " logits vs "
                            << want.logits.size();
  EXPECT_TRUE(d.bit_identical) << what << ": logits differ by up to " << d.max_abs;
}

std::string label(Weights w, KvCacheType kv, std::size_t lane) {
  return std::string(weights_name(w)) + " " + kv_cache_type_name(kv) + " KV, lane " +
         std::to_string(lane);
}

// What a lane of a batched run must equal:
//  1. the same request alone on a fresh instance, prefilled in the same
//     chunks: bit for bit, always; batching adds nothing;
//  2. engine::generate() alone on a fresh instance (prefill in chunks of 64):
//     bit for bit as well.
// Returns (through *d) how lane and generate()-style reference compare.
void expect_lane_matches_alone(const Model& m, KvCacheType kv, const Lane& lane,
                               const std::string& what, LogitsDiff* d = nullptr) {
  Trace same_chunks;
  ASSERT_NO_FATAL_FAILURE(run_alone(m, kv, lane.request, &same_chunks, lane.chunk));
  expect_same_trace(same_chunks, lane.trace, what + " vs alone in the same chunks");

  Trace alone;
  ASSERT_NO_FATAL_FAILURE(run_alone(m, kv, lane.request, &alone));
  std::unique_ptr<Module> fresh = new_instance(m, kv);
  ASSERT_NE(fresh, nullptr);
  auto g = generate(*fresh, *m.tokenizer, lane.request);
  ASSERT_TRUE(g.ok()) << g.status();
  // run_alone really is what generate() does.
  ASSERT_EQ(g->generated_ids, alone.generated) << what;
  ASSERT_EQ(g->text, alone.text) << what;
  ASSERT_EQ(g->finish, alone.finish) << what;
  expect_same_trace(alone, lane.trace, what + " vs generate()");
  if (d != nullptr) *d = diff(alone.logits, lane.trace.logits);
}

// ---------------------------------------------------------------- tests

struct Combo {
  Weights weights;
  KvCacheType kv;
  friend void PrintTo(const Combo& c, std::ostream* os) {
    *os << weights_name(c.weights) << " with " << kv_cache_type_name(c.kv) << " KV";
  }
};

class Batched : public ::testing::TestWithParam<Combo> {
 protected:
  Weights weights() const { return GetParam().weights; }
  KvCacheType kv() const { return GetParam().kv; }
  bool needs_shared() const { return weights() == Weights::kStoriesF32; }
};

std::string combo_name(const ::testing::TestParamInfo<Combo>& info) {
  return std::string(weights_name(info.param.weights)) +
         (info.param.kv == KvCacheType::kInt8 ? "_Int8Kv" : "_FloatKv");
}

// The lanes of the greedy scenario: eight prompts (1 to 70 tokens), prompt
// chunks of 1 to 7 tokens, two lanes admitted while the others decode.
std::vector<Lane> greedy_lanes(const std::vector<std::vector<std::int32_t>>& prompts) {
  std::vector<Lane> lanes(prompts.size());
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    lanes[i].request = make_request(prompts[i], 12 + 3 * i);  // greedy; EOS may end one early
    lanes[i].chunk = 1 + (3 * i) % 7;
  }
  lanes[6].join_step = 3;
  lanes[7].join_step = 9;
  return lanes;
}

// (a) Greedy decoding: eight sequences stepped together (decode rows and
// prompt chunks of various sizes mixed in the same steps, two of them
// admitted late) produce exactly the tokens engine::generate() produces for
// each prompt alone, and the very same logits (expect_lane_matches_alone).
//
// Why bit-identical is the bar, with either KV cache:
//  - the quantized linear kernels promise row independence (each output is
//    the same int32 block dots accumulated in the same order, whatever M and
//    the tiling), and so do RMSNorm, SwiGLU and the residual adds; measured:
//    Q8_0 and Q4_0 logits are bit-identical;
//  - XNNPACK's F32 fully-connected operator, for stories260K's shapes on this
//    machine, gives each row the same bits whatever M (measured); should a
//    future XNNPACK pick M-dependent kernels, this test says so;
//  - attention runs per sequence on its own cache, and int8 KV quantizes per
//    token and head (one scale and zero point per appended row), so a row's
//    cache entry does not depend on the chunk it came in, nor does attention
//    depend on the KV tile's width past a row's causal window.
TEST_P(Batched, GreedyTokensAndLogitsMatchEachPromptAlone) {
  if (needs_shared()) HEARTH_REQUIRE_SHARED();
  ASSERT_TRUE(kTwoKernelThreads);
  ASSERT_EQ(kernels::default_thread_pool().threads(), 2u);
  std::unique_ptr<Model> m = load_model(weights());
  ASSERT_NE(m, nullptr);
  const auto prompts = eight_prompts(*m);
  ASSERT_EQ(prompts.size(), 8u);
  std::vector<Lane> lanes = greedy_lanes(prompts);
  RunStats stats;
  ASSERT_NO_FATAL_FAILURE(run_batched(*m, kv(), lanes, &stats));
  EXPECT_GT(stats.mixed_steps, 0u) << "no step mixed prefill chunks with decode rows";
  EXPECT_GE(stats.max_rows, 8u);

  std::size_t identical = 0;
  float worst = 0;
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    LogitsDiff d;
    ASSERT_NO_FATAL_FAILURE(
        expect_lane_matches_alone(*m, kv(), lanes[i], label(weights(), kv(), i), &d));
    identical += d.bit_identical;
    worst = std::max(worst, d.max_abs);
  }
  std::printf(
      "[batched] %s, %s KV: %zu steps (%zu mixed, up to %zu rows); vs generate(): %zu/8 "
      "sequences' logits bit-identical, max |diff| %g\n",
      weights_name(weights()), kv_cache_type_name(kv()), stats.steps, stats.mixed_steps,
      stats.max_rows, identical, static_cast<double>(worst));
}

// The kernel levels (a) runs on. Under ThreadSanitizer only the one the
// server dispatches on: the levels differ in arithmetic, not in how the step
// shares its work among the pool's threads, and each level cost TSan about a
// minute of CI's two cores; the other builds check every level.
std::vector<kernels::Isa> levels_to_check() {
#if defined(HEARTH_SANITIZER_THREAD)
  return {kernels::best_isa()};
#else
  return kernels::supported_isas();
#endif
}

// (a) The same scenario on every kernel level this machine supports (the
// quantized GEMM/GEMV, norm and attention kernels differ per level; XNNPACK
// dispatches on its own): on each, batched equals alone in the same chunks,
// and alone in other chunks, bit for bit.
TEST_P(Batched, BatchingIsInvisibleOnEveryKernelLevel) {
  if (needs_shared()) HEARTH_REQUIRE_SHARED();
  std::unique_ptr<Model> m = load_model(weights());
  ASSERT_NE(m, nullptr);
  const auto prompts = eight_prompts(*m);
  for (kernels::Isa isa : levels_to_check()) {
    kernels::ScopedIsa force(isa);  // no kernel runs on another thread meanwhile
    std::vector<Lane> lanes = greedy_lanes(prompts);
    ASSERT_NO_FATAL_FAILURE(run_batched(*m, kv(), lanes, nullptr));
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      Trace alone;
      ASSERT_NO_FATAL_FAILURE(run_alone(*m, kv(), lanes[i].request, &alone, lanes[i].chunk));
      expect_same_trace(alone, lanes[i].trace,
                        label(weights(), kv(), i) + " on " + kernels::isa_name(isa));
      // And prefilled in generate()'s chunks instead: the same bits too.
      Trace one_chunk;
      ASSERT_NO_FATAL_FAILURE(run_alone(*m, kv(), lanes[i].request, &one_chunk));
      expect_same_trace(
          alone, one_chunk,
          label(weights(), kv(), i) + " in other chunks on " + kernels::isa_name(isa));
    }
  }
}

// (b) Isolation: eight sequences with different prompts (1 to 70 tokens),
// seeded sampling with penalties, and different max_tokens, so that they
// finish at different steps while the others go on; each gets exactly its
// own sequential result. KV, scratch or logits-row cross-talk would change
// some sequence's logits and, through sampling, its tokens.
TEST_P(Batched, EightSequencesEachGetTheirOwnResult) {
  if (needs_shared()) HEARTH_REQUIRE_SHARED();
  std::unique_ptr<Model> m = load_model(weights());
  ASSERT_NE(m, nullptr);
  const auto prompts = eight_prompts(*m);
  const std::size_t max_tokens[] = {3, 30, 7, 19, 1, 25, 12, 40};
  std::vector<Lane> lanes(8);
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    GenerationRequest r = make_request(prompts[i], max_tokens[i]);
    r.ignore_eos = true;  // finish exactly at max_tokens: staggered, known ends
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 40;
    r.sampling.top_p = 0.95f;
    r.sampling.repetition_penalty = 1.1f;
    r.sampling.seed = 1000 + i;
    lanes[i].request = std::move(r);
    lanes[i].chunk = 7 - i % 4;
  }
  RunStats stats;
  ASSERT_NO_FATAL_FAILURE(run_batched(*m, kv(), lanes, &stats));
  // The lanes overlapped: more steps than the longest lane's tokens alone.
  EXPECT_GT(stats.steps, *std::max_element(std::begin(max_tokens), std::end(max_tokens)));
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    const std::string what = label(weights(), kv(), i);
    EXPECT_EQ(lanes[i].trace.finish, FinishReason::kMaxTokens) << what;
    EXPECT_EQ(lanes[i].trace.generated.size(), max_tokens[i]) << what;
    ASSERT_NO_FATAL_FAILURE(expect_lane_matches_alone(*m, kv(), lanes[i], what));
  }
}

// (c) Admission mid-batch: a newcomer that starts prefilling (in chunks of
// 6) while three others decode, placed between them in the step's row order
// so that the rows after it move, changes nothing in the others' results:
// their logits are bit-identical to a run without it. It gets its own result.
TEST_P(Batched, NewcomerPrefillingMidBatchDoesNotChangeTheOthers) {
  if (needs_shared()) HEARTH_REQUIRE_SHARED();
  std::unique_ptr<Model> m = load_model(weights());
  ASSERT_NE(m, nullptr);
  const auto prompts = eight_prompts(*m);
  auto residents = [&] {
    std::vector<Lane> lanes(3);
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      lanes[i].request = make_request(prompts[1 + i], 24);
      lanes[i].request.ignore_eos = true;
      lanes[i].chunk = 64;  // prefill in one step: all three decode from step 1
    }
    return lanes;
  };
  std::vector<Lane> without = residents();
  ASSERT_NO_FATAL_FAILURE(run_batched(*m, kv(), without, nullptr));

  std::vector<Lane> with = residents();
  const std::vector<std::int32_t>& longest =
      *std::max_element(prompts.begin(), prompts.end(),
                        [](const auto& a, const auto& b) { return a.size() < b.size(); });
  Lane newcomer;
  newcomer.request = make_request(longest, 10);
  newcomer.request.ignore_eos = true;
  newcomer.join_step = 5;
  newcomer.chunk = 6;
  with.insert(with.begin() + 1, std::move(newcomer));
  RunStats stats;
  ASSERT_NO_FATAL_FAILURE(run_batched(*m, kv(), with, &stats));
  // Every newcomer chunk but possibly the last ran beside decoding residents.
  EXPECT_GE(stats.mixed_steps, longest.size() / 6);

  expect_same_trace(without[0].trace, with[0].trace, "resident 0 (rows before the newcomer's)");
  expect_same_trace(without[1].trace, with[2].trace, "resident 1 (rows after the newcomer's)");
  expect_same_trace(without[2].trace, with[3].trace, "resident 2 (rows after the newcomer's)");
  ASSERT_NO_FATAL_FAILURE(expect_lane_matches_alone(*m, kv(), with[1], "newcomer"));
}

std::vector<Combo> all_combos() {
  std::vector<Combo> out;
  for (Weights w : {Weights::kStoriesF32, Weights::kSyntheticQ8_0, Weights::kSyntheticQ4_0,
                    Weights::kSyntheticF16})
    for (KvCacheType kv : {KvCacheType::kFloat, KvCacheType::kInt8}) out.push_back({w, kv});
  return out;
}

INSTANTIATE_TEST_SUITE_P(ModelsAndKvCaches, Batched, ::testing::ValuesIn(all_combos()), combo_name);

// The logits that come back are those of the inputs that asked, in input
// order, each equal to its instance's Module::forward of the same tokens
// alone (here with the second input not asking, so the rows selected for the
// output projection are not the step's leading rows).
TEST(BatchedForward, LogitsComeBackOnlyForInputsThatAskInTheirOrder) {
  std::unique_ptr<Model> m = load_model(Weights::kSyntheticQ8_0);
  ASSERT_NE(m, nullptr);
  const std::vector<std::int32_t> p[3] = {{5, 6, 7}, {40, 41}, {300, 301, 302, 303}};
  std::vector<std::unique_ptr<Module>> batched, alone;
  for (int i = 0; i < 3; ++i) {
    batched.push_back(new_instance(*m, KvCacheType::kInt8));
    alone.push_back(new_instance(*m, KvCacheType::kInt8));
  }
  auto batch = BatchedForward::create(m->weights, batch_options());
  ASSERT_TRUE(batch.ok()) << batch.status();
  TempAllocatorLease lease;
  const StepInput in[3] = {{batched[0].get(), p[0], 0, true},
                           {batched[1].get(), p[1], 0, false},
                           {batched[2].get(), p[2], 0, true}};
  auto got = (*batch)->step(in);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2 * m->vocab());
  const std::vector<float> rows(got->begin(), got->end());
  lease.allocator().reset();
  for (int i : {0, 2}) {
    auto want = alone[i]->forward(p[i], 0);
    ASSERT_TRUE(want.ok()) << want.status();
    const std::size_t r = i == 0 ? 0 : 1;
    EXPECT_EQ(std::memcmp(rows.data() + r * m->vocab(), want->data(), m->vocab() * sizeof(float)),
              0)
        << "input " << i;
    lease.allocator().reset();
  }
  // A step where nobody asks returns no logits.
  const std::int32_t next[1] = {9};
  const StepInput quiet[1] = {{batched[0].get(), next, 3, false}};
  auto none = (*batch)->step(quiet);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

// (d) create() refuses options out of range.
TEST(BatchedForward, CreateRejectsOptionsOutOfRange) {
  std::unique_ptr<Model> m = load_model(Weights::kSyntheticQ8_0);
  ASSERT_NE(m, nullptr);
  auto code = [&](std::size_t max_tokens, std::size_t max_sequences) {
    BatchOptions o;
    o.max_tokens = max_tokens;
    o.max_sequences = max_sequences;
    return BatchedForward::create(m->weights, o).status().code();
  };
  EXPECT_EQ(code(0, 1), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(4097, 1), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(8, 0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(8, 9), absl::StatusCode::kInvalidArgument);  // more sequences than rows
  EXPECT_EQ(code(8, 8), absl::StatusCode::kOk);
  EXPECT_EQ(code(4096, 1), absl::StatusCode::kOk);
  EXPECT_EQ(BatchedForward::create(nullptr, BatchOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto ok = BatchedForward::create(m->weights, BatchOptions{});
  ASSERT_TRUE(ok.ok());
  EXPECT_GT((*ok)->planned_bytes(), 0u);
  EXPECT_NE((*ok)->options().pool, nullptr) << "nullptr pool resolves to the default pool";
}

// (d) Bad steps are refused with the right code and a message naming the
// input, and nothing runs: each bad step below carries "poison" inputs that,
// had they run, would have rewritten the start of two live sequences' KV
// caches (other tokens at position 0). Two sequences are stopped mid-decode,
// every bad step is tried, then they finish, and their results must still be
// exactly those of each alone.
TEST(BatchedForward, BadStepsAreRefusedAndCorruptNothing) {
  std::unique_ptr<Model> m = load_model(Weights::kSyntheticQ8_0);
  ASSERT_NE(m, nullptr);
  std::unique_ptr<Model> other = load_model(Weights::kSyntheticQ8_0);  // same file, other model
  ASSERT_NE(other, nullptr);
  BatchOptions o;
  o.max_tokens = 16;
  o.max_sequences = 4;
  auto created = BatchedForward::create(m->weights, o);
  ASSERT_TRUE(created.ok()) << created.status();
  BatchedForward& batch = **created;

  const KvCacheType kv = KvCacheType::kInt8;
  const auto prompts = eight_prompts(*m);
  const GenerationRequest req[2] = {make_request(prompts[2], 16), make_request(prompts[3], 16)};
  std::unique_ptr<Module> live[2] = {new_instance(*m, kv), new_instance(*m, kv)};
  std::unique_ptr<Sequence> seq[2];
  Trace trace[2];
  TokenCallback emit[2];
  for (int i = 0; i < 2; ++i) {
    auto s = Sequence::start(*m->tokenizer, req[i], live[i]->context_length(), m->vocab());
    ASSERT_TRUE(s.ok()) << s.status();
    seq[i] = std::move(*s);
    emit[i] = [t = &trace[i]](std::string_view text, std::int32_t) { t->text.append(text); };
  }
  // One good step of both live sequences (each runs up to 6 tokens).
  auto good_step = [&] {
    StepInput in[2];
    std::size_t n = 0;
    int who[2];
    for (int i = 0; i < 2; ++i) {
      if (seq[i]->finished()) continue;
      const auto t = seq[i]->next_tokens(6);
      in[n] = {live[i].get(), t, seq[i]->position(), seq[i]->wants_logits(t.size())};
      who[n++] = i;
    }
    TempAllocatorLease lease;
    auto logits = batch.step({in, n});
    ASSERT_TRUE(logits.ok()) << logits.status();
    std::size_t row = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const int i = who[k];
      const float* l = in[k].want_logits ? logits->data() + row++ * m->vocab() : nullptr;
      if (l != nullptr) trace[i].logits.insert(trace[i].logits.end(), l, l + m->vocab());
      ASSERT_TRUE(seq[i]->advance(in[k].tokens.size(), l, lease.allocator(), emit[i]).ok());
    }
  };
  // Prefill both (6 and 10 tokens, up to 6 a step) and decode a few tokens.
  for (int s = 0; s < 6; ++s) ASSERT_NO_FATAL_FAILURE(good_step());
  ASSERT_FALSE(seq[0]->prefilling());
  ASSERT_FALSE(seq[1]->prefilling());
  ASSERT_GT(seq[0]->generated_ids().size(), 0u);

  // Spare instances: a fresh one of this model, one of another model, and
  // one with a context of 16 positions.
  std::unique_ptr<Module> spare[3] = {new_instance(*m, kv), new_instance(*m, kv),
                                      new_instance(*m, kv)};
  std::unique_ptr<Module> foreign = new_instance(*other, kv);
  std::unique_ptr<Module> short_ctx = new_instance(*m, kv, 16);
  const std::vector<std::int32_t> junk(12, 77), junk2(5, 99);
  // Had they run, these would overwrite positions 0.. of the live caches.
  const StepInput poison0{live[0].get(), {junk.data(), 3}, 0, true};
  const StepInput poison1{live[1].get(), {junk2.data(), 2}, 0, true};

  struct Bad {
    const char* what;
    std::vector<StepInput> inputs;
    absl::StatusCode code;
    const char* message;  // a part of the message
  };
  const std::vector<Bad> bad = {
      {"no inputs", {}, absl::StatusCode::kInvalidArgument, "0 sequences"},
      {"more sequences than max_sequences",
       {poison0,
        poison1,
        {spare[0].get(), junk, 0, true},
        {spare[1].get(), junk, 0, true},
        {spare[2].get(), junk, 0, true}},
       absl::StatusCode::kInvalidArgument,
       "5 sequences"},
      {"more tokens than max_tokens",
       {poison0, poison1, {spare[0].get(), junk, 0, true}},  // 3 + 2 + 12 = 17 > 16
       absl::StatusCode::kInvalidArgument,
       "17 tokens"},
      {"the same instance twice",
       {poison0, poison1, {live[0].get(), junk2, 20, true}},
       absl::StatusCode::kInvalidArgument,
       "inputs 0 and 2 are the same instance"},
      {"an instance of another model",
       {poison0, poison1, {foreign.get(), junk2, 0, true}},
       absl::StatusCode::kInvalidArgument,
       "input 2 is not an instance of this model"},
      {"a null instance",
       {poison0, {nullptr, junk2, 0, true}, poison1},
       absl::StatusCode::kInvalidArgument,
       "input 1 is not an instance of this model"},
      {"an input without tokens",
       {poison0, poison1, {spare[0].get(), {}, 0, true}},
       absl::StatusCode::kInvalidArgument,
       "input 2 has no tokens"},
      // Module::forward answers OutOfRange for the same condition.
      {"positions past the context",
       {poison0, {short_ctx.get(), {junk2.data(), 3}, 14, true}, poison1},  // 14..16 of 16
       absl::StatusCode::kOutOfRange,
       "input 1: positions 14..16 exceed the context length 16"},
      {"positions past a full-size context",
       {poison0, poison1, {spare[1].get(), junk2, 252, true}},  // 252..256 of 256
       absl::StatusCode::kOutOfRange,
       "input 2: positions 252..256 exceed the context length 256"},
      // start_pos + tokens wraps around to 3: must still be refused up front
      // (Module::forward and kv_append would refuse it too).
      {"positions that overflow",
       {poison0, poison1, {spare[1].get(), junk2, SIZE_MAX - 1, true}},
       absl::StatusCode::kOutOfRange,
       "input 2"},
  };
  for (const Bad& b : bad) {
    auto r = batch.step(b.inputs);
    ASSERT_FALSE(r.ok()) << b.what;
    EXPECT_EQ(r.status().code(), b.code) << b.what << ": " << r.status();
    EXPECT_NE(r.status().message().find(b.message), std::string::npos)
        << b.what << ": " << r.status();
  }
  // The last positions of a context are usable (13..15 of 16): the bound is exact.
  {
    const StepInput edge[1] = {{short_ctx.get(), {junk2.data(), 3}, 13, true}};
    TempAllocatorLease lease;
    auto r = batch.step(edge);
    EXPECT_TRUE(r.ok()) << r.status();
  }

  // Finish the live sequences; they must be exactly what they are alone.
  while (!seq[0]->finished() || !seq[1]->finished()) ASSERT_NO_FATAL_FAILURE(good_step());
  for (int i = 0; i < 2; ++i) {
    trace[i].generated.assign(seq[i]->generated_ids().begin(), seq[i]->generated_ids().end());
    trace[i].finish = seq[i]->finish();
    Trace alone;  // prefilled in the same chunks of 6: bit for bit on every machine
    ASSERT_NO_FATAL_FAILURE(run_alone(*m, kv, req[i], &alone, 6));
    expect_same_trace(alone, trace[i], "live sequence " + std::to_string(i));
  }
}

// ---------------------------------------------------------------- heap

// Stop strings that never occur in these models' output, so every token goes
// through the StopMatcher's hold-back search without ever matching.
const std::vector<std::string> kNeverMatchingStops = {"QQ#QQ", "\x01\x02zz"};

// (e) A steady batched decode step of four sequences makes no heap
// allocation: gathering the inputs, BatchedForward::step (every layer, the
// output projection of four rows), and each Sequence::advance (seeded
// sampling with top-k, top-p and penalties, EOS check, stop strings,
// detokenizing; log-probabilities with 20 alternatives on two lanes), with
// a piece callback that copies into a preallocated string; the step's
// TempAllocatorLease included. Counted from every thread (the kernel pool's
// workers too), over 64 steps: a short window could miss an allocation that
// only a later step's data triggers. Warm-up: the prefill step and four
// decode steps, which fill the temp allocator's cache with this step shape's
// blocks (without them the first decode steps allocate: measured 10 to 16
// blocks).
TEST_P(Batched, SteadyDecodeStepOfFourSequencesMakesNoHeapAllocation) {
  if (needs_shared()) HEARTH_REQUIRE_SHARED();
  std::unique_ptr<Model> m = load_model(weights());
  ASSERT_NE(m, nullptr);
  const auto prompts = eight_prompts(*m);
  auto batch = BatchedForward::create(m->weights, batch_options());
  ASSERT_TRUE(batch.ok()) << batch.status();
  constexpr std::size_t kLanes = 4, kWarmUp = 4, kCounted = 64;
  std::unique_ptr<Module> inst[kLanes];
  std::unique_ptr<Sequence> seq[kLanes];
  std::string streamed;
  streamed.reserve(1 << 16);  // far more than 4 x 24 pieces of text
  const TokenCallback emit = [&streamed](std::string_view text, std::int32_t) {
    streamed.append(text);
  };
  for (std::size_t i = 0; i < kLanes; ++i) {
    inst[i] = new_instance(*m, kv());
    ASSERT_NE(inst[i], nullptr);
    // Prompts [0, 4) are short: all four prefill in the first step.
    GenerationRequest r = make_request(prompts[i], 1 + kWarmUp + kCounted + 4);
    r.ignore_eos = true;  // nobody finishes (and flushes) inside the counted steps
    r.stop = kNeverMatchingStops;
    r.sampling.temperature = 0.7f;
    r.sampling.top_k = 20;
    r.sampling.top_p = 0.9f;
    r.sampling.repetition_penalty = 1.2f;
    r.sampling.frequency_penalty = 0.1f;
    r.sampling.seed = 7 + i;
    r.logprobs = i % 2 == 0;  // two lanes also compute log-probabilities
    r.top_logprobs = r.logprobs ? 20 : 0;
    auto s = Sequence::start(*m->tokenizer, r, inst[i]->context_length(), m->vocab());
    ASSERT_TRUE(s.ok()) << s.status();
    seq[i] = std::move(*s);
  }
  std::vector<StepInput> inputs;
  inputs.reserve(kLanes);
  absl::Status failed;  // no allocation needed to record success
  auto step = [&] {
    inputs.clear();
    for (std::size_t i = 0; i < kLanes; ++i) {
      const auto t = seq[i]->next_tokens(64);
      inputs.push_back({inst[i].get(), t, seq[i]->position(), seq[i]->wants_logits(t.size())});
    }
    TempAllocatorLease lease;
    auto logits = (*batch)->step(inputs);
    if (!logits.ok()) {
      failed = logits.status();
      return;
    }
    std::size_t row = 0;
    for (std::size_t i = 0; i < kLanes; ++i) {
      const float* l = inputs[i].want_logits ? logits->data() + row++ * m->vocab() : nullptr;
      const absl::Status s = seq[i]->advance(inputs[i].tokens.size(), l, lease.allocator(), emit);
      if (!s.ok()) failed = s;
    }
  };
  for (std::size_t s = 0; s < 1 + kWarmUp; ++s) step();  // the prefill step, then decode
  ASSERT_TRUE(failed.ok()) << failed;
  for (std::size_t i = 0; i < kLanes; ++i) ASSERT_FALSE(seq[i]->prefilling());

  std::uint64_t allocations = 0;
  {
    hearth::testing::HeapCounter counter;
    for (std::size_t s = 0; s < kCounted; ++s) step();
    allocations = counter.allocations();
  }
  ASSERT_TRUE(failed.ok()) << failed;
  EXPECT_EQ(allocations, 0u) << kCounted << " steady steps of " << kLanes << " sequences";
  for (std::size_t i = 0; i < kLanes; ++i) {
    EXPECT_FALSE(seq[i]->finished());
    EXPECT_EQ(seq[i]->generated_ids().size(), 1 + kWarmUp + kCounted);
  }
  if (!hearth::testing::HeapCounter::counts_malloc())
    std::printf("[batched] sanitizer build: only operator new is counted\n");
}

// (e) engine::generate() as it really runs, one stream: the callback notes
// the heap-allocation count at each token; no allocation may happen between
// two consecutive tokens from token 1 on. Skipped: everything up to token 0
// (tokenizing, Sequence::start's reservations, the prefill and its scratch)
// and the step between tokens 0 and 1, the first one-row forward: its
// scratch blocks are smaller than the prefill's, and the temp allocator reuses
// a cached block only up to ~1.7x the request, so after a long prompt it
// allocates new ones (with the short prompts here the prefill's blocks serve
// it: measured, no kernel allocates after token 0). The final callback (token -1: the text held
// back at the end) is not counted: ending may allocate. The request is a common one: nucleus
// sampling (top-p, no top-k) with a penalty, and stop strings (never
// matching) so that the StopMatcher's hold-back path runs at every token.
TEST_P(Batched, GenerateMakesNoHeapAllocationBetweenTokens) {
  if (needs_shared()) HEARTH_REQUIRE_SHARED();
  std::unique_ptr<Model> m = load_model(weights());
  ASSERT_NE(m, nullptr);
  std::unique_ptr<Module> inst = new_instance(*m, kv());
  ASSERT_NE(inst, nullptr);
  constexpr std::size_t kTokens = 64, kSkip = 1;
  GenerationRequest r = make_request(eight_prompts(*m)[1], kTokens);
  r.ignore_eos = true;
  r.stop = kNeverMatchingStops;
  r.sampling.temperature = 0.7f;
  r.sampling.top_p = 0.9f;
  r.sampling.repetition_penalty = 1.1f;
  r.sampling.seed = 3;
  struct Mark {
    std::uint64_t allocations;
    std::size_t text_bytes;  // streamed so far, for the failure message
  };
  std::vector<Mark> marks;
  marks.reserve(kTokens + 1);
  std::size_t text_bytes = 0;
  hearth::testing::HeapCounter counter;
  auto result = generate(*inst, *m->tokenizer, r, [&](std::string_view text, std::int32_t id) {
    text_bytes += text.size();
    if (id >= 0) marks.push_back({counter.allocations(), text_bytes});
  });
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(marks.size(), kTokens);
  for (std::size_t i = kSkip; i + 1 < marks.size(); ++i)
    EXPECT_EQ(marks[i + 1].allocations - marks[i].allocations, 0u)
        << "heap allocation between tokens " << i << " and " << i + 1 << " (text "
        << marks[i].text_bytes << " -> " << marks[i + 1].text_bytes << " bytes)";
  std::printf(
      "[batched] generate(), %s, %s KV: %llu allocations up to token 0, %llu between tokens 0 "
      "and 1, %llu between 1 and 2, %llu after token %zu\n",
      weights_name(weights()), kv_cache_type_name(kv()),
      static_cast<unsigned long long>(marks[0].allocations),
      static_cast<unsigned long long>(marks[1].allocations - marks[0].allocations),
      static_cast<unsigned long long>(marks[2].allocations - marks[1].allocations),
      static_cast<unsigned long long>(marks.back().allocations - marks[kSkip].allocations), kSkip);
}

}  // namespace
}  // namespace hearth::engine
