#include "kernels/sdpa.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/activation_ops.h"
#include "kernels/cpu_features.h"
#include "kernels/sdpa_impl.h"

namespace hearth::kernels {
namespace internal {
namespace {

// ---- Scalar reference kernels ---------------------------------------------

void scores_q8_scalar(const float* q, std::size_t ld_q, std::size_t rows, const float* q_sum,
                      const std::int8_t* k, const float* k_scale, const std::int8_t* k_zero,
                      std::size_t n, std::size_t head_dim, float* s, std::size_t ld_s) {
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < n; ++j) {
      float dot = 0.0f;
      for (std::size_t d = 0; d < head_dim; ++d)
        dot += q[r * ld_q + d] * static_cast<float>(k[j * head_dim + d]);
      s[r * ld_s + j] = (dot - static_cast<float>(k_zero[j]) * q_sum[r]) * k_scale[j];
    }
  }
}

void scores_f32_scalar(const float* q, std::size_t ld_q, std::size_t rows, const float* k,
                       std::size_t n, std::size_t head_dim, float* s, std::size_t ld_s) {
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < n; ++j) {
      float dot = 0.0f;
      for (std::size_t d = 0; d < head_dim; ++d) dot += q[r * ld_q + d] * k[j * head_dim + d];
      s[r * ld_s + j] = dot;
    }
  }
}

float softmax_row_scalar(float* s, std::size_t n_valid, std::size_t n, const float* v_scale,
                         float* m, float* l) {
  float mx = s[0];
  for (std::size_t j = 1; j < n_valid; ++j) mx = std::fmax(mx, s[j]);
  const float m_new = std::fmax(*m, mx);
  const float corr = std::exp(*m - m_new);  // exp(-inf) = 0 on the first tile
  float sum = 0.0f;
  for (std::size_t j = 0; j < n_valid; ++j) {
    const float e = std::exp(s[j] - m_new);
    sum += e;
    s[j] = v_scale != nullptr ? e * v_scale[j] : e;
  }
  for (std::size_t j = n_valid; j < n; ++j) s[j] = 0.0f;
  *l = *l * corr + sum;
  *m = m_new;
  return corr;
}

// v_zero nullptr: float V, no zero points.
template <typename V>
void accumulate_scalar(const float* w, std::size_t ld_w, std::size_t rows, const V* v,
                       const std::int8_t* v_zero, std::size_t n, std::size_t head_dim,
                       const float* corr, float* acc, std::size_t ld_acc) {
  for (std::size_t r = 0; r < rows; ++r) {
    float* a = acc + r * ld_acc;
    float offset = 0.0f;  // sum_j w_j * v_zero_j, subtracted from every lane
    if (v_zero != nullptr)
      for (std::size_t j = 0; j < n; ++j) offset += w[r * ld_w + j] * static_cast<float>(v_zero[j]);
    for (std::size_t d = 0; d < head_dim; ++d) a[d] = a[d] * corr[r] - offset;
    for (std::size_t j = 0; j < n; ++j) {
      const float wj = w[r * ld_w + j];
      for (std::size_t d = 0; d < head_dim; ++d)
        a[d] += wj * static_cast<float>(v[j * head_dim + d]);
    }
  }
}

void accumulate_q8_scalar(const float* w, std::size_t ld_w, std::size_t rows, const std::int8_t* v,
                          const std::int8_t* v_zero, std::size_t n, std::size_t head_dim,
                          const float* corr, float* acc, std::size_t ld_acc) {
  accumulate_scalar(w, ld_w, rows, v, v_zero, n, head_dim, corr, acc, ld_acc);
}

void accumulate_f32_scalar(const float* w, std::size_t ld_w, std::size_t rows, const float* v,
                           std::size_t n, std::size_t head_dim, const float* corr, float* acc,
                           std::size_t ld_acc) {
  accumulate_scalar(w, ld_w, rows, v, nullptr, n, head_dim, corr, acc, ld_acc);
}

}  // namespace

const AttentionKernels kScalarAttention = {
    scores_q8_scalar,      scores_f32_scalar,       softmax_row_scalar, accumulate_q8_scalar,
    accumulate_f32_scalar, /*head_dim_multiple=*/1, /*max_head_dim=*/0};

}  // namespace internal

