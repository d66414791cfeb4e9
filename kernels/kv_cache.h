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
//   k_scale[h][p]     (int8 cache only) one float scale per (head, position) row
//   v_scale[h][p]
//   k_zero[h][p]      (int8 cache only) one int8 zero point per row
//   v_zero[h][p]
//
// The int8 cache quantizes each row (h, p) of K, and of V, on its own with
// the asymmetric rule of kernels/quantize.h (quantize_row_asymmetric): the
// row's range widened to include 0, lo = min(0, min k), hi = max(0, max k),
// gives k_scale = (hi - lo) / 255 and a zero point z in [-128, 127] (the code
// of 0, stored exactly), and k[d] ~= k_scale * (q[d] - z) with an error of at
// most k_scale / 2 = (hi - lo) / 510 per element, up to float rounding. All
// 256 codes cover the row's actual range: for a row of one sign (e.g. after
// an activation like ReLU) the step is 127 / 255 of a symmetric amax / 127
// scale's, and for any row at most 254 / 255 of it (the range is at most
// 2 amax). A row whose range is below quantize.h's kTinyRange (all zero, in
// practice) gets scale 0, z = 0 and q = 0.
//
// Zero points are int8 (not float): they are exact small integers, take one
// byte instead of four, and the attention kernels apply them only as
// z * sum(q) per score and as one sum_p w_p * z_p per output row and tile,
// never per element. At head_dim 128 a row takes 128 + 4 + 1 = 133 bytes
// (K and V: 266 per position and KV head) instead of 512 as floats (132
// with the former symmetric scheme).
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

// int8 cache. k, v: [n_kv_heads][max_seq][head_dim] int8; k_scale, v_scale:
// [n_kv_heads][max_seq] floats; k_zero, v_zero: [n_kv_heads][max_seq] int8.
// Element d of row (h, p) of K is k_scale[r] * (k[r * head_dim + d] -
// k_zero[r]) with r = h * max_seq + p.
struct QuantizedKvView {
  KvLayout layout;
  std::int8_t* k = nullptr;
  std::int8_t* v = nullptr;
  float* k_scale = nullptr;
  float* v_scale = nullptr;
  std::int8_t* k_zero = nullptr;
  std::int8_t* v_zero = nullptr;
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
// (token, head) row with quantize_row_asymmetric; the float variant copies.
// n_tokens = 0 is a no-op. Single-threaded (one token is ~1k values per layer).
// Errors: OutOfRange when pos + n_tokens > max_seq; InvalidArgument for an
// invalid layout or a null pointer. Nothing is written on error.
absl::Status kv_append(const QuantizedKvView& kv, std::size_t pos, const float* k_new,
                       const float* v_new, std::size_t n_tokens);
absl::Status kv_append(const FloatKvView& kv, std::size_t pos, const float* k_new,
                       const float* v_new, std::size_t n_tokens);

// Copies positions [begin, end) of every KV head from `src` to `dst`, rows as
// stored (an int8 row with its scale and zero point): what another cache
// computed for the same tokens at the same positions, without a forward.
// Errors: InvalidArgument when the layouts differ or a view is invalid;
// OutOfRange when end > max_seq or begin > end. Nothing is written on error.
absl::Status kv_copy(const QuantizedKvView& dst, const QuantizedKvView& src, std::size_t begin,
                     std::size_t end);
absl::Status kv_copy(const FloatKvView& dst, const FloatKvView& src, std::size_t begin,
                     std::size_t end);

}  // namespace hearth::kernels
