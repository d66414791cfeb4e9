// AVX-512 (F/BW/VL/DQ) paths of the block operations (kernels/block_ops.h).
// Every helper here is file-local: this file is compiled with AVX-512 flags.
// Tails use mask registers, so no row length needs a scalar loop.
#include <immintrin.h>

#include <cstdint>

#include "kernels/block_ops_impl.h"
#include "kernels/simd_avx512.h"

namespace hearth::kernels::internal {
namespace {

constexpr std::size_t kW = 16;  // floats per register

// Lanes [0, n) for n in [0, 16].
using avx512::tail_mask;

// Pairwise halving: 16 -> 8 -> 4 -> 2 -> 1.
float hsum(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x as exp8 in block_ops_avx2.cc (same reduction and polynomial), with the
// final 2^k scaling done by vscalefps, which rounds once and handles
// subnormal results and overflow itself.
__m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, k);
}

// ---------------------------------------------------------------------------

void rms_norm_row(const float* x, const float* w, std::size_t dim, float eps, float* y) {
  // 64 partial sums; the tail's vectors go to acc0.
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  std::size_t i = 0;
  for (; i + 4 * kW <= dim; i += 4 * kW) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + kW);
    const __m512 c = _mm512_loadu_ps(x + i + 2 * kW), d = _mm512_loadu_ps(x + i + 3 * kW);
    acc0 = _mm512_fmadd_ps(a, a, acc0);
    acc1 = _mm512_fmadd_ps(b, b, acc1);
    acc2 = _mm512_fmadd_ps(c, c, acc2);
    acc3 = _mm512_fmadd_ps(d, d, acc3);
  }
  for (; i + kW <= dim; i += kW) {
    const __m512 a = _mm512_loadu_ps(x + i);
    acc0 = _mm512_fmadd_ps(a, a, acc0);
  }
  if (i < dim) {
    const __m512 a = _mm512_maskz_loadu_ps(tail_mask(dim - i), x + i);
    acc0 = _mm512_fmadd_ps(a, a, acc0);
  }
  const float sum = hsum(_mm512_add_ps(_mm512_add_ps(acc0, acc2), _mm512_add_ps(acc1, acc3)));
  const float mean = sum / static_cast<float>(dim);
  const __m512 scale = _mm512_set1_ps(1.0f / __builtin_sqrtf(mean + eps));
  for (i = 0; i < dim; i += kW) {
    const __mmask16 m = dim - i >= kW ? static_cast<__mmask16>(0xffff) : tail_mask(dim - i);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), scale);
    if (w != nullptr) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}

__m512 swiglu16(__m512 g, __m512 u) {
  const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

void swiglu(const float* gate, const float* up, std::size_t n, float* out) {
  std::size_t i = 0;
  for (; i + kW <= n; i += kW)
    _mm512_storeu_ps(out + i, swiglu16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(
        out + i, m, swiglu16(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void softmax_row(float* x, std::size_t n) {
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  __m512 mx = neg_inf;
  std::size_t i = 0;
  for (; i + kW <= n; i += kW) mx = _mm512_max_ps(mx, _mm512_loadu_ps(x + i));
  if (i < n) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(neg_inf, tail_mask(n - i), x + i));
  const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  i = 0;
  for (; i + 4 * kW <= n; i += 4 * kW) {
    const __m512 a = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax));
    const __m512 b = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + kW), vmax));
    const __m512 c = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 2 * kW), vmax));
    const __m512 d = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 3 * kW), vmax));
    _mm512_storeu_ps(x + i, a);
    _mm512_storeu_ps(x + i + kW, b);
    _mm512_storeu_ps(x + i + 2 * kW, c);
    _mm512_storeu_ps(x + i + 3 * kW, d);
    acc0 = _mm512_add_ps(acc0, a);
    acc1 = _mm512_add_ps(acc1, b);
    acc2 = _mm512_add_ps(acc2, c);
    acc3 = _mm512_add_ps(acc3, d);
  }
  for (; i + kW <= n; i += kW) {
    const __m512 a = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax));
    _mm512_storeu_ps(x + i, a);
    acc0 = _mm512_add_ps(acc0, a);
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 a =
        _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmax)));
    _mm512_mask_storeu_ps(x + i, m, a);
    acc0 = _mm512_add_ps(acc0, a);
  }
  const float sum = hsum(_mm512_add_ps(_mm512_add_ps(acc0, acc2), _mm512_add_ps(acc1, acc3)));
  const __m512 inv = _mm512_set1_ps(1.0f / sum);
  for (i = 0; i < n; i += kW) {
    const __mmask16 m = n - i >= kW ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
}

