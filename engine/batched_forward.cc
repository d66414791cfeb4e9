#include "engine/batched_forward.h"

#include <algorithm>
#include <cstdlib>

#include "base/status_macros.h"
#include "base/str_cat.h"
#include "memory/thread_temp_allocator.h"

namespace hearth::engine {
namespace {

constexpr std::size_t kAlign = 64;
std::size_t round_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

BatchedForward::~BatchedForward() = default;

absl::StatusOr<std::unique_ptr<BatchedForward>> BatchedForward::create(
    std::shared_ptr<const ModelWeights> weights, const BatchOptions& options) {
  if (weights == nullptr) return absl::InvalidArgumentError("BatchedForward: weights is null");
  if (options.max_tokens == 0 || options.max_tokens > 4096)
    return absl::InvalidArgumentError(
        str_cat("max_tokens = ", options.max_tokens, " is out of range [1, 4096]"));
  if (options.max_sequences == 0 || options.max_sequences > options.max_tokens)
    return absl::InvalidArgumentError(
        str_cat("max_sequences = ", options.max_sequences,
                " is out of range [1, max_tokens = ", options.max_tokens, "]"));
  std::unique_ptr<BatchedForward> b(new BatchedForward());
  b->weights_ = std::move(weights);
  b->options_ = options;
  b->options_.pool = kernels::pool_or_default(b->options_.pool);
  const ModelConfig& c = b->weights_->config();
  const std::size_t rows = options.max_tokens;
  b->planned_bytes_ = ActivationBuffers::bytes_for(c, rows, kAlign) +
                      round_up(rows * sizeof(std::int32_t)) +
                      round_up(options.max_sequences * c.n_vocab * sizeof(float));
  const std::size_t capacity = round_up(b->planned_bytes_ + kAlign);
  auto* mem = static_cast<std::uint8_t*>(std::aligned_alloc(kAlign, capacity));
  if (mem == nullptr)
    return absl::ResourceExhaustedError(
        str_cat("cannot allocate ", capacity, " bytes of planned memory for batched steps"));
  b->buffer_ = {mem, [](std::uint8_t* p) { std::free(p); }};
  b->arena_ = std::make_unique<ArenaAllocator>(mem, capacity);
  b->planned_ = std::make_unique<StatsAllocator>(*b->arena_);
  absl::StatusOr<ActivationBuffers> buffers =
      ActivationBuffers::carve(c, rows, *b->planned_, kAlign);
  if (!buffers.ok()) return buffers.status();
  b->buffers_ = *buffers;
  b->tokens_ = b->planned_->allocate_array<std::int32_t>(rows, kAlign);
  b->logits_ = b->planned_->allocate_array<float>(options.max_sequences * c.n_vocab, kAlign);
  if (b->tokens_ == nullptr || b->logits_ == nullptr)
    return absl::ResourceExhaustedError("planned memory exhausted laying out the step's tokens");
  b->sequences_.resize(options.max_sequences);
  b->logit_rows_.resize(options.max_sequences);
  return b;
}

absl::Status BatchedForward::check(std::span<const StepInput> inputs) const {
  if (inputs.empty() || inputs.size() > options_.max_sequences)
    return absl::InvalidArgumentError(
        str_cat("step: ", inputs.size(), " sequences; a step takes 1 to ", options_.max_sequences));
  std::size_t total = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const StepInput& in = inputs[i];
    if (in.instance == nullptr || &in.instance->weights() != weights_.get())
      return absl::InvalidArgumentError(
          str_cat("step: input ", i, " is not an instance of this model"));
    if (in.tokens.empty())
      return absl::InvalidArgumentError(str_cat("step: input ", i, " has no tokens"));
    const std::size_t context = in.instance->context_length();
    if (in.start_pos > context || in.tokens.size() > context - in.start_pos)
      return absl::OutOfRangeError(str_cat("step: input ", i, ": positions ", in.start_pos, "..",
                                           in.start_pos + in.tokens.size() - 1,
                                           " exceed the context length ",
                                           in.instance->context_length()));
    for (std::size_t j = 0; j < i; ++j)
      if (inputs[j].instance == in.instance)
        return absl::InvalidArgumentError(
            str_cat("step: inputs ", j, " and ", i, " are the same instance"));
    total += in.tokens.size();
  }
  if (total > options_.max_tokens)
    return absl::InvalidArgumentError(
        str_cat("step: ", total, " tokens; a step takes at most ", options_.max_tokens));
  return absl::OkStatus();
}

absl::StatusOr<std::span<const float>> BatchedForward::step(std::span<const StepInput> inputs) {
  HEARTH_RETURN_IF_ERROR(check(inputs));
  std::size_t rows = 0, wanted = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const StepInput& in = inputs[i];
    std::copy(in.tokens.begin(), in.tokens.end(), tokens_ + rows);
    sequences_[i] = SequenceRows{rows, in.tokens.size(), in.start_pos, in.instance->kv_cache()};
    rows += in.tokens.size();
    if (in.want_logits) logit_rows_[wanted++] = rows - 1;
  }
  MemoryAllocator& scratch = thread_temp_allocator();
  kernels::ThreadPool* pool = options_.pool;
  HEARTH_RETURN_IF_ERROR(run_layers(*weights_, buffers_, {tokens_, rows},
                                    {sequences_.data(), inputs.size()}, scratch, pool));
  if (wanted > 0)
    HEARTH_RETURN_IF_ERROR(
        project_logits(*weights_, buffers_, {logit_rows_.data(), wanted}, logits_, scratch, pool));
  return std::span<const float>(logits_, wanted * weights_->config().n_vocab);
}

}  // namespace hearth::engine