namespace {

using internal::AttentionKernels;
using internal::kKvTile;

// Query rows (heads x tokens) an item processes at most: enough that a K/V
// tile read from memory serves many rows, few enough that the accumulators
// (64 x head_dim floats) and score rows stay in L1/L2.
constexpr std::size_t kMaxRows = 64;
// Below this many multiply-adds (query rows x positions x head_dim) the
// problem runs on the calling thread: waking the pool costs more.
constexpr std::size_t kParallelWork = std::size_t{1} << 17;
constexpr std::size_t kFloatsPerLine = 16;  // 64 bytes

std::size_t round_up(std::size_t x) {
  return (x + kFloatsPerLine - 1) / kFloatsPerLine * kFloatsPerLine;
}

// The active ISA's attention table, or the best one below it that serves
// head_dim (the scalar one serves any).
const AttentionKernels& select_kernels(std::size_t head_dim) {
  using namespace internal;
  static constexpr PerIsaTables<AttentionKernels> kTables{
      &kScalarAttention, HEARTH_SIMD_TABLE(kAvx2Attention), HEARTH_SIMD_TABLE(kAvx512Attention),
      HEARTH_SIMD_TABLE(kAvx512VnniAttention)};
  for (int level = static_cast<int>(active_isa()); level > 0; --level) {
    const AttentionKernels& k = kTables.at(static_cast<Isa>(level));
    if (head_dim % k.head_dim_multiple == 0 && (k.max_head_dim == 0 || head_dim <= k.max_head_dim))
      return k;
  }
  return kScalarAttention;
}

// The cache as the item loop sees it; T is std::int8_t or float.
template <typename T>
struct KvArrays {
  const T* k;
  const T* v;
  const float* k_scale;  // nullptr for the float cache
  const float* v_scale;
  const std::int8_t* k_zero;  // nullptr for the float cache
  const std::int8_t* v_zero;
  KvLayout layout;
};

// Everything an item needs; shared read-only by all chunks.
struct Problem {
  const float* q;
  float* out;
  std::size_t n_tokens, start_pos, n_heads, group, head_dim;
  float scale;
  AttentionOptions options;
  AttentionKernels kernels;
  // Work decomposition.
  std::size_t tokens_per_block, n_qblocks, splits, max_rows;
};

// Per-chunk scratch: query rows and their sums, accumulators, score rows,
// softmax state.
struct ChunkScratch {
  float* q;      // [max_rows][head_dim]
  float* acc;    // [max_rows][head_dim]
  float* s;      // [max_rows][kKvTile]
  float* m;      // [max_rows]
  float* l;      // [max_rows]
  float* corr;   // [max_rows]
  float* q_sum;  // [max_rows]: sum_d q[r][d], for the int8 K zero points
};

std::size_t chunk_floats(std::size_t max_rows, std::size_t head_dim) {
  return 2 * round_up(max_rows * head_dim) + round_up(max_rows * kKvTile) + 4 * round_up(max_rows);
}

ChunkScratch carve_chunk(float* base, std::size_t max_rows, std::size_t head_dim) {
  ChunkScratch c;
  c.q = base;
  c.acc = c.q + round_up(max_rows * head_dim);
  c.s = c.acc + round_up(max_rows * head_dim);
  c.m = c.s + round_up(max_rows * kKvTile);
  c.l = c.m + round_up(max_rows);
  c.corr = c.l + round_up(max_rows);
  c.q_sum = c.corr + round_up(max_rows);
  return c;
}

// Query tokens of one work item: its rows (tokens x the group's heads) stay
// within kMaxRows.
std::size_t tokens_per_block(std::size_t group, std::size_t n_tokens) {
  const std::size_t t = group >= kMaxRows ? 1 : kMaxRows / group;
  return t < n_tokens ? t : n_tokens;
}

// A split item's unnormalised result, merged after the parallel region:
// acc [max_rows][head_dim], then m and l [max_rows].
std::size_t partial_floats(std::size_t max_rows, std::size_t head_dim) {
  return round_up(max_rows * head_dim) + 2 * round_up(max_rows);
}

void score_tile(const AttentionKernels& k, const KvArrays<std::int8_t>& kv, std::size_t row,
                const float* q, std::size_t ld_q, const float* q_sum, std::size_t rows,
                std::size_t n, float* s) {
  const std::size_t hd = kv.layout.head_dim;
  k.scores_q8(q, ld_q, rows, q_sum, kv.k + row * hd, kv.k_scale + row, kv.k_zero + row, n, hd, s,
              kKvTile);
}
void score_tile(const AttentionKernels& k, const KvArrays<float>& kv, std::size_t row,
                const float* q, std::size_t ld_q, const float*, std::size_t rows, std::size_t n,
                float* s) {
  const std::size_t hd = kv.layout.head_dim;
  k.scores_f32(q, ld_q, rows, kv.k + row * hd, n, hd, s, kKvTile);
}
void accumulate_tile(const AttentionKernels& k, const KvArrays<std::int8_t>& kv, std::size_t row,
                     const float* w, std::size_t rows, std::size_t n, const float* corr,
                     float* acc) {
  const std::size_t hd = kv.layout.head_dim;
  k.accumulate_q8(w, kKvTile, rows, kv.v + row * hd, kv.v_zero + row, n, hd, corr, acc, hd);
}
void accumulate_tile(const AttentionKernels& k, const KvArrays<float>& kv, std::size_t row,
                     const float* w, std::size_t rows, std::size_t n, const float* corr,
                     float* acc) {
  const std::size_t hd = kv.layout.head_dim;
  k.accumulate_f32(w, kKvTile, rows, kv.v + row * hd, n, hd, corr, acc, hd);
}

// sum_d x[d], in 8 independent chains: one chain of head_dim dependent adds
// per query row would cost more than the row's copy.
float row_sum(const float* x, std::size_t n) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::size_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (std::size_t i = 0; i < 8; ++i) part[i] += x[d + i];
  for (; d < n; ++d) part[0] += x[d];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// The first position a query at `pos` sees: 0, or the start of its window.
std::size_t window_start(const Problem& p, std::size_t pos) {
  const std::size_t w = p.options.window;
  return w != 0 && pos >= w ? pos - w + 1 : 0;
}

// Soft-caps and window-masks the tile's score rows [r0, r1) (tile positions
// p0 ..): a masked score is -inf, which the softmax turns into weight 0.
void shape_scores(const Problem& p, std::size_t t0, std::size_t r0, std::size_t r1, std::size_t p0,
                  std::size_t n, float* s) {
  const float cap = p.options.softcap;
  for (std::size_t r = r0; r < r1; ++r) {
    float* row = s + r * kKvTile;
    if (cap > 0.0f) softcap(row, n, cap);
    const std::size_t lo = window_start(p, p.start_pos + t0 + r / p.group);
    for (std::size_t j = 0; p0 + j < lo && j < n; ++j)
      row[j] = -std::numeric_limits<float>::infinity();
  }
}

// Item = (kv head g, query block qb, split sp): attends the block's query rows
// (all G heads of group g for tokens [t0, t1)) to the split's share of
// positions [window_start(start_pos + t0), start_pos + t1). With one split
// the result goes to out; otherwise the unnormalised state goes to `partial`.
template <typename T>
void run_item(const Problem& p, const KvArrays<T>& kv, std::size_t item, std::size_t splits,
              const ChunkScratch& c, float* partial) {
  const std::size_t hd = p.head_dim, G = p.group;
  const std::size_t sp = item % splits;
  const std::size_t qb = (item / splits) % p.n_qblocks;
  const std::size_t g = item / splits / p.n_qblocks;
  const std::size_t t0 = qb * p.tokens_per_block;
  const std::size_t t1 =
      t0 + p.tokens_per_block < p.n_tokens ? t0 + p.tokens_per_block : p.n_tokens;
  const std::size_t rows = (t1 - t0) * G;
  const std::size_t kv_begin = window_start(p, p.start_pos + t0), kv_end = p.start_pos + t1;
  const std::size_t span = kv_end - kv_begin;
  // One split walks tiles at multiples of kKvTile, as without a window, so
  // a row's tiles, and its result, do not depend on the chunk it came in
  // (prefix reuse runs a prompt's rest from wherever the cached prefix
  // ends); the positions before a row's window are masked.
  const std::size_t begin =
      splits == 1 ? kv_begin / kKvTile * kKvTile : kv_begin + span * sp / splits;
  const std::size_t end = kv_begin + span * (sp + 1) / splits;
  const std::size_t q_stride = p.n_heads * hd;

  // Rows are token-major (row = (t - t0) * G + head in group), so the rows
  // that see any position of a tile are a suffix of the block.
  // Each row's sum (for the int8 K zero points) once per item, not per tile.
  for (std::size_t r = 0; r < rows; ++r) {
    const float* src = p.q + (t0 + r / G) * q_stride + (g * G + r % G) * hd;
    float* dst = c.q + r * hd;
    for (std::size_t d = 0; d < hd; ++d) dst[d] = src[d] * p.scale;
    c.q_sum[r] = row_sum(dst, hd);
  }
  float* acc = c.acc;
  float* m = c.m;
  float* l = c.l;
  if (splits > 1) {
    acc = partial;
    m = partial + round_up(p.max_rows * hd);
    l = m + round_up(p.max_rows);
  }
  for (std::size_t i = 0; i < rows * hd; ++i) acc[i] = 0.0f;
  for (std::size_t r = 0; r < rows; ++r) {
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = 0.0f;
  }

  const std::size_t head_row = g * kv.layout.max_seq;  // first cache row of kv head g
  for (std::size_t p0 = begin; p0 < end; p0 += kKvTile) {
    const std::size_t n = end - p0 < kKvTile ? end - p0 : kKvTile;
    // Token t sees positions <= start_pos + t: the first token that sees p0.
    const std::size_t t_first = p0 > p.start_pos && p0 - p.start_pos > t0 ? p0 - p.start_pos : t0;
    const std::size_t r0 = (t_first - t0) * G;
    // With a window, the tokens whose window starts past this tile (a
    // suffix of the block) see none of it.
    std::size_t t_end = t1;
    while (t_end > t_first && window_start(p, p.start_pos + t_end - 1) >= p0 + n) --t_end;
    const std::size_t r1 = (t_end - t0) * G;
    if (r1 <= r0) continue;
    const std::size_t active = r1 - r0;
    score_tile(p.kernels, kv, head_row + p0, c.q + r0 * hd, hd, c.q_sum + r0, active, n,
               c.s + r0 * kKvTile);
    if (p.options.softcap > 0.0f || p.options.window != 0) shape_scores(p, t0, r0, r1, p0, n, c.s);
    const float* v_scale = kv.v_scale != nullptr ? kv.v_scale + head_row + p0 : nullptr;
    for (std::size_t r = r0; r < r1; ++r) {
      const std::size_t visible = p.start_pos + t0 + r / G + 1 - p0;
      c.corr[r] = p.kernels.softmax_row(c.s + r * kKvTile, visible < n ? visible : n, n, v_scale,
                                        &m[r], &l[r]);
    }
    accumulate_tile(p.kernels, kv, head_row + p0, c.s + r0 * kKvTile, active, n, c.corr + r0,
                    acc + r0 * hd);
  }

  if (splits == 1) {
    for (std::size_t r = 0; r < rows; ++r) {
      float* dst = p.out + (t0 + r / G) * q_stride + (g * G + r % G) * hd;
      const float inv = 1.0f / l[r];  // l >= 1: the max position contributes exp(0)
      for (std::size_t d = 0; d < hd; ++d) dst[d] = acc[r * hd + d] * inv;
    }
  }
}

// Combines the splits of item (g, qb): the softmax states (m_s, l_s, acc_s)
// rescaled to the common max.
void merge_splits(const Problem& p, std::size_t base_item, const float* partials,
                  std::size_t partial_stride) {
  const std::size_t hd = p.head_dim, G = p.group, S = p.splits;
  const std::size_t qb = base_item % p.n_qblocks, g = base_item / p.n_qblocks;
  const std::size_t t0 = qb * p.tokens_per_block;
  const std::size_t t1 =
      t0 + p.tokens_per_block < p.n_tokens ? t0 + p.tokens_per_block : p.n_tokens;
  const std::size_t rows = (t1 - t0) * G;
  const std::size_t m_off = round_up(p.max_rows * hd), l_off = m_off + round_up(p.max_rows);
  const float* first = partials + base_item * S * partial_stride;
  for (std::size_t r = 0; r < rows; ++r) {
    float mx = -std::numeric_limits<float>::infinity();
    for (std::size_t s = 0; s < S; ++s) mx = std::fmax(mx, first[s * partial_stride + m_off + r]);
    float* dst = p.out + (t0 + r / G) * p.n_heads * hd + (g * G + r % G) * hd;
    float total = 0.0f;
    for (std::size_t d = 0; d < hd; ++d) dst[d] = 0.0f;
    for (std::size_t s = 0; s < S; ++s) {
      const float* part = first + s * partial_stride;
      if (part[l_off + r] == 0.0f) continue;  // the split saw no position of this row
      const float f = std::exp(part[m_off + r] - mx);
      total += part[l_off + r] * f;
      for (std::size_t d = 0; d < hd; ++d) dst[d] += part[r * hd + d] * f;
    }
    const float inv = 1.0f / total;
    for (std::size_t d = 0; d < hd; ++d) dst[d] *= inv;
  }
}

template <typename View>
absl::Status validate(const float* q, std::size_t n_tokens, std::size_t start_pos,
                      std::size_t n_heads, const View& kv, bool null_cache, float scale,
                      const float* out, const AttentionOptions& options) {
  if (!(options.softcap >= 0.0f) || !std::isfinite(options.softcap))
    return absl::InvalidArgumentError(
        absl::StrCat("sdpa: options.softcap ", options.softcap, " must be finite and >= 0"));
  if (absl::Status s = validate_kv_layout(kv.layout); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat("sdpa: kv.layout: ", s.message()));
  const KvLayout& l = kv.layout;
  if (null_cache) return absl::InvalidArgumentError("sdpa: kv has a null array");
  if (n_heads == 0) return absl::InvalidArgumentError("sdpa: n_heads is 0");
  if (n_heads % l.n_kv_heads != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "sdpa: n_heads ", n_heads, " is not a multiple of kv.layout.n_kv_heads ", l.n_kv_heads));
  if (start_pos > l.max_seq || n_tokens > l.max_seq - start_pos)
    return absl::InvalidArgumentError(absl::StrCat("sdpa: start_pos ", start_pos, " + n_tokens ",
                                                   n_tokens, " exceeds kv.layout.max_seq ",
                                                   l.max_seq));
  if (n_tokens > 0 && (q == nullptr || out == nullptr))
    return absl::InvalidArgumentError("sdpa: q or out is null");
  if (!std::isfinite(scale))
    return absl::InvalidArgumentError(absl::StrCat("sdpa: scale ", scale, " is not finite"));
  std::size_t elems = 0;
  if (__builtin_mul_overflow(n_tokens, n_heads, &elems) ||
      __builtin_mul_overflow(elems, l.head_dim, &elems))
    return absl::InvalidArgumentError(
        absl::StrCat("sdpa: n_tokens ", n_tokens, " x n_heads ", n_heads, " overflows"));
  return absl::OkStatus();
}

