#include "server/model_pool.h"

#include <algorithm>

#include "base/str_cat.h"
#include "chat/chat_prompt.h"
#include "engine/gguf.h"
#include "engine/synthetic_model.h"
#include "kernels/thread_pool.h"
#include "memory/thread_temp_allocator.h"
#include "spdlog/spdlog.h"

namespace hearth::server {
namespace {

// The file's second template, for requests with tools
// (tokenizer.chat_template.tool_use), or null: none, or one that does not
// parse (logged; those requests then use the first template).
std::unique_ptr<const chat::ChatPrompt> load_tool_use_prompt(const engine::GgufFile& file,
                                                             const std::string& bos,
                                                             const std::string& eos) {
  constexpr std::string_view kToolUse = "tokenizer.chat_template.tool_use";
  absl::StatusOr<std::string_view> text = file.get_string(kToolUse);
  if (!text.ok()) return nullptr;
  absl::StatusOr<chat::ChatPrompt> p =
      chat::ChatPrompt::create(*text, std::string(kToolUse), bos, eos);
  if (p.ok()) return std::make_unique<const chat::ChatPrompt>(std::move(*p));
  spdlog::warn("{}: requests with tools use tokenizer.chat_template",
               std::string(p.status().message()));
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelPool>> ModelPool::load(const ModelSpec& spec,
                                                           kernels::ThreadPool* kernel_pool,
                                                           StepObserver* steps) {
  std::unique_ptr<ModelPool> pool(new ModelPool(spec));
  auto fail = [&](const absl::Status& s) {
    return absl::Status(s.code(),
                        str_cat("model '", spec.name, "' (", spec.path, "): ", s.message()));
  };
  std::shared_ptr<const engine::GgufFile> file;
  if (spec.is_demo()) {
    absl::StatusOr<std::string> bytes = engine::synthesize_model(engine::demo_model_spec());
    if (!bytes.ok()) return fail(bytes.status());
    auto parsed = engine::GgufFile::parse(std::move(*bytes), std::string(kDemoSource));
    if (!parsed.ok()) return fail(parsed.status());
    file = std::move(*parsed);
  } else {
    auto opened = engine::GgufFile::open(spec.path);
    if (!opened.ok()) return fail(opened.status());
    file = std::move(*opened);
  }
  for (const engine::GgufTensorInfo& t : file->tensors()) pool->parameters_ += t.n_elements;

  engine::LoadOptions load_options;
  // The weights are repacked on the kernel threads.
  load_options.pool = kernels::pool_or_default(kernel_pool);
  auto weights = engine::ModelWeights::load(file, load_options);
  if (!weights.ok()) return fail(weights.status());
  pool->weights_ = std::move(*weights);
  auto tokenizer = engine::Tokenizer::from_gguf(*file);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  pool->tokenizer_ = std::move(*tokenizer);
  if (absl::Status s = pool->load_chat_prompt(*file); !s.ok()) return fail(s);

  engine::ModuleOptions options;
  options.context_length = spec.context;
  options.kv_cache = spec.kv_cache;
  options.pool = kernel_pool;
  TempAllocatorLease temp;  // warm-up scratch, reset when loading ends
  for (std::size_t i = 0; i < spec.instances; ++i) {
    auto module = engine::Module::load(pool->weights_, options);
    if (!module.ok()) return fail(module.status());
    // A short prompt and a decode token touch the instance's buffers and the
    // kernels' code paths before the first request pays for it.
    if (absl::Status s = (*module)->warm_up(); !s.ok()) return fail(s);
    temp.allocator().reset();
    pool->instances_.push_back(std::move(*module));
    pool->free_.push_back(spec.instances - 1 - i);  // hand out instance 0 first
  }
  pool->context_ = pool->instances_.front()->context_length();
  pool->max_chunk_ = options.max_chunk;
  pool->instance_memory_ = pool->instances_.front()->memory_report();
  StepLoopOptions loop_options;
  loop_options.step_tokens = spec.step_tokens;
  loop_options.max_sequences = spec.instances;
  std::vector<engine::Module*> modules;
  for (const auto& m : pool->instances_) modules.push_back(m.get());
  pool->prefixes_ = std::make_unique<KvPrefixIndex>(std::move(modules), pool->context_);
  auto loop = StepLoop::start(spec.name, pool->weights_, loop_options, kernel_pool, steps,
                              pool->prefixes_.get());
  if (!loop.ok()) return fail(loop.status());
  pool->step_loop_ = std::move(*loop);
  return pool;
}

ModelPool::ModelPool(ModelSpec spec) : spec_(std::move(spec)) {}

ModelPool::~ModelPool() = default;

absl::Status ModelPool::load_chat_prompt(const engine::GgufFile& file) {
  const engine::Tokenizer& t = *tokenizer_;
  const std::string bos(t.bos() >= 0 ? t.piece(t.bos()) : std::string_view());
  const std::string eos(t.eos() >= 0 ? t.piece(t.eos()) : std::string_view());
  absl::StatusOr<std::string_view> in_file = file.get_string("tokenizer.chat_template");
  absl::StatusOr<chat::ChatPrompt> p = chat::ChatPrompt::load(
      spec_.chat_template, in_file.ok() ? std::optional<std::string_view>(*in_file) : std::nullopt,
      bos, eos);
  if (p.ok()) {
    chat_ = std::make_unique<const chat::ChatPrompt>(std::move(*p));
    if (spec_.chat_template.empty()) chat_tools_ = load_tool_use_prompt(file, bos, eos);
    return absl::OkStatus();
  }
  // A template the operator gave must work; the file's own only matters to Chat.
  if (!spec_.chat_template.empty()) return p.status();
  chat_unavailable_ = absl::FailedPreconditionError(
      str_cat("model '", spec_.name, "': ", p.status().message(),
              in_file.ok() ? "" : " (the server's --chat-template gives one)"));
  if (in_file.ok()) spdlog::warn("{}: Chat will be refused", std::string(p.status().message()));
  return absl::OkStatus();
}

absl::StatusOr<const chat::ChatPrompt*> ModelPool::chat_prompt(bool with_tools) const {
  if (chat_ == nullptr) return chat_unavailable_;
  return with_tools && chat_tools_ != nullptr ? chat_tools_.get() : chat_.get();
}

ModelPool::Lease::~Lease() {
  if (pool_ != nullptr) pool_->release(index_);
}

engine::Module& ModelPool::Lease::module() const { return *pool_->instances_[index_]; }

std::size_t ModelPool::take_free(std::span<const std::int32_t> prompt) {
  const std::size_t index = prompt.empty() ? free_.back() : prefixes_->choose(free_, prompt);
  free_.erase(std::find(free_.begin(), free_.end(), index));
  return index;
}

absl::StatusOr<ModelPool::Lease> ModelPool::acquire(Clock::time_point deadline,
                                                    const std::function<bool()>& cancelled,
                                                    std::span<const std::int32_t> prompt,
                                                    bool* queued) {
  if (queued != nullptr) *queued = false;
  std::unique_lock<std::mutex> lock(mu_);
  if (draining_)
    return absl::UnavailableError(
        str_cat("model '", spec_.name, "' is not accepting requests: the server is shutting down"));
  if (Clock::now() >= deadline)
    return absl::DeadlineExceededError(
        str_cat("deadline exceeded before an instance of model '", spec_.name, "' was asked for"));
  if (waiters_.empty() && !free_.empty()) return Lease(this, take_free(prompt));
  // Waiters that already timed out do not hold a place against a new
  // request (they leave within one poll interval).
  if (const std::size_t live = live_waiters(Clock::now()); live >= spec_.queue)
    return absl::UnavailableError(str_cat(
        "model '", spec_.name, "' is at capacity: ", instances_.size(), " instances busy and ",
        live, " requests waiting (queue limit ", spec_.queue, "); retry later"));
  const std::uint64_t ticket = next_ticket_++;
  waiters_.push_back(Waiter{ticket, deadline});
  if (queued != nullptr) *queued = true;
  auto leave = [&] {
    waiters_.erase(std::find_if(waiters_.begin(), waiters_.end(),
                                [&](const Waiter& w) { return w.ticket == ticket; }));
    changed_.notify_all();  // the next waiter may now be at the front
  };
  for (;;) {
    if (draining_) {
      leave();
      return absl::UnavailableError(str_cat(
          "model '", spec_.name, "' is not accepting requests: the server is shutting down"));
    }
    // The deadline before the instance: one freed after it passed (seen
    // after a cancellation check, say) does not admit the request.
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      leave();
      return absl::DeadlineExceededError(
          str_cat("deadline exceeded while waiting for an instance of model '", spec_.name, "'"));
    }
    if (waiters_.front().ticket == ticket && !free_.empty()) {
      const std::size_t index = take_free(prompt);
      leave();
      return Lease(this, index);
    }
    if (cancelled) {  // our own client, asked without the lock held
      lock.unlock();
      const bool gone = cancelled();
      lock.lock();
      if (gone) {
        leave();
        return absl::CancelledError(
            str_cat("cancelled while waiting for an instance of model '", spec_.name, "'"));
      }
      // A notification may have come while the lock was released.
      if (draining_ || (waiters_.front().ticket == ticket && !free_.empty())) continue;
    }
    changed_.wait_until(lock, std::min(deadline, now + kCancelPollInterval));
  }
}

std::size_t ModelPool::live_waiters(Clock::time_point now) const {
  std::size_t live = 0;
  for (const Waiter& w : waiters_)
    if (w.deadline > now) ++live;
  return live;
}

void ModelPool::release(std::size_t index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(index);
  }
  changed_.notify_all();
}

void ModelPool::drain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
  }
  changed_.notify_all();
}

bool ModelPool::wait_idle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_until(lock, deadline, [&] { return free_.size() == instances_.size(); });
}

PoolCounters ModelPool::counters() const {
  PoolCounters n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n.instances = instances_.size();
    n.busy = instances_.size() - free_.size();
    n.queue_depth = waiters_.size();
    n.queue_capacity = spec_.queue;
  }
  n.running = step_loop_->running();
  n.kv_positions_used = step_loop_->kv_positions_in_use();
  n.kv_positions_total = instances_.size() * context_;
  return n;
}

}  // namespace hearth::server
