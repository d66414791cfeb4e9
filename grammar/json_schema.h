// JSON schema -> GBNF (docs/grammar.md, "JSON schema subset"): the grammar a
// structured-output request samples under. Outputs are compact JSON: at most
// one optional space after `{ [ , :` and before `} ]`, nothing after the
// value. Every number, repetition and whitespace run in the grammar is
// bounded or optional, so a sampler that picks allowed characters at random
// always has a way to finish.
//
// Errors are InvalidArgument, "schema #/json/pointer: what is wrong", naming
// the subschema (and the keyword) refused: "schema #/properties/age: minimum
// 10 is greater than maximum 5", "schema #/properties/x: unsupported keyword
// \"not\"", "schema #: not valid JSON: ...".
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace hearth::grammar {

// GBNF for any JSON value (objects, arrays, strings, numbers, true/false/null), root rule "root".
std::string_view any_json_gbnf();

// GBNF whose sentences are exactly the JSON texts valid under `schema_json` (the supported subset).
absl::StatusOr<std::string> json_schema_to_gbnf(std::string_view schema_json);

}  // namespace hearth::grammar
