#include "chat/operators.h"

#include <cmath>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/evaluator.h"
#include "chat/utf8.h"

namespace hearth::chat {
namespace {

absl::Status type_error(std::string_view op, const Value& a, const Value& b) {
  return absl::InvalidArgumentError(str_cat("unsupported operand type(s) for ", op, ": '",
                                            a.type_name(), "' and '", b.type_name(), "'"));
}

// Call as int_result(overflowed, r) only after the builtin that set both ran
// (argument evaluation order is unspecified).
absl::StatusOr<Value> int_result(bool overflow, int64_t r) {
  if (overflow) return absl::InvalidArgumentError("integer overflow (beyond 64 bits)");
  return Value::integer(r);
}

absl::StatusOr<Value> repeat(Evaluator& ev, const Value& seq, int64_t n) {
  // An empty sequence repeats to itself, however large n is.
  const bool empty = seq.is_string() ? seq.as_string().empty() : seq.as_list().empty();
  if (empty) return seq;
  if (n <= 0)
    return seq.is_string()                     ? Value::string("")
           : seq.kind() == Value::Kind::kTuple ? Value::tuple({})
                                               : Value::list({});
  if (seq.is_string()) {
    const size_t len = seq.as_string().size();
    if (len > 0 && static_cast<uint64_t>(n) > ev.limits().max_output_bytes / len)
      return ev.check_bytes(ev.limits().max_output_bytes + 1);
    HEARTH_RETURN_IF_ERROR(ev.charge(len * static_cast<size_t>(n) / 64));
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  const List& items = seq.as_list();
  if (!items.empty() && static_cast<uint64_t>(n) > ev.limits().max_list_items / items.size())
    return ev.check_items(ev.limits().max_list_items + 1);
  HEARTH_RETURN_IF_ERROR(ev.charge(items.size() * static_cast<size_t>(n)));
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.kind() == Value::Kind::kTuple ? Value::tuple(std::move(out))
                                           : Value::list(std::move(out));
}

absl::StatusOr<Value> add(Evaluator& ev, const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    int64_t r = 0;
    const bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
    return int_result(overflow, r);
  }
  if (a.is_number() && b.is_number()) return Value::floating(a.as_double() + b.as_double());
  if (a.is_string() && b.is_string()) {
    // markupsafe: Markup + str escapes the str and stays Markup (either side).
    const bool markup = a.is_markup() || b.is_markup();
    std::string left = a.as_string(), right = b.as_string();
    if (markup && !a.is_markup()) left = html_escape(left);
    if (markup && !b.is_markup()) right = html_escape(right);
    HEARTH_RETURN_IF_ERROR(ev.charge_copy(left.size() + right.size()));
    return markup ? Value::markup(left + right) : Value::string(left + right);
  }
  if (a.is_sequence() && a.kind() == b.kind()) {
    HEARTH_RETURN_IF_ERROR(ev.check_items(a.as_list().size() + b.as_list().size()));
    HEARTH_RETURN_IF_ERROR(ev.charge(a.as_list().size() + b.as_list().size()));
    List out = a.as_list();
    out.insert(out.end(), b.as_list().begin(), b.as_list().end());
    return a.kind() == Value::Kind::kTuple ? Value::tuple(std::move(out))
                                           : Value::list(std::move(out));
  }
  return type_error("+", a, b);
}

absl::StatusOr<Value> multiply(Evaluator& ev, const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    int64_t r = 0;
    const bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
    return int_result(overflow, r);
  }
  if (a.is_number() && b.is_number()) return Value::floating(a.as_double() * b.as_double());
  if ((a.is_string() || a.is_sequence()) && b.is_integral()) return repeat(ev, a, b.as_int());
  if ((b.is_string() || b.is_sequence()) && a.is_integral()) return repeat(ev, b, a.as_int());
  return type_error("*", a, b);
}

absl::Status zero_division(std::string_view what) {
  return absl::InvalidArgumentError(str_cat(what, " by zero"));
}

// Python's // and %: the quotient rounds toward minus infinity and the
// remainder takes the divisor's sign.
absl::StatusOr<Value> floor_div_mod(std::string_view op, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) return type_error(op, a, b);
  if (a.is_integral() && b.is_integral()) {
    const int64_t x = a.as_int(), y = b.as_int();
    if (y == 0) return zero_division(op == "%" ? "integer modulo" : "integer division");
    if (x == INT64_MIN && y == -1) {
      if (op == "%") return Value::integer(0);
      return absl::InvalidArgumentError("integer overflow (beyond 64 bits)");
    }
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;
    return Value::integer(op == "%" ? r : q);
  }
  const double x = a.as_double(), y = b.as_double();
  if (y == 0) return zero_division(op == "%" ? "float modulo" : "float floor division");
  // CPython's float_divmod.
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0 && ((y < 0) != (mod < 0))) mod += y, div -= 1.0;
  if (op == "%") return Value::floating(mod == 0 ? std::copysign(0.0, y) : mod);
  double floordiv = std::copysign(0.0, x / y);
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  }
  return Value::floating(floordiv);
}

