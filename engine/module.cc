#include "engine/module.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "memory/thread_temp_allocator.h"
#include "spdlog/spdlog.h"

namespace hearth::engine {
namespace {

constexpr std::size_t kAlign = 64;

std::size_t round_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

std::vector<std::string> ModuleMemoryReport::lines() const {
  return {
      format_usage_line("weights_mapped", weights_mapped_bytes, 0),
      format_usage_line("weights_packed", weights_packed_bytes, 0),
      format_usage_line("planned_activations", planned_bytes, 0),
      format_usage_line("kv_cache", kv_cache_bytes, 0),
      format_usage_line("planned_allocator_used", arena_used_bytes, arena_capacity_bytes),
      format_usage_line("peak_temp_allocator", peak_temp_bytes, 0),
  };
}

Module::~Module() = default;

absl::StatusOr<std::unique_ptr<Module>> Module::load(const std::string& path,
                                                     const ModuleOptions& options,
                                                     MemoryAllocator* planned,
                                                     MemoryAllocator* temp) {
  HEARTH_ASSIGN_OR_RETURN(auto file, GgufFile::open(path));
  return load(std::shared_ptr<const GgufFile>(std::move(file)), options, planned, temp);
}

absl::StatusOr<std::unique_ptr<Module>> Module::load(std::shared_ptr<const GgufFile> file,
                                                     const ModuleOptions& options,
                                                     MemoryAllocator* planned,
                                                     MemoryAllocator* temp) {
  LoadOptions load_options = options.load;  // packed on the instance's kernel threads by default
  if (load_options.pool == nullptr) load_options.pool = kernels::pool_or_default(options.pool);
  HEARTH_ASSIGN_OR_RETURN(auto weights, ModelWeights::load(std::move(file), load_options));
  return load(std::move(weights), options, planned, temp);
}

absl::StatusOr<std::unique_ptr<Module>> Module::load(std::shared_ptr<const ModelWeights> weights,
                                                     const ModuleOptions& options,
                                                     MemoryAllocator* planned,
                                                     MemoryAllocator* temp) {
  if (weights == nullptr) return absl::InvalidArgumentError("Module::load: weights is null");
  if (options.max_chunk == 0 || options.max_chunk > 4096) {
    return absl::InvalidArgumentError(
        str_cat("max_chunk = ", options.max_chunk, " is out of range [1, 4096]"));
  }
  std::unique_ptr<Module> m(new Module());
  m->weights_ = std::move(weights);
  m->options_ = options;
  m->temp_ = temp;
  m->pool_ = kernels::pool_or_default(options.pool);
  const ModelConfig& c = m->config();
  m->context_ = options.context_length != 0 ? options.context_length
                                            : std::min<std::size_t>(c.n_ctx_train, 4096);
  // A context of 1 holds a prompt token but leaves no room to generate.
  if (m->context_ < 2 || m->context_ > (std::size_t{1} << 20)) {
    return absl::InvalidArgumentError(
        str_cat("context_length = ", m->context_, " is out of range [2, 1048576]"));
  }
  HEARTH_RETURN_IF_ERROR(m->plan(planned));
  spdlog::info("loaded instance of '{}' ({}, {} layers, {} weights, context {}, {} KV cache):",
               c.name, c.arch_name, c.n_layer, m->weights_->quantization(), m->context_,
               kv_cache_type_name(m->options_.kv_cache));
  for (const std::string& line : m->memory_report().lines()) spdlog::info("  {}", line);
  return m;
}

absl::Status Module::plan(MemoryAllocator* planned) {
  const ModelConfig& c = config();
  planned_bytes_ = ActivationBuffers::bytes_for(c, options_.max_chunk, kAlign) +
                   round_up(c.n_vocab * sizeof(float));
  const kernels::KvLayout layout{c.n_head_kv, c.head_dim, context_};
  const std::size_t per_layer = options_.kv_cache == KvCacheType::kInt8
                                    ? kernels::quantized_kv_bytes(layout)
                                    : kernels::float_kv_bytes(layout);
  if (per_layer == 0)
    return absl::InvalidArgumentError(str_cat("KV cache layout is invalid for context ", context_));
  kv_bytes_ = per_layer * c.n_layer;

  if (planned == nullptr) {
    const std::size_t capacity = planned_bytes_ + kv_bytes_ + kAlign * (c.n_layer + 1);
    auto* buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kAlign, round_up(capacity)));
    if (buffer == nullptr) {
      return absl::ResourceExhaustedError(str_cat(
          "cannot allocate ", capacity, " bytes of planned memory (activations + KV cache)"));
    }
    own_buffer_ = {buffer, [](std::uint8_t* p) { std::free(p); }};
    own_arena_ = std::make_unique<ArenaAllocator>(buffer, round_up(capacity));
    planned = own_arena_.get();
  }
  planned_stats_ = std::make_unique<StatsAllocator>(*planned);
  absl::StatusOr<ActivationBuffers> buffers =
      ActivationBuffers::carve(c, options_.max_chunk, *planned_stats_, kAlign);
  if (!buffers.ok()) return buffers.status();
  buffers_ = *buffers;
  every_row_.resize(options_.max_chunk);
  std::iota(every_row_.begin(), every_row_.end(), std::size_t{0});
  logits_ = planned_stats_->allocate_array<float>(c.n_vocab, kAlign);
  if (logits_ == nullptr)
    return absl::ResourceExhaustedError(
        str_cat("planned memory exhausted while laying out activation buffer 'logits' (",
                c.n_vocab * sizeof(float), " bytes)"));
  for (std::size_t l = 0; l < c.n_layer; ++l) {
    void* mem = planned_stats_->allocate(per_layer, kAlign);
    if (mem == nullptr) {
      return absl::ResourceExhaustedError(str_cat(
          "planned memory exhausted at the KV cache of layer ", l, " (", per_layer, " bytes)"));
    }
    if (options_.kv_cache == KvCacheType::kInt8) {
      kv_int8_.push_back(kernels::quantized_kv_view(layout, mem));
    } else {
      kv_float_.push_back(kernels::float_kv_view(layout, mem));
    }
  }
  return absl::OkStatus();
}

