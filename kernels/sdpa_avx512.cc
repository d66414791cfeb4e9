// AVX-512 inner loops of sdpa (kernels/sdpa_impl.h); head_dim a multiple of 16.
//
// Scores: a register block of R query rows x P positions keeps R*P vector
// accumulators along head_dim; each K row is loaded (and, for int8,
// converted) once per block and used by all R rows, which is how a GQA group
// shares its K reads. The R*P accumulators are reduced together by a
// transpose tree (15 adds for 16 dot products, not 16 separate reductions).
// Accumulation: R rows x 4 vectors of head_dim stay in registers while the
// tile's V rows stream past; the softmax weight is broadcast per (row,
// position). The int8 zero points cost one FMA per 16 scores (z * sum(q)) and
// one short dot product per output row and tile (zero_offsets), subtracted
// when the accumulators are loaded.
#include <immintrin.h>

#include <cstring>

#include "kernels/sdpa_impl.h"

namespace hearth::kernels::internal {
namespace {

HEARTH_SDPA_INLINE __m512 load_row(const std::int8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
HEARTH_SDPA_INLINE __m512 load_row(const float* p) { return _mm512_loadu_ps(p); }

__mmask16 first_lanes(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// Lane i of the result is the sum of the lanes of a[i].
HEARTH_SDPA_INLINE __m512 reduce16(const __m512* a) {
  __m512 t[8];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: [a b a b] partial sums
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                         _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  __m512 u[4];
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane: [a b c d]
    const __m512d x = _mm512_castps_pd(t[2 * i]), y = _mm512_castps_pd(t[2 * i + 1]);
    u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  __m512 v[2];
  for (int i = 0; i < 2; ++i)  // pairs of 128-bit lanes added
    v[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xdd));
  return _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x88),
                       _mm512_shuffle_f32x4(v[0], v[1], 0xdd));
}

// Dot products of R query rows with P consecutive K rows: lane r * P + p.
template <int R, int P, typename T>
HEARTH_SDPA_INLINE __m512 dot_block(const float* q, std::size_t ld_q, const T* k,
                                    std::size_t head_dim) {
  static_assert(R * P <= 16);
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (std::size_t d = 0; d < head_dim; d += 16) {
    __m512 kv[P];
    for (int p = 0; p < P; ++p) {
      prefetch_ahead(k + p * head_dim + d);
      kv[p] = load_row(k + p * head_dim + d);
    }
    for (int r = 0; r < R; ++r) {
      const __m512 qv = _mm512_loadu_ps(q + r * ld_q + d);
      for (int p = 0; p < P; ++p) acc[r * P + p] = _mm512_fmadd_ps(qv, kv[p], acc[r * P + p]);
    }
  }
  return reduce16(acc);
}

// k_scale[j .. j + P) repeated R times, to match dot_block's lanes.
template <int P>
HEARTH_SDPA_INLINE __m512 scale_lanes(const float* k_scale) {
  if constexpr (P == 8) return _mm512_broadcast_f32x8(_mm256_loadu_ps(k_scale));
  if constexpr (P == 4) return _mm512_broadcast_f32x4(_mm_loadu_ps(k_scale));
  return _mm512_set1_ps(k_scale[0]);
}

// k_zero[j .. j + P) as floats, repeated R times to match dot_block's lanes.
template <int P>
HEARTH_SDPA_INLINE __m512 zero_lanes(const std::int8_t* k_zero) {
  if constexpr (P == 8) {
    return _mm512_broadcast_f32x8(_mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(k_zero)))));
  }
  if constexpr (P == 4) {
    std::int32_t bytes = 0;
    std::memcpy(&bytes, k_zero, 4);
    return _mm512_broadcast_f32x4(_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(bytes))));
  }
  return _mm512_set1_ps(static_cast<float>(k_zero[0]));
}

// Lane r * P + p = q_sum[r].
template <int R, int P>
HEARTH_SDPA_INLINE __m512 row_lanes(const float* q_sum) {
  alignas(64) float lanes[16] = {};
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) lanes[r * P + p] = q_sum[r];
  return _mm512_load_ps(lanes);
}

// Writes lanes r * P + p of v to s[r * ld_s + p].
template <int R, int P>
HEARTH_SDPA_INLINE void store_block(__m512 v, float* s, std::size_t ld_s) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  for (int r = 0; r < R; ++r) std::memcpy(s + r * ld_s, lanes + r * P, P * sizeof(float));
}

