// The hearth load generator: N concurrent Generate streams, M requests in
// all, never more than N in flight, with an optional mix of faults (client
// cancellations, short deadlines, long prompts) chosen deterministically from a
// seed. Measures client-side: TTFT, inter-token latency, per-stream decode
// speed (the same definition as hearth-generate: tokens after the first / time
// from the first to the last token) and aggregate throughput. With long
// prompts in the mix it also splits the latencies: TTFT of the long-prompt
// requests apart from the others, and the inter-token gaps of the other
// requests (all of them, and those that overlap a long prompt's prefill), so a
// run shows what one long prefill costs the streams decoding beside it.
//
// The plan helpers below are header-only (no gRPC or proto types), so unit
// tests can check them without linking the client library.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/client/connection.h"
#include "tools/client/percentiles.h"

namespace hearth::client {

// Requests one run may make (each outcome is kept for the report: about
// 130 MB at this bound).
inline constexpr std::int64_t kMaxBenchRequests = 1000000;

struct BenchOptions {
  std::string model;
  std::size_t concurrency = 1;
  std::size_t requests = 1;
  // Requests run one at a time before the measurement (no faults), not counted.
  std::size_t warmup = 0;
  // The prompt: `prompt`, or when `prompt_tokens` > 0 a prompt of about that
  // many tokens (repeated words).
  std::string prompt = "Once upon a time";
  std::size_t prompt_tokens = 0;
  std::uint32_t max_tokens = 64;
  double temperature = 0;
  std::uint64_t seed = 0;
  // Benchmarks want a fixed amount of work: keep generating past EOS.
  bool ignore_eos = true;
  // Fault mix: each request independently, with these probabilities, is
  // cancelled by the client after its first piece; gets a deadline of
  // `short_deadline_ms`; gets a prompt of about `long_prompt_tokens` tokens.
  double cancel_fraction = 0;
  double deadline_fraction = 0;
  double short_deadline_ms = 50;
  // The max_tokens of a short-deadline request (0: `max_tokens`). A request
  // asked for more tokens than the deadline leaves time for ends in
  // DEADLINE_EXCEEDED whatever the machine's speed, not only when it queues.
  std::uint32_t short_deadline_max_tokens = 0;
  double long_prompt_fraction = 0;
  std::size_t long_prompt_tokens = 512;
  std::uint64_t mix_seed = 1;
  // Prefix reuse: every request's prompt is one shared prefix of about
  // `shared_prefix_tokens` tokens followed by its own `prompt_tokens` (or
  // 20) words; or, with `chat_turns`, `concurrency` conversations of that
  // many turns, each turn resending the conversation so far (prompt and
  // generated text) plus its own words. `prefix_reuse` false sets
  // GenerateRequest.disable_prefix_reuse.
  std::size_t shared_prefix_tokens = 0;
  std::size_t chat_turns = 0;
  bool prefix_reuse = true;
  // A live progress line on stderr ('\r'-rewritten).
  bool progress = false;
};

// What the fault mix chose for one request.
struct RequestPlan {
  bool cancel_after_first = false;
  bool short_deadline = false;
  bool long_prompt = false;
  bool operator==(const RequestPlan&) const = default;
};

namespace internal {
// splitmix64: a well-mixed 64-bit hash, the same on every platform.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
// A uniform draw in [0, 1) from (seed, request index, which decision).
inline double uniform01(std::uint64_t seed, std::uint64_t index, std::uint64_t stream) {
  const std::uint64_t h = mix64(mix64(mix64(seed) ^ index) ^ (stream * 0xD1B54A32D192ED03ULL));
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}
}  // namespace internal

// The fault mix of request `index` (0-based, in submission order): a pure
// function of (mix_seed, index, fractions), so a run is reproducible no matter
// how threads interleave.
inline RequestPlan plan_request(const BenchOptions& o, std::size_t index) {
  RequestPlan p;
  p.cancel_after_first = internal::uniform01(o.mix_seed, index, 1) < o.cancel_fraction;
  p.short_deadline = internal::uniform01(o.mix_seed, index, 2) < o.deadline_fraction;
  p.long_prompt = internal::uniform01(o.mix_seed, index, 3) < o.long_prompt_fraction;
  return p;
}

// A prompt of about `n` tokens: `n` common words separated by spaces (with
// llama-family tokenizers, one token each).
inline std::string prompt_of_tokens(std::size_t n) {
  static const char* const kWords[] = {"the",  "quick", "brown", "fox",  "jumps", "over",
                                       "a",    "lazy",  "dog",   "and",  "then",  "runs",
                                       "into", "the",   "old",   "house"};
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += kWords[i % std::size(kWords)];
  }
  return out;
}

