// The server's life: command-line refusals and startup failures (exit codes
// 2 and 1, naming the flag / file / port), health and reflection once ready,
// and the SIGTERM/SIGINT drain (health NOT_SERVING, new requests UNAVAILABLE,
// open streams finish within the grace period or are cancelled after it, exit 0;
// in process, that it waits for a handler that has not returned).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/thread_pool.h"
#include "server/server.h"
#include "tests/server/test_util.h"

namespace hearth::testing {
namespace {

constexpr char kSlow[] = "slow";

TEST(ServerLifecycleTest, BadFlagsExitWithStatus2NamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--frobnicate"}, "--frobnicate"},
      {{"--instances", "abc"}, "--instances"},
      {{"--instances", "0"}, "--instances"},
      {{"--queue", "-1"}, "--queue"},
      {{"--kv-cache", "fp8"}, "--kv-cache"},
      {{"--max-tokens-limit", "0"}, "--max-tokens-limit"},
      {{"--model", "no-equals-sign"}, "--model"},
  };
  for (const Case& c : cases) {
    std::string err;
    const int code = expect_startup_failure(server_args(c.args), &err);
    EXPECT_EQ(code, 2) << c.expected << "\n" << err;
    EXPECT_NE(err.find(c.expected), std::string::npos)
        << "stderr should name " << c.expected << ":\n"
        << err;
  }
}

// Every flag --help documents is one the parser accepts ("--name VALUE" with
// a value, "--name" alone without): parsing comes before --help is acted on,
// so an undocumented or misspelt flag would exit 2 here. (The deploy checks
// read the flags from the same usage text.)
TEST(ServerLifecycleTest, EveryFlagInHelpIsAccepted) {
  const ProcessResult help = run_process(HEARTH_SERVER_BIN, {"--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  std::size_t checked = 0;
  for (std::size_t at = help.out.find("--"); at != std::string::npos;
       at = help.out.find("--", at + 2)) {
    std::size_t end = at + 2;
    while (end < help.out.size() &&
           (std::isalnum(static_cast<unsigned char>(help.out[end])) || help.out[end] == '-'))
      ++end;
    const std::string flag = help.out.substr(at, end - at);
    const bool takes_value = end + 1 < help.out.size() && help.out[end] == ' ' &&
                             help.out[end + 1] != ' ' && help.out[end + 1] != '\n';
    std::vector<std::string> args = {"--help", flag};
    if (takes_value) args.push_back("1");
    const ProcessResult r = run_process(HEARTH_SERVER_BIN, args);
    EXPECT_EQ(r.exit_code, 0) << flag << (takes_value ? " 1" : "") << ": " << r.err;
    ++checked;
  }
  EXPECT_GE(checked, 20u) << help.out;
}

TEST(ServerLifecycleTest, StartupFailuresExitWithStatus1NamingTheFileOrPort) {
  const std::string missing = (scratch_dir() / "missing.gguf").string();
  std::string err;
  EXPECT_EQ(expect_startup_failure(server_args({"--model", "m=" + missing}), &err), 1) << err;
  EXPECT_NE(err.find(missing), std::string::npos) << err;

  const std::string not_gguf = (scratch_dir() / "notes.txt").string();
  {
    std::ofstream out(not_gguf);
    out << "this is not a model\n";
  }
  EXPECT_EQ(expect_startup_failure(server_args({"--model", "m=" + not_gguf}), &err), 1) << err;
  EXPECT_NE(err.find(not_gguf), std::string::npos) << err;

  // A port another server holds.
  ServerProcess first;
  HEARTH_START_SERVER(first, server_args());
  const std::string taken = first.grpc_address();
  EXPECT_EQ(expect_startup_failure({"--listen", taken, "--metrics-listen", "off"}, &err), 1) << err;
  EXPECT_NE(err.find(std::to_string(first.grpc_port())), std::string::npos) << err;
}

// Ports, certificates and files that cannot serve are refused naming their
// flag: never a server that listens somewhere else, shares a port with
// another, or blames a different flag.
TEST(ServerLifecycleTest, BadPortsCertificatesAndFilesAreRefusedNamingTheirFlag) {
  constexpr auto npos = std::string::npos;
  std::string err;
  // gRPC itself would listen on 34463.
  EXPECT_EQ(expect_startup_failure(server_args({"--listen", "127.0.0.1:99999"}), &err), 1) << err;
  EXPECT_NE(err.find("--listen: '127.0.0.1:99999': port 99999 is out of range"), npos) << err;

  // httplib's default SO_REUSEPORT let a second server bind a live HTTP port.
  ServerProcess first;
  HEARTH_START_SERVER(first, server_args({"--http-listen", "127.0.0.1:0"}));
  const std::string taken = first.http_address();
  ASSERT_FALSE(taken.empty()) << first.ready_line();
  EXPECT_EQ(expect_startup_failure(server_args({"--http-listen", taken}), &err), 1) << err;
  EXPECT_NE(err.find("--http-listen: cannot listen on " + taken), npos) << err;

  const fs::path dir = scratch_dir() / "a_directory";
  fs::create_directories(dir);
  const std::string text = (scratch_dir() / "not_pem.txt").string();
  std::ofstream(text) << "not a certificate\n";
  EXPECT_EQ(expect_startup_failure(server_args({"--tls-cert", text, "--tls-key", text}), &err), 1);
  EXPECT_NE(err.find("--tls-cert: '" + text + "' holds no PEM certificate"), npos) << err;
  const std::string directory = "cannot read '" + dir.string() + "': it is a directory";
  EXPECT_EQ(expect_startup_failure(server_args({"--auth-token-file", dir.string()}), &err), 2);
  EXPECT_NE(err.find("--auth-token-file: " + directory), npos) << err;
  EXPECT_EQ(expect_startup_failure(server_args({"--config", dir.string()}), &err), 2);
  EXPECT_NE(err.find("--config: " + directory), npos) << err;
  // The flag and the file both give the token: which one would win is a guess.
  EXPECT_EQ(
      expect_startup_failure(server_args({"--auth-token", "t", "--auth-token-file", text}), &err),
      2);
  EXPECT_NE(err.find("--auth-token and --auth-token-file: give one, not both"), npos) << err;
  // Read at load, where an empty template had served every chat an empty prompt.
  EXPECT_EQ(expect_startup_failure(server_args({"--chat-template", dir.string()}), &err), 1);
  EXPECT_NE(err.find("chat template: " + directory), npos) << err;
}

// A model path that is not UTF-8 (Linux allows any bytes) is reported with
// U+FFFD in its place: a proto string must be UTF-8, and the raw path made
// every ListModels response unsendable.
TEST(ServerLifecycleTest, AModelPathThatIsNotUtf8IsListedSanitized) {
  const std::string small = small_model();
  ASSERT_FALSE(small.empty());
  const fs::path link = scratch_dir() /
                        "st\xff"
                        "ories.gguf";
  fs::remove(link);
  fs::create_symlink(small, link);
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args({"--model", "b=" + link.string()}));
  auto stub = make_stub(plain_channel(server.grpc_address()));
  grpc::ClientContext ctx;
  v1::ListModelsResponse list;
  const grpc::Status s = stub->ListModels(&ctx, v1::ListModelsRequest(), &list);
  ASSERT_TRUE(s.ok()) << status_text(s);
  ASSERT_EQ(list.models_size(), 1);
  EXPECT_NE(list.models(0).source().find("st\xEF\xBF\xBD"
                                         "ories.gguf"),
            std::string::npos)
      << list.models(0).source();
}

// The client's flags are checked before it connects. hearth bench keeps
// every request's outcome for its report: a run's request count is bounded
// before anything is allocated or sent (4096 x 2^20 chat turns aborted on
// bad_alloc).
TEST(ServerLifecycleTest, ClientRefusesBadFlagsBeforeSending) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"bench", "--model", "m", "--concurrency", "4096", "--chat-turns",
                                 "1048576"},
        std::vector<std::string>{"bench", "--model", "m", "--requests", "100000000"}}) {
    const ProcessResult r = run_process(HEARTH_CLI_BIN, args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("1000000"), std::string::npos) << r.err;
  }
  // 0 is what the server reads as "unset" (off) for top_p and the
  // repetition penalty: asked for explicitly, it is refused, not sent.
  for (const char* flag : {"--top-p", "--repeat-penalty"}) {
    const ProcessResult zero = run_process(
        HEARTH_CLI_BIN, {"--server", "127.0.0.1:1", "generate", "--prompt", "x", flag, "0"});
    EXPECT_EQ(zero.exit_code, 2) << zero.err;
    EXPECT_NE(zero.err.find(std::string(flag) + ": 0 is out of range (0, "), std::string::npos)
        << zero.err;
  }
  // A connection flag's error names the tool once.
  const ProcessResult r = run_process(HEARTH_CLI_BIN, {"--timeout-s", "-1", "models"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.find("hearth models: --timeout-s: -1 is out of range"), 0u) << r.err;
  EXPECT_EQ(r.err.find("models: hearth models"), std::string::npos) << r.err;
}

