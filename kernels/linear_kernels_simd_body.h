// The LinearKernels table (kernels/linear_impl.h) of a SIMD ISA, written
// once. Not a normal header: linear_avx2.cc, linear_avx512.cc and
// linear_avx512vnni.cc include it inside their anonymous namespace after
// defining run<WeightFormat, bool> (every quantized format, per group and
// per token) and including kernels/linear_half_body.h (run_half<bool>).

// The table of an ISA whose widest token tile is `tile_tokens` and whose
// activations `quantize` writes.
constexpr LinearKernels simd_linear_kernels(std::size_t tile_tokens, QuantizeFn quantize) {
  using enum WeightFormat;
  return {tile_tokens,         quantize,           run<kQ8_0, false>, run<kQ8_0, true>,
          run<kQ4_0, false>,   run<kQ4_0, true>,   run<kQ4_K, false>, run<kQ4_K, true>,
          run<kQ5_K, false>,   run<kQ5_K, true>,   run<kQ6_K, false>, run<kQ6_K, true>,
          run<kIQ4_NL, false>, run<kIQ4_NL, true>, run<kQ5_0, false>, run<kQ5_0, true>,
          run<kQ4_1, false>,   run<kQ4_1, true>,   run<kQ5_1, false>, run<kQ5_1, true>,
          run_half<false>,     run_half<true>};
}