// Request `index`'s own words after a shared prefix or a chat history: `n`
// words drawn from (mix_seed, index), so requests differ from their first
// word on.
inline std::string request_words(std::uint64_t mix_seed, std::size_t index, std::size_t n) {
  static const char* const kWords[] = {"why",    "did",  "small",  "green", "birds",  "sing",
                                       "near",   "her",  "garden", "while", "people", "walk",
                                       "slowly", "past", "tall",   "trees", "today",  "again"};
  std::string out;
  for (std::size_t k = 0; k < n; ++k) {
    if (k) out += ' ';
    const double u = internal::uniform01(mix_seed, index, 16 + k);
    out += kWords[static_cast<std::size_t>(u * static_cast<double>(std::size(kWords)))];
  }
  return out;
}

// Whether a request's final status is one its plan asked for: CANCELLED after
// a planned cancellation, DEADLINE_EXCEEDED after a planned short deadline.
// `code` is a gRPC status code number.
inline bool is_expected_error(const RequestPlan& plan, int code) {
  constexpr int kCancelled = 1, kDeadlineExceeded = 4;
  return (code == kCancelled && plan.cancel_after_first) ||
         (code == kDeadlineExceeded && plan.short_deadline);
}

// What one request saw (times in seconds since the request started).
struct RequestOutcome {
  RequestPlan plan;
  int code = 0;  // gRPC status code
  std::string message;
  // Arrival of each piece with token_id >= 0.
  std::vector<double> token_times_s;
  double total_s = 0;
  // When the request started, in seconds since the measured run started.
  double start_s = 0;
  // Done.usage: prompt tokens, and those found in a KV cache.
  std::size_t prompt_tokens = 0, cached_tokens = 0;
  std::string text;  // the generated text (chat mode resends it)
};

// The latencies of a run split by the fault mix's long prompts (header-only,
// so unit tests can check it without the client library).
struct LongPromptSplit {
  std::size_t long_prompt_requests = 0;
  std::vector<double> ttft_long;   // first token of each long-prompt request
  std::vector<double> ttft_other;  // first token of each other request
  std::vector<double> itl_other;   // gaps between consecutive tokens of the other requests
  // The gaps of `itl_other` whose interval overlaps the prefill of a
  // long-prompt request (its start to its first token, or to its end when it
  // got none): what a long prefill makes the streams beside it wait.
  std::vector<double> itl_during_long_prefill;
};

// Prefill windows (a request's start to its first token, or to its end when
// it got none) on the run's clock, merged into disjoint sorted intervals;
// only the long-prompt requests' when `long_only`.
class PrefillWindows {
 public:
  PrefillWindows(const std::vector<RequestOutcome>& outcomes, bool long_only) {
    std::vector<std::pair<double, double>> windows;
    for (const RequestOutcome& r : outcomes) {
      if (long_only && !r.plan.long_prompt) continue;
      const double end = r.token_times_s.empty() ? r.total_s : r.token_times_s.front();
      windows.emplace_back(r.start_s, r.start_s + end);
    }
    std::sort(windows.begin(), windows.end());
    for (const auto& w : windows) {
      if (!merged_.empty() && w.first <= merged_.back().second) {
        merged_.back().second = std::max(merged_.back().second, w.second);
      } else {
        merged_.push_back(w);
      }
    }
  }
  // Whether [a, b] overlaps a window (touching at one instant does not count).
  bool overlaps(double a, double b) const {
    auto it = std::lower_bound(
        merged_.begin(), merged_.end(), a,
        [](const std::pair<double, double>& w, double x) { return w.second <= x; });
    return it != merged_.end() && it->first < b;
  }

