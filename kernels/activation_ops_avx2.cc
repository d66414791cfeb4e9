// AVX2 + FMA + F16C paths of the activation operations (kernels/activation_ops.h):
// kernels/activation_ops_simd_body.h over the 8-lane primitives of
// kernels/simd_avx2.h.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/activation_ops_impl.h"
#include "kernels/simd_avx2.h"

namespace hearth::kernels::internal {
namespace {

using namespace avx2;
#include "kernels/activation_ops_simd_body.h"

}  // namespace

const ActivationOpsKernels kActivationOpsAvx2 = kActivationOpsKernels;

}  // namespace hearth::kernels::internal
