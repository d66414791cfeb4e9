// Helpers shared by the AVX-512 translation units (*_avx512.cc and
// *_avx512vnni.cc, compiled with their own flags). Every function is
// `static`: each translation unit gets its own copy, compiled with its own
// flags, so the linker never merges copies built for different ISAs (the
// reason the *_impl.h headers declare only).
#pragma once

#if !defined(__AVX512F__)
#error "kernels/simd_avx512.h is for the AVX-512 translation units only"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hearth::kernels::internal::avx512 {

// Lanes [0, n) of a 16-lane mask, n in [0, 16].
static inline __mmask16 tail_mask(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// The 4 bytes at p in every 32-bit lane.
static inline __m512i broadcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

}  // namespace hearth::kernels::internal::avx512
