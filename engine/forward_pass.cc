#include "engine/forward_pass.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <mutex>

#include "base/status_macros.h"
#include "base/str_cat.h"
#include "kernels/activation_ops.h"
#include "kernels/embedding.h"
#include "kernels/sdpa.h"
#include "memory/arena_allocator.h"

namespace hearth::engine {
namespace {

// How much of its next range a worker prefetches while it waits in decode:
// a gap between regions lasts a few to tens of microseconds, at most a few
// hundred kilobytes of streaming; well inside a 1-2 MiB L2.
constexpr std::size_t kHintBytes = 256 << 10;

std::size_t round_up(std::size_t n, std::size_t align) { return (n + align - 1) / align * align; }

// Floats per row of each activation buffer, in ActivationBuffers' order.
struct BufferShape {
  const char* name;
  float* ActivationBuffers::*member;
  std::size_t per_row;
};

std::array<BufferShape, 9> shapes(const ModelConfig& c) {
  using A = ActivationBuffers;
  return {{{"x", &A::x, c.n_embd},
           {"xn", &A::xn, c.n_embd},
           {"q", &A::q, c.q_dim()},
           {"k", &A::k, c.kv_dim()},
           {"v", &A::v, c.kv_dim()},
           {"attn", &A::attn, c.q_dim()},
           {"tmp", &A::tmp, c.n_embd},
           {"gate", &A::gate, c.n_ff},
           {"up", &A::up, c.n_ff}}};
}

// Layer `l`'s rotary embedding for sequence `s` (Phi-3 picks its factors by
// the sequence's context).
kernels::RopeConfig rope_config(const ModelConfig& c, const ModelWeights& w, std::size_t l,
                                const SequenceRows& s) {
  kernels::RopeConfig rope;
  rope.style = c.rope_style;
  rope.rot_dim = c.rope_dim;
  rope.base = c.layers[l].rope_base;
  rope.freq_scale = c.layers[l].rope_freq_scale;
  rope.attn_factor = c.rope_attn_factor;
  const std::vector<float>* factors = &w.rope_freq_factors();
  if (c.rope_original_context != 0) {
    const std::size_t context =
        !s.kv.int8.empty() ? s.kv.int8[l].layout.max_seq : s.kv.f32[l].layout.max_seq;
    factors = context > c.rope_original_context ? &w.rope_factors_long() : &w.rope_factors_short();
  }
  rope.freq_factors = factors->empty() ? nullptr : factors->data();
  return rope;
}

// RoPE, KV append and attention of one sequence's rows in layer `l`.
absl::Status attend(const ModelWeights& w, const ActivationBuffers& b, const SequenceRows& s,
                    std::size_t l, MemoryAllocator& scratch, kernels::ThreadPool* pool) {
  const ModelConfig& c = w.config();
  float* q = b.q + s.first_row * c.q_dim();
  float* k = b.k + s.first_row * c.kv_dim();
  const float* v = b.v + s.first_row * c.kv_dim();
  float* out = b.attn + s.first_row * c.q_dim();
  const kernels::RopeConfig rope = rope_config(c, w, l, s);
  kernels::rope(q, s.rows, c.n_head, c.head_dim, s.start_pos, rope, pool);
  kernels::rope(k, s.rows, c.n_head_kv, c.head_dim, s.start_pos, rope, pool);
  const kernels::AttentionOptions options{c.layers[l].window, c.attn_softcap};
  const float scale = c.attention_scale;
  if (!s.kv.int8.empty()) {
    const kernels::QuantizedKvView& kv = s.kv.int8[l];
    HEARTH_RETURN_IF_ERROR(kernels::kv_append(kv, s.start_pos, k, v, s.rows));
    return kernels::sdpa(q, s.rows, s.start_pos, c.n_head, kv, scale, out, scratch, pool, options);
  }
  const kernels::FloatKvView& kv = s.kv.f32[l];
  HEARTH_RETURN_IF_ERROR(kernels::kv_append(kv, s.start_pos, k, v, s.rows));
  return kernels::sdpa(q, s.rows, s.start_pos, c.n_head, kv, scale, out, scratch, pool, options);
}

// Attention, on this thread, of the decoding sequences numbered [begin, end)
// among the step's one-row sequences, each with `own` scratch.
absl::Status attend_decoding(const ModelWeights& w, const ActivationBuffers& b,
                             std::span<const SequenceRows> sequences, std::size_t l,
                             std::size_t begin, std::size_t end, ArenaAllocator& own) {
  std::size_t k = 0;
  for (const SequenceRows& s : sequences) {
    if (s.rows != 1) continue;
    if (k >= begin && k < end) {
      own.reset();
      HEARTH_RETURN_IF_ERROR(attend(w, b, s, l, own, nullptr));
    }
    ++k;
  }
  return absl::OkStatus();
}

// Attention of every sequence of the step in layer `l`. Decoding sequences
// (one row each) are dealt out to the pool's threads in one region, each run
// whole on one thread with its own slice of scratch: with a region per
// sequence, a step of 16 decode rows paid the wake-ups of some 50 regions a
// layer, and below the kernels' parallel threshold the caller ran each
// sequence while the workers idled. Each row's result does not depend on its
// batch: with at least one KV head per thread, sdpa's plan is the same on one
// thread as across the pool (with fewer, a decode row splits its positions
// across threads, so those rows keep a region each). Longer sequences
// (prompt chunks) run one at a time across the pool.
absl::Status attend_all(const ModelWeights& w, const ActivationBuffers& b,
                        std::span<const SequenceRows> sequences, std::size_t l,
                        MemoryAllocator& scratch, kernels::ThreadPool* pool) {
  const ModelConfig& c = w.config();
  const std::size_t threads = pool != nullptr ? pool->threads() : 1;
  std::size_t singles = 0;
  for (const SequenceRows& s : sequences) singles += s.rows == 1 ? 1 : 0;
  const bool deal = threads > 1 && singles > 1 && c.n_head_kv >= threads;
  for (const SequenceRows& s : sequences)
    if (!deal || s.rows != 1) HEARTH_RETURN_IF_ERROR(attend(w, b, s, l, scratch, pool));
  if (!deal) return absl::OkStatus();

  const std::size_t chunks = singles < threads ? singles : threads;
  const std::size_t slice =
      round_up(kernels::sdpa_scratch_bytes(1, c.n_head, c.n_head_kv, c.head_dim),
               MemoryAllocator::kDefaultAlignment);
  auto* base = scratch.allocate_array<std::uint8_t>(chunks * slice);
  if (base == nullptr)
    return absl::ResourceExhaustedError(
        str_cat("attention: cannot allocate ", chunks * slice, " bytes of scratch"));
  std::mutex error_mu;
  absl::Status error;  // the first failure, guarded by error_mu
  pool->parallel_chunks(singles, chunks,
                        [&](std::size_t chunk, std::size_t begin, std::size_t end) {
                          ArenaAllocator own(base + chunk * slice, slice);
                          absl::Status st = attend_decoding(w, b, sequences, l, begin, end, own);
                          if (st.ok()) return;
                          std::lock_guard lock(error_mu);
                          if (error.ok()) error = std::move(st);
                        });
  return error;
}

// The q/k norms (Qwen3, Gemma 3: each head; OLMo 2: the whole projection),
// before RoPE.
void qk_norms(const ModelConfig& c, const LayerWeights& L, const ActivationBuffers& b,
              std::size_t n, kernels::ThreadPool* pool) {
  if (L.q_norm.empty()) return;
  const bool per_head = c.arch->qk_norm == QkNorm::kPerHead;
  const std::size_t q_rows = per_head ? n * c.n_head : n, k_rows = per_head ? n * c.n_head_kv : n;
  const std::size_t q_len = per_head ? c.head_dim : c.q_dim();
  const std::size_t k_len = per_head ? c.head_dim : c.kv_dim();
  kernels::rms_norm(b.q, L.q_norm.data(), q_rows, q_len, c.rms_eps, b.q, pool);
  kernels::rms_norm(b.k, L.k_norm.data(), k_rows, k_len, c.rms_eps, b.k, pool);
}

// x += residual_scale * post_norm(out): a block's output joins the stream
// (the norm only with post-norms, the scale only for Granite).
void add_residual(const ModelConfig& c, const std::vector<float>& post_norm, float* out,
                  const ActivationBuffers& b, std::size_t n, kernels::ThreadPool* pool) {
  const std::size_t d = c.n_embd;
  if (!post_norm.empty()) kernels::rms_norm(out, post_norm.data(), n, d, c.rms_eps, out, pool);
  if (c.residual_scale != 1.0f) kernels::scale_inplace(out, c.residual_scale, n * d, pool);
  kernels::add_inplace(b.x, out, n * d, pool);
}

// A block's input: the stream itself, or its pre-norm in xn.
const float* block_input(const ModelConfig& c, const std::vector<float>& pre_norm,
                         const ActivationBuffers& b, std::size_t n, kernels::ThreadPool* pool) {
  if (pre_norm.empty()) return b.x;
  kernels::rms_norm(b.x, pre_norm.data(), n, c.n_embd, c.rms_eps, b.xn, pool);
  return b.xn;
}

}  // namespace

const char* kv_cache_type_name(KvCacheType t) { return t == KvCacheType::kInt8 ? "int8" : "float"; }

std::size_t ActivationBuffers::bytes_for(const ModelConfig& c, std::size_t rows,
                                         std::size_t align) {
  std::size_t bytes = 0;
  for (const BufferShape& s : shapes(c)) bytes += round_up(rows * s.per_row * sizeof(float), align);
  return bytes;
}

absl::StatusOr<ActivationBuffers> ActivationBuffers::carve(const ModelConfig& c, std::size_t rows,
                                                           StatsAllocator& planned,
                                                           std::size_t align) {
  ActivationBuffers b;
  b.rows = rows;
  for (const BufferShape& s : shapes(c)) {
    float* p = planned.allocate_array<float>(rows * s.per_row, align);
    if (p == nullptr)
      return absl::ResourceExhaustedError(
          str_cat("planned memory exhausted while laying out activation buffer '", s.name, "' (",
                  rows * s.per_row * sizeof(float), " bytes)"));
    b.*s.member = p;
  }
  return b;
}

absl::Status run_layers(const ModelWeights& w, const ActivationBuffers& b,
                        std::span<const std::int32_t> tokens,
                        std::span<const SequenceRows> sequences, MemoryAllocator& scratch,
                        kernels::ThreadPool* pool) {
  const ModelConfig& c = w.config();
  const std::size_t n = tokens.size();
  const std::size_t d = c.n_embd;
  if (n == 0 || n > b.rows)
    return absl::InvalidArgumentError(
        str_cat("forward: ", n, " rows; the step's buffers hold 1 to ", b.rows));
  HEARTH_RETURN_IF_ERROR(kernels::embedding_lookup(w.embedding(), w.embedding_type(), c.n_vocab, d,
                                                   tokens.data(), n, b.x, pool));
  if (c.embedding_scale != 1.0f) kernels::scale_inplace(b.x, c.embedding_scale, n * d, pool);

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
    // A layer's scratch is dead once it ends (activations live in planned
    // memory): recycling it bounds temp memory by one layer, not the depth.
    scratch.reset();
    const LayerWeights& L = w.layers()[l];
    const float* in = block_input(c, L.attn_norm, b, n, pool);
    const kernels::Linear* qkv[] = {&L.wq, &L.wk, &L.wv};
    float* const qkv_out[] = {b.q, b.k, b.v};
    hint_next({&L.wo});
    HEARTH_RETURN_IF_ERROR(kernels::Linear::forward_same_input(qkv, in, n, qkv_out, scratch, pool));
    if (!L.bq.empty()) {
      kernels::add_rows_inplace(b.q, L.bq.data(), n, c.q_dim(), pool);
      kernels::add_rows_inplace(b.k, L.bk.data(), n, c.kv_dim(), pool);
      kernels::add_rows_inplace(b.v, L.bv.data(), n, c.kv_dim(), pool);
    }
    qk_norms(c, L, b, n, pool);
    HEARTH_RETURN_IF_ERROR(attend_all(w, b, sequences, l, scratch, pool));
    hint_next({&L.w_gate, &L.w_up});
    HEARTH_RETURN_IF_ERROR(L.wo.forward(b.attn, n, b.tmp, scratch, pool));
    add_residual(c, L.post_attn_norm, b.tmp, b, n, pool);

    in = block_input(c, L.ffn_norm, b, n, pool);
    const kernels::Linear* gate_up[] = {&L.w_gate, &L.w_up};
    float* const gate_up_out[] = {b.gate, b.up};
    hint_next({&L.w_down});
    HEARTH_RETURN_IF_ERROR(
        kernels::Linear::forward_same_input(gate_up, in, n, gate_up_out, scratch, pool));
    if (c.arch->activation == FfnActivation::kGeluTanh) {
      kernels::geglu(b.gate, b.up, n * c.n_ff, b.gate, pool);
    } else {
      kernels::swiglu(b.gate, b.up, n * c.n_ff, b.gate, pool);
    }
    if (l + 1 < c.n_layer) {
      const LayerWeights& N = w.layers()[l + 1];
      hint_next({&N.wq, &N.wk, &N.wv});
    } else {
      hint_next({&w.output()});
    }
    HEARTH_RETURN_IF_ERROR(L.w_down.forward(b.gate, n, b.tmp, scratch, pool));
    add_residual(c, L.post_ffn_norm, b.tmp, b, n, pool);
  }
  return absl::OkStatus();
}

