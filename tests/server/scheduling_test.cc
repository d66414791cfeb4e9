// Instances and the wait queue: concurrent requests run on the warm instances
// and queue beyond them, a full queue refuses, deadlines and cancellation free
// the instance at once. Runs on a synthetic model slow enough (a few ms per
// token) that a long request outlasts every check made while it runs; each
// check waits on real state: GetModel's instances_busy / queue_depth (bounded
// polling) or stream events.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "tests/server/metrics_scrape.h"
#include "tests/server/test_util.h"

namespace hearth::testing {
namespace {

constexpr char kModel[] = "slow";

// Tokens of a request that must run to its end while the test watches: long
// enough for the checks made meanwhile, short enough to finish soon. (Under
// either sanitizer a token of the slow model takes a few hundred ms on a
// loaded CI machine, so 12 leave seconds for checks that take milliseconds.)
constexpr std::uint32_t kFiniteTokens = kUnderSanitizer ? 12 : 64;
// A request that would run for many seconds (to the context limit) unless it
// is cancelled or its deadline passes.
constexpr std::uint32_t kEndlessTokens = 4000;
// The first deadline tried for a request that must run out of time while it
// is queued / generating. Only its passing matters: the tests wait for the
// events it causes, never against a clock. A deadline that passed too early
// (before the request was seen queued or generating: a slow or loaded
// machine) is retried twice as long, up to patience(). A fixed long one
// instead (20 s under the sanitizers) kept an endless generation burning
// both cores of CI for most of each test.
const milliseconds kFirstDeadline = seconds(3);

// Runs attempt(deadline), doubling the deadline while attempt returns false
// ("it passed before the state it must pass in was reached"). True once an
// attempt returns true or the test has failed; false if even a deadline as
// long as patience() passed too early.
bool with_growing_deadline(const std::function<bool(milliseconds)>& attempt) {
  for (milliseconds d = kFirstDeadline; d <= patience(); d *= 2) {
    if (attempt(d) || ::testing::Test::HasFailure()) return true;
    std::cout << "[scheduling] the " << d.count() << " ms deadline passed too early; doubling it"
              << std::endl;
  }
  return false;
}

v1::GenerateRequest endless(const std::string& prompt) {
  v1::GenerateRequest r = make_request(kModel, prompt, kEndlessTokens);
  r.set_ignore_eos(true);
  return r;
}

v1::GenerateRequest finite(const std::string& prompt) {
  v1::GenerateRequest r = make_request(kModel, prompt, kFiniteTokens);
  r.set_ignore_eos(true);
  return r;
}

bool is_idle(const v1::ModelInfo& m) { return m.instances_busy() == 0 && m.queue_depth() == 0; }

class ServerSchedulingTest : public ::testing::Test {
 protected:
  void start(const std::vector<std::string>& extra) {
    const std::string path = slow_model();
    ASSERT_FALSE(path.empty());
    std::vector<std::string> args = {"--model", std::string(kModel) + "=" + path};
    args.insert(args.end(), extra.begin(), extra.end());
    HEARTH_START_SERVER(server_, server_args(args));
    channel_ = plain_channel(server_.grpc_address());
    stub_ = make_stub(channel_);
  }
  // Polls GetModel until `pred` holds; fails the test with the last state if it never does.
  ::testing::AssertionResult wait_until(const std::function<bool(const v1::ModelInfo&)>& pred,
                                        milliseconds timeout, const char* what) {
    v1::ModelInfo last;
    if (wait_for_model(*stub_, kModel, pred, timeout, &last)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "not " << what << " within " << timeout.count()
                                         << " ms; last GetModel: " << describe_model(last);
  }

  ServerProcess server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

TEST_F(ServerSchedulingTest, TwoInstancesRunTwoRequestsAndQueueTwo) {
  start({"--instances", "2", "--queue", "8"});
  v1::ModelInfo info;
  ASSERT_TRUE(get_model(*stub_, kModel, &info).ok());
  EXPECT_EQ(info.instances(), 2u);
  EXPECT_EQ(info.queue_capacity(), 8u);
  ASSERT_TRUE(is_idle(info)) << describe_model(info);

  OpenStream a(*stub_, finite("first request")), b(*stub_, finite("second request"));
  ASSERT_TRUE(a.wait_first_piece()) << status_text(a.finish());
  ASSERT_TRUE(b.wait_first_piece()) << status_text(b.finish());
  // Both generate at once: two instances busy, nothing waiting.
  ASSERT_TRUE(wait_until([](const auto& m) { return m.instances_busy() == 2; }, patience(),
                         "two instances busy"));
  OpenStream c(*stub_, finite("third request")), d(*stub_, finite("fourth request"));
  ASSERT_TRUE(
      wait_until([](const auto& m) { return m.instances_busy() == 2 && m.queue_depth() == 2; },
                 patience(), "two running and two queued"));

  OpenStream* streams[] = {&a, &b, &c, &d};
  for (OpenStream* s : streams) {
    ASSERT_TRUE(s->finish().ok()) << status_text(s->finish());
    ASSERT_EQ(s->result().dones.size(), 1u);
    const v1::Done& done = s->result().dones.front();
    EXPECT_EQ(done.finish_reason(), v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(done.usage().generated_tokens(), kFiniteTokens);
    EXPECT_EQ(s->result().ids().size(), kFiniteTokens);
    EXPECT_LT(done.instance(), 2u);
  }
  const auto& da = a.result().dones.front();
  const auto& db = b.result().dones.front();
  const auto& dc = c.result().dones.front();
  const auto& dd = d.result().dones.front();
  EXPECT_NE(da.instance(), db.instance()) << "the first two ran side by side";
  // The last two waited for an instance; the first two did not.
  const double first_wait = std::max(da.timings().queue_s(), db.timings().queue_s());
  EXPECT_GT(dc.timings().queue_s(), first_wait);
  EXPECT_GT(dd.timings().queue_s(), first_wait);
  EXPECT_TRUE(wait_until(is_idle, patience(), "idle"));
}

class ServerSingleInstanceTest : public ServerSchedulingTest {
 protected:
  void SetUp() override {
    start({"--instances", "1", "--queue", "1"});
    if (HasFatalFailure()) return;
    ASSERT_TRUE(wait_until(is_idle, patience(), "idle at the start"));
  }

  // After a request was abandoned (cancelled, past its deadline): its
  // instance is freed because its generation stopped, not because it ran to
  // its end. Checked by events, not by a clock: the model becomes idle, a
  // short request then runs on the free instance, and the server's
  // generated-token count since the previous check (recorded as each
  // request ends, the abandoned one well before the short one) stays below
  // what the abandoned request asked for.
  void expect_abandoned_request_stopped_and_next_runs() {
    ASSERT_TRUE(wait_until(is_idle, patience(), "idle after the abandoned request"));
    v1::GenerateRequest req = make_request(kModel, "next", 4);
    req.set_ignore_eos(true);
    v1::CompleteResponse resp;
    const grpc::Status st = complete(*stub_, req, &resp);
    ASSERT_TRUE(st.ok()) << status_text(st);
    EXPECT_EQ(resp.token_ids_size(), 4);
    EXPECT_TRUE(wait_until(is_idle, patience(), "idle after the next request"));
    const std::optional<double> generated = metric(
        scrape(server_), "hearth_generated_tokens_total{model=\"" + std::string(kModel) + "\"}");
    ASSERT_TRUE(generated.has_value()) << "no generated-tokens counter in /metrics";
    EXPECT_LT(*generated - generated_before_, kEndlessTokens)
        << "the abandoned request ran on after it was abandoned";
    generated_before_ = *generated;
  }

  double generated_before_ = 0;  // the counter at the previous check
};

TEST_F(ServerSingleInstanceTest, FullQueueRefusesWithAtCapacity) {
  OpenStream running(*stub_, endless("runs"));
  ASSERT_TRUE(running.wait_first_piece()) << status_text(running.finish());
  OpenStream queued(*stub_, endless("waits"));
  ASSERT_TRUE(
      wait_until([](const auto& m) { return m.instances_busy() == 1 && m.queue_depth() == 1; },
                 patience(), "one running and one queued"));
  // The third: no room. Refused at once, streaming or not.
  const StreamResult refused = generate(*stub_, endless("refused"));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status_text(refused.status);
  EXPECT_NE(refused.status.error_message().find("at capacity"), std::string::npos)
      << status_text(refused.status);
  EXPECT_TRUE(refused.pieces.empty());
  v1::CompleteResponse resp;
  const grpc::Status st = complete(*stub_, endless("refused too"), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << status_text(st);
  EXPECT_NE(st.error_message().find("at capacity"), std::string::npos) << status_text(st);
  // The refusals are counted under their code, with no queue wait and no
  // prompt tokens (the running and queued requests are counted when they end).
  bool counted = false;
  const auto m = scrape_until(
      server_,
      [](const auto& m) { return sum_series(m, "hearth_requests_total", {"UNAVAILABLE"}) >= 2; },
      patience(), &counted);
  EXPECT_TRUE(counted) << "the two refusals were not counted as UNAVAILABLE";
  EXPECT_EQ(sum_series(m, "hearth_queue_wait_seconds_count"), 0);
  EXPECT_EQ(sum_series(m, "hearth_prompt_tokens_total"), 0);
  // The refusals changed nothing.
  v1::ModelInfo info;
  ASSERT_TRUE(get_model(*stub_, kModel, &info).ok());
  EXPECT_EQ(info.instances_busy(), 1u) << describe_model(info);
  EXPECT_EQ(info.queue_depth(), 1u) << describe_model(info);
  // Cancelling the queued one frees its place; cancelling the running one, the instance.
  queued.cancel();
  EXPECT_EQ(queued.finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(queued.result().pieces.empty()) << "the queued request never ran";
  EXPECT_TRUE(wait_until([](const auto& m) { return m.queue_depth() == 0; }, patience(),
                         "queue empty after the queued request was cancelled"));
  running.cancel();
  EXPECT_EQ(running.finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(wait_until(is_idle, patience(), "idle after cancelling"));
  expect_abandoned_request_stopped_and_next_runs();
}

TEST_F(ServerSingleInstanceTest, DeadlineWhileQueued) {
  OpenStream running(*stub_, endless("runs"));
  ASSERT_TRUE(running.wait_first_piece()) << status_text(running.finish());
  const bool tested = with_growing_deadline([&](milliseconds deadline) {
    OpenStream queued(*stub_, endless("waits"), deadline);
    const bool seen_queued =
        wait_until([](const auto& m) { return m.queue_depth() == 1; }, deadline, "queued");
    EXPECT_EQ(queued.finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << status_text(queued.finish());
    EXPECT_TRUE(queued.result().pieces.empty());
    EXPECT_TRUE(queued.result().dones.empty());
    // The expired request leaves the queue; it never takes the instance.
    EXPECT_TRUE(wait_until([](const auto& m) { return m.queue_depth() == 0; }, patience(),
                           "queue empty after the deadline"));
    return seen_queued;
  });
  EXPECT_TRUE(tested) << "the request was never seen queued before its deadline";
  // Its wait is in the queue-wait histogram (the longest waits show an
  // overload), though it never ran; the running request is counted later.
  // (The server may see the passed deadline as the call's cancellation.)
  auto given_up = [](const std::map<std::string, double>& m) {
    return sum_series(m, "hearth_requests_total", {"DEADLINE_EXCEEDED"}) +
           sum_series(m, "hearth_requests_total", {"CANCELLED"});
  };
  bool counted = false;
  const auto m = scrape_until(
      server_, [&](const auto& m) { return given_up(m) >= 1; }, patience(), &counted);
  EXPECT_TRUE(counted);
  EXPECT_EQ(sum_series(m, "hearth_queue_wait_seconds_count"), given_up(m));
  EXPECT_GT(sum_series(m, "hearth_queue_wait_seconds_sum"), 0);
  running.cancel();
  EXPECT_EQ(running.finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(wait_until(is_idle, patience(), "idle"));
  expect_abandoned_request_stopped_and_next_runs();
}

TEST_F(ServerSingleInstanceTest, DeadlineWhileGenerating) {
  const bool tested = with_growing_deadline([&](milliseconds deadline) {
    OpenStream s(*stub_, endless("runs out of time"), deadline);
    const bool generating = s.wait_first_piece();
    EXPECT_EQ(s.finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << status_text(s.finish());
    EXPECT_TRUE(s.result().dones.empty()) << "no Done on a failed stream";
    EXPECT_LT(s.result().ids().size(), kEndlessTokens);
    EXPECT_TRUE(wait_until(is_idle, patience(), "idle after the deadline"));
    return generating;
  });
  EXPECT_TRUE(tested) << "no piece came before any deadline";
  expect_abandoned_request_stopped_and_next_runs();
}

TEST_F(ServerSingleInstanceTest, CancellationFreesTheInstance) {
  OpenStream s(*stub_, endless("cancelled soon"));
  ASSERT_TRUE(s.wait_first_piece()) << status_text(s.finish());
  s.cancel();
  EXPECT_EQ(s.finish().error_code(), grpc::StatusCode::CANCELLED) << status_text(s.finish());
  EXPECT_TRUE(s.result().dones.empty());
  expect_abandoned_request_stopped_and_next_runs();
  // A cancelled Complete (unary) frees it too.
  {
    grpc::ClientContext ctx;
    set_deadline(ctx, kFirstDeadline);  // passing queued, prefilling or generating, it frees it
    v1::CompleteResponse resp;
    const grpc::Status st = stub_->Complete(&ctx, endless("complete runs out of time"), &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status_text(st);
  }
  EXPECT_TRUE(wait_until(is_idle, patience(), "idle after the Complete deadline"));
  expect_abandoned_request_stopped_and_next_runs();
}

}  // namespace
}  // namespace hearth::testing
