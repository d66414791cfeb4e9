#include "engine/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"

namespace hearth::engine {
namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 4;

// Bounds-checked little-endian reading over the file. Every read states what
// it reads, so an error names the field and where it stood.
class Cursor {
 public:
  Cursor(const std::uint8_t* data, std::size_t size, const std::string& file)
      : data_(data), size_(size), file_(file) {}

  std::size_t pos() const { return pos_; }
  std::size_t remaining() const { return size_ - pos_; }

  absl::Status error(std::string_view what, std::size_t at, std::string_view problem) const {
    return absl::InvalidArgumentError(
        str_cat("GGUF file '", file_, "': ", what, " at offset ", at, ": ", problem));
  }
  absl::Status truncated(std::string_view what, std::size_t need) const {
    return error(what, pos_,
                 str_cat("needs ", need, " bytes but the file has only ", remaining(),
                         " left (file size ", size_, "; truncated?)"));
  }

  template <typename T>
  absl::Status read(T* out, std::string_view what) {
    if (remaining() < sizeof(T)) return truncated(what, sizeof(T));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status read_string(std::string_view* out, std::string_view what) {
    const std::size_t at = pos_;
    std::uint64_t len = 0;
    if (auto s = read(&len, what); !s.ok()) return s;
    if (len > remaining()) {
      return error(
          what, at,
          str_cat("string length ", len, " exceeds the ", remaining(), " bytes left in the file"));
    }
    *out = std::string_view(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return absl::OkStatus();
  }

  absl::Status skip(std::uint64_t n, std::string_view what) {
    if (n > remaining()) return truncated(what, n);
    pos_ += n;
    return absl::OkStatus();
  }

  const std::uint8_t* here() const { return data_ + pos_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  const std::string& file_;
};

std::size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

bool known_value_type(std::uint32_t t) {
  return t <= static_cast<std::uint32_t>(GgufValueType::kFloat64);
}

template <typename T>
absl::Status read_scalar(Cursor& c, std::string_view what, GgufValue* v) {
  T x{};
  if (auto s = c.read(&x, what); !s.ok()) return s;
  if constexpr (std::is_floating_point_v<T>) {
    v->scalar.f64 = x;
  } else if constexpr (std::is_signed_v<T>) {
    v->scalar.i64 = x;
  } else {
    v->scalar.u64 = x;
  }
  return absl::OkStatus();
}

// Reads one value of type `t` at the cursor (arrays recursively); `what`
// names it in errors (built once per key by the caller: an array of a
// million strings must not rebuild it a million times).
absl::Status read_value(Cursor& c, GgufValueType t, std::string_view what, int depth,
                        GgufValue* v) {
  v->type = t;
  v->file_offset = c.pos();
  switch (t) {
    case GgufValueType::kUint8:
      return read_scalar<std::uint8_t>(c, what, v);
    case GgufValueType::kInt8:
      return read_scalar<std::int8_t>(c, what, v);
    case GgufValueType::kUint16:
      return read_scalar<std::uint16_t>(c, what, v);
    case GgufValueType::kInt16:
      return read_scalar<std::int16_t>(c, what, v);
    case GgufValueType::kUint32:
      return read_scalar<std::uint32_t>(c, what, v);
    case GgufValueType::kInt32:
      return read_scalar<std::int32_t>(c, what, v);
    case GgufValueType::kUint64:
      return read_scalar<std::uint64_t>(c, what, v);
    case GgufValueType::kInt64:
      return read_scalar<std::int64_t>(c, what, v);
    case GgufValueType::kFloat32:
      return read_scalar<float>(c, what, v);
    case GgufValueType::kFloat64:
      return read_scalar<double>(c, what, v);
    case GgufValueType::kBool: {
      std::uint8_t x = 0;
      if (auto s = c.read(&x, what); !s.ok()) return s;
      if (x > 1)
        return c.error(what, v->file_offset, str_cat("bool value ", int{x}, " is neither 0 nor 1"));
      v->scalar.b = x != 0;
      return absl::OkStatus();
    }
    case GgufValueType::kString:
      return c.read_string(&v->str, what);
    case GgufValueType::kArray: {
      if (depth >= kMaxArrayDepth) return c.error(what, v->file_offset, "arrays nested too deeply");
      std::uint32_t et = 0;
      if (auto s = c.read(&et, what); !s.ok()) return s;
      if (!known_value_type(et)) {
        return c.error(what, v->file_offset, str_cat("unknown array element type ", et));
      }
      std::uint64_t count = 0;
      if (auto s = c.read(&count, what); !s.ok()) return s;
      v->array_type = static_cast<GgufValueType>(et);
      v->array_count = count;
      v->array_data = c.here();
      const std::size_t start = c.pos();
      if (const std::size_t es = scalar_size(v->array_type); es != 0) {
        if (count > c.remaining() / es) {
          return c.error(
              what, start,
              str_cat("array of ", count, " ", gguf_value_type_name(v->array_type),
                      " elements exceeds the ", c.remaining(), " bytes left in the file"));
        }
        if (auto s = c.skip(count * es, what); !s.ok()) return s;
      } else {
        // Strings and nested arrays: each element takes at least 8 bytes.
        if (count > c.remaining() / 8) {
          return c.error(what, start,
                         str_cat("array of ", count, " elements cannot fit in the ", c.remaining(),
                                 " bytes left in the file"));
        }
        for (std::uint64_t i = 0; i < count; ++i) {
          GgufValue element;
          if (auto s = read_value(c, v->array_type, what, depth + 1, &element); !s.ok()) return s;
        }
      }
      v->array_bytes = c.pos() - start;
      return absl::OkStatus();
    }
  }
  return c.error(what, v->file_offset, "unknown value type");
}

// Tensors in offset order; each must start where the one before ended or
// later. Shared bytes are a corrupt offset, or a small file asking the
// loader to copy one layer's data into every layer.
absl::Status check_no_overlap(const std::vector<GgufTensorInfo>& tensors, std::size_t data_offset,
                              const Cursor& c) {
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors.size());
  for (const GgufTensorInfo& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& before = *by_offset[i - 1];
    const GgufTensorInfo& t = *by_offset[i];
    if (t.offset < before.offset + before.n_bytes)
      return c.error(
          str_cat("tensor '", t.name, "'"), t.info_offset,
          str_cat("data [", data_offset + t.offset, ", ", data_offset + t.offset + t.n_bytes,
                  ") overlaps tensor '", before.name, "''s [", data_offset + before.offset, ", ",
                  data_offset + before.offset + before.n_bytes, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
      return "uint8";
    case GgufValueType::kInt8:
      return "int8";
    case GgufValueType::kUint16:
      return "uint16";
    case GgufValueType::kInt16:
      return "int16";
    case GgufValueType::kUint32:
      return "uint32";
    case GgufValueType::kInt32:
      return "int32";
    case GgufValueType::kFloat32:
      return "float32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "uint64";
    case GgufValueType::kInt64:
      return "int64";
    case GgufValueType::kFloat64:
      return "float64";
  }
  return "unknown";
}

namespace {

// Every tensor type the reader knows: its name and block geometry (elements
// and bytes per block), as ggml defines them.
struct GgmlTypeTraits {
  GgmlType type;
  const char* name;
  std::size_t block_elems, block_bytes;
};

constexpr GgmlTypeTraits kGgmlTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},
    {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},
    {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},
    {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ8_0, "Q8_0", 32, 34},
    {GgmlType::kQ8_1, "Q8_1", 32, 36},
    {GgmlType::kQ2_K, "Q2_K", 256, 84},
    {GgmlType::kQ3_K, "Q3_K", 256, 110},
    {GgmlType::kQ4_K, "Q4_K", 256, 144},
    {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210},
    {GgmlType::kQ8_K, "Q8_K", 256, 292},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66},
    {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98},
    {GgmlType::kIQ1_S, "IQ1_S", 256, 50},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18},
    {GgmlType::kIQ3_S, "IQ3_S", 256, 110},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::kI8, "I8", 1, 1},
    {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},
    {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},
    {GgmlType::kIQ1_M, "IQ1_M", 256, 56},
    {GgmlType::kBF16, "BF16", 1, 2},
    {GgmlType::kTQ1_0, "TQ1_0", 256, 54},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66},
};