void exp_rows(const float* x, std::size_t n, float* y) {
  std::size_t i = 0;
  for (; i + kW <= n; i += kW) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void add(float* y, const float* x, std::size_t n) {
  std::size_t i = 0;
  for (; i + 2 * kW <= n; i += 2 * kW) {
    _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_loadu_ps(x + i)));
    _mm512_storeu_ps(y + i + kW,
                     _mm512_add_ps(_mm512_loadu_ps(y + i + kW), _mm512_loadu_ps(x + i + kW)));
  }
  for (; i < n; i += kW) {
    const __mmask16 m = n - i >= kW ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
    _mm512_mask_storeu_ps(
        y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, x + i)));
  }
}

void scale(float* y, float s, std::size_t n) {
  const __m512 vs = _mm512_set1_ps(s);
  for (std::size_t i = 0; i < n; i += kW) {
    const __mmask16 m = n - i >= kW ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), vs));
  }
}

// As rope_normal in block_ops_avx2.cc: fmaddsub(x, c, swap(x) * s) with the
// angles duplicated per pair.
void rope_normal(float* x, std::size_t n_heads, std::size_t head_stride, const float* cs,
                 const float* sn, std::size_t n_pairs) {
  alignas(64) float cd[2 * kRopeMaxPairs], sd[2 * kRopeMaxPairs];
  for (std::size_t i = 0; i < n_pairs; ++i) {
    cd[2 * i] = cd[2 * i + 1] = cs[i];
    sd[2 * i] = sd[2 * i + 1] = sn[i];
  }
  const std::size_t n = 2 * n_pairs;
  for (std::size_t i = n; i < 2 * kRopeMaxPairs && i % kW != 0; ++i) cd[i] = sd[i] = 0.0f;
  for (std::size_t h = 0; h < n_heads; ++h, x += head_stride) {
    for (std::size_t i = 0; i < n; i += kW) {
      const __mmask16 m = n - i >= kW ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
      const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
      const __m512 t = _mm512_mul_ps(_mm512_permute_ps(v, 0xb1), _mm512_load_ps(sd + i));
      _mm512_mask_storeu_ps(x + i, m, _mm512_fmaddsub_ps(v, _mm512_load_ps(cd + i), t));
    }
  }
}

void rope_neox(float* x, std::size_t n_heads, std::size_t head_stride, std::size_t half,
               const float* cs, const float* sn, std::size_t n_pairs) {
  for (std::size_t h = 0; h < n_heads; ++h, x += head_stride) {
    float* x1 = x + half;
    for (std::size_t i = 0; i < n_pairs; i += kW) {
      const __mmask16 m =
          n_pairs - i >= kW ? static_cast<__mmask16>(0xffff) : tail_mask(n_pairs - i);
      const __m512 a = _mm512_maskz_loadu_ps(m, x + i), b = _mm512_maskz_loadu_ps(m, x1 + i);
      const __m512 c = _mm512_maskz_loadu_ps(m, cs + i), s = _mm512_maskz_loadu_ps(m, sn + i);
      _mm512_mask_storeu_ps(x + i, m, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
      _mm512_mask_storeu_ps(x1 + i, m, _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
    }
  }
}

__m512 i8_to_ps(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }

void dequant_q8_0(const BlockQ8_0* in, float* y, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, y += kQuantGroup) {
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(in[b].d));
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in[b].qs));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in[b].qs + 16));
    _mm512_storeu_ps(y, _mm512_mul_ps(d, i8_to_ps(q0)));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(d, i8_to_ps(q1)));
  }
}

void dequant_q4_0(const BlockQ4_0* in, float* y, std::size_t n) {
  const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, y += kQuantGroup) {
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(in[b].d));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in[b].qs));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, low4), eight);                     // w 0..15
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low4), eight);  // w 16..31
    _mm512_storeu_ps(y, _mm512_mul_ps(d, i8_to_ps(lo)));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(d, i8_to_ps(hi)));
  }
}

void dequant_f16(const std::uint16_t* in, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; i += kW) {
    const __mmask16 m = n - i >= kW ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, in + i)));
  }
}

void dequant_bf16(const std::uint16_t* in, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; i += kW) {
    const __mmask16 m = n - i >= kW ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, in + i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
  }
}

}  // namespace

const BlockOpsKernels kBlockOpsAvx512 = {
    rms_norm_row, swiglu,    softmax_row,  exp_rows,     add,         scale,
    rope_normal,  rope_neox, dequant_q8_0, dequant_q4_0, dequant_f16, dequant_bf16,
};

}  // namespace hearth::kernels::internal
