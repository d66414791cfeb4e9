// AVX2 + FMA + F16C paths of the block operations (kernels/block_ops.h).
// Every helper here is file-local: this file is compiled with AVX2 flags.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/block_ops_impl.h"
#include "kernels/simd_avx2.h"

namespace hearth::kernels::internal {
namespace {

constexpr std::size_t kW = 8;  // floats per register

// Lanes [0, n) of a register for n in [0, 8].
__m256i tail_mask(std::size_t n) {
  alignas(32) static const std::int32_t kTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                      0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTable + 8 - n));
}

using avx2::hmax;
using avx2::hsum;

// e^x (see exp_f32 in block_ops.h): x = k ln2 + r, e^r by Cephes' expf
// polynomial, then two exact scalings by 2^(k/2) so that 2^k needs no special
// cases from the subnormal range (k = -150) to overflow (k = 128).
__m256 exp8(__m256 x) {
  // Clamp with x second so a NaN x passes through (max/min return the second
  // operand when one is NaN). Outside [-104, 89] the result is 0 or inf anyway.
  x = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 = 0.693359375 - 2.12194440e-4, the first part exact in 9 bits.
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  const __m256i ki = _mm256_cvtps_epi32(k);
  const __m256i k1 = _mm256_srai_epi32(ki, 1);
  const __m256i k2 = _mm256_sub_epi32(ki, k1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// ---------------------------------------------------------------------------

void rms_norm_row(const float* x, const float* w, std::size_t dim, float eps, float* y) {
  // 32 partial sums; the tail's vectors go to acc0.
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  std::size_t i = 0;
  for (; i + 4 * kW <= dim; i += 4 * kW) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + kW);
    const __m256 c = _mm256_loadu_ps(x + i + 2 * kW), d = _mm256_loadu_ps(x + i + 3 * kW);
    acc0 = _mm256_fmadd_ps(a, a, acc0);
    acc1 = _mm256_fmadd_ps(b, b, acc1);
    acc2 = _mm256_fmadd_ps(c, c, acc2);
    acc3 = _mm256_fmadd_ps(d, d, acc3);
  }
  for (; i + kW <= dim; i += kW) {
    const __m256 a = _mm256_loadu_ps(x + i);
    acc0 = _mm256_fmadd_ps(a, a, acc0);
  }
  if (i < dim) {
    const __m256 a = _mm256_maskload_ps(x + i, tail_mask(dim - i));
    acc0 = _mm256_fmadd_ps(a, a, acc0);
  }
  const float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc2), _mm256_add_ps(acc1, acc3)));
  const float mean = sum / static_cast<float>(dim);
  const __m256 scale = _mm256_set1_ps(1.0f / __builtin_sqrtf(mean + eps));
  i = 0;
  for (; i + kW <= dim; i += kW) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), scale);
    if (w != nullptr) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
    _mm256_storeu_ps(y + i, v);
  }
  if (i < dim) {
    const __m256i m = tail_mask(dim - i);
    __m256 v = _mm256_mul_ps(_mm256_maskload_ps(x + i, m), scale);
    if (w != nullptr) v = _mm256_mul_ps(v, _mm256_maskload_ps(w + i, m));
    _mm256_maskstore_ps(y + i, m, v);
  }
}

__m256 swiglu8(__m256 g, __m256 u) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void swiglu(const float* gate, const float* up, std::size_t n, float* out) {
  std::size_t i = 0;
  for (; i + kW <= n; i += kW)
    _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(out + i, m,
                        swiglu8(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m)));
  }
}

void softmax_row(float* x, std::size_t n) {
  const __m256 neg_inf = _mm256_set1_ps(-__builtin_inff());
  __m256 mx = neg_inf;
  std::size_t i = 0;
  for (; i + kW <= n; i += kW) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    mx = _mm256_max_ps(
        mx, _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(x + i, m), _mm256_castsi256_ps(m)));
  }
  const __m256 vmax = _mm256_set1_ps(hmax(mx));
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  i = 0;
  for (; i + 4 * kW <= n; i += 4 * kW) {
    const __m256 a = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    const __m256 b = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + kW), vmax));
    const __m256 c = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 2 * kW), vmax));
    const __m256 d = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 3 * kW), vmax));
    _mm256_storeu_ps(x + i, a);
    _mm256_storeu_ps(x + i + kW, b);
    _mm256_storeu_ps(x + i + 2 * kW, c);
    _mm256_storeu_ps(x + i + 3 * kW, d);
    acc0 = _mm256_add_ps(acc0, a);
    acc1 = _mm256_add_ps(acc1, b);
    acc2 = _mm256_add_ps(acc2, c);
    acc3 = _mm256_add_ps(acc3, d);
  }
  for (; i + kW <= n; i += kW) {
    const __m256 a = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    _mm256_storeu_ps(x + i, a);
    acc0 = _mm256_add_ps(acc0, a);
  }
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    // Masked-off lanes are zeroed after exp so they add nothing.
    const __m256 a = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), vmax)),
                                   _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(x + i, m, a);
    acc0 = _mm256_add_ps(acc0, a);
  }
  const float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc2), _mm256_add_ps(acc1, acc3)));
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  i = 0;
  for (; i + kW <= n; i += kW) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
  }
}

void exp_rows(const float* x, std::size_t n, float* y) {
  std::size_t i = 0;
  for (; i + kW <= n; i += kW) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, m, exp8(_mm256_maskload_ps(x + i, m)));
  }
}