const GgmlTypeTraits* ggml_type_traits(GgmlType t) {
  for (const GgmlTypeTraits& traits : kGgmlTypes)
    if (traits.type == t) return &traits;
  return nullptr;
}

}  // namespace

std::string ggml_type_name(GgmlType t) {
  if (const GgmlTypeTraits* traits = ggml_type_traits(t)) return traits->name;
  return str_cat("type#", static_cast<std::uint32_t>(t));
}

bool ggml_type_block(GgmlType t, std::size_t* block_elems, std::size_t* block_bytes) {
  const GgmlTypeTraits* traits = ggml_type_traits(t);
  if (traits == nullptr) return false;
  *block_elems = traits->block_elems;
  *block_bytes = traits->block_bytes;
  return true;
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        str_cat("cannot open model file '", path, "': ", std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(str_cat("model file '", path, "' is not a regular file"));
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(str_cat("GGUF file '", path, "' is empty"));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    return absl::InternalError(
        str_cat("cannot map model file '", path, "': ", std::strerror(errno)));
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->name_ = path;
  f->data_ = static_cast<const std::uint8_t*>(map);
  f->size_ = size;
  f->mapping_ = map;
  if (auto s = f->parse_all(); !s.ok()) return s;
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::parse(const std::uint8_t* data,
                                                          std::size_t size, std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->name_ = std::move(name);
  f->data_ = data;
  f->size_ = size;
  if (auto s = f->parse_all(); !s.ok()) return s;
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::parse(std::string bytes, std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->name_ = std::move(name);
  f->owned_ = std::move(bytes);
  f->data_ = reinterpret_cast<const std::uint8_t*>(f->owned_.data());
  f->size_ = f->owned_.size();
  HEARTH_RETURN_IF_ERROR(f->parse_all());
  return f;
}

absl::Status GgufFile::parse_all() {
  Cursor c(data_, size_, name_);
  std::uint32_t magic = 0;
  if (auto s = c.read(&magic, "magic"); !s.ok()) return s;
  if (magic != kMagic)
    return c.error("magic", 0, "not a GGUF file (the first four bytes are not \"GGUF\")");
  if (auto s = c.read(&version_, "version"); !s.ok()) return s;
  if (version_ != 2 && version_ != 3) {
    return c.error("version", 4,
                   str_cat("GGUF version ", version_, " is not supported (only 2 and 3)"));
  }
  std::uint64_t n_tensors = 0, n_kv = 0;
  if (auto s = c.read(&n_tensors, "tensor count"); !s.ok()) return s;
  if (auto s = c.read(&n_kv, "metadata count"); !s.ok()) return s;
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least 8 +
  // 4 + 4 + 8.
  if (n_kv > c.remaining() / 13) {
    return c.error("metadata count", 16,
                   str_cat(n_kv, " key-value pairs cannot fit in a file of ", size_, " bytes"));
  }
  if (n_tensors > c.remaining() / 24) {
    return c.error("tensor count", 8,
                   str_cat(n_tensors, " tensors cannot fit in a file of ", size_, " bytes"));
  }
  // The counts only bound what the file can hold: the vectors grow as the
  // entries are read rather than reserve a header's word (an entry's memory
  // is several times its smallest size in the file).
  constexpr std::uint64_t kReserveAtMost = 4096;
  kvs_.reserve(std::min(n_kv, kReserveAtMost));
  key_index_.reserve(std::min(n_kv, kReserveAtMost));
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    GgufKv kv;
    const std::size_t at = c.pos();
    if (auto s = c.read_string(&kv.key, str_cat("key of metadata pair #", i)); !s.ok()) return s;
    std::uint32_t t = 0;
    if (auto s = c.read(&t, str_cat("type of key '", kv.key, "'")); !s.ok()) return s;
    if (!known_value_type(t))
      return c.error(str_cat("key '", kv.key, "'"), at, str_cat("unknown value type ", t));
    const std::string what = str_cat("value of key '", kv.key, "'");
    if (auto s = read_value(c, static_cast<GgufValueType>(t), what, 0, &kv.value); !s.ok())
      return s;
    if (!key_index_.emplace(kv.key, kvs_.size()).second)
      return c.error(str_cat("key '", kv.key, "'"), at, "duplicate key");
    kvs_.push_back(kv);
  }
  if (const GgufValue* a = find("general.alignment")) {
    if (!a->is_integer() || a->scalar.u64 == 0 || (a->scalar.u64 & (a->scalar.u64 - 1)) != 0 ||
        a->scalar.u64 > 65536) {
      return c.error("key 'general.alignment'", a->file_offset,
                     "alignment must be a power of two up to 65536");
    }
    alignment_ = static_cast<std::size_t>(a->scalar.u64);
  }
  tensors_.reserve(std::min(n_tensors, kReserveAtMost));
  tensor_index_.reserve(std::min(n_tensors, kReserveAtMost));
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.info_offset = c.pos();
    const std::string what = str_cat("tensor info #", i);
    if (auto s = c.read_string(&t.name, what); !s.ok()) return s;
    const std::string tw = str_cat("tensor '", t.name, "'");
    if (auto s = c.read(&t.n_dims, tw); !s.ok()) return s;
    if (t.n_dims == 0 || t.n_dims > 4) {
      return c.error(tw, t.info_offset,
                     str_cat("has ", t.n_dims, " dimensions (1 to 4 are allowed)"));
    }
    t.n_elements = 1;
    for (std::uint32_t d = 0; d < t.n_dims; ++d) {
      if (auto s = c.read(&t.dims[d], tw); !s.ok()) return s;
      if (t.dims[d] == 0 || __builtin_mul_overflow(t.n_elements, t.dims[d], &t.n_elements) ||
          t.n_elements > (std::uint64_t{1} << 48)) {
        return c.error(tw, t.info_offset,
                       str_cat("dimension ", d, " = ", t.dims[d], " is zero or too large"));
      }
    }
    std::uint32_t type = 0;
    if (auto s = c.read(&type, tw); !s.ok()) return s;
    t.type = static_cast<GgmlType>(type);
    std::size_t be = 0, bb = 0;
    if (!ggml_type_block(t.type, &be, &bb)) {
      return c.error(tw, t.info_offset, str_cat("unknown tensor type id ", type));
    }
    if (t.dims[0] % be != 0) {
      return c.error(tw, t.info_offset,
                     str_cat("row length ", t.dims[0], " is not a multiple of the ",
                             ggml_type_name(t.type), " block size ", be));
    }
    t.n_bytes = t.n_elements / be * bb;
    if (auto s = c.read(&t.offset, tw); !s.ok()) return s;
    if (t.offset % alignment_ != 0) {
      return c.error(
          tw, t.info_offset,
          str_cat("data offset ", t.offset, " is not a multiple of the alignment ", alignment_));
    }
    if (!tensor_index_.emplace(t.name, tensors_.size()).second)
      return c.error(tw, t.info_offset, "duplicate tensor name");
    tensors_.push_back(t);
  }
  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (data_offset_ > size_ && !tensors_.empty()) {
    return c.error("tensor data", c.pos(),
                   str_cat("the data section would start at ", data_offset_,
                           ", past the end of the file (size ", size_, ")"));
  }
  const std::size_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  for (GgufTensorInfo& t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      return c.error(
          str_cat("tensor '", t.name, "'"), t.info_offset,
          str_cat("data [", data_offset_ + t.offset, ", ", data_offset_ + t.offset + t.n_bytes,
                  ") extends past the end of the file (size ", size_, "; truncated?)"));
    }
    t.data = data_ + data_offset_ + t.offset;
  }
  return check_no_overlap(tensors_, data_offset_, c);
}

