#include "server/model_spec.h"

#include <charconv>
#include <map>
#include <set>

#include "base/str_cat.h"

namespace hearth::server {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

bool parse_count(std::string_view v, std::size_t min, std::size_t max, std::size_t* out) {
  std::size_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || x < min || x > max) return false;
  *out = x;
  return true;
}

// Applies one `key = value` to `spec`; the message says what is wrong.
absl::Status apply(std::string_view key, std::string_view value, ModelSpec& spec) {
  auto range = [&](std::size_t min, std::size_t max) {
    return absl::InvalidArgumentError(
        str_cat(key, ": '", value, "' is not an integer in [", min, ", ", max, "]"));
  };
  if (key == "path") {
    if (value.empty()) return absl::InvalidArgumentError("path: empty");
    spec.path = std::string(value);
  } else if (key == "instances") {
    if (!parse_count(value, 1, kMaxInstances, &spec.instances)) return range(1, kMaxInstances);
  } else if (key == "queue") {
    if (!parse_count(value, 0, kMaxQueue, &spec.queue)) return range(0, kMaxQueue);
  } else if (key == "context") {
    if (!parse_count(value, 0, kMaxContext, &spec.context)) return range(0, kMaxContext);
  } else if (key == "step_tokens") {
    if (!parse_count(value, 1, kMaxStepTokens, &spec.step_tokens)) return range(1, kMaxStepTokens);
  } else if (key == "chat_template") {
    if (value.empty()) return absl::InvalidArgumentError("chat_template: empty");
    spec.chat_template = std::string(value);
  } else if (key == "kv_cache") {
    if (value == "int8") {
      spec.kv_cache = engine::KvCacheType::kInt8;
    } else if (value == "float") {
      spec.kv_cache = engine::KvCacheType::kFloat;
    } else {
      return absl::InvalidArgumentError(str_cat("kv_cache: '", value, "' is not int8 or float"));
    }
  } else {
    return absl::InvalidArgumentError(str_cat(
        "unknown key '", key,
        "' (known: path, instances, queue, context, kv_cache, step_tokens, chat_template)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status apply_chat_template_flags(const std::vector<std::string>& values,
                                       std::vector<ModelSpec>& specs) {
  // A model's template from its config section counts as set: a flag must
  // not replace it unseen (config keys win over every other flag).
  auto assign = [&](std::size_t i, const std::string& file, const std::string& value) {
    if (file.empty()) return absl::InvalidArgumentError(str_cat("'", value, "': no file"));
    if (!specs[i].chat_template.empty())
      return absl::InvalidArgumentError(str_cat("'", value, "': model '", specs[i].name,
                                                "' already has a chat template ('",
                                                specs[i].chat_template, "')"));
    specs[i].chat_template = file;
    return absl::OkStatus();
  };
  for (const std::string& value : values) {
    const std::size_t eq = value.find('=');
    bool named = false;
    for (std::size_t i = 0; eq != std::string::npos && i < specs.size(); ++i) {
      if (specs[i].name != value.substr(0, eq)) continue;
      named = true;
      if (absl::Status s = assign(i, value.substr(eq + 1), value); !s.ok()) return s;
    }
    for (std::size_t i = 0; !named && i < specs.size(); ++i)
      if (absl::Status s = assign(i, value, value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status validate_model_name(std::string_view name) {
  if (name.empty() || name.size() > 128)
    return absl::InvalidArgumentError(
        str_cat("model name '", name, "' must have 1 to 128 characters"));
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-' || c == ':' || c == '/';
    if (!ok)
      return absl::InvalidArgumentError(
          str_cat("model name '", name, "' may only contain letters, digits and . _ - : /"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ModelSpec>> parse_model_config(std::string_view text,
                                                          std::string_view file_name,
                                                          const ModelSpec& defaults) {
  std::vector<ModelSpec> specs;
  // The line each key of the current section was set on.
  std::map<std::string, std::size_t, std::less<>> set_on;
  std::size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    auto error = [&](const auto& what) {
      return absl::InvalidArgumentError(str_cat(file_name, ":", line_no, ": ", what));
    };
    if (line.front() == '[') {
      if (line.back() != ']' || line.substr(1, 6) != "model ")
        return error("a section header is [model NAME]");
      ModelSpec spec = defaults;
      spec.name = std::string(trim(line.substr(7, line.size() - 8)));
      spec.path.clear();
      if (absl::Status s = validate_model_name(spec.name); !s.ok()) return error(s.message());
      specs.push_back(std::move(spec));
      set_on.clear();
      continue;
    }
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) return error("expected 'key = value' or [model NAME]");
    if (specs.empty()) return error("'key = value' before the first [model NAME]");
    const std::string_view key = trim(line.substr(0, eq));
    if (absl::Status s = apply(key, trim(line.substr(eq + 1)), specs.back()); !s.ok())
      return error(s.message());
    if (const auto [at, fresh] = set_on.emplace(std::string(key), line_no); !fresh)
      return error(str_cat(key, ": already set on line ", at->second));
  }
  for (const ModelSpec& s : specs)
    if (s.path.empty())
      return absl::InvalidArgumentError(str_cat(file_name, ": model '", s.name, "' has no path"));
  if (specs.empty())
    return absl::InvalidArgumentError(str_cat(file_name, ": no [model NAME] section"));
  return specs;
}

absl::StatusOr<ModelSpec> parse_model_flag(std::string_view value, const ModelSpec& defaults) {
  const std::size_t eq = value.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == value.size())
    return absl::InvalidArgumentError(str_cat("--model: '", value, "' is not NAME=PATH"));
  ModelSpec spec = defaults;
  spec.name = std::string(value.substr(0, eq));
  spec.path = std::string(value.substr(eq + 1));
  if (absl::Status s = validate_model_name(spec.name); !s.ok())
    return absl::InvalidArgumentError(str_cat("--model: ", s.message()));
  return spec;
}

absl::Status validate_specs(const std::vector<ModelSpec>& specs) {
  std::set<std::string> names;
  for (const ModelSpec& s : specs) {
    if (!names.insert(s.name).second)
      return absl::InvalidArgumentError(str_cat("model '", s.name, "' is configured twice"));
    if (s.instances < 1 || s.instances > kMaxInstances)
      return absl::InvalidArgumentError(
          str_cat("model '", s.name, "': instances must be in [1, ", kMaxInstances, "]"));
    if (s.context == 1)
      return absl::InvalidArgumentError(
          str_cat("model '", s.name,
                  "': context 1 (--context, or its config key) leaves no room to generate (0: the "
          "model's own; at least 2)"));
  }
  return absl::OkStatus();
}

}  // namespace hearth::server
