// The key/value cache of one attention layer: its memory layout and the
// kernel that appends new tokens to it.
//
// The cache is a view over memory the caller owns: the engine plans every
// layer's cache when it loads a model and hands these views to the kernels.
// Nothing here allocates.
//
// Layout (both variants): head-major, so one KV head's positions are
// contiguous and attention streams them front to back:
//
//   k[h][p][d]        h < n_kv_heads, p < max_seq, d < head_dim
//   v[h][p][d]
//   k_scale[h][p]     (int8 cache only) one scale per (head, position) row
//   v_scale[h][p]
//
// The int8 cache is symmetric per row: row (h, p) of K stores
// q[d] = round(k[d] / k_scale[h][p]) with k_scale = amax(|k|) / 127, so
// k[d] ~= k_scale * q[d] with an error of at most k_scale / 2 = amax / 254
// per element. An all-zero row gets scale 0 and q = 0. V likewise.
// At head_dim 128 this stores 132 bytes per row instead of 512.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace hearth::kernels {

// The shape of one layer's cache.
struct KvLayout {
  std::size_t n_kv_heads = 0;
  std::size_t head_dim = 0;
  std::size_t max_seq = 0;  // positions the cache can hold
};

// int8 cache. k, v: [n_kv_heads][max_seq][head_dim]; k_scale, v_scale:
// [n_kv_heads][max_seq] floats.
struct QuantizedKvView {
  KvLayout layout;
  std::int8_t* k = nullptr;
  std::int8_t* v = nullptr;
  float* k_scale = nullptr;
  float* v_scale = nullptr;
};

// float cache. k, v: [n_kv_heads][max_seq][head_dim].
struct FloatKvView {
  KvLayout layout;
  float* k = nullptr;
  float* v = nullptr;
};

// OK when every field is non-zero and the cache's byte size fits in size_t;
// otherwise InvalidArgument naming the field.
absl::Status validate_kv_layout(const KvLayout& layout);

// Bytes of one layer's cache as laid out by quantized_kv_view() /
// float_kv_view(): the arrays above, in that order, each starting on a
// 64-byte boundary (so SIMD loads of a head's rows are aligned when head_dim
// is a multiple of 64). 0 when validate_kv_layout() fails.
std::size_t quantized_kv_bytes(const KvLayout& layout);
std::size_t float_kv_bytes(const KvLayout& layout);

// Carves a view out of `memory`: quantized_kv_bytes(layout) (resp.
// float_kv_bytes) bytes, 64-byte aligned. The layout must be valid. The
// contents are not initialised: only positions written by kv_append hold data.
QuantizedKvView quantized_kv_view(const KvLayout& layout, void* memory);
FloatKvView float_kv_view(const KvLayout& layout, void* memory);

// Writes the keys and values of n_tokens new tokens at positions
// [pos, pos + n_tokens) of every KV head. k_new, v_new: [n_tokens][n_kv_heads *
// head_dim] floats (token t, head h at t * n_kv_heads * head_dim + h * head_dim:
// the output of the K and V projections). The int8 variant quantizes each
// (token, head) row as described above; the float variant copies.
// n_tokens = 0 is a no-op. Single-threaded (one token is ~1k values per layer).
// Errors: OutOfRange when pos + n_tokens > max_seq; InvalidArgument for an
// invalid layout or a null pointer. Nothing is written on error.
absl::Status kv_append(const QuantizedKvView& kv, std::size_t pos, const float* k_new,
                       const float* v_new, std::size_t n_tokens);
absl::Status kv_append(const FloatKvView& kv, std::size_t pos, const float* k_new,
                       const float* v_new, std::size_t n_tokens);

// Quantizes one row of n floats as the int8 cache does: returns the scale
// amax / 127 (0 for an all-zero row) and writes q[i] = round-half-even(x[i] *
// (127 / amax)) in [-127, 127]. Every dispatched path gives bit-identical
// results. Exposed for tests and for tools that write caches.
float quantize_kv_row(const float* x, std::size_t n, std::int8_t* q);

}  // namespace hearth::kernels