void GgufFile::release_pages(const GgufTensorInfo& t) const {
  if (mapping_ == nullptr) return;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<std::uintptr_t>(t.data) + page - 1) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(t.data) + t.n_bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status GgufFile::type_error(std::string_view key, const GgufValue& v,
                                  const char* wanted) const {
  return absl::InvalidArgumentError(str_cat("GGUF file '", name_, "': key '", key, "' at offset ",
                                            v.file_offset, " is a ", gguf_value_type_name(v.type),
                                            ", expected ", wanted));
}

namespace {
absl::Status missing(const std::string& file, std::string_view key) {
  return absl::NotFoundError(str_cat("GGUF file '", file, "' has no key '", key, "'"));
}
bool is_signed(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 || t == GgufValueType::kInt32 ||
         t == GgufValueType::kInt64;
}
}  // namespace

absl::StatusOr<std::uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(name_, key);
  if (!v->is_integer()) return type_error(key, *v, "an unsigned integer");
  if (is_signed(v->type) && v->scalar.i64 < 0) return type_error(key, *v, "a non-negative integer");
  return v->scalar.u64;
}

absl::StatusOr<std::int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(name_, key);
  if (!v->is_integer()) return type_error(key, *v, "an integer");
  if (!is_signed(v->type) && v->scalar.u64 > static_cast<std::uint64_t>(INT64_MAX)) {
    return type_error(key, *v, "an integer that fits in int64");
  }
  return v->scalar.i64;
}

