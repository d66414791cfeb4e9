// The SIMD inner loops of sdpa (kernels/sdpa_impl.h's AttentionKernels),
// written once for every vector ISA. Not a normal header: an ISA's
// translation unit (sdpa_avx2.cc, sdpa_avx512.cc, sdpa_avx512vnni.cc)
// includes it inside its own anonymous namespace, after defining the
// primitives below for its vector type, so each ISA compiles its own copy
// with its own flags (the pattern Highway uses, without the dependency).
//
// Structure. Scores: a register block of R query rows x P positions keeps
// R*P vector accumulators along head_dim; each K row is loaded (and, for
// int8, converted) once per block and used by all R rows, which is how a GQA
// group shares its K reads. The R*P accumulators are reduced together
// (reduce_lanes: one transpose tree instead of R*P separate reductions).
// Accumulation: R rows x kAccVectors vectors of head_dim stay in registers
// while the tile's V rows stream past; the softmax weight is broadcast per
// (row, position). The int8 zero points cost one FMA per kLanes scores
// (z * sum(q)) and one short dot product per output row and tile
// (zero_offsets), subtracted when the accumulators are loaded.
//
// Primitives: the float-vector set of kernels/simd_avx2.h / simd_avx512.h
// (Vec, kLanes, loadu, fmadd, reduce_add, load_first, ...), brought in by a
// using-directive, and the attention-specific ones each ISA defines:
//   load_row(const int8_t* | const float*)  kLanes elements as floats
//   reduce_lanes(const Vec a[kLanes])       lane i = sum of a[i]'s lanes
//   scale_lanes<P>(k_scale), zero_lanes<P>(k_zero)
//                                 P consecutive values repeated over the lanes
//   kScorePositions[R]            P of the score block of R rows (R = 1..4)
//   kAccVectors                   vectors per accumulator row block
//
// The tile's positions are consumed in blocks of P, then one at a time;
// head_dim must be a multiple of kLanes (the table's head_dim_multiple).

#include "kernels/simd_exp_body.h"

// exp(x), but 0 below -80: a softmax weight there is under 2e-35 of the
// row's largest (which is 1) and would only produce denormals.
HEARTH_SDPA_INLINE Vec softmax_exp(Vec x) { return keep_at_least(x, -80.0f, exp_lanes(x)); }

// Calls fn.template operator()<R>(r) for the query rows [r, r + R) of
// `rows`, in blocks of 4 and one block of the 1-3 rows left.
template <typename Fn>
HEARTH_SDPA_INLINE void for_each_row_block(std::size_t rows, Fn&& fn) {
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4) fn.template operator()<4>(r);
  switch (rows - r) {
    case 3:
      fn.template operator()<3>(r);
      break;
    case 2:
      fn.template operator()<2>(r);
      break;
    case 1:
      fn.template operator()<1>(r);
      break;
    default:
      break;
  }
}

// Lane r * P + p = v[r]; the lanes past R * P are 0. T is float (a Vec) or
// any element type the ISA has a loadu for.
template <int R, int P, typename T>
HEARTH_SDPA_INLINE auto row_lanes(const T* v) {
  alignas(64) T lanes[kLanes] = {};
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) lanes[r * P + p] = v[r];
  return loadu(lanes);
}

// Writes lanes r * P + p of v to s[r * ld_s + p].
template <int R, int P>
HEARTH_SDPA_INLINE void store_block(Vec v, float* s, std::size_t ld_s) {
  alignas(64) float lanes[kLanes];
  storeu(lanes, v);
  for (int r = 0; r < R; ++r) std::memcpy(s + r * ld_s, lanes + r * P, P * sizeof(float));
}

// Dot products of R query rows with P consecutive K rows: lane r * P + p.
template <int R, int P, typename T>
HEARTH_SDPA_INLINE Vec dot_block(const float* q, std::size_t ld_q, const T* k,
                                 std::size_t head_dim) {
  static_assert(R * P <= static_cast<int>(kLanes));
  Vec acc[kLanes];
  for (std::size_t i = 0; i < kLanes; ++i) acc[i] = zero();
  for (std::size_t d = 0; d < head_dim; d += kLanes) {
    Vec kv[P];
    for (int p = 0; p < P; ++p) {
      prefetch_ahead(k + p * head_dim + d);
      kv[p] = load_row(k + p * head_dim + d);
    }
    for (int r = 0; r < R; ++r) {
      const Vec qv = loadu(q + r * ld_q + d);
      for (int p = 0; p < P; ++p) acc[r * P + p] = fmadd(qv, kv[p], acc[r * P + p]);
    }
  }
  return reduce_lanes(acc);
}

