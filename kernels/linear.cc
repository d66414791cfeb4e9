#include "kernels/linear.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu_features.h"
#include "kernels/linear_impl.h"
#include "memory/streamed_buffer.h"

namespace hearth::kernels {

using internal::kBlocksPerSuper;
using internal::kGroupRows;
using internal::kQ4BlockBytes;
using internal::kQ4KDminOffset;
using internal::kQ4KMinOffset;
using internal::kQ4KScOffset;
using internal::kQ4KSuperScaleBytes;
using internal::kQ5BlockBytes;
using internal::kQ6BlockBytes;
using internal::kQ6KScOffset;
using internal::kQ6KSuperScaleBytes;
using internal::kQ8BlockBytes;
using internal::kScaleBytes;

namespace {

// Below this many multiply-adds a forward runs on the calling thread: waking
// the pool costs a few microseconds, about what ~1M int8 MACs take.
constexpr std::size_t kMinParallelMacs = std::size_t{1} << 20;
// A decode GEMV is memory-bound: splitting it pays off sooner (a 256 x 2048
// int4 matrix is ~300 KB, ~20 us on one core against ~3 us to wake the pool).
constexpr std::size_t kMinParallelGemvMacs = std::size_t{1} << 18;
// Activation quantization goes to the pool from this many inputs (~50 us).
constexpr std::size_t kMinParallelQuantize = std::size_t{1} << 16;
// A GEMV slice: the row groups one thread takes at a time on the GEMV path.
// Two of the 2-group decode tiles; the AVX2 Q8_0 / Q4_0 tile of 3 groups
// runs a lone slice as 3 + 1 (slices of 6 measured no better there and
// make a region's shared end 1.5x coarser: docs/performance.md).
constexpr std::size_t kGemvSliceGroups = 4;
// From this many tokens the matmul is a GEMM: threads split the tokens when
// there are too few row groups to split.
constexpr std::size_t kGemmTokens = 8;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// Tokens per activation tile for m tokens on an ISA whose widest register
// tile is `widest`: as few tiles as the widest allows, their widths differing
// by at most one (8 tokens on a 6-wide ISA run as 4 + 4, not 6 + 2: a narrow
// tile repeats the weights' unpacking for little work and leaves too few
// independent sums to hide the dot product's latency).
std::size_t balanced_tile_tokens(std::size_t m, std::size_t widest) {
  if (m <= widest) return m == 0 ? widest : m;
  const std::size_t tiles = (m + widest - 1) / widest;
  return (m + tiles - 1) / tiles;
}

const internal::LinearKernels& linear_kernels() {
  using namespace internal;
  static constexpr PerIsaTables<LinearKernels> kTables{
      &kLinearScalar, HEARTH_SIMD_TABLE(kLinearAvx2), HEARTH_SIMD_TABLE(kLinearAvx512),
      HEARTH_SIMD_TABLE(kLinearAvx512Vnni)};
  return kTables.active();
}

absl::Status check_shape(std::size_t n_out, std::size_t n_in, bool quantized) {
  if (n_out == 0) return absl::InvalidArgumentError("Linear: n_out must be positive, got 0");
  if (n_in == 0) return absl::InvalidArgumentError("Linear: n_in must be positive, got 0");
  if (quantized && n_in % kQuantGroup != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "Linear: n_in must be a multiple of 32 for quantized weights, got n_in=", n_in));
  std::size_t elems = 0;
  if (!MemoryAllocator::checked_mul(n_out, n_in, &elems) || elems > (std::size_t{1} << 40))
    return absl::InvalidArgumentError(
        absl::StrCat("Linear: n_out x n_in is too large: ", n_out, " x ", n_in));
  return absl::OkStatus();
}

bool is_half(Linear::Format f) { return f == Linear::Format::kF16 || f == Linear::Format::kBF16; }
// Formats whose activations are quantized to int8 (the integer kernels).
bool is_quantized(Linear::Format f) { return f != Linear::Format::kF32 && !is_half(f); }

// Bytes of a row group's block of 32 inputs (its integers) in a quantized format.
std::size_t packed_block_bytes(Linear::Format f) {
  switch (f) {
    case Linear::Format::kQ8_0:
      return kQ8BlockBytes;
    case Linear::Format::kQ6_K:
      return kQ6BlockBytes;
    case Linear::Format::kQ5_K:
    case Linear::Format::kQ5_0:
    case Linear::Format::kQ5_1:
      return kQ5BlockBytes;
    default:
      return kQ4BlockBytes;
  }
}

// Bytes of a row group's scales per block, in the formats with a scale per
// block (Q4_1 and Q5_1: d, then -m).
std::size_t packed_block_scale_bytes(Linear::Format f) {
  return f == Linear::Format::kQ4_1 || f == Linear::Format::kQ5_1 ? internal::kBlockMinScaleBytes
                                                                  : kScaleBytes;
}

// C of the activations a quantized format reads (QuantizedActivations::bias
// = -C * sum(q)): the unsigned bias of its stored weights (Q8_0, Q4_0, Q5_0;
// IQ4_NL's looked-up bytes are Q8_0's), or 1 for the K-quants, Q4_1 and
// Q5_1, whose kernels take the codes' sums themselves.
std::int32_t activation_bias(Linear::Format f) {
  switch (f) {
    case Linear::Format::kQ8_0:
    case Linear::Format::kIQ4_NL:
      return internal::kQ8Bias;
    case Linear::Format::kQ4_0:
      return internal::kQ4Bias;
    case Linear::Format::kQ5_0:
      return internal::kQ5Bias;
    case Linear::Format::kQ6_K:
      return internal::kQ6KBias;
    default:
      return internal::kQ4KBias;
  }
}
// Whether layers in formats a and b read the same quantized activations:
// both quantized, with the same C (Q4_K, Q5_K, Q6_K, Q4_1 and Q5_1 all take
// C = 1, so a Q4_K_M file's Q, K and a Q6_K V share theirs).
bool same_activations(Linear::Format a, Linear::Format b) {
  return is_quantized(a) && is_quantized(b) && activation_bias(a) == activation_bias(b);
}

// The shape and pointer of K-quant super-blocks (rows of whole super-blocks).
absl::Status check_k_quant(std::size_t n_out, std::size_t n_in, const void* w, const char* what) {
  HEARTH_RETURN_IF_ERROR(check_shape(n_out, n_in, true));
  if (n_in % kSuperBlock != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "Linear::", what, ": n_in must be a multiple of 256 for K-quants, got n_in=", n_in));
  if (w == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("Linear::", what, ": w is null"));
  return absl::OkStatus();
}

}  // namespace

