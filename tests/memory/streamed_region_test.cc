#include "memory/streamed_region.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "memory/streamed_buffer.h"

namespace hearth {
namespace {

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// The line starting with `key` (as "VmFlags:" or "Rss:") of the mapping
// that holds `p` in /proc/self/smaps, or "" when no mapping holds it.
std::string smaps_line_at(const void* p, const std::string& key) {
  std::ifstream smaps("/proc/self/smaps");
  bool in_range = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    // Mapping headers start "lo-hi perms ..."; field lines start "Key:".
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2) {
      in_range = addr(p) >= lo && addr(p) < hi;
    } else if (in_range && line.rfind(key, 0) == 0) {
      return line;
    }
  }
  return "";
}

std::string vm_flags_at(const void* p) { return smaps_line_at(p, "VmFlags:"); }

TEST(StreamedRegion, HandsOutDisjointCacheLineAlignedPiecesFromAHugePageBoundary) {
  auto region = StreamedRegion::reserve(std::size_t{10} << 20);
  ASSERT_NE(region, nullptr);
  std::vector<std::pair<std::uint8_t*, std::size_t>> pieces;
  for (std::size_t bytes : {std::size_t{1}, std::size_t{100}, std::size_t{5} << 20, std::size_t{64},
                            std::size_t{4095}}) {
    std::uint8_t* p = region->take(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(addr(p) % 64, 0u) << bytes;
    EXPECT_TRUE(region->contains(p)) << bytes;
    EXPECT_TRUE(region->contains(p + bytes - 1)) << bytes;
    for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << "fresh pages read as zero";
    std::memset(p, 0xab, bytes);  // every byte asked for is usable (ASan checks)
    pieces.emplace_back(p, bytes);
  }
  EXPECT_EQ(addr(pieces[0].first) % kHugePageBytes, 0u) << "the first piece starts the region";
  for (std::size_t i = 1; i < pieces.size(); ++i)
    EXPECT_GE(pieces[i].first, pieces[i - 1].first + pieces[i - 1].second) << i;
  const auto& last = pieces.back();
  EXPECT_EQ(region->used(), addr(last.first) + last.second - addr(pieces[0].first));
}

TEST(StreamedRegion, RefusesAPieceLargerThanWhatIsLeftAndKeepsTheRest) {
  auto region = StreamedRegion::reserve(4096);
  ASSERT_NE(region, nullptr);
  ASSERT_NE(region->take(4000), nullptr);
  EXPECT_EQ(region->take(100), nullptr) << "4032 + 100 > 4096";
  EXPECT_EQ(region->used(), 4000u) << "a refused piece takes nothing";
  std::uint8_t* p = region->take(64);  // exactly what is left after alignment
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(region->used(), 4096u);
  EXPECT_EQ(region->take(1), nullptr);
  EXPECT_FALSE(region->contains(p + 64));
}

// Threads that take at once get disjoint pieces and lose none (TSan runs
// this suite).
TEST(StreamedRegion, ConcurrentTakesAreDisjoint) {
  constexpr std::size_t kPerThread = 1000, kThreads = 2;
  auto region = StreamedRegion::reserve(kPerThread * kThreads * 64);
  ASSERT_NE(region, nullptr);
  std::vector<std::vector<std::uint8_t*>> got(kThreads);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (std::size_t i = 0; i < kPerThread; ++i) got[t].push_back(region->take(64));
    });
  for (std::thread& t : threads) t.join();
  std::vector<std::uint8_t*> all;
  for (const auto& g : got) all.insert(all.end(), g.begin(), g.end());
  std::sort(all.begin(), all.end());
  ASSERT_NE(all.front(), nullptr);
  for (std::size_t i = 1; i < all.size(); ++i) ASSERT_EQ(all[i], all[i - 1] + 64) << i;
  EXPECT_EQ(region->used(), kPerThread * kThreads * 64);
  EXPECT_EQ(region->take(1), nullptr);
}

