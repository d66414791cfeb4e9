// The trained stories260K model (../shared) for the server tests that serve
// it (batching, prefix reuse).
#pragma once

#include "tests/reliability/reliability_util.h"

// tests/server's binaries are not linked with hearth_shared_data (which
// defines the source tree's path); this file's own path gives it.
#ifndef HEARTH_SOURCE_DIR
#define HEARTH_SOURCE_DIR \
  (std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string())
#endif
#include "tests/support/shared_data.h"

namespace hearth::testing {

inline fs::path stories_path() { return shared_dir() / "models" / "stories260K.gguf"; }

}  // namespace hearth::testing
