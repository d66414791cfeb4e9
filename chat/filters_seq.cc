// Filters on sequences and mappings, following jinja2 3.1's definitions.
#include <algorithm>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/builtin_args.h"
#include "chat/filter_impl.h"
#include "chat/operators.h"
#include "chat/strings.h"
#include "chat/utf8.h"

namespace hearth::chat::filters {
namespace {

// jinja2's make_attrgetter: "a.b.0" looks up item a, then b, then index 0.
absl::StatusOr<Value> get_path(Evaluator& ev, const Value& item, const std::string& path) {
  Value v = item;
  for (const std::string& part : py_split(path, std::string("."), -1)) {
    const bool numeric =
        !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) && part.size() < 18;
    const Value key = numeric ? Value::integer(std::stoll(part)) : Value::string(part);
    HEARTH_ASSIGN_OR_RETURN(v, ev.getitem(v, key));
  }
  return v;
}

// The key sort/unique/min/max compare: the attribute if given, lowercased
// when it is a string and the comparison ignores case.
absl::StatusOr<Value> sort_key(Evaluator& ev, const Value& item,
                               const std::optional<std::string>& attribute, bool case_sensitive) {
  Value v = item;
  if (attribute) {
    HEARTH_ASSIGN_OR_RETURN(v, get_path(ev, item, *attribute));
  }
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.as_string()));
  return v;
}

absl::Status stable_sort(List& items, std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  absl::Status status;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!status.ok()) return false;
    auto c = compare_values(keys[a], keys[b]);
    if (!c.ok()) {
      status = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  HEARTH_RETURN_IF_ERROR(status);
  List sorted;
  for (size_t i : order) sorted.push_back(std::move(items[i]));
  items = std::move(sorted);
  return absl::OkStatus();
}

CallArgs shift(const CallArgs& args, size_t n) {
  CallArgs rest;
  for (size_t i = n; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  rest.named = args.named;
  return rest;
}

// select/reject (attr = false) and selectattr/rejectattr (attr = true).
absl::StatusOr<Value> select_impl(Evaluator& ev, const Value& in, CallArgs& args, bool attr,
                                  bool keep) {
  if (!in.truthy()) return Value::list({});  // jinja2 iterates only a truthy input
  HEARTH_ASSIGN_OR_RETURN(List items, iterate(ev, in));
  std::optional<std::string> attribute;
  size_t test_at = 0;
  if (attr) {
    HEARTH_ASSIGN_OR_RETURN(attribute, str_arg(args, 0, "attribute"));
    if (!attribute) return absl::InvalidArgumentError("selectattr needs an attribute name");
    test_at = 1;
  }
  HEARTH_ASSIGN_OR_RETURN(auto test, str_arg(args, test_at, "test"));
  List out;
  for (Value& item : items) {
    HEARTH_RETURN_IF_ERROR(ev.charge(1));
    Value v = item;
    if (attribute) {
      HEARTH_ASSIGN_OR_RETURN(v, get_path(ev, item, *attribute));
    }
    bool pass = v.truthy();
    if (test) {
      HEARTH_ASSIGN_OR_RETURN(pass, ev.call_test(*test, v, shift(args, test_at + 1)));
    }
    if (pass == keep) out.push_back(std::move(item));
  }
  return Value::list(std::move(out));
}

}  // namespace

absl::StatusOr<Value> length(Evaluator&, const Value& in, CallArgs&) {
  switch (in.kind()) {
    case Value::Kind::kUndefined:
      return Value::integer(0);
    case Value::Kind::kString:
      return Value::integer(static_cast<int64_t>(utf8_length(in.as_string())));
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return Value::integer(static_cast<int64_t>(in.as_list().size()));
    case Value::Kind::kDict:
      return Value::integer(static_cast<int64_t>(in.as_dict().entries.size()));
    case Value::Kind::kNamespace:
    default:
      return absl::InvalidArgumentError(
          str_cat("object of type '", in.type_name(), "' has no len()"));
  }
}

absl::StatusOr<Value> first(Evaluator& ev, const Value& in, CallArgs&) {
  HEARTH_ASSIGN_OR_RETURN(List items, iterate(ev, in));
  if (items.empty()) return Value::undefined("No first item, sequence was empty. It");
  return items.front();
}

absl::StatusOr<Value> last(Evaluator& ev, const Value& in, CallArgs&) {
  if (in.is_undefined()) return undefined_error(in);
  HEARTH_ASSIGN_OR_RETURN(List items, iterate(ev, in));
  if (items.empty()) return Value::undefined("No last item, sequence was empty. It");
  return items.back();
}