absl::StatusOr<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(name_, key);
  if (v->is_float()) return v->scalar.f64;
  if (v->is_integer())
    return is_signed(v->type) ? static_cast<double>(v->scalar.i64)
                              : static_cast<double>(v->scalar.u64);
  return type_error(key, *v, "a number");
}

absl::StatusOr<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(name_, key);
  if (v->type != GgufValueType::kBool) return type_error(key, *v, "a bool");
  return v->scalar.b;
}

absl::StatusOr<std::string_view> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(name_, key);
  if (v->type != GgufValueType::kString) return type_error(key, *v, "a string");
  return v->str;
}

absl::StatusOr<std::vector<std::string_view>> GgufFile::get_string_array(
    std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(name_, key);
  if (v->type != GgufValueType::kArray || v->array_type != GgufValueType::kString) {
    return type_error(key, *v, "an array of strings");
  }
  std::vector<std::string_view> out;
  out.reserve(v->array_count);
  // Already validated when parsed: lengths are in bounds.
  const std::uint8_t* p = v->array_data;
  for (std::uint64_t i = 0; i < v->array_count; ++i) {
    std::uint64_t len;
    std::memcpy(&len, p, 8);
    out.emplace_back(reinterpret_cast<const char*>(p + 8), len);
    p += 8 + len;
  }
  return out;
}

