// PieceWriter in-process: order, back-pressure, a failed
// write releasing the producer, reuse for the next stream, the pool,
// log-probabilities passed on as pushed, and no heap allocation per piece
// once warm. Orderings are forced with a gate the
// sink waits on, never with sleeps.
#include "server/piece_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/gguf.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "tests/support/heap_counter.h"

namespace hearth::server {
namespace {

// Blocks the sink until opened; records what it was given, in order.
class GatedSink {
 public:
  struct Write {
    std::string text;
    std::int32_t token;
  };

  PieceWriter::Sink sink(int fail_at = -1) {
    return [this, fail_at](std::string_view text, std::int32_t token, const PieceLogprobs*) {
      std::unique_lock<std::mutex> lock(mu_);
      entered_ = true;
      changed_.notify_all();
      changed_.wait(lock, [&] { return open_; });
      writes_.push_back({std::string(text), token});
      events_.push_back("write " + std::to_string(token));
      return static_cast<int>(writes_.size()) - 1 != fail_at;
    };
  }
  // Waits until the writer's thread is inside the sink.
  void wait_entered() {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return entered_; });
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    changed_.notify_all();
  }
  void event(std::string e) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  std::vector<Write> writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool entered_ = false, open_ = false;
  std::vector<Write> writes_;
  std::vector<std::string> events_;
};

TEST(PieceWriterTest, WritesInOrderWhileTheProducerRunsAhead) {
  PieceWriter writer;
  GatedSink gate;
  writer.begin(gate.sink());
  ASSERT_TRUE(writer.push("Once", 0));
  gate.wait_entered();  // piece 0 is being written, alone in the queue
  ASSERT_TRUE(writer.push(" upon", 1));
  ASSERT_TRUE(writer.push(" a", 2));
  ASSERT_TRUE(writer.push("", -1));  // a final flush piece carries no token
  gate.open();
  EXPECT_TRUE(writer.finish());
  const auto w = gate.writes();
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0].text, "Once");
  EXPECT_EQ(w[1].text, " upon");
  EXPECT_EQ(w[2].text, " a");
  EXPECT_EQ(w[3].text, "");
  EXPECT_EQ(w[3].token, -1);
}

TEST(PieceWriterTest, AFullQueueHoldsTheProducerUntilAWriteCompletes) {
  PieceWriter writer;
  GatedSink gate;
  writer.begin(gate.sink());
  ASSERT_TRUE(writer.push("p", 0));
  gate.wait_entered();
  for (std::size_t i = 1; i < PieceWriter::kCapacity; ++i)
    ASSERT_TRUE(writer.push("p", static_cast<std::int32_t>(i)));
  // The queue is full (piece 0 is still being written): this push must wait
  // for a slot, which only a finished write frees.
  const auto last = static_cast<std::int32_t>(PieceWriter::kCapacity);
  std::thread producer([&] {
    EXPECT_TRUE(writer.push("p", last));
    gate.event("push returned");
  });
  gate.open();
  producer.join();
  EXPECT_TRUE(writer.finish());
  const auto events = gate.events();
  const auto returned = std::find(events.begin(), events.end(), "push returned");
  const auto first_write = std::find(events.begin(), events.end(), "write 0");
  ASSERT_NE(returned, events.end());
  ASSERT_NE(first_write, events.end());
  EXPECT_LT(first_write, returned) << "a push into a full queue returned before any write finished";
  const auto w = gate.writes();
  ASSERT_EQ(w.size(), PieceWriter::kCapacity + 1);
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w[i].token, static_cast<std::int32_t>(i));
}

TEST(PieceWriterTest, AFailedWriteDropsTheRestAndReleasesABlockedProducer) {
  PieceWriter writer;
  GatedSink gate;
  writer.begin(gate.sink(/*fail_at=*/0));
  ASSERT_TRUE(writer.push("p", 0));
  gate.wait_entered();
  for (std::size_t i = 1; i < PieceWriter::kCapacity; ++i)
    ASSERT_TRUE(writer.push("p", static_cast<std::int32_t>(i)));
  bool pushed = true;
  std::thread producer([&] { pushed = writer.push("p", 999); });  // waits: the queue is full
  gate.open();                                                    // write 0 fails
  producer.join();
  EXPECT_FALSE(pushed) << "a push after the stream failed must report it";
  EXPECT_TRUE(writer.failed());
  EXPECT_FALSE(writer.push("p", 1000));
  EXPECT_FALSE(writer.finish());
  EXPECT_EQ(gate.writes().size(), 1u) << "pieces queued behind a failed write must be dropped";
}

TEST(PieceWriterTest, ServesTheNextStreamAfterFinish) {
  PieceWriter writer;
  GatedSink first, second;
  first.open();
  second.open();
  writer.begin(first.sink(/*fail_at=*/0));
  ASSERT_TRUE(writer.push("a", 1));
  EXPECT_FALSE(writer.finish());
  writer.begin(second.sink());
  EXPECT_FALSE(writer.failed()) << "a new stream starts without the last one's failure";
  ASSERT_TRUE(writer.push("b", 2));
  ASSERT_TRUE(writer.push("c", 3));
  EXPECT_TRUE(writer.finish());
  ASSERT_EQ(first.writes().size(), 1u);
  const auto w = second.writes();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].text, "b");
  EXPECT_EQ(w[1].text, "c");
}

