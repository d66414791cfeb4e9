// Fuzz target: an HTTP request body as a client could send it, read as a
// POST /v1/completions and as a POST /v1/chat/completions body
// (server::openai::parse_request). Must never crash or throw; every refusal
// must be an InvalidArgument whose message starts with a field of the API
// (or "request body"), and its OpenAI error object must be valid JSON; every
// acceptance must give a request within the documented limits. The body's
// bytes also go through the response writers as generated text, whose
// output must stay valid JSON whatever the bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"
#include "server/openai_api.h"

namespace {

namespace openai = hearth::server::openai;

constexpr std::size_t kLimit = 4096;

const char* const kFields[] = {"request body",
                               "model",
                               "prompt",
                               "messages",
                               "max_tokens",
                               "max_completion_tokens",
                               "temperature",
                               "top_p",
                               "min_p",
                               "top_k",
                               "seed",
                               "stop",
                               "presence_penalty",
                               "frequency_penalty",
                               "repetition_penalty",
                               "logprobs",
                               "top_logprobs",
                               "response_format",
                               "stream",
                               "stream_options",
                               "n",
                               "best_of",
                               "echo",
                               "suffix",
                               "logit_bias",
                               "ignore_eos",
                               "cache_prompt",
                               "tools",
                               "add_generation_prompt",
                               "chat_template_kwargs"};

bool names_a_field(const std::string& message) {
  for (const char* f : kFields)
    if (message.rfind(f, 0) == 0) return true;
  return false;
}

void must_be_json(const std::string& text) {
  if (!nlohmann::json::accept(text)) std::abort();
}

void fuzz(openai::Endpoint endpoint, std::string_view body) {
  absl::StatusOr<openai::Request> r = openai::parse_request(endpoint, body, kLimit, 42);
  if (!r.ok()) {
    if (r.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    if (!names_a_field(std::string(r.status().message()))) std::abort();
    must_be_json(openai::error_body(r.status(), false));
    return;
  }
  const hearth::engine::GenerationRequest& g = r->generation();
  if (r->model().empty()) std::abort();
  if (g.max_tokens < 1 || g.max_tokens > kLimit) std::abort();
  if (g.top_logprobs > hearth::engine::kMaxTopLogprobs) std::abort();
  if (r->include_usage && !r->stream) std::abort();
  if (endpoint == openai::Endpoint::kChatCompletions) {
    if (!r->chat.conversation.messages.is_array() || r->chat.conversation.messages.empty())
      std::abort();
    if (r->chat.method != (r->stream ? "Chat" : "ChatComplete")) std::abort();
  } else if (r->generate.method != (r->stream ? "Generate" : "Complete")) {
    std::abort();
  }
}

// The body's bytes as generated text: events and responses stay JSON.
void fuzz_writers(std::string_view text) {
  const openai::ResponseHead head{openai::Endpoint::kChatCompletions, "chatcmpl-0", 0, "m"};
  const std::string event = openai::piece_event(head, text, nlohmann::ordered_json::array());
  if (!text.empty()) {
    if (event.rfind("data: ", 0) != 0 || event.size() < 8 ||
        event.compare(event.size() - 2, 2, "\n\n") != 0)
      std::abort();
    must_be_json(event.substr(6, event.size() - 8));
  }
  openai::ResponseBuilder builder({openai::Endpoint::kCompletions, "cmpl-0", 0, "m"});
  builder.add_piece(text, 1, nullptr);
  must_be_json(builder.finish(hearth::server::GenerateOutcome{}));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  fuzz(openai::Endpoint::kCompletions, body);
  fuzz(openai::Endpoint::kChatCompletions, body);
  fuzz_writers(body);
  return 0;
}