absl::StatusOr<Value> join(Evaluator& ev, const Value& in, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto sep, str_arg(args, 0, "d"));
  HEARTH_ASSIGN_OR_RETURN(auto attribute, str_arg(args, 1, "attribute"));
  HEARTH_ASSIGN_OR_RETURN(List items, iterate(ev, in));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0 && sep) out += *sep;
    Value v = items[i];
    if (attribute) {
      HEARTH_ASSIGN_OR_RETURN(v, get_path(ev, v, *attribute));
    }
    out += to_str(v);
    HEARTH_RETURN_IF_ERROR(ev.check_bytes(out.size()));
  }
  HEARTH_RETURN_IF_ERROR(ev.charge(items.size() + out.size() / 64));
  return Value::string(std::move(out));
}

absl::StatusOr<Value> items(Evaluator&, const Value& in, CallArgs&) {
  if (in.is_undefined()) return Value::list({});
  if (!in.is_dict()) return absl::InvalidArgumentError("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, v] : in.as_dict().entries) out.push_back(Value::tuple({k, v}));
  return Value::list(std::move(out));
}

absl::StatusOr<Value> list(Evaluator& ev, const Value& in, CallArgs&) {
  HEARTH_ASSIGN_OR_RETURN(List items, iterate(ev, in));
  HEARTH_RETURN_IF_ERROR(ev.charge(items.size()));
  return Value::list(std::move(items));
}

absl::StatusOr<Value> reverse(Evaluator& ev, const Value& in, CallArgs&) {
  if (in.is_string()) return slice(in, std::nullopt, std::nullopt, -1);
  HEARTH_ASSIGN_OR_RETURN(List items, iterate(ev, in));
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

// map(attribute='x', default=None) or map('filter', args...).
absl::StatusOr<Value> map(Evaluator& ev, const Value& in, CallArgs& args) {
  if (!in.truthy()) return Value::list({});  // jinja2 iterates only a truthy input
  HEARTH_ASSIGN_OR_RETURN(List items, iterate(ev, in));
  HEARTH_RETURN_IF_ERROR(ev.charge(items.size()));
  List out;
  if (args.positional.empty()) {
    HEARTH_ASSIGN_OR_RETURN(auto attribute, str_arg(args, 99, "attribute"));
    if (!attribute) return absl::InvalidArgumentError("map needs a filter name or attribute=");
    const Value* dflt = arg(args, 99, "default");
    for (const Value& item : items) {
      HEARTH_ASSIGN_OR_RETURN(Value v, get_path(ev, item, *attribute));
      out.push_back(v.is_undefined() && dflt != nullptr ? *dflt : v);
    }
    return Value::list(std::move(out));
  }
  HEARTH_ASSIGN_OR_RETURN(auto filter, str_arg(args, 0, "filter"));
  if (!filter) return absl::InvalidArgumentError("map needs a filter name");
  for (const Value& item : items) {
    HEARTH_ASSIGN_OR_RETURN(Value v, ev.call_filter(*filter, item, shift(args, 1)));
    out.push_back(std::move(v));
  }
  return Value::list(std::move(out));
}

absl::StatusOr<Value> select(Evaluator& ev, const Value& in, CallArgs& args) {
  return select_impl(ev, in, args, false, true);
}
absl::StatusOr<Value> reject(Evaluator& ev, const Value& in, CallArgs& args) {
  return select_impl(ev, in, args, false, false);
}
absl::StatusOr<Value> selectattr(Evaluator& ev, const Value& in, CallArgs& args) {
  return select_impl(ev, in, args, true, true);
}
absl::StatusOr<Value> rejectattr(Evaluator& ev, const Value& in, CallArgs& args) {
  return select_impl(ev, in, args, true, false);
}

absl::StatusOr<Value> unique(Evaluator& ev, const Value& in, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(bool case_sensitive, bool_arg(args, 0, "case_sensitive", false));
  HEARTH_ASSIGN_OR_RETURN(auto attribute, str_arg(args, 1, "attribute"));
  HEARTH_ASSIGN_OR_RETURN(List items, iterate(ev, in));
  List out, seen;
  for (Value& item : items) {
    HEARTH_RETURN_IF_ERROR(ev.charge(1 + seen.size()));
    HEARTH_ASSIGN_OR_RETURN(Value key, sort_key(ev, item, attribute, case_sensitive));
    if (key.is_sequence() || key.is_dict())
      return absl::InvalidArgumentError(str_cat("unhashable type: '", key.type_name(), "'"));
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); }))
      continue;
    seen.push_back(std::move(key));
    out.push_back(std::move(item));
  }
  return Value::list(std::move(out));
}