void internal::AlignedFree::operator()(std::uint8_t* p) const noexcept { std::free(p); }

Linear::Linear(Linear&&) noexcept = default;
Linear& Linear::operator=(Linear&&) noexcept = default;
Linear::~Linear() = default;

std::size_t Linear::weight_bytes() const noexcept {
  if (format_ == Format::kF32) return n_out_ * (n_in_ + 1) * sizeof(float);
  return groups_ * group_stride_;
}

absl::StatusOr<Linear> Linear::allocate_packed(Format format, std::size_t n_out, std::size_t n_in,
                                               const std::shared_ptr<StreamedRegion>& region) {
  Linear l;
  l.format_ = format;
  l.n_in_ = n_in;
  l.n_out_ = n_out;
  l.groups_ = (n_out + kGroupRows - 1) / kGroupRows;
  if (is_half(format)) {  // input i's 16 halves at 32 i; no scales
    l.scales_offset_ = l.group_stride_ = round_up(n_in * kGroupRows * 2, 64);
  } else {
    const std::size_t blocks = n_in / kQuantGroup;
    const std::size_t block_bytes = packed_block_bytes(format);
    const std::size_t scale_bytes = format == Format::kQ4_K || format == Format::kQ5_K
                                        ? blocks / kBlocksPerSuper * kQ4KSuperScaleBytes
                                    : format == Format::kQ6_K
                                        ? blocks / kBlocksPerSuper * kQ6KSuperScaleBytes
                                        : blocks * packed_block_scale_bytes(format);
    l.scales_offset_ = blocks * block_bytes;  // block_bytes is a multiple of 64
    l.group_stride_ = l.scales_offset_ + round_up(scale_bytes, 64);
  }
  const std::size_t bytes = l.groups_ * l.group_stride_;
  // The region's piece shares ownership of the region (shared_ptr's
  // aliasing constructor); when it is full, an allocation of their own.
  if (std::uint8_t* piece = region != nullptr ? region->take(bytes) : nullptr) {
    l.packed_ = std::shared_ptr<std::uint8_t>(region, piece);
  } else if (auto* own = static_cast<std::uint8_t*>(allocate_streamed(bytes))) {
    l.packed_ = std::shared_ptr<std::uint8_t>(own, internal::AlignedFree{});
  }
  if (l.packed_ == nullptr)
    return absl::ResourceExhaustedError(
        absl::StrCat("Linear: cannot allocate ", bytes, " bytes of packed weights"));
  return l;
}

