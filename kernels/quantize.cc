#include "kernels/quantize.h"

#include <cmath>

#include "kernels/cpu_features.h"
#include "kernels/quantize_impl.h"

namespace hearth::kernels {

namespace internal {

MinMax minmax_scalar(const float* x, std::size_t n) {
  MinMax m{x[0], x[0]};
  for (std::size_t i = 1; i < n; ++i) {
    m.min = x[i] < m.min ? x[i] : m.min;
    m.max = x[i] > m.max ? x[i] : m.max;
  }
  return m;
}

namespace {

// The clamp written as the SIMD max/min instructions compute it (max_ps(a, b)
// = a > b ? a : b), so the paths agree even on values the contract excludes.
inline std::int8_t quantize_one(float x, float inv, float lo, float hi, std::int32_t zp) {
  float v = x * inv;
  v = v > lo ? v : lo;
  v = v < hi ? v : hi;
  return static_cast<std::int8_t>(static_cast<std::int32_t>(std::nearbyint(v)) + zp);
}

}  // namespace

void quantize_row_scalar(const float* x, std::size_t n, RowParams p, std::int8_t* q,
                         const float* /*next*/) {
  for (std::size_t i = 0; i < n; ++i) q[i] = quantize_one(x[i], p.inv, p.lo, p.hi, p.zp);
}

void quantize_channels_scalar(const float* x, std::size_t rows, std::size_t channels,
                              const float* scales, const std::int32_t* zero_points,
                              std::int8_t* q) {
  for (std::size_t r = 0; r < rows; ++r, x += channels, q += channels) {
    for (std::size_t c = 0; c < channels; ++c) {
      const std::int32_t zp = zero_points[c];
      q[c] = quantize_one(x[c], 1.0f / scales[c], static_cast<float>(-128 - zp),
                          static_cast<float>(127 - zp), zp);
    }
  }
}

void dequantize_row_scalar(const std::int8_t* q, std::size_t n, float scale, std::int32_t zp,
                           float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<float>(q[i] - zp) * scale;
}

void dequantize_channels_scalar(const std::int8_t* q, std::size_t rows, std::size_t channels,
                                const float* scales, const std::int32_t* zero_points, float* y) {
  for (std::size_t r = 0; r < rows; ++r, q += channels, y += channels) {
    for (std::size_t c = 0; c < channels; ++c)
      y[c] = static_cast<float>(q[c] - zero_points[c]) * scales[c];
  }
}

const QuantizeKernels kQuantizeScalar = {minmax_scalar, quantize_row_scalar,
                                         quantize_channels_scalar, dequantize_row_scalar,
                                         dequantize_channels_scalar};

}  // namespace internal

namespace {

using internal::MinMax;
using internal::RowParams;

constexpr std::int32_t kQMin = -128;
constexpr std::int32_t kQMax = 127;
constexpr std::int32_t kSymQMax = 127;

// A parallel chunk covers at least this many elements (64 KiB of floats), so
// each thread's share dwarfs the cost of waking it.
constexpr std::size_t kGrainElements = std::size_t{1} << 14;
// Per-tensor element ranges are split on multiples of this many elements, so
// chunk boundaries fall on whole cache lines of both input and output.
constexpr std::size_t kBlock = 64;
// Per-channel kernels amortise their 1/scale divisions over tiles of this many rows.
constexpr std::size_t kChannelRowTile = 4;

using internal::QuantizeKernels;

const QuantizeKernels& active_kernels() {
  using namespace internal;
  // AVX-512 VNNI has nothing of its own here: it uses the AVX-512 table.
  static constexpr PerIsaTables<QuantizeKernels> kTables{&kQuantizeScalar, &kQuantizeAvx2,
                                                         &kQuantizeAvx512, nullptr};
  return kTables.active();
}

bool parallel(const ThreadPool* pool, std::size_t elements) {
  return pool != nullptr && pool->threads() > 1 && elements >= kParallelMinElements;
}

// Rows per parallel chunk so that a chunk holds about kGrainElements elements.
std::size_t row_grain(std::size_t row_elements) {
  return row_elements >= kGrainElements ? 1 : (kGrainElements + row_elements - 1) / row_elements;
}

RowParams row_params(float scale, std::int32_t zp, std::int32_t qmin, std::int32_t qmax) {
  return RowParams{1.0f / scale, static_cast<float>(qmin - zp), static_cast<float>(qmax - zp), zp};
}

// Calls fn(begin, end) over [0, n) on the calling thread or split over the
// pool on kBlock boundaries.
template <typename F>
void for_elements(std::size_t n, ThreadPool* pool, F&& fn) {
  if (!parallel(pool, n)) {
    fn(std::size_t{0}, n);
    return;
  }
  const std::size_t blocks = (n + kBlock - 1) / kBlock;
  pool->parallel_for(blocks, kGrainElements / kBlock, [&](std::size_t b, std::size_t e) {
    const std::size_t end = e * kBlock < n ? e * kBlock : n;
    fn(b * kBlock, end);
  });
}

// Calls fn(begin, end) over rows [0, rows) of `row_elements` elements each.
template <typename F>
void for_rows(std::size_t rows, std::size_t row_elements, ThreadPool* pool, F&& fn) {
  if (rows == 0) return;
  if (!parallel(pool, rows * row_elements)) {
    fn(std::size_t{0}, rows);
    return;
  }
  pool->parallel_for(rows, row_grain(row_elements), fn);
}

MinMax minmax(const QuantizeKernels& k, const float* x, std::size_t n, ThreadPool* pool) {
  if (n == 0) return MinMax{0.0f, 0.0f};
  if (!parallel(pool, n)) return k.minmax(x, n);
  // One partial result per chunk, on the stack: no scratch memory needed.
  constexpr std::size_t kMaxChunks = 64;
  MinMax partial[kMaxChunks];
  std::size_t chunks = pool->threads() < kMaxChunks ? pool->threads() : kMaxChunks;
  const std::size_t by_grain = n / kGrainElements;
  if (by_grain < chunks) chunks = by_grain < 1 ? 1 : by_grain;
  pool->parallel_chunks(n, chunks, [&](std::size_t c, std::size_t b, std::size_t e) {
    partial[c] = b < e ? k.minmax(x + b, e - b) : MinMax{x[0], x[0]};
  });
  MinMax m = partial[0];
  for (std::size_t c = 1; c < chunks; ++c) {
    m.min = partial[c].min < m.min ? partial[c].min : m.min;
    m.max = partial[c].max > m.max ? partial[c].max : m.max;
  }
  return m;
}

}  // namespace

QParams choose_qparams_from_range(float min, float max, QScheme scheme) {
  // Extend the range to include 0, so that 0 (padding, ReLU output) is exact.
  double lo = min < 0.0f ? min : 0.0;
  double hi = max > 0.0f ? max : 0.0;

  if (scheme == QScheme::kSymmetric) {
    const double amax = -lo > hi ? -lo : hi;
    float scale = static_cast<float>(amax / kSymQMax);
    if (!(scale >= kMinScale)) scale = kMinScale;
    return QParams{scale, 0};
  }

  const double span = static_cast<double>(kQMax - kQMin);
  float scale = static_cast<float>((hi - lo) / span);
  if (!(scale >= kMinScale)) {
    // Widen the range around 0 so that it spans 255 steps of kMinScale,
    // keeping 0's relative position (and so the zero point) where the data
    // puts it.
    if (lo == 0.0) {
      hi = kMinScale * span;
    } else if (hi == 0.0) {
      lo = -kMinScale * span;
    } else {
      const double widen = kMinScale * span / (hi - lo);
      lo *= widen;
      hi *= widen;
    }
    scale = kMinScale;
  }

  // Two points fix the zero point: (lo, qmin) and (hi, qmax). The rounding
  // error of each solution is about machine epsilon times the magnitudes of
  // its terms, so take the one with the smaller terms.
  const double s = scale;
  const double from_min = kQMin - lo / s;
  const double from_max = kQMax - hi / s;
  const double min_terms = std::fabs(static_cast<double>(kQMin)) + std::fabs(lo / s);
  const double max_terms = std::fabs(static_cast<double>(kQMax)) + std::fabs(hi / s);
  const double z = min_terms < max_terms ? from_min : from_max;
  std::int32_t zp;
  if (!(z > kQMin)) {  // also catches NaN, which only invalid input could cause
    zp = kQMin;
  } else if (z >= kQMax) {
    zp = kQMax;
  } else {
    zp = static_cast<std::int32_t>(std::nearbyint(z));
  }
  return QParams{scale, zp};
}

QParams choose_qparams(const float* x, std::size_t n, QScheme scheme, ThreadPool* pool) {
  const MinMax m = minmax(active_kernels(), x, n, pool);
  return choose_qparams_from_range(m.min, m.max, scheme);
}

void choose_qparams_per_token(const float* x, std::size_t tokens, std::size_t dim, QScheme scheme,
                              float* scales, std::int32_t* zero_points, ThreadPool* pool) {
  const QuantizeKernels& k = active_kernels();
  for_rows(tokens, dim, pool, [&](std::size_t b, std::size_t e) {
    for (std::size_t t = b; t < e; ++t) {
      const MinMax m = dim == 0 ? MinMax{0.0f, 0.0f} : k.minmax(x + t * dim, dim);
      const QParams p = choose_qparams_from_range(m.min, m.max, scheme);
      scales[t] = p.scale;
      zero_points[t] = p.zero_point;
    }
  });
}

void quantize_per_tensor(const float* x, std::size_t n, QParams p, std::int8_t* q,
                         ThreadPool* pool) {
  const QuantizeKernels& k = active_kernels();
  const RowParams rp = row_params(p.scale, p.zero_point, kQMin, kQMax);
  for_elements(n, pool, [&](std::size_t b, std::size_t e) {
    k.quantize_row(x + b, e - b, rp, q + b, nullptr);
  });
}

void quantize_per_token(const float* x, std::size_t tokens, std::size_t dim, const float* scales,
                        const std::int32_t* zero_points, std::int8_t* q, ThreadPool* pool) {
  if (dim == 0) return;
  const QuantizeKernels& k = active_kernels();
  for_rows(tokens, dim, pool, [&](std::size_t b, std::size_t e) {
    for (std::size_t t = b; t < e; ++t) {
      k.quantize_row(x + t * dim, dim, row_params(scales[t], zero_points[t], kQMin, kQMax),
                     q + t * dim, nullptr);
    }
  });
}

void quantize_per_channel(const float* x, std::size_t rows, std::size_t channels,
                          const float* scales, const std::int32_t* zero_points, std::int8_t* q,
                          ThreadPool* pool) {
  if (channels == 0) return;
  const QuantizeKernels& k = active_kernels();
  for_rows(rows, channels, pool, [&](std::size_t b, std::size_t e) {
    for (std::size_t r = b; r < e; r += kChannelRowTile) {
      const std::size_t n = e - r < kChannelRowTile ? e - r : kChannelRowTile;
      k.quantize_channels(x + r * channels, n, channels, scales, zero_points, q + r * channels);
    }
  });
}

void dequantize_per_tensor(const std::int8_t* q, std::size_t n, QParams p, float* y,
                           ThreadPool* pool) {
  const QuantizeKernels& k = active_kernels();
  for_elements(n, pool, [&](std::size_t b, std::size_t e) {
    k.dequantize_row(q + b, e - b, p.scale, p.zero_point, y + b);
  });
}

void dequantize_per_token(const std::int8_t* q, std::size_t tokens, std::size_t dim,
                          const float* scales, const std::int32_t* zero_points, float* y,
                          ThreadPool* pool) {
  if (dim == 0) return;
  const QuantizeKernels& k = active_kernels();
  for_rows(tokens, dim, pool, [&](std::size_t b, std::size_t e) {
    for (std::size_t t = b; t < e; ++t)
      k.dequantize_row(q + t * dim, dim, scales[t], zero_points[t], y + t * dim);
  });
}

void dequantize_per_channel(const std::int8_t* q, std::size_t rows, std::size_t channels,
                            const float* scales, const std::int32_t* zero_points, float* y,
                            ThreadPool* pool) {
  if (channels == 0) return;
  const QuantizeKernels& k = active_kernels();
  for_rows(rows, channels, pool, [&](std::size_t b, std::size_t e) {
    k.dequantize_channels(q + b * channels, e - b, channels, scales, zero_points, y + b * channels);
  });
}

void quantize_dynamic_per_token(const float* x, std::size_t tokens, std::size_t dim, QScheme scheme,
                                std::int8_t* q, float* scales, std::int32_t* zero_points,
                                ThreadPool* pool) {
  const QuantizeKernels& k = active_kernels();
  const std::int32_t qmin = scheme == QScheme::kSymmetric ? -kSymQMax : kQMin;
  for_rows(tokens, dim, pool, [&](std::size_t b, std::size_t e) {
    for (std::size_t t = b; t < e; ++t) {
      const float* row = x + t * dim;
      const MinMax m = dim == 0 ? MinMax{0.0f, 0.0f} : k.minmax(row, dim);
      const QParams p = choose_qparams_from_range(m.min, m.max, scheme);
      scales[t] = p.scale;
      zero_points[t] = p.zero_point;
      if (dim != 0)
        // While this row (in L1) is quantized, the next row is fetched.
        k.quantize_row(row, dim, row_params(p.scale, p.zero_point, qmin, kQMax), q + t * dim,
                       t + 1 < e ? row + dim : nullptr);
    }
  });
}

}  // namespace hearth::kernels
