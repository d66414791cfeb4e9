// Locating ../shared (models and reference outputs kept beside the repository,
// never copied into it). Tests that need it call HEARTH_REQUIRE_SHARED():
// where the folder is absent it skips the test with a clear message, except
// under CI (CI=true, as .ci/run is started), where a missing folder fails the
// test: CI always has it, so its absence there is a broken setup, not a
// reason to pass with dozens of tests unrun.
#pragma once

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace hearth::testing {

// $HEARTH_SHARED_DIR if set, else the folder `shared` beside the source tree.
inline std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("HEARTH_SHARED_DIR"); env != nullptr && *env != '\0')
    return env;
  return std::filesystem::path(HEARTH_SOURCE_DIR).parent_path() / "shared";
}

inline bool shared_available() { return std::filesystem::is_directory(shared_dir() / "models"); }

// CI is set and not "false" or "0".
inline bool running_under_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && *ci != '\0' && std::strcmp(ci, "false") != 0 && std::strcmp(ci, "0") != 0;
}

inline std::string shared_missing_message() {
  return "needs the shared test data at " + shared_dir().string() +
         " (models and reference outputs; set HEARTH_SHARED_DIR to point elsewhere)";
}

}  // namespace hearth::testing

#define HEARTH_REQUIRE_SHARED()                                                                    \
  do {                                                                                             \
    if (!::hearth::testing::shared_available()) {                                                  \
      if (::hearth::testing::running_under_ci())                                                   \
        GTEST_FAIL() << ::hearth::testing::shared_missing_message() << "; under CI it must exist"; \
      GTEST_SKIP() << ::hearth::testing::shared_missing_message();                                 \
    }                                                                                              \
  } while (0)
