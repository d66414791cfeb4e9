// AVX2 inner loops of sdpa (kernels/sdpa_impl.h); head_dim a multiple of 8.
// Same structure as sdpa_avx512.cc with 8-lane vectors and smaller register
// blocks (16 registers): scores in R x P blocks of at most 8 accumulators,
// reduced together by an hadd tree; accumulation in R rows x 2 vectors. The
// int8 zero points cost one FMA per 8 scores and one short dot product per
// output row and tile (zero_offsets).
#include <immintrin.h>

#include <cstring>

#include "kernels/sdpa_impl.h"
#include "kernels/simd_avx2.h"

namespace hearth::kernels::internal {
namespace {

HEARTH_SDPA_INLINE __m256 load_row(const std::int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
HEARTH_SDPA_INLINE __m256 load_row(const float* p) { return _mm256_loadu_ps(p); }

// Lane i of the result is the sum of the lanes of a[i].
HEARTH_SDPA_INLINE __m256 reduce8(const __m256* a) {
  const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 x0 = _mm256_hadd_ps(h01, h23);  // per 128-bit half: a0 a1 a2 a3
  const __m256 x1 = _mm256_hadd_ps(h45, h67);  // per 128-bit half: a4 a5 a6 a7
  return _mm256_add_ps(_mm256_permute2f128_ps(x0, x1, 0x20), _mm256_permute2f128_ps(x0, x1, 0x31));
}

// Dot products of R query rows with P consecutive K rows: lane r * P + p.
template <int R, int P, typename T>
HEARTH_SDPA_INLINE __m256 dot_block(const float* q, std::size_t ld_q, const T* k,
                                    std::size_t head_dim) {
  static_assert(R * P <= 8);
  __m256 acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
  for (std::size_t d = 0; d < head_dim; d += 8) {
    __m256 kv[P];
    for (int p = 0; p < P; ++p) {
      prefetch_ahead(k + p * head_dim + d);
      kv[p] = load_row(k + p * head_dim + d);
    }
    for (int r = 0; r < R; ++r) {
      const __m256 qv = _mm256_loadu_ps(q + r * ld_q + d);
      for (int p = 0; p < P; ++p) acc[r * P + p] = _mm256_fmadd_ps(qv, kv[p], acc[r * P + p]);
    }
  }
  return reduce8(acc);
}

// k_scale[j .. j + P) repeated R times, to match dot_block's lanes.
template <int P>
HEARTH_SDPA_INLINE __m256 scale_lanes(const float* k_scale) {
  if constexpr (P == 8) return _mm256_loadu_ps(k_scale);
  if constexpr (P == 4) return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(k_scale));
  if constexpr (P == 2) {
    return _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(k_scale)));
  }
  return _mm256_broadcast_ss(k_scale);
}

// k_zero[j .. j + P) as floats, repeated R times to match dot_block's lanes.
template <int P>
HEARTH_SDPA_INLINE __m256 zero_lanes(const std::int8_t* k_zero) {
  if constexpr (P == 8) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(k_zero))));
  }
  if constexpr (P == 4 || P == 2) {
    std::uint32_t bytes = 0;
    std::memcpy(&bytes, k_zero, P);
    // P == 2: repeat the two bytes so the 4 lanes read z0 z1 z0 z1.
    if constexpr (P == 2) bytes *= 0x10001u;
    const __m128i z = _mm_cvtepi8_epi32(_mm_cvtsi32_si128(static_cast<int>(bytes)));
    return _mm256_cvtepi32_ps(_mm256_broadcastsi128_si256(z));
  }
  return _mm256_set1_ps(static_cast<float>(k_zero[0]));
}

// Lane r * P + p = q_sum[r].
template <int R, int P>
HEARTH_SDPA_INLINE __m256 row_lanes(const float* q_sum) {
  alignas(32) float lanes[8] = {};
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) lanes[r * P + p] = q_sum[r];
  return _mm256_load_ps(lanes);
}

