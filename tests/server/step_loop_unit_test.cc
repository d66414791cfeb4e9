// The step loop in-process, through the real request path: ModelRegistry ->
// RequestPath::generate -> ModelPool admission -> StepLoop -> BatchedForward
// -> engine::Sequence -> PieceWriterSink -> PieceWriter threads. No gRPC:
// the sink a gRPC stream uses is the same PieceWriter, given a sink that
// copies into fixed buffers. Orderings are events, never sleeps.
#include "server/step_loop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "server/model_registry.h"
#include "server/piece_writer.h"
#include "server/request_path.h"
#include "tests/support/heap_counter.h"

namespace hearth::server {
namespace {

constexpr std::size_t kStreams = 4;

// Records the widest step the loop ran. Once given the model's loop, it
// holds the loop after its first step until every stream has been handed
// over, so the streams are stepped together however late a client thread
// starts: without this hold, a busy machine could let one stream run far
// ahead (or fill its sink) before the last one arrives.
class WidestStep final : public StepObserver {
 public:
  void hold_until_running(const StepLoop* loop, std::size_t sequences) {
    held_for_ = sequences;
    loop_.store(loop);
  }
  void on_step(const std::string&, std::size_t sequences, std::size_t, double) override {
    if (const StepLoop* loop = loop_.exchange(nullptr)) {
      // An event, not a time: the loop thread waits for the last hand-over.
      while (loop->running() < held_for_) std::this_thread::yield();
    }
    std::size_t seen = widest_.load();
    while (sequences > seen && !widest_.compare_exchange_weak(seen, sequences)) {
    }
  }
  std::size_t widest() const { return widest_.load(); }

 private:
  std::atomic<const StepLoop*> loop_{nullptr};
  std::size_t held_for_ = 0;  // written before loop_ is published
  std::atomic<std::size_t> widest_{0};
};

// Allocations counted between the moment every stream has written `from`
// tokens and the moment every stream has written `to`: a window in which all
// of them are decoding, none has finished, and only the step loop, the
// kernel pool and the writer threads run.
class AllocationWindow {
 public:
  AllocationWindow(std::size_t from, std::size_t to) : from_(from), to_(to) {}
  // Called by a writer thread after stream `s` wrote a token.
  void wrote(std::size_t s, const testing::HeapCounter& counter) {
    written_[s].fetch_add(1);
    std::size_t least = written_[0].load();
    for (std::size_t i = 1; i < kStreams; ++i) least = std::min(least, written_[i].load());
    if (least >= from_ && !opened_.exchange(true)) at_open_.store(counter.allocations());
    if (least >= to_ && !closed_.exchange(true)) at_close_.store(counter.allocations());
  }
  bool complete() const { return opened_.load() && closed_.load(); }
  std::uint64_t allocations() const { return at_close_.load() - at_open_.load(); }

