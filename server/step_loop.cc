#include "server/step_loop.h"

#include <algorithm>

#include "base/status_macros.h"
#include "base/str_cat.h"
#include "memory/thread_temp_allocator.h"

namespace hearth::server {
namespace {

// Pieces one step can hand a sink: the sampled token's, and the text held
// back until the end when that token finishes the sequence.
constexpr std::size_t kPiecesPerStep = 2;
// How long the loop waits when every running sequence's sink is full before
// it looks again (it also wakes when a new sequence arrives). A stalled
// client's own cancellation and deadline are noticed within this.
constexpr std::chrono::milliseconds kStalledPoll{1};

}  // namespace

// One sequence handed to the loop. Lives on its run() caller's stack; the
// loop stops touching it once it sets `done` (under mu_).
struct StepLoop::Active {
  engine::Module* instance = nullptr;
  std::size_t instance_index = 0;
  bool reuse_prefix = false;
  engine::Sequence* sequence = nullptr;
  PieceSink* sink = nullptr;
  const CallContext* call = nullptr;
  const std::atomic<bool>* aborted = nullptr;
  engine::TokenCallback emit;
  Clock::time_point handed_over{};
  Clock::time_point first_token{};
  bool sampled = false;
  RunResult result;
  absl::Status status;
  bool done = false;  // guarded by mu_
};

absl::StatusOr<std::unique_ptr<StepLoop>> StepLoop::start(
    std::string model, std::shared_ptr<const engine::ModelWeights> weights,
    const StepLoopOptions& options, kernels::ThreadPool* pool, StepObserver* observer,
    KvPrefixIndex* prefixes) {
  if (options.step_tokens == 0) return absl::InvalidArgumentError("step_tokens must be at least 1");
  if (options.max_sequences == 0)
    return absl::InvalidArgumentError("a step loop needs at least one instance");
  std::unique_ptr<StepLoop> loop(new StepLoop());
  loop->model_ = std::move(model);
  loop->options_ = options;
  loop->observer_ = observer;
  loop->prefixes_ = prefixes;
  // The largest step: every sequence decoding plus a full budget of prompt
  // rows (a prompt always gets at least one row).
  engine::BatchOptions batch;
  batch.max_sequences = options.max_sequences;
  batch.max_tokens = options.step_tokens + options.max_sequences;
  batch.pool = pool;
  HEARTH_ASSIGN_OR_RETURN(auto forward, engine::BatchedForward::create(std::move(weights), batch));
  loop->forward_ = std::move(forward);
  loop->inbox_.reserve(options.max_sequences);
  loop->active_.reserve(options.max_sequences);
  loop->inputs_.reserve(options.max_sequences);
  loop->stepped_.reserve(options.max_sequences);
  loop->arrived_.reserve(options.max_sequences);
  loop->prompting_.reserve(options.max_sequences);
  loop->thread_ = std::thread([l = loop.get()] { l->loop(); });
  return loop;
}

StepLoop::~StepLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<RunResult> StepLoop::run(engine::Module& instance, std::size_t instance_index,
                                        bool reuse_prefix, engine::Sequence& sequence,
                                        PieceSink& sink, const CallContext& call,
                                        const std::atomic<bool>& aborted) {
  Active a;
  a.instance = &instance;
  a.instance_index = instance_index;
  a.reuse_prefix = reuse_prefix;
  a.sequence = &sequence;
  a.sink = &sink;
  a.call = &call;
  a.aborted = &aborted;
  a.emit = [&sink, &sequence](std::string_view text, std::int32_t token) {
    const engine::TokenLogprobs* values = token >= 0 ? sequence.logprobs() : nullptr;
    if (values == nullptr) return sink.piece(text, token, nullptr);
    const PieceLogprobs logprobs{*values, sequence.tokenizer()};
    sink.piece(text, token, &logprobs);
  };
  a.handed_over = Clock::now();
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_)
      return absl::UnavailableError(str_cat("model '", model_, "': the step loop has stopped"));
    if (running_.load(std::memory_order_relaxed) >= options_.max_sequences)
      return absl::InternalError(str_cat("model '", model_, "': more sequences than instances"));
    running_.fetch_add(1, std::memory_order_relaxed);
    inbox_.push_back(&a);
    wake_.notify_one();
    done_.wait(lock, [&] { return a.done; });
  }
  if (!a.status.ok()) return a.status;
  return a.result;
}

