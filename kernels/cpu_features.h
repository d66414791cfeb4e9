// Run-time CPU feature detection and kernel dispatch.
//
// Every kernel has a scalar reference and SIMD paths; which one runs is decided
// here, from the features of the machine (never from its model name). The
// features are read once. Tests and benchmarks may force any path that the
// machine supports, to compare it with the scalar reference. One tuning
// choice, which changes no result, is made from the CPU's vendor and family
// instead: whether decode tiles prefetch their weights (decode_prefetch).
#pragma once

#include <vector>

namespace hearth::kernels {

// Instruction-set levels, each implying the ones before it.
enum class Isa : int {
  kScalar = 0,      // portable C++: the reference every other path is tested against
  kAvx2 = 1,        // AVX2 + FMA + F16C
  kAvx512 = 2,      // AVX-512 F/BW/VL/DQ
  kAvx512Vnni = 3,  // AVX-512 with VNNI int8 dot products
};

const char* isa_name(Isa isa);

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512vnni = false;
  int physical_cores = 1;
  // CPUID's vendor and display family, for decode_prefetch_helps().
  bool amd = false;
  int family = 0;
};

// Whether the decode (one-token) tiles of kernels/linear_tile_body.h at
// level `isa` should fetch their weight blocks ahead themselves: their
// arithmetic per byte leaves the hardware prefetcher behind on the Zen 2
// and Zen 5 machines of docs/performance.md, while on Zen 4 (AMD family
// 0x19) the AVX-512 tiles decode 8-22% faster without. Zen 3, the same
// family, has no AVX-512.
bool decode_prefetch_helps(bool amd, int family, Isa isa);

// Detected on first call; never changes afterwards.
const CpuFeatures& cpu_features();

bool isa_supported(Isa isa);
// The best level this machine supports.
Isa best_isa();
// Every level this machine supports, scalar first.
std::vector<Isa> supported_isas();

// The level kernels dispatch on: best_isa(), unless a ScopedIsa is alive.
Isa active_isa();

// Forces kernels onto `isa` for the scope's lifetime (tests and benchmarks).
// Process-wide: create it only while no kernel runs on another thread.
// Forcing an unsupported level aborts with a message.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  int previous_;
};

// Whether decode tiles prefetch now: decode_prefetch_helps() for this CPU and
// active_isa(), unless a ScopedDecodePrefetch is alive.
bool decode_prefetch();

// Forces decode_prefetch() to `on` for the scope's lifetime (tests, and
// benchmarks comparing both settings in one process). Process-wide, like
// ScopedIsa: create it only while no kernel runs on another thread.
class ScopedDecodePrefetch {
 public:
  explicit ScopedDecodePrefetch(bool on);
  ~ScopedDecodePrefetch();
  ScopedDecodePrefetch(const ScopedDecodePrefetch&) = delete;
  ScopedDecodePrefetch& operator=(const ScopedDecodePrefetch&) = delete;

 private:
  int previous_;
};

// How every kernel family dispatches: a struct of function pointers
// (ActivationOpsKernels, LinearKernels, AttentionKernels, QuantizeKernels),
// one const table per ISA defined in that ISA's own file, and one
// PerIsaTables in the family's dispatcher. An ISA without a table of its own
// (nullptr) uses the nearest level below it that has one.
//
// Instantiate it only in files compiled for the baseline ISA (the
// dispatchers): a template instantiated under AVX flags could be merged by
// the linker with the baseline's copy.
//
// A build with HEARTH_SCALAR_KERNELS_ONLY (a fuzz-only tree, whose targets
// parse files and requests and run no kernel) compiles no SIMD file: its
// dispatchers name their SIMD tables through HEARTH_SIMD_TABLE, which is
// then nullptr, and isa_supported() reports the scalar level alone.
#ifdef HEARTH_SCALAR_KERNELS_ONLY
#define HEARTH_SIMD_TABLE(table) nullptr
#else
#define HEARTH_SIMD_TABLE(table) (&(table))
#endif
template <class Kernels>
struct PerIsaTables {
  const Kernels* scalar = nullptr;  // required
  const Kernels* avx2 = nullptr;
  const Kernels* avx512 = nullptr;
  const Kernels* avx512_vnni = nullptr;

  // The table of `isa`, or of the nearest level below it that has one.
  const Kernels& at(Isa isa) const {
    const Kernels* const by_level[] = {scalar, avx2, avx512, avx512_vnni};
    for (int level = static_cast<int>(isa); level > 0; --level)
      if (by_level[level] != nullptr) return *by_level[level];
    return *scalar;
  }
  const Kernels& active() const { return at(active_isa()); }
};

}  // namespace hearth::kernels