// Every --config file is read (the last alone used to be), and a context as
// small as 8 positions warms up (warm-up needed 9 and failed naming neither).
TEST(ServerLifecycleTest, EveryConfigFileIsServedAndSmallContextsWarmUp) {
  const fs::path a = scratch_dir() / "a.conf", b = scratch_dir() / "b.conf";
  std::ofstream(a) << "[model a]\npath = builtin:demo\ncontext = 8\n";
  std::ofstream(b) << "[model b]\npath = builtin:demo\n";
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args({"--config", a.string(), "--config", b.string()}));
  auto stub = make_stub(plain_channel(server.grpc_address()));
  grpc::ClientContext ctx;
  v1::ListModelsResponse list;
  ASSERT_TRUE(stub->ListModels(&ctx, v1::ListModelsRequest(), &list).ok());
  ASSERT_EQ(list.models_size(), 2);
  EXPECT_EQ(list.models(0).name(), "a");
  EXPECT_EQ(list.models(0).context_length(), 8u);
  EXPECT_EQ(list.models(1).name(), "b");
}

TEST(ServerLifecycleTest, ReadyLineAnnouncesBothPortsOrMetricsOff) {
  ServerProcess a;
  HEARTH_START_SERVER(a, server_args());
  EXPECT_GT(a.grpc_port(), 0);
  EXPECT_GT(a.metrics_port(), 0);
  EXPECT_NE(a.grpc_port(), a.metrics_port());
  EXPECT_EQ(a.grpc_address(), "127.0.0.1:" + std::to_string(a.grpc_port()));
  ServerProcess b;
  HEARTH_START_SERVER(
      b, std::vector<std::string>({"--listen", "127.0.0.1:0", "--metrics-listen", "off"}));
  EXPECT_EQ(b.metrics_address(), "off") << b.ready_line();
  // Exactly one ready line, nothing else on stdout.
  EXPECT_EQ(b.stdout_text(), b.ready_line() + "\n");
}

