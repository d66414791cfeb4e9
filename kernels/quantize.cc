// The quantization family's rules, its scalar reference and its dispatch
// (kernels/quantize.h). The scalar loops are the specification every SIMD
// path (kernels/quantize_simd_body.h) reproduces bit for bit.
#include "kernels/quantize.h"

#include <cmath>

#include "kernels/cpu_features.h"
#include "kernels/linear_impl.h"
#include "kernels/quantize_impl.h"

namespace hearth::kernels {
namespace internal {

RowParams asymmetric_params(float lo, float hi) {
  const float range = hi - lo;
  RowParams p{0.0f, 0.0f, -128.0f, 127.0f, 0};
  if (!(range >= kTinyRange)) return p;  // also NaN: stored as zeros
  p.scale = range / 255.0f;
  p.inv = 255.0f / range;
  // lo * inv is in [-255, 0] up to rounding; lo itself maps to -128.
  const int z = -128 - static_cast<int>(std::nearbyint(lo * p.inv));
  p.zero_point = z < -128 ? -128 : (z > 127 ? 127 : z);
  p.lo = static_cast<float>(-128 - p.zero_point);
  p.hi = static_cast<float>(127 - p.zero_point);
  return p;
}

RowParams symmetric_params(float amax) {
  RowParams p{0.0f, 0.0f, -127.0f, 127.0f, 0};
  if (!(amax >= kTinyRange)) return p;
  p.scale = amax / 127.0f;
  p.inv = 1.0f / p.scale;
  return p;
}

namespace {

// One code, the clamp written as the SIMD max/min instructions compute it
// (max_ps(a, b) = a > b ? a : b), so the paths agree even on values outside
// the contract.
std::int8_t quantize_one(float x, const RowParams& p) {
  float v = x * p.inv;
  v = v > p.lo ? v : p.lo;
  v = v < p.hi ? v : p.hi;
  return static_cast<std::int8_t>(static_cast<std::int32_t>(std::nearbyint(v)) + p.zero_point);
}

Range range_scalar(const float* x, std::size_t n) {
  Range r;
  for (std::size_t i = 0; i < n; ++i) {
    r.lo = x[i] < r.lo ? x[i] : r.lo;
    r.hi = x[i] > r.hi ? x[i] : r.hi;
  }
  return r;
}

float amax_scalar(const float* x, std::size_t n) {
  float m = 0.0f;
  for (std::size_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));
  return m;
}

void quantize_row_scalar(const float* x, std::size_t n, const RowParams& p, std::int8_t* q) {
  for (std::size_t i = 0; i < n; ++i) q[i] = quantize_one(x[i], p);
}

const QuantizeKernels& active_kernels() {
  // AVX-512 VNNI has nothing of its own here: it uses the AVX-512 table.
  static constexpr PerIsaTables<QuantizeKernels> kTables{
      &kQuantizeScalar, HEARTH_SIMD_TABLE(kQuantizeAvx2), HEARTH_SIMD_TABLE(kQuantizeAvx512),
      nullptr};
  return kTables.active();
}

}  // namespace

const QuantizeKernels kQuantizeScalar = {range_scalar, quantize_row_scalar};

void quantize_activations_scalar(const float* x, std::size_t t0, std::size_t t1,
                                 std::int32_t bias_c, const QuantizedActivations& a) {
  const std::size_t n_in = a.blocks * kQuantGroup;
  for (std::size_t t = t0; t < t1; ++t) {
    const float* xt = x + t * n_in;
    const TokenSlot s = token_slot(a, t);
    RowParams p;
    if (a.per_token) {
      p = symmetric_params(amax_scalar(xt, n_in));
      a.d[t] = p.scale;
    }
    for (std::size_t b = 0; b < a.blocks; ++b) {
      const float* xb = xt + b * kQuantGroup;
      if (!a.per_token) {
        p = symmetric_params(amax_scalar(xb, kQuantGroup));
        a.d[s.meta + b * s.n] = p.scale;
      }
      std::int8_t* qb = s.q + b * (kQuantGroup / 4) * s.step;
      std::int32_t sum = 0, low = 0;
      for (std::size_t i = 0; i < kQuantGroup; ++i) {
        const std::int8_t c = quantize_one(xb[i], p);
        qb[i / 4 * s.step + i % 4] = c;
        sum += c;
        if (i < kQuantGroup / 2) low += c;
      }
      a.bias[s.meta + b * s.n] = -bias_c * sum;
      a.low_sum[s.meta + b * s.n] = low;
    }
  }
}

}  // namespace internal

QParams quantize_row_asymmetric(const float* x, std::size_t n, std::int8_t* q) {
  const internal::QuantizeKernels& k = internal::active_kernels();
  const internal::Range r = k.range(x, n);
  const internal::RowParams p = internal::asymmetric_params(r.lo, r.hi);
  k.quantize_row(x, n, p, q);
  return {p.scale, p.zero_point};
}

}  // namespace hearth::kernels
