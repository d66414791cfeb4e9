// Continuous batching, end to end: a real hearth-server serving the trained
// stories260K model (../shared) with 8 instances, whose one step loop runs
// every running sequence in one batched forward step. A request batched with
// others gets exactly the tokens it gets alone (run one at a time against the
// same server, before): no KV cache or scratch cross-talk, whatever joins or
// leaves the batch (other streams finishing at other steps, a long prompt
// admitted in chunks, a cancellation, a deadline, a client that stops
// reading, a drain).
//
// Determinism. Nothing sleeps and nothing is timed. A stream that must still
// be running while the test does something is a long one (kLongTokens) on a
// channel with a small HTTP/2 window that the test does not read: its pieces
// fill the window and its PieceWriter's ring (about 130 pieces here), so the
// step loop holds it, unfinished, until the test reads; "mid-generation" is
// then a fact, not a race. Waiting is on stream events, GetModel's
// instances_busy, /metrics or the server's stderr (bounded polling of real
// state). That the requests of a round really shared steps is checked on the
// server's hearth_step_sequences histogram and on Done.instance.
//
// Tolerance: none. Every kernel on this path is row-independent (norms,
// projections, SwiGLU per row; RoPE, KV append and attention per sequence
// against its own cache, the attention plan fixed by the chunk's shape), so
// batched tokens equal alone tokens exactly, with the float and with the int8
// KV cache (int8 K/V are quantized per token and head when appended, and a
// chunk attends to the quantized cache, so neither batching nor the prompt's
// chunking changes what attention reads). Measured: equal on every run.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/stories_model.h"