template <typename T>
absl::Status run(const float* q, std::size_t n_tokens, std::size_t start_pos, std::size_t n_heads,
                 const KvArrays<T>& kv, float scale, float* out, MemoryAllocator& scratch,
                 ThreadPool* pool, const AttentionOptions& options) {
  if (n_tokens == 0) return absl::OkStatus();
  const KvLayout& layout = kv.layout;
  Problem p;
  p.q = q;
  p.out = out;
  p.n_tokens = n_tokens;
  p.start_pos = start_pos;
  p.n_heads = n_heads;
  p.group = n_heads / layout.n_kv_heads;
  p.head_dim = layout.head_dim;
  p.scale = scale;
  p.options = options;
  p.kernels = select_kernels(layout.head_dim);
  p.tokens_per_block = tokens_per_block(p.group, n_tokens);
  p.n_qblocks = (n_tokens + p.tokens_per_block - 1) / p.tokens_per_block;
  p.max_rows = p.tokens_per_block * p.group;

  // The plan (hence the scratch size) depends on the shapes and the pool,
  // never on start_pos: splits fill the threads when there are fewer
  // (kv head, query block) items than threads.
  const std::size_t threads = pool != nullptr ? pool->threads() : 1;
  const std::size_t base_items = layout.n_kv_heads * p.n_qblocks;
  const std::size_t plan_splits =
      threads > 1 && base_items < threads ? (threads + base_items - 1) / base_items : 1;
  const std::size_t plan_items = base_items * plan_splits;
  const std::size_t plan_chunks = plan_items < threads ? plan_items : threads;

  const std::size_t chunk_stride = chunk_floats(p.max_rows, p.head_dim);
  const std::size_t partial_stride = partial_floats(p.max_rows, p.head_dim);
  const std::size_t total =
      plan_chunks * chunk_stride + (plan_splits > 1 ? plan_items * partial_stride : 0);
  float* buf = scratch.allocate_array<float>(total);
  if (buf == nullptr)
    return absl::ResourceExhaustedError(absl::StrCat("sdpa: cannot allocate ",
                                                     total * sizeof(float),
                                                     " bytes of scratch (tiles, accumulators)"));
  float* const partials = buf + plan_chunks * chunk_stride;  // used when splitting

  // Multiply-adds of the QK^T half: rows x visible positions x head_dim.
  const double work = static_cast<double>(n_tokens) * static_cast<double>(n_heads) *
                      static_cast<double>(start_pos + (n_tokens + 1) / 2) *
                      static_cast<double>(p.head_dim);
  const bool parallel = plan_chunks > 1 && work >= static_cast<double>(kParallelWork);
  p.splits = parallel ? plan_splits : 1;
  const std::size_t items = base_items * p.splits;

  if (!parallel) {
    const ChunkScratch c = carve_chunk(buf, p.max_rows, p.head_dim);
    for (std::size_t i = 0; i < items; ++i) run_item(p, kv, i, 1, c, nullptr);
    return absl::OkStatus();
  }
  // Items are dealt round-robin, so each chunk gets a mix of early (short) and
  // late (long) query blocks of a causal prefill.
  pool->parallel_chunks(plan_chunks, plan_chunks, [&](std::size_t chunk, std::size_t, std::size_t) {
    const ChunkScratch c = carve_chunk(buf + chunk * chunk_stride, p.max_rows, p.head_dim);
    for (std::size_t i = chunk; i < items; i += plan_chunks)
      run_item(p, kv, i, p.splits, c, p.splits > 1 ? partials + i * partial_stride : nullptr);
  });
  if (p.splits > 1) {
    for (std::size_t b = 0; b < base_items; ++b) merge_splits(p, b, partials, partial_stride);
  }
  return absl::OkStatus();
}

}  // namespace

