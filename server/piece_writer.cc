#include "server/piece_writer.h"

#include <pthread.h>

namespace hearth::server {

PieceWriter::PieceWriter() : thread_([this] { run(); }) {}

PieceWriter::~PieceWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void PieceWriter::begin(Sink sink) {
  std::lock_guard<std::mutex> lock(mu_);
  sink_ = std::move(sink);
  failed_.store(false, std::memory_order_release);
}

bool PieceWriter::push(std::string_view text, std::int32_t token, const PieceLogprobs* logprobs) {
  std::unique_lock<std::mutex> lock(mu_);
  space_.wait(lock, [&] { return count_ < kCapacity || failed(); });
  if (failed()) return false;
  Slot& slot = slots_[(head_ + count_) % kCapacity];
  slot.text.assign(text.data(), text.size());
  slot.token = token;
  slot.tokenizer = logprobs != nullptr ? &logprobs->tokenizer : nullptr;
  if (logprobs != nullptr) slot.logprobs = logprobs->values;
  // The writer sleeps only on an empty queue.
  if (++count_ == 1) work_.notify_one();
  return true;
}

bool PieceWriter::has_room(std::size_t pieces) {
  std::lock_guard<std::mutex> lock(mu_);
  return kCapacity - count_ >= pieces || failed();
}

bool PieceWriter::finish() {
  std::unique_lock<std::mutex> lock(mu_);
  space_.wait(lock, [&] { return count_ == 0; });
  sink_ = nullptr;
  return !failed();
}

void PieceWriter::run() {
  pthread_setname_np(pthread_self(), "hearth-writer");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [&] { return stop_ || count_ > 0; });
    if (count_ == 0) return;  // stop_, and nothing left to write
    const Slot& slot = slots_[head_];
    lock.unlock();
    const bool ok = slot.tokenizer == nullptr ? sink_(slot.text, slot.token, nullptr) : [&] {
      const PieceLogprobs logprobs{slot.logprobs, *slot.tokenizer};
      return sink_(slot.text, slot.token, &logprobs);
    }();
    lock.lock();
    head_ = (head_ + 1) % kCapacity;
    --count_;
    if (!ok) {
      failed_.store(true, std::memory_order_release);
      count_ = 0;  // drop what is queued: the stream is gone
    }
    space_.notify_one();
  }
}

PieceWriterPool::Borrowed PieceWriterPool::take() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<PieceWriter> w = std::move(idle_.back());
      idle_.pop_back();
      return Borrowed(this, std::move(w));
    }
    ++made_;
  }
  return Borrowed(this, std::make_unique<PieceWriter>());
}

std::size_t PieceWriterPool::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return made_;
}

void PieceWriterPool::give_back(std::unique_ptr<PieceWriter> writer) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(writer));
}

}  // namespace hearth::server