namespace hearth::testing {
namespace {

constexpr char kModel[] = "stories";
constexpr std::size_t kInstances = 8;
// A stream that cannot end before the test reads it: far more pieces than a
// stream on stalling_channel() buffers before its reader must read (~130),
// and, with its prompt, well inside stories260K's 2048 positions.
constexpr std::uint32_t kLongTokens = 600;
// A deadline that passes while its (unread, long) stream generates: long
// enough for the stream to get an instance and its first piece first.
const milliseconds kShortDeadline = kUnderSanitizer ? seconds(20) : seconds(2);

v1::GenerateRequest greedy(const std::string& prompt, std::uint32_t max_tokens,
                           bool ignore_eos = false) {
  v1::GenerateRequest r = make_request(kModel, prompt, max_tokens);
  r.set_ignore_eos(ignore_eos);
  r.set_echo_prompt_ids(true);
  return r;
}

// A request that runs until the test reads it (see kLongTokens).
v1::GenerateRequest long_request(const std::string& prompt) {
  return greedy(prompt, kLongTokens, /*ignore_eos=*/true);
}

// Distinct story openings (stories260K continues each for a while).
const std::vector<std::string>& prompts() {
  static const std::vector<std::string> p = {
      "Once upon a time",       "Lily and Tom went to the park",
      "The little dog",         "One day, a girl named Sue",
      "Tom had a big red ball", "The sun was hot and",
      "A cat sat on the mat",   "Mom said to Ben"};
  return p;
}

bool is_idle(const v1::ModelInfo& m) { return m.instances_busy() == 0 && m.queue_depth() == 0; }

// Where two token lists first differ, for failure messages.
std::string first_difference(const std::vector<std::int32_t>& a,
                             const std::vector<std::int32_t>& b) {
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  if (i == a.size() && i == b.size()) return "equal";
  return "first difference at token " + std::to_string(i) + " of " + std::to_string(a.size()) +
         " batched / " + std::to_string(b.size()) + " alone";
}

// `got` (the request run among others) is exactly `alone` (the same request
// run by itself): tokens, text, finish reason, usage.
void expect_same_as_alone(const StreamResult& got, const StreamResult& alone,
                          const std::string& what) {
  ASSERT_TRUE(got.status.ok()) << what << ": " << status_text(got.status);
  ASSERT_EQ(got.dones.size(), 1u) << what;
  ASSERT_EQ(alone.dones.size(), 1u) << what;
  EXPECT_FALSE(got.piece_after_done) << what;
  EXPECT_EQ(got.ids(), alone.ids()) << what << ": batched tokens differ from the same request "
                                    << "alone; " << first_difference(got.ids(), alone.ids());
  EXPECT_EQ(got.text(), alone.text()) << what;
  const v1::Done& g = got.dones.front();
  const v1::Done& a = alone.dones.front();
  EXPECT_EQ(g.finish_reason(), a.finish_reason()) << what;
  EXPECT_EQ(g.usage().prompt_tokens(), a.usage().prompt_tokens()) << what;
  EXPECT_EQ(g.usage().generated_tokens(), a.usage().generated_tokens()) << what;
}

// Reads every stream to its end, each on its own thread (the way independent
// clients read), and returns when all have ended.
void finish_all(const std::vector<OpenStream*>& streams) {
  std::vector<std::thread> readers;
  readers.reserve(streams.size());
  for (OpenStream* s : streams) readers.emplace_back([s] { s->finish(); });
  for (std::thread& t : readers) t.join();
}

using Metrics = std::map<std::string, double>;

// Steps of the model between two scrapes that ran more than `bound` sequences
// (`bound`: a bucket bound of hearth_step_sequences, see server/metrics.cc).
double steps_with_more_sequences_than(const Metrics& before, const Metrics& after, int bound) {
  const std::string count = "hearth_step_sequences_count{model=\"" + std::string(kModel) + "\"}";
  const std::string bucket = "hearth_step_sequences_bucket{model=\"" + std::string(kModel) +
                             "\",le=\"" + std::to_string(bound) + "\"}";
  const double steps = metric(after, count).value_or(0) - metric(before, count).value_or(0);
  const double at_most = metric(after, bucket).value_or(0) - metric(before, bucket).value_or(0);
  return steps - at_most;
}

// The hearth_step_sequences histogram between two scrapes, for messages:
// how many steps ran 1, 2, 3, 4, 5-6 and 7-8 sequences.
std::string describe_steps(const Metrics& before, const Metrics& after) {
  std::string out = "steps of 1, 2, 3, 4, 5-6, 7-8 sequences:";
  double below = 0;
  for (int le : {1, 2, 3, 4, 6, 8}) {
    const std::string bucket = "hearth_step_sequences_bucket{model=\"" + std::string(kModel) +
                               "\",le=\"" + std::to_string(le) + "\"}";
    const double n = metric(after, bucket).value_or(0) - metric(before, bucket).value_or(0);
    out += " " + std::to_string(static_cast<long>(n - below));
    below = n;
  }
  return out;
}

class ServerBatchingTest : public ::testing::Test {
 protected:
  // Starts hearth-server on stories260K: 8 instances, the KV cache `kv`, `extra` flags.
  void start(const std::string& kv, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {
        "--model",     std::string(kModel) + "=" + stories_path().string(),
        "--instances", std::to_string(kInstances),
        "--queue",     "8",
        "--kv-cache",  kv};
    args.insert(args.end(), extra.begin(), extra.end());
    HEARTH_START_SERVER(server_, server_args(args));
    channel_ = plain_channel(server_.grpc_address());
    stub_ = make_stub(channel_);
  }

  // Polls GetModel until `pred` holds; fails with the last state if it never does.
  ::testing::AssertionResult wait_until(const std::function<bool(const v1::ModelInfo&)>& pred,
                                        const char* what) {
    v1::ModelInfo last;
    if (wait_for_model(*stub_, kModel, pred, patience(), &last))
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "not " << what << "; last GetModel: " << describe_model(last);
  }
  ::testing::AssertionResult wait_busy(std::uint32_t n) {
    const std::string what = std::to_string(n) + " instances busy";
    return wait_until([n](const v1::ModelInfo& m) { return m.instances_busy() == n; },
                      what.c_str());
  }

  // The request run by itself (nothing else is running): the reference.
  StreamResult alone(const v1::GenerateRequest& req) {
    const StreamResult r = generate(*stub_, req);
    EXPECT_TRUE(r.status.ok()) << "alone: " << status_text(r.status);
    EXPECT_EQ(r.dones.size(), 1u) << "alone";
    EXPECT_FALSE(r.ids().empty()) << "alone: '" << req.prompt() << "' generated nothing";
    return r;
  }

  // Opens `req` on its own stalling channel; the test reads it when it wants.
  std::unique_ptr<OpenStream> open_unread(const v1::GenerateRequest& req,
                                          milliseconds timeout = patience()) {
    stalling_.push_back(make_stub(stalling_channel(server_.grpc_address())));
    return std::make_unique<OpenStream>(*stalling_.back(), req, timeout);
  }

