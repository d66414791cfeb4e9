// PieceWriter: writes one Generate stream's pieces from a thread of its own,
// so that the generating thread never waits for gRPC.
//
// A synchronous gRPC Write returns once its message has gone to the
// transport, a wait that, made by the generating thread between decode
// steps, would add to every step (docs/performance.md;
// bench/server/serving_overhead.sh measures it).
// Here the generating thread only copies the piece into a reused slot, and
// the writer's thread makes the Write calls, in order, while the next step
// runs.
//
// Back-pressure: at most kCapacity pieces wait. A generation that gets that
// far ahead of its stream (a client that stops reading) waits in push(), as
// it used to wait in Write, and is released as soon as a write fails. After a
// failed write the queued pieces are dropped and push() returns false, so the
// generation sees the stream is gone at its next cancellation check.
//
// Use: begin(sink), push()..., finish(); then the writer can serve another
// stream. Threads: begin/push/finish are called by one thread at a time (the
// stream's handler); the sink runs on the writer's thread; failed() may be
// called from anywhere. `mu_` guards the queue; a slot's contents pass from
// producer to writer through it (the writer reads its slot outside the lock
// while count_ still holds it, so the producer cannot reuse it).
//
// Steady state makes no heap allocation: slots keep their strings' capacity.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "server/piece_sink.h"

namespace hearth::server {

class PieceWriter {
 public:
  // Writes one piece; runs on the writer's thread, in push order. Returns
  // false when the stream is gone. (Not gRPC's buffer hint for pieces queued
  // behind: a synchronous Write with that hint waits for the next write to
  // flush it, which this same thread would make, so it never returns.)
  using Sink =
      std::function<bool(std::string_view text, std::int32_t token, const PieceLogprobs* logprobs)>;
  static constexpr std::size_t kCapacity = 64;

  PieceWriter();
  // Joins the thread. No stream may be open (finish() has returned).
  ~PieceWriter();
  PieceWriter(const PieceWriter&) = delete;
  PieceWriter& operator=(const PieceWriter&) = delete;

  // Opens a stream whose pieces go to `sink`.
  void begin(Sink sink);
  // Queues a piece, waiting while kCapacity are queued. False when a write of
  // this stream has failed (the piece is dropped).
  bool push(std::string_view text, std::int32_t token, const PieceLogprobs* logprobs = nullptr);
  // Whether `pieces` more can be queued without waiting (or a write has
  // failed, so push() would drop them at once).
  bool has_room(std::size_t pieces);
  // Whether a write of the current stream has failed.
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Waits until every queued piece is written (or dropped after a failure)
  // and closes the stream. True if every write succeeded.
  bool finish();

 private:
  void run();

  struct Slot {
    std::string text;
    std::int32_t token = 0;
    engine::TokenLogprobs logprobs;                // a copy, when `tokenizer` is set
    const engine::Tokenizer* tokenizer = nullptr;  // outlives every stream
  };
  std::array<Slot, kCapacity> slots_;
  std::mutex mu_;
  std::condition_variable work_;   // the writer waits: a piece is queued, or stop
  std::condition_variable space_;  // the producer waits: a slot freed, or a failure
  std::size_t head_ = 0;           // guarded by mu_: the oldest queued piece
  std::size_t count_ = 0;          // guarded by mu_: queued, including the one being written
  bool stop_ = false;              // guarded by mu_
  Sink sink_;                      // set by begin() under mu_, used by the writer
  std::atomic<bool> failed_{false};
  std::thread thread_;
};

// A PieceSink that queues pieces on a PieceWriter (begun by the caller):
// room means free slots, and push never waits once room was checked.
class PieceWriterSink final : public PieceSink {
 public:
  explicit PieceWriterSink(PieceWriter& writer) : writer_(writer) {}
  bool has_room(std::size_t pieces) const override { return writer_.has_room(pieces); }
  void piece(std::string_view text, std::int32_t token, const PieceLogprobs* logprobs) override {
    writer_.push(text, token, logprobs);
  }
  bool failed() const override { return writer_.failed(); }

 private:
  PieceWriter& writer_;
};

// The service's idle PieceWriters. A stream borrows one for its generation
// and gives it back; the pool grows to the most streams generating at once
// (at most the instances served) and then starts no more threads.
class PieceWriterPool {
 public:
  class Borrowed {
   public:
    Borrowed(PieceWriterPool* pool, std::unique_ptr<PieceWriter> writer)
        : pool_(pool), writer_(std::move(writer)) {}
    Borrowed(Borrowed&&) = default;
    Borrowed& operator=(Borrowed&&) = delete;
    ~Borrowed() {
      if (writer_ != nullptr) pool_->give_back(std::move(writer_));
    }
    PieceWriter& operator*() const { return *writer_; }
    PieceWriter* operator->() const { return writer_.get(); }

   private:
    PieceWriterPool* pool_;
    std::unique_ptr<PieceWriter> writer_;
  };

  Borrowed take();
  // Writers made so far (idle or borrowed).
  std::size_t size() const;

 private:
  void give_back(std::unique_ptr<PieceWriter> writer);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<PieceWriter>> idle_;  // guarded by mu_
  std::size_t made_ = 0;                            // guarded by mu_
};

}  // namespace hearth::server