namespace {
template <typename T>
T load_as(const std::uint8_t* p) {
  T x;
  std::memcpy(&x, p, sizeof x);
  return x;
}

// Element i of a numeric array, converted to Out.
template <typename Out>
Out array_element(const GgufValue& v, std::size_t i, std::size_t es) {
  const std::uint8_t* p = v.array_data + i * es;
  switch (v.array_type) {
    case GgufValueType::kFloat32:
      return static_cast<Out>(load_as<float>(p));
    case GgufValueType::kFloat64:
      return static_cast<Out>(load_as<double>(p));
    case GgufValueType::kUint8:
      return static_cast<Out>(load_as<std::uint8_t>(p));
    case GgufValueType::kInt8:
      return static_cast<Out>(load_as<std::int8_t>(p));
    case GgufValueType::kUint16:
      return static_cast<Out>(load_as<std::uint16_t>(p));
    case GgufValueType::kInt16:
      return static_cast<Out>(load_as<std::int16_t>(p));
    case GgufValueType::kUint32:
      return static_cast<Out>(load_as<std::uint32_t>(p));
    case GgufValueType::kInt32:
      return static_cast<Out>(load_as<std::int32_t>(p));
    case GgufValueType::kUint64:
      return static_cast<Out>(load_as<std::uint64_t>(p));
    case GgufValueType::kInt64:
      return static_cast<Out>(load_as<std::int64_t>(p));
    default:
      return Out{};
  }
}
}  // namespace

template <typename Out>
absl::StatusOr<std::vector<Out>> GgufFile::number_array(std::string_view key, bool floats_allowed,
                                                        const char* wanted) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(name_, key);
  const std::size_t es = v->type == GgufValueType::kArray ? scalar_size(v->array_type) : 0;
  const bool is_float =
      v->array_type == GgufValueType::kFloat32 || v->array_type == GgufValueType::kFloat64;
  if (es == 0 || v->array_type == GgufValueType::kBool || (is_float && !floats_allowed)) {
    return type_error(key, *v, wanted);
  }
  std::vector<Out> out(v->array_count);
  for (std::uint64_t i = 0; i < v->array_count; ++i) out[i] = array_element<Out>(*v, i, es);
  return out;
}

absl::StatusOr<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  return number_array<double>(key, /*floats_allowed=*/true, "an array of numbers");
}

absl::StatusOr<std::vector<std::int64_t>> GgufFile::get_int_array(std::string_view key) const {
  return number_array<std::int64_t>(key, /*floats_allowed=*/false, "an array of integers");
}

}  // namespace hearth::engine