MemoryAllocator& Module::temp_allocator() {
  return temp_ != nullptr ? *temp_ : thread_temp_allocator();
}

absl::StatusOr<std::span<const float>> Module::forward(std::span<const std::int32_t> tokens,
                                                       std::size_t start_pos, float* all_logits) {
  const ModelConfig& c = config();
  const std::size_t n = tokens.size();
  if (n == 0 || n > options_.max_chunk) {
    return absl::InvalidArgumentError(
        str_cat("forward: ", n, " tokens; one forward takes 1 to ", options_.max_chunk));
  }
  if (start_pos > context_ || n > context_ - start_pos) {
    return absl::OutOfRangeError(str_cat("forward: positions ", start_pos, "..", start_pos + n - 1,
                                         " exceed the context length ", context_));
  }
  MemoryAllocator& scratch = temp_allocator();
  const SequenceRows sequence{0, n, start_pos, kv_cache()};
  HEARTH_RETURN_IF_ERROR(run_layers(*weights_, buffers_, tokens, {&sequence, 1}, scratch, pool_));
  if (all_logits != nullptr) {
    HEARTH_RETURN_IF_ERROR(
        project_logits(*weights_, buffers_, {every_row_.data(), n}, all_logits, scratch, pool_));
    std::copy(all_logits + (n - 1) * c.n_vocab, all_logits + n * c.n_vocab, logits_);
  } else {
    const std::size_t last = n - 1;
    HEARTH_RETURN_IF_ERROR(
        project_logits(*weights_, buffers_, {&last, 1}, logits_, scratch, pool_));
  }
  if (temp_ == nullptr) {
    const CachingAllocatorStats st = thread_temp_allocator().stats();
    peak_temp_ = std::max<std::size_t>({peak_temp_, st.in_use_bytes, st.last_reset_peak_bytes});
  }
  return std::span<const float>(logits_, c.n_vocab);
}

absl::Status Module::warm_up() {
  const std::int32_t bos = 1 < config().n_vocab ? 1 : 0;
  // A prompt chunk and one decode step, inside even the smallest context.
  std::vector<std::int32_t> prompt(std::min<std::size_t>({options_.max_chunk, 8, context_ - 1}),
                                   bos);
  auto r = forward(prompt, 0);
  if (!r.ok()) return r.status();
  r = forward(std::span<const std::int32_t>(prompt.data(), 1), prompt.size());
  if (temp_ == nullptr) thread_temp_allocator().reset();
  if (r.ok())
    spdlog::debug("warmed up: {}", format_usage_line("peak_temp_allocator", peak_temp_, 0));
  return r.status();
}

ModuleMemoryReport Module::memory_report() const {
  ModuleMemoryReport r;
  r.weights_mapped_bytes = weights_->mapped_bytes();
  r.weights_packed_bytes = weights_->packed_bytes();
  r.planned_bytes = planned_bytes_;
  r.kv_cache_bytes = kv_bytes_;
  r.arena_capacity_bytes = own_arena_ ? own_arena_->capacity() : 0;
  r.arena_used_bytes = planned_stats_ ? planned_stats_->stats().in_use_bytes : 0;
  r.peak_temp_bytes = peak_temp_;
  return r;
}

absl::Status Module::copy_kv_from(const Module& src, std::size_t begin, std::size_t end) {
  if (src.weights_ != weights_ || src.context_ != context_ ||
      src.options_.kv_cache != options_.kv_cache)
    return absl::InvalidArgumentError(
        "copy_kv_from: the instances differ in model, context or KV cache type");
  for (std::size_t l = 0; l < kv_int8_.size(); ++l)
    HEARTH_RETURN_IF_ERROR(kernels::kv_copy(kv_int8_[l], src.kv_int8_[l], begin, end));
  for (std::size_t l = 0; l < kv_float_.size(); ++l)
    HEARTH_RETURN_IF_ERROR(kernels::kv_copy(kv_float_[l], src.kv_float_[l], begin, end));
  return absl::OkStatus();
}

}  // namespace hearth::engine
