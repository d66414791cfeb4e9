// AVX2 + FMA + F16C paths of the block operations (kernels/block_ops.h):
// kernels/block_ops_simd_body.h over the 8-lane primitives of
// kernels/simd_avx2.h.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/block_ops_impl.h"
#include "kernels/simd_avx2.h"

namespace hearth::kernels::internal {
namespace {

using namespace avx2;
#include "kernels/block_ops_simd_body.h"

}  // namespace

const BlockOpsKernels kBlockOpsAvx2 = kBlockOpsKernels;

}  // namespace hearth::kernels::internal