absl::StatusOr<Value> sort(Evaluator& ev, const Value& in, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(bool reverse, bool_arg(args, 0, "reverse", false));
  HEARTH_ASSIGN_OR_RETURN(bool case_sensitive, bool_arg(args, 1, "case_sensitive", false));
  HEARTH_ASSIGN_OR_RETURN(auto attribute, str_arg(args, 2, "attribute"));
  HEARTH_ASSIGN_OR_RETURN(List items, iterate(ev, in));
  HEARTH_RETURN_IF_ERROR(ev.charge(items.size() * 20));
  std::vector<Value> keys;
  for (const Value& item : items) {
    HEARTH_ASSIGN_OR_RETURN(Value k, sort_key(ev, item, attribute, case_sensitive));
    keys.push_back(std::move(k));
  }
  HEARTH_RETURN_IF_ERROR(stable_sort(items, keys, reverse));
  return Value::list(std::move(items));
}

absl::StatusOr<Value> dictsort(Evaluator& ev, const Value& in, CallArgs& args) {
  if (!in.is_dict()) return absl::InvalidArgumentError("dictsort needs a mapping");
  HEARTH_ASSIGN_OR_RETURN(bool case_sensitive, bool_arg(args, 0, "case_sensitive", false));
  HEARTH_ASSIGN_OR_RETURN(auto by, str_arg(args, 1, "by"));
  HEARTH_ASSIGN_OR_RETURN(bool reverse, bool_arg(args, 2, "reverse", false));
  const size_t pos = by.value_or("key") == "value" ? 1 : 0;
  List pairs;
  std::vector<Value> keys;
  for (const auto& [k, v] : in.as_dict().entries) {
    pairs.push_back(Value::tuple({k, v}));
    const Value& key = pos == 0 ? k : v;
    keys.push_back(!case_sensitive && key.is_string() ? Value::string(py_lower(key.as_string()))
                                                      : key);
  }
  HEARTH_RETURN_IF_ERROR(ev.charge(pairs.size() * 20));
  HEARTH_RETURN_IF_ERROR(stable_sort(pairs, keys, reverse));
  return Value::list(std::move(pairs));
}

absl::StatusOr<Value> sum(Evaluator& ev, const Value& in, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto attribute, str_arg(args, 0, "attribute"));
  Value total = Value::integer(0);
  if (const Value* start = arg(args, 1, "start")) total = *start;
  HEARTH_ASSIGN_OR_RETURN(List items, iterate(ev, in));
  for (const Value& item : items) {
    Value v = item;
    if (attribute) {
      HEARTH_ASSIGN_OR_RETURN(v, get_path(ev, item, *attribute));
    }
    HEARTH_ASSIGN_OR_RETURN(total, binary_op(ev, "+", total, v));
  }
  return total;
}

namespace {

absl::StatusOr<Value> min_max(Evaluator& ev, const Value& in, CallArgs& args, bool want_max) {
  HEARTH_ASSIGN_OR_RETURN(bool case_sensitive, bool_arg(args, 0, "case_sensitive", false));
  HEARTH_ASSIGN_OR_RETURN(auto attribute, str_arg(args, 1, "attribute"));
  HEARTH_ASSIGN_OR_RETURN(List items, iterate(ev, in));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty. It");
  size_t best = 0;
  HEARTH_ASSIGN_OR_RETURN(Value best_key, sort_key(ev, items[0], attribute, case_sensitive));
  for (size_t i = 1; i < items.size(); ++i) {
    HEARTH_ASSIGN_OR_RETURN(Value k, sort_key(ev, items[i], attribute, case_sensitive));
    HEARTH_ASSIGN_OR_RETURN(int c, compare_values(k, best_key));
    if (want_max ? c > 0 : c < 0) best = i, best_key = std::move(k);
  }
  return items[best];
}

}  // namespace

absl::StatusOr<Value> min(Evaluator& ev, const Value& in, CallArgs& args) {
  return min_max(ev, in, args, false);
}
absl::StatusOr<Value> max(Evaluator& ev, const Value& in, CallArgs& args) {
  return min_max(ev, in, args, true);
}

}  // namespace hearth::chat::filters