 private:
  std::vector<std::pair<double, double>> merged_;
};

inline LongPromptSplit split_by_long_prompt(const std::vector<RequestOutcome>& outcomes) {
  LongPromptSplit out;
  for (const RequestOutcome& r : outcomes) {
    if (!r.plan.long_prompt) continue;
    ++out.long_prompt_requests;
    if (!r.token_times_s.empty()) out.ttft_long.push_back(r.token_times_s.front());
  }
  const PrefillWindows long_prefills(outcomes, /*long_only=*/true);
  for (const RequestOutcome& r : outcomes) {
    if (r.plan.long_prompt) continue;
    const auto& t = r.token_times_s;
    if (!t.empty()) out.ttft_other.push_back(t.front());
    for (std::size_t i = 1; i < t.size(); ++i) {
      out.itl_other.push_back(t[i] - t[i - 1]);
      if (long_prefills.overlaps(r.start_s + t[i - 1], r.start_s + t[i]))
        out.itl_during_long_prefill.push_back(t[i] - t[i - 1]);
    }
  }
  return out;
}

// Steady decode: the inter-token gaps during which no request was being
// prefilled (no prompt was being admitted beside the decoding streams).
inline std::vector<double> steady_decode_gaps(const std::vector<RequestOutcome>& outcomes) {
  const PrefillWindows prefills(outcomes, /*long_only=*/false);
  std::vector<double> gaps;
  for (const RequestOutcome& r : outcomes) {
    const auto& t = r.token_times_s;
    for (std::size_t i = 1; i < t.size(); ++i)
      if (!prefills.overlaps(r.start_s + t[i - 1], r.start_s + t[i]))
        gaps.push_back(t[i] - t[i - 1]);
  }
  return gaps;
}

struct BenchSummary {
  std::size_t concurrency = 0;
  std::size_t requests = 0;
  std::size_t ok = 0;
  std::size_t failed = 0;                              // unexpected errors
  std::size_t expected = 0;                            // errors the fault mix asked for
  std::map<std::string, std::size_t> errors;           // unexpected, by code name
  std::map<std::string, std::size_t> expected_errors;  // by code name
  std::map<std::string, std::string> error_examples;   // one message per code
  double wall_s = 0;
  double requests_per_s = 0;  // ok requests / wall time
  double tokens_per_s = 0;    // tokens received (every request) / wall time
  std::uint64_t generated_tokens = 0;
  // Mean over ok requests with >= 2 tokens of (tokens - 1) / (last - first arrival).
  double stream_decode_tokens_per_s = 0;
  std::size_t stream_decode_samples = 0;
  Percentiles ttft_s;        // request start -> first token, every request that got one
  Percentiles itl_s;         // gaps between consecutive tokens of a request
  Percentiles itl_steady_s;  // the gaps while no prompt was being prefilled (steady_decode_gaps)
  // Split by long prompts (see LongPromptSplit; all empty without long prompts).
  std::size_t long_prompt_requests = 0;
  Percentiles ttft_long_prompt_s;
  Percentiles ttft_other_s;
  Percentiles itl_other_s;
  Percentiles itl_during_long_prefill_s;
  double itl_other_max_s = 0;
  // Prompt tokens sent, and those served from a KV cache (prefix reuse).
  std::uint64_t prompt_tokens = 0, cached_tokens = 0;
};

// Folds the outcomes of a run that took `wall_s` seconds.
BenchSummary summarize(const std::vector<RequestOutcome>& outcomes, double wall_s,
                       std::size_t concurrency);

// The summary for people (several lines) and as one JSON object (one line).
std::string summary_text(const BenchSummary& s);
std::string summary_json(const BenchSummary& s);

// Runs the warmup, then the measured requests. Fails only when a warmup
// request fails (the status of that RPC) or on bad options; errors of measured
// requests are counted in the outcomes instead.
absl::StatusOr<std::vector<RequestOutcome>> run_bench(const std::shared_ptr<grpc::Channel>& channel,
                                                      const ConnectionOptions& connection,
                                                      const BenchOptions& options, double* wall_s);

}  // namespace hearth::client
