// Python's operators on template values: arithmetic (+ - * / // % **),
// concatenation (~), membership (in), slicing and iteration. Errors are the
// TypeErrors / ZeroDivisionErrors Python raises, as INVALID_ARGUMENT;
// results larger than the render's limits are RESOURCE_EXHAUSTED.
#pragma once

#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "chat/value.h"

namespace hearth::chat {

class Evaluator;

absl::StatusOr<Value> binary_op(Evaluator& ev, std::string_view op, const Value& a, const Value& b);
absl::StatusOr<Value> unary_op(std::string_view op, const Value& a);

// `item in container`.
absl::StatusOr<bool> contains(const Value& container, const Value& item);

// container[start:stop:step]; nullopt bounds are omitted ones. Slicing a
// kind that has no slices gives undefined, as jinja2's getitem does.
absl::StatusOr<Value> slice(const Value& container, std::optional<int64_t> start,
                            std::optional<int64_t> stop, std::optional<int64_t> step);

// The items a `for` loop (or list()) visits: list/tuple items, dict keys,
// a string's characters (at most the list limit); undefined is empty.
// Anything else is not iterable.
absl::StatusOr<List> iterate(Evaluator& ev, const Value& v);

// "'x' is undefined" for an undefined operand, as jinja2's UndefinedError.
absl::Status undefined_error(const Value& v);

}  // namespace hearth::chat
