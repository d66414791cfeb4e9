// Filters on strings and scalars, following jinja2 3.1's definitions.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/builtin_args.h"
#include "chat/filter_impl.h"
#include "chat/json_value.h"
#include "chat/strings.h"
#include "chat/utf8.h"

namespace hearth::chat::filters {

absl::StatusOr<Value> trim(Evaluator&, const Value& in, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto chars, str_arg(args, 0, "chars"));
  return Value::string(py_strip(to_str(in), chars, StripSide::kBoth));
}

absl::StatusOr<Value> lower(Evaluator&, const Value& in, CallArgs&) {
  return Value::string(py_lower(to_str(in)));
}

absl::StatusOr<Value> upper(Evaluator&, const Value& in, CallArgs&) {
  return Value::string(py_upper(to_str(in)));
}

// jinja2's title: capitalizes each word after "-", whitespace, "(", "{",
// "[" or "<" (not str.title(), which also splits on digits and quotes).
absl::StatusOr<Value> title(Evaluator&, const Value& in, CallArgs&) {
  const std::string s = to_str(in);
  std::string out;
  bool word_start = true;
  for (char32_t cp : utf8_decode(s)) {
    const bool sep =
        is_py_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    std::string c;
    utf8_append(c, cp);
    out += sep ? c : word_start ? py_upper(c) : py_lower(c);
    word_start = sep;
  }
  return Value::string(std::move(out));
}

absl::StatusOr<Value> capitalize(Evaluator&, const Value& in, CallArgs&) {
  return Value::string(py_capitalize(to_str(in)));
}

absl::StatusOr<Value> replace(Evaluator& ev, const Value& in, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto old, str_arg(args, 0, "old"));
  HEARTH_ASSIGN_OR_RETURN(auto repl, str_arg(args, 1, "new"));
  if (!old || !repl) return absl::InvalidArgumentError("replace() needs two string arguments");
  HEARTH_ASSIGN_OR_RETURN(int64_t count, int_arg(args, 2, "count", -1));
  const std::string s = to_str(in);
  HEARTH_RETURN_IF_ERROR(ev.charge(s.size() / 64));
  std::string out;
  if (!py_replace(s, *old, *repl, count, ev.limits().max_output_bytes, out))
    return ev.check_bytes(ev.limits().max_output_bytes + 1);
  return Value::string(std::move(out));
}

absl::StatusOr<Value> string(Evaluator&, const Value& in, CallArgs&) {
  return Value::string(to_str(in));
}

// jinja2's indent(width=4, first=False, blank=False).
absl::StatusOr<Value> indent(Evaluator& ev, const Value& in, CallArgs& args) {
  std::string pad = "    ";
  if (const Value* w = arg(args, 0, "width")) {
    if (w->is_string()) {
      pad = w->as_string();
    } else if (w->is_integral()) {
      HEARTH_RETURN_IF_ERROR(
          ev.check_bytes(static_cast<size_t>(std::max<int64_t>(0, w->as_int()))));
      pad = std::string(static_cast<size_t>(std::max<int64_t>(0, w->as_int())), ' ');
    } else {
      return absl::InvalidArgumentError("indent width must be an integer or a string");
    }
  }
  HEARTH_ASSIGN_OR_RETURN(bool first, bool_arg(args, 1, "first", false));
  HEARTH_ASSIGN_OR_RETURN(bool blank, bool_arg(args, 2, "blank", false));
  const std::vector<std::string> lines = py_splitlines(to_str(in) + "\n");
  HEARTH_RETURN_IF_ERROR(ev.check_bytes(lines.size() * pad.size()));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (blank || !lines[i].empty()) out += pad;
    }
    out += lines[i];
  }
  if (first) out = pad + out;
  return Value::string(std::move(out));
}

absl::StatusOr<Value> escape(Evaluator&, const Value& in, CallArgs&) {
  if (in.is_markup()) return in;
  return Value::markup(html_escape(to_str(in)));
}

