// AVX2 row kernels for kernels/quantize.h: 8 floats per vector, 32 per loop
// iteration. Rows of at least 8 elements finish with one vector that overlaps
// the previous ones (recomputing identical values, which is harmless because
// input and output never alias); shorter rows go to the scalar reference.
#include <immintrin.h>

#include "kernels/quantize_impl.h"
#include "kernels/simd_avx2.h"

namespace hearth::kernels::internal {
namespace {

using avx2::hmax;
using avx2::hmin;

// Software prefetch distance for streaming reads: far enough ahead to cover
// DRAM latency at one core's bandwidth, close enough to stay within L1.
constexpr std::size_t kAheadFloats = 256;  // 1 KiB

inline void prefetch(const float* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

struct Vq {
  __m256 inv, lo, hi;
  __m256i zp;
};

// 8 codes as int32: the contract's multiply, clamp, round (cvtps rounds with
// the current mode, nearest-even) and zero-point add.
inline __m256i quantize8(const float* x, const Vq& p) {
  __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x), p.inv);
  v = _mm256_min_ps(_mm256_max_ps(v, p.lo), p.hi);
  return _mm256_add_epi32(_mm256_cvtps_epi32(v), p.zp);
}

// Values are already in [-128, 127], so the saturating packs only narrow.
inline void store8(std::int8_t* q, __m256i v) {
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(q), _mm_packs_epi16(w, w));
}

inline void store32(std::int8_t* q, __m256i a, __m256i b, __m256i c, __m256i d) {
  // The packs work within 128-bit lanes; the permute restores element order.
  const __m256i ab = _mm256_packs_epi32(a, b);
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i abcd = _mm256_packs_epi16(ab, cd);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_permutevar8x32_epi32(abcd, order));
}

inline Vq channel_params(const float* scales, const std::int32_t* zero_points) {
  const __m256i zp = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(zero_points));
  return Vq{_mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_loadu_ps(scales)),
            _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_set1_epi32(-128), zp)),
            _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_set1_epi32(127), zp)), zp};
}

inline __m256 dequantize8(const std::int8_t* q, __m256i zp, __m256 scale) {
  const __m256i i = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(i, zp)), scale);
}

}  // namespace

MinMax minmax_avx2(const float* x, std::size_t n) {
  if (n < 8) return minmax_scalar(x, n);
  // Four independent accumulators per bound hide the min/max latency.
  __m256 mn0 = _mm256_loadu_ps(x), mx0 = mn0, mn1 = mn0, mx1 = mn0, mn2 = mn0, mx2 = mn0, mn3 = mn0,
         mx3 = mn0;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch(x + i + kAheadFloats);
    prefetch(x + i + kAheadFloats + 16);
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8),
                 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
    mn0 = _mm256_min_ps(mn0, a);
    mx0 = _mm256_max_ps(mx0, a);
    mn1 = _mm256_min_ps(mn1, b);
    mx1 = _mm256_max_ps(mx1, b);
    mn2 = _mm256_min_ps(mn2, c);
    mx2 = _mm256_max_ps(mx2, c);
    mn3 = _mm256_min_ps(mn3, d);
    mx3 = _mm256_max_ps(mx3, d);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_loadu_ps(x + i);
    mn0 = _mm256_min_ps(mn0, a);
    mx0 = _mm256_max_ps(mx0, a);
  }
  if (i < n) {  // min and max are idempotent: overlapping the tail is free
    const __m256 a = _mm256_loadu_ps(x + n - 8);
    mn1 = _mm256_min_ps(mn1, a);
    mx1 = _mm256_max_ps(mx1, a);
  }
  const __m256 mn = _mm256_min_ps(_mm256_min_ps(mn0, mn1), _mm256_min_ps(mn2, mn3));
  const __m256 mx = _mm256_max_ps(_mm256_max_ps(mx0, mx1), _mm256_max_ps(mx2, mx3));
  return MinMax{hmin(mn), hmax(mx)};
}

void quantize_row_avx2(const float* x, std::size_t n, RowParams rp, std::int8_t* q,
                       const float* next) {
  if (n < 8) {
    quantize_row_scalar(x, n, rp, q, next);
    return;
  }
  // Two cache lines of input per iteration; prefetch two lines of `next`
  // (or of x, a kilobyte ahead).
  const float* pf = next != nullptr ? next : x + kAheadFloats;
  const Vq p{_mm256_set1_ps(rp.inv), _mm256_set1_ps(rp.lo), _mm256_set1_ps(rp.hi),
             _mm256_set1_epi32(rp.zp)};
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch(pf + i);
    prefetch(pf + i + 16);
    store32(q + i, quantize8(x + i, p), quantize8(x + i + 8, p), quantize8(x + i + 16, p),
            quantize8(x + i + 24, p));
  }
  for (; i + 8 <= n; i += 8) store8(q + i, quantize8(x + i, p));
  if (i < n) store8(q + n - 8, quantize8(x + n - 8, p));
}

void quantize_channels_avx2(const float* x, std::size_t rows, std::size_t channels,
                            const float* scales, const std::int32_t* zero_points, std::int8_t* q) {
  if (channels < 8) {
    quantize_channels_scalar(x, rows, channels, scales, zero_points, q);
    return;
  }
  // One division per 8 channels serves every row of the tile.
  for (std::size_t c = 0; c < channels; c += 8) {
    if (c + 8 > channels) c = channels - 8;  // overlapping last vector
    const Vq p = channel_params(scales + c, zero_points + c);
    for (std::size_t r = 0; r < rows; ++r)
      store8(q + r * channels + c, quantize8(x + r * channels + c, p));
  }
}

void dequantize_row_avx2(const std::int8_t* q, std::size_t n, float scale, std::int32_t zp,
                         float* y) {
  if (n < 8) {
    dequantize_row_scalar(q, n, scale, zp, y);
    return;
  }
  const __m256 s = _mm256_set1_ps(scale);
  const __m256i z = _mm256_set1_epi32(zp);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm256_storeu_ps(y + i, dequantize8(q + i, z, s));
    _mm256_storeu_ps(y + i + 8, dequantize8(q + i + 8, z, s));
    _mm256_storeu_ps(y + i + 16, dequantize8(q + i + 16, z, s));
    _mm256_storeu_ps(y + i + 24, dequantize8(q + i + 24, z, s));
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, dequantize8(q + i, z, s));
  if (i < n) _mm256_storeu_ps(y + n - 8, dequantize8(q + n - 8, z, s));
}

void dequantize_channels_avx2(const std::int8_t* q, std::size_t rows, std::size_t channels,
                              const float* scales, const std::int32_t* zero_points, float* y) {
  if (channels < 8) {
    dequantize_channels_scalar(q, rows, channels, scales, zero_points, y);
    return;
  }
  for (std::size_t r = 0; r < rows; ++r, q += channels, y += channels) {
    for (std::size_t c = 0; c < channels; c += 8) {
      if (c + 8 > channels) c = channels - 8;
      const __m256i z = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(zero_points + c));
      _mm256_storeu_ps(y + c, dequantize8(q + c, z, _mm256_loadu_ps(scales + c)));
    }
  }
}

const QuantizeKernels kQuantizeAvx2 = {minmax_avx2, quantize_row_avx2, quantize_channels_avx2,
                                       dequantize_row_avx2, dequantize_channels_avx2};

}  // namespace hearth::kernels::internal
