// What the OpenAI HTTP front end costs against gRPC, on one running
// hearth-server serving a model with a chat template:
//   * a streamed chat completion over HTTP (POST /v1/chat/completions,
//     "stream": true) against the same conversation through gRPC's streamed
//     Chat, and
//   * a streamed completion over HTTP against gRPC's Generate on the same
//     prompt;
// each with STREAMS concurrent streams (the same load on both sides),
// ROUNDS rounds, transports alternating so drift hits both. Every request
// decodes exactly TOKENS tokens (ignore_eos, greedy). Prints, per transport,
// the median time to first token (request sent to first token received)
// and the median per-stream decode rate (tokens after the first over the
// time between the first and the last), then the HTTP/gRPC ratios.
//
//   bench_http_overhead GRPC_ADDR HTTP_ADDR MODEL [TOKENS=128] [STREAMS=1] [ROUNDS=8]
//
// bench/server/http_overhead.sh starts the server and runs this.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "hearth/v1/inference.grpc.pb.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

constexpr char kUser[] = "Tell me a story about a fox who learns to read, in many words.";

struct StreamTiming {
  double ttft_s = -1;       // request sent -> first token
  double decode_tok_s = 0;  // tokens after the first / (last - first)
  std::size_t tokens = 0;
  bool ok = false;
};

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Fills the rate from the first and last token times.
void finish_timing(StreamTiming& t, Clock::time_point start, Clock::time_point first,
                   Clock::time_point last) {
  t.ttft_s = seconds(start, first);
  t.decode_tok_s = t.tokens > 1 ? (t.tokens - 1) / seconds(first, last) : 0;
}

StreamTiming grpc_stream(hearth::v1::Inference::Stub& stub, const std::string& model, bool chat,
                         int tokens) {
  StreamTiming t;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  const Clock::time_point start = Clock::now();
  std::unique_ptr<grpc::ClientReader<hearth::v1::GenerateResponse>> reader;
  if (chat) {
    hearth::v1::ChatRequest r;
    r.set_model(model);
    r.set_max_tokens(tokens);
    r.set_ignore_eos(true);
    hearth::v1::ChatMessage* m = r.add_messages();
    m->set_role("user");
    m->set_content(kUser);
    reader = stub.Chat(&ctx, r);
  } else {
    hearth::v1::GenerateRequest r;
    r.set_model(model);
    r.set_prompt(kUser);
    r.set_max_tokens(tokens);
    r.set_ignore_eos(true);
    reader = stub.Generate(&ctx, r);
  }
  hearth::v1::GenerateResponse msg;
  Clock::time_point first{}, last{};
  while (reader->Read(&msg)) {
    if (!msg.has_piece() || msg.piece().token_id() < 0) continue;
    last = Clock::now();
    if (t.tokens++ == 0) first = last;
  }
  t.ok = reader->Finish().ok();
  if (t.ok && t.tokens > 0) finish_timing(t, start, first, last);
  return t;
}

// One streamed HTTP request; a token is counted per content event (every
// token of these prompts and models has text: the counts are checked
// against the usage chunk).
StreamTiming http_stream(const std::string& address, const std::string& model, bool chat,
                         int tokens) {
  StreamTiming t;
  httplib::Client client("http://" + address);
  client.set_read_timeout(600, 0);
  Json body = {{"model", model},   {"max_tokens", tokens},
               {"temperature", 0}, {"ignore_eos", true},
               {"stream", true},   {"stream_options", {{"include_usage", true}}}};
  if (chat)
    body["messages"] = Json::array({{{"role", "user"}, {"content", kUser}}});
  else
    body["prompt"] = kUser;
  httplib::Request req;
  req.method = "POST";
  req.path = chat ? "/v1/chat/completions" : "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string buffer;
  std::size_t usage_tokens = 0;
  Clock::time_point first{}, last{};
  req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
    buffer.append(data, n);
    for (std::size_t end; (end = buffer.find("\n\n")) != std::string::npos;
         buffer.erase(0, end + 2)) {
      const std::string_view event(buffer.data() + 6, end - 6);  // after "data: "
      if (event == "[DONE]") continue;
      const Json e = Json::parse(event);
      if (e.contains("usage") && !e["usage"].is_null())
        usage_tokens = e["usage"]["completion_tokens"].get<std::size_t>();
      if (e["choices"].empty()) continue;
      const Json& c = e["choices"][0];
      const Json& text = chat ? c["delta"].value("content", Json("")) : c["text"];
      if (!c["finish_reason"].is_null() || text.get<std::string>().empty()) continue;
      last = Clock::now();
      if (t.tokens++ == 0) first = last;
    }
    return true;
  };
  const Clock::time_point start = Clock::now();
  httplib::Result r = client.send(req);
  t.ok = r && r->status == 200 && usage_tokens == t.tokens;
  if (t.ok && t.tokens > 0) finish_timing(t, start, first, last);
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct Series {
  std::vector<double> ttft_ms, rate;
};

