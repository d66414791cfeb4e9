#include "chat/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "base/str_cat.h"
#include "chat/utf8.h"

namespace hearth::chat {

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : entries)
    if (values_equal(k, key)) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (values_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string hint) {
  return Value(Kind::kUndefined, shared(std::move(hint)));
}
Value Value::list(List items) {
  return Value(Kind::kList, std::shared_ptr<const List>(std::make_shared<List>(std::move(items))));
}
Value Value::tuple(List items) {
  return Value(Kind::kTuple, std::shared_ptr<const List>(std::make_shared<List>(std::move(items))));
}
Value Value::dict(Dict d) {
  return Value(Kind::kDict, std::shared_ptr<const Dict>(std::make_shared<Dict>(std::move(d))));
}

int64_t Value::as_int() const {
  if (kind_ == Kind::kBool) return as_bool() ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::as_double() const {
  if (kind_ == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_double() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
    case Kind::kTuple:
      return !as_list().empty();
    case Kind::kDict:
      return !as_dict().entries.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string_view Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

namespace {

bool dicts_equal(const Dict& a, const Dict& b) {
  if (a.entries.size() != b.entries.size()) return false;
  for (const auto& [k, v] : a.entries) {
    const Value* other = b.find(k);
    if (other == nullptr || !values_equal(v, *other)) return false;
  }
  return true;
}

bool lists_equal(const List& a, const List& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!values_equal(a[i], b[i])) return false;
  return true;
}

}  // namespace

bool values_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.as_string() == b.as_string();
    case K::kList:
    case K::kTuple:
      return lists_equal(a.as_list(), b.as_list());
    case K::kDict:
      return dicts_equal(a.as_dict(), b.as_dict());
    case K::kNamespace:
      return &a.as_namespace() == &b.as_namespace();
    case K::kCallable:
      return &a.as_callable() == &b.as_callable();
    default:
      return false;
  }
}

absl::StatusOr<int> compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral())
      return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order, as Python compares str.
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_sequence() && a.kind() == b.kind()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return compare_values(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return absl::InvalidArgumentError(str_cat("'<' not supported between instances of '",
                                            a.type_name(), "' and '", b.type_name(), "'"));
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  // sci is "-d.ddde+XX": split into sign, digits and exponent.
  std::string sign;
  if (sci.front() == '-') sign = "-", sci.remove_prefix(1);
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits.push_back(c);
  const int exp = std::atoi(std::string(sci.substr(e + 1)).c_str());
  std::string out = sign;
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return out + ebuf;
  }
  if (exp < 0) return out + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  const size_t int_digits = static_cast<size_t>(exp) + 1;
  if (digits.size() <= int_digits)
    return out + digits + std::string(int_digits - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

namespace {

// Python's str.isprintable() for non-ASCII code points, approximated by the
// ranges chat text meets (controls, format characters, odd spaces).
bool printable(char32_t cp) {
  if (cp <= 0xA0 || cp == 0xAD) return false;
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F) return false;
  if (cp == 0x1680 || cp == 0x180E || (cp >= 0x2000 && cp <= 0x200F)) return false;
  if ((cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F)) return false;
  if (cp == 0x3000 || (cp >= 0xD800 && cp <= 0xF8FF) || cp == 0xFEFF) return false;
  if ((cp >= 0xFFF9 && cp <= 0xFFFB) || cp >= 0xF0000 || (cp >= 0xE0000 && cp <= 0xE0FFF))
    return false;
  return true;
}

void append_str_repr(std::string& out, const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out.push_back(quote);
  for (char32_t cp : utf8_decode(s)) {
    char buf[16];
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if (cp < 0x7F || printable(cp)) {
      utf8_append(out, cp);
    } else {
      const char* fmt = cp <= 0xFF ? "\\x%02x" : (cp <= 0xFFFF ? "\\u%04x" : "\\U%08x");
      std::snprintf(buf, sizeof(buf), fmt, static_cast<unsigned>(cp));
      out += buf;
    }
  }
  out.push_back(quote);
}

void append_items_repr(std::string& out, const List& items) {
  for (size_t i = 0; i < items.size() && out.size() <= kMaxReprBytes; ++i) {
    if (i > 0) out += ", ";
    append_repr(out, items[i]);
  }
}

}  // namespace

void append_repr(std::string& out, const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kUndefined:
      out += "Undefined";
      return;
    case K::kString:
      append_str_repr(out, v.as_string());
      return;
    case K::kList:
      out.push_back('[');
      append_items_repr(out, v.as_list());
      out.push_back(']');
      return;
    case K::kTuple:
      out.push_back('(');
      append_items_repr(out, v.as_list());
      if (v.as_list().size() == 1) out.push_back(',');
      out.push_back(')');
      return;
    case K::kDict: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, val] : v.as_dict().entries) {
        if (out.size() > kMaxReprBytes) break;
        if (!first) out += ", ";
        first = false;
        append_repr(out, k);
        out += ": ";
        append_repr(out, val);
      }
      out.push_back('}');
      return;
    }
    case K::kNamespace:
      out += "<Namespace ";
      append_repr(out, Value::dict(v.as_namespace().attrs));
      out += ">";
      return;
    case K::kCallable:
      out += str_cat("<function ", v.as_callable().name(), ">");
      return;
    default:
      out += to_str(v);
  }
}

std::string to_repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

std::string to_str(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kUndefined:
      return "";
    case K::kNone:
      return "None";
    case K::kBool:
      return v.as_bool() ? "True" : "False";
    case K::kInt:
      return std::to_string(v.as_int());
    case K::kFloat:
      return float_repr(v.as_double());
    case K::kString:
      return v.as_string();
    default:
      return to_repr(v);
  }
}

}  // namespace hearth::chat
