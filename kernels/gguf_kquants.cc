#include "kernels/gguf_kquants.h"

#include <algorithm>
#include <cmath>

#include "kernels/fp16.h"

namespace hearth::kernels {
namespace {

void pack_k_scale_min(const std::uint8_t sc[8], const std::uint8_t m[8], std::uint8_t q[12]) {
  for (int j = 0; j < 12; ++j) q[j] = 0;
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] = sc[j];
      q[j + 4] = m[j];
    } else {
      q[j + 4] = static_cast<std::uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
      q[j - 4] |= static_cast<std::uint8_t>((sc[j] >> 4) << 6);
      q[j] |= static_cast<std::uint8_t>((m[j] >> 4) << 6);
    }
  }
}

// Asymmetric sub-block quantisation shared by Q4_K (nmax 15) and Q5_K (nmax 31):
// w = d*sc*q - dmin*m with 6-bit sc and m. Returns levels in L.
void quantize_super_block_asym(const float* x, int nmax, std::uint16_t* d_out,
                               std::uint16_t* dmin_out, std::uint8_t scales[12], std::uint8_t* L) {
  float sub_scale[8], sub_min[8];
  for (int j = 0; j < 8; ++j) {
    float lo = 0.0f, hi = 0.0f;  // the range includes 0, so mins are non-negative
    for (int i = 0; i < 32; ++i) {
      lo = std::min(lo, x[32 * j + i]);
      hi = std::max(hi, x[32 * j + i]);
    }
    sub_scale[j] = (hi - lo) / static_cast<float>(nmax);
    sub_min[j] = -lo;
  }
  const float max_scale = *std::max_element(sub_scale, sub_scale + 8);
  const float max_min = *std::max_element(sub_min, sub_min + 8);
  const float d = max_scale / 63.0f, dmin = max_min / 63.0f;
  *d_out = f32_to_fp16(d);
  *dmin_out = f32_to_fp16(dmin);
  const float dq = fp16_to_f32(*d_out), dminq = fp16_to_f32(*dmin_out);
  std::uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    // Round the scale up so the sub-block's range still fits in nmax levels.
    sc[j] = dq > 0 ? static_cast<std::uint8_t>(std::min(63.0f, std::ceil(sub_scale[j] / dq))) : 0;
    m[j] = dminq > 0
               ? static_cast<std::uint8_t>(std::min(63.0f, std::nearbyint(sub_min[j] / dminq)))
               : 0;
    const float s = dq * sc[j], mn = dminq * m[j];
    for (int i = 0; i < 32; ++i) {
      const int l = s > 0 ? static_cast<int>(std::nearbyint((x[32 * j + i] + mn) / s)) : 0;
      L[32 * j + i] = static_cast<std::uint8_t>(std::clamp(l, 0, nmax));
    }
  }
  pack_k_scale_min(sc, m, scales);
}

}  // namespace