// One round: `streams` concurrent requests through one transport.
bool round(bool http, bool chat, const std::string& grpc_addr, const std::string& http_addr,
           const std::string& model, int tokens, int streams, Series& out) {
  std::vector<StreamTiming> results(static_cast<std::size_t>(streams));
  std::vector<std::thread> threads;
  for (int i = 0; i < streams; ++i)
    threads.emplace_back([&, i] {
      if (http) {
        results[i] = http_stream(http_addr, model, chat, tokens);
      } else {
        auto stub = hearth::v1::Inference::NewStub(
            grpc::CreateChannel(grpc_addr, grpc::InsecureChannelCredentials()));
        results[i] = grpc_stream(*stub, model, chat, tokens);
      }
    });
  for (std::thread& t : threads) t.join();
  for (const StreamTiming& r : results) {
    if (!r.ok || r.tokens != static_cast<std::size_t>(tokens)) {
      std::fprintf(stderr, "a %s stream failed or got %zu of %d tokens\n", http ? "HTTP" : "gRPC",
                   r.tokens, tokens);
      return false;
    }
    out.ttft_ms.push_back(r.ttft_s * 1e3);
    out.rate.push_back(r.decode_tok_s);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: bench_http_overhead GRPC_ADDR HTTP_ADDR MODEL [TOKENS=128] [STREAMS=1] "
                 "[ROUNDS=8]\n");
    return 2;
  }
  const std::string grpc_addr = argv[1], http_addr = argv[2], model = argv[3];
  const int tokens = argc > 4 ? std::atoi(argv[4]) : 128;
  const int streams = argc > 5 ? std::atoi(argv[5]) : 1;
  const int rounds = argc > 6 ? std::atoi(argv[6]) : 8;
  for (const bool chat : {true, false}) {
    Series grpc_series, http_series;
    // A warm-up round each, not counted.
    Series ignored;
    if (!round(false, chat, grpc_addr, http_addr, model, tokens, streams, ignored) ||
        !round(true, chat, grpc_addr, http_addr, model, tokens, streams, ignored))
      return 1;
    for (int r = 0; r < rounds; ++r) {
      const bool http_first = r % 2 == 1;
      for (const bool http : {http_first, !http_first})
        if (!round(http, chat, grpc_addr, http_addr, model, tokens, streams,
                   http ? http_series : grpc_series))
          return 1;
    }
    const char* what = chat ? "streamed chat (HTTP /v1/chat/completions vs gRPC Chat)"
                            : "streamed completion (HTTP /v1/completions vs gRPC Generate)";
    std::printf("%s, %d stream(s) x %d tokens, %d rounds:\n", what, streams, tokens, rounds);
    std::printf("  gRPC: time to first token %.2f ms, decode %.2f tokens/s per stream (medians)\n",
                median(grpc_series.ttft_ms), median(grpc_series.rate));
    std::printf("  HTTP: time to first token %.2f ms, decode %.2f tokens/s per stream (medians)\n",
                median(http_series.ttft_ms), median(http_series.rate));
    std::printf("  HTTP - gRPC time to first token: %+.2f ms; HTTP / gRPC tokens/s: %.3f\n",
                median(http_series.ttft_ms) - median(grpc_series.ttft_ms),
                median(http_series.rate) / median(grpc_series.rate));
  }
  return 0;
}