absl::Status project_logits(const ModelWeights& w, const ActivationBuffers& b,
                            std::span<const std::size_t> rows, float* logits,
                            MemoryAllocator& scratch, kernels::ThreadPool* pool) {
  const ModelConfig& c = w.config();
  const std::size_t d = c.n_embd;
  if (rows.size() > b.rows)
    return absl::InvalidArgumentError(
        str_cat("project_logits: ", rows.size(), " rows; the buffers hold ", b.rows));
  scratch.reset();
  // Rows that are already the step's first rows, in order, are normalized in
  // one call; any other selection is gathered row by row.
  bool leading = true;
  for (std::size_t i = 0; i < rows.size() && leading; ++i) leading = rows[i] == i;
  if (leading) {
    kernels::rms_norm(b.x, w.output_norm().data(), rows.size(), d, c.rms_eps, b.xn, pool);
  } else {
    for (std::size_t i = 0; i < rows.size(); ++i)
      kernels::rms_norm(b.x + rows[i] * d, w.output_norm().data(), 1, d, c.rms_eps, b.xn + i * d,
                        pool);
  }
  HEARTH_RETURN_IF_ERROR(w.output().forward(b.xn, rows.size(), logits, scratch, pool));
  const std::size_t count = rows.size() * c.n_vocab;
  if (c.logit_scale != 1.0f) kernels::scale_inplace(logits, c.logit_scale, count, pool);
  if (c.final_softcap > 0.0f) kernels::softcap(logits, count, c.final_softcap, pool);
  return absl::OkStatus();
}

}  // namespace hearth::engine
