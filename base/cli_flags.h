// Minimal command-line flag parsing for hearth's programs (the server and
// the tools): --name value and --name=value, boolean --flag / --no-flag,
// repeated flags, positional arguments. Every mistake is reported as "<tool>: <flag>: <what is
// wrong>".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hearth {

class Flags {
 public:
  // `value_flags`: flags that take a value; `bool_flags`: flags that don't
  // (each also accepted as --no-<name>). Anything else starting with "--" is an error.
  Flags(std::string tool, std::vector<std::string> value_flags,
        std::vector<std::string> bool_flags);

  // Parses argv[first..argc). Returns false (and error() says why) on a mistake.
  bool parse(int argc, char** argv, int first = 1);
  const std::string& error() const { return error_; }
  // error() without its "<tool>: " prefix, for a caller that adds its own.
  std::string error_detail() const {
    return error_.starts_with(tool_ + ": ") ? error_.substr(tool_.size() + 2) : error_;
  }

  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  // The last value given, or `fallback`.
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> get_all(const std::string& name) const;
  std::optional<bool> get_bool(const std::string& name) const;

  // Typed accessors: on a malformed value they record an error and return false.
  bool get_int(const std::string& name, std::int64_t min, std::int64_t max, std::int64_t* out);
  bool get_float(const std::string& name, double min, double max, double* out);
  // The same over (0, max]: for values where 0 would mean "unset".
  bool get_positive_float(const std::string& name, double max, double* out);

 private:
  std::string tool_;
  std::vector<std::string> value_flags_, bool_flags_;
  std::map<std::string, std::vector<std::string>> values_;
  std::map<std::string, bool> bools_;
  std::vector<std::string> positional_;
  std::string error_;
};

// JSON text for a string (quoted, escaped; invalid UTF-8 bytes become U+FFFD).
std::string json_string(const std::string& s);

}  // namespace hearth
