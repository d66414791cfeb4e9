// Buffers that kernels stream through once per token, such as packed weights.
//
// A decode step reads every weight once, so it touches a new 4 KiB page every
// few hundred nanoseconds; with 4 KiB pages that is a TLB miss and a page walk
// each time, which measurably holds a GEMV below the memory bandwidth (the
// decode GEMV benchmark: 86% -> 94% of the streaming bandwidth on 2 threads).
// These buffers are aligned to 2 MiB and every whole 2 MiB of them is advised
// for transparent huge pages (MADV_HUGEPAGE; the kernel's default "madvise"
// mode then backs them with huge pages). The tail past the last whole 2 MiB
// keeps small pages, so no memory is made resident that was not asked for.
// A model's packed weights are carved from one StreamedRegion instead
// (memory/streamed_region.h), which puts the tails on huge pages too.
#pragma once

#include <cstddef>

namespace hearth {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// At least `bytes` bytes, 64-byte aligned (2 MiB aligned from 2 MiB up), or
// nullptr. Release with std::free. The advice is best effort: where huge pages
// are unavailable the buffer works the same with small pages.
void* allocate_streamed(std::size_t bytes) noexcept;

}  // namespace hearth