std::size_t sdpa_scratch_bytes(std::size_t n_tokens, std::size_t n_heads, std::size_t n_kv_heads,
                               std::size_t head_dim) {
  if (n_tokens == 0 || n_kv_heads == 0) return 0;
  const std::size_t group = n_heads / n_kv_heads;
  const std::size_t max_rows = tokens_per_block(group, n_tokens) * group;
  return chunk_floats(max_rows, head_dim) * sizeof(float) + MemoryAllocator::kDefaultAlignment;
}

absl::Status sdpa(const float* q, std::size_t n_tokens, std::size_t start_pos, std::size_t n_heads,
                  const QuantizedKvView& kv, float scale, float* out, MemoryAllocator& scratch,
                  ThreadPool* pool, const AttentionOptions& options) {
  const bool null_cache = kv.k == nullptr || kv.v == nullptr || kv.k_scale == nullptr ||
                          kv.v_scale == nullptr || kv.k_zero == nullptr || kv.v_zero == nullptr;
  HEARTH_RETURN_IF_ERROR(
      validate(q, n_tokens, start_pos, n_heads, kv, null_cache, scale, out, options));
  const KvArrays<std::int8_t> arrays{kv.k,      kv.v,      kv.k_scale, kv.v_scale,
                                     kv.k_zero, kv.v_zero, kv.layout};
  return run(q, n_tokens, start_pos, n_heads, arrays, scale, out, scratch, pool, options);
}

absl::Status sdpa(const float* q, std::size_t n_tokens, std::size_t start_pos, std::size_t n_heads,
                  const FloatKvView& kv, float scale, float* out, MemoryAllocator& scratch,
                  ThreadPool* pool, const AttentionOptions& options) {
  const bool null_cache = kv.k == nullptr || kv.v == nullptr;
  HEARTH_RETURN_IF_ERROR(
      validate(q, n_tokens, start_pos, n_heads, kv, null_cache, scale, out, options));
  const KvArrays<float> arrays{kv.k, kv.v, nullptr, nullptr, nullptr, nullptr, kv.layout};
  return run(q, n_tokens, start_pos, n_heads, arrays, scale, out, scratch, pool, options);
}

}  // namespace hearth::kernels
