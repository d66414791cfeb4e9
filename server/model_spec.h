// What the server serves: one ModelSpec per model, from flags or a config file.
//
// Config file format (one section per model; '#' starts a comment):
//
//   [model tinyllama]
//   path = /models/tinyllama-1.1b.Q4_0.gguf
//   instances = 2        # warm Module instances (default: --instances, 1)
//   queue = 16           # requests that may wait for an instance (default: --queue, 8)
//   context = 2048       # KV positions per instance (default: the model's, capped at 4096)
//   kv_cache = int8      # int8 | float (default: --kv-cache, int8)
//   step_tokens = 16     # token budget of one batched step (default: --step-tokens, 16)
//   chat_template = /models/tinyllama.jinja   # overrides the file's tokenizer.chat_template
//
// `path = builtin:demo` serves the built-in synthetic demo model.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/module.h"

namespace hearth::server {

// The source name of the built-in synthetic demo model.
inline constexpr std::string_view kDemoSource = "builtin:demo";

inline constexpr std::size_t kDefaultStepTokens = 16;
inline constexpr std::size_t kMaxStepTokens = 1024;

struct ModelSpec {
  std::string name;
  std::string path;  // a GGUF file, or kDemoSource
  std::size_t instances = 1;
  std::size_t queue = 8;
  std::size_t context = 0;  // 0: the model's own, capped at 4096
  engine::KvCacheType kv_cache = engine::KvCacheType::kInt8;
  // Token budget of one batched step of the model's step loop: decode rows
  // plus prompt-chunk rows (server/step_loop.h).
  std::size_t step_tokens = kDefaultStepTokens;
  // A Jinja file that replaces the model file's tokenizer.chat_template;
  // empty: the file's own (server/model_pool.h).
  std::string chat_template;

  bool is_demo() const { return path == kDemoSource; }
};

// Limits a spec must respect (also the ranges the flags accept).
inline constexpr std::size_t kMaxInstances = 64;
inline constexpr std::size_t kMaxQueue = 4096;
inline constexpr std::size_t kMaxContext = 1 << 20;

// Parses a config file's text. `defaults` fills what a section leaves out.
// Errors name the file, the line and the key: "models.conf:7: instances: ...".
absl::StatusOr<std::vector<ModelSpec>> parse_model_config(std::string_view text,
                                                          std::string_view file_name,
                                                          const ModelSpec& defaults);

// "NAME=PATH" as given to --model.
absl::StatusOr<ModelSpec> parse_model_flag(std::string_view value, const ModelSpec& defaults);

// --chat-template values: "NAME=FILE" sets FILE for the spec named NAME;
// a value without a served NAME before '=' is a FILE for every spec. Each
// spec takes at most one. InvalidArgument naming the value.
absl::Status apply_chat_template_flags(const std::vector<std::string>& values,
                                       std::vector<ModelSpec>& specs);

// Names are what clients send in `model`: 1-128 characters of [A-Za-z0-9._:/-].
absl::Status validate_model_name(std::string_view name);

// Refuses duplicate names and out-of-range counts, naming the model.
absl::Status validate_specs(const std::vector<ModelSpec>& specs);

}  // namespace hearth::server
