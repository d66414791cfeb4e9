// Faults while serving: a client that stops reading its stream (HTTP/2 flow
// control stalls the server's writes) holds only its own instance; a client
// that disconnects during a long prefill frees its instance within a prefill
// chunk; SIGTERM in the middle of a load run drains and exits 0 within the
// grace period; SIGKILL and a restart on the same port serve again, and a
// client's channel reconnects to it.
//
// Waiting is bounded polling of real state (GetModel, stream events, /metrics,
// the child's exit); nothing sleeps.
#include <gtest/gtest.h>
#include <signal.h>

#include <future>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "tests/reliability/reliability_util.h"
#include "tools/client/bench.h"

namespace hearth::testing {
namespace {

constexpr char kDemo[] = "demo";
constexpr char kSlow[] = "slow";

bool is_idle(const v1::ModelInfo& m) { return m.instances_busy() == 0 && m.queue_depth() == 0; }

::testing::AssertionResult wait_until(v1::Inference::Stub& stub, const std::string& model,
                                      const std::function<bool(const v1::ModelInfo&)>& pred,
                                      milliseconds timeout, const char* what) {
  v1::ModelInfo last;
  if (wait_for_model(stub, model, pred, timeout, &last)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "not " << what << " within " << timeout.count()
                                       << " ms; last GetModel: " << describe_model(last);
}

// A request is counted when its handler returns, just after its instance is
// freed, so a single scrape right after the model went idle can come before
// a cancelled request is counted. Scrapes until one Generate is counted as
// CANCELLED (bounded only against a hang) and returns that scrape.
std::map<std::string, double> scrape_once_cancelled_is_counted(const ServerProcess& server) {
  const auto counted = [](const std::map<std::string, double>& m) {
    return sum_series(m, "hearth_requests_total", {"code=\"CANCELLED\"", "method=\"Generate\""}) >=
           1.0;
  };
  bool held = false;
  std::map<std::string, double> m = scrape_until(server, counted, patience(), &held);
  EXPECT_TRUE(held) << "no Generate was counted as CANCELLED";
  return m;
}

// --- A client that stops reading -------------------------------------------

// A channel whose streams take little data before their reader must read:
// a small HTTP/2 stream window and no BDP probing (which would grow it). With
// gRPC's default window the demo model's whole stream (about 2,000 small
// pieces) fits in the client's buffers and the server's writes never block.
std::shared_ptr<grpc::Channel> small_window_channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt("hearth.test.small_window", 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

constexpr std::uint32_t kContext = 512;

TEST(FaultTest, ClientThatStopsReadingHoldsOnlyItsOwnInstance) {
  ServerProcess server;
  // A 512-position context: the stalled stream's writes block after about
  // 130 pieces (measured: the small window, the transport's buffer and the
  // PieceWriter's queue), far from its end, and the others need to generate
  // only a little more than 512 tokens between them to prove it.
  HEARTH_START_SERVER(server, server_args({"--instances", "2", "--queue", "8", "--kernel-threads",
                                           "1", "--context", std::to_string(kContext)}));
  auto channel = plain_channel(server.grpc_address());
  auto stub = make_stub(channel);

  // Opens a Generate that would run to the end of the context (hundreds of
  // pieces) and never reads it.
  auto stalled_channel = small_window_channel(server.grpc_address());
  auto stalled_stub = make_stub(stalled_channel);
  grpc::ClientContext stalled_ctx;
  set_deadline(stalled_ctx, patience() * 4);
  v1::GenerateRequest huge = make_request(kDemo, "a reader that never reads", 4096);
  huge.set_ignore_eos(true);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> stalled =
      stalled_stub->Generate(&stalled_ctx, huge);
  ASSERT_TRUE(wait_until(
      *stub, kDemo, [](const auto& m) { return m.instances_busy() == 1; }, patience(),
      "one instance busy"));

  // Meanwhile, requests on the other instance complete, one after another,
  // generating together more tokens than the stalled request would need to
  // reach the end of the context if its writes were not blocked.
  constexpr int kOthers = 6;
  constexpr std::uint32_t kOtherTokens = 96;
  static_assert(kOthers * kOtherTokens > kContext);
  std::vector<std::uint32_t> instances;
  for (int i = 0; i < kOthers; ++i) {
    v1::GenerateRequest req = make_request(kDemo, "request " + std::to_string(i), kOtherTokens);
    req.set_ignore_eos(true);
    const StreamResult r = generate(*stub, req);
    ASSERT_TRUE(r.status.ok()) << "request " << i << ": " << status_text(r.status);
    ASSERT_EQ(r.dones.size(), 1u);
    EXPECT_EQ(r.dones.front().usage().generated_tokens(), kOtherTokens);
    instances.push_back(r.dones.front().instance());
    // Nothing waits for the stalled instance (an event, not a clock): after
    // each request the only busy instance is the stalled one's, and the
    // queue is empty.
    v1::ModelInfo after;
    ASSERT_TRUE(get_model(*stub, kDemo, &after).ok());
    EXPECT_EQ(after.queue_depth(), 0u) << "request " << i << ": " << describe_model(after);
    EXPECT_EQ(after.instances_busy(), 1u) << "request " << i << ": " << describe_model(after);
  }
  for (std::uint32_t i : instances) EXPECT_EQ(i, instances.front()) << "all ran on one instance";

  // The stalled request is still there: its writes are blocked, not finished.
  v1::ModelInfo info;
  ASSERT_TRUE(get_model(*stub, kDemo, &info).ok());
  EXPECT_EQ(info.instances_busy(), 1u)
      << "the stalled stream should still hold its instance; " << describe_model(info);

  // Going away releases it at once (a blocked write fails on cancellation).
  stalled_ctx.TryCancel();
  EXPECT_EQ(stalled->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const milliseconds prompt = kUnderSanitizer ? seconds(20) : seconds(2);
  EXPECT_TRUE(wait_until(*stub, kDemo, is_idle, prompt, "idle after the stalled client left"));
  const auto after = scrape_once_cancelled_is_counted(server);
  // It stopped where its writes blocked, far from the end of its context.
  EXPECT_LT(sum_series(after, "hearth_generated_tokens_total", {}) - kOthers * kOtherTokens,
            kContext / 2);
  // The server saw it end as CANCELLED (had it finished, it would have counted OK).
  EXPECT_EQ(
      sum_series(after, "hearth_requests_total", {"code=\"CANCELLED\"", "method=\"Generate\""}),
      1.0);
  EXPECT_EQ(sum_series(after, "hearth_requests_total", {"code=\"OK\"", "method=\"Generate\""}),
            static_cast<double>(kOthers));

  // And the server goes on.
  v1::GenerateRequest req = make_request(kDemo, "after", 8);
  req.set_ignore_eos(true);
  EXPECT_TRUE(generate(*stub, req).status.ok());
}

// --- A client that disconnects during prefill ---------------------------------

TEST(FaultTest, DisconnectDuringPrefillFreesTheInstance) {
  const std::string path = slow_model();
  ASSERT_FALSE(path.empty());
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args({"--model", std::string(kSlow) + "=" + path,
                                           "--instances", "1", "--queue", "2"}));
  auto channel = plain_channel(server.grpc_address());
  auto stub = make_stub(channel);
  v1::ModelInfo info;
  ASSERT_TRUE(get_model(*stub, kSlow, &info).ok());

  // A prompt filling most of the context: its prefill is many chunks of 64
  // tokens on a model this size (tens of seconds here), the cancellation is
  // checked between chunks.
  const std::string prompt = client::prompt_of_tokens(900);
  v1::TokenizeRequest treq;
  treq.set_model(kSlow);
  treq.set_text(prompt);
  v1::TokenizeResponse tresp;
  {
    grpc::ClientContext ctx;
    set_deadline(ctx, seconds(30));
    ASSERT_TRUE(stub->Tokenize(&ctx, treq, &tresp).ok());
  }
  const auto prompt_tokens = static_cast<std::uint32_t>(tresp.token_ids_size());
  ASSERT_GT(prompt_tokens, 16 * 64u) << "the prompt should be at least 16 prefill chunks";
  ASSERT_LT(prompt_tokens, info.context_length());

  v1::GenerateRequest req = make_request(kSlow, prompt, 16);
  req.set_ignore_eos(true);
  OpenStream s(*stub, req);
  ASSERT_TRUE(wait_until(
      *stub, kSlow, [](const auto& m) { return m.instances_busy() == 1; }, patience(),
      "busy with the long prompt"));
  const auto cancelled_at = Clock::now();
  s.cancel();
  EXPECT_EQ(s.finish().error_code(), grpc::StatusCode::CANCELLED) << status_text(s.finish());
  EXPECT_TRUE(s.result().pieces.empty()) << "the prefill finished before the cancellation";

  // Free again: the generation stops at the next prefill chunk. The wait is
  // bounded only against a hang; the proof that the prefill was cut short,
  // not run to its end, is the counters below.
  EXPECT_TRUE(wait_until(*stub, kSlow, is_idle, patience(), "idle after the disconnect"));
  const double freed_s = std::chrono::duration<double>(Clock::now() - cancelled_at).count();
  std::cout << "[fault] " << prompt_tokens << "-token prefill cancelled; instance free after "
            << freed_s << " s" << std::endl;

  // The server counted it as cancelled, and it never produced a token: a
  // prefill run to its end is always followed by a first token (sampled
  // before the server can notice the client is gone), which would show in
  // these counters.
  const auto m = scrape_once_cancelled_is_counted(server);
  EXPECT_EQ(sum_series(m, "hearth_requests_total", {"code=\"CANCELLED\"", "method=\"Generate\""}),
            1.0);
  EXPECT_EQ(metric(m, "hearth_generated_tokens_total{model=\"slow\"}"), 0.0);
  EXPECT_EQ(metric(m, "hearth_time_to_first_token_seconds_count{model=\"slow\"}"), 0.0);
  EXPECT_EQ(metric(m, "hearth_prompt_tokens_total{model=\"slow\"}"),
            static_cast<double>(prompt_tokens));

  // The next request runs on the freed instance (the model was idle above,
  // so it cannot queue behind the cancelled one).
  v1::GenerateRequest next = make_request(kSlow, "next", 4);
  next.set_ignore_eos(true);
  v1::CompleteResponse resp;
  const grpc::Status st = complete(*stub, next, &resp);
  ASSERT_TRUE(st.ok()) << status_text(st);
  EXPECT_EQ(resp.token_ids_size(), 4);
}

// --- SIGTERM during load --------------------------------------------------------

TEST(FaultTest, SigtermDuringLoadDrainsAndExitsZeroWithinTheGracePeriod) {
  constexpr int kGraceS = 10;
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args({"--instances", "2", "--queue", "8", "--kernel-threads",
                                           "1", "--grace-period-s", std::to_string(kGraceS)}));
  auto channel = plain_channel(server.grpc_address());
  auto stub = make_stub(channel);

  // Far more requests than run before the signal: the load is on when it comes.
  client::BenchOptions o;
  o.model = kDemo;
  o.concurrency = 8;
  o.requests = 3000;
  o.max_tokens = 16;
  o.ignore_eos = true;
  o.cancel_fraction = 0.1;
  o.deadline_fraction = 0.1;
  o.short_deadline_ms = kUnderSanitizer ? 500 : 50;
  o.long_prompt_fraction = 0.1;
  o.long_prompt_tokens = 128;
  o.mix_seed = 7;
  client::ConnectionOptions conn;
  conn.server = server.grpc_address();
  conn.timeout_s = std::chrono::duration<double>(patience()).count();
  auto bench_channel = plain_channel(server.grpc_address());
  double wall_s = 0;
  auto bench = std::async(std::launch::async,
                          [&] { return client::run_bench(bench_channel, conn, o, &wall_s); });

  // Wait for load: some requests done, both instances busy.
  const auto deadline = Clock::now() + patience();
  bool loaded = false;
  while (!loaded && Clock::now() < deadline) {
    const auto m = scrape(server);
    v1::ModelInfo info;
    loaded = sum_series(m, "hearth_requests_total", {"method=\"Generate\"", "code=\"OK\""}) >= 40 &&
             get_model(*stub, kDemo, &info).ok() && info.instances_busy() == 2;
  }
  ASSERT_TRUE(loaded) << "the load never got going";

  const auto signalled = Clock::now();
  ASSERT_TRUE(server.signal(SIGTERM));
  // Bounded only against a hang: that the generations finished within the
  // grace period is the server's own account below (it cancels whatever is
  // left when the period ends, and says so), not a clock on this side.
  const std::optional<int> code = server.wait_exit(seconds(kGraceS) + patience());
  const double exit_s = std::chrono::duration<double>(Clock::now() - signalled).count();
  ASSERT_TRUE(code.has_value()) << "still running long after SIGTERM" << server.describe();
  EXPECT_EQ(*code, 0) << server.describe();
  std::cout << "[fault] exit " << *code << " " << exit_s << " s after SIGTERM" << std::endl;
  const std::string err = server.stderr_text();
  EXPECT_NE(err.find("received SIGTERM"), std::string::npos) << err;
  EXPECT_EQ(err.find("some generations were cancelled"), std::string::npos)
      << "16-token generations should finish within the grace period:\n"
      << err;

  auto outcomes = bench.get();
  ASSERT_TRUE(outcomes.ok()) << outcomes.status();
  std::size_t ok = 0, unavailable = 0;
  for (std::size_t i = 0; i < outcomes->size(); ++i) {
    const client::RequestOutcome& r = (*outcomes)[i];
    if (r.code == 0) {
      ++ok;
      continue;
    }
    if (client::is_expected_error(r.plan, r.code)) continue;
    // UNAVAILABLE: refused while draining. CANCELLED with no token: the call
    // reached the transport as gRPC shut it down, before any handler ran
    // (documented in inference.proto as safe to retry).
    if (r.code == static_cast<int>(grpc::StatusCode::UNAVAILABLE) ||
        r.code == static_cast<int>(grpc::StatusCode::CANCELLED)) {
      if (r.code == static_cast<int>(grpc::StatusCode::UNAVAILABLE)) ++unavailable;
      // Refused (draining, or the server gone), never cut off mid-generation.
      EXPECT_TRUE(r.token_times_s.empty()) << "request " << i << " was cut off after "
                                           << r.token_times_s.size() << " tokens: " << r.message;
      continue;
    }
    ADD_FAILURE() << "request " << i << ": unexpected " << client::status_code_name(r.code) << " '"
                  << r.message << "' after " << r.token_times_s.size() << " tokens, " << r.total_s
                  << " s (planned: cancel " << r.plan.cancel_after_first << ", short deadline "
                  << r.plan.short_deadline << ", long prompt " << r.plan.long_prompt << ")";
  }
  const client::BenchSummary s = client::summarize(*outcomes, wall_s, o.concurrency);
  std::cout << "[fault] load across SIGTERM: " << client::summary_json(s) << std::endl;
  EXPECT_GE(ok, 20u);
  EXPECT_GT(unavailable, 0u) << "no request was refused after the signal";
}

// --- SIGKILL and restart --------------------------------------------------------

TEST(FaultTest, SigkillThenRestartOnTheSamePortServesAgain) {
  ServerProcess first;
  HEARTH_START_SERVER(first, server_args({"--kernel-threads", "1"}));
  const std::string address = first.grpc_address();
  // One channel for the whole test: it must find the restarted server by itself.
  auto channel = fast_reconnect_channel(address);
  auto stub = make_stub(channel);

  v1::GenerateRequest endless = make_request(kDemo, "killed midway", 4096);
  endless.set_ignore_eos(true);
  OpenStream s(*stub, endless);
  ASSERT_TRUE(s.wait_first_piece()) << status_text(s.finish());
  ASSERT_TRUE(first.signal(SIGKILL));
  const std::optional<int> code = first.wait_exit(patience());
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 128 + SIGKILL);
  const grpc::Status broken = s.finish();
  EXPECT_EQ(broken.error_code(), grpc::StatusCode::UNAVAILABLE) << status_text(broken);
  EXPECT_TRUE(s.result().dones.empty());
  std::cout << "[fault] stream of a SIGKILLed server: " << describe_status(broken) << std::endl;

  ServerProcess second;
  HEARTH_START_SERVER(second, std::vector<std::string>({"--listen", address, "--metrics-listen",
                                                        "127.0.0.1:0", "--kernel-threads", "1"}));
  ASSERT_EQ(second.grpc_address(), address);
  // The old channel reconnects (wait_for_ready rides out its backoff).
  {
    grpc::ClientContext ctx;
    set_deadline(ctx);
    ctx.set_wait_for_ready(true);
    v1::GenerateRequest req = make_request(kDemo, "after the restart", 8);
    req.set_ignore_eos(true);
    v1::CompleteResponse resp;
    const grpc::Status st = stub->Complete(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << status_text(st);
    EXPECT_EQ(resp.token_ids_size(), 8);
  }
  int serving = -1;
  ASSERT_TRUE(health_check(channel, "", &serving).ok());
  EXPECT_EQ(serving, kServing);
  const StreamResult again = generate(*stub, make_request(kDemo, "streaming again", 4));
  EXPECT_TRUE(again.status.ok()) << status_text(again.status);
  EXPECT_EQ(again.dones.size(), 1u);
  ASSERT_TRUE(second.signal(SIGTERM));
  EXPECT_EQ(second.wait_exit(patience()), std::optional<int>(0)) << second.describe();
}

}  // namespace
}  // namespace hearth::testing