template <typename PackGroup>
void Linear::pack_groups(ThreadPool* pool, PackGroup&& pack_group) {
  // Padding rows and blocks: w = 0 (the stored bias value; K-quants, Q4_1,
  // Q5_1: q = 0 with scale and min 0; IQ4_NL, which has no 0, its 1 at index
  // 8; Q5_0: q = 0 with scale 0), scale 0.
  const std::uint8_t zero_w = format_ == Format::kQ8_0                                 ? 0x80
                              : format_ == Format::kQ4_0 || format_ == Format::kIQ4_NL ? 0x88
                                                                                       : 0x00;
  auto fill = [&](std::size_t g0, std::size_t g1) {
    for (std::size_t g = g0; g < g1; ++g) {
      std::uint8_t* group = packed_.get() + g * group_stride_;
      std::memset(group, zero_w, scales_offset_);
      std::memset(group + scales_offset_, 0, group_stride_ - scales_offset_);
      const std::size_t row0 = g * kGroupRows;
      pack_group(group, row0, std::min(kGroupRows, n_out_ - row0));
    }
  };
  // Groups are disjoint bytes; one group per claim is enough work (at
  // least 16 rows x n_in weights) to outweigh the claim.
  if (pool != nullptr) {
    pool->parallel_for(groups_, 1, fill);
  } else {
    fill(0, groups_);
  }
}

// Packs n_out rows of GGUF blocks into the row-group layout of
// kernels/linear_impl.h: `place(src, dst)` writes one block's integer
// weights for row r of its group at dst (= the group's block + 4r), and the
// block's fp16 scale goes to the group's scale array (Q4_1, Q5_1: its d,
// then -m).
template <typename Block, typename Place>
absl::StatusOr<Linear> Linear::pack_blocks(Format format, const Block* w, std::size_t n_out,
                                           std::size_t n_in, const char* what,
                                           const Packing& packing, Place place) {
  HEARTH_RETURN_IF_ERROR(check_shape(n_out, n_in, true));
  if (w == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("Linear::", what, ": w is null"));
  HEARTH_ASSIGN_OR_RETURN(auto l, allocate_packed(format, n_out, n_in, packing.region));
  const std::size_t blocks = n_in / kQuantGroup;
  const std::size_t block_bytes = packed_block_bytes(format);
  const std::size_t block_scales = packed_block_scale_bytes(format);
  const std::size_t scales_offset = l.scales_offset_;
  l.pack_groups(packing.pool, [&](std::uint8_t* group, std::size_t row0, std::size_t rows) {
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t b = 0; b < blocks; ++b) {
        const Block& src = w[(row0 + r) * blocks + b];
        place(src, group + b * block_bytes + r * 4);
        std::uint8_t* scales = group + scales_offset + b * block_scales;
        std::memcpy(scales + 2 * r, &src.d, 2);
        if constexpr (requires { src.m; }) {  // -m: the fp16's sign bit flipped (exact)
          const std::uint16_t negated = src.m ^ 0x8000u;
          std::memcpy(scales + kScaleBytes + 2 * r, &negated, 2);
        }
      }
    }
  });
  return l;
}

absl::StatusOr<Linear> Linear::from_q8_0(const BlockQ8_0* w, std::size_t n_out, std::size_t n_in,
                                         Packing packing) {
  return pack_blocks(Format::kQ8_0, w, n_out, n_in, "from_q8_0", packing,
                     [](const BlockQ8_0& src, std::uint8_t* dst) {
                       for (std::size_t s = 0; s < 8; ++s)
                         for (std::size_t j = 0; j < 4; ++j)  // w + 128
                           dst[s * 64 + j] = static_cast<std::uint8_t>(src.qs[4 * s + j]) ^ 0x80;
                     });
}

namespace {
// A Q4_0 or IQ4_NL block's GGUF bytes in Q4_0's places: bytes 4c..4c+3 of
// its nibbles at step c.
template <typename Block>
void place_nibbles(const Block& src, std::uint8_t* dst) {
  for (std::size_t c = 0; c < 4; ++c) std::memcpy(dst + c * 64, src.qs + 4 * c, 4);
}

// kIq4NlStored is kIq4NlValues + 128 (the kernels' copy, in linear_impl.h).
constexpr bool iq4_nl_stored_matches() {
  for (int i = 0; i < 16; ++i)
    if (internal::kIq4NlStored[i] != kIq4NlValues[i] + 128) return false;
  return true;
}
static_assert(iq4_nl_stored_matches());
}  // namespace

absl::StatusOr<Linear> Linear::from_q4_0(const BlockQ4_0* w, std::size_t n_out, std::size_t n_in,
                                         Packing packing) {
  return pack_blocks(Format::kQ4_0, w, n_out, n_in, "from_q4_0", packing, place_nibbles<BlockQ4_0>);
}

