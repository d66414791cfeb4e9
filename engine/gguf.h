// A reader for GGUF model files (versions 2 and 3) over a read-only memory map.
//
// Every count, length, offset and size in the file is checked against the
// file's size before it is used, so a truncated, corrupt or hostile file
// yields an error that names the file, the key or tensor, and the byte offset
// — never a crash or a read out of bounds. Metadata values and tensor data
// are views into the mapping: a GgufFile must outlive them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace hearth::engine {

// Metadata value types, numbered as in the file.
enum class GgufValueType : std::uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* gguf_value_type_name(GgufValueType t);

// Tensor element types, numbered as in the file (ggml's type ids).
enum class GgmlType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
};
// "Q4_K" etc.; "type#<id>" for ids the reader does not know.
std::string ggml_type_name(GgmlType t);
// Elements per block and bytes per block; false for unknown types.
bool ggml_type_block(GgmlType t, std::size_t* block_elems, std::size_t* block_bytes);

// One metadata value. Scalars are held decoded; strings and arrays point into the mapping.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  union {
    std::uint64_t u64;
    std::int64_t i64;
    double f64;
    bool b;
  } scalar{};
  std::string_view str;  // kString
  // kArray: element type, count and the raw encoded elements.
  GgufValueType array_type = GgufValueType::kUint8;
  std::uint64_t array_count = 0;
  const std::uint8_t* array_data = nullptr;
  std::size_t array_bytes = 0;
  std::size_t file_offset = 0;  // where the value starts, for error messages

  bool is_integer() const;
  bool is_float() const {
    return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
  }
};

struct GgufKv {
  std::string_view key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string_view name;
  std::uint32_t n_dims = 0;
  std::uint64_t dims[4] = {1, 1, 1, 1};  // ne0 first (the fastest-moving dimension)
  GgmlType type = GgmlType::kF32;
  std::uint64_t offset = 0;  // relative to the start of the tensor data section
  std::uint64_t n_elements = 0;
  std::uint64_t n_bytes = 0;
  const std::uint8_t* data = nullptr;  // inside the mapping
  std::size_t info_offset = 0;         // where its info record starts in the file
};

class GgufFile {
 public:
  // Maps `path` read-only and parses it.
  static absl::StatusOr<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses bytes the caller keeps alive (tests, fuzzers); `name` is used in messages.
  static absl::StatusOr<std::unique_ptr<GgufFile>> parse(const std::uint8_t* data, std::size_t size,
                                                         std::string name);
  // Parses bytes it then owns (a model made in memory, such as the built-in
  // demo), so whoever shares the file shares the bytes: nothing that holds
  // the file or its tensor pointers can outlive them.
  static absl::StatusOr<std::unique_ptr<GgufFile>> parse(std::string bytes, std::string name);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& name() const { return name_; }
  std::uint32_t version() const { return version_; }
  std::size_t size() const { return size_; }
  std::size_t alignment() const { return alignment_; }
  std::size_t data_offset() const { return data_offset_; }
  const std::vector<GgufKv>& metadata() const { return kvs_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  // Drops a tensor's file pages from this process's resident memory once its
  // contents have been copied elsewhere (packed weights). The mapping stays
  // valid: pages come back from the page cache if read again. A no-op for
  // files given to parse(), whose bytes belong to the caller.
  void release_pages(const GgufTensorInfo& t) const;

  const GgufValue* find(std::string_view key) const;
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // Typed metadata access. NotFound names a missing key; InvalidArgument names a
  // key whose type does not fit (integers of any width convert when the value fits).
  absl::StatusOr<std::uint64_t> get_uint(std::string_view key) const;
  absl::StatusOr<std::int64_t> get_int(std::string_view key) const;
  absl::StatusOr<double> get_float(std::string_view key) const;
  absl::StatusOr<bool> get_bool(std::string_view key) const;
  absl::StatusOr<std::string_view> get_string(std::string_view key) const;
  // Arrays: strings, numbers (as double / int64).
  absl::StatusOr<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  absl::StatusOr<std::vector<double>> get_float_array(std::string_view key) const;
  absl::StatusOr<std::vector<std::int64_t>> get_int_array(std::string_view key) const;

 private:
  GgufFile() = default;
  absl::Status parse_all();
  absl::Status type_error(std::string_view key, const GgufValue& v, const char* wanted) const;
  template <typename Out>
  absl::StatusOr<std::vector<Out>> number_array(std::string_view key, bool floats_allowed,
                                                const char* wanted) const;

  std::string name_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  void* mapping_ = nullptr;  // set when open() mapped the file
  std::string owned_;        // the bytes, when parse() was given them to own
  std::uint32_t version_ = 0;
  std::size_t alignment_ = 32;
  std::size_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::vector<GgufTensorInfo> tensors_;
  // Index of kvs_ / tensors_ by key / name (views of the file's bytes).
  absl::flat_hash_map<std::string_view, std::size_t> key_index_;
  absl::flat_hash_map<std::string_view, std::size_t> tensor_index_;
};

}  // namespace hearth::engine
