// AVX-512 row kernels for kernels/quantize.h: 16 floats per vector, 64 per
// loop iteration, and masked loads/stores for the tail, so every length runs
// vectorised. vpmovsdb narrows int32 codes straight to int8.
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own
// _mm512_undefined_*() placeholders (GCC bug 105593, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "kernels/quantize_impl.h"
#include "kernels/simd_avx512.h"

namespace hearth::kernels::internal {
namespace {

// Software prefetch distance for streaming reads: far enough ahead to cover
// DRAM latency at one core's bandwidth, close enough to stay within L1.
constexpr std::size_t kAheadFloats = 256;  // 1 KiB

inline void prefetch4(const float* p) {  // the four cache lines at p
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(p + 16), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(p + 32), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(p + 48), _MM_HINT_T0);
}

struct Vq {
  __m512 inv, lo, hi;
  __m512i zp;
};

// The contract's multiply, clamp, round (cvtps rounds with the current mode,
// nearest-even) and zero-point add, on 16 values.
inline __m512i quantize16(__m512 x, const Vq& p) {
  __m512 v = _mm512_mul_ps(x, p.inv);
  v = _mm512_min_ps(_mm512_max_ps(v, p.lo), p.hi);
  return _mm512_add_epi32(_mm512_cvtps_epi32(v), p.zp);
}

inline void store16(std::int8_t* q, __m512i v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(v));
}

using avx512::tail_mask;

inline Vq channel_params(__mmask16 m, const float* scales, const std::int32_t* zero_points) {
  // Masked-off lanes load scale 1 (not 0) so the division stays exact and quiet.
  const __m512 s = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, scales);
  const __m512i zp = _mm512_maskz_loadu_epi32(m, zero_points);
  return Vq{_mm512_div_ps(_mm512_set1_ps(1.0f), s),
            _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_set1_epi32(-128), zp)),
            _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_set1_epi32(127), zp)), zp};
}

inline __m512 dequantize16(__m128i bytes, __m512i zp, __m512 scale) {
  const __m512i i = _mm512_cvtepi8_epi32(bytes);
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(i, zp)), scale);
}

}  // namespace

MinMax minmax_avx512(const float* x, std::size_t n) {
  const __m512 first = _mm512_set1_ps(x[0]);
  __m512 mn0 = first, mx0 = first, mn1 = first, mx1 = first, mn2 = first, mx2 = first, mn3 = first,
         mx3 = first;
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    prefetch4(x + i + kAheadFloats);
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16),
                 c = _mm512_loadu_ps(x + i + 32), d = _mm512_loadu_ps(x + i + 48);
    mn0 = _mm512_min_ps(mn0, a);
    mx0 = _mm512_max_ps(mx0, a);
    mn1 = _mm512_min_ps(mn1, b);
    mx1 = _mm512_max_ps(mx1, b);
    mn2 = _mm512_min_ps(mn2, c);
    mx2 = _mm512_max_ps(mx2, c);
    mn3 = _mm512_min_ps(mn3, d);
    mx3 = _mm512_max_ps(mx3, d);
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 a = _mm512_loadu_ps(x + i);
    mn0 = _mm512_min_ps(mn0, a);
    mx0 = _mm512_max_ps(mx0, a);
  }
  if (i < n) {
    // Masked-off lanes keep their accumulator value.
    const __mmask16 m = tail_mask(n - i);
    const __m512 a = _mm512_maskz_loadu_ps(m, x + i);
    mn1 = _mm512_mask_min_ps(mn1, m, mn1, a);
    mx1 = _mm512_mask_max_ps(mx1, m, mx1, a);
  }
  const __m512 mn = _mm512_min_ps(_mm512_min_ps(mn0, mn1), _mm512_min_ps(mn2, mn3));
  const __m512 mx = _mm512_max_ps(_mm512_max_ps(mx0, mx1), _mm512_max_ps(mx2, mx3));
  return MinMax{_mm512_reduce_min_ps(mn), _mm512_reduce_max_ps(mx)};
}

void quantize_row_avx512(const float* x, std::size_t n, RowParams rp, std::int8_t* q,
                         const float* next) {
  // Four cache lines of input per iteration; prefetch four lines of `next`
  // (or of x, a kilobyte ahead).
  const float* pf = next != nullptr ? next : x + kAheadFloats;
  const Vq p{_mm512_set1_ps(rp.inv), _mm512_set1_ps(rp.lo), _mm512_set1_ps(rp.hi),
             _mm512_set1_epi32(rp.zp)};
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    prefetch4(pf + i);
    const __m512i a = quantize16(_mm512_loadu_ps(x + i), p);
    const __m512i b = quantize16(_mm512_loadu_ps(x + i + 16), p);
    const __m512i c = quantize16(_mm512_loadu_ps(x + i + 32), p);
    const __m512i d = quantize16(_mm512_loadu_ps(x + i + 48), p);
    store16(q + i, a);
    store16(q + i + 16, b);
    store16(q + i + 32, c);
    store16(q + i + 48, d);
  }
  for (; i + 16 <= n; i += 16) store16(q + i, quantize16(_mm512_loadu_ps(x + i), p));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_cvtsepi32_storeu_epi8(q + i, m, quantize16(_mm512_maskz_loadu_ps(m, x + i), p));
  }
}

void quantize_channels_avx512(const float* x, std::size_t rows, std::size_t channels,
                              const float* scales, const std::int32_t* zero_points,
                              std::int8_t* q) {
  // One division per 16 channels serves every row of the tile.
  for (std::size_t c = 0; c < channels; c += 16) {
    const __mmask16 m =
        channels - c >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(channels - c);
    const Vq p = channel_params(m, scales + c, zero_points + c);
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t o = r * channels + c;
      _mm512_mask_cvtsepi32_storeu_epi8(q + o, m, quantize16(_mm512_maskz_loadu_ps(m, x + o), p));
    }
  }
}

void dequantize_row_avx512(const std::int8_t* q, std::size_t n, float scale, std::int32_t zp,
                           float* y) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i z = _mm512_set1_epi32(zp);
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (std::size_t j = 0; j < 64; j += 16) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i + j));
      _mm512_storeu_ps(y + i + j, dequantize16(b, z, s));
    }
  }
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
    _mm512_storeu_ps(y + i, dequantize16(b, z, s));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, dequantize16(_mm_maskz_loadu_epi8(m, q + i), z, s));
  }
}

void dequantize_channels_avx512(const std::int8_t* q, std::size_t rows, std::size_t channels,
                                const float* scales, const std::int32_t* zero_points, float* y) {
  for (std::size_t r = 0; r < rows; ++r, q += channels, y += channels) {
    for (std::size_t c = 0; c < channels; c += 16) {
      const __mmask16 m =
          channels - c >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(channels - c);
      const __m512 s = _mm512_maskz_loadu_ps(m, scales + c);
      const __m512i z = _mm512_maskz_loadu_epi32(m, zero_points + c);
      _mm512_mask_storeu_ps(y + c, m, dequantize16(_mm_maskz_loadu_epi8(m, q + c), z, s));
    }
  }
}

const QuantizeKernels kQuantizeAvx512 = {minmax_avx512, quantize_row_avx512,
                                         quantize_channels_avx512, dequantize_row_avx512,
                                         dequantize_channels_avx512};

}  // namespace hearth::kernels::internal
