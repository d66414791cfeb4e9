#include "chat/json_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/utf8.h"

namespace hearth::chat {

absl::StatusOr<Value> value_from_json(const nlohmann::ordered_json& json, int max_depth) {
  using J = nlohmann::ordered_json::value_t;
  if (max_depth < 0) return absl::InvalidArgumentError("JSON value nested too deeply");
  switch (json.type()) {
    case J::null:
      return Value::none();
    case J::boolean:
      return Value::boolean(json.get<bool>());
    case J::number_integer:
      return Value::integer(json.get<int64_t>());
    case J::number_unsigned: {
      const auto u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return absl::InvalidArgumentError(str_cat("JSON integer ", u, " is out of range"));
      return Value::integer(static_cast<int64_t>(u));
    }
    case J::number_float:
      return Value::floating(json.get<double>());
    case J::string:
      return Value::string(json.get<std::string>());
    case J::array: {
      List items;
      items.reserve(json.size());
      for (const auto& item : json) {
        HEARTH_ASSIGN_OR_RETURN(Value v, value_from_json(item, max_depth - 1));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items));
    }
    case J::object: {
      Dict d;
      d.entries.reserve(json.size());
      for (const auto& [key, item] : json.items()) {
        HEARTH_ASSIGN_OR_RETURN(Value v, value_from_json(item, max_depth - 1));
        d.entries.emplace_back(Value::string(key), std::move(v));
      }
      return Value::dict(std::move(d));
    }
    default:
      return absl::InvalidArgumentError("unsupported JSON value (binary or discarded)");
  }
}

namespace {

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  char buf[16];
  for (char32_t cp : utf8_decode(s)) {
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F && cp < 0x10000)) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else if (ensure_ascii && cp >= 0x10000) {
      const char32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                    static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      out += buf;
    } else {
      utf8_append(out, cp);
    }
  }
  out.push_back('"');
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return float_repr(d);
}

// A dict key as json.dumps converts it: str, int, float, bool or None.
absl::StatusOr<std::string> json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString:
      return key.as_string();
    case Value::Kind::kInt:
      return std::to_string(key.as_int());
    case Value::Kind::kFloat:
      return json_float(key.as_double());
    case Value::Kind::kBool:
      return std::string(key.as_bool() ? "true" : "false");
    case Value::Kind::kNone:
      return std::string("null");
    default:
      return absl::InvalidArgumentError(
          str_cat("keys must be str, int, float, bool or None, not ", key.type_name()));
  }
}

class Dumper {
 public:
  Dumper(const JsonDumpOptions& o, size_t max_bytes) : o_(o), max_bytes_(max_bytes) {
    item_sep_ = o.item_separator.value_or(o.indent ? "," : ", ");
    key_sep_ = o.key_separator.value_or(": ");
  }

  absl::Status dump(const Value& v, int level) {
    if (out.size() > max_bytes_)
      return absl::ResourceExhaustedError(str_cat("tojson output exceeds ", max_bytes_, " bytes"));
    switch (v.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return absl::OkStatus();
      case Value::Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return absl::OkStatus();
      case Value::Kind::kInt:
        out += std::to_string(v.as_int());
        return absl::OkStatus();
      case Value::Kind::kFloat:
        out += json_float(v.as_double());
        return absl::OkStatus();
      case Value::Kind::kString:
        append_json_string(out, v.as_string(), o_.ensure_ascii);
        return absl::OkStatus();
      case Value::Kind::kList:
      case Value::Kind::kTuple:
        return dump_list(v.as_list(), level);
      case Value::Kind::kDict:
        return dump_dict(v.as_dict(), level);
      default:
        return absl::InvalidArgumentError(
            str_cat("Object of type ", v.type_name(), " is not JSON serializable"));
    }
  }

  std::string out;

 private:
  void newline(int level) {
    if (!o_.indent) return;
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *o_.indent;
  }

  absl::Status dump_list(const List& items, int level) {
    if (items.empty()) {
      out += "[]";
      return absl::OkStatus();
    }
    out.push_back('[');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += item_sep_;
      newline(level + 1);
      HEARTH_RETURN_IF_ERROR(dump(items[i], level + 1));
    }
    newline(level);
    out.push_back(']');
    return absl::OkStatus();
  }

  absl::Status dump_dict(const Dict& d, int level) {
    if (d.entries.empty()) {
      out += "{}";
      return absl::OkStatus();
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& e : d.entries) entries.push_back(&e);
    if (o_.sort_keys) HEARTH_RETURN_IF_ERROR(sort_entries(entries));
    out.push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out += item_sep_;
      newline(level + 1);
      HEARTH_ASSIGN_OR_RETURN(std::string key, json_key(entries[i]->first));
      append_json_string(out, key, o_.ensure_ascii);
      out += key_sep_;
      HEARTH_RETURN_IF_ERROR(dump(entries[i]->second, level + 1));
    }
    newline(level);
    out.push_back('}');
    return absl::OkStatus();
  }

  static absl::Status sort_entries(std::vector<const std::pair<Value, Value>*>& entries) {
    absl::Status status;
    std::stable_sort(entries.begin(), entries.end(), [&](auto* a, auto* b) {
      auto c = compare_values(a->first, b->first);
      if (!c.ok()) {
        status = c.status();
        return false;
      }
      return *c < 0;
    });
    return status;
  }

  const JsonDumpOptions& o_;
  size_t max_bytes_;
  std::string item_sep_, key_sep_;
};

}  // namespace

absl::StatusOr<std::string> json_dumps(const Value& value, const JsonDumpOptions& options,
                                       size_t max_bytes) {
  Dumper d(options, max_bytes);
  HEARTH_RETURN_IF_ERROR(d.dump(value, 0));
  if (d.out.size() > max_bytes)
    return absl::ResourceExhaustedError(str_cat("tojson output exceeds ", max_bytes, " bytes"));
  return std::move(d.out);
}

}  // namespace hearth::chat
