// Linear layers: y = x W^T, for weights in GGUF Q8_0, Q4_0, Q4_K, Q5_K, Q6_K,
// IQ4_NL, Q5_0, Q4_1 or Q5_1 blocks (integer dot products on activations
// quantized to int8 on the fly), in F16 or BF16 (float products on float
// activations, the weights kept as halves) or in F32 (through XNNPACK).
//
// Shapes: W has n_out rows of n_in weights (GGUF row-major, one row per output
// feature); x is m tokens x n_in floats, row-major; y is m x n_out floats,
// row-major. m = 1 is decode (a GEMV, memory-bound: the weights are read once
// per token), m >= ~8 is prefill (a GEMM, compute-bound: each weight tile is
// reused from cache for several tokens).
//
// Quantized path. The weights are repacked once, at load, into the layout the
// kernels read (see "Packed layout" below). At each forward the activations
// are quantized to int8 with the symmetric rule of kernels/quantize.h: d =
// amax / 127, q = round_half_even(x * (1 / d)) (an amax below kTinyRange gives
// d = 0 and q = 0), with amax taken per group of 32 inputs (kPerGroup32,
// the default, the same granularity as the weights) or per token (kPerToken:
// coarser, hence less accurate, but the GEMM saves one multiply per block).
// For each output row, each block of 32 inputs gives an exact int32 dot
// product of the integer weights and activations, and blocks are accumulated
// in order, in float:
//   kPerGroup32: acc = fma(float(dot_b), d_w[b] * d_x[b], acc);  y = acc
//   kPerToken:   acc = fma(float(dot_b), d_w[b], acc);            y = acc * d_x
// Q4_K and Q5_K (super-blocks of 8 blocks: w = d * sc_b * q - dmin * m_b, q unsigned)
// takes d_w[b] = d * sc_b (exact in float) and adds its block's mins right
// after, with s_b = -sum(q_x of block b):
//   kPerGroup32: acc = fma(dmin * m_b, d_x[b] * s_b, acc)
//   kPerToken:   acc = fma(dmin * m_b, s_b, acc)
// Q6_K (w = d * sc_k * (q - 32), a scale per 16 inputs) splits each block in
// its two halves h, each with its exact dot_h = sum (q - 32) q_x, and takes
// dot_b = dot_lo * sc_lo + dot_hi * sc_hi (exact in int32, |dot_b| < 2^24)
// with d_w[b] = d, accumulated as above (one fma per block).
// IQ4_NL (w = d * kIq4NlValues[q], kernels/gguf_legacy_blocks.h) is Q8_0
// with its integers looked up: dot_b = sum kIq4NlValues[q] q_x, d_w[b] = d.
// Q5_0 (w = d * (q - 16)) is Q4_0 with 5-bit q: dot_b = sum (q - 16) q_x.
// Q4_1 and Q5_1 (w = d * q + m, q unsigned) are Q4_K with a block's own
// scale and min: d_w[b] = d, and the mins' fma above with -m for dmin * m_b
// (the same product: -m * s_b = m * sum(q_x)).
// Every ISA path (scalar, AVX2, AVX-512, AVX-512 VNNI) computes exactly these
// operations in exactly this order, and threads split outputs, never the sum,
// so every path and every thread count give bit-identical results: a model's
// output does not depend on the machine it runs on. Against exact arithmetic
// on the quantized values the error is float rounding only, at most about
// (n_in / 32 + 2) * FLT_EPSILON * sum_i |w_i x_i|; the activation
// quantization adds at most sum_b amax_b / 254 * sum_{i in b} |w_i| (per
// token: amax of the row instead of the block's).
//
// Float path (kF32): XNNPACK's fully-connected operator, which packs its own
// copy of the weights. Results differ from exact arithmetic by float
// reassociation only.
//
// Half path (kF16, kBF16): the weights stay halves, in row groups of 16 rows
// (input i of the group's 16 rows side by side), and the activations stay
// float: for each output row, acc = fma(float(w_i), x_i, acc) for i in
// increasing order, so every ISA path and thread count give the same bits;
// against exact arithmetic the error is at most about n_in * FLT_EPSILON *
// sum_i |w_i x_i|.
//
// Thread safety: a Linear is immutable after construction and may be shared
// by any number of threads; forward() is const and safe to call concurrently.
// The quantized and half paths keep no state at all. XNNPACK's operator is stateful
// (setup stores the pointers of one call), so the float path runs setup + run
// under a mutex owned by the Linear: concurrent float forwards of one Linear
// are serialised (each still uses the whole pool).
//
// Packed layout (quantized), for the curious and for the kernels
// (kernels/linear_impl.h): output rows are taken 16 at a time ("row groups",
// the last one padded with zero weights). A group stores, for each block b of
// 32 inputs, its integer weights interleaved in 4-input steps, so that one
// 64-byte load holds 4 consecutive inputs of all 16 rows (what one AVX-512
// VNNI vpdpbusd consumes), then, after all the blocks, the 16 fp16 scales of
// each block. The integer weights are stored biased to unsigned bytes (Q8_0:
// w + 128; Q4_0: the GGUF nibble itself, w + 8) because vpdpbusd multiplies
// unsigned by signed bytes; the bias contributes C * sum(x_block), which
// depends on the activations only and is subtracted once per block and token.
// Q4_0 keeps GGUF's nibble pairing: the low nibbles of a 64-byte chunk c are
// inputs 4c..4c+3 of the block and the high nibbles inputs 16+4c..16+4c+3.
// IQ4_NL keeps its file's nibbles in Q4_0's places (the kernels look each
// up as kIq4NlValues[q] + 128 and go on as for Q8_0), and so does Q4_1 (its
// q, as Q4_K's; its d and -m in the scales region). Q5_0 and Q5_1 keep their
// 5-bit q as Q5_K does (below), with Q4_0's and Q4_1's scales.
// Q4_K's blocks are its sub-blocks' q (no bias: its mins are subtracted in
// float) in Q4_0's pairing, and its scales region holds each super-block's
// d and dmin (fp16) and 6-bit sub-block scales and mins per row.
// Bytes read per weight, as in the GGUF file: 1.0625 (Q8_0), 0.5625 (Q4_0,
// IQ4_NL, Q4_K: its 6-bit scales and mins in the file's 12 bytes,
// rearranged to unpack a super-block's 16 rows at once), 0.625 (Q4_1),
// 0.688 (Q5_K, the same; Q5_0), 0.75 (Q5_1), 0.820 (Q6_K: four 6-bit q per
// three bytes, the fourth in their top bits), 2 (F16, BF16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gguf_blocks.h"
#include "kernels/gguf_kquants.h"
#include "kernels/gguf_legacy_blocks.h"
#include "kernels/thread_pool.h"
#include "memory/memory_allocator.h"
#include "memory/streamed_region.h"

