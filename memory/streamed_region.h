// Address space that long-lived buffers streamed by the kernels are carved
// from, back to back: a model's packed weights.
//
// allocate_streamed() (memory/streamed_buffer.h) gives each buffer its own
// 2 MiB-aligned allocation, advised for huge pages only over its whole
// 2 MiB: its tail, and all of a buffer under 2 MiB (a small model's K and V
// projections), stay on 4 KiB pages, one TLB miss per 64 cache lines. Here
// every buffer but the last lies on huge pages, and none leaves a huge page
// partly unused: the region is reserved as address space (nothing is
// resident until written) and advised for huge pages over its whole length;
// release_unused() then gives back the rest of the last huge page and
// unmaps the reservation beyond it.
// (Measurements: docs/performance.md, "Packed weights in one huge-page
// region".)
//
// Owner: shared (std::shared_ptr) by whoever holds buffers carved from it;
// the mapping goes with the last owner. Buffers are not released one by one.
// take() may be called from any thread (an atomic bump of `used_`).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace hearth {

class StreamedRegion {
 public:
  // A region of `capacity` bytes (at least 1), its start 2 MiB-aligned, or
  // nullptr when that much address space cannot be reserved.
  static std::shared_ptr<StreamedRegion> reserve(std::size_t capacity) noexcept;
  ~StreamedRegion();
  StreamedRegion(const StreamedRegion&) = delete;
  StreamedRegion& operator=(const StreamedRegion&) = delete;

  // `bytes` bytes at the next 64-byte boundary, zero-filled (fresh pages),
  // or nullptr when fewer are left.
  std::uint8_t* take(std::size_t bytes) noexcept;
  // Gives back what lies past used(): the pages from the next 4 KiB boundary
  // to the end of its huge page (the only one partly written), and the
  // address space beyond that huge page (unmapped). Once the last piece is
  // taken, the region holds and reserves no more than its pieces. A later
  // take() gets fresh zero pages from the rest of that huge page, no more
  // (capacity() shrinks to its end). Not while another thread calls take().
  void release_unused() noexcept;
  bool contains(const void* p) const noexcept;
  std::size_t capacity() const noexcept { return capacity_.load(std::memory_order_relaxed); }
  // Bytes handed out so far, with the alignment gaps between them.
  std::size_t used() const noexcept { return used_.load(std::memory_order_relaxed); }

 private:
  StreamedRegion(std::uint8_t* base, std::size_t mapped, std::size_t capacity) noexcept;

  std::uint8_t* const base_;  // 2 MiB-aligned start of the mapping
  std::size_t mapped_;        // its length (whole huge pages); shrunk by release_unused()
  std::atomic<std::size_t> capacity_;
  std::atomic<std::size_t> used_{0};
};

}  // namespace hearth