// k_scale nullptr: float K (no scales, no zero points).
template <int R, int P, typename T>
void score_rows(const float* q, std::size_t ld_q, const float* q_sum, const T* k,
                const float* k_scale, const std::int8_t* k_zero, std::size_t n,
                std::size_t head_dim, float* s, std::size_t ld_s) {
  __m512 sum_p = _mm512_setzero_ps(), sum_1 = _mm512_setzero_ps();
  if (k_scale != nullptr) {
    sum_p = row_lanes<R, P>(q_sum);
    sum_1 = row_lanes<R, 1>(q_sum);
  }
  std::size_t j = 0;
  for (; j + P <= n; j += P) {
    __m512 v = dot_block<R, P>(q, ld_q, k + j * head_dim, head_dim);
    if (k_scale != nullptr) {
      v = _mm512_mul_ps(_mm512_fnmadd_ps(zero_lanes<P>(k_zero + j), sum_p, v),
                        scale_lanes<P>(k_scale + j));
    }
    store_block<R, P>(v, s + j, ld_s);
  }
  for (; j < n; ++j) {
    __m512 v = dot_block<R, 1>(q, ld_q, k + j * head_dim, head_dim);
    if (k_scale != nullptr) {
      v = _mm512_mul_ps(_mm512_fnmadd_ps(zero_lanes<1>(k_zero + j), sum_1, v),
                        scale_lanes<1>(k_scale + j));
    }
    store_block<R, 1>(v, s + j, ld_s);
  }
}

template <typename T>
void scores(const float* q, std::size_t ld_q, std::size_t rows, const float* q_sum, const T* k,
            const float* k_scale, const std::int8_t* k_zero, std::size_t n, std::size_t head_dim,
            float* s, std::size_t ld_s) {
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4)
    score_rows<4, 4>(q + r * ld_q, ld_q, q_sum + r, k, k_scale, k_zero, n, head_dim, s + r * ld_s,
                     ld_s);
  switch (rows - r) {
    case 3:
      score_rows<3, 4>(q + r * ld_q, ld_q, q_sum + r, k, k_scale, k_zero, n, head_dim, s + r * ld_s,
                       ld_s);
      break;
    case 2:
      score_rows<2, 8>(q + r * ld_q, ld_q, q_sum + r, k, k_scale, k_zero, n, head_dim, s + r * ld_s,
                       ld_s);
      break;
    case 1:
      score_rows<1, 8>(q + r * ld_q, ld_q, q_sum + r, k, k_scale, k_zero, n, head_dim, s + r * ld_s,
                       ld_s);
      break;
    default:
      break;
  }
}

void scores_q8(const float* q, std::size_t ld_q, std::size_t rows, const float* q_sum,
               const std::int8_t* k, const float* k_scale, const std::int8_t* k_zero, std::size_t n,
               std::size_t head_dim, float* s, std::size_t ld_s) {
  scores(q, ld_q, rows, q_sum, k, k_scale, k_zero, n, head_dim, s, ld_s);
}

void scores_f32(const float* q, std::size_t ld_q, std::size_t rows, const float* k, std::size_t n,
                std::size_t head_dim, float* s, std::size_t ld_s) {
  scores(q, ld_q, rows, static_cast<const float*>(nullptr), k, static_cast<const float*>(nullptr),
         static_cast<const std::int8_t*>(nullptr), n, head_dim, s, ld_s);
}

// exp(x) for x <= 88 (Cephes polynomial, ~2 ulp); 0 below -80, where the
// weight is under 2e-35 of the row's largest (which is 1) and would only
// produce denormals.
HEARTH_SDPA_INLINE __m512 exp16(__m512 x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-80.0f), _CMP_GE_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-80.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(y, n));
}

float softmax_row(float* s, std::size_t n_valid, std::size_t n, const float* v_scale, float* m,
                  float* l) {
  __m512 vmax = _mm512_set1_ps(-__builtin_inff());
  std::size_t j = 0;
  for (; j + 16 <= n_valid; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
  if (j < n_valid) {
    const __mmask16 k = first_lanes(n_valid - j);
    vmax = _mm512_mask_max_ps(vmax, k, vmax, _mm512_maskz_loadu_ps(k, s + j));
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  const float m_new = mx > *m ? mx : *m;
  const float corr = _mm512_cvtss_f32(exp16(_mm512_set1_ps(*m - m_new)));
  const __m512 vm = _mm512_set1_ps(m_new);
  __m512 sum = _mm512_setzero_ps();
  for (j = 0; j < n_valid; j += 16) {
    const __mmask16 k =
        n_valid - j >= 16 ? static_cast<__mmask16>(0xffff) : first_lanes(n_valid - j);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vm));
    sum = _mm512_mask_add_ps(sum, k, sum, e);
    const __m512 w =
        v_scale != nullptr ? _mm512_mul_ps(e, _mm512_maskz_loadu_ps(k, v_scale + j)) : e;
    _mm512_mask_storeu_ps(s + j, k, w);
  }
  for (j = n_valid; j < n; ++j) s[j] = 0.0f;
  *l = *l * corr + _mm512_reduce_add_ps(sum);
  *m = m_new;
  return corr;
}

