// The filters, tests, globals and methods templates may call. Names are
// resolved at parse time (an unknown filter or test is a load-time error)
// and the functions run at render time.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "chat/value.h"

namespace hearth::chat {

class Evaluator;

using FilterFn = absl::StatusOr<Value> (*)(Evaluator& ev, const Value& input, CallArgs& args);
using TestFn = absl::StatusOr<bool> (*)(Evaluator& ev, const Value& input, CallArgs& args);

// nullptr when no such filter / test exists.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// range, dict, namespace, raise_exception, strftime_now; undefined if none.
Value find_global(std::string_view name);

// obj.name as jinja2's sandboxed getattr sees it: str/dict/list methods as
// bound callables, mutating methods refused (the immutable sandbox's
// SecurityError), dict keys, namespace attributes. `found` is false when
// the object has no such attribute (the caller then tries obj[name]).
absl::StatusOr<Value> get_method_or_attr(const Value& obj, std::string_view name, bool& found);

}  // namespace hearth::chat
