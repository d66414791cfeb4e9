// Attribute access on values: the str, dict and list methods templates
// call ('abc'.strip(), message.get('x'), d.items()), namespace attributes,
// and the immutable sandbox's refusal of mutating methods.
#include <algorithm>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/builtin_args.h"
#include "chat/builtins.h"
#include "chat/evaluator.h"
#include "chat/operators.h"
#include "chat/strings.h"
#include "chat/utf8.h"

namespace hearth::chat {
namespace {

constexpr std::string_view kStrMethods[] = {
    "strip", "lstrip",  "rstrip",  "split",      "rsplit",  "splitlines", "startswith", "endswith",
    "lower", "upper",   "title",   "capitalize", "replace", "find",       "rfind",      "count",
    "join",  "isdigit", "isalpha", "isalnum",    "isspace", "islower",    "isupper"};
constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get"};
constexpr std::string_view kSeqMethods[] = {"index", "count"};
constexpr std::string_view kMutating[] = {"append",     "extend", "insert", "pop",    "remove",
                                          "reverse",    "sort",   "clear",  "update", "popitem",
                                          "setdefault", "add",    "discard"};

template <size_t N>
bool one_of(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  absl::StatusOr<Value> call(Evaluator& ev, CallArgs args) const override;

 private:
  absl::StatusOr<Value> call_str(Evaluator& ev, const CallArgs& args) const;
  absl::StatusOr<Value> call_dict(const CallArgs& args) const;
  absl::StatusOr<Value> call_seq(const CallArgs& args) const;

  Value self_;
  std::string name_;
};

absl::StatusOr<Value> BoundMethod::call(Evaluator& ev, CallArgs args) const {
  HEARTH_RETURN_IF_ERROR(ev.charge_read(self_));
  if (self_.is_string()) return call_str(ev, args);
  if (self_.is_dict()) return call_dict(args);
  return call_seq(args);
}

Value string_list(const std::vector<std::string>& parts) {
  List out;
  for (const std::string& p : parts) out.push_back(Value::string(p));
  return Value::list(std::move(out));
}

// startswith/endswith accept one string or a tuple of them.
absl::StatusOr<bool> affix_match(const std::string& s, const Value* arg0, bool prefix) {
  if (arg0 == nullptr) return absl::InvalidArgumentError("startswith/endswith need an argument");
  std::vector<std::string> options;
  if (arg0->is_string()) {
    options.push_back(arg0->as_string());
  } else if (arg0->is_sequence()) {
    for (const Value& v : arg0->as_list()) {
      if (!v.is_string()) return absl::InvalidArgumentError("affixes must be strings");
      options.push_back(v.as_string());
    }
  } else {
    return absl::InvalidArgumentError("startswith/endswith need a string or a tuple of strings");
  }
  for (const std::string& o : options) {
    if (o.size() > s.size()) continue;
    if (prefix ? s.compare(0, o.size(), o) == 0 : s.compare(s.size() - o.size(), o.size(), o) == 0)
      return true;
  }
  return false;
}

// The part of `s` that the optional start and end arguments of find, rfind,
// count, startswith and endswith select (Python's slice indices, in
// characters), and the character it begins at.
struct SearchRange {
  std::string text;
  int64_t begin = 0;
  bool exists = true;  // false: the range is empty and nothing matches in it
};

absl::StatusOr<SearchRange> search_range(const std::string& s, const CallArgs& args) {
  const Value* start = arg(args, 1, "start");
  const Value* end = arg(args, 2, "end");
  const auto given = [](const Value* v) { return v != nullptr && !v->is_none(); };
  if (!given(start) && !given(end)) return SearchRange{s, 0};
  for (const Value* v : {start, end})
    if (given(v) && !v->is_integral())
      return absl::InvalidArgumentError("slice indices must be integers or None");
  const std::vector<char32_t> cps = utf8_decode(s);
  const auto n = static_cast<int64_t>(cps.size());
  // Negative indices count from the end, and stop at its start.
  const auto index = [&](const Value* v, int64_t absent) {
    if (!given(v)) return absent;
    const int64_t i = v->as_int();
    return i < 0 ? std::max<int64_t>(i + n, 0) : i;
  };
  // Python finds nothing, not even "", in a range that starts past the end
  // or ends before it starts.
  const int64_t b = index(start, 0), e = std::min(index(end, n), n);
  if (b > n || e < b) return SearchRange{{}, 0, false};
  return SearchRange{utf8_encode(cps, static_cast<std::size_t>(b), static_cast<std::size_t>(e)), b};
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
  const std::vector<char32_t> cps = utf8_decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

absl::StatusOr<Value> BoundMethod::call_str(Evaluator& ev, const CallArgs& args) const {
  const std::string& s = self_.as_string();
  const std::string_view m = name_;
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    HEARTH_ASSIGN_OR_RETURN(auto chars, str_arg(args, 0, "chars"));
    const StripSide side = m == "strip"    ? StripSide::kBoth
                           : m == "lstrip" ? StripSide::kLeft
                                           : StripSide::kRight;
    return Value::string(py_strip(s, chars, side));
  }
  if (m == "split" || m == "rsplit") {
    HEARTH_ASSIGN_OR_RETURN(auto sep, str_arg(args, 0, "sep"));
    HEARTH_ASSIGN_OR_RETURN(int64_t maxsplit, int_arg(args, 1, "maxsplit", -1));
    if (sep && sep->empty()) return absl::InvalidArgumentError("empty separator");
    HEARTH_RETURN_IF_ERROR(ev.charge(s.size() / 16));
    return string_list(py_split(s, sep, maxsplit, m == "rsplit"));
  }
  if (m == "splitlines") return string_list(py_splitlines(s));
  if (m == "startswith" || m == "endswith") {
    HEARTH_ASSIGN_OR_RETURN(const SearchRange range, search_range(s, args));
    if (!range.exists) return Value::boolean(false);
    HEARTH_ASSIGN_OR_RETURN(bool r,
                            affix_match(range.text, arg(args, 0, "prefix"), m == "startswith"));
    return Value::boolean(r);
  }
  if (m == "lower") return Value::string(py_lower(s));
  if (m == "upper") return Value::string(py_upper(s));
  if (m == "title") return Value::string(py_title(s));
  if (m == "capitalize") return Value::string(py_capitalize(s));
  if (m == "replace") {
    HEARTH_ASSIGN_OR_RETURN(auto old, str_arg(args, 0, "old"));
    HEARTH_ASSIGN_OR_RETURN(auto repl, str_arg(args, 1, "new"));
    if (!old || !repl) return absl::InvalidArgumentError("replace() needs two string arguments");
    HEARTH_ASSIGN_OR_RETURN(int64_t count, int_arg(args, 2, "count", -1));
    std::string out;
    if (!py_replace(s, *old, *repl, count, ev.limits().max_output_bytes, out))
      return ev.check_bytes(ev.limits().max_output_bytes + 1);
    return Value::string(std::move(out));
  }
  if (m == "find" || m == "rfind" || m == "count") {
    HEARTH_ASSIGN_OR_RETURN(auto sub, str_arg(args, 0, "sub"));
    if (!sub) return absl::InvalidArgumentError(str_cat(m, "() needs a string"));
    HEARTH_ASSIGN_OR_RETURN(const SearchRange range, search_range(s, args));
    if (!range.exists) return Value::integer(m == "count" ? 0 : -1);
    const std::string& t = range.text;
    if (m == "count") {
      if (sub->empty()) return Value::integer(static_cast<int64_t>(utf8_length(t) + 1));
      int64_t n = 0;
      for (size_t at = t.find(*sub); at != std::string::npos; at = t.find(*sub, at + sub->size()))
        ++n;
      return Value::integer(n);
    }
    const size_t at = m == "find" ? t.find(*sub) : t.rfind(*sub);
    if (at == std::string::npos) return Value::integer(-1);
    return Value::integer(range.begin +
                          static_cast<int64_t>(utf8_length(std::string_view(t).substr(0, at))));
  }
  if (m == "join") {
    const Value* items = arg(args, 0, "iterable");
    if (items == nullptr) return absl::InvalidArgumentError("join() needs an iterable");
    HEARTH_ASSIGN_OR_RETURN(List parts, iterate(ev, *items));
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!parts[i].is_string())
        return absl::InvalidArgumentError(str_cat("sequence item ", i, ": expected str instance, ",
                                                  parts[i].type_name(), " found"));
      if (i > 0) out += s;
      out += parts[i].as_string();
      HEARTH_RETURN_IF_ERROR(ev.check_bytes(out.size()));
    }
    return Value::string(std::move(out));
  }
  auto ascii_class = [&](int (*pred)(int)) {
    return Value::boolean(
        all_chars(s, [&](char32_t c) { return c < 0x80 && pred(static_cast<int>(c)) != 0; }));
  };
  if (m == "isdigit") return ascii_class(::isdigit);
  if (m == "isalpha") return ascii_class(::isalpha);
  if (m == "isalnum") return ascii_class(::isalnum);
  if (m == "isspace") return Value::boolean(all_chars(s, is_py_space));
  if (m == "islower") return Value::boolean(s == py_lower(s) && s != py_upper(s));
  return Value::boolean(s == py_upper(s) && s != py_lower(s));  // isupper
}

