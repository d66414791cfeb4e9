#include "kernels/kv_cache.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/quantize.h"

namespace hearth::kernels {
namespace {

constexpr std::size_t kAlign = 64;

// a * b + c in *out; false on overflow.
bool mul_add(std::size_t a, std::size_t b, std::size_t c, std::size_t* out) {
  std::size_t p = 0;
  return !__builtin_mul_overflow(a, b, &p) && !__builtin_add_overflow(p, c, out);
}

// Round up to kAlign; false on overflow.
bool align_up(std::size_t x, std::size_t* out) {
  if (x > SIZE_MAX - (kAlign - 1)) return false;
  *out = (x + kAlign - 1) & ~(kAlign - 1);
  return true;
}

// Byte offsets of the arrays of one layer's cache; false on overflow.
struct Offsets {
  std::size_t k = 0, v = 0, k_scale = 0, v_scale = 0, k_zero = 0, v_zero = 0, total = 0;
};

// quantized: the int8 cache's per-row scales and zero points follow K and V.
bool offsets(const KvLayout& l, std::size_t elem_bytes, bool quantized, Offsets* o) {
  std::size_t rows = 0, data = 0, scale_bytes = 0, zero_bytes = 0;
  if (!mul_add(l.n_kv_heads, l.max_seq, 0, &rows)) return false;
  if (!mul_add(rows, l.head_dim, 0, &data) || !mul_add(data, elem_bytes, 0, &data)) return false;
  if (!align_up(data, &data)) return false;
  if (quantized && (!mul_add(rows, sizeof(float), 0, &scale_bytes) ||
                    !align_up(scale_bytes, &scale_bytes) || !align_up(rows, &zero_bytes)))
    return false;
  o->k = 0;
  o->v = data;
  if (!mul_add(data, 2, 0, &o->k_scale)) return false;
  if (!mul_add(scale_bytes, 1, o->k_scale, &o->v_scale)) return false;
  if (!mul_add(scale_bytes, 1, o->v_scale, &o->k_zero)) return false;
  if (!mul_add(zero_bytes, 1, o->k_zero, &o->v_zero)) return false;
  return mul_add(zero_bytes, 1, o->v_zero, &o->total);
}

absl::Status check_append(const KvLayout& layout, std::size_t pos, const float* k_new,
                          const float* v_new, std::size_t n_tokens, bool null_cache) {
  HEARTH_RETURN_IF_ERROR(validate_kv_layout(layout));
  if (null_cache) return absl::InvalidArgumentError("kv_append: the KV view has a null array");
  if (n_tokens > 0 && (k_new == nullptr || v_new == nullptr))
    return absl::InvalidArgumentError(
        absl::StrCat("kv_append: k_new/v_new is null with n_tokens ", n_tokens));
  if (pos > layout.max_seq || n_tokens > layout.max_seq - pos)
    return absl::OutOfRangeError(absl::StrCat("kv_append: pos ", pos, " + n_tokens ", n_tokens,
                                              " exceeds max_seq ", layout.max_seq));
  return absl::OkStatus();
}

// Whether a view misses one of its arrays.
bool has_null_array(const QuantizedKvView& kv) {
  return kv.k == nullptr || kv.v == nullptr || kv.k_scale == nullptr || kv.v_scale == nullptr ||
         kv.k_zero == nullptr || kv.v_zero == nullptr;
}
bool has_null_array(const FloatKvView& kv) { return kv.k == nullptr || kv.v == nullptr; }

absl::Status check_copy(const KvLayout& dst, const KvLayout& src, std::size_t begin,
                        std::size_t end, bool null_cache) {
  HEARTH_RETURN_IF_ERROR(validate_kv_layout(dst));
  if (null_cache) return absl::InvalidArgumentError("kv_copy: a KV view has a null array");
  if (dst.n_kv_heads != src.n_kv_heads || dst.head_dim != src.head_dim ||
      dst.max_seq != src.max_seq)
    return absl::InvalidArgumentError("kv_copy: the two caches have different layouts");
  if (begin > end || end > dst.max_seq)
    return absl::OutOfRangeError(
        absl::StrCat("kv_copy: positions [", begin, ", ", end, ") outside max_seq ", dst.max_seq));
  return absl::OkStatus();
}

// Copies rows [begin, end) of every head of one [n_kv_heads][max_seq][width]
// array of `elem` bytes per value.
void copy_rows(void* dst, const void* src, const KvLayout& l, std::size_t width, std::size_t elem,
               std::size_t begin, std::size_t end) {
  const std::size_t row_bytes = width * elem;
  for (std::size_t h = 0; h < l.n_kv_heads; ++h) {
    const std::size_t first = (h * l.max_seq + begin) * row_bytes;
    std::memcpy(static_cast<std::uint8_t*>(dst) + first,
                static_cast<const std::uint8_t*>(src) + first, (end - begin) * row_bytes);
  }
}

}  // namespace

absl::Status validate_kv_layout(const KvLayout& layout) {
  if (layout.n_kv_heads == 0) return absl::InvalidArgumentError("KvLayout.n_kv_heads is 0");
  if (layout.head_dim == 0) return absl::InvalidArgumentError("KvLayout.head_dim is 0");
  if (layout.max_seq == 0) return absl::InvalidArgumentError("KvLayout.max_seq is 0");
  Offsets o;
  if (!offsets(layout, sizeof(float), true, &o))  // the larger of the two layouts
    return absl::InvalidArgumentError(absl::StrCat("KvLayout: n_kv_heads ", layout.n_kv_heads,
                                                   " x max_seq ", layout.max_seq, " x head_dim ",
                                                   layout.head_dim, " overflows size_t"));
  return absl::OkStatus();
}

std::size_t quantized_kv_bytes(const KvLayout& layout) {
  Offsets o;
  if (!validate_kv_layout(layout).ok() || !offsets(layout, 1, true, &o)) return 0;
  return o.total;
}

std::size_t float_kv_bytes(const KvLayout& layout) {
  Offsets o;
  if (!validate_kv_layout(layout).ok() || !offsets(layout, sizeof(float), false, &o)) return 0;
  return o.total;
}

QuantizedKvView quantized_kv_view(const KvLayout& layout, void* memory) {
  Offsets o;
  offsets(layout, 1, true, &o);
  auto* base = static_cast<std::byte*>(memory);
  QuantizedKvView view;
  view.layout = layout;
  view.k = reinterpret_cast<std::int8_t*>(base + o.k);
  view.v = reinterpret_cast<std::int8_t*>(base + o.v);
  view.k_scale = reinterpret_cast<float*>(base + o.k_scale);
  view.v_scale = reinterpret_cast<float*>(base + o.v_scale);
  view.k_zero = reinterpret_cast<std::int8_t*>(base + o.k_zero);
  view.v_zero = reinterpret_cast<std::int8_t*>(base + o.v_zero);
  return view;
}

FloatKvView float_kv_view(const KvLayout& layout, void* memory) {
  Offsets o;
  offsets(layout, sizeof(float), false, &o);
  auto* base = static_cast<std::byte*>(memory);
  FloatKvView view;
  view.layout = layout;
  view.k = reinterpret_cast<float*>(base + o.k);
  view.v = reinterpret_cast<float*>(base + o.v);
  return view;
}

absl::Status kv_append(const QuantizedKvView& kv, std::size_t pos, const float* k_new,
                       const float* v_new, std::size_t n_tokens) {
  const KvLayout& l = kv.layout;
  HEARTH_RETURN_IF_ERROR(check_append(l, pos, k_new, v_new, n_tokens, has_null_array(kv)));
  const std::size_t stride = l.n_kv_heads * l.head_dim;
  for (std::size_t t = 0; t < n_tokens; ++t) {
    for (std::size_t h = 0; h < l.n_kv_heads; ++h) {
      const std::size_t row = h * l.max_seq + pos + t;
      const std::size_t src = t * stride + h * l.head_dim;
      const QParams kq = quantize_row_asymmetric(k_new + src, l.head_dim, kv.k + row * l.head_dim);
      const QParams vq = quantize_row_asymmetric(v_new + src, l.head_dim, kv.v + row * l.head_dim);
      // Asymmetric zero points lie in [-128, 127].
      kv.k_scale[row] = kq.scale;
      kv.k_zero[row] = static_cast<std::int8_t>(kq.zero_point);
      kv.v_scale[row] = vq.scale;
      kv.v_zero[row] = static_cast<std::int8_t>(vq.zero_point);
    }
  }
  return absl::OkStatus();
}

absl::Status kv_append(const FloatKvView& kv, std::size_t pos, const float* k_new,
                       const float* v_new, std::size_t n_tokens) {
  const KvLayout& l = kv.layout;
  HEARTH_RETURN_IF_ERROR(check_append(l, pos, k_new, v_new, n_tokens, has_null_array(kv)));
  const std::size_t stride = l.n_kv_heads * l.head_dim;
  const std::size_t row_bytes = l.head_dim * sizeof(float);
  for (std::size_t t = 0; t < n_tokens; ++t) {
    for (std::size_t h = 0; h < l.n_kv_heads; ++h) {
      const std::size_t row = h * l.max_seq + pos + t;
      const std::size_t src = t * stride + h * l.head_dim;
      std::memcpy(kv.k + row * l.head_dim, k_new + src, row_bytes);
      std::memcpy(kv.v + row * l.head_dim, v_new + src, row_bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status kv_copy(const QuantizedKvView& dst, const QuantizedKvView& src, std::size_t begin,
                     std::size_t end) {
  const KvLayout& l = dst.layout;
  HEARTH_RETURN_IF_ERROR(
      check_copy(l, src.layout, begin, end, has_null_array(dst) || has_null_array(src)));
  copy_rows(dst.k, src.k, l, l.head_dim, 1, begin, end);
  copy_rows(dst.v, src.v, l, l.head_dim, 1, begin, end);
  copy_rows(dst.k_scale, src.k_scale, l, 1, sizeof(float), begin, end);
  copy_rows(dst.v_scale, src.v_scale, l, 1, sizeof(float), begin, end);
  copy_rows(dst.k_zero, src.k_zero, l, 1, 1, begin, end);
  copy_rows(dst.v_zero, src.v_zero, l, 1, 1, begin, end);
  return absl::OkStatus();
}

absl::Status kv_copy(const FloatKvView& dst, const FloatKvView& src, std::size_t begin,
                     std::size_t end) {
  const KvLayout& l = dst.layout;
  HEARTH_RETURN_IF_ERROR(
      check_copy(l, src.layout, begin, end, has_null_array(dst) || has_null_array(src)));
  copy_rows(dst.k, src.k, l, l.head_dim, sizeof(float), begin, end);
  copy_rows(dst.v, src.v, l, l.head_dim, sizeof(float), begin, end);
  return absl::OkStatus();
}

}  // namespace hearth::kernels