absl::StatusOr<Linear> Linear::from_iq4_nl(const BlockIQ4_NL* w, std::size_t n_out,
                                           std::size_t n_in, Packing packing) {
  return pack_blocks(Format::kIQ4_NL, w, n_out, n_in, "from_iq4_nl", packing,
                     place_nibbles<BlockIQ4_NL>);
}

namespace {

// One K-quant block's 32 q for one row, at dst (the group's block + 4 r), in
// the layout of kernels/linear_impl.h. Q4_K: byte k of step c holds
// q[4c + k] | q[16 + 4c + k] << 4 (Q4_0's pairing); Q5_K: its five steps;
// Q6_K: its two triples of steps.
template <Linear::Format kF>
void place_k_block(const std::uint8_t* q, std::uint8_t* dst) {
  if constexpr (kF == Linear::Format::kQ5_K) {
    for (std::size_t k = 0; k < 4; ++k) {
      const std::uint8_t* lo = q + k;       // L_c = lo[4c]
      const std::uint8_t* hi = q + 16 + k;  // H_c = hi[4c]
      auto put = [&](std::size_t step, unsigned v) {
        dst[64 * step + k] = static_cast<std::uint8_t>(v);
      };
      put(0, lo[0] | (hi[4] & 7u) << 5);
      put(1, lo[4] | (hi[4] >> 3u) << 5 | (hi[12] >> 4u) << 7);
      put(2, hi[0] | (hi[8] & 7u) << 5);
      put(3, lo[8] | (hi[8] >> 3u) << 5 | (hi[12] >> 3u & 1u) << 7);
      put(4, lo[12] | (hi[12] & 7u) << 5);
    }
    return;
  }
  if constexpr (kF == Linear::Format::kQ6_K) {
    for (std::size_t t = 0; t < 2; ++t)
      for (std::size_t k = 0; k < 4; ++k) {
        const std::size_t i = 8 * t + k;  // the triple's first input
        const std::uint8_t spread = q[16 + i + 4];
        std::uint8_t* step = dst + 3 * 64 * t + k;
        step[0] = static_cast<std::uint8_t>(q[i] | (spread & 3) << 6);
        step[64] = static_cast<std::uint8_t>(q[i + 4] | (spread >> 2 & 3) << 6);
        step[128] = static_cast<std::uint8_t>(q[16 + i] | (spread >> 4) << 6);
      }
    return;
  }
  for (std::size_t k = 0; k < 4; ++k)
    for (std::size_t c = 0; c < 4; ++c)
      dst[c * 64 + k] = static_cast<std::uint8_t>(q[4 * c + k] | q[16 + 4 * c + k] << 4);
}

// A super-block's row scales into its group's scales (row r): Q4_K and Q5_K
// d, dmin and the 6-bit sc and m of each block; Q6_K d and the int8 sc of
// each sub-block of 16.
template <typename Block>  // BlockQ4_K or BlockQ5_K
void place_k_scales(const Block& src, std::size_t r, std::uint8_t* scales) {
  std::memcpy(scales + 2 * r, &src.d, 2);
  std::memcpy(scales + kQ4KDminOffset + 2 * r, &src.dmin, 2);
  std::uint8_t sc[kBlocksPerSuper], m[kBlocksPerSuper];
  for (int j = 0; j < static_cast<int>(kBlocksPerSuper); ++j)
    k_scale_min(j, src.scales, &sc[j], &m[j]);
  for (std::size_t j = 0; j < kBlocksPerSuper; ++j)
    scales[kQ4KScOffset + kGroupRows * j + r] = static_cast<std::uint8_t>(sc[j] | (m[j] >> 4) << 6);
  for (std::size_t k = 0; k < kBlocksPerSuper / 2; ++k)
    scales[kQ4KMinOffset + kGroupRows * k + r] =
        static_cast<std::uint8_t>((m[k] & 0x0f) | (m[k + 4] & 0x0f) << 4);
}
void place_k_scales(const BlockQ6_K& src, std::size_t r, std::uint8_t* scales) {
  std::memcpy(scales + 2 * r, &src.d, 2);
  for (std::size_t k = 0; k < 16; ++k)
    scales[kQ6KScOffset + kGroupRows * k + r] = static_cast<std::uint8_t>(src.scales[k]);
}

void k_values(const BlockQ4_K& b, std::uint8_t* q) { q4_k_values(b, q); }
void k_values(const BlockQ5_K& b, std::uint8_t* q) { q5_k_values(b, q); }
void k_values(const BlockQ6_K& b, std::uint8_t* q) { q6_k_values(b, q); }

}  // namespace

