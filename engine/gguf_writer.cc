#include "engine/gguf_writer.h"

#include <cstdio>
#include <cstring>

#include "base/str_cat.h"
#include "base/write_file.h"

namespace hearth::engine {
namespace {

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_string(std::string& out, std::string_view s) {
  put<std::uint64_t>(out, s.size());
  out.append(s);
}

}  // namespace

GgufWriter::GgufWriter(std::size_t alignment) : alignment_(alignment) {
  if (alignment != 32) add_uint32("general.alignment", static_cast<std::uint32_t>(alignment));
}

void GgufWriter::key(std::string_view k, GgufValueType t) {
  ++n_kv_;
  put_string(kv_bytes_, k);
  put<std::uint32_t>(kv_bytes_, static_cast<std::uint32_t>(t));
}

void GgufWriter::add_uint32(std::string_view k, std::uint32_t v) {
  key(k, GgufValueType::kUint32);
  put(kv_bytes_, v);
}
void GgufWriter::add_int32(std::string_view k, std::int32_t v) {
  key(k, GgufValueType::kInt32);
  put(kv_bytes_, v);
}
void GgufWriter::add_uint64(std::string_view k, std::uint64_t v) {
  key(k, GgufValueType::kUint64);
  put(kv_bytes_, v);
}
void GgufWriter::add_float32(std::string_view k, float v) {
  key(k, GgufValueType::kFloat32);
  put(kv_bytes_, v);
}
void GgufWriter::add_bool(std::string_view k, bool v) {
  key(k, GgufValueType::kBool);
  put<std::uint8_t>(kv_bytes_, v ? 1 : 0);
}
void GgufWriter::add_string(std::string_view k, std::string_view v) {
  key(k, GgufValueType::kString);
  put_string(kv_bytes_, v);
}

void GgufWriter::add_string_array(std::string_view k, const std::vector<std::string>& v) {
  key(k, GgufValueType::kArray);
  put<std::uint32_t>(kv_bytes_, static_cast<std::uint32_t>(GgufValueType::kString));
  put<std::uint64_t>(kv_bytes_, v.size());
  for (const auto& s : v) put_string(kv_bytes_, s);
}

void GgufWriter::add_float32_array(std::string_view k, const std::vector<float>& v) {
  key(k, GgufValueType::kArray);
  put<std::uint32_t>(kv_bytes_, static_cast<std::uint32_t>(GgufValueType::kFloat32));
  put<std::uint64_t>(kv_bytes_, v.size());
  for (float x : v) put(kv_bytes_, x);
}

void GgufWriter::add_int32_array(std::string_view k, const std::vector<std::int32_t>& v) {
  key(k, GgufValueType::kArray);
  put<std::uint32_t>(kv_bytes_, static_cast<std::uint32_t>(GgufValueType::kInt32));
  put<std::uint64_t>(kv_bytes_, v.size());
  for (std::int32_t x : v) put(kv_bytes_, x);
}

void GgufWriter::add_value(std::string_view k, const GgufValue& v) {
  key(k, v.type);
  switch (v.type) {
    case GgufValueType::kUint8:
      put<std::uint8_t>(kv_bytes_, static_cast<std::uint8_t>(v.scalar.u64));
      break;
    case GgufValueType::kInt8:
      put<std::int8_t>(kv_bytes_, static_cast<std::int8_t>(v.scalar.i64));
      break;
    case GgufValueType::kUint16:
      put<std::uint16_t>(kv_bytes_, static_cast<std::uint16_t>(v.scalar.u64));
      break;
    case GgufValueType::kInt16:
      put<std::int16_t>(kv_bytes_, static_cast<std::int16_t>(v.scalar.i64));
      break;
    case GgufValueType::kUint32:
      put<std::uint32_t>(kv_bytes_, static_cast<std::uint32_t>(v.scalar.u64));
      break;
    case GgufValueType::kInt32:
      put<std::int32_t>(kv_bytes_, static_cast<std::int32_t>(v.scalar.i64));
      break;
    case GgufValueType::kUint64:
      put<std::uint64_t>(kv_bytes_, v.scalar.u64);
      break;
    case GgufValueType::kInt64:
      put<std::int64_t>(kv_bytes_, v.scalar.i64);
      break;
    case GgufValueType::kFloat32:
      put<float>(kv_bytes_, static_cast<float>(v.scalar.f64));
      break;
    case GgufValueType::kFloat64:
      put<double>(kv_bytes_, v.scalar.f64);
      break;
    case GgufValueType::kBool:
      put<std::uint8_t>(kv_bytes_, v.scalar.b ? 1 : 0);
      break;
    case GgufValueType::kString:
      put_string(kv_bytes_, v.str);
      break;
    case GgufValueType::kArray:
      // The encoded elements are copied as they were (nested arrays included).
      put<std::uint32_t>(kv_bytes_, static_cast<std::uint32_t>(v.array_type));
      put<std::uint64_t>(kv_bytes_, v.array_count);
      kv_bytes_.append(reinterpret_cast<const char*>(v.array_data), v.array_bytes);
      break;
  }
}

void GgufWriter::add_tensor(std::string_view name, const std::vector<std::uint64_t>& dims,
                            GgmlType type, std::string_view data) {
  tensors_.push_back({std::string(name), dims, type, std::string(data)});
}

std::string GgufWriter::serialize() const {
  std::string out;
  put<std::uint32_t>(out, 0x46554747);
  put<std::uint32_t>(out, 3);
  put<std::uint64_t>(out, tensors_.size());
  put<std::uint64_t>(out, n_kv_);
  out += kv_bytes_;
  std::uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(t.dims.size()));
    for (std::uint64_t d : t.dims) put(out, d);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(t.type));
    put(out, offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
  for (const Tensor& t : tensors_) {
    out += t.data;
    out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
  }
  return out;
}

absl::Status GgufWriter::write(const std::string& path) const {
  return write_whole_file(path, serialize());
}

}  // namespace hearth::engine
