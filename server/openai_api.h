// The OpenAI HTTP API's JSON, mapped to and from the request path's plain
// values (server/request_path.h). Pure functions: no I/O, no model, no
// clock (the caller passes ids, times and default seeds); fuzzed by
// tests/fuzz/openai_request_fuzz.cc. The HTTP front end (server/http_frontend.h)
// does the transport.
//
// Requests: POST /v1/completions and /v1/chat/completions bodies. Accepted
// fields: model, prompt (a string, or an array of one) / messages, max_tokens
// (max_completion_tokens for chat), temperature, top_p, seed, stop (a string
// or an array), presence_penalty, frequency_penalty, logprobs (completions:
// how many alternatives, 0-20; chat: a boolean, with top_logprobs 0-20),
// response_format (text, json_object: an object, json_schema), stream,
// stream_options.include_usage, n (1 only), tools (chat: handed to the
// template), user; hearth's extras as llama.cpp's server takes them: top_k,
// min_p, repetition_penalty (or repeat_penalty), repeat_last_n, ignore_eos,
// cache_prompt; chat also takes
// add_generation_prompt and chat_template_kwargs. Other fields are ignored,
// except those hearth cannot honour (echo, suffix, best_of > 1, logit_bias),
// which are refused. Defaults are OpenAI's: temperature 1, top_p 1, and at
// most 16 tokens for a completion, the server's max_tokens limit for chat.
//
// Errors are InvalidArgument whose message starts with the field's name, as
// everywhere in hearth ("temperature: must be a number", "n: 3 is not
// supported (only 1)"); error_body() turns any status into OpenAI's error
// object with the HTTP status that goes with it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/chat_call.h"
#include "server/piece_sink.h"
#include "server/request_path.h"

namespace hearth::server::openai {

enum class Endpoint { kCompletions, kChatCompletions };

// A request body, mapped.
struct Request {
  Endpoint endpoint = Endpoint::kCompletions;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  GenerateCall generate;       // kCompletions
  ChatCall chat;               // kChatCompletions
  const std::string& model() const {
    return endpoint == Endpoint::kCompletions ? generate.model : chat.model;
  }
  const engine::GenerationRequest& generation() const {
    return endpoint == Endpoint::kCompletions ? generate.request : chat.request;
  }
};

// Parses and maps a request body. `default_seed` is the seed when the body
// gives none (the front end draws it at random, as OpenAI's sampling is).
absl::StatusOr<Request> parse_request(Endpoint endpoint, std::string_view body,
                                      std::size_t max_tokens_limit, std::uint64_t default_seed);

// What every response object of one call shares.
struct ResponseHead {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;            // "cmpl-..." or "chatcmpl-..."
  std::int64_t created = 0;  // Unix seconds
  std::string model;
  // stream_options.include_usage: every chunk carries "usage" (null but in
  // the last, which holds the counts), as OpenAI's do.
  bool usage_in_chunks = false;
};

// The log-probabilities of a call's tokens, each released once the output
// holds the start of its text: a token whose text a stop string holds back
// waits for it, and the tokens of the stop string itself (text never
// released) are dropped at the end, as llama.cpp's server drops them. An
// entry is chat's {token, logprob, bytes, top_logprobs} or a completion's
// parallel arrays of one, whose text_offset is where the token's text
// starts in the output. One per call; not thread-safe.
class LogprobQueue {
 public:
  explicit LogprobQueue(Endpoint endpoint) : endpoint_(endpoint) {}
  // One piece: `text` joins the output; `logprobs` are its token's, or null.
  void add(std::string_view text, const PieceLogprobs* logprobs);
  // The entries released and not yet taken (a JSON array).
  nlohmann::ordered_json take_released();
  // At the end of the output: the entries still held, unless it ended on a
  // stop string (then none).
  nlohmann::ordered_json take_rest(engine::FinishReason finish);

 private:
  Endpoint endpoint_;
  std::size_t decoded_ = 0;  // bytes of the tokens' own text so far
  std::size_t output_ = 0;   // bytes of output so far
  std::vector<std::pair<std::size_t, nlohmann::ordered_json>> held_;  // (text offset, entry)
  nlohmann::ordered_json released_ = nlohmann::ordered_json::array();
};

// A whole (unary) response, built from the pieces as they come.
class ResponseBuilder {
 public:
  explicit ResponseBuilder(ResponseHead head) : head_(std::move(head)), queue_(head_.endpoint) {}
  void add_piece(std::string_view text, std::int32_t token, const PieceLogprobs* logprobs);
  // The response object's JSON text.
  std::string finish(const GenerateOutcome& outcome) const;

 private:
  ResponseHead head_;
  std::string text_;
  LogprobQueue queue_;
  bool logprobs_ = false;  // the request asked for them
};

// Server-sent events of a streamed response. Each returns one whole event,
// "data: {...}\n\n".
std::string role_event(const ResponseHead& head);  // chat's first chunk: the assistant role
// One piece with the log-probability entries LogprobQueue released with it
// (a JSON array, maybe empty); empty when there is nothing to send.
std::string piece_event(const ResponseHead& head, std::string_view text,
                        const nlohmann::ordered_json& logprobs);
std::string finish_event(const ResponseHead& head, const GenerateOutcome& outcome);
std::string usage_event(const ResponseHead& head, const GenerateOutcome& outcome);
// An error after the stream began (the status line already went out).
std::string error_event(const absl::Status& status);
inline constexpr std::string_view kDoneEvent = "data: [DONE]\n\n";

// JSON text of `value`; invalid UTF-8 (never expected: every text is
// checked or sanitized) is replaced rather than thrown on.
std::string dump(const nlohmann::ordered_json& value);

// The HTTP status for a request path error. UNAVAILABLE is 503 while the
// model is loading or the server drains (`draining`), else 429 (the queue is
// full); DEADLINE_EXCEEDED 504; INVALID_ARGUMENT and FAILED_PRECONDITION 400.
int http_status(const absl::Status& status, bool draining);
// OpenAI's error object for `status`: message, type, param (the field the
// message names, when it names one) and code.
std::string error_body(const absl::Status& status, bool draining);

}  // namespace hearth::server::openai