// k_scale nullptr: float K (no scales, no zero points).
template <int R, int P, typename T>
void score_rows(const float* q, std::size_t ld_q, const float* q_sum, const T* k,
                const float* k_scale, const std::int8_t* k_zero, std::size_t n,
                std::size_t head_dim, float* s, std::size_t ld_s) {
  Vec sum_p = zero(), sum_1 = zero();
  if (k_scale != nullptr) {
    sum_p = row_lanes<R, P>(q_sum);
    sum_1 = row_lanes<R, 1>(q_sum);
  }
  std::size_t j = 0;
  for (; j + P <= n; j += P) {
    Vec v = dot_block<R, P>(q, ld_q, k + j * head_dim, head_dim);
    if (k_scale != nullptr)
      v = mul(fnmadd(zero_lanes<P>(k_zero + j), sum_p, v), scale_lanes<P>(k_scale + j));
    store_block<R, P>(v, s + j, ld_s);
  }
  for (; j < n; ++j) {
    Vec v = dot_block<R, 1>(q, ld_q, k + j * head_dim, head_dim);
    if (k_scale != nullptr)
      v = mul(fnmadd(zero_lanes<1>(k_zero + j), sum_1, v), scale_lanes<1>(k_scale + j));
    store_block<R, 1>(v, s + j, ld_s);
  }
}

template <typename T>
void scores(const float* q, std::size_t ld_q, std::size_t rows, const float* q_sum, const T* k,
            const float* k_scale, const std::int8_t* k_zero, std::size_t n, std::size_t head_dim,
            float* s, std::size_t ld_s) {
  for_each_row_block(rows, [&]<int R>(std::size_t r) {
    score_rows<R, kScorePositions[R]>(q + r * ld_q, ld_q, k_scale != nullptr ? q_sum + r : nullptr,
                                      k, k_scale, k_zero, n, head_dim, s + r * ld_s, ld_s);
  });
}

// Unused where an ISA has its own int8 scores (AVX-512 VNNI).
[[maybe_unused]] void scores_q8(const float* q, std::size_t ld_q, std::size_t rows,
                                const float* q_sum, const std::int8_t* k, const float* k_scale,
                                const std::int8_t* k_zero, std::size_t n, std::size_t head_dim,
                                float* s, std::size_t ld_s) {
  scores(q, ld_q, rows, q_sum, k, k_scale, k_zero, n, head_dim, s, ld_s);
}

void scores_f32(const float* q, std::size_t ld_q, std::size_t rows, const float* k, std::size_t n,
                std::size_t head_dim, float* s, std::size_t ld_s) {
  scores(q, ld_q, rows, static_cast<const float*>(nullptr), k, static_cast<const float*>(nullptr),
         static_cast<const std::int8_t*>(nullptr), n, head_dim, s, ld_s);
}

float softmax_row(float* s, std::size_t n_valid, std::size_t n, const float* v_scale, float* m,
                  float* l) {
  const float neg_inf = -__builtin_inff();
  Vec vmax = set1(neg_inf);
  std::size_t j = 0;
  for (; j + kLanes <= n_valid; j += kLanes) vmax = max(vmax, loadu(s + j));
  if (j < n_valid) vmax = max(vmax, load_first(s + j, n_valid - j, neg_inf));
  const float mx = reduce_max(vmax);
  const float m_new = mx > *m ? mx : *m;
  const float corr = first_lane(softmax_exp(set1(*m - m_new)));
  const Vec vm = set1(m_new);
  Vec sum = zero();
  for (j = 0; j + kLanes <= n_valid; j += kLanes) {
    const Vec e = softmax_exp(sub(loadu(s + j), vm));
    sum = add(sum, e);
    storeu(s + j, v_scale != nullptr ? mul(e, loadu(v_scale + j)) : e);
  }
  if (j < n_valid) {
    const std::size_t left = n_valid - j;
    const Vec e = keep_first(softmax_exp(sub(load_first(s + j, left), vm)), left);
    sum = add(sum, e);
    store_first(s + j, v_scale != nullptr ? mul(e, load_first(v_scale + j, left)) : e, left);
  }
  for (j = n_valid; j < n; ++j) s[j] = 0.0f;
  *l = *l * corr + reduce_add(sum);
  *m = m_new;
  return corr;
}