namespace hearth::kernels {

namespace internal {
struct XnnpackFullyConnected;  // defined in kernels/linear_impl.h
struct QuantizedActivations;
struct PackedWeights;
using MatmulFn = void (*)(const PackedWeights& w, const QuantizedActivations& a, std::size_t g0,
                          std::size_t g1, std::size_t t0, std::size_t t1, float* y,
                          std::size_t ldy);
struct AlignedFree {
  void operator()(std::uint8_t* p) const noexcept;
};
}  // namespace internal

// How a Linear factory packs its weights: on `pool`'s threads, row groups
// side by side (nullptr: on the calling thread; the result is the same), and
// into `region` when given (the packed weights are carved from it and keep it
// alive), else into an allocation of their own (allocate_streamed).
struct Packing {
  Packing(ThreadPool* pool = nullptr) : pool(pool) {}  // implicit: a pool alone converts
  Packing(ThreadPool* pool, std::shared_ptr<StreamedRegion> region)
      : pool(pool), region(std::move(region)) {}
  ThreadPool* pool = nullptr;
  std::shared_ptr<StreamedRegion> region;
};

class Linear {
 public:
  enum class Format {
    kF32,
    kQ8_0,
    kQ4_0,
    kQ4_K,
    kQ5_K,
    kQ6_K,
    kF16,
    kBF16,
    kIQ4_NL,
    kQ5_0,
    kQ4_1,
    kQ5_1
  };
  // How activations are quantized to int8 on the quantized path (ignored by
  // the float path): one scale per 32 inputs, or one per token.
  enum class ActivationQuant { kPerGroup32, kPerToken };

