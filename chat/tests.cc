// jinja2's tests (`x is defined`, `x is divisibleby 3`, ...).
#include <cmath>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/builtin_args.h"
#include "chat/builtins.h"
#include "chat/operators.h"
#include "chat/strings.h"

namespace hearth::chat {
namespace {

using K = Value::Kind;

absl::StatusOr<const Value*> other(const CallArgs& args, std::string_view test) {
  const Value* v = arg(args, 0, "other");
  if (v == nullptr)
    return absl::InvalidArgumentError(str_cat("test '", test, "' needs an argument"));
  return v;
}

absl::StatusOr<int> cmp(const Value& a, const CallArgs& args, std::string_view test) {
  HEARTH_ASSIGN_OR_RETURN(const Value* b, other(args, test));
  if (a.is_undefined()) return undefined_error(a);
  if (b->is_undefined()) return undefined_error(*b);
  return compare_values(a, *b);
}

absl::StatusOr<bool> int_mod_test(const Value& v, int64_t divisor, int64_t want) {
  if (v.is_undefined()) return undefined_error(v);
  if (!v.is_number())
    return absl::InvalidArgumentError(str_cat("'", v.type_name(), "' is not a number"));
  if (divisor == 0) return absl::InvalidArgumentError("integer modulo by zero");
  if (v.kind() == K::kFloat) return std::fmod(v.as_double(), static_cast<double>(divisor)) == want;
  int64_t r = v.as_int() % divisor;
  if (r != 0 && ((r < 0) != (divisor < 0))) r += divisor;
  return r == want;
}

#define TEST(name) absl::StatusOr<bool> name(Evaluator&, const Value& v, CallArgs& args)

TEST(defined) {
  (void)args;
  return !v.is_undefined();
}
TEST(undefined) {
  (void)args;
  return v.is_undefined();
}
TEST(none) {
  (void)args;
  return v.is_none();
}
TEST(boolean) {
  (void)args;
  return v.kind() == K::kBool;
}
TEST(is_true) {
  (void)args;
  return v.kind() == K::kBool && v.as_bool();
}
TEST(is_false) {
  (void)args;
  return v.kind() == K::kBool && !v.as_bool();
}
TEST(integer) {
  (void)args;
  return v.kind() == K::kInt;
}
TEST(is_float) {
  (void)args;
  return v.kind() == K::kFloat;
}
TEST(number) {
  (void)args;
  return v.is_number();
}
TEST(string) {
  (void)args;
  return v.is_string();
}
TEST(mapping) {
  (void)args;
  return v.is_dict();
}
TEST(sequence) {
  (void)args;
  return v.is_string() || v.is_sequence() || v.is_dict();
}
TEST(iterable) {
  (void)args;
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
TEST(callable) {
  (void)args;
  return v.kind() == K::kCallable;
}
TEST(escaped) {
  (void)args;
  (void)v;
  return false;
}
TEST(lower) {
  (void)args;
  const std::string s = to_str(v);
  return s == py_lower(s) && s != py_upper(s);
}
TEST(upper) {
  (void)args;
  const std::string s = to_str(v);
  return s == py_upper(s) && s != py_lower(s);
}
TEST(odd) {
  (void)args;
  return int_mod_test(v, 2, 1);
}
TEST(even) {
  (void)args;
  return int_mod_test(v, 2, 0);
}
TEST(divisibleby) {
  HEARTH_ASSIGN_OR_RETURN(const Value* d, other(args, "divisibleby"));
  if (!d->is_integral()) return absl::InvalidArgumentError("divisibleby needs an integer");
  return int_mod_test(v, d->as_int(), 0);
}
TEST(eq) {
  HEARTH_ASSIGN_OR_RETURN(const Value* b, other(args, "=="));
  return values_equal(v, *b);
}
TEST(ne) {
  HEARTH_ASSIGN_OR_RETURN(const Value* b, other(args, "!="));
  return !values_equal(v, *b);
}
TEST(lt) {
  HEARTH_ASSIGN_OR_RETURN(int c, cmp(v, args, "<"));
  return c < 0;
}
TEST(le) {
  HEARTH_ASSIGN_OR_RETURN(int c, cmp(v, args, "<="));
  return c <= 0;
}
TEST(gt) {
  HEARTH_ASSIGN_OR_RETURN(int c, cmp(v, args, ">"));
  return c > 0;
}
TEST(ge) {
  HEARTH_ASSIGN_OR_RETURN(int c, cmp(v, args, ">="));
  return c >= 0;
}
TEST(in) {
  HEARTH_ASSIGN_OR_RETURN(const Value* seq, other(args, "in"));
  return contains(*seq, v);
}
// `is sameas`: Python identity; for the scalars templates compare this way
// (None, True, False) that is kind and value equality.
TEST(sameas) {
  HEARTH_ASSIGN_OR_RETURN(const Value* b, other(args, "sameas"));
  return v.kind() == b->kind() && values_equal(v, *b);
}
TEST(filter) {
  (void)args;
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}
TEST(test) {
  (void)args;
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

#undef TEST

struct NamedTest {
  std::string_view name;
  TestFn fn;
};

constexpr NamedTest kTests[] = {
    {"defined", defined},
    {"undefined", undefined},
    {"none", none},
    {"boolean", boolean},
    {"true", is_true},
    {"false", is_false},
    {"integer", integer},
    {"float", is_float},
    {"number", number},
    {"string", string},
    {"mapping", mapping},
    {"sequence", sequence},
    {"iterable", iterable},
    {"callable", callable},
    {"escaped", escaped},
    {"lower", lower},
    {"upper", upper},
    {"odd", odd},
    {"even", even},
    {"divisibleby", divisibleby},
    {"eq", eq},
    {"equalto", eq},
    {"==", eq},
    {"ne", ne},
    {"!=", ne},
    {"lt", lt},
    {"lessthan", lt},
    {"<", lt},
    {"le", le},
    {"<=", le},
    {"gt", gt},
    {"greaterthan", gt},
    {">", gt},
    {"ge", ge},
    {">=", ge},
    {"in", in},
    {"sameas", sameas},
    {"filter", filter},
    {"test", test},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const NamedTest& t : kTests)
    if (t.name == name) return t.fn;
  return nullptr;
}

}  // namespace hearth::chat