// acc[r][d0 .. d0 + kLanes * NV) for R rows over the tile's n positions,
// less off[r].
template <int R, int NV, typename T>
HEARTH_SDPA_INLINE void accumulate_block(const float* w, std::size_t ld_w, const T* v,
                                         std::size_t n, std::size_t head_dim, std::size_t d0,
                                         const float* corr, const float* off, float* acc,
                                         std::size_t ld_acc) {
  Vec a[R][NV];
  for (int r = 0; r < R; ++r) {
    const Vec c = set1(corr[r]), o = set1(off[r]);
    for (int x = 0; x < NV; ++x) a[r][x] = fmsub(loadu(acc + r * ld_acc + d0 + kLanes * x), c, o);
  }
  for (std::size_t j = 0; j < n; ++j) {
    Vec vv[NV];
    for (int x = 0; x < NV; ++x) {
      // Float rows: one prefetch per vector; int8 rows (a quarter of the
      // bytes): one per block.
      if (sizeof(T) == 4 || x == 0) prefetch_ahead(v + j * head_dim + d0 + kLanes * x);
      vv[x] = load_row(v + j * head_dim + d0 + kLanes * x);
    }
    for (int r = 0; r < R; ++r) {
      const Vec wr = set1(w[r * ld_w + j]);
      for (int x = 0; x < NV; ++x) a[r][x] = fmadd(wr, vv[x], a[r][x]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x) storeu(acc + r * ld_acc + d0 + kLanes * x, a[r][x]);
}

// off[r] = sum_j w[r][j] * zero[j] over j < n: the zero points' share of
// output row r. Each kLanes zero points are converted once for all R rows.
// The tail is one padded vector, not a scalar loop: weights past the row's
// last valid position are 0 and add exactly 0 to their lane, so the sum does
// not depend on how many masked positions the tile carries (a prompt's rows
// get the same bits whatever chunks it was prefilled in).
template <int R>
HEARTH_SDPA_INLINE void zero_offsets(const float* w, std::size_t ld_w, const std::int8_t* zero_pts,
                                     std::size_t n, float* off) {
  Vec sum[R];
  for (int r = 0; r < R; ++r) sum[r] = zero();
  std::size_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const Vec z = load_i8(zero_pts + j);
    for (int r = 0; r < R; ++r) sum[r] = fmadd(loadu(w + r * ld_w + j), z, sum[r]);
  }
  if (j < n) {
    alignas(16) std::int8_t tail[kLanes] = {};
    std::memcpy(tail, zero_pts + j, n - j);
    const Vec z = load_i8(tail);
    for (int r = 0; r < R; ++r) sum[r] = fmadd(load_first(w + r * ld_w + j, n - j), z, sum[r]);
  }
  for (int r = 0; r < R; ++r) off[r] = reduce_add(sum[r]);
}

// v_zero nullptr: float V, nothing subtracted.
template <int R, typename T>
void accumulate_rows(const float* w, std::size_t ld_w, const T* v, const std::int8_t* v_zero,
                     std::size_t n, std::size_t head_dim, const float* corr, float* acc,
                     std::size_t ld_acc) {
  float off[R] = {};
  if (v_zero != nullptr) zero_offsets<R>(w, ld_w, v_zero, n, off);
  constexpr std::size_t kBlock = kLanes * kAccVectors;
  std::size_t d0 = 0;
  for (; d0 + kBlock <= head_dim; d0 += kBlock)
    accumulate_block<R, kAccVectors>(w, ld_w, v, n, head_dim, d0, corr, off, acc, ld_acc);
  for (; d0 < head_dim; d0 += kLanes)
    accumulate_block<R, 1>(w, ld_w, v, n, head_dim, d0, corr, off, acc, ld_acc);
}

template <typename T>
void accumulate(const float* w, std::size_t ld_w, std::size_t rows, const T* v,
                const std::int8_t* v_zero, std::size_t n, std::size_t head_dim, const float* corr,
                float* acc, std::size_t ld_acc) {
  for_each_row_block(rows, [&]<int R>(std::size_t r) {
    accumulate_rows<R>(w + r * ld_w, ld_w, v, v_zero, n, head_dim, corr + r, acc + r * ld_acc,
                       ld_acc);
  });
}

void accumulate_q8(const float* w, std::size_t ld_w, std::size_t rows, const std::int8_t* v,
                   const std::int8_t* v_zero, std::size_t n, std::size_t head_dim,
                   const float* corr, float* acc, std::size_t ld_acc) {
  accumulate(w, ld_w, rows, v, v_zero, n, head_dim, corr, acc, ld_acc);
}

void accumulate_f32(const float* w, std::size_t ld_w, std::size_t rows, const float* v,
                    std::size_t n, std::size_t head_dim, const float* corr, float* acc,
                    std::size_t ld_acc) {
  accumulate(w, ld_w, rows, v, static_cast<const std::int8_t*>(nullptr), n, head_dim, corr, acc,
             ld_acc);
}

// This ISA's table, with `q8_scores` for the int8 scores.
constexpr AttentionKernels attention_kernels(decltype(AttentionKernels::scores_q8) q8_scores,
                                             std::size_t max_head_dim) {
  return {q8_scores, scores_f32, softmax_row, accumulate_q8, accumulate_f32, kLanes, max_head_dim};
}