// Q4_K, Q5_K and Q6_K: each super-block's q decoded once, then placed block
// by block; its scales go to the group's scales of that super-block.
template <typename Block>
absl::StatusOr<Linear> Linear::pack_k_quant(const Block* w, std::size_t n_out, std::size_t n_in,
                                            const char* what, const Packing& packing) {
  constexpr Format kF = std::is_same_v<Block, BlockQ4_K>   ? Format::kQ4_K
                        : std::is_same_v<Block, BlockQ5_K> ? Format::kQ5_K
                                                           : Format::kQ6_K;
  HEARTH_RETURN_IF_ERROR(check_k_quant(n_out, n_in, w, what));
  HEARTH_ASSIGN_OR_RETURN(auto l, allocate_packed(kF, n_out, n_in, packing.region));
  constexpr std::size_t kBlockBytes = kF == Format::kQ4_K   ? kQ4BlockBytes
                                      : kF == Format::kQ5_K ? kQ5BlockBytes
                                                            : kQ6BlockBytes;
  constexpr std::size_t kSuperScaleBytes =
      kF == Format::kQ6_K ? kQ6KSuperScaleBytes : kQ4KSuperScaleBytes;
  const std::size_t supers = n_in / kSuperBlock;
  const std::size_t scales_offset = l.scales_offset_;
  l.pack_groups(packing.pool, [&](std::uint8_t* group, std::size_t row0, std::size_t rows) {
    std::uint8_t q[kSuperBlock];
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t s = 0; s < supers; ++s) {
        const Block& src = w[(row0 + r) * supers + s];
        place_k_scales(src, r, group + scales_offset + s * kSuperScaleBytes);
        k_values(src, q);
        for (std::size_t j = 0; j < kBlocksPerSuper; ++j)
          place_k_block<kF>(q + 32 * j, group + (s * kBlocksPerSuper + j) * kBlockBytes + r * 4);
      }
    }
  });
  return l;
}

absl::StatusOr<Linear> Linear::from_q4_k(const BlockQ4_K* w, std::size_t n_out, std::size_t n_in,
                                         Packing packing) {
  return pack_k_quant(w, n_out, n_in, "from_q4_k", packing);
}

absl::StatusOr<Linear> Linear::from_q5_k(const BlockQ5_K* w, std::size_t n_out, std::size_t n_in,
                                         Packing packing) {
  return pack_k_quant(w, n_out, n_in, "from_q5_k", packing);
}

absl::StatusOr<Linear> Linear::from_q6_k(const BlockQ6_K* w, std::size_t n_out, std::size_t n_in,
                                         Packing packing) {
  return pack_k_quant(w, n_out, n_in, "from_q6_k", packing);
}

namespace {
// A Q5_0 or Q5_1 block's 5-bit q in Q5_K's steps.
template <typename Block>
void place_five_bits(const Block& src, std::uint8_t* dst) {
  std::uint8_t q[kQuantGroup];
  five_bit_codes(src.qs, src.qh, q);
  place_k_block<Linear::Format::kQ5_K>(q, dst);
}
}  // namespace

absl::StatusOr<Linear> Linear::from_q4_1(const BlockQ4_1* w, std::size_t n_out, std::size_t n_in,
                                         Packing packing) {
  return pack_blocks(Format::kQ4_1, w, n_out, n_in, "from_q4_1", packing, place_nibbles<BlockQ4_1>);
}

absl::StatusOr<Linear> Linear::from_q5_0(const BlockQ5_0* w, std::size_t n_out, std::size_t n_in,
                                         Packing packing) {
  return pack_blocks(Format::kQ5_0, w, n_out, n_in, "from_q5_0", packing,
                     place_five_bits<BlockQ5_0>);
}

absl::StatusOr<Linear> Linear::from_q5_1(const BlockQ5_1* w, std::size_t n_out, std::size_t n_in,
                                         Packing packing) {
  return pack_blocks(Format::kQ5_1, w, n_out, n_in, "from_q5_1", packing,
                     place_five_bits<BlockQ5_1>);
}

absl::StatusOr<Linear> Linear::from_f32(const float* w, std::size_t n_out, std::size_t n_in) {
  HEARTH_RETURN_IF_ERROR(check_shape(n_out, n_in, false));
  if (w == nullptr) return absl::InvalidArgumentError("Linear::from_f32: w is null");
  Linear l;
  l.format_ = Format::kF32;
  l.n_in_ = n_in;
  l.n_out_ = n_out;
  l.xnn_ = std::make_unique<internal::XnnpackFullyConnected>();
  HEARTH_RETURN_IF_ERROR(internal::xnnpack_create(w, n_out, n_in, *l.xnn_));
  return l;
}