// A tokenizer to name tokens with (the synthetic demo model's).
struct DemoTokenizer {
  DemoTokenizer() {
    auto bytes = engine::synthesize_model(engine::SyntheticModelSpec{});
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (!bytes.ok()) return;
    gguf = std::move(*bytes);
    auto file = engine::GgufFile::parse(reinterpret_cast<const std::uint8_t*>(gguf.data()),
                                        gguf.size(), "demo");
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return;
    auto t = engine::Tokenizer::from_gguf(**file);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) tokenizer = std::move(*t);
  }
  std::string gguf;
  std::unique_ptr<engine::Tokenizer> tokenizer;
};

engine::TokenLogprobs some_logprobs(std::int32_t token) {
  engine::TokenLogprobs lp;
  lp.chosen = {token, -0.25f * static_cast<float>(token)};
  lp.n_top = 3;
  for (std::size_t j = 0; j < lp.n_top; ++j)
    lp.top[j] = {static_cast<std::int32_t>(10 + j), -static_cast<float>(j)};
  return lp;
}

TEST(PieceWriterTest, PassesLogprobsOnAsPushed) {
  DemoTokenizer demo;
  ASSERT_NE(demo.tokenizer, nullptr);
  PieceWriter writer;
  std::vector<engine::TokenLogprobs> got;
  std::vector<const engine::Tokenizer*> named_by;
  std::size_t without = 0;
  writer.begin([&](std::string_view, std::int32_t, const PieceLogprobs* logprobs) {
    if (logprobs == nullptr) {
      ++without;
    } else {
      got.push_back(logprobs->values);
      named_by.push_back(&logprobs->tokenizer);
    }
    return true;
  });
  // More pieces than slots: each slot is reused with other figures.
  for (std::int32_t t = 0; t < static_cast<std::int32_t>(2 * PieceWriter::kCapacity); ++t) {
    const engine::TokenLogprobs values = some_logprobs(t);
    const PieceLogprobs lp{values, *demo.tokenizer};
    ASSERT_TRUE(writer.push("x", t, t % 2 == 0 ? &lp : nullptr));
  }
  ASSERT_TRUE(writer.push("", -1));
  ASSERT_TRUE(writer.finish());
  ASSERT_EQ(got.size(), PieceWriter::kCapacity);
  EXPECT_EQ(without, PieceWriter::kCapacity + 1);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const engine::TokenLogprobs want = some_logprobs(static_cast<std::int32_t>(2 * i));
    EXPECT_EQ(got[i].chosen.id, want.chosen.id);
    EXPECT_EQ(got[i].chosen.logprob, want.chosen.logprob);
    ASSERT_EQ(got[i].n_top, want.n_top);
    for (std::size_t j = 0; j < want.n_top; ++j) {
      EXPECT_EQ(got[i].top[j].id, want.top[j].id);
      EXPECT_EQ(got[i].top[j].logprob, want.top[j].logprob);
    }
    EXPECT_EQ(named_by[i], demo.tokenizer.get());
  }
}

TEST(PieceWriterTest, NoHeapAllocationPerPieceOnceWarm) {
  DemoTokenizer demo;
  ASSERT_NE(demo.tokenizer, nullptr);
  PieceWriter writer;
  std::size_t bytes = 0;
  auto sink = [&bytes](std::string_view text, std::int32_t, const PieceLogprobs*) {
    bytes += text.size();
    return true;
  };
  writer.begin(sink);
  const std::string text(40, 'x');  // longer than std::string's inline buffer
  const engine::TokenLogprobs values = some_logprobs(1);
  const PieceLogprobs lp{values, *demo.tokenizer};
  // Warm-up: every slot gets a string buffer of this size.
  for (std::size_t i = 0; i < 4 * PieceWriter::kCapacity; ++i) ASSERT_TRUE(writer.push(text, 1));
  ASSERT_TRUE(writer.finish());
  writer.begin(sink);
  std::uint64_t allocations = 0;
  {
    testing::HeapCounter counter;
    for (std::size_t i = 0; i < 4 * PieceWriter::kCapacity; ++i)
      ASSERT_TRUE(writer.push(text, 1, i % 2 == 0 ? &lp : nullptr));
    ASSERT_TRUE(writer.finish());
    allocations = counter.allocations();
  }
  EXPECT_EQ(allocations, 0u);
  EXPECT_EQ(bytes, 8 * PieceWriter::kCapacity * text.size());
}

TEST(PieceWriterPoolTest, ReusesIdleWritersAndGrowsOnlyForConcurrentStreams) {
  PieceWriterPool pool;
  PieceWriter *first = nullptr, *second = nullptr;
  {
    PieceWriterPool::Borrowed a = pool.take();
    PieceWriterPool::Borrowed b = pool.take();
    first = &*a;
    second = &*b;
    EXPECT_NE(first, second);
    EXPECT_EQ(pool.size(), 2u);
  }
  for (int i = 0; i < 3; ++i) {
    PieceWriterPool::Borrowed c = pool.take();
    EXPECT_TRUE(&*c == first || &*c == second) << "a new writer while two were idle";
  }
  EXPECT_EQ(pool.size(), 2u) << "sequential streams must reuse the idle writers";
}

}  // namespace
}  // namespace hearth::server
