#include "chat/builtin_args.h"

#include "absl/status/status.h"
#include "base/str_cat.h"

namespace hearth::chat {

const Value* arg(const CallArgs& a, size_t index, std::string_view name) {
  if (index < a.positional.size()) return &a.positional[index];
  for (const auto& [k, v] : a.named)
    if (k == name) return &v;
  return nullptr;
}

absl::StatusOr<int64_t> int_arg(const CallArgs& a, size_t index, std::string_view name,
                                int64_t dflt) {
  const Value* v = arg(a, index, name);
  if (v == nullptr) return dflt;
  if (!v->is_integral())
    return absl::InvalidArgumentError(
        str_cat("argument '", name, "' must be an integer, not ", v->type_name()));
  return v->as_int();
}

absl::StatusOr<bool> bool_arg(const CallArgs& a, size_t index, std::string_view name, bool dflt) {
  const Value* v = arg(a, index, name);
  return v == nullptr ? dflt : v->truthy();
}

absl::StatusOr<std::optional<std::string>> str_arg(const CallArgs& a, size_t index,
                                                   std::string_view name) {
  const Value* v = arg(a, index, name);
  if (v == nullptr || v->is_none()) return std::optional<std::string>();
  if (!v->is_string())
    return absl::InvalidArgumentError(
        str_cat("argument '", name, "' must be a string, not ", v->type_name()));
  return std::optional<std::string>(v->as_string());
}

}  // namespace hearth::chat