  // ListModels agrees with GetModel about `stories`: idle.
  void expect_list_models_idle() {
    grpc::ClientContext ctx;
    set_deadline(ctx, seconds(kUnderSanitizer ? 60 : 10));
    v1::ListModelsResponse resp;
    const grpc::Status s = stub_->ListModels(&ctx, v1::ListModelsRequest(), &resp);
    ASSERT_TRUE(s.ok()) << status_text(s);
    ASSERT_EQ(resp.models_size(), 1);
    EXPECT_TRUE(is_idle(resp.models(0))) << describe_model(resp.models(0));
  }

  // Waits for the server to have counted `total` finished Generate calls (a
  // call is counted after its last write, a moment after its instance is
  // free), and returns that scrape.
  Metrics wait_generate_calls(double total) {
    const std::vector<std::string> generate = {"method=\"Generate\""};
    bool held = false;
    const Metrics m = scrape_until(
        server_,
        [&](const Metrics& x) { return sum_series(x, "hearth_requests_total", generate) >= total; },
        patience(), &held);
    EXPECT_TRUE(held) << "the server never counted " << total << " Generate calls";
    EXPECT_EQ(sum_series(m, "hearth_requests_total", generate), total);
    return m;
  }
  static double generate_calls(const Metrics& m, const char* code) {
    return sum_series(m, "hearth_requests_total",
                      {"method=\"Generate\"", std::string("code=\"") + code + "\""});
  }

  void SetUp() override { HEARTH_REQUIRE_SHARED(); }

