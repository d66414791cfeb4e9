// AVX-512 inner loops of sdpa (kernels/sdpa_impl.h); head_dim a multiple of
// 16. The loops are kernels/sdpa_simd_body.h over the 16-lane primitives of
// kernels/sdpa_lanes_avx512.h.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/sdpa_impl.h"
#include "kernels/simd_avx512.h"

namespace hearth::kernels::internal {
namespace {

#include "kernels/sdpa_lanes_avx512.h"
#include "kernels/sdpa_simd_body.h"

}  // namespace

const AttentionKernels kAvx512Attention = attention_kernels(scores_q8, 0);

}  // namespace hearth::kernels::internal
