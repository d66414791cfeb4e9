// AVX-512 (F/BW/VL/DQ) paths of the activation operations (kernels/activation_ops.h):
// kernels/activation_ops_simd_body.h over the 16-lane primitives of
// kernels/simd_avx512.h, whose tails are mask registers.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/activation_ops_impl.h"
#include "kernels/simd_avx512.h"

namespace hearth::kernels::internal {
namespace {

using namespace avx512;
#include "kernels/activation_ops_simd_body.h"

}  // namespace

const ActivationOpsKernels kActivationOpsAvx512 = kActivationOpsKernels;

}  // namespace hearth::kernels::internal
