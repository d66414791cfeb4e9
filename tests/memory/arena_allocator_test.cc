#include "memory/arena_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace hearth {
namespace {

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(ArenaAllocator, HonoursEveryPowerOfTwoAlignment) {
  alignas(4096) static std::byte buffer[1 << 16];
  ArenaAllocator arena(buffer + 1, sizeof buffer - 1);  // deliberately misaligned base
  for (std::size_t align = 1; align <= 4096; align *= 2) {
    void* p = arena.allocate(3, align);
    ASSERT_NE(p, nullptr) << "alignment " << align;
    EXPECT_EQ(addr(p) % align, 0u) << "alignment " << align;
  }
}

TEST(ArenaAllocator, DefaultAlignmentIs64) {
  alignas(64) static std::byte buffer[1024];
  ArenaAllocator arena(buffer, sizeof buffer);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(addr(arena.allocate(1)) % 64, 0u);
}

TEST(ArenaAllocator, TracksUsedFreeCapacityAndHighWater) {
  alignas(64) static std::byte buffer[1024];
  ArenaAllocator arena(buffer, sizeof buffer);
  EXPECT_EQ(arena.capacity(), 1024u);
  EXPECT_EQ(arena.used(), 0u);
  ASSERT_NE(arena.allocate(100, 64), nullptr);
  EXPECT_EQ(arena.used(), 100u);
  ASSERT_NE(arena.allocate(10, 64), nullptr);  // 28 bytes of padding to reach 128
  EXPECT_EQ(arena.used(), 138u);
  EXPECT_EQ(arena.free(), 1024u - 138u);
  arena.reset();
  EXPECT_EQ(arena.used(), 0u);
  EXPECT_EQ(arena.high_water(), 138u);
}

TEST(ArenaAllocator, RefusesWhatDoesNotFitAndKeepsState) {
  alignas(64) static std::byte buffer[256];
  ArenaAllocator arena(buffer, sizeof buffer);
  ASSERT_NE(arena.allocate(200, 64), nullptr);
  EXPECT_EQ(arena.allocate(100, 64), nullptr);
  EXPECT_EQ(arena.used(), 200u);
  EXPECT_EQ(arena.allocate(std::numeric_limits<std::size_t>::max(), 1), nullptr);
  EXPECT_EQ(arena.allocate(1, std::size_t{1} << 62), nullptr);
  EXPECT_EQ(arena.used(), 200u);
  // Exactly the rest still fits.
  EXPECT_NE(arena.allocate(56, 1), nullptr);
  EXPECT_EQ(arena.free(), 0u);
}

TEST(ArenaAllocator, RejectsNonPowerOfTwoAlignment) {
  alignas(64) static std::byte buffer[256];
  ArenaAllocator arena(buffer, sizeof buffer);
  EXPECT_EQ(arena.allocate(8, 0), nullptr);
  EXPECT_EQ(arena.allocate(8, 48), nullptr);
  EXPECT_EQ(arena.used(), 0u);
}

TEST(ArenaAllocator, ZeroByteRequestsGetDistinctPointers) {
  alignas(64) static std::byte buffer[256];
  ArenaAllocator arena(buffer, sizeof buffer);
  void* a = arena.allocate(0, 1);
  void* b = arena.allocate(0, 1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
}

TEST(ArenaAllocator, TypedHelpersCheckOverflow) {
  alignas(64) static std::byte buffer[4096];
  ArenaAllocator arena(buffer, sizeof buffer);
  EXPECT_EQ(arena.allocate_array<double>(std::numeric_limits<std::size_t>::max() / 4), nullptr);
  EXPECT_EQ(arena.used(), 0u);
  double* d = arena.allocate_array<double>(10);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(arena.used(), 80u);
  struct alignas(128) Wide {
    char c[128];
  };
  Wide* w = arena.allocate_instance<Wide>();
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(addr(w) % 128, 0u);
}

TEST(ArenaAllocator, NullBufferHasNoCapacity) {
  ArenaAllocator arena(nullptr, 1024);
  EXPECT_EQ(arena.capacity(), 0u);
  EXPECT_EQ(arena.allocate(1), nullptr);
}

}  // namespace
}  // namespace hearth
