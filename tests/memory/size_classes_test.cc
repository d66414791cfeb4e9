#include "memory/size_classes.h"

#include <gtest/gtest.h>

namespace hearth {
namespace {

namespace sc = size_classes;

TEST(SizeClasses, EveryClassRoundTripsAndGrows) {
  for (int c = 0; c < sc::kCount; ++c) {
    EXPECT_EQ(sc::class_of(sc::bytes_of(c)), c) << "class " << c;
    if (c > 0) {
      EXPECT_GT(sc::bytes_of(c), sc::bytes_of(c - 1));
    }
    EXPECT_EQ(sc::bytes_of(c) % sc::kGranule, 0u);
  }
}

TEST(SizeClasses, RoundingWastesAtMostAQuarterAboveTheSmallClasses) {
  // Every size up to 1 MiB, and a sweep of large sizes.
  for (std::size_t size = 1; size <= (1u << 20); ++size) {
    const std::size_t bytes = sc::bytes_of(sc::class_of(size));
    ASSERT_GE(bytes, size);
    if (size > 256) {
      ASSERT_LE(bytes - size, size / 4) << size;
    }
    if (sc::class_of(size) > 0) {
      ASSERT_LT(sc::bytes_of(sc::class_of(size) - 1), size) << size;
    }
  }
  for (std::size_t size = std::size_t{1} << 20; size < sc::kMaxBytes; size = size * 9 / 7 + 3) {
    const std::size_t bytes = sc::bytes_of(sc::class_of(size));
    ASSERT_GE(bytes, size);
    ASSERT_LE(bytes - size, size / 4) << size;
  }
}

TEST(SizeClasses, SmallBuffersThatGrowByAFewBytesStayInOneClass) {
  // A 32-head score row growing by one float per step: 4096 + 4*t bytes.
  int changes = 0;
  for (std::size_t t = 1; t < 256; ++t)
    changes += sc::class_of(4096 + 4 * t) != sc::class_of(4096 + 4 * (t - 1));
  EXPECT_LE(changes, 1);
}

TEST(SizeClasses, Extremes) {
  EXPECT_EQ(sc::class_of(0), 0);
  EXPECT_EQ(sc::bytes_of(0), 64u);
  EXPECT_EQ(sc::class_of(sc::kMaxBytes), sc::kCount - 1);
}

}  // namespace
}  // namespace hearth