absl::StatusOr<Linear> Linear::pack_half(Format format, const std::uint16_t* w, std::size_t n_out,
                                         std::size_t n_in, const char* what,
                                         const Packing& packing) {
  HEARTH_RETURN_IF_ERROR(check_shape(n_out, n_in, false));
  if (w == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("Linear::", what, ": w is null"));
  HEARTH_ASSIGN_OR_RETURN(auto l, allocate_packed(format, n_out, n_in, packing.region));
  l.pack_groups(packing.pool, [&](std::uint8_t* group, std::size_t row0, std::size_t rows) {
    auto* dst = reinterpret_cast<std::uint16_t*>(group);
    for (std::size_t i = 0; i < n_in; ++i)
      for (std::size_t r = 0; r < rows; ++r) dst[i * kGroupRows + r] = w[(row0 + r) * n_in + i];
  });
  return l;
}

absl::StatusOr<Linear> Linear::from_f16(const std::uint16_t* w, std::size_t n_out, std::size_t n_in,
                                        Packing packing) {
  return pack_half(Format::kF16, w, n_out, n_in, "from_f16", packing);
}

absl::StatusOr<Linear> Linear::from_bf16(const std::uint16_t* w, std::size_t n_out,
                                         std::size_t n_in, Packing packing) {
  return pack_half(Format::kBF16, w, n_out, n_in, "from_bf16", packing);
}

absl::Status Linear::forward(const float* x, std::size_t m, float* y, MemoryAllocator& scratch,
                             ThreadPool* pool, ActivationQuant aq) const {
  if (m == 0) return absl::OkStatus();
  if (x == nullptr || y == nullptr)
    return absl::InvalidArgumentError("Linear::forward: x and y must not be null");
  const std::size_t threads = pool != nullptr ? pool->threads() : 1;

  if (format_ == Format::kF32) {
    // Small products run on the caller: waking the pool costs more than they do.
    const bool parallel = threads > 1 && m * n_out_ * n_in_ >= kMinParallelMacs;
    return internal::xnnpack_run(*xnn_, x, m, y, parallel ? pool->handle() : nullptr);
  }
  if (is_half(format_)) {
    run_half(x, m, y, pool);
    return absl::OkStatus();
  }
  internal::QuantizedActivations a{};
  HEARTH_RETURN_IF_ERROR(quantize_input(x, m, scratch, pool, aq, a));
  run_quantized(a, y, pool);
  return absl::OkStatus();
}

absl::Status Linear::forward_same_input(std::span<const Linear* const> layers, const float* x,
                                        std::size_t m, std::span<float* const> ys,
                                        MemoryAllocator& scratch, ThreadPool* pool,
                                        ActivationQuant aq) {
  if (layers.size() != ys.size())
    return absl::InvalidArgumentError(absl::StrCat("Linear::forward_same_input: ", layers.size(),
                                                   " layers but ", ys.size(), " outputs"));
  if (layers.empty() || m == 0) return absl::OkStatus();
  const Linear& first = *layers[0];
  bool shared = is_quantized(first.format_);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (layers[i]->n_in_ != first.n_in_)
      return absl::InvalidArgumentError(absl::StrCat("Linear::forward_same_input: layer ", i,
                                                     " takes ", layers[i]->n_in_,
                                                     " inputs, layer 0 takes ", first.n_in_));
    if (x == nullptr || ys[i] == nullptr)
      return absl::InvalidArgumentError("Linear::forward_same_input: x and y must not be null");
    shared = shared && same_activations(layers[i]->format_, first.format_);
  }
  if (!shared) {  // float, half or formats quantized differently: nothing to share
    for (std::size_t i = 0; i < layers.size(); ++i)
      HEARTH_RETURN_IF_ERROR(layers[i]->forward(x, m, ys[i], scratch, pool, aq));
    return absl::OkStatus();
  }

  internal::QuantizedActivations a{};
  HEARTH_RETURN_IF_ERROR(first.quantize_input(x, m, scratch, pool, aq, a));
  const std::size_t slices = m == 1 ? count_gemv_slices(layers, pool) : 0;
  if (slices == 0) {
    for (std::size_t i = 0; i < layers.size(); ++i) layers[i]->run_quantized(a, ys[i], pool);
    return absl::OkStatus();
  }
  // One token: a single parallel region over the GEMV slices (kGemvSliceGroups row groups) of every
  // layer, in order, so no thread waits at the end of one layer while the
  // other still streams it.
  pool->parallel_for(slices, 1, [&](std::size_t u0, std::size_t u1) {
    std::size_t base = 0;
    for (std::size_t i = 0; i < layers.size() && base < u1; ++i) {
      const Linear& l = *layers[i];
      const std::size_t n_slices = l.gemv_slices();
      const std::size_t lo = u0 > base ? u0 - base : 0;
      const std::size_t hi = u1 - base < n_slices ? u1 - base : n_slices;
      if (lo < hi) {
        const std::size_t g1 =
            hi * kGemvSliceGroups < l.groups_ ? hi * kGemvSliceGroups : l.groups_;
        l.matmul_fn(a.per_token)(l.packed_weights(), a, lo * kGemvSliceGroups, g1, 0, 1, ys[i],
                                 l.n_out_);
      }
      base += n_slices;
    }
  });
  return absl::OkStatus();
}