 private:
  const std::size_t from_, to_;
  std::array<std::atomic<std::size_t>, kStreams> written_{};
  std::atomic<bool> opened_{false}, closed_{false};
  std::atomic<std::uint64_t> at_open_{0}, at_close_{0};
};

TEST(StepLoopUnit, SteadyBatchedDecodeMakesNoHeapAllocationThroughTheRealLoop) {
  if (!testing::HeapCounter::counts_malloc())
    GTEST_SKIP() << "a sanitizer owns malloc here: only operator new would be counted";
  ModelSpec spec;
  spec.name = "demo";
  spec.path = std::string(kDemoSource);
  spec.instances = kStreams;
  spec.queue = 0;
  ModelRegistry registry({spec});
  WidestStep steps;
  ASSERT_TRUE(registry.load_all(nullptr, false, {}, &steps).ok());
  absl::StatusOr<ModelPool*> pool = registry.find("demo");
  ASSERT_TRUE(pool.ok()) << pool.status();
  steps.hold_until_running(&(*pool)->step_loop(), kStreams);
  RequestPath path(registry, RequestPathOptions{});

  // Writers and their fixed-size text buffers, made before counting.
  std::array<PieceWriter, kStreams> writers;
  std::array<std::array<char, 1 << 16>, kStreams> text{};
  std::array<std::size_t, kStreams> text_used{};
  AllocationWindow window(8, 40);
  testing::HeapCounter counter;
  std::vector<std::thread> clients;
  std::array<absl::Status, kStreams> status;
  for (std::size_t s = 0; s < kStreams; ++s) {
    writers[s].begin([&, s](std::string_view piece, std::int32_t token, const PieceLogprobs*) {
      const std::size_t n = std::min(piece.size(), text[s].size() - text_used[s]);
      std::copy_n(piece.data(), n, text[s].data() + text_used[s]);
      text_used[s] += n;
      if (token >= 0) window.wrote(s, counter);
      return true;
    });
  }
  for (std::size_t s = 0; s < kStreams; ++s) {
    clients.emplace_back([&, s] {
      GenerateCall call;
      call.method = "Generate";
      call.model = "demo";
      // Different prompts and seeds: four sequences at different positions.
      call.request.prompt = std::string("stream ") + std::to_string(s) + " says hello";
      call.request.max_tokens = 160;  // far past the window: none finishes inside it
      call.request.ignore_eos = true;
      call.request.stop = {"never appears in random text \x01"};
      call.request.sampling.temperature = 0.8f;
      call.request.sampling.seed = 100 + s;
      call.request.logprobs = s % 2 == 0;  // two streams with log-probabilities
      call.request.top_logprobs = call.request.logprobs ? 5 : 0;
      PieceWriterSink sink(writers[s]);
      RequestRecord record;
      status[s] = path.generate(call, sink, CallContext{}, record).status();
      writers[s].finish();
    });
  }
  for (std::thread& t : clients) t.join();
  for (std::size_t s = 0; s < kStreams; ++s) EXPECT_TRUE(status[s].ok()) << status[s];
  ASSERT_TRUE(window.complete());
  EXPECT_EQ(steps.widest(), kStreams) << "the four streams were never stepped together";
  EXPECT_EQ(window.allocations(), 0u)
      << "heap allocations while four streams decoded in batched steps";
}

// Records (sequences, tokens) of every step. With hold_when set, the loop's
// thread stops after recording the first step of a number of sequences it
// accepts, until release(); wait_held() returns once it has stopped. So a
// test can hand over a request between two known steps: an event, not a race.
class StepShapes final : public StepObserver {
 public:
  void on_step(const std::string&, std::size_t sequences, std::size_t tokens, double) override {
    std::unique_lock lock(mu_);
    shapes_.emplace_back(sequences, tokens);
    if (held_ || !hold_when || !hold_when(sequences)) return;
    held_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
  }
  std::function<bool(std::size_t sequences)> hold_when;  // set before the loop starts
  void wait_held() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return held_; });
  }
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  std::vector<std::pair<std::size_t, std::size_t>> shapes() const {
    std::lock_guard lock(mu_);
    return shapes_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::size_t, std::size_t>> shapes_;  // guarded by mu_
  bool held_ = false, released_ = false;                     // guarded by mu_
};