// Writes lanes r * P + p of v to s[r * ld_s + p].
template <int R, int P>
HEARTH_SDPA_INLINE void store_block(__m256 v, float* s, std::size_t ld_s) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  for (int r = 0; r < R; ++r) std::memcpy(s + r * ld_s, lanes + r * P, P * sizeof(float));
}

// k_scale nullptr: float K (no scales, no zero points).
template <int R, int P, typename T>
void score_rows(const float* q, std::size_t ld_q, const float* q_sum, const T* k,
                const float* k_scale, const std::int8_t* k_zero, std::size_t n,
                std::size_t head_dim, float* s, std::size_t ld_s) {
  __m256 sum_p = _mm256_setzero_ps(), sum_1 = _mm256_setzero_ps();
  if (k_scale != nullptr) {
    sum_p = row_lanes<R, P>(q_sum);
    sum_1 = row_lanes<R, 1>(q_sum);
  }
  std::size_t j = 0;
  for (; j + P <= n; j += P) {
    __m256 v = dot_block<R, P>(q, ld_q, k + j * head_dim, head_dim);
    if (k_scale != nullptr) {
      v = _mm256_mul_ps(_mm256_fnmadd_ps(zero_lanes<P>(k_zero + j), sum_p, v),
                        scale_lanes<P>(k_scale + j));
    }
    store_block<R, P>(v, s + j, ld_s);
  }
  for (; j < n; ++j) {
    __m256 v = dot_block<R, 1>(q, ld_q, k + j * head_dim, head_dim);
    if (k_scale != nullptr) {
      v = _mm256_mul_ps(_mm256_fnmadd_ps(zero_lanes<1>(k_zero + j), sum_1, v),
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
    score_rows<4, 2>(q + r * ld_q, ld_q, q_sum + r, k, k_scale, k_zero, n, head_dim, s + r * ld_s,
                     ld_s);
  switch (rows - r) {
    case 3:
      score_rows<3, 2>(q + r * ld_q, ld_q, q_sum + r, k, k_scale, k_zero, n, head_dim, s + r * ld_s,
                       ld_s);
      break;
    case 2:
      score_rows<2, 4>(q + r * ld_q, ld_q, q_sum + r, k, k_scale, k_zero, n, head_dim, s + r * ld_s,
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

// exp(x) for x <= 88 (Cephes polynomial, ~2 ulp); 0 below -80 (see
// sdpa_avx512.cc).
HEARTH_SDPA_INLINE __m256 exp8(__m256 x) {
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-80.0f), _CMP_GE_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-80.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n by building the exponent; n is in [-116, 127].
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(keep, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

// Lanes [0, n) all ones, the rest zero (n <= 8).
__m256i first_lanes(std::size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

float softmax_row(float* s, std::size_t n_valid, std::size_t n, const float* v_scale, float* m,
                  float* l) {
  const __m256 neg_inf = _mm256_set1_ps(-__builtin_inff());
  __m256 vmax = neg_inf;
  std::size_t j = 0;
  for (; j + 8 <= n_valid; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + j));
  if (j < n_valid) {
    const __m256i k = first_lanes(n_valid - j);
    vmax = _mm256_max_ps(
        vmax, _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(s + j, k), _mm256_castsi256_ps(k)));
  }
  const float mx = avx2::hmax(vmax);
  const float m_new = mx > *m ? mx : *m;
  const float corr = _mm_cvtss_f32(_mm256_castps256_ps128(exp8(_mm256_set1_ps(*m - m_new))));
  const __m256 vm = _mm256_set1_ps(m_new);
  __m256 sum = _mm256_setzero_ps();
  for (j = 0; j + 8 <= n_valid; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
    sum = _mm256_add_ps(sum, e);
    _mm256_storeu_ps(s + j,
                     v_scale != nullptr ? _mm256_mul_ps(e, _mm256_loadu_ps(v_scale + j)) : e);
  }
  if (j < n_valid) {
    const __m256i k = first_lanes(n_valid - j);
    const __m256 e = _mm256_and_ps(_mm256_castsi256_ps(k),
                                   exp8(_mm256_sub_ps(_mm256_maskload_ps(s + j, k), vm)));
    sum = _mm256_add_ps(sum, e);
    _mm256_maskstore_ps(
        s + j, k, v_scale != nullptr ? _mm256_mul_ps(e, _mm256_maskload_ps(v_scale + j, k)) : e);
  }
  for (j = n_valid; j < n; ++j) s[j] = 0.0f;
  *l = *l * corr + avx2::hsum(sum);
  *m = m_new;
  return corr;
}

// acc[r][d0 .. d0 + 8 * NV) for R rows over the tile's n positions, less
// off[r].
template <int R, int NV, typename T>
HEARTH_SDPA_INLINE void accumulate_block(const float* w, std::size_t ld_w, const T* v,
                                         std::size_t n, std::size_t head_dim, std::size_t d0,
                                         const float* corr, const float* off, float* acc,
                                         std::size_t ld_acc) {
  __m256 a[R][NV];
  for (int r = 0; r < R; ++r) {
    const __m256 c = _mm256_set1_ps(corr[r]), o = _mm256_set1_ps(off[r]);
    for (int x = 0; x < NV; ++x)
      a[r][x] = _mm256_fmsub_ps(_mm256_loadu_ps(acc + r * ld_acc + d0 + 8 * x), c, o);
  }
  for (std::size_t j = 0; j < n; ++j) {
    __m256 vv[NV];
    for (int x = 0; x < NV; ++x) {
      // Float: one prefetch per 32-byte vector; int8: one per 16-byte block.
      if (sizeof(T) == 4 || x == 0) prefetch_ahead(v + j * head_dim + d0 + 8 * x);
      vv[x] = load_row(v + j * head_dim + d0 + 8 * x);
    }
    for (int r = 0; r < R; ++r) {
      const __m256 wr = _mm256_broadcast_ss(w + r * ld_w + j);
      for (int x = 0; x < NV; ++x) a[r][x] = _mm256_fmadd_ps(wr, vv[x], a[r][x]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x) _mm256_storeu_ps(acc + r * ld_acc + d0 + 8 * x, a[r][x]);
}

// off[r] = sum_j w[r][j] * zero[j] over j < n: the zero points' share of
// output row r. Each 8 zero points are converted once for all R rows.
template <int R>
HEARTH_SDPA_INLINE void zero_offsets(const float* w, std::size_t ld_w, const std::int8_t* zero,
                                     std::size_t n, float* off) {
  __m256 sum[R];
  for (int r = 0; r < R; ++r) sum[r] = _mm256_setzero_ps();
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 z = _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(zero + j))));
    for (int r = 0; r < R; ++r)
      sum[r] = _mm256_fmadd_ps(_mm256_loadu_ps(w + r * ld_w + j), z, sum[r]);
  }
  for (int r = 0; r < R; ++r) {
    off[r] = avx2::hsum(sum[r]);
    for (std::size_t t = j; t < n; ++t) off[r] += w[r * ld_w + t] * static_cast<float>(zero[t]);
  }
}

// v_zero nullptr: float V, nothing subtracted.
template <int R, typename T>
void accumulate_rows(const float* w, std::size_t ld_w, const T* v, const std::int8_t* v_zero,
                     std::size_t n, std::size_t head_dim, const float* corr, float* acc,
                     std::size_t ld_acc) {
  float off[R] = {};
  if (v_zero != nullptr) zero_offsets<R>(w, ld_w, v_zero, n, off);
  std::size_t d0 = 0;
  for (; d0 + 16 <= head_dim; d0 += 16)
    accumulate_block<R, 2>(w, ld_w, v, n, head_dim, d0, corr, off, acc, ld_acc);
  if (d0 < head_dim) accumulate_block<R, 1>(w, ld_w, v, n, head_dim, d0, corr, off, acc, ld_acc);
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

const AttentionKernels kAvx2Attention = {
    scores_q8, scores_f32, softmax_row, accumulate_q8, accumulate_f32, 8, 0};

}  // namespace hearth::kernels::internal
