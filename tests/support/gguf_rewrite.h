// A copy of a GGUF file with metadata and tensors edited, for tests that
// need a real model file with a key added, changed or dropped.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf.h"
#include "engine/gguf_writer.h"

namespace hearth::testing {

// Each editor returns true when it has written (or deliberately dropped) the
// item itself; otherwise the item is copied as it is.
using KvEdit = std::function<bool(const engine::GgufKv&, engine::GgufWriter&)>;
using TensorEdit = std::function<bool(const engine::GgufTensorInfo&, engine::GgufWriter&)>;

inline std::string rewrite(const engine::GgufFile& src, const KvEdit& kv_edit,
                           const TensorEdit& tensor_edit) {
  engine::GgufWriter w(src.alignment());
  for (const engine::GgufKv& kv : src.metadata()) {
    if (kv.key == "general.alignment") continue;  // the writer adds it
    if (kv_edit && kv_edit(kv, w)) continue;
    w.add_value(kv.key, kv.value);
  }
  for (const engine::GgufTensorInfo& t : src.tensors()) {
    if (tensor_edit && tensor_edit(t, w)) continue;
    w.add_tensor(t.name, std::vector<std::uint64_t>(t.dims, t.dims + t.n_dims), t.type,
                 std::string_view(reinterpret_cast<const char*>(t.data), t.n_bytes));
  }
  return w.serialize();
}

}  // namespace hearth::testing
