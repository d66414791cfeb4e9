#include "base/cli_flags.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace hearth {

Flags::Flags(std::string tool, std::vector<std::string> value_flags,
             std::vector<std::string> bool_flags)
    : tool_(std::move(tool)),
      value_flags_(std::move(value_flags)),
      bool_flags_(std::move(bool_flags)) {}

bool Flags::parse(int argc, char** argv, int first) {
  auto known = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (known(value_flags_, name)) {
      if (!inline_value) {
        if (i + 1 >= argc) {
          error_ = tool_ + ": --" + name + ": needs a value";
          return false;
        }
        value = argv[++i];
      }
      values_[name].push_back(value);
    } else if (known(bool_flags_, name) && !inline_value) {
      bools_[name] = true;
    } else if (name.rfind("no-", 0) == 0 && known(bool_flags_, name.substr(3)) && !inline_value) {
      bools_[name.substr(3)] = false;
    } else {
      error_ = tool_ + ": unknown flag --" + name + " (see --help)";
      return false;
    }
  }
  return true;
}

std::string Flags::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.back();
}

std::vector<std::string> Flags::get_all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::optional<bool> Flags::get_bool(const std::string& name) const {
  auto it = bools_.find(name);
  if (it == bools_.end()) return std::nullopt;
  return it->second;
}

bool Flags::get_int(const std::string& name, std::int64_t min, std::int64_t max,
                    std::int64_t* out) {
  if (!has(name)) return true;
  const std::string v = get(name);
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0) {
    error_ = tool_ + ": --" + name + ": '" + v + "' is not a whole number";
    return false;
  }
  if (x < min || x > max) {
    error_ = tool_ + ": --" + name + ": " + v + " is out of range [" + std::to_string(min) + ", " +
             std::to_string(max) + "]";
    return false;
  }
  *out = x;
  return true;
}

bool Flags::get_float(const std::string& name, double min, double max, double* out) {
  if (!has(name)) return true;
  const std::string v = get(name);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x)) {
    error_ = tool_ + ": --" + name + ": '" + v + "' is not a number";
    return false;
  }
  if (x < min || x > max) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ": --%s: %s is out of range [%g, %g]", name.c_str(), v.c_str(),
                  min, max);
    error_ = tool_ + buf;
    return false;
  }
  *out = x;
  return true;
}

bool Flags::get_positive_float(const std::string& name, double max, double* out) {
  double x = 0;
  if (!get_float(name, -HUGE_VAL, HUGE_VAL, &x)) return false;
  if (has(name) && (x <= 0 || x > max)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ": --%s: %s is out of range (0, %g]", name.c_str(),
                  get(name).c_str(), max);
    error_ = tool_ + buf;
    return false;
  }
  if (has(name)) *out = x;
  return true;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    // Validate UTF-8 sequences; copy valid ones, replace invalid bytes.
    std::size_t len = c < 0x80         ? 1
                      : (c >> 5) == 6  ? 2
                      : (c >> 4) == 14 ? 3
                      : (c >> 3) == 30 ? 4
                                       : 0;
    bool ok = len != 0 && i + len <= s.size();
    for (std::size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (ok && len == 2) ok = c >= 0xC2;
    if (ok && len == 3) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
    }
    if (ok && len == 4) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = c <= 0xF4 && !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (!ok) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (len == 1) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
          } else {
            out += static_cast<char>(c);
          }
      }
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  out += '"';
  return out;
}

}  // namespace hearth