// acc[r][d0 .. d0 + 16 * NV) for R rows over the tile's n positions, less
// off[r].
template <int R, int NV, typename T>
HEARTH_SDPA_INLINE void accumulate_block(const float* w, std::size_t ld_w, const T* v,
                                         std::size_t n, std::size_t head_dim, std::size_t d0,
                                         const float* corr, const float* off, float* acc,
                                         std::size_t ld_acc) {
  __m512 a[R][NV];
  for (int r = 0; r < R; ++r) {
    const __m512 c = _mm512_set1_ps(corr[r]), o = _mm512_set1_ps(off[r]);
    for (int x = 0; x < NV; ++x)
      a[r][x] = _mm512_fmsub_ps(_mm512_loadu_ps(acc + r * ld_acc + d0 + 16 * x), c, o);
  }
  for (std::size_t j = 0; j < n; ++j) {
    __m512 vv[NV];
    for (int x = 0; x < NV; ++x) {
      // One prefetch per 64-byte line: int8 rows need one per 4 vectors.
      if (sizeof(T) == 4 || x == 0) prefetch_ahead(v + j * head_dim + d0 + 16 * x);
      vv[x] = load_row(v + j * head_dim + d0 + 16 * x);
    }
    for (int r = 0; r < R; ++r) {
      const __m512 wr = _mm512_set1_ps(w[r * ld_w + j]);
      for (int x = 0; x < NV; ++x) a[r][x] = _mm512_fmadd_ps(wr, vv[x], a[r][x]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x) _mm512_storeu_ps(acc + r * ld_acc + d0 + 16 * x, a[r][x]);
}

// off[r] = sum_j w[r][j] * zero[j] over j < n: the zero points' share of
// output row r. Each 16 zero points are converted once for all R rows.
template <int R>
HEARTH_SDPA_INLINE void zero_offsets(const float* w, std::size_t ld_w, const std::int8_t* zero,
                                     std::size_t n, float* off) {
  __m512 sum[R];
  for (int r = 0; r < R; ++r) sum[r] = _mm512_setzero_ps();
  for (std::size_t j = 0; j < n; j += 16) {
    const __mmask16 k = n - j >= 16 ? static_cast<__mmask16>(0xffff) : first_lanes(n - j);
    const __m512 z = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, zero + j)));
    for (int r = 0; r < R; ++r)
      sum[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, w + r * ld_w + j), z, sum[r]);
  }
  for (int r = 0; r < R; ++r) off[r] = _mm512_reduce_add_ps(sum[r]);
}

// v_zero nullptr: float V, nothing subtracted.
template <int R, typename T>
void accumulate_rows(const float* w, std::size_t ld_w, const T* v, const std::int8_t* v_zero,
                     std::size_t n, std::size_t head_dim, const float* corr, float* acc,
                     std::size_t ld_acc) {
  float off[R] = {};
  if (v_zero != nullptr) zero_offsets<R>(w, ld_w, v_zero, n, off);
  std::size_t d0 = 0;
  for (; d0 + 64 <= head_dim; d0 += 64)
    accumulate_block<R, 4>(w, ld_w, v, n, head_dim, d0, corr, off, acc, ld_acc);
  for (; d0 < head_dim; d0 += 16)
    accumulate_block<R, 1>(w, ld_w, v, n, head_dim, d0, corr, off, acc, ld_acc);
}

template <typename T>
void accumulate(const float* w, std::size_t ld_w, std::size_t rows, const T* v,
                const std::int8_t* v_zero, std::size_t n, std::size_t head_dim, const float* corr,
                float* acc, std::size_t ld_acc) {
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4)
    accumulate_rows<4>(w + r * ld_w, ld_w, v, v_zero, n, head_dim, corr + r, acc + r * ld_acc,
                       ld_acc);
  switch (rows - r) {
    case 3:
      accumulate_rows<3>(w + r * ld_w, ld_w, v, v_zero, n, head_dim, corr + r, acc + r * ld_acc,
                         ld_acc);
      break;
    case 2:
      accumulate_rows<2>(w + r * ld_w, ld_w, v, v_zero, n, head_dim, corr + r, acc + r * ld_acc,
                         ld_acc);
      break;
    case 1:
      accumulate_rows<1>(w + r * ld_w, ld_w, v, v_zero, n, head_dim, corr + r, acc + r * ld_acc,
                         ld_acc);
      break;
    default:
      break;
  }
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

}  // namespace

const AttentionKernels kAvx512Attention = {
    scores_q8, scores_f32, softmax_row, accumulate_q8, accumulate_f32, 16, 0};
const AttentionKernels kAvx512VnniAttention = {scores_q8_avx512vnni, scores_f32,     softmax_row,
                                               accumulate_q8,        accumulate_f32, 16,
                                               kVnniMaxHeadDim};

}  // namespace hearth::kernels::internal
