// Turning a hearth.v1.GenerateRequest into an engine request. The mapping
// (map_generation_request) gives proto defaults their engine meaning (top_p
// and repetition_penalty 0 mean off; max_tokens unset means 128, or the
// limit when lower); the checks of the values are the request path's
// (check_generation_request in server/request_path.h), so every front end
// shares them. A mistake is an InvalidArgument whose message starts with the
// field's name and states its limit ("max_tokens: 0 is out of range:
// allowed [1, 4096]", "sampling.top_p = nan is out of range: allowed (0,
// 1]", "stop[3]: must not be empty"). Pure functions: no I/O, no model;
// fuzzed by fuzz/request_validation_fuzz.cc.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/status.h"
#include "engine/generation.h"
#include "hearth/v1/inference.pb.h"
#include "server/request_path.h"

namespace hearth::server {

// Parses a request message from its wire bytes. gRPC's own parser refuses a
// message with invalid UTF-8 in a string field with a bare INTERNAL status;
// hearth parses the bytes itself so the client learns which field is wrong:
// InvalidArgument "prompt: not valid UTF-8 (byte 3 of the field)", "stop[1]:
// ...", "model: ...", or "request: not a valid hearth.v1.GenerateRequest
// message".
absl::Status parse_request(std::string_view bytes, google::protobuf::Message& out);

// Maps every field; fails only on a response_format it cannot compile
// (server/response_format.h).
absl::Status map_generation_request(const hearth::v1::GenerateRequest& request,
                                    std::size_t max_tokens_limit, engine::GenerationRequest& out);
// The chat request's conversation (messages as the template sees them; the
// JSON of tools, tool_calls and template_kwargs parsed) and generation
// options. InvalidArgument naming the field: "messages[2].role: must not be
// empty", "tools: not valid JSON (...)", "template_kwargs: must be a JSON
// object".
absl::Status map_chat_request(const hearth::v1::ChatRequest& request, std::size_t max_tokens_limit,
                              ChatCall& out);
// map_generation_request, then check_generation_request.
absl::Status to_generation_request(const hearth::v1::GenerateRequest& request,
                                   std::size_t max_tokens_limit, engine::GenerationRequest& out);

}  // namespace hearth::server
