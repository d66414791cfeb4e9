// Structured output: a request's response_format compiled into the grammar
// its sampling follows (grammar/). No I/O, no model; the last few compiled
// formats are kept, so a repeated format reuses its grammar and token masks.
// Errors are InvalidArgument naming the field and, for a schema, the schema
// path: "response_format.json_schema: schema #/properties/age: minimum 10 is
// greater than maximum 5", "response_format.grammar: line 2, column 7: ...".
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"
#include "hearth/v1/inference.pb.h"

namespace hearth::server {

// Null when the request asks for free text (no format set).
absl::StatusOr<std::shared_ptr<const grammar::Grammar>> compile_response_format(
    const hearth::v1::ResponseFormat& format);

}  // namespace hearth::server
