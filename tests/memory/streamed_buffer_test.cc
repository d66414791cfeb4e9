#include "memory/streamed_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace hearth {
namespace {

bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

TEST(StreamedBuffer, SmallBuffersAreCacheLineAligned) {
  for (std::size_t bytes : {1u, 63u, 64u, 1000u, 4096u, (2u << 20) - 1}) {
    void* p = allocate_streamed(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_TRUE(aligned(p, 64)) << bytes;
    std::memset(p, 0xab, bytes);  // every byte asked for is usable (ASan checks)
    std::free(p);
  }
}

TEST(StreamedBuffer, LargeBuffersStartOnAHugePageBoundary) {
  for (std::size_t bytes : {std::size_t{2} << 20, (std::size_t{5} << 20) + 12345}) {
    void* p = allocate_streamed(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_TRUE(aligned(p, kHugePageBytes)) << bytes;
    std::memset(p, 0xcd, bytes);
    std::free(p);
  }
}

// The advice reaches the kernel: the mapping holding the buffer carries the
// "hg" (huge page advised) flag in /proc/self/smaps.
TEST(StreamedBuffer, WholeHugePagesAreAdvised) {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) GTEST_SKIP() << "/proc/self/smaps is not readable here";
  const std::size_t bytes = std::size_t{6} << 20;
  void* p = allocate_streamed(bytes);
  ASSERT_NE(p, nullptr);
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  bool in_range = false, advised = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    // Mapping headers start "lo-hi perms ..."; field lines start "Key:".
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2) {
      in_range = addr >= lo && addr < hi;
    } else if (in_range && line.rfind("VmFlags:", 0) == 0) {
      advised = line.find(" hg") != std::string::npos;
      break;
    }
  }
  std::free(p);
  EXPECT_TRUE(advised) << "no VmFlags 'hg' on the mapping of the buffer";
}

}  // namespace
}  // namespace hearth