void add(float* y, const float* x, std::size_t n) {
  std::size_t i = 0;
  for (; i + 2 * kW <= n; i += 2 * kW) {
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    _mm256_storeu_ps(y + i + kW,
                     _mm256_add_ps(_mm256_loadu_ps(y + i + kW), _mm256_loadu_ps(x + i + kW)));
  }
  for (; i + kW <= n; i += kW)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, m,
                        _mm256_add_ps(_mm256_maskload_ps(y + i, m), _mm256_maskload_ps(x + i, m)));
  }
}

void scale(float* y, float s, std::size_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  std::size_t i = 0;
  for (; i + kW <= n; i += kW) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vs));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(_mm256_maskload_ps(y + i, m), vs));
  }
}

// Interleaved pairs: with c = (c0 c0 c1 c1 ...), s = (s0 s0 s1 s1 ...) and
// x~ = x with neighbours swapped, fmaddsub(x, c, x~ * s) gives
// a c - b s in even lanes and b c + a s in odd lanes.
void rope_normal(float* x, std::size_t n_heads, std::size_t head_stride, const float* cs,
                 const float* sn, std::size_t n_pairs) {
  alignas(32) float cd[2 * kRopeMaxPairs], sd[2 * kRopeMaxPairs];
  for (std::size_t i = 0; i < n_pairs; ++i) {
    cd[2 * i] = cd[2 * i + 1] = cs[i];
    sd[2 * i] = sd[2 * i + 1] = sn[i];
  }
  const std::size_t n = 2 * n_pairs;
  // The tail vector reads a whole register of the tables.
  for (std::size_t i = n; i < 2 * kRopeMaxPairs && i % kW != 0; ++i) cd[i] = sd[i] = 0.0f;
  const __m256i m = tail_mask(n % kW);
  for (std::size_t h = 0; h < n_heads; ++h, x += head_stride) {
    std::size_t i = 0;
    for (; i + kW <= n; i += kW) {
      const __m256 v = _mm256_loadu_ps(x + i);
      const __m256 t = _mm256_mul_ps(_mm256_permute_ps(v, 0xb1), _mm256_load_ps(sd + i));
      _mm256_storeu_ps(x + i, _mm256_fmaddsub_ps(v, _mm256_load_ps(cd + i), t));
    }
    if (i < n) {
      const __m256 v = _mm256_maskload_ps(x + i, m);
      const __m256 t = _mm256_mul_ps(_mm256_permute_ps(v, 0xb1), _mm256_load_ps(sd + i));
      _mm256_maskstore_ps(x + i, m, _mm256_fmaddsub_ps(v, _mm256_load_ps(cd + i), t));
    }
  }
}

void rope_neox(float* x, std::size_t n_heads, std::size_t head_stride, std::size_t half,
               const float* cs, const float* sn, std::size_t n_pairs) {
  const __m256i m = tail_mask(n_pairs % kW);
  for (std::size_t h = 0; h < n_heads; ++h, x += head_stride) {
    float* x1 = x + half;
    std::size_t i = 0;
    for (; i + kW <= n_pairs; i += kW) {
      const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x1 + i);
      const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
      _mm256_storeu_ps(x + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
      _mm256_storeu_ps(x1 + i, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
    }
    if (i < n_pairs) {
      const __m256 a = _mm256_maskload_ps(x + i, m), b = _mm256_maskload_ps(x1 + i, m);
      const __m256 c = _mm256_maskload_ps(cs + i, m), s = _mm256_maskload_ps(sn + i, m);
      _mm256_maskstore_ps(x + i, m, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
      _mm256_maskstore_ps(x1 + i, m, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
    }
  }
}

// int8 lanes -> 8 floats, from the low 8 bytes of v.
__m256 i8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

void dequant_q8_0(const BlockQ8_0* in, float* y, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, y += kQuantGroup) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(in[b].d));
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in[b].qs));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in[b].qs + 16));
    _mm256_storeu_ps(y, _mm256_mul_ps(d, i8_to_ps(q0)));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(d, i8_to_ps(_mm_srli_si128(q0, 8))));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(d, i8_to_ps(q1)));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(d, i8_to_ps(_mm_srli_si128(q1, 8))));
  }
}

void dequant_q4_0(const BlockQ4_0* in, float* y, std::size_t n) {
  const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
  for (std::size_t b = 0; b < n / kQuantGroup; ++b, y += kQuantGroup) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(in[b].d));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in[b].qs));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, low4), eight);                     // w 0..15
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low4), eight);  // w 16..31
    _mm256_storeu_ps(y, _mm256_mul_ps(d, i8_to_ps(lo)));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(d, i8_to_ps(_mm_srli_si128(lo, 8))));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(d, i8_to_ps(hi)));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(d, i8_to_ps(_mm_srli_si128(hi, 8))));
  }
}

void dequant_f16(const std::uint16_t* in, float* y, std::size_t n) {
  std::size_t i = 0;
  for (; i + kW <= n; i += kW)
    _mm256_storeu_ps(y + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) y[i] = _cvtsh_ss(in[i]);
}

void dequant_bf16(const std::uint16_t* in, float* y, std::size_t n) {
  std::size_t i = 0;
  for (; i + kW <= n; i += kW) {
    const __m256i v =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
  }
  for (; i < n; ++i) {
    const std::uint32_t bits = static_cast<std::uint32_t>(in[i]) << 16;
    std::memcpy(y + i, &bits, sizeof bits);
  }
}

}  // namespace

const BlockOpsKernels kBlockOpsAvx2 = {
    rms_norm_row, swiglu,    softmax_row,  exp_rows,     add,         scale,
    rope_normal,  rope_neox, dequant_q8_0, dequant_q4_0, dequant_f16, dequant_bf16,
};

}  // namespace hearth::kernels::internal