// Counts the streams whose writers (begun with begin_counting) received a
// token; wait_for(n) returns once n have.
class FirstTokens {
 public:
  void begin_counting(PieceWriter& w) {
    w.begin(
        [this, seen = false](std::string_view, std::int32_t token, const PieceLogprobs*) mutable {
          if (token >= 0 && !seen) {
            seen = true;
            std::lock_guard lock(mu_);
            ++streams_;
            cv_.notify_all();
          }
          return true;
        });
  }
  void wait_for(std::size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return streams_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t streams_ = 0;  // guarded by mu_
};

// A prompt of a few hundred tokens for the demo model's tokenizer.
std::string long_prompt() {
  std::string p;
  for (int i = 0; i < 20; ++i) p += "the newcomer waits ";
  return p;
}

// The demo model with `instances` instances, no queue, and a step budget.
ModelSpec demo_spec(std::size_t instances, std::size_t step_tokens) {
  ModelSpec spec;
  spec.name = "demo";
  spec.path = std::string(kDemoSource);
  spec.instances = instances;
  spec.queue = 0;
  spec.step_tokens = step_tokens;
  return spec;
}

// A greedy Generate of `max_tokens` tokens (EOS ignored) on the demo model.
GenerateCall greedy_call(std::string prompt, std::size_t max_tokens) {
  GenerateCall call;
  call.method = "Generate";
  call.model = "demo";
  call.request.prompt = std::move(prompt);
  call.request.max_tokens = max_tokens;
  call.request.ignore_eos = true;
  return call;
}

// `call` through `path`, its pieces to `sink`.
absl::Status generate(RequestPath& path, PieceSink& sink, const GenerateCall& call,
                      const CallContext& context = {}) {
  RequestRecord record;
  return path.generate(call, sink, context, record).status();
}

// One greedy_call through `path`, its pieces to `sink`.
absl::Status generate(RequestPath& path, PieceSink& sink, std::string prompt,
                      std::size_t max_tokens) {
  return generate(path, sink, greedy_call(std::move(prompt), max_tokens));
}

// The same, its pieces to `writer`, which it finishes.
absl::Status generate(RequestPath& path, PieceWriter& writer, std::string prompt,
                      std::size_t max_tokens) {
  PieceWriterSink sink(writer);
  absl::Status st = generate(path, sink, std::move(prompt), max_tokens);
  writer.finish();
  return st;
}

// With --step-tokens 4 and three sequences decoding, a newcomer's prompt
// gets half the budget (2 rows) per step even though the decode rows leave
// it only 1: steps of 4 sequences run 5 tokens (3 + 2), except perhaps the
// prompt's last chunk, and never more.
TEST(StepLoopUnit, ThePromptGetsHalfTheBudgetWhenDecodeRowsFillIt) {
  ModelRegistry registry({demo_spec(4, 4)});
  StepShapes steps;
  ASSERT_TRUE(registry.load_all(nullptr, false, {}, &steps).ok());
  RequestPath path(registry, RequestPathOptions{});

  FirstTokens decoding;
  std::array<PieceWriter, 4> writers;
  for (std::size_t s = 0; s < 3; ++s) decoding.begin_counting(writers[s]);
  writers[3].begin([](std::string_view, std::int32_t, const PieceLogprobs*) { return true; });
  auto run = [&](std::size_t s, std::string prompt, std::size_t max_tokens) {
    return generate(path, writers[s], std::move(prompt), max_tokens);
  };
  std::array<absl::Status, 4> status;
  std::vector<std::thread> clients;
  // Decoders with far more tokens to go than the newcomer's prefill takes.
  for (std::size_t s = 0; s < 3; ++s)
    clients.emplace_back([&, s] { status[s] = run(s, "decoder " + std::to_string(s), 400); });
  decoding.wait_for(3);
  status[3] = run(3, long_prompt(), 1);
  for (std::thread& t : clients) t.join();
  for (const absl::Status& st : status) EXPECT_TRUE(st.ok()) << st;

  std::size_t halves = 0;
  for (const auto& [sequences, tokens] : steps.shapes()) {
    if (sequences != 4) continue;
    EXPECT_LE(tokens, 5u) << "a step of four sequences ran " << tokens << " tokens";
    halves += tokens == 5 ? 1 : 0;
  }
  EXPECT_GE(halves, 5u) << "the newcomer's chunks were not half the budget";
}

// With --step-tokens 8, a short prompt that arrives while a long one is
// being prefilled gets its chunk in the next step (the long one keeps at
// least half the budget), instead of waiting for the long prefill to end:
// full-budget steps of the long prompt alone follow the first step of both.
// The loop is held after its first step until the short request is handed
// over, so the order is an event, not a race.
TEST(StepLoopUnit, AShortPromptIsNotQueuedBehindALongPrefill) {
  ModelRegistry registry({demo_spec(2, 8)});
  StepShapes steps;
  steps.hold_when = [](std::size_t) { return true; };  // after the first step
  ASSERT_TRUE(registry.load_all(nullptr, false, {}, &steps).ok());
  absl::StatusOr<ModelPool*> pool = registry.find("demo");
  ASSERT_TRUE(pool.ok()) << pool.status();
  RequestPath path(registry, RequestPathOptions{});

  std::array<PieceWriter, 2> writers;
  for (PieceWriter& w : writers)
    w.begin([](std::string_view, std::int32_t, const PieceLogprobs*) { return true; });
  std::array<absl::Status, 2> status;
  std::thread long_client([&] { status[0] = generate(path, writers[0], long_prompt(), 1); });
  steps.wait_held();
  std::thread short_client([&] { status[1] = generate(path, writers[1], "once upon", 1); });
  while ((*pool)->step_loop().running() < 2) std::this_thread::yield();  // handed over
  steps.release();
  long_client.join();
  short_client.join();
  for (const absl::Status& st : status) EXPECT_TRUE(st.ok()) << st;

  const auto shapes = steps.shapes();
  const auto both = std::find_if(shapes.begin(), shapes.end(),
                                 [](const auto& shape) { return shape.first == 2; });
  ASSERT_NE(both, shapes.end()) << "the two prompts never shared a step";
  EXPECT_EQ(both - shapes.begin(), 1) << "the short prompt waited " << both - shapes.begin() - 1
                                      << " steps after it was handed over";
  const auto long_alone = std::count_if(both + 1, shapes.end(), [](const auto& shape) {
    return shape.first == 1 && shape.second == 8;
  });
  EXPECT_GE(long_alone, 3) << "the long prefill had ended before the short prompt ran";
}

// A sink that notes, on the step loop's thread, how many steps had been
// recorded when its first token came: the step that sampled it.
class FirstTokenStep final : public PieceSink {
 public:
  explicit FirstTokenStep(const StepShapes& steps) : steps_(steps) {}
  bool has_room(std::size_t) const override { return true; }
  bool failed() const override { return false; }
  void piece(std::string_view, std::int32_t token, const PieceLogprobs*) override {
    if (token >= 0 && step_ < 0) step_ = static_cast<long>(steps_.shapes().size());
  }
  long step() const { return step_; }  // read after the generation returned