void StepLoop::publish_kv_in_use() {
  std::size_t kv = 0;
  for (const Active* a : active_)
    if (a != nullptr) kv += a->sequence->position();
  kv_in_use_.store(kv, std::memory_order_relaxed);
}

void StepLoop::retire(Active& a, RunResult::Ended ended, absl::Status status) {
  // The gauge without `a` before its caller wakes, whatever the loop does
  // next (it may run no step for a while: the sequences left may all wait
  // for their clients).
  publish_kv_in_use();
  // No-op when it finished by itself. Else the text it held back goes out:
  // one piece, for which its sink still has room (a step needs room for
  // kPiecesPerStep and hands over one piece unless it ends the sequence),
  // so the loop does not wait for a stalled client here.
  a.sequence->cancel(a.emit);
  const Clock::time_point now = Clock::now();
  a.result.ended = ended;
  if (a.sampled) {
    a.result.prefill_s = engine::seconds_between(a.handed_over, a.first_token);
    a.result.decode_s = engine::seconds_between(a.first_token, now);
  } else {
    a.result.prefill_s = engine::seconds_between(a.handed_over, now);
  }
  running_.fetch_sub(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    a.status = std::move(status);
    a.done = true;  // from here on `a` belongs to its run() caller again
  }
  done_.notify_all();
}

void StepLoop::take_in(std::vector<Active*>& arrived) {
  for (Active* a : arrived) {
    if (prefixes_ != nullptr) {
      absl::StatusOr<std::size_t> cached =
          prefixes_->prepare(a->instance_index, a->sequence->prompt_ids(), a->reuse_prefix);
      if (!cached.ok()) {
        retire(*a, RunResult::Ended::kFinished,
               absl::Status(cached.status().code(),
                            str_cat("model '", model_, "': ", cached.status().message())));
        continue;
      }
      a->result.cached_tokens = a->sequence->skip_cached_prefix(*cached);
    }
    active_.push_back(a);
  }
  arrived.clear();
}

std::size_t StepLoop::add_chunk(Active& a, std::size_t budget) {
  const std::span<const std::int32_t> chunk = a.sequence->next_tokens(budget);
  inputs_.push_back(
      {a.instance, chunk, a.sequence->position(), a.sequence->wants_logits(chunk.size())});
  stepped_.push_back(&a);
  return chunk.size();
}

std::size_t StepLoop::schedule_prompts(std::size_t decode_rows) {
  prompting_.clear();
  for (Active* a : active_)
    if (a->sequence->prefilling() && a->sink->has_room(kPiecesPerStep)) prompting_.push_back(a);
  if (prompting_.empty()) return 0;
  Active* const oldest = prompting_.front();  // active_ is in arrival order
  // By prompt tokens left, fewest first; ties stay oldest first (an
  // insertion sort: stable, and no heap allocation in the loop).
  auto left_of = [](const Active* a) { return a->sequence->prompt_tokens_left(); };
  for (std::size_t i = 1; i < prompting_.size(); ++i)
    for (std::size_t j = i; j > 0 && left_of(prompting_[j - 1]) > left_of(prompting_[j]); --j)
      std::swap(prompting_[j - 1], prompting_[j]);
  // The step's prompt rows: what the decode rows leave of the budget, but at
  // least half the budget while the oldest prompt has that much left, so
  // prefill goes on while decode rows fill the budget.
  const std::size_t budget_left =
      options_.step_tokens > decode_rows ? options_.step_tokens - decode_rows : 0;
  const std::size_t half = std::max<std::size_t>(options_.step_tokens / 2, 1);
  const std::size_t prompt_rows = std::max(budget_left, std::min(left_of(oldest), half));
  // The oldest prompt is sure of half of them, so short prompts arriving
  // one after another cannot stall it; the rest go fewest tokens left first
  // (the oldest among them), so a short prompt is not queued behind a long
  // one's whole prefill.
  const std::size_t reserved = std::min(left_of(oldest), prompt_rows - prompt_rows / 2);
  std::size_t spare = prompt_rows - reserved;
  std::size_t rows = 0;
  for (Active* a : prompting_) {
    const std::size_t own = a == oldest ? reserved : 0;
    const std::size_t take = std::min(left_of(a) - own, spare);
    spare -= take;
    if (own + take > 0) rows += add_chunk(*a, own + take);
  }
  return rows;
}