absl::StatusOr<Value> safe(Evaluator&, const Value& in, CallArgs&) {
  return in.is_markup() ? in : Value::markup(to_str(in));
}

absl::StatusOr<Value> wordcount(Evaluator&, const Value& in, CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t cp : utf8_decode(to_str(in))) {
    // \w: letters, digits and underscore; other ASCII symbols split words.
    const bool word =
        cp >= 0x80 ? !is_py_space(cp) : (std::isalnum(static_cast<int>(cp)) != 0 || cp == '_');
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value::integer(n);
}

// Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False) = json.dumps with those arguments (no HTML escaping).
absl::StatusOr<Value> tojson(Evaluator& ev, const Value& in, CallArgs& args) {
  JsonDumpOptions o;
  HEARTH_ASSIGN_OR_RETURN(o.ensure_ascii, bool_arg(args, 0, "ensure_ascii", false));
  if (const Value* ind = arg(args, 1, "indent"); ind != nullptr && !ind->is_none()) {
    if (ind->is_string()) {
      o.indent = ind->as_string();
    } else if (ind->is_integral()) {
      o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(ind->as_int(), 0, 64)), ' ');
    } else {
      return absl::InvalidArgumentError("tojson indent must be an integer or a string");
    }
  }
  if (const Value* sep = arg(args, 2, "separators"); sep != nullptr && !sep->is_none()) {
    if (!sep->is_sequence() || sep->as_list().size() != 2 || !sep->as_list()[0].is_string() ||
        !sep->as_list()[1].is_string())
      return absl::InvalidArgumentError("tojson separators must be a pair of strings");
    o.item_separator = sep->as_list()[0].as_string();
    o.key_separator = sep->as_list()[1].as_string();
  }
  HEARTH_ASSIGN_OR_RETURN(o.sort_keys, bool_arg(args, 3, "sort_keys", false));
  HEARTH_ASSIGN_OR_RETURN(std::string s, json_dumps(in, o, ev.limits().max_output_bytes));
  HEARTH_RETURN_IF_ERROR(ev.charge(s.size() / 64));
  return Value::string(std::move(s));
}

namespace {

// Python's int(text, base) for base 0 or 2-36: surrounding whitespace, an
// optional sign, the base's prefix (0b, 0o, 0x; base 0 reads it to choose),
// digits with single underscores between them.
std::optional<int64_t> parse_py_int(const std::string& text, int64_t base) {
  const std::string s = py_strip(text, std::nullopt, StripSide::kBoth);
  if (base != 0 && (base < 2 || base > 36)) return std::nullopt;
  size_t i = 0;
  const bool neg = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) i = 1;
  if (s.size() >= i + 2 && s[i] == '0') {
    const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i + 1])));
    const int64_t prefixed = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 0;
    if (prefixed != 0 && (base == 0 || base == prefixed)) {
      base = prefixed;
      i += 2;
      if (i < s.size() && s[i] == '_') ++i;
    }
  }
  if (base == 0) base = 10;
  int64_t v = 0;
  bool digit_before = false;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && digit_before && i + 1 < s.size() && s[i + 1] != '_') continue;
    const int c = std::tolower(static_cast<unsigned char>(s[i]));
    const int d = std::isdigit(c) ? c - '0' : (c >= 'a' && c <= 'z') ? c - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, neg ? -d : d, &v))
      return std::nullopt;
    digit_before = true;
  }
  if (!digit_before) return std::nullopt;
  return v;
}

std::optional<double> parse_py_float(const std::string& text) {
  std::string s = py_strip(text, std::nullopt, StripSide::kBoth);
  if (s.empty()) return std::nullopt;
  // Python's float() takes no hexadecimal (strtod does) and allows an
  // underscore between two digits ("1_0.5" is 10.5).
  if (s.find_first_of("xX(") != std::string::npos) return std::nullopt;  // 0x1p3, nan(12)
  for (size_t i = s.find('_'); i != std::string::npos; i = s.find('_', i)) {
    if (i == 0 || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
        !std::isdigit(static_cast<unsigned char>(s[i + 1])))
      return std::nullopt;
    s.erase(i, 1);
  }
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

}  // namespace