absl::StatusOr<Value> power(const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) return type_error("** or pow()", a, b);
  if (a.is_integral() && b.is_integral() && b.as_int() >= 0) {
    int64_t result = 1, base = a.as_int();
    for (int64_t e = b.as_int(); e > 0; e >>= 1) {
      if ((e & 1) && __builtin_mul_overflow(result, base, &result)) return int_result(true, 0);
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) return int_result(true, 0);
    }
    return Value::integer(result);
  }
  if (a.as_double() == 0 && b.as_double() < 0)
    return zero_division("0.0 cannot be raised to a negative power; division");
  return Value::floating(std::pow(a.as_double(), b.as_double()));
}

}  // namespace

absl::Status undefined_error(const Value& v) {
  const std::string& hint = v.undefined_hint();
  if (hint.find(" has no ") != std::string::npos) return absl::InvalidArgumentError(hint);
  if (!hint.empty()) return absl::InvalidArgumentError(str_cat(hint, " is undefined"));
  return absl::InvalidArgumentError("value is undefined");
}

absl::StatusOr<Value> binary_op(Evaluator& ev, std::string_view op, const Value& a,
                                const Value& b) {
  if (op == "~") {
    std::string s = to_str(a);
    s += to_str(b);
    HEARTH_RETURN_IF_ERROR(ev.charge_copy(s.size()));
    return Value::string(std::move(s));
  }
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  if (op == "+") return add(ev, a, b);
  if (op == "*") return multiply(ev, a, b);
  if (op == "**") return power(a, b);
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string())
      return absl::InvalidArgumentError("printf-style string formatting ('%') is not supported");
    return floor_div_mod(op, a, b);
  }
  if (!a.is_number() || !b.is_number()) return type_error(op, a, b);
  if (op == "-") {
    if (a.is_integral() && b.is_integral()) {
      int64_t r = 0;
      const bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
      return int_result(overflow, r);
    }
    return Value::floating(a.as_double() - b.as_double());
  }
  if (b.as_double() == 0) return zero_division("division");
  return Value::floating(a.as_double() / b.as_double());
}

absl::StatusOr<Value> unary_op(std::string_view op, const Value& a) {
  if (a.is_undefined()) return undefined_error(a);
  if (!a.is_number())
    return absl::InvalidArgumentError(
        str_cat("bad operand type for unary ", op, ": '", a.type_name(), "'"));
  if (op == "+") return a.kind() == Value::Kind::kBool ? Value::integer(a.as_int()) : a;
  if (a.is_integral()) {
    if (a.as_int() == INT64_MIN) return int_result(true, 0);
    return Value::integer(-a.as_int());
  }
  return Value::floating(-a.as_double());
}

absl::StatusOr<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string())
        return absl::InvalidArgumentError(
            str_cat("'in <string>' requires string as left operand, not ", item.type_name()));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      for (const Value& v : container.as_list())
        if (values_equal(v, item)) return true;
      return false;
    case Value::Kind::kDict:
      return container.as_dict().find(item) != nullptr;
    case Value::Kind::kNamespace:
      return container.as_namespace().attrs.find(item) != nullptr;
    default:
      return absl::InvalidArgumentError(
          str_cat("argument of type '", container.type_name(), "' is not iterable"));
  }
}

namespace {

// PySlice_AdjustIndices: the positions a slice visits in a sequence of `n`.
std::vector<size_t> slice_positions(size_t n, std::optional<int64_t> start,
                                    std::optional<int64_t> stop, int64_t step) {
  const int64_t len = static_cast<int64_t>(n);
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += len;
    if (x < 0) x = step < 0 ? -1 : 0;
    if (x >= len) x = step < 0 ? len - 1 : len;
    return x;
  };
  const int64_t b = clamp(start, step < 0 ? len - 1 : 0);
  const int64_t e = clamp(stop, step < 0 ? -1 : len);
  std::vector<size_t> out;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) out.push_back(static_cast<size_t>(i));
  return out;
}

}  // namespace

absl::StatusOr<Value> slice(const Value& container, std::optional<int64_t> start,
                            std::optional<int64_t> stop, std::optional<int64_t> step) {
  if (container.is_undefined()) return undefined_error(container);
  const int64_t st = step.value_or(1);
  if (st == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  if (container.is_string()) {
    const std::string& s = container.as_string();
    if (is_ascii(s)) {
      std::string out;
      for (size_t i : slice_positions(s.size(), start, stop, st)) out.push_back(s[i]);
      return Value::string(std::move(out));
    }
    const std::vector<char32_t> cps = utf8_decode(s);
    std::string out;
    for (size_t i : slice_positions(cps.size(), start, stop, st)) utf8_append(out, cps[i]);
    return Value::string(std::move(out));
  }
  if (!container.is_sequence()) return Value::undefined();
  const List& items = container.as_list();
  List out;
  for (size_t i : slice_positions(items.size(), start, stop, st)) out.push_back(items[i]);
  return container.kind() == Value::Kind::kTuple ? Value::tuple(std::move(out))
                                                 : Value::list(std::move(out));
}

absl::StatusOr<List> iterate(Evaluator& ev, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return List{};
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return v.as_list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, val] : v.as_dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      const std::vector<char32_t> code_points = utf8_decode(v.as_string());
      HEARTH_RETURN_IF_ERROR(ev.check_items(code_points.size()));
      List chars;
      std::string c;
      for (char32_t cp : code_points) {
        c.clear();
        utf8_append(c, cp);
        chars.push_back(Value::string(c));
      }
      return chars;
    }
    default:
      return absl::InvalidArgumentError(str_cat("'", v.type_name(), "' object is not iterable"));
  }
}

}  // namespace hearth::chat
