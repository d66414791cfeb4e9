#include "tools/client/bench.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "base/cli_flags.h"
#include "hearth/v1/inference.grpc.pb.h"

namespace hearth::client {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Progress {
  std::atomic<std::size_t> done{0}, ok{0}, errors{0};
  std::atomic<std::uint64_t> tokens{0};
};

RequestOutcome run_one(v1::Inference::Stub& stub, const ConnectionOptions& connection,
                       const BenchOptions& o, const RequestPlan& plan, const std::string& prompt,
                       const std::string& long_prompt, Progress* progress) {
  RequestOutcome out;
  out.plan = plan;
  grpc::ClientContext context;
  double timeout_s = connection.timeout_s;
  if (plan.short_deadline) {
    const double short_s = o.short_deadline_ms / 1e3;
    timeout_s = timeout_s > 0 ? std::min(timeout_s, short_s) : short_s;
  }
  prepare_context(&context, connection, timeout_s);

  v1::GenerateRequest request;
  request.set_model(o.model);
  request.set_prompt(plan.long_prompt ? long_prompt : prompt);
  request.set_max_tokens(plan.short_deadline && o.short_deadline_max_tokens > 0
                             ? o.short_deadline_max_tokens
                             : o.max_tokens);
  request.mutable_sampling()->set_temperature(static_cast<float>(o.temperature));
  request.mutable_sampling()->set_seed(o.seed);
  request.set_ignore_eos(o.ignore_eos);
  request.set_disable_prefix_reuse(!o.prefix_reuse);

  const auto t0 = Clock::now();
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  bool cancelled = false;
  while (reader->Read(&response)) {
    if (response.has_done()) {
      out.prompt_tokens = response.done().usage().prompt_tokens();
      out.cached_tokens = response.done().usage().cached_tokens();
    }
    if (!response.has_piece()) continue;
    if (o.chat_turns > 0) out.text += response.piece().text();
    if (response.piece().token_id() >= 0) {
      out.token_times_s.push_back(seconds_since(t0));
      if (progress) progress->tokens.fetch_add(1, std::memory_order_relaxed);
    }
    if (plan.cancel_after_first && !cancelled) {
      context.TryCancel();
      cancelled = true;
    }
  }
  const grpc::Status status = reader->Finish();
  out.total_s = seconds_since(t0);
  out.code = static_cast<int>(status.error_code());
  out.message = status.error_message();
  if (progress) {
    if (status.ok()) {
      progress->ok.fetch_add(1, std::memory_order_relaxed);
    } else if (!is_expected_error(plan, out.code)) {
      progress->errors.fetch_add(1, std::memory_order_relaxed);
    }
    progress->done.fetch_add(1, std::memory_order_relaxed);
  }
  return out;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string counts_json(const std::map<std::string, std::size_t>& m) {
  std::string out = "{";
  for (const auto& [code, n] : m) {
    if (out.size() > 1) out += ",";
    out += hearth::json_string(code) + ":" + std::to_string(n);
  }
  return out + "}";
}

std::string percentiles_json(const Percentiles& p) {
  return "{\"p50\":" + fmt("%.6f", p.p50) + ",\"p95\":" + fmt("%.6f", p.p95) +
         ",\"p99\":" + fmt("%.6f", p.p99) + ",\"samples\":" + std::to_string(p.count) + "}";
}

std::string percentiles_ms(const Percentiles& p) {
  if (p.count == 0) return "n/a";
  return "p50 " + fmt("%.1f", p.p50 * 1e3) + " ms, p95 " + fmt("%.1f", p.p95 * 1e3) + " ms, p99 " +
         fmt("%.1f", p.p99 * 1e3) + " ms (" + std::to_string(p.count) + " samples)";
}

}  // namespace

BenchSummary summarize(const std::vector<RequestOutcome>& outcomes, double wall_s,
                       std::size_t concurrency) {
  BenchSummary s;
  s.concurrency = concurrency;
  s.requests = outcomes.size();
  s.wall_s = wall_s;
  std::vector<double> ttft, itl;
  double decode_sum = 0;
  for (const RequestOutcome& r : outcomes) {
    const std::string code = status_code_name(r.code);
    if (r.code == 0) {
      ++s.ok;
    } else if (is_expected_error(r.plan, r.code)) {
      ++s.expected;
      ++s.expected_errors[code];
    } else {
      ++s.failed;
      ++s.errors[code];
      s.error_examples.emplace(code, r.message);
    }
    const auto& t = r.token_times_s;
    s.generated_tokens += t.size();
    s.prompt_tokens += r.prompt_tokens;
    s.cached_tokens += r.cached_tokens;
    if (!t.empty()) ttft.push_back(t.front());
    for (std::size_t i = 1; i < t.size(); ++i) itl.push_back(t[i] - t[i - 1]);
    if (r.code == 0 && t.size() >= 2 && t.back() > t.front()) {
      decode_sum += static_cast<double>(t.size() - 1) / (t.back() - t.front());
      ++s.stream_decode_samples;
    }
  }
  if (wall_s > 0) {
    s.requests_per_s = static_cast<double>(s.ok) / wall_s;
    s.tokens_per_s = static_cast<double>(s.generated_tokens) / wall_s;
  }
  if (s.stream_decode_samples)
    s.stream_decode_tokens_per_s = decode_sum / static_cast<double>(s.stream_decode_samples);
  s.ttft_s = percentiles(std::move(ttft));
  s.itl_s = percentiles(std::move(itl));
  s.itl_steady_s = percentiles(steady_decode_gaps(outcomes));
  LongPromptSplit split = split_by_long_prompt(outcomes);
  s.long_prompt_requests = split.long_prompt_requests;
  if (s.long_prompt_requests) {
    if (!split.itl_other.empty())
      s.itl_other_max_s = *std::max_element(split.itl_other.begin(), split.itl_other.end());
    s.ttft_long_prompt_s = percentiles(std::move(split.ttft_long));
    s.ttft_other_s = percentiles(std::move(split.ttft_other));
    s.itl_other_s = percentiles(std::move(split.itl_other));
    s.itl_during_long_prefill_s = percentiles(std::move(split.itl_during_long_prefill));
  }
  return s;
}

std::string summary_text(const BenchSummary& s) {
  std::string out = "requests:        " + std::to_string(s.requests) + " (concurrency " +
                    std::to_string(s.concurrency) + "): ok " + std::to_string(s.ok) + ", failed " +
                    std::to_string(s.failed);
  if (s.expected) out += ", expected failures " + std::to_string(s.expected);
  out += "\nwall time:       " + fmt("%.3f", s.wall_s) + " s\n";
  out += "throughput:      " + fmt("%.2f", s.requests_per_s) + " req/s, " +
         fmt("%.1f", s.tokens_per_s) + " tok/s aggregate (" + std::to_string(s.generated_tokens) +
         " tokens)\n";
  out += "stream decode:   " +
         (s.stream_decode_samples
              ? fmt("%.1f", s.stream_decode_tokens_per_s) + " tok/s per stream (mean of " +
                    std::to_string(s.stream_decode_samples) + ")"
              : std::string("n/a")) +
         "\n";
  out += "TTFT:            " + percentiles_ms(s.ttft_s) + "\n";
  out += "prompt tokens:   " + std::to_string(s.prompt_tokens) + " sent, " +
         std::to_string(s.cached_tokens) + " from a KV cache, " +
         std::to_string(s.prompt_tokens - s.cached_tokens) + " computed\n";
  out += "inter-token:     " + percentiles_ms(s.itl_s) + "\n";
  out += "  steady decode: " + percentiles_ms(s.itl_steady_s) + " (no prompt being prefilled)\n";
  if (s.long_prompt_requests) {
    out += "long prompts:    " + std::to_string(s.long_prompt_requests) + " requests\n";
    out += "  TTFT long:     " + percentiles_ms(s.ttft_long_prompt_s) + "\n";
    out += "  TTFT others:   " + percentiles_ms(s.ttft_other_s) + "\n";
    out += "  ITL others:    " + percentiles_ms(s.itl_other_s) +
           (s.itl_other_s.count ? ", max " + fmt("%.1f", s.itl_other_max_s * 1e3) + " ms" : "") +
           "\n";
    out +=
        "  ITL others during a long prefill: " + percentiles_ms(s.itl_during_long_prefill_s) + "\n";
  }
  for (const auto& [code, n] : s.errors) {
    out += "error:           " + code + " x" + std::to_string(n);
    auto it = s.error_examples.find(code);
    if (it != s.error_examples.end() && !it->second.empty()) out += " (e.g. " + it->second + ")";
    out += "\n";
  }
  for (const auto& [code, n] : s.expected_errors)
    out += "expected:        " + code + " x" + std::to_string(n) + "\n";
  return out;
}

std::string summary_json(const BenchSummary& s) {
  std::string examples = "{";
  for (const auto& [code, message] : s.error_examples) {
    if (examples.size() > 1) examples += ",";
    examples += hearth::json_string(code) + ":" + hearth::json_string(message);
  }
  examples += "}";
  return "{\"requests\":" + std::to_string(s.requests) +
         ",\"concurrency\":" + std::to_string(s.concurrency) + ",\"ok\":" + std::to_string(s.ok) +
         ",\"failed\":" + std::to_string(s.failed) + ",\"errors\":" + counts_json(s.errors) +
         ",\"error_examples\":" + examples +
         ",\"expected_errors\":" + counts_json(s.expected_errors) +
         ",\"wall_s\":" + fmt("%.6f", s.wall_s) +
         ",\"requests_per_s\":" + fmt("%.4f", s.requests_per_s) +
         ",\"tokens_per_s\":" + fmt("%.4f", s.tokens_per_s) +
         ",\"generated_tokens\":" + std::to_string(s.generated_tokens) +
         ",\"stream_decode_tokens_per_s\":" + fmt("%.4f", s.stream_decode_tokens_per_s) +
         ",\"ttft_s\":" + percentiles_json(s.ttft_s) + ",\"itl_s\":" + percentiles_json(s.itl_s) +
         ",\"itl_steady_s\":" + percentiles_json(s.itl_steady_s) +
         ",\"long_prompt_requests\":" + std::to_string(s.long_prompt_requests) +
         ",\"ttft_long_prompt_s\":" + percentiles_json(s.ttft_long_prompt_s) +
         ",\"ttft_other_s\":" + percentiles_json(s.ttft_other_s) +
         ",\"itl_other_s\":" + percentiles_json(s.itl_other_s) +
         ",\"itl_other_max_s\":" + fmt("%.6f", s.itl_other_max_s) +
         ",\"itl_during_long_prefill_s\":" + percentiles_json(s.itl_during_long_prefill_s) +
         ",\"prompt_tokens\":" + std::to_string(s.prompt_tokens) +
         ",\"cached_tokens\":" + std::to_string(s.cached_tokens) + "}";
}

absl::StatusOr<std::vector<RequestOutcome>> run_bench(const std::shared_ptr<grpc::Channel>& channel,
                                                      const ConnectionOptions& connection,
                                                      const BenchOptions& o, double* wall_s) {
  if (o.concurrency == 0) return absl::InvalidArgumentError("--concurrency must be at least 1");
  if (o.model.empty()) return absl::InvalidArgumentError("--model is required");
  auto stub = v1::Inference::NewStub(channel);
  const std::string prompt = o.prompt_tokens > 0 ? prompt_of_tokens(o.prompt_tokens) : o.prompt;
  const std::string long_prompt = prompt_of_tokens(o.long_prompt_tokens);
  const std::string shared_prefix = prompt_of_tokens(o.shared_prefix_tokens);
  const std::size_t own_words = o.prompt_tokens > 0 ? o.prompt_tokens : 20;
  // The shared prefix followed by request i's own words.
  auto prefixed = [&](std::size_t i) {
    return shared_prefix + ' ' + request_words(o.mix_seed, i, own_words);
  };
  // Request i's prompt, and in chat mode the conversation it continues.
  std::vector<std::string> chats(o.chat_turns > 0 ? o.concurrency : 0);
  auto prompt_of = [&](std::size_t i) {
    if (o.chat_turns > 0) {
      std::string& history = chats[i / o.chat_turns];
      if (!history.empty()) history += ' ';
      return history += request_words(o.mix_seed, i, own_words);
    }
    return o.shared_prefix_tokens > 0 ? prefixed(i) : prompt;
  };

  for (std::size_t i = 0; i < o.warmup; ++i) {
    // With a shared prefix the warmup puts it in a cache, behind words no
    // measured request has.
    const std::string warm = o.shared_prefix_tokens > 0 ? prefixed(o.requests + i) : prompt;
    RequestOutcome w = run_one(*stub, connection, o, RequestPlan{}, warm, long_prompt, nullptr);
    if (w.code != 0)
      return absl::Status(static_cast<absl::StatusCode>(w.code), "warmup: " + w.message);
  }

  const std::size_t requests = o.chat_turns > 0 ? o.concurrency * o.chat_turns : o.requests;
  std::vector<RequestOutcome> outcomes(requests);
  Progress progress;
  std::atomic<std::size_t> next{0};
  const auto t0 = Clock::now();
  auto run_request = [&](std::size_t i) {
    const double start_s = seconds_since(t0);
    outcomes[i] =
        run_one(*stub, connection, o, plan_request(o, i), prompt_of(i), long_prompt, &progress);
    outcomes[i].start_s = start_s;
  };
  auto worker = [&] {
    for (;;) {
      const std::size_t i = next.fetch_add(1);
      if (i >= requests) return;
      run_request(i);
    }
  };
  // Chat mode: thread c runs conversation c's turns in order, each turn
  // after the answer to the one before.
  auto conversation = [&](std::size_t c) {
    for (std::size_t t = 0; t < o.chat_turns; ++t) {
      const std::size_t i = c * o.chat_turns + t;
      run_request(i);
      chats[c] += ' ' + outcomes[i].text;
    }
  };
  const std::size_t n_threads = std::min(o.concurrency, std::max<std::size_t>(requests, 1));
  std::vector<std::thread> threads;
  threads.reserve(n_threads);
  for (std::size_t t = 0; t < n_threads; ++t) {
    if (o.chat_turns > 0) {
      threads.emplace_back(conversation, t);
    } else {
      threads.emplace_back(worker);
    }
  }

  // The progress line, rewritten in place every ~250 ms until every worker ends.
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  std::thread reporter;
  if (o.progress) {
    reporter = std::thread([&] {
      std::unique_lock lock(mu);
      for (;;) {
        const bool last =
            cv.wait_for(lock, std::chrono::milliseconds(250), [&] { return finished; });
        const double t = seconds_since(t0);
        const double done = static_cast<double>(progress.done.load());
        const double tokens = static_cast<double>(progress.tokens.load());
        std::fprintf(stderr, "\r[bench] %zu/%zu done, %.2f req/s, %.1f tok/s, %zu errors   ",
                     progress.done.load(), requests, t > 0 ? done / t : 0.0,
                     t > 0 ? tokens / t : 0.0, progress.errors.load());
        if (last) {
          std::fputc('\n', stderr);
          std::fflush(stderr);
          return;
        }
        std::fflush(stderr);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  *wall_s = seconds_since(t0);
  if (reporter.joinable()) {
    {
      std::lock_guard lock(mu);
      finished = true;
    }
    cv.notify_all();
    reporter.join();
  }
  return outcomes;
}

}  // namespace hearth::client
