// Fuzz target: request bytes as a client could send them, read both as a
// hearth.v1.GenerateRequest (server::parse_request ->
// server::to_generation_request) and as a hearth.v1.ChatRequest
// (server::parse_request -> server::map_chat_request, whose JSON fields are
// parsed). Must never crash; every refusal must be an InvalidArgument whose
// message names a field of the request, and every acceptance must give an
// engine request within the documented limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "hearth/v1/inference.pb.h"
#include "server/chat_call.h"
#include "server/request_validation.h"

namespace {

bool starts_with(const std::string& m, const char* prefix) { return m.rfind(prefix, 0) == 0; }

// The ChatRequest reading of the same bytes.
void fuzz_chat(std::string_view bytes) {
  hearth::v1::ChatRequest request;
  const absl::Status parsed = hearth::server::parse_request(bytes, request);
  if (!parsed.ok()) {
    if (parsed.code() != absl::StatusCode::kInvalidArgument) std::abort();
    return;  // the field names were checked on the GenerateRequest reading's path
  }
  hearth::server::ChatCall call;
  const absl::Status s = hearth::server::map_chat_request(request, 4096, call);
  if (!s.ok()) {
    const std::string m(s.message());
    if (s.code() != absl::StatusCode::kInvalidArgument) std::abort();
    if (!starts_with(m, "messages[") && !starts_with(m, "tools") &&
        !starts_with(m, "template_kwargs") && !starts_with(m, "response_format"))
      std::abort();
    return;
  }
  if (!call.conversation.messages.is_array()) std::abort();
  if (static_cast<int>(call.conversation.messages.size()) != request.messages_size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz_chat(std::string_view(reinterpret_cast<const char*>(data), size));
  hearth::v1::GenerateRequest request;
  const absl::Status parsed = hearth::server::parse_request(
      std::string_view(reinterpret_cast<const char*>(data), size), request);
  if (!parsed.ok()) {
    const std::string m(parsed.message());
    if (parsed.code() != absl::StatusCode::kInvalidArgument) std::abort();
    if (!starts_with(m, "request:") && !starts_with(m, "prompt:") && !starts_with(m, "model:") &&
        !starts_with(m, "stop[") && !starts_with(m, "response_format."))
      std::abort();
    return 0;
  }
  hearth::engine::GenerationRequest out;
  const absl::Status s = hearth::server::to_generation_request(request, 4096, out);
  if (!s.ok()) {
    if (s.code() != absl::StatusCode::kInvalidArgument) std::abort();
    const std::string m(s.message());
    const bool names_field = starts_with(m, "prompt") || starts_with(m, "max_tokens") ||
                             starts_with(m, "stop") || starts_with(m, "sampling.") ||
                             starts_with(m, "top_logprobs") || starts_with(m, "response_format");
    if (!names_field) std::abort();
    return 0;
  }
  if (out.prompt.empty() || out.max_tokens < 1 || out.max_tokens > 4096) std::abort();
  if (out.stop.size() > hearth::server::kMaxStopStrings) std::abort();
  if (!(out.sampling.temperature >= 0) || !(out.sampling.top_p > 0 && out.sampling.top_p <= 1))
    std::abort();
  return 0;
}