std::size_t Linear::gemv_slices() const noexcept {
  return (groups_ + kGemvSliceGroups - 1) / kGemvSliceGroups;
}

std::size_t Linear::count_gemv_slices(std::span<const Linear* const> layers,
                                      const ThreadPool* pool) {
  if (pool == nullptr || pool->threads() <= 1 || layers.empty()) return 0;
  std::size_t macs = 0, slices = 0;
  for (const Linear* l : layers) {
    if (!same_activations(l->format_, layers[0]->format_)) return 0;
    macs += l->n_out_ * l->n_in_;
    slices += l->gemv_slices();
  }
  return macs < kMinParallelGemvMacs ? 0 : slices;
}

std::size_t Linear::hint_decode(std::span<const Linear* const> layers, ThreadPool* pool,
                                std::size_t bytes_per_worker) {
  const std::size_t slices = bytes_per_worker == 0 ? 0 : count_gemv_slices(layers, pool);
  if (slices == 0) return 0;
  // The split of forward_same_input / run_quantized: parallel_for over slices,
  // worker t's range starting at chunk chunks * t / threads.
  const std::size_t threads = pool->threads();
  const std::size_t chunks = pool->chunk_count(slices, 1);
  const std::size_t chunk = (slices + chunks - 1) / chunks;
  std::size_t told = 0;
  for (std::size_t t = 1; t < threads; ++t) {
    std::size_t u = chunks * t / threads * chunk;
    for (const Linear* l : layers) {
      const std::size_t n_slices = l->gemv_slices();
      if (u >= n_slices) {
        u -= n_slices;
        continue;
      }
      // A slice's row groups are adjacent: the worker reads its range from here on.
      const std::size_t offset = u * kGemvSliceGroups * l->group_stride_;
      const std::size_t left = l->groups_ * l->group_stride_ - offset;
      pool->hint_next_region(t, l->packed_.get() + offset,
                             left < bytes_per_worker ? left : bytes_per_worker);
      ++told;
      break;
    }
  }
  return told;
}

absl::Status Linear::quantize_input(const float* x, std::size_t m, MemoryAllocator& scratch,
                                    ThreadPool* pool, ActivationQuant aq,
                                    internal::QuantizedActivations& a) const {
  // Quantize the activations into scratch, in the token tiles the ISA's
  // kernels read (kernels/linear_impl.h).
  const internal::LinearKernels& k = linear_kernels();
  const std::size_t blocks = n_in_ / kQuantGroup;
  a.m = m;
  a.blocks = blocks;
  a.tile_tokens = balanced_tile_tokens(m, k.tile_tokens);
  a.q_tile_stride = round_up(a.tile_tokens * n_in_, 64);
  a.per_token = aq == ActivationQuant::kPerToken;
  a.decode_prefetch = decode_prefetch();
  const std::size_t tiles = (m + a.tile_tokens - 1) / a.tile_tokens;
  std::size_t q_bytes = 0, meta = 0;
  a.q = nullptr;
  a.d = nullptr;
  a.bias = nullptr;
  a.low_sum = nullptr;
  if (MemoryAllocator::checked_mul(tiles, a.q_tile_stride, &q_bytes) &&
      MemoryAllocator::checked_mul(m, blocks, &meta)) {
    a.q = scratch.allocate_array<std::int8_t>(q_bytes);
    a.d = scratch.allocate_array<float>(a.per_token ? m : meta);
    a.bias = scratch.allocate_array<std::int32_t>(meta);
    a.low_sum = scratch.allocate_array<std::int32_t>(meta);
  }
  if (a.q == nullptr || a.d == nullptr || a.bias == nullptr || a.low_sum == nullptr)
    return absl::ResourceExhaustedError(
        absl::StrCat("Linear::forward: cannot allocate the quantized activations (m=", m,
                     ", n_in=", n_in_, ") from scratch"));

  const std::int32_t bias_c = activation_bias(format_);
  const std::size_t threads = pool != nullptr ? pool->threads() : 1;
  if (threads > 1 && m > 1 && m * n_in_ >= kMinParallelQuantize) {
    pool->parallel_for(m, 1,
                       [&](std::size_t t0, std::size_t t1) { k.quantize(x, t0, t1, bias_c, a); });
  } else {
    k.quantize(x, 0, m, bias_c, a);
  }
  return absl::OkStatus();
}

