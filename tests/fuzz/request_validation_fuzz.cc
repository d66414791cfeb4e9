// Fuzz target: hearth.v1.GenerateRequest bytes as a client could send them
// -> server::parse_request -> server::to_generation_request. Must never crash;
// every refusal must be an InvalidArgument whose message names a field of
// the request, and every acceptance must give an engine request within the
// documented limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "hearth/v1/inference.pb.h"
#include "server/request_validation.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  hearth::v1::GenerateRequest request;
  const absl::Status parsed = hearth::server::parse_request(
      std::string_view(reinterpret_cast<const char*>(data), size), request);
  if (!parsed.ok()) {
    const std::string m(parsed.message());
    if (parsed.code() != absl::StatusCode::kInvalidArgument) std::abort();
    if (m.rfind("request:", 0) != 0 && m.rfind("prompt:", 0) != 0 && m.rfind("model:", 0) != 0 &&
        m.rfind("stop[", 0) != 0)
      std::abort();
    return 0;
  }
  hearth::engine::GenerationRequest out;
  const absl::Status s = hearth::server::to_generation_request(request, 4096, out);
  if (!s.ok()) {
    if (s.code() != absl::StatusCode::kInvalidArgument) std::abort();
    const std::string m(s.message());
    const bool names_field = m.rfind("prompt", 0) == 0 || m.rfind("max_tokens", 0) == 0 ||
                             m.rfind("stop", 0) == 0 || m.rfind("sampling.", 0) == 0;
    if (!names_field) std::abort();
    return 0;
  }
  if (out.prompt.empty() || out.max_tokens < 1 || out.max_tokens > 4096) std::abort();
  if (out.stop.size() > hearth::server::kMaxStopStrings) std::abort();
  if (!(out.sampling.temperature >= 0) || !(out.sampling.top_p > 0 && out.sampling.top_p <= 1))
    std::abort();
  return 0;
}