// The whole region, not only its whole 2 MiB pieces, is advised for huge
// pages, and its mapping goes with its last owner.
TEST(StreamedRegion, IsAdvisedForHugePagesAndUnmappedWithItsLastOwner) {
  if (!std::ifstream("/proc/self/smaps")) GTEST_SKIP() << "/proc/self/smaps is not readable here";
  auto region = StreamedRegion::reserve((std::size_t{3} << 20) + 12345);
  ASSERT_NE(region, nullptr);
  std::uint8_t* first = region->take(std::size_t{3} << 20);
  std::uint8_t* tail = region->take(1000);  // past the last whole 2 MiB of what was asked
  ASSERT_NE(first, nullptr);
  ASSERT_NE(tail, nullptr);
  tail[999] = 1;
  EXPECT_NE(vm_flags_at(tail).find(" hg"), std::string::npos) << vm_flags_at(tail);
  std::shared_ptr<std::uint8_t> piece(region, tail);  // as a Linear holds its weights
  region.reset();
  EXPECT_EQ(piece.get()[999], 1) << "the piece keeps the region mapped";
  piece.reset();
  EXPECT_EQ(vm_flags_at(tail), "") << "unmapped with its last owner";
}

// The Rss (bytes) of the mapping that holds `p`, from /proc/self/smaps.
std::size_t rss_at(const void* p) {
  unsigned long kb = 0;
  return std::sscanf(smaps_line_at(p, "Rss:").c_str(), "Rss: %lu kB", &kb) == 1 ? kb * 1024 : 0;
}

// After the last piece, the huge page it ends in holds no more than the
// pieces (where the kernel backed it with a huge page, it held all 2 MiB).
TEST(StreamedRegion, ReleasingTheUnusedRestLeavesOnlyThePiecesResident) {
  if (!std::ifstream("/proc/self/smaps")) GTEST_SKIP() << "/proc/self/smaps is not readable here";
  auto region = StreamedRegion::reserve(std::size_t{8} << 20);
  ASSERT_NE(region, nullptr);
  const std::size_t bytes = (std::size_t{3} << 20) + 1000;
  std::uint8_t* p = region->take(bytes);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x5a, bytes);
  region->release_unused();
  EXPECT_LE(rss_at(p), (bytes + 4095) / 4096 * 4096);
  EXPECT_GE(rss_at(p), bytes);
  EXPECT_EQ(p[bytes - 1], 0x5a) << "the pieces keep their bytes";
  std::uint8_t* more = region->take(100);  // a later piece gets fresh pages
  ASSERT_NE(more, nullptr);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(more[i], 0) << i;
}

// The process's address space in bytes (VmSize of /proc/self/status).
std::size_t vm_size() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    unsigned long kb = 0;
    if (std::sscanf(line.c_str(), "VmSize: %lu kB", &kb) == 1) return kb * 1024;
  }
  return 0;
}

// The reservation is exactly its whole huge pages, and after the last piece
// it ends with the huge page that piece ends in: the address space beyond
// is unmapped, so the process's mappings show what the pieces hold. (An
// address counts as the region's while a mapping advised for huge pages
// holds it: whatever the allocator may map into a freed hole is not.)
TEST(StreamedRegion, ReleasingTheUnusedRestUnmapsTheReservationBeyond) {
  if (!std::ifstream("/proc/self/smaps")) GTEST_SKIP() << "/proc/self/smaps is not readable here";
  auto ours = [](const void* p) { return vm_flags_at(p).find(" hg") != std::string::npos; };
  const std::size_t before = vm_size();
  auto region = StreamedRegion::reserve((std::size_t{7} << 20) + 1);
  const std::size_t reserved = vm_size() - before;
  ASSERT_NE(region, nullptr);
  // 8 MiB; the slack taken to align it (up to 2 MiB more) is not kept. (A
  // megabyte of allowance for what reading /proc may allocate.)
  EXPECT_GE(reserved, std::size_t{8} << 20);
  EXPECT_LT(reserved, std::size_t{9} << 20);
  std::uint8_t* p = region->take((std::size_t{3} << 20) + 1000);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(ours(p + (std::size_t{6} << 20))) << "reserved until released";
  region->release_unused();
  EXPECT_EQ(region->capacity(), std::size_t{4} << 20);
  EXPECT_TRUE(ours(p + (std::size_t{4} << 20) - 1));
  EXPECT_FALSE(ours(p + (std::size_t{4} << 20)));
  EXPECT_FALSE(ours(p + (std::size_t{6} << 20)));
  EXPECT_EQ(region->take(std::size_t{1} << 20), nullptr) << "beyond the last huge page";
  std::uint8_t* rest = region->take(4096);  // within it
  ASSERT_NE(rest, nullptr);
  EXPECT_TRUE(region->contains(rest + 4095));
  rest[4095] = 1;
}

}  // namespace
}  // namespace hearth