  // Float weights, row-major n_out x n_in, copied (packed by XNNPACK). The
  // caller's buffer may be freed on return.
  static absl::StatusOr<Linear> from_f32(const float* w, std::size_t n_out, std::size_t n_in);
  // IEEE half (from_f16) or bfloat16 (from_bf16) weights, row-major n_out x
  // n_in, any n_in: kept as halves in row groups (2 bytes per weight, as in
  // the file) and computed in float by hearth's own kernels (see "Half
  // path" above), as `packing` says (Packing, above).
  static absl::StatusOr<Linear> from_f16(const std::uint16_t* w, std::size_t n_out,
                                         std::size_t n_in, Packing packing = {});
  static absl::StatusOr<Linear> from_bf16(const std::uint16_t* w, std::size_t n_out,
                                          std::size_t n_in, Packing packing = {});
  // GGUF blocks, row-major: row r is w[r * n_in / 32 .. (r + 1) * n_in / 32).
  // n_in must be a multiple of 32. The blocks are repacked; the caller's
  // buffer may be freed on return. Packed as `packing` says (a model loads
  // on every kernel thread, into one StreamedRegion).
  static absl::StatusOr<Linear> from_q8_0(const BlockQ8_0* w, std::size_t n_out, std::size_t n_in,
                                          Packing packing = {});
  static absl::StatusOr<Linear> from_q4_0(const BlockQ4_0* w, std::size_t n_out, std::size_t n_in,
                                          Packing packing = {});
  static absl::StatusOr<Linear> from_iq4_nl(const BlockIQ4_NL* w, std::size_t n_out,
                                            std::size_t n_in, Packing packing = {});
  static absl::StatusOr<Linear> from_q5_0(const BlockQ5_0* w, std::size_t n_out, std::size_t n_in,
                                          Packing packing = {});
  static absl::StatusOr<Linear> from_q4_1(const BlockQ4_1* w, std::size_t n_out, std::size_t n_in,
                                          Packing packing = {});
  static absl::StatusOr<Linear> from_q5_1(const BlockQ5_1* w, std::size_t n_out, std::size_t n_in,
                                          Packing packing = {});
  // GGUF Q4_K / Q5_K / Q6_K super-blocks, row-major (n_in / 256 per row);
  // n_in must be a multiple of 256. Packed without loss: the same q, scales
  // and mins.
  static absl::StatusOr<Linear> from_q4_k(const BlockQ4_K* w, std::size_t n_out, std::size_t n_in,
                                          Packing packing = {});
  static absl::StatusOr<Linear> from_q5_k(const BlockQ5_K* w, std::size_t n_out, std::size_t n_in,
                                          Packing packing = {});
  static absl::StatusOr<Linear> from_q6_k(const BlockQ6_K* w, std::size_t n_out, std::size_t n_in,
                                          Packing packing = {});

  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;
  ~Linear();

  // y[m][n_out] = x[m][n_in] * W^T (row-major, dense). x and y must not
  // overlap. m = 0 is a no-op.
  //
  // Scratch: the quantized path takes about m x 1.25 n_in bytes (int8
  // activations in tiles of up to 8 tokens rounded up to 64 bytes, plus an
  // int32 and a float per 32 inputs) from `scratch`, on the calling thread,
  // and nothing from the heap; the half and float paths take nothing
  // (XNNPACK makes no allocation in setup or run for this operator). `pool`
  // may be nullptr (run on the calling thread); small problems run on the
  // calling thread anyway.
  // Errors: ResourceExhausted when scratch cannot be allocated; Internal when
  // XNNPACK fails.
  absl::Status forward(const float* x, std::size_t m, float* y, MemoryAllocator& scratch,
                       ThreadPool* pool, ActivationQuant aq = ActivationQuant::kPerGroup32) const;

  // Several layers over the same input, as Q, K and V projections or an FFN's
  // gate and up: y_i = x W_i^T for each i, bit-identical to calling forward()
  // on each. When all are quantized alike (one format, or any of Q4_K, Q5_K,
  // Q6_K, Q4_1 and Q5_1, as a Q4_K_M file's Q, K and V: their activations are
  // the same)
  // the input is quantized once, and for one token (decode) the rows of all
  // of them are split across the pool in a single parallel region, so
  // threads do not wait for each other between layers. Layers must share
  // n_in (InvalidArgument otherwise, naming the layer); float, half or
  // other mixes run one forward() each.
  static absl::Status forward_same_input(std::span<const Linear* const> layers, const float* x,
                                         std::size_t m, std::span<float* const> ys,
                                         MemoryAllocator& scratch, ThreadPool* pool,
                                         ActivationQuant aq = ActivationQuant::kPerGroup32);