  ServerProcess server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Inference::Stub> stub_;
  std::vector<std::unique_ptr<v1::Inference::Stub>> stalling_;
};

// --- a/b: 8 concurrent streams, float and int8 KV ----------------------------

class ServerBatchingKvTest : public ServerBatchingTest,
                             public ::testing::WithParamInterface<const char*> {};

// Eight streams with eight prompts and different max_tokens (so they leave
// the batch at different steps; some may end at EOS) each get exactly their
// alone tokens. A round counts as batched when the server ran a step with
// more than 6 of its sequences and the 8 streams had 8 distinct instances
// (the free list is a stack: a request gets a just-freed instance, so 8
// distinct ones mean each was taken while the others were held); rounds are
// repeated, each checked, until one is (almost always the first: 40 tokens
// take about 40 steps, and the 8 requests arrive within a few).
TEST_P(ServerBatchingKvTest, EightConcurrentStreamsEachGetTheirAloneTokens) {
  start(GetParam());
  const std::uint32_t max_tokens[kInstances] = {40, 40, 33, 40, 27, 40, 19, 36};
  std::vector<v1::GenerateRequest> reqs;
  std::vector<StreamResult> alone_results;
  for (std::size_t i = 0; i < kInstances; ++i) {
    reqs.push_back(greedy(prompts()[i], max_tokens[i]));
    alone_results.push_back(alone(reqs.back()));
  }
  if (HasFailure()) return;
  std::set<std::size_t> lengths;
  for (const StreamResult& r : alone_results) lengths.insert(r.ids().size());
  EXPECT_GE(lengths.size(), 4u) << "the streams should leave the batch at different steps";

  constexpr int kMaxRounds = 20;
  int round = 0;
  bool batched = false;
  for (; round < kMaxRounds && !batched && !HasFailure(); ++round) {
    const Metrics before = scrape(server_);
    std::vector<std::unique_ptr<OpenStream>> streams;
    std::vector<OpenStream*> all;
    for (const v1::GenerateRequest& r : reqs) {
      streams.push_back(std::make_unique<OpenStream>(*stub_, r));
      all.push_back(streams.back().get());
    }
    finish_all(all);
    std::set<std::uint32_t> instances;
    for (std::size_t i = 0; i < kInstances; ++i) {
      expect_same_as_alone(streams[i]->result(), alone_results[i],
                           std::string(GetParam()) + " KV, round " + std::to_string(round) + ", '" +
                               prompts()[i] + "'");
      if (!streams[i]->result().dones.empty())
        instances.insert(streams[i]->result().dones.front().instance());
    }
    ASSERT_TRUE(wait_until(is_idle, "idle after the round"));
    const Metrics after = scrape(server_);
    const double wide = steps_with_more_sequences_than(before, after, 6);
    batched = wide > 0 && instances.size() == kInstances;
    std::cout << "[batching] " << GetParam() << " KV round " << round << ": " << instances.size()
              << " distinct instances, " << describe_steps(before, after) << std::endl;
  }
  EXPECT_TRUE(batched) << "in " << round << " rounds of 8 concurrent streams, no step ran more "
                       << "than 6 sequences with all 8 on distinct instances";
  expect_list_models_idle();
}

INSTANTIATE_TEST_SUITE_P(ServerKvCache, ServerBatchingKvTest, ::testing::Values("float", "int8"),
                         [](const auto& info) { return std::string(info.param); });

// --- d: a long prompt admitted while others decode ---------------------------

struct LongPromptCase {
  const char* kv;
  const char* step_tokens;  // --step-tokens
};
void PrintTo(const LongPromptCase& c, std::ostream* os) {
  *os << c.kv << " KV, --step-tokens " << c.step_tokens;
}

class ServerBatchingLongPromptTest : public ServerBatchingTest,
                                     public ::testing::WithParamInterface<LongPromptCase> {};

// Three long streams are mid-generation (held unread) when they are released
// and a prompt of about 300 tokens arrives. Its prefill runs in chunks of what
// the three decode rows leave of each step's budget, at least half of it
// (chunks of 29 with --step-tokens 32; of 2 with --step-tokens 4, about 150
// steps shared with the decoders), not the chunks it gets alone (32, or 4):
// neither the decoders' tokens nor its own change.
TEST_P(ServerBatchingLongPromptTest, LongPromptAdmittedMidBatchChangesNoResult) {
  start(GetParam().kv, {"--step-tokens", GetParam().step_tokens});
  // About 300 tokens of story text (repeated sentences; Tokenize counts them).
  const char* sentences[] = {"Lily went to the park with her mom and saw a big tree. ",
                             "Tom had a red ball and he liked to play with it every day. ",
                             "The sun was warm, the birds sang, and the little dog ran fast. "};
  std::string prompt;
  int prompt_tokens = 0;
  for (int i = 0; prompt_tokens < 300; ++i) {
    prompt += sentences[i % 3];
    grpc::ClientContext ctx;
    set_deadline(ctx, seconds(kUnderSanitizer ? 60 : 10));
    v1::TokenizeRequest treq;
    treq.set_model(kModel);
    treq.set_text(prompt);
    v1::TokenizeResponse tresp;
    ASSERT_TRUE(stub_->Tokenize(&ctx, treq, &tresp).ok());
    prompt_tokens = tresp.token_ids_size();
  }
  ASSERT_LT(prompt_tokens, 340);

  const std::vector<v1::GenerateRequest> decoders = {
      long_request(prompts()[0]), long_request(prompts()[1]), long_request(prompts()[2])};
  const v1::GenerateRequest long_prompt = greedy(prompt, 40);
  std::vector<StreamResult> alone_decoders;
  for (const auto& r : decoders) alone_decoders.push_back(alone(r));
  const StreamResult alone_long = alone(long_prompt);
  if (HasFailure()) return;
  ASSERT_EQ(alone_long.dones.front().usage().prompt_tokens(),
            static_cast<std::uint32_t>(prompt_tokens));

  const Metrics before = scrape(server_);
  std::vector<std::unique_ptr<OpenStream>> held;
  for (const auto& r : decoders) held.push_back(open_unread(r));
  ASSERT_TRUE(wait_busy(3));  // all three admitted; none can end unread
  // Release the three, and at once send the long prompt.
  std::vector<OpenStream*> three = {held[0].get(), held[1].get(), held[2].get()};
  std::thread readers([&] { finish_all(three); });
  OpenStream late(*stub_, long_prompt);
  late.finish();
  readers.join();
  for (std::size_t i = 0; i < 3; ++i)
    expect_same_as_alone(held[i]->result(), alone_decoders[i], "decoder '" + prompts()[i] + "'");
  expect_same_as_alone(late.result(), alone_long, "the long prompt");
  ASSERT_TRUE(wait_until(is_idle, "idle at the end"));
  const Metrics after = scrape(server_);
  std::cout << "[batching] long prompt (" << prompt_tokens << " tokens), " << GetParam().kv
            << " KV, --step-tokens " << GetParam().step_tokens << ": "
            << describe_steps(before, after) << std::endl;
  // The four shared steps: the long prompt's request ran beside all three.
  EXPECT_GT(steps_with_more_sequences_than(before, after, 3), 0) << describe_steps(before, after);
}

INSTANTIATE_TEST_SUITE_P(
    ServerPromptChunks, ServerBatchingLongPromptTest,
    ::testing::Values(LongPromptCase{"float", "32"}, LongPromptCase{"int8", "32"},
                      LongPromptCase{"float", "4"}, LongPromptCase{"int8", "4"}),
    [](const auto& info) {
      return std::string(info.param.kv) + "_step_tokens_" + info.param.step_tokens;
    });

// --- c: cancellation and deadlines inside a batch ----------------------------

// Four streams mid-generation; one is cancelled by its client after its first
// piece: it ends CANCELLED and frees its own instance only (the other three
// still hold theirs), and the three then finish with their alone tokens.
TEST_F(ServerBatchingTest, CancelOneOfFourFreesOnlyItsInstance) {
  start("float");
  const std::vector<v1::GenerateRequest> reqs = {
      long_request(prompts()[3]), long_request(prompts()[4]), long_request(prompts()[5])};
  std::vector<StreamResult> alone_results;
  for (const auto& r : reqs) alone_results.push_back(alone(r));
  if (HasFailure()) return;

  std::vector<std::unique_ptr<OpenStream>> others;
  for (const auto& r : reqs) others.push_back(open_unread(r));
  std::unique_ptr<OpenStream> victim = open_unread(long_request(prompts()[6]));
  ASSERT_TRUE(victim->wait_first_piece()) << status_text(victim->finish());
  ASSERT_TRUE(wait_busy(4));
  victim->cancel();
  EXPECT_EQ(victim->finish().error_code(), grpc::StatusCode::CANCELLED)
      << status_text(victim->finish());
  EXPECT_TRUE(victim->result().dones.empty());
  EXPECT_LT(victim->result().ids().size(), kLongTokens);
  // Its instance only: the other three cannot have ended (nobody read them).
  ASSERT_TRUE(wait_busy(3));
  finish_all({others[0].get(), others[1].get(), others[2].get()});
  for (std::size_t i = 0; i < 3; ++i)
    expect_same_as_alone(others[i]->result(), alone_results[i], "'" + prompts()[3 + i] + "'");
  EXPECT_TRUE(wait_until(is_idle, "idle after the three finished"));
  expect_list_models_idle();
  const Metrics m = wait_generate_calls(7);
  EXPECT_EQ(generate_calls(m, "CANCELLED"), 1);
  EXPECT_EQ(generate_calls(m, "OK"), 6);  // three alone, three batched
}

// Four streams mid-generation; one has a short deadline: it ends
// DEADLINE_EXCEEDED and frees its own instance only; the other three then
// finish with their alone tokens.
TEST_F(ServerBatchingTest, DeadlineOnOneOfFourFreesOnlyItsInstance) {
  start("float");
  const std::vector<v1::GenerateRequest> reqs = {
      long_request(prompts()[0]), long_request(prompts()[5]), long_request(prompts()[7])};
  std::vector<StreamResult> alone_results;
  for (const auto& r : reqs) alone_results.push_back(alone(r));
  if (HasFailure()) return;

  std::vector<std::unique_ptr<OpenStream>> others;
  for (const auto& r : reqs) others.push_back(open_unread(r));
  std::unique_ptr<OpenStream> late = open_unread(long_request(prompts()[2]), kShortDeadline);
  ASSERT_TRUE(late->wait_first_piece())
      << "no piece before the deadline: " << status_text(late->finish());
  ASSERT_TRUE(wait_busy(4));
  // Unread (reading would let it run to its end), it cannot end before its
  // deadline; the server ends it then, and frees its instance only: the other
  // three, unread too, cannot have ended.
  ASSERT_TRUE(wait_busy(3));
  EXPECT_EQ(late->finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << status_text(late->finish());
  EXPECT_TRUE(late->result().dones.empty());
  EXPECT_LT(late->result().ids().size(), kLongTokens);
  finish_all({others[0].get(), others[1].get(), others[2].get()});
  const int idx[] = {0, 5, 7};
  for (std::size_t i = 0; i < 3; ++i)
    expect_same_as_alone(others[i]->result(), alone_results[i], "'" + prompts()[idx[i]] + "'");
  EXPECT_TRUE(wait_until(is_idle, "idle after the three finished"));
  expect_list_models_idle();
  const Metrics m = wait_generate_calls(7);
  EXPECT_EQ(generate_calls(m, "OK"), 6);
  // The server counts it DEADLINE_EXCEEDED, or CANCELLED when the client's
  // own cancellation at its deadline (RST_STREAM) reaches the server before
  // the server's copy of the deadline (from grpc-timeout, measured from
  // arrival: a little later) has passed. Both say "it did not finish".
  const double deadline = generate_calls(m, "DEADLINE_EXCEEDED");
  const double cancelled = generate_calls(m, "CANCELLED");
  EXPECT_EQ(deadline + cancelled, 1);
  std::cout << "[batching] the deadline request was counted "
            << (deadline == 1 ? "DEADLINE_EXCEEDED" : "CANCELLED") << std::endl;
}

// --- e: a client that stops reading -------------------------------------------

// One stream's client stops reading: it sits out the steps, holding only its
// own instance, while three other streams run together to their ends with
// their alone tokens. Read again, it resumes and gets its own alone tokens.
TEST_F(ServerBatchingTest, StalledReaderDoesNotStopTheOthers) {
  start("float");
  const v1::GenerateRequest stalled_req = long_request(prompts()[1]);
  const std::vector<v1::GenerateRequest> reqs = {
      long_request(prompts()[4]), greedy(prompts()[6], 40), long_request(prompts()[7])};
  const StreamResult alone_stalled = alone(stalled_req);
  std::vector<StreamResult> alone_results;
  for (const auto& r : reqs) alone_results.push_back(alone(r));
  if (HasFailure()) return;

  std::unique_ptr<OpenStream> stalled = open_unread(stalled_req);
  ASSERT_TRUE(stalled->wait_first_piece()) << status_text(stalled->finish());
  ASSERT_TRUE(wait_busy(1));
  std::vector<std::unique_ptr<OpenStream>> others;
  for (const auto& r : reqs) others.push_back(std::make_unique<OpenStream>(*stub_, r));
  finish_all({others[0].get(), others[1].get(), others[2].get()});
  for (std::size_t i = 0; i < 3; ++i)
    expect_same_as_alone(others[i]->result(), alone_results[i], "other " + std::to_string(i));
  // The three ended while the stalled one still holds its instance (it cannot
  // end unread), and only that one.
  ASSERT_TRUE(wait_busy(1));
  stalled->finish();
  expect_same_as_alone(stalled->result(), alone_stalled, "the stalled stream");
  EXPECT_TRUE(wait_until(is_idle, "idle at the end"));
}

// --- c: draining a batch --------------------------------------------------------

// SIGTERM while four streams are mid-generation, with a generous grace
// period: health goes NOT_SERVING, the four finish OK with their alone
// tokens, and the server exits 0 without cancelling anything.
TEST_F(ServerBatchingTest, SigtermLetsFourBatchedStreamsFinishExactly) {
  start("float", {"--grace-period-s", "300"});
  std::vector<v1::GenerateRequest> reqs;
  std::vector<StreamResult> alone_results;
  for (std::size_t i = 0; i < 4; ++i) {
    reqs.push_back(long_request(prompts()[i + 2]));
    alone_results.push_back(alone(reqs.back()));
  }
  if (HasFailure()) return;
  std::vector<std::unique_ptr<OpenStream>> streams;
  for (const auto& r : reqs) streams.push_back(open_unread(r));
  ASSERT_TRUE(wait_busy(4));
  ASSERT_TRUE(server_.signal(SIGTERM));
  int serving = -1;
  bool draining = false;
  for (const auto deadline = Clock::now() + patience(); !draining && Clock::now() < deadline;)
    draining = health_check(channel_, "", &serving).ok() && serving == kNotServing;
  ASSERT_TRUE(draining) << "health never went NOT_SERVING; last " << serving;
  EXPECT_TRUE(server_.running()) << "exited before its streams finished";
  finish_all({streams[0].get(), streams[1].get(), streams[2].get(), streams[3].get()});
  for (std::size_t i = 0; i < 4; ++i)
    expect_same_as_alone(streams[i]->result(), alone_results[i], "'" + prompts()[i + 2] + "'");
  EXPECT_EQ(server_.wait_exit(patience()), std::optional<int>(0)) << server_.describe();
  EXPECT_EQ(server_.stderr_text().find("some generations were cancelled"), std::string::npos)
      << server_.stderr_text();
}

// SIGTERM while four long streams are mid-generation, with a grace period
// they cannot finish in (nobody reads them until it is over): each ends
// UNAVAILABLE, without Done, and the server exits 0.
TEST_F(ServerBatchingTest, ShortGracePeriodEndsFourBatchedStreamsUnavailable) {
  start("float", {"--grace-period-s", "0.5"});
  std::vector<std::unique_ptr<OpenStream>> streams;
  for (std::size_t i = 0; i < 4; ++i) streams.push_back(open_unread(long_request(prompts()[i])));
  for (auto& s : streams) ASSERT_TRUE(s->wait_first_piece()) << status_text(s->finish());
  ASSERT_TRUE(wait_busy(4));
  ASSERT_TRUE(server_.signal(SIGTERM));
  // The server says when the grace period is over (and then cancels).
  const std::string over = "grace period over";
  bool said = false;
  for (const auto deadline = Clock::now() + patience(); !said && Clock::now() < deadline;)
    said = server_.stderr_text().find(over) != std::string::npos;
  ASSERT_TRUE(said) << "no '" << over << "' in the log:\n" << server_.describe();
  finish_all({streams[0].get(), streams[1].get(), streams[2].get(), streams[3].get()});
  for (std::size_t i = 0; i < 4; ++i) {
    const StreamResult& r = streams[i]->result();
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << "stream " << i << ": " << status_text(r.status);
    EXPECT_TRUE(r.dones.empty()) << "stream " << i;
    EXPECT_LT(r.ids().size(), kLongTokens) << "stream " << i;
  }
  EXPECT_EQ(server_.wait_exit(patience()), std::optional<int>(0)) << server_.describe();
  EXPECT_NE(server_.stderr_text().find("some generations were cancelled"), std::string::npos)
      << server_.stderr_text();
}

// --- the step budget ---------------------------------------------------------------

// StepLoop's contract (server/step_loop.h): a prefilling sequence gets at
// least one row of every step, "so a long prompt always progresses". With
// --step-tokens 2 and two streams decoding, their two decode rows fill the
// budget, and a new request must still be admitted a row per step, not wait
// until the decoders end (the first prompt chunk always gets a row).
TEST_F(ServerBatchingTest, PromptProgressesWhenDecodeRowsFillTheStepBudget) {
  start("float", {"--step-tokens", "2"});
  const v1::GenerateRequest newcomer = greedy(prompts()[2], 5);
  const StreamResult alone_newcomer = alone(newcomer);
  if (HasFailure()) return;
  // Two decoders with 1,500 tokens to go; on a default channel their whole
  // streams fit the HTTP/2 window, so they never stall on the reader.
  OpenStream a(*stub_, greedy(prompts()[0], 1500, true));
  OpenStream b(*stub_, greedy(prompts()[1], 1500, true));
  ASSERT_TRUE(a.wait_first_piece()) << status_text(a.finish());
  ASSERT_TRUE(b.wait_first_piece()) << status_text(b.finish());
  OpenStream c(*stub_, newcomer);
  c.finish();
  expect_same_as_alone(c.result(), alone_newcomer, "the newcomer");
  // A few steps for the newcomer; the decoders still have well over a
  // thousand each.
  v1::ModelInfo info;
  ASSERT_TRUE(get_model(*stub_, kModel, &info).ok());
  EXPECT_TRUE(a.finish().ok()) << status_text(a.finish());
  EXPECT_TRUE(b.finish().ok()) << status_text(b.finish());
  const double ttft =
      c.result().dones.empty() ? -1 : c.result().dones.front().timings().time_to_first_token_s();
  const double decoder =
      a.result().dones.empty() ? -1 : a.result().dones.front().timings().total_s();
  EXPECT_EQ(info.instances_busy(), 2u)
      << "the newcomer was not admitted until the decoders ended; " << describe_model(info)
      << " after its end; its time to first token " << ttft << " s, a decoder's whole run "
      << decoder << " s";
}

}  // namespace
}  // namespace hearth::testing