absl::StatusOr<Value> BoundMethod::call_dict(const CallArgs& args) const {
  const Dict& d = self_.as_dict();
  List out;
  if (name_ == "get") {
    const Value* key = arg(args, 0, "key");
    if (key == nullptr) return absl::InvalidArgumentError("get() needs a key");
    if (const Value* v = d.find(*key)) return *v;
    const Value* dflt = arg(args, 1, "default");
    return dflt != nullptr ? *dflt : Value::none();
  }
  for (const auto& [k, v] : d.entries) {
    if (name_ == "items")
      out.push_back(Value::tuple({k, v}));
    else
      out.push_back(name_ == "keys" ? k : v);
  }
  return Value::list(std::move(out));
}

absl::StatusOr<Value> BoundMethod::call_seq(const CallArgs& args) const {
  const Value* x = arg(args, 0, "value");
  if (x == nullptr) return absl::InvalidArgumentError(str_cat(name_, "() needs an argument"));
  const List& items = self_.as_list();
  if (name_ == "count")
    return Value::integer(std::count_if(items.begin(), items.end(),
                                        [&](const Value& v) { return values_equal(v, *x); }));
  for (size_t i = 0; i < items.size(); ++i)
    if (values_equal(items[i], *x)) return Value::integer(static_cast<int64_t>(i));
  return absl::InvalidArgumentError(str_cat(to_repr(*x), " is not in list"));
}

Value bind(const Value& self, std::string_view name) {
  return Value::callable(std::make_shared<BoundMethod>(self, std::string(name)));
}

}  // namespace

absl::StatusOr<Value> get_method_or_attr(const Value& obj, std::string_view name, bool& found) {
  found = true;
  switch (obj.kind()) {
    case Value::Kind::kString:
      if (one_of(kStrMethods, name)) return bind(obj, name);
      break;
    case Value::Kind::kDict:
      if (one_of(kDictMethods, name)) return bind(obj, name);
      break;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      if (one_of(kSeqMethods, name)) return bind(obj, name);
      break;
    case Value::Kind::kNamespace:
      if (const Value* v = obj.as_namespace().attrs.find(Value::string(std::string(name))))
        return *v;
      break;
    default:
      break;
  }
  const bool mutable_kind = obj.is_dict() || obj.kind() == Value::Kind::kList;
  if (mutable_kind && one_of(kMutating, name))
    return absl::InvalidArgumentError(
        str_cat("access to attribute '", name, "' of '", obj.type_name(), "' object is unsafe"));
  found = false;
  return Value::undefined();
}

}  // namespace hearth::chat
