// The filter functions, split by theme across filters_*.cc; builtins.h's
// find_filter() maps names onto them.
#pragma once

#include "absl/status/statusor.h"
#include "chat/evaluator.h"
#include "chat/value.h"

namespace hearth::chat::filters {

#define HEARTH_CHAT_FILTER(name) \
  absl::StatusOr<Value> name(Evaluator& ev, const Value& in, CallArgs& args)

// filters_text.cc
HEARTH_CHAT_FILTER(trim);
HEARTH_CHAT_FILTER(lower);
HEARTH_CHAT_FILTER(upper);
HEARTH_CHAT_FILTER(title);
HEARTH_CHAT_FILTER(capitalize);
HEARTH_CHAT_FILTER(replace);
HEARTH_CHAT_FILTER(string);
HEARTH_CHAT_FILTER(indent);
HEARTH_CHAT_FILTER(escape);
HEARTH_CHAT_FILTER(safe);
HEARTH_CHAT_FILTER(wordcount);
HEARTH_CHAT_FILTER(tojson);
HEARTH_CHAT_FILTER(to_int);
HEARTH_CHAT_FILTER(to_float);
HEARTH_CHAT_FILTER(abs);
HEARTH_CHAT_FILTER(round);
HEARTH_CHAT_FILTER(default_value);

// filters_seq.cc
HEARTH_CHAT_FILTER(length);
HEARTH_CHAT_FILTER(first);
HEARTH_CHAT_FILTER(last);
HEARTH_CHAT_FILTER(join);
HEARTH_CHAT_FILTER(items);
HEARTH_CHAT_FILTER(list);
HEARTH_CHAT_FILTER(reverse);
HEARTH_CHAT_FILTER(map);
HEARTH_CHAT_FILTER(select);
HEARTH_CHAT_FILTER(reject);
HEARTH_CHAT_FILTER(selectattr);
HEARTH_CHAT_FILTER(rejectattr);
HEARTH_CHAT_FILTER(unique);
HEARTH_CHAT_FILTER(sort);
HEARTH_CHAT_FILTER(dictsort);
HEARTH_CHAT_FILTER(sum);
HEARTH_CHAT_FILTER(min);
HEARTH_CHAT_FILTER(max);

#undef HEARTH_CHAT_FILTER

}  // namespace hearth::chat::filters
