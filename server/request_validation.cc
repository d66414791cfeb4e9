#include "server/request_validation.h"

#include "engine/str_cat.h"

namespace hearth::server {
namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

absl::Status to_generation_request(const hearth::v1::GenerateRequest& r,
                                   std::size_t max_tokens_limit, engine::GenerationRequest& out) {
  if (r.prompt().empty()) return invalid("prompt: must not be empty");
  out.prompt.assign(r.prompt().data(), r.prompt().size());
  if (r.has_max_tokens()) {
    if (r.max_tokens() < 1 || r.max_tokens() > max_tokens_limit)
      return invalid(str_cat("max_tokens: ", r.max_tokens(), " is out of range: allowed [1, ",
                             max_tokens_limit, "]"));
    out.max_tokens = r.max_tokens();
  } else {
    out.max_tokens = kDefaultMaxTokens < max_tokens_limit ? kDefaultMaxTokens : max_tokens_limit;
  }
  if (static_cast<std::size_t>(r.stop_size()) > kMaxStopStrings)
    return invalid(
        str_cat("stop: ", r.stop_size(), " strings given, at most ", kMaxStopStrings, " allowed"));
  for (int i = 0; i < r.stop_size(); ++i) {
    const std::string& s = r.stop(i);
    if (s.empty()) return invalid(str_cat("stop[", i, "]: must not be empty"));
    if (s.size() > kMaxStopBytes)
      return invalid(
          str_cat("stop[", i, "]: ", s.size(), " bytes, at most ", kMaxStopBytes, " allowed"));
    out.stop.push_back(s);
  }
  const hearth::v1::SamplingParams& p = r.sampling();
  engine::SamplingParams& sp = out.sampling;
  sp.temperature = p.temperature();
  sp.top_k = p.top_k();
  sp.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  sp.min_p = p.min_p();
  sp.repetition_penalty = p.repetition_penalty() == 0.0f ? 1.0f : p.repetition_penalty();
  sp.presence_penalty = p.presence_penalty();
  sp.frequency_penalty = p.frequency_penalty();
  if (p.has_penalty_last_n()) sp.penalty_last_n = p.penalty_last_n();
  sp.seed = p.seed();
  if (absl::Status s = engine::validate_sampling(sp); !s.ok())
    return invalid(str_cat("sampling.", s.message()));
  if (r.has_add_bos()) out.tokenize.add_bos = r.add_bos();
  out.tokenize.parse_special = r.parse_special();
  out.ignore_eos = r.ignore_eos();
  return absl::OkStatus();
}

}  // namespace hearth::server
