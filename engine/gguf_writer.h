// Writes GGUF version 3 files: used by `hearth-model synth` and `quantize`,
// and by tests that need files of a precise shape (or a precisely broken one).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/gguf.h"

namespace hearth::engine {

class GgufWriter {
 public:
  explicit GgufWriter(std::size_t alignment = 32);

  void add_uint32(std::string_view key, std::uint32_t v);
  void add_int32(std::string_view key, std::int32_t v);
  void add_uint64(std::string_view key, std::uint64_t v);
  void add_float32(std::string_view key, float v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);
  void add_string_array(std::string_view key, const std::vector<std::string>& v);
  void add_float32_array(std::string_view key, const std::vector<float>& v);
  void add_int32_array(std::string_view key, const std::vector<std::int32_t>& v);

  // Copies a value read from another file, whatever its type.
  void add_value(std::string_view key, const GgufValue& v);

  // `dims` ne0 first; `data` holds exactly the tensor's bytes for `type`.
  void add_tensor(std::string_view name, const std::vector<std::uint64_t>& dims, GgmlType type,
                  std::string_view data);

  // The whole file.
  std::string serialize() const;
  absl::Status write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> dims;
    GgmlType type;
    std::string data;
  };
  void key(std::string_view k, GgufValueType t);

  std::size_t alignment_;
  std::uint64_t n_kv_ = 0;
  std::string kv_bytes_;
  std::vector<Tensor> tensors_;
};

}  // namespace hearth::engine