 private:
  const StepShapes& steps_;
  long step_ = -1;
};

// With --step-tokens 4 and two sequences decoding, a long prompt being
// prefilled (the oldest) and a short one that arrives meanwhile split the
// two rows the decoders leave: the short prompt gets its first token long
// before the long one's prefill ends, instead of waiting for all of it, and
// no step runs more than the budget. The loop is held after the long
// prompt's first step until the short request is handed over, so the order
// is an event, not a race.
TEST(StepLoopUnit, PromptsShareTheRowsTheDecodersLeave) {
  ModelRegistry registry({demo_spec(4, 4)});
  StepShapes steps;
  steps.hold_when = [](std::size_t sequences) { return sequences == 3; };  // the long one's first
  ASSERT_TRUE(registry.load_all(nullptr, false, {}, &steps).ok());
  absl::StatusOr<ModelPool*> pool = registry.find("demo");
  ASSERT_TRUE(pool.ok()) << pool.status();
  RequestPath path(registry, RequestPathOptions{});

  FirstTokens decoding;
  std::array<PieceWriter, 2> decoders;
  for (PieceWriter& w : decoders) decoding.begin_counting(w);
  FirstTokenStep long_sink(steps), short_sink(steps);
  std::array<absl::Status, 4> status;
  std::vector<std::thread> clients;
  for (std::size_t s = 0; s < 2; ++s)
    clients.emplace_back(
        [&, s] { status[s] = generate(path, decoders[s], "decoder " + std::to_string(s), 400); });
  decoding.wait_for(2);
  clients.emplace_back([&] { status[2] = generate(path, long_sink, long_prompt(), 1); });
  steps.wait_held();
  clients.emplace_back([&] { status[3] = generate(path, short_sink, "once upon", 1); });
  while ((*pool)->step_loop().running() < 4) std::this_thread::yield();  // handed over
  steps.release();
  for (std::thread& t : clients) t.join();
  for (const absl::Status& st : status) EXPECT_TRUE(st.ok()) << st;

  ASSERT_GE(short_sink.step(), 0);
  ASSERT_GE(long_sink.step(), 0);
  EXPECT_LT(short_sink.step() + 10, long_sink.step())
      << "the short prompt's first token came at step " << short_sink.step()
      << ", the long one's at step " << long_sink.step();
  const auto shapes = steps.shapes();
  for (std::size_t i = 0; i < shapes.size(); ++i)
    EXPECT_LE(shapes[i].second, 4u) << "step " << i << " ran past the budget";
}

// A client that stops reading: its sink takes `capacity` pieces and then has
// no room, until give_up() makes it report the stream gone. stalled() waits
// until it can take no step's pieces (so its sequence is not stepped).
class StalledSink final : public PieceSink {
 public:
  explicit StalledSink(std::size_t capacity) : capacity_(capacity) {}
  bool has_room(std::size_t pieces) const override {
    std::lock_guard lock(mu_);
    return taken_ + pieces <= capacity_;
  }
  void piece(std::string_view text, std::int32_t token, const PieceLogprobs*) override {
    std::lock_guard lock(mu_);
    ++taken_;
    overflowed_ = overflowed_ || taken_ > capacity_;
    flushed_ = flushed_ || (token < 0 && !text.empty());
    cv_.notify_all();
  }
  bool failed() const override { return gone_.load(); }
  void stalled(std::size_t step_pieces) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return taken_ + step_pieces > capacity_; });
  }
  void give_up() { gone_.store(true); }
  bool overflowed() const {
    std::lock_guard lock(mu_);
    return overflowed_;
  }
  // Whether text held back until the end came (a piece without a token).
  bool flushed_held_text() const {
    std::lock_guard lock(mu_);
    return flushed_;
  }

 private:
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::size_t taken_ = 0;    // guarded by mu_
  bool overflowed_ = false;  // guarded by mu_
  bool flushed_ = false;     // guarded by mu_
  std::atomic<bool> gone_{false};
};

