// Causal scaled-dot-product attention over one layer's KV cache
// (kernels/kv_cache.h), with grouped-query heads.
//
// For query head h of token i (absolute position start_pos + i), with
// G = n_heads / n_kv_heads and kv head g = h / G:
//
//   s_p    = scale * dot(q[i][h], K[g][p])          p = 0 .. start_pos + i
//   out[i][h] = sum_p softmax(s)_p * V[g][p]
//
// q and out: [n_tokens][n_heads * head_dim] floats (head h of token i at
// i * n_heads * head_dim + h * head_dim), the layout of the Q projection's
// output. out may be the same array as q (attention in place); no other
// overlap is allowed. The K/V of every position up to start_pos + n_tokens - 1
// must already be in the cache (kv_append the new tokens first). scale is
// usually 1 / sqrt(head_dim).
//
// How it runs (flash attention): the KV positions are walked in tiles of 128
// with an online softmax (running max and sum, the accumulator rescaled when
// the max grows), so the scratch memory does not depend on the context length.
// All query heads of one GQA group, for a block of up to 64 / G tokens, are
// processed together, so each K/V tile is read from memory once per group.
// Work items are (kv head x query block), and when there are fewer items than
// threads (e.g. decoding with few KV heads) each item's positions are split
// across threads too and the partial softmax states merged. The int8 cache is
// read directly: rows are converted in registers and nothing is dequantized
// to memory. Row p of K stands for k_scale_p * (k_p - z_p), so a score is
// k_scale_p * (dot(q, k_p) - z_p * sum(q)), with sum(q) computed once per
// query row; V's scales are folded into the softmax weights w_p, and its zero
// points enter as one scalar sum_p w_p * z_p per output row and tile,
// subtracted from every element.
//
// Paths: AVX-512 for head_dim a multiple of 16, AVX2 for a multiple of 8,
// scalar for any other head_dim (every head_dim >= 1 is supported). With
// AVX-512 VNNI (head_dim <= 512) the int8 K dot products run in integers: each
// scaled query row is rounded to int16 (a step of 1/32767 of its largest
// element, 1/16448 at head_dim 512: far finer than int8 K's 1/255 of its
// row's range) and multiplied with the int8 K rows by VPDPWSSD, about half
// the instructions of float math (the zero-point term uses the rounded row's
// exact integer sum).
//
// Memory: scratch buffers come from `scratch` (the calling thread's temp
// allocator), allocated on the calling thread before any work fans out; their
// size depends on n_heads, n_kv_heads, head_dim, n_tokens and the pool's
// thread count, never on start_pos. No heap allocation. pool may be nullptr
// (run on the caller); small problems run on the caller anyway.
//
// Options (AttentionOptions): a sliding window limits each query to the
// `window` most recent positions, its own included (position p is seen from
// position i when i - window < p <= i, as llama.cpp's SWA mask); tiles sit
// at multiples of 128 positions (so, unless a row's positions are split
// across threads, its result does not depend on the chunk it came in), those
// before the first row's window are skipped, and positions before a row's
// window inside a tile are masked. Soft-capping (Gemma 2) replaces each score
// s (already scaled) by softcap * tanh(s / softcap) before the softmax.
//
// Errors: InvalidArgument naming the field (n_heads not a multiple of
// n_kv_heads, start_pos + n_tokens > max_seq, null pointers, invalid layout,
// non-finite scale); ResourceExhausted if scratch cannot be allocated.
// n_tokens = 0 is a no-op.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "kernels/kv_cache.h"
#include "kernels/thread_pool.h"
#include "memory/memory_allocator.h"

namespace hearth::kernels {

struct AttentionOptions {
  std::size_t window = 0;  // sliding window in positions; 0: every earlier position
  float softcap = 0.0f;    // score soft-capping; 0: none (must be finite and >= 0)
};

// Attention over an int8 cache.
absl::Status sdpa(const float* q, std::size_t n_tokens, std::size_t start_pos, std::size_t n_heads,
                  const QuantizedKvView& kv, float scale, float* out, MemoryAllocator& scratch,
                  ThreadPool* pool, const AttentionOptions& options = {});

// Bytes of scratch one sdpa call of n_tokens query rows takes when it runs on
// the calling thread (pool == nullptr), alignment included: a caller that
// runs such calls on several threads at once gives each a slice this large.
std::size_t sdpa_scratch_bytes(std::size_t n_tokens, std::size_t n_heads, std::size_t n_kv_heads,
                               std::size_t head_dim);

// Attention over a float cache (same contract).
absl::Status sdpa(const float* q, std::size_t n_tokens, std::size_t start_pos, std::size_t n_heads,
                  const FloatKvView& kv, float scale, float* out, MemoryAllocator& scratch,
                  ThreadPool* pool, const AttentionOptions& options = {});

}  // namespace hearth::kernels