void StepLoop::loop() {
  const std::size_t n_vocab = forward_->weights().config().n_vocab;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || !inbox_.empty() || !active_.empty(); });
      if (stop_ && inbox_.empty() && active_.empty()) return;
      arrived_.assign(inbox_.begin(), inbox_.end());
      inbox_.clear();
    }
    take_in(arrived_);
    // 1. Calls that are over leave before the step.
    const Clock::time_point now = Clock::now();
    for (Active*& a : active_) {
      RunResult::Ended ended;
      if (a->aborted->load(std::memory_order_acquire)) {
        ended = RunResult::Ended::kAborted;
      } else if (now >= a->call->deadline) {
        ended = RunResult::Ended::kDeadline;
      } else if (a->sink->failed() || (a->call->cancelled && a->call->cancelled())) {
        ended = RunResult::Ended::kCancelled;
      } else {
        continue;
      }
      Active& leaving = *a;
      a = nullptr;  // out of the active set before retire() counts it
      retire(leaving, ended, absl::OkStatus());
    }
    std::erase(active_, nullptr);
    if (active_.empty()) continue;

    // 2. The step's rows: decode tokens first, then prompt chunks in what
    // is left of the budget (schedule_prompts).
    inputs_.clear();
    stepped_.clear();
    std::size_t rows = 0;
    for (Active* a : active_) {
      if (a->sequence->prefilling() || !a->sink->has_room(kPiecesPerStep)) continue;
      rows += add_chunk(*a, 1);  // the token sampled last (wants_logits: always)
    }
    rows += schedule_prompts(rows);
    if (inputs_.empty()) {  // every running sequence waits for its client
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, kStalledPoll, [&] { return stop_ || !inbox_.empty(); });
      continue;
    }

    // 3. One forward for every row, then each sequence samples its own.
    const Clock::time_point t0 = Clock::now();
    {
      TempAllocatorLease temp;  // this step's scratch, reset when it ends
      const CachingAllocatorStats before = temp.allocator().stats();
      temp.allocator().begin_span();  // the forward resets at every layer
      absl::StatusOr<std::span<const float>> logits = forward_->step(inputs_);
      if (logits.ok() && prefixes_ != nullptr)
        for (std::size_t i = 0; i < stepped_.size(); ++i)
          prefixes_->wrote(stepped_[i]->instance_index, inputs_[i].start_pos, inputs_[i].tokens);
      std::size_t row = 0;
      for (std::size_t i = 0; i < stepped_.size(); ++i) {
        Active& a = *stepped_[i];
        absl::Status s = logits.status();
        if (s.ok()) {
          const float* l = inputs_[i].want_logits ? logits->data() + n_vocab * row++ : nullptr;
          s = a.sequence->advance(inputs_[i].tokens.size(), l, temp.allocator(), a.emit);
          if (l != nullptr && !a.sampled) {
            a.sampled = true;
            a.first_token = Clock::now();
            a.result.time_to_first_token_s = engine::seconds_between(a.handed_over, a.first_token);
          }
        }
        if (!s.ok()) {  // this sequence ends with the error; the others go on
          std::replace(active_.begin(), active_.end(), &a, static_cast<Active*>(nullptr));
          stepped_[i] = nullptr;
          retire(a, RunResult::Ended::kFinished,
                 absl::Status(s.code(), str_cat("model '", model_, "': ", s.message())));
        }
      }
      temp.allocator().reset();
      const CachingAllocatorStats after = temp.allocator().stats();
      for (Active* a : stepped_) {
        if (a == nullptr) continue;
        a->result.temp_lookups += after.lookups - before.lookups;
        a->result.temp_hits += after.hits - before.hits;
        a->result.temp_peak_bytes =
            std::max<std::uint64_t>(a->result.temp_peak_bytes, after.span_peak_bytes);
      }
    }
    if (observer_ != nullptr)
      observer_->on_step(model_, inputs_.size(), rows, engine::seconds_between(t0, Clock::now()));

    // 4. Finished sequences go back to their callers.
    for (Active*& a : active_) {
      if (a == nullptr || !a->sequence->finished()) continue;  // (nullptr: ended on an error)
      Active& leaving = *a;
      a = nullptr;
      retire(leaving, RunResult::Ended::kFinished, absl::OkStatus());
    }
    std::erase(active_, nullptr);
    publish_kv_in_use();
  }
}

}  // namespace hearth::server