void k_scale_min(int j, const std::uint8_t* q, std::uint8_t* sc, std::uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<std::uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void q4_k_values(const BlockQ4_K& block, std::uint8_t* q) {
  for (std::size_t pair = 0; pair < 4; ++pair, q += 64) {
    const std::uint8_t* qs = block.qs + 32 * pair;
    for (std::size_t l = 0; l < 32; ++l) {
      q[l] = qs[l] & 0x0f;
      q[32 + l] = qs[l] >> 4;
    }
  }
}

void q5_k_values(const BlockQ5_K& block, std::uint8_t* q) {
  for (std::size_t pair = 0; pair < 4; ++pair, q += 64) {
    const std::uint8_t* qs = block.qs + 32 * pair;
    const int j = 2 * static_cast<int>(pair);  // the even sub-block of the pair
    for (std::size_t l = 0; l < 32; ++l) {
      q[l] = static_cast<std::uint8_t>((qs[l] & 0x0f) | ((block.qh[l] >> j) & 1) << 4);
      q[32 + l] = static_cast<std::uint8_t>((qs[l] >> 4) | ((block.qh[l] >> (j + 1)) & 1) << 4);
    }
  }
}

void q6_k_values(const BlockQ6_K& block, std::uint8_t* q) {
  for (std::size_t half = 0; half < 2; ++half, q += 128) {
    const std::uint8_t* ql = block.ql + 64 * half;
    const std::uint8_t* qh = block.qh + 32 * half;
    for (std::size_t l = 0; l < 32; ++l) {
      q[l] = static_cast<std::uint8_t>((ql[l] & 0x0f) | (qh[l] & 3) << 4);
      q[32 + l] = static_cast<std::uint8_t>((ql[32 + l] & 0x0f) | ((qh[l] >> 2) & 3) << 4);
      q[64 + l] = static_cast<std::uint8_t>((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
      q[96 + l] = static_cast<std::uint8_t>((ql[32 + l] >> 4) | ((qh[l] >> 6) & 3) << 4);
    }
  }
}

namespace {

// Q4_K and Q5_K: sub-block j's w = d * sc_j * q - dmin * m_j, its q from the
// block's values (q4_k_values / q5_k_values).
template <typename Block, void (*kValues)(const Block&, std::uint8_t*)>
void dequantize_row_k_scaled(const Block* in, float* y, std::size_t n) {
  std::uint8_t q[kSuperBlock];
  for (std::size_t b = 0; b < n / kSuperBlock; ++b) {
    const float d = fp16_to_f32(in[b].d), dmin = fp16_to_f32(in[b].dmin);
    kValues(in[b], q);
    for (int j = 0; j < 8; ++j) {
      std::uint8_t sc, m;
      k_scale_min(j, in[b].scales, &sc, &m);
      const float dj = d * sc, mj = dmin * m;
      for (std::size_t l = 0; l < 32; ++l) *y++ = dj * static_cast<float>(q[32 * j + l]) - mj;
    }
  }
}

}  // namespace

void dequantize_row_q4_k(const BlockQ4_K* in, float* y, std::size_t n) {
  dequantize_row_k_scaled<BlockQ4_K, q4_k_values>(in, y, n);
}

void dequantize_row_q5_k(const BlockQ5_K* in, float* y, std::size_t n) {
  dequantize_row_k_scaled<BlockQ5_K, q5_k_values>(in, y, n);
}

void dequantize_row_q6_k(const BlockQ6_K* in, float* y, std::size_t n) {
  std::uint8_t q[kSuperBlock];
  for (std::size_t b = 0; b < n / kSuperBlock; ++b) {
    const float d = fp16_to_f32(in[b].d);
    q6_k_values(in[b], q);
    for (std::size_t e = 0; e < kSuperBlock; ++e)
      *y++ = d * in[b].scales[e / 16] * static_cast<float>(q[e] - 32);
  }
}

void quantize_row_q4_k(const float* x, BlockQ4_K* out, std::size_t n) {
  for (std::size_t b = 0; b < n / kSuperBlock; ++b, x += kSuperBlock) {
    std::uint8_t L[kSuperBlock];
    quantize_super_block_asym(x, 15, &out[b].d, &out[b].dmin, out[b].scales, L);
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        out[b].qs[32 * j + l] =
            static_cast<std::uint8_t>(L[64 * j + l] | (L[64 * j + 32 + l] << 4));
      }
    }
  }
}

void quantize_row_q5_k(const float* x, BlockQ5_K* out, std::size_t n) {
  for (std::size_t b = 0; b < n / kSuperBlock; ++b, x += kSuperBlock) {
    std::uint8_t L[kSuperBlock];
    quantize_super_block_asym(x, 31, &out[b].d, &out[b].dmin, out[b].scales, L);
    std::fill(out[b].qh, out[b].qh + 32, 0);
    for (int j = 0; j < 4; ++j) {
      const std::uint8_t u1 = static_cast<std::uint8_t>(1u << (2 * j)),
                         u2 = static_cast<std::uint8_t>(2u << (2 * j));
      for (int l = 0; l < 32; ++l) {
        const std::uint8_t lo = L[64 * j + l], hi = L[64 * j + 32 + l];
        out[b].qs[32 * j + l] = static_cast<std::uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        if (lo & 16) out[b].qh[l] |= u1;
        if (hi & 16) out[b].qh[l] |= u2;
      }
    }
  }
}

void quantize_row_q6_k(const float* x, BlockQ6_K* out, std::size_t n) {
  for (std::size_t b = 0; b < n / kSuperBlock; ++b, x += kSuperBlock) {
    float sub[16];
    for (int j = 0; j < 16; ++j) {
      float amax = 0.0f;
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[16 * j + i]));
      sub[j] = amax / 31.0f;
    }
    const float max_sub = *std::max_element(sub, sub + 16);
    const float d = max_sub / 127.0f;
    out[b].d = f32_to_fp16(d);
    const float dq = fp16_to_f32(out[b].d);
    std::uint8_t L[kSuperBlock];
    for (int j = 0; j < 16; ++j) {
      const int s = dq > 0 ? std::min(127, static_cast<int>(std::ceil(sub[j] / dq))) : 0;
      out[b].scales[j] = static_cast<std::int8_t>(s);
      const float step = dq * static_cast<float>(s);
      for (int i = 0; i < 16; ++i) {
        const int l = step > 0 ? static_cast<int>(std::nearbyint(x[16 * j + i] / step)) : 0;
        L[16 * j + i] = static_cast<std::uint8_t>(std::clamp(l, -32, 31) + 32);
      }
    }
    for (int half = 0; half < 2; ++half) {
      std::uint8_t* ql = out[b].ql + 64 * half;
      std::uint8_t* qh = out[b].qh + 32 * half;
      const std::uint8_t* Lh = L + 128 * half;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<std::uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<std::uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        qh[l] = static_cast<std::uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                          ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace hearth::kernels