// The KV gauge (hearth_model_kv_positions_used) drops a cancelled sequence's
// positions by the time its call returns, even when the only sequence left
// waits for a stalled client, so the loop runs no step that would count
// again.
TEST(StepLoopUnit, ACancelledSequenceLeavesTheKvGaugeWhileTheOthersWait) {
  ModelRegistry registry({demo_spec(2, 16)});
  ASSERT_TRUE(registry.load_all(nullptr, false, {}, nullptr).ok());
  absl::StatusOr<ModelPool*> pool = registry.find("demo");
  ASSERT_TRUE(pool.ok()) << pool.status();
  const StepLoop& loop = (*pool)->step_loop();
  RequestPath path(registry, RequestPathOptions{});

  // The stalled stream: a short prompt, three pieces taken, then no room.
  StalledSink stalled(3);
  absl::Status stalled_status;
  std::thread stalled_client([&] { stalled_status = generate(path, stalled, "once upon", 400); });
  stalled.stalled(2);

  // The cancelled one: cancelled by its client once it has 40 tokens.
  constexpr std::size_t kCancelAt = 40;
  std::atomic<std::size_t> tokens{0};
  PieceWriter writer;
  writer.begin([&](std::string_view, std::int32_t token, const PieceLogprobs*) {
    if (token >= 0) tokens.fetch_add(1);
    return true;
  });
  CallContext context;
  context.cancelled = [&] { return tokens.load() >= kCancelAt; };
  PieceWriterSink sink(writer);
  const absl::Status cancelled =
      generate(path, sink, greedy_call("the cancelled one", 400), context);
  writer.finish();
  EXPECT_EQ(cancelled.code(), absl::StatusCode::kCancelled) << cancelled;
  // Its cache held more than kCancelAt positions; the stalled one's holds
  // its prompt and its first sampled token.
  const std::size_t kv = loop.kv_positions_in_use();
  EXPECT_GT(kv, 0u);
  EXPECT_LT(kv, 20u) << "the cancelled sequence's positions are still counted";

  stalled.give_up();
  stalled_client.join();
  EXPECT_EQ(stalled_status.code(), absl::StatusCode::kCancelled) << stalled_status;
  EXPECT_FALSE(stalled.overflowed()) << "a piece was handed to a sink that had no room";
  EXPECT_EQ(loop.kv_positions_in_use(), 0u);
}

// Collects the text of each sampled token's piece.
class PieceTexts final : public PieceSink {
 public:
  bool has_room(std::size_t) const override { return true; }
  bool failed() const override { return false; }
  void piece(std::string_view text, std::int32_t token, const PieceLogprobs*) override {
    if (token >= 0) texts.emplace_back(text);
  }
  std::vector<std::string> texts;
};

// A sequence ended from outside (here its client goes away) hands its sink
// the text it held back, one piece more than its steps did: the loop steps a
// sequence only while its sink has room for a step's pieces, so that one
// always fits and the loop never waits for a stalled client (a PieceWriter
// would block its thread, and every sequence of the model with it). The
// stop string holds back the stalled sequence's last pieces (they are a
// prefix of it), so the end has text to flush.
TEST(StepLoopUnit, AnEndedSequencesHeldBackTextFitsItsStalledSink) {
  ModelRegistry registry({demo_spec(1, 16)});
  ASSERT_TRUE(registry.load_all(nullptr, false, {}, nullptr).ok());
  RequestPath path(registry, RequestPathOptions{});
  PieceTexts first;
  ASSERT_TRUE(generate(path, first, "once upon", 3).ok());
  ASSERT_EQ(first.texts.size(), 3u);
  ASSERT_FALSE(first.texts[1].empty());

  StalledSink stalled(3);
  GenerateCall call = greedy_call("once upon", 400);
  call.request.stop = {first.texts[1] + first.texts[2] + "#~#"};
  absl::Status status;
  std::thread client([&] { status = generate(path, stalled, call); });
  stalled.stalled(2);
  stalled.give_up();
  client.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_TRUE(stalled.flushed_held_text()) << "no text was held back: the test shows nothing";
  EXPECT_FALSE(stalled.overflowed()) << "the held-back text went to a sink that had no room";
}

}  // namespace
}  // namespace hearth::server
