// Locating ../shared (models and reference outputs kept beside the repository,
// never copied into it). Tests that need it call HEARTH_REQUIRE_SHARED(), which
// skips the test with a clear message when the folder is absent.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace hearth::testing {

// $HEARTH_SHARED_DIR if set, else the folder `shared` beside the source tree.
inline std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("HEARTH_SHARED_DIR"); env != nullptr && *env != '\0') return env;
  return std::filesystem::path(HEARTH_SOURCE_DIR).parent_path() / "shared";
}

inline bool shared_available() { return std::filesystem::is_directory(shared_dir() / "models"); }

}  // namespace hearth::testing

#define HEARTH_REQUIRE_SHARED()                                                                          \
  do {                                                                                                   \
    if (!::hearth::testing::shared_available())                                                          \
      GTEST_SKIP() << "needs the shared test data at " << ::hearth::testing::shared_dir().string()       \
                   << " (models and reference outputs; set HEARTH_SHARED_DIR to point elsewhere)";       \
  } while (0)
