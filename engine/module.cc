#include "engine/module.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "engine/str_cat.h"
#include "kernels/block_ops.h"
#include "kernels/embedding.h"
#include "kernels/sdpa.h"
#include "memory/thread_temp_allocator.h"
#include "spdlog/spdlog.h"

namespace hearth::engine {
namespace {

constexpr std::size_t kAlign = 64;
// How much of its next range a worker prefetches while it waits in decode:
// a gap between regions lasts a few to tens of microseconds, at most a few
// hundred kilobytes of streaming; well inside a 1-2 MiB L2.
constexpr std::size_t kHintBytes = 256 << 10;

std::size_t round_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

#define HEARTH_RETURN_IF_ERROR(expr)                   \
  do {                                                 \
    if (absl::Status s_ = (expr); !s_.ok()) return s_; \
  } while (0)

}  // namespace

const char* kv_cache_type_name(KvCacheType t) { return t == KvCacheType::kInt8 ? "int8" : "float"; }

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
  auto file = GgufFile::open(path);
  if (!file.ok()) return file.status();
  return load(std::shared_ptr<const GgufFile>(std::move(*file)), options, planned, temp);
}

absl::StatusOr<std::unique_ptr<Module>> Module::load(std::shared_ptr<const GgufFile> file,
                                                     const ModuleOptions& options,
                                                     MemoryAllocator* planned,
                                                     MemoryAllocator* temp) {
  auto weights = ModelWeights::load(std::move(file), options.load);
  if (!weights.ok()) return weights.status();
  return load(std::move(*weights), options, planned, temp);
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
  m->pool_ = options.pool != nullptr ? options.pool : &kernels::default_thread_pool();
  const ModelConfig& c = m->config();
  m->context_ = options.context_length != 0 ? options.context_length
                                            : std::min<std::size_t>(c.n_ctx_train, 4096);
  if (m->context_ > (std::size_t{1} << 20)) {
    return absl::InvalidArgumentError(
        str_cat("context_length = ", m->context_, " is out of range [1, 1048576]"));
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
  const std::size_t n = options_.max_chunk;
  // Activation buffers, in floats.
  const std::size_t sizes[] = {n * c.n_embd,   n * c.n_embd,  n * c.q_dim(), n * c.kv_dim(),
                               n * c.kv_dim(), n * c.q_dim(), n * c.n_embd,  n * c.n_ff,
                               n * c.n_ff,     c.n_vocab};
  float** targets[] = {&x_, &xn_, &q_, &k_, &v_, &attn_, &tmp_, &gate_, &up_, &logits_};
  planned_bytes_ = 0;
  for (std::size_t s : sizes) planned_bytes_ += round_up(s * sizeof(float));
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
  const char* names[] = {"x", "xn", "q", "k", "v", "attn", "tmp", "gate", "up", "logits"};
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    *targets[i] = planned_stats_->allocate_array<float>(sizes[i], kAlign);
    if (*targets[i] == nullptr) {
      return absl::ResourceExhaustedError(
          str_cat("planned memory exhausted while laying out activation buffer '", names[i], "' (",
                  sizes[i] * 4, " bytes)"));
    }
  }
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
  if (start_pos + n > context_) {
    return absl::OutOfRangeError(str_cat("forward: positions ", start_pos, "..", start_pos + n - 1,
                                         " exceed the context length ", context_));
  }
  MemoryAllocator& scratch = temp_allocator();
  kernels::ThreadPool* pool = pool_;
  const ModelWeights& w = *weights_;
  const std::size_t d = c.n_embd;

  HEARTH_RETURN_IF_ERROR(kernels::embedding_lookup(w.embedding(), w.embedding_type(), c.n_vocab, d,
                                                   tokens.data(), n, x_, pool));

  kernels::RopeConfig rope;
  rope.style = c.rope_neox ? kernels::RopeStyle::kNeox : kernels::RopeStyle::kNormal;
  rope.rot_dim = c.rope_dim;
  rope.base = c.rope_base;
  rope.freq_scale = c.rope_freq_scale;
  rope.freq_factors = w.rope_freq_factors().empty() ? nullptr : w.rope_freq_factors().data();
  const float attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  // Decode streams every weight once per token; before each projection's
  // region, the pool's workers are told where the next projection starts
  // for them, so they fetch it while waiting for the caller.
  const bool hint = n == 1;
  const auto hint_next = [&](std::initializer_list<const kernels::Linear*> next) {
    if (hint)
      kernels::Linear::hint_decode(
          std::span<const kernels::Linear* const>(next.begin(), next.size()), pool, kHintBytes);
  };

  for (std::size_t l = 0; l < c.n_layer; ++l) {
    // A layer's scratch is dead once it ends (activations live in the arena):
    // recycling it bounds temp memory by one layer, not by the model's depth.
    scratch.reset();
    const LayerWeights& L = w.layers()[l];
    kernels::rms_norm(x_, L.attn_norm.data(), n, d, c.rms_eps, xn_, pool);
    const kernels::Linear* qkv[] = {&L.wq, &L.wk, &L.wv};
    float* const qkv_out[] = {q_, k_, v_};
    hint_next({&L.wo});
    HEARTH_RETURN_IF_ERROR(
        kernels::Linear::forward_same_input(qkv, xn_, n, qkv_out, scratch, pool));
    if (!L.bq.empty()) {
      kernels::add_rows_inplace(q_, L.bq.data(), n, c.q_dim(), pool);
      kernels::add_rows_inplace(k_, L.bk.data(), n, c.kv_dim(), pool);
      kernels::add_rows_inplace(v_, L.bv.data(), n, c.kv_dim(), pool);
    }
    kernels::rope(q_, n, c.n_head, c.head_dim, start_pos, rope, pool);
    kernels::rope(k_, n, c.n_head_kv, c.head_dim, start_pos, rope, pool);
    if (options_.kv_cache == KvCacheType::kInt8) {
      HEARTH_RETURN_IF_ERROR(kernels::kv_append(kv_int8_[l], start_pos, k_, v_, n));
      HEARTH_RETURN_IF_ERROR(
          kernels::sdpa(q_, n, start_pos, c.n_head, kv_int8_[l], attn_scale, attn_, scratch, pool));
    } else {
      HEARTH_RETURN_IF_ERROR(kernels::kv_append(kv_float_[l], start_pos, k_, v_, n));
      HEARTH_RETURN_IF_ERROR(kernels::sdpa(q_, n, start_pos, c.n_head, kv_float_[l], attn_scale,
                                           attn_, scratch, pool));
    }
    hint_next({&L.w_gate, &L.w_up});
    HEARTH_RETURN_IF_ERROR(L.wo.forward(attn_, n, tmp_, scratch, pool));
    kernels::add_inplace(x_, tmp_, n * d, pool);

    kernels::rms_norm(x_, L.ffn_norm.data(), n, d, c.rms_eps, xn_, pool);
    const kernels::Linear* gate_up[] = {&L.w_gate, &L.w_up};
    float* const gate_up_out[] = {gate_, up_};
    hint_next({&L.w_down});
    HEARTH_RETURN_IF_ERROR(
        kernels::Linear::forward_same_input(gate_up, xn_, n, gate_up_out, scratch, pool));
    kernels::swiglu(gate_, up_, n * c.n_ff, gate_, pool);
    if (l + 1 < c.n_layer) {
      const LayerWeights& N = w.layers()[l + 1];
      hint_next({&N.wq, &N.wk, &N.wv});
    } else {
      hint_next({&w.output()});
    }
    HEARTH_RETURN_IF_ERROR(L.w_down.forward(gate_, n, tmp_, scratch, pool));
    kernels::add_inplace(x_, tmp_, n * d, pool);
  }

  scratch.reset();
  if (all_logits != nullptr) {
    kernels::rms_norm(x_, w.output_norm().data(), n, d, c.rms_eps, xn_, pool);
    HEARTH_RETURN_IF_ERROR(w.output().forward(xn_, n, all_logits, scratch, pool));
    std::copy(all_logits + (n - 1) * c.n_vocab, all_logits + n * c.n_vocab, logits_);
  } else {
    const float* last = x_ + (n - 1) * d;
    kernels::rms_norm(last, w.output_norm().data(), 1, d, c.rms_eps, xn_, pool);
    HEARTH_RETURN_IF_ERROR(w.output().forward(xn_, 1, logits_, scratch, pool));
  }
  if (temp_ == nullptr) {
    const CachingAllocatorStats st = thread_temp_allocator().stats();
    peak_temp_ = std::max<std::size_t>({peak_temp_, st.in_use_bytes, st.last_reset_peak_bytes});
  }
  return std::span<const float>(logits_, c.n_vocab);
}

absl::Status Module::warm_up() {
  const std::int32_t bos = 1 < config().n_vocab ? 1 : 0;
  std::vector<std::int32_t> prompt(std::min<std::size_t>(options_.max_chunk, 8), bos);
  auto r = forward(prompt, 0);
  if (!r.ok()) return r.status();
  r = forward(std::span<const std::int32_t>(prompt.data(), 1), prompt.size());
  if (temp_ == nullptr) thread_temp_allocator().reset();
  if (r.ok())
    spdlog::info("warmed up: {}", format_usage_line("peak_temp_allocator", peak_temp_, 0));
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

}  // namespace hearth::engine