  // Decode hint: call before the region that comes before `layers`' next
  // one-token forward (forward() with m = 1, or forward_same_input() of the
  // same layers). Each of the pool's workers is told the first weight bytes
  // (at most bytes_per_worker) it will stream there, to prefetch while it
  // waits (ThreadPool::hint_next_region). Returns how many workers were
  // told: 0 for float layers, formats quantized differently, products too
  // small to split or a pool of one thread.
  static std::size_t hint_decode(std::span<const Linear* const> layers, ThreadPool* pool,
                                 std::size_t bytes_per_worker);

  std::size_t n_in() const noexcept { return n_in_; }
  std::size_t n_out() const noexcept { return n_out_; }
  Format format() const noexcept { return format_; }
  // Bytes one forward reads from the packed weights (once per forward on the
  // GEMV path, including the padding of the last row group; the float path
  // counts n_out x (n_in + 1) floats, XNNPACK's weights and bias).
  std::size_t weight_bytes() const noexcept;

 private:
  Linear() = default;
  static absl::StatusOr<Linear> allocate_packed(Format format, std::size_t n_out, std::size_t n_in,
                                                const std::shared_ptr<StreamedRegion>& region);
  // Fills every row group: clears it to the padding values, then calls
  // pack_group(group bytes, first row, rows), on `pool` when given.
  template <typename PackGroup>
  void pack_groups(ThreadPool* pool, PackGroup&& pack_group);
  template <typename Block>  // BlockQ4_K, BlockQ5_K or BlockQ6_K
  static absl::StatusOr<Linear> pack_k_quant(const Block* w, std::size_t n_out, std::size_t n_in,
                                             const char* what, const Packing& packing);
  template <typename Block, typename Place>
  static absl::StatusOr<Linear> pack_blocks(Format format, const Block* w, std::size_t n_out,
                                            std::size_t n_in, const char* what,
                                            const Packing& packing, Place place);
  // The quantized path in two steps: activations into scratch, then the
  // matmul over them (split across the pool when large enough).
  absl::Status quantize_input(const float* x, std::size_t m, MemoryAllocator& scratch,
                              ThreadPool* pool, ActivationQuant aq,
                              internal::QuantizedActivations& a) const;
  void run_quantized(const internal::QuantizedActivations& a, float* y, ThreadPool* pool) const;
  // Whether a forward of m tokens is large enough to split across `pool`
  // (else the calling thread runs it), for the quantized and half paths.
  bool worth_splitting(std::size_t m, const ThreadPool* pool) const;
  // The half path (split across the pool when large enough).
  void run_half(const float* x, std::size_t m, float* y, ThreadPool* pool) const;
  static absl::StatusOr<Linear> pack_half(Format format, const std::uint16_t* w, std::size_t n_out,
                                          std::size_t n_in, const char* what,
                                          const Packing& packing);
  // The active ISA's matmul for this format and activation granularity.
  internal::MatmulFn matmul_fn(bool per_token) const;
  // Slices of a one-token forward, the work items its threads share:
  // kGemvSliceGroups row groups each.
  std::size_t gemv_slices() const noexcept;
  // How many units a one-token forward of `layers` (one quantized format)
  // splits across `pool` in one region; 0 when it runs on the caller.
  // forward_same_input and hint_decode share this decision.
  static std::size_t count_gemv_slices(std::span<const Linear* const> layers,
                                       const ThreadPool* pool);
  internal::PackedWeights packed_weights() const;

  Format format_ = Format::kF32;
  std::size_t n_in_ = 0;
  std::size_t n_out_ = 0;
  // Quantized and half formats: the packed row groups (64-byte aligned), an
  // allocation of their own or a piece of a shared StreamedRegion.
  std::shared_ptr<std::uint8_t> packed_;
  std::size_t groups_ = 0;         // ceil(n_out / 16)
  std::size_t group_stride_ = 0;   // bytes per row group, a multiple of 64
  std::size_t scales_offset_ = 0;  // offset of a group's fp16 scales within it
  // Float format: XNNPACK's operator and the mutex that guards it.
  std::unique_ptr<internal::XnnpackFullyConnected> xnn_;
};

}  // namespace hearth::kernels