TEST(ServerLifecycleTest, HealthServingOverallAndPerModel) {
  const std::string small = small_model();
  ASSERT_FALSE(small.empty());
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args({"--model", "one=" + small, "--model", "two=" + small}));
  auto ch = plain_channel(server.grpc_address());
  for (const char* service : {"", "one", "two"}) {
    int serving = -1;
    const grpc::Status s = health_check(ch, service, &serving);
    EXPECT_TRUE(s.ok()) << "'" << service << "': " << status_text(s);
    EXPECT_EQ(serving, kServing) << "'" << service << "'";
  }
  // A service the server does not know: NOT_FOUND, as grpc.health.v1 specifies.
  int serving = -1;
  const grpc::Status s = health_check(ch, "demo", &serving);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << status_text(s);
}

TEST(ServerLifecycleTest, ReflectionListsTheInferenceService) {
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args());
  auto ch = plain_channel(server.grpc_address());
  std::vector<std::string> services;
  grpc::Status s = reflection_list_services(ch, &services);
  ASSERT_TRUE(s.ok()) << status_text(s);
  auto has = [&](const std::string& name) {
    return std::find(services.begin(), services.end(), name) != services.end();
  };
  EXPECT_TRUE(has("hearth.v1.Inference"));
  EXPECT_TRUE(has("grpc.health.v1.Health"));
  std::vector<google::protobuf::FileDescriptorProto> files;
  s = reflection_file_containing_symbol(ch, "hearth.v1.Inference", &files);
  ASSERT_TRUE(s.ok()) << status_text(s);
  auto file = std::find_if(files.begin(), files.end(),
                           [](const auto& f) { return f.name() == "hearth/v1/inference.proto"; });
  ASSERT_NE(file, files.end()) << "no hearth/v1/inference.proto among " << files.size() << " files";
  EXPECT_EQ(file->package(), "hearth.v1");
  ASSERT_EQ(file->service_size(), 1);
  std::vector<std::string> methods;
  for (const auto& m : file->service(0).method()) {
    methods.push_back(m.name());
    if (m.name() == "Generate" || m.name() == "Chat") {
      EXPECT_TRUE(m.server_streaming()) << m.name();
    }
  }
  std::sort(methods.begin(), methods.end());
  EXPECT_EQ(methods, (std::vector<std::string>{"Chat", "ChatComplete", "Complete", "Detokenize",
                                               "Generate", "GetModel", "ListModels", "Tokenize"}));
}

// ---------------------------------------------------------------------------
// Draining.