absl::StatusOr<Value> to_int(Evaluator&, const Value& in, CallArgs& args) {
  Value dflt = Value::integer(0);
  if (const Value* d = arg(args, 0, "default")) dflt = *d;
  HEARTH_ASSIGN_OR_RETURN(int64_t base, int_arg(args, 1, "base", 10));
  if (in.is_integral()) return Value::integer(in.as_int());
  if (in.kind() == Value::Kind::kFloat) {
    const double d = in.as_double();
    if (std::isnan(d) || std::isinf(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (!in.is_string()) return dflt;
  if (auto v = parse_py_int(in.as_string(), base)) return Value::integer(*v);
  if (auto d = parse_py_float(in.as_string());
      d && !std::isnan(*d) && !std::isinf(*d) && std::fabs(*d) < 9.2e18)
    return Value::integer(static_cast<int64_t>(*d));
  return dflt;
}

absl::StatusOr<Value> to_float(Evaluator&, const Value& in, CallArgs& args) {
  Value dflt = Value::floating(0.0);
  if (const Value* d = arg(args, 0, "default")) dflt = *d;
  if (in.is_number()) return Value::floating(in.as_double());
  if (in.is_string())
    if (auto d = parse_py_float(in.as_string())) return Value::floating(*d);
  return dflt;
}

absl::StatusOr<Value> abs(Evaluator&, const Value& in, CallArgs&) {
  if (in.is_integral()) {
    if (in.as_int() == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
    return Value::integer(in.as_int() < 0 ? -in.as_int() : in.as_int());
  }
  if (in.is_number()) return Value::floating(std::fabs(in.as_double()));
  return absl::InvalidArgumentError(str_cat("bad operand type for abs(): '", in.type_name(), "'"));
}

absl::StatusOr<Value> round(Evaluator&, const Value& in, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(int64_t precision, int_arg(args, 0, "precision", 0));
  HEARTH_ASSIGN_OR_RETURN(auto method, str_arg(args, 1, "method"));
  const std::string m = method.value_or("common");
  if (!in.is_number()) return absl::InvalidArgumentError("round() needs a number");
  if (m == "common" && in.is_integral() && precision >= 0) return Value::integer(in.as_int());
  if (m == "common" && precision >= 0) {
    // Python rounds the double's exact decimal value (round(2.675, 2) is
    // 2.67: the double is 2.67499...), as printf's %.Nf does; scaling by
    // 100 first rounds 267.4999... up to 267.5 and then to 268.
    const int digits = static_cast<int>(std::min<int64_t>(precision, 340));
    std::string text(static_cast<size_t>(std::snprintf(nullptr, 0, "%.*f", digits, in.as_double())),
                     '\0');
    std::snprintf(text.data(), text.size() + 1, "%.*f", digits, in.as_double());
    return Value::floating(std::strtod(text.c_str(), nullptr));
  }
  const double scale =
      std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -300, 300)));
  const double x = in.as_double() * scale;
  double r = 0;
  if (m == "common") {
    r = std::nearbyint(x);  // Python's round: ties to even
  } else if (m == "floor") {
    r = std::floor(x);
  } else if (m == "ceil") {
    r = std::ceil(x);
  } else {
    return absl::InvalidArgumentError("method must be common, ceil or floor");
  }
  return Value::floating(r / scale);
}

// default(value, default_value='', boolean=False).
absl::StatusOr<Value> default_value(Evaluator&, const Value& in, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(bool boolean, bool_arg(args, 1, "boolean", false));
  if (in.is_undefined() || (boolean && !in.truthy())) {
    const Value* d = arg(args, 0, "default_value");
    return d != nullptr ? *d : Value::string("");
  }
  return in;
}

}  // namespace hearth::chat::filters