internal::MatmulFn Linear::matmul_fn(bool per_token) const {
  const internal::LinearKernels& k = linear_kernels();
  if (format_ == Format::kQ8_0) return per_token ? k.q8_0_per_token : k.q8_0_per_group;
  if (format_ == Format::kQ4_0) return per_token ? k.q4_0_per_token : k.q4_0_per_group;
  if (format_ == Format::kQ4_K) return per_token ? k.q4_k_per_token : k.q4_k_per_group;
  if (format_ == Format::kQ5_K) return per_token ? k.q5_k_per_token : k.q5_k_per_group;
  if (format_ == Format::kQ6_K) return per_token ? k.q6_k_per_token : k.q6_k_per_group;
  if (format_ == Format::kQ5_0) return per_token ? k.q5_0_per_token : k.q5_0_per_group;
  if (format_ == Format::kQ4_1) return per_token ? k.q4_1_per_token : k.q4_1_per_group;
  if (format_ == Format::kQ5_1) return per_token ? k.q5_1_per_token : k.q5_1_per_group;
  return per_token ? k.iq4_nl_per_token : k.iq4_nl_per_group;
}

internal::PackedWeights Linear::packed_weights() const {
  return {packed_.get(), group_stride_, scales_offset_, n_in_ / kQuantGroup, n_out_};
}

bool Linear::worth_splitting(std::size_t m, const ThreadPool* pool) const {
  return pool != nullptr && pool->threads() > 1 &&
         m * n_out_ * n_in_ >= (m == 1 ? kMinParallelGemvMacs : kMinParallelMacs);
}

void Linear::run_half(const float* x, std::size_t m, float* y, ThreadPool* pool) const {
  const internal::LinearKernels& k = linear_kernels();
  const internal::HalfMatmulFn matmul = format_ == Format::kBF16 ? k.bf16 : k.f16;
  const internal::HalfWeights w{reinterpret_cast<const std::uint16_t*>(packed_.get()),
                                group_stride_ / 2, n_in_, n_out_};
  if (!worth_splitting(m, pool)) {
    matmul(w, x, m, 0, groups_, y);
    return;
  }
  // Threads split the outputs, never the sum over n_in (as run_quantized),
  // in chunks of 4 row groups: whole tiles of every ISA's half kernels.
  const std::size_t unit = kGemvSliceGroups;
  pool->parallel_for((groups_ + unit - 1) / unit, 1, [&](std::size_t u0, std::size_t u1) {
    matmul(w, x, m, u0 * unit, u1 * unit < groups_ ? u1 * unit : groups_, y);
  });
}

void Linear::run_quantized(const internal::QuantizedActivations& a, float* y,
                           ThreadPool* pool) const {
  const std::size_t m = a.m;
  const internal::PackedWeights w = packed_weights();
  const internal::MatmulFn matmul = matmul_fn(a.per_token);
  if (!worth_splitting(m, pool)) {
    matmul(w, a, 0, groups_, 0, m, y, n_out_);
    return;
  }
  // Threads split the outputs, never the sum over n_in, so results do not
  // depend on the thread count. Chunks are GEMV slices for one token, 2 row
  // groups (a register tile) otherwise; whole token tiles.
  const std::size_t unit = m == 1 ? kGemvSliceGroups : 2;
  const std::size_t units = (groups_ + unit - 1) / unit;
  if (m < kGemmTokens || units >= 2 * pool->threads()) {
    pool->parallel_for(units, 1, [&](std::size_t u0, std::size_t u1) {
      const std::size_t g1 = u1 * unit < groups_ ? u1 * unit : groups_;
      matmul(w, a, u0 * unit, g1, 0, m, y, n_out_);
    });
  } else {
    const std::size_t tt = a.tile_tokens;
    const std::size_t tiles = (m + tt - 1) / tt;
    pool->parallel_for(tiles, 1, [&](std::size_t p0, std::size_t p1) {
      matmul(w, a, 0, groups_, p0 * tt, p1 * tt < m ? p1 * tt : m, y, n_out_);
    });
  }
}

}  // namespace hearth::kernels