class ServerDrainTest : public ::testing::Test {
 protected:
  void start(const std::vector<std::string>& extra) {
    const std::string path = slow_model();
    ASSERT_FALSE(path.empty());
    std::vector<std::string> args = {"--model", std::string(kSlow) + "=" + path};
    args.insert(args.end(), extra.begin(), extra.end());
    HEARTH_START_SERVER(server_, server_args(args));
    channel_ = plain_channel(server_.grpc_address());
    stub_ = make_stub(channel_);
  }
  // Polls health until `service` reports `want`; a failing Check counts as not yet.
  bool wait_health(const std::string& service, int want, milliseconds timeout, int* last) {
    const auto deadline = Clock::now() + timeout;
    do {
      const grpc::Status s = health_check(channel_, service, last);
      if (s.ok() && *last == want) return true;
    } while (Clock::now() < deadline);
    return false;
  }

  ServerProcess server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

TEST_F(ServerDrainTest, SigtermLetsOpenStreamsFinishAndRefusesNewWork) {
  // Long enough to still be running while the drain is checked, short
  // enough to finish well inside the grace period.
  constexpr std::uint32_t kTokens = kUnderSanitizer ? 16 : 64;
  start({"--instances", "2", "--grace-period-s", "120"});
  v1::GenerateRequest req = make_request(kSlow, "draining", kTokens);
  req.set_ignore_eos(true);
  OpenStream a(*stub_, req), b(*stub_, req);
  ASSERT_TRUE(a.wait_first_piece()) << status_text(a.finish());
  ASSERT_TRUE(b.wait_first_piece()) << status_text(b.finish());
  ASSERT_TRUE(server_.signal(SIGTERM));

  int last = -1;
  EXPECT_TRUE(wait_health("", kNotServing, patience(), &last)) << "overall health: " << last;
  EXPECT_TRUE(wait_health(kSlow, kNotServing, patience(), &last)) << "model health: " << last;
  // New work is refused while the two streams are still open.
  v1::GenerateRequest fresh = make_request(kSlow, "too late", 2);
  v1::CompleteResponse resp;
  const grpc::Status refused = complete(*stub_, fresh, &resp, seconds(30));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << status_text(refused);
  const StreamResult refused_stream = generate(*stub_, fresh, seconds(30));
  EXPECT_EQ(refused_stream.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status_text(refused_stream.status);
  EXPECT_TRUE(server_.running()) << "exited before its streams finished";

  for (OpenStream* s : {&a, &b}) {
    ASSERT_TRUE(s->finish().ok()) << status_text(s->finish());
    ASSERT_EQ(s->result().dones.size(), 1u);
    EXPECT_EQ(s->result().dones.front().usage().generated_tokens(), kTokens);
    EXPECT_EQ(s->result().ids().size(), kTokens);
  }
  EXPECT_EQ(server_.wait_exit(patience()), std::optional<int>(0)) << server_.describe();
}

TEST_F(ServerDrainTest, ShortGracePeriodCancelsOpenStreams) {
  constexpr int kGraceS = 1;
  start({"--instances", "1", "--grace-period-s", std::to_string(kGraceS)});
  v1::GenerateRequest req = make_request(kSlow, "never finishes", 4000);
  req.set_ignore_eos(true);
  OpenStream s(*stub_, req);
  ASSERT_TRUE(s.wait_first_piece()) << status_text(s.finish());
  const auto signalled = Clock::now();
  ASSERT_TRUE(server_.signal(SIGTERM));
  const grpc::Status st = s.finish();
  const double took = std::chrono::duration<double>(Clock::now() - signalled).count();
  EXPECT_FALSE(st.ok()) << "the stream ran to its end: the grace period was not enforced";
  EXPECT_TRUE(st.error_code() == grpc::StatusCode::CANCELLED ||
              st.error_code() == grpc::StatusCode::UNAVAILABLE ||
              st.error_code() == grpc::StatusCode::ABORTED)
      << status_text(st);
  EXPECT_TRUE(s.result().dones.empty());
  EXPECT_LT(s.result().ids().size(), 4000u);
  // Cancelled when the grace period ended, not before it (a lower bound: a
  // slow machine only lengthens it) and not by running to its end (fewer
  // than the 4000 tokens asked for, checked above).
  EXPECT_GE(took, kGraceS) << "seconds from SIGTERM to the end of the stream";
  EXPECT_EQ(server_.wait_exit(patience()), std::optional<int>(0)) << server_.describe();
}

// Holds the first Generate call in its handler: the observer hears of a call
// on the handler's thread after its generation ended and its last message
// (Done) was written, before the handler returns and gRPC sends the status.
class HoldFirstGenerate : public server::RequestObserver {
 public:
  void on_inter_token(const std::string&, double) override {}
  void on_request_done(const server::RequestRecord& record) override {
    if (record.method != "Generate") return;
    std::unique_lock<std::mutex> lock(mu_);
    if (held_) return;
    held_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return released_; });
  }
  bool wait_held(milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, timeout, [&] { return held_; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool held_ = false, released_ = false;
};

// The drain waits for the handlers that were running when it began before
// gRPC's Shutdown() (server/calls_in_flight.h): a call whose generation has
// ended but whose handler has not returned keeps the server answering, and
// gets its status. In process, so that the test can hold that handler.
TEST(ServerDrainInProcessTest, DrainWaitsForAHandlerThatHasNotReturned) {
  HoldFirstGenerate hold;
  server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  server::ModelSpec demo;
  demo.name = "demo";
  demo.path = std::string(server::kDemoSource);
  options.models = {demo};
  options.grace_period_s = 600;  // the drain ends with the handler, long before
  server::HearthServer srv(options, &hold);
  const absl::StatusOr<int> port = srv.start();
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_TRUE(srv.load(&kernels::default_thread_pool()).ok());
  const std::string address = "127.0.0.1:" + std::to_string(*port);
  auto stub = make_stub(plain_channel(address));
  auto probe = make_stub(plain_channel(address));
  v1::ModelInfo info;
  ASSERT_TRUE(get_model(*probe, "demo", &info).ok()) << "the probe's connection";

  StreamResult held;
  std::thread client([&] { held = generate(*stub, make_request("demo", "Once upon", 4)); });
  const bool was_held = hold.wait_held(patience());
  EXPECT_TRUE(was_held) << "the Generate call never reached its end";
  bool drained = false;
  std::thread stopper([&] { drained = srv.shutdown(); });

  // Once the model reports DRAINING, the server must still answer: on a
  // connection it had, and on a new one.
  grpc::Status s;
  const auto deadline = Clock::now() + patience();
  do {
    s = get_model(*probe, "demo", &info);
  } while (was_held && s.ok() && info.state() != v1::ModelInfo::STATE_DRAINING &&
           Clock::now() < deadline);
  EXPECT_TRUE(s.ok()) << "the server stopped answering while a call begun before the drain "
                         "was still in its handler: "
                      << status_text(s);
  EXPECT_EQ(info.state(), v1::ModelInfo::STATE_DRAINING) << describe_model(info);
  const grpc::Status fresh = get_model(*make_stub(plain_channel(address)), "demo", &info);
  EXPECT_TRUE(fresh.ok()) << "a new connection was refused: " << status_text(fresh);

  hold.release();
  client.join();
  stopper.join();
  EXPECT_TRUE(held.status.ok()) << status_text(held.status);
  EXPECT_EQ(held.dones.size(), 1u);
  EXPECT_TRUE(drained) << "the drain ran out of its 600 s grace period";
}

// A stop signal while the models load stops the loading after the current
// model, drains what the loaded ones serve, and exits 0 without turning
// ready: signalled once the first of six models is warm, the server never
// prints the ready line (the rest take far longer to load than a signal to
// arrive). Before, the signal waited for the whole load, then the server
// turned ready and drained.
TEST(ServerLifecycleTest, SigtermWhileLoadingExitsWithoutTurningReady) {
  const std::string path = slow_model();
  ASSERT_FALSE(path.empty());
  std::vector<std::string> args;
  for (int i = 0; i < 6; ++i) {
    args.push_back("--model");
    args.push_back("m" + std::to_string(i) + "=" + path);
  }
  ServerProcess server;
  ASSERT_TRUE(server.launch(HEARTH_SERVER_BIN, server_args(args))) << server.error();
  ASSERT_TRUE(server.wait_for_stderr("model 'm0' ready", patience())) << server.describe();
  ASSERT_TRUE(server.signal(SIGTERM));
  EXPECT_EQ(server.wait_exit(patience()), std::optional<int>(0)) << server.describe();
  EXPECT_EQ(server.stdout_text().find("hearth-server ready"), std::string::npos)
      << server.stdout_text();
  EXPECT_NE(server.stderr_text().find("received SIGTERM while loading: stopping"),
            std::string::npos)
      << server.describe();
}

TEST(ServerLifecycleTest, IdleServerExitsZeroOnSigtermAndSigint) {
  for (int sig : {SIGTERM, SIGINT}) {
    ServerProcess server;
    HEARTH_START_SERVER(server, server_args());
    ASSERT_TRUE(server.signal(sig));
    EXPECT_EQ(server.wait_exit(patience()), std::optional<int>(0)) << "signal " << sig << "\n"
                                                                   << server.describe();
  }
}

}  // namespace
}  // namespace hearth::testing
