// The values a chat template computes with, modelled on the Python objects
// jinja2 hands around: undefined, None, bool, int, float, str, list, tuple,
// dict (insertion-ordered), namespace and callables. Lists, tuples and dicts
// are immutable once built (the sandbox forbids mutating them), so copies
// share them; only a namespace is mutable, through `set ns.attr = ...`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace hearth::chat {

class Value;
class Evaluator;
using List = std::vector<Value>;

// Insertion-ordered mapping; lookups are linear (chat dicts are small).
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  void set(Value key, Value value);
};

struct Namespace {
  Dict attrs;
};

// Arguments of one call: positional, then keyword.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};

// Anything a template can call: a macro, a global such as range(), or a
// bound method such as 'abc'.strip.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual std::string_view name() const = 0;
  virtual absl::StatusOr<Value> call(Evaluator& ev, CallArgs args) const = 0;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kNamespace,
    kCallable
  };

  Value() : kind_(Kind::kUndefined) {}
  static Value undefined(std::string hint = {});
  static Value none() { return Value(Kind::kNone, std::monostate{}); }
  static Value boolean(bool b) { return Value(Kind::kBool, b); }
  static Value integer(int64_t i) { return Value(Kind::kInt, i); }
  static Value floating(double d) { return Value(Kind::kFloat, d); }
  static Value string(std::string s) { return Value(Kind::kString, shared(std::move(s))); }
  // A string marked safe (markupsafe.Markup), from the safe/escape filters.
  static Value markup(std::string s) {
    Value v(Kind::kString, shared(std::move(s)));
    v.markup_ = true;
    return v;
  }
  static Value list(List items);
  static Value tuple(List items);
  static Value dict(Dict d);
  static Value ns(std::shared_ptr<Namespace> n) { return Value(Kind::kNamespace, std::move(n)); }
  static Value callable(std::shared_ptr<const Callable> c) {
    return Value(Kind::kCallable, std::move(c));
  }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return markup_; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  // int or bool (Python's bool is an int) or float.
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_integral() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;    // bool or int
  double as_double() const;  // bool, int or float
  const std::string& as_string() const { return *std::get<SharedString>(data_); }
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(data_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(data_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(data_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  // What an undefined value stood for, for error messages ("'x'").
  const std::string& undefined_hint() const {
    static const std::string kNone;
    const SharedString* hint = std::get_if<SharedString>(&data_);
    return hint != nullptr ? **hint : kNone;
  }

  // Python's bool(x).
  bool truthy() const;
  // Python's type name, as error messages print it ("str", "dict", ...).
  std::string_view type_name() const;

 private:
  // Strings are immutable and shared, as lists and dicts are: copying a
  // value (a lookup, a list repeated) never copies its bytes.
  using SharedString = std::shared_ptr<const std::string>;
  static SharedString shared(std::string s) {
    return std::make_shared<const std::string>(std::move(s));
  }
  using Storage = std::variant<std::monostate, bool, int64_t, double, SharedString,
                               std::shared_ptr<const List>, std::shared_ptr<const Dict>,
                               std::shared_ptr<Namespace>, std::shared_ptr<const Callable>>;
  template <typename T>
  Value(Kind k, T&& v) : kind_(k), data_(std::forward<T>(v)) {}

  Kind kind_;
  bool markup_ = false;
  Storage data_;
};

// Python's ==, across kinds (1 == 1.0 == True; undefined equals undefined).
bool values_equal(const Value& a, const Value& b);

// Python's <, <=, ... : -1/0/1, or an error for unorderable kinds.
absl::StatusOr<int> compare_values(const Value& a, const Value& b);

// str(x) as jinja2 prints it: undefined prints "", None prints "None",
// containers print their repr.
std::string to_str(const Value& v);
// repr(x) as Python prints it. A container's repr stops growing once past
// kMaxReprBytes (a list of a thousand 8 MB strings is cheap to hold, its
// repr is not): more than any string a render may hold, so the caller's
// size check refuses it.
inline constexpr size_t kMaxReprBytes = size_t{64} << 20;
std::string to_repr(const Value& v);
void append_repr(std::string& out, const Value& v);

// markupsafe.escape: & < > " ' as HTML entities.
std::string html_escape(std::string_view s);

// Python's float repr: shortest round-trip digits, "1.0", "1e+20", "inf".
std::string float_repr(double d);

}  // namespace hearth::chat
