// The OpenAI-compatible HTTP front end (--http-listen) of a real
// hearth-server, over loopback HTTP (cpp-httplib's client, and raw sockets
// where a client must misbehave): the same greedy tokens as gRPC, every
// error status, a disconnecting client freeing its instance, huge bodies,
// invalid UTF-8, slow clients, and the transport label on the metrics.
// Waiting is on events (GetModel state, socket reads, scrapes), bounded by
// patience(); nothing sleeps.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/server/metrics_scrape.h"
#include "tests/server/stories_model.h"

namespace hearth::testing {
namespace {

using Json = nlohmann::ordered_json;

// A client for `address` ("HOST:PORT") whose calls fail rather than hang.
std::unique_ptr<httplib::Client> http_client(const std::string& address) {
  auto c = std::make_unique<httplib::Client>("http://" + address);
  const auto wait = std::chrono::duration_cast<seconds>(patience()).count();
  c->set_read_timeout(wait, 0);
  c->set_write_timeout(wait, 0);
  c->set_connection_timeout(wait, 0);
  return c;
}

struct HttpAnswer {
  int status = -1;
  std::string body;
  httplib::Headers headers;
  Json json() const { return Json::parse(body, nullptr, false); }
  std::string header(const std::string& name) const {
    const auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

HttpAnswer post(httplib::Client& c, const std::string& path, const Json& body,
                const httplib::Headers& headers = {}) {
  HttpAnswer a;
  if (auto r = c.Post(path, headers, body.dump(), "application/json")) {
    a.status = r->status;
    a.body = r->body;
    a.headers = r->headers;
  }
  return a;
}

// The events of a server-sent event stream body, without "data: " and the
// blank line; fails the test on any other framing.
std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    const std::size_t end = body.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event at byte " << pos;
    if (end == std::string::npos) break;
    const std::string event = body.substr(pos, end - pos);
    EXPECT_TRUE(event.starts_with("data: ")) << event;
    out.push_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

// A raw TCP connection: for clients that stop, stall or vanish.
class RawConnection {
 public:
  explicit RawConnection(const std::string& address) {
    const std::size_t colon = address.rfind(':');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
    inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) close_now();
  }
  ~RawConnection() { close_now(); }
  bool ok() const { return fd_ >= 0; }
  bool send_all(const std::string& bytes) {
    std::size_t sent = 0;
    while (ok() && sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return ok();
  }
  // A whole POST with a JSON body (and `headers`, each "Name: value\r\n").
  bool post(const std::string& path, const Json& body, const std::string& headers = "") {
    const std::string b = body.dump();
    return send_all("POST " + path +
                    " HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n" + headers +
                    "Content-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b);
  }
  // Reads until `needle` has arrived (true), the peer closes or `timeout`
  // passes (false).
  bool read_until(const std::string& needle, milliseconds timeout = patience()) {
    const auto deadline = Clock::now() + timeout;
    while (received_.find(needle) == std::string::npos) {
      if (!read_some(deadline)) return false;
    }
    return true;
  }
  // Reads until the peer closes the connection (true) or `timeout` passes.
  bool read_until_closed(milliseconds timeout = patience()) {
    const auto deadline = Clock::now() + timeout;
    while (read_some(deadline)) {
    }
    return closed_;
  }
  // Reads until more than `size` bytes have come (true), the peer closes
  // the connection or `timeout` passes.
  bool read_past(std::size_t size, milliseconds timeout = patience()) {
    const auto deadline = Clock::now() + timeout;
    while (received_.size() <= size) {
      if (!read_some(deadline)) return false;
    }
    return true;
  }
  bool closed() const { return closed_; }
  const std::string& received() const { return received_; }
  void close_now() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  bool read_some(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (!ok() || left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) return true;  // loop re-checks the deadline
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    received_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  int fd_ = -1;
  bool closed_ = false;
  std::string received_;
};

bool is_idle(const v1::ModelInfo& m) { return m.instances_busy() == 0 && m.queue_depth() == 0; }
bool is_busy(const v1::ModelInfo& m) { return m.instances_busy() == 1; }

// A request that ends at once.
const Json kShort = {{"model", "slow"}, {"prompt", "x"}, {"max_tokens", 2}};

// A request that would run for seconds (to the context limit) unless it is
// cancelled or its deadline passes.
Json endless(bool stream) {
  return {{"model", "slow"},
          {"prompt", "never ending"},
          {"max_tokens", 4000},
          {"ignore_eos", true},
          {"stream", stream}};
}

// --- On a slow synthetic model: cancellation, capacity, deadlines, limits ---

class ServerHttpTest : public ::testing::Test {
 protected:
  void start(const std::vector<std::string>& extra = {}) {
    const std::string path = slow_model();
    ASSERT_FALSE(path.empty());
    std::vector<std::string> args = {"--model", "slow=" + path,  "--instances",
                                     "1",       "--http-listen", "127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    HEARTH_START_SERVER(server_, server_args(args));
    ASSERT_FALSE(server_.http_address().empty()) << server_.ready_line();
    stub_ = make_stub(plain_channel(server_.grpc_address()));
    client_ = http_client(server_.http_address());
  }
  ::testing::AssertionResult wait_until(const std::function<bool(const v1::ModelInfo&)>& pred,
                                        const char* what) {
    v1::ModelInfo last;
    if (wait_for_model(*stub_, "slow", pred, patience(), &last))
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "not " << what << "; last GetModel " << describe_model(last);
  }
  double http_requests(const std::string& method, const std::string& code) {
    return sum_series(scrape(server_), "hearth_requests_total",
                      {"method=\"" + method + "\"", "code=\"" + code + "\"", "transport=\"http\""});
  }
  // A request is counted when its handler ends, which can be just after its
  // instance is free again: polls the scrape until `n` are counted.
  bool wait_for_http_requests(const std::string& method, const std::string& code, double n) {
    const auto deadline = Clock::now() + patience();
    while (http_requests(method, code) < n)
      if (Clock::now() >= deadline) return false;
    return true;
  }

  ServerProcess server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ServerHttpTest, ClientThatDisconnectsFreesTheInstance) {
  start();
  {
    RawConnection stream(server_.http_address());
    ASSERT_TRUE(stream.post("/v1/completions", endless(true)));
    ASSERT_TRUE(stream.read_until("data: ")) << stream.received();
  }  // closed mid-stream
  EXPECT_TRUE(wait_until(is_idle, "idle after the stream's client left"));
  {
    RawConnection unary(server_.http_address());
    ASSERT_TRUE(unary.post("/v1/completions", endless(false)));
    ASSERT_TRUE(wait_until(is_busy, "generating the unary request"));
  }  // closed while its answer is being generated
  EXPECT_TRUE(wait_until(is_idle, "idle after the unary client left"));
  EXPECT_TRUE(wait_for_http_requests("Generate", "CANCELLED", 1));
  EXPECT_TRUE(wait_for_http_requests("Complete", "CANCELLED", 1));
  EXPECT_EQ(http_requests("Generate", "CANCELLED"), 1);
  EXPECT_EQ(http_requests("Complete", "CANCELLED"), 1);
  // The instance serves the next request.
  const HttpAnswer next =
      post(*client_, "/v1/completions", {{"model", "slow"}, {"prompt", "next"}, {"max_tokens", 2}});
  EXPECT_EQ(next.status, 200) << next.body;
}

TEST_F(ServerHttpTest, FullQueueIs429WithRetryAfterAndDeadlineIs504) {
  start({"--queue", "0"});
  RawConnection holder(server_.http_address());
  ASSERT_TRUE(holder.post("/v1/completions", endless(true)));
  ASSERT_TRUE(holder.read_until("data: ")) << holder.received();
  const HttpAnswer full = post(*client_, "/v1/completions", kShort);
  EXPECT_EQ(full.status, 429) << full.body;
  EXPECT_EQ(full.header("Retry-After"), "1");
  EXPECT_EQ(full.json()["error"]["type"], "rate_limit_error") << full.body;
  holder.close_now();
  ASSERT_TRUE(wait_until(is_idle, "idle"));

  // A deadline that passes while generating (or, on a slow machine, while
  // admitting): 504, and the instance is free again.
  const HttpAnswer late =
      post(*client_, "/v1/completions", endless(false), {{"X-Request-Timeout", "0.2"}});
  EXPECT_EQ(late.status, 504) << late.body;
  EXPECT_EQ(late.json()["error"]["type"], "timeout_error") << late.body;
  EXPECT_TRUE(wait_until(is_idle, "idle after the deadline"));
  const HttpAnswer bad =
      post(*client_, "/v1/completions", endless(false), {{"X-Request-Timeout", "soon"}});
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(bad.json()["error"]["param"], "X-Request-Timeout") << bad.body;
}

TEST_F(ServerHttpTest, HugeBodiesMalformedJsonAndInvalidUtf8AreRefused) {
  start({"--max-message-bytes", "65536", "--http-idle-timeout-s", "3600"});
  // A POST with neither a length nor chunks has no body: answered at once,
  // not after the idle timeout (an hour here, past the test's patience).
  RawConnection bodiless(server_.http_address());
  ASSERT_TRUE(bodiless.send_all("POST /v1/completions HTTP/1.1\r\nHost: test\r\n\r\n"));
  EXPECT_TRUE(bodiless.read_until("Content-Length")) << bodiless.received();
  EXPECT_TRUE(bodiless.received().starts_with("HTTP/1.1 411")) << bodiless.received();
  EXPECT_TRUE(bodiless.read_until("needs a Content-Length")) << bodiless.received();
  auto huge = client_->Post("/v1/completions", std::string(100000, ' '), "application/json");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 413);
  EXPECT_FALSE(Json::parse(huge->body, nullptr, false).is_discarded()) << huge->body;
  // Chunked, the length undeclared: held to the same limit as it arrives.
  auto chunked = http_client(server_.http_address())
                     ->Post(
                         "/v1/completions",
                         [](std::size_t offset, httplib::DataSink& sink) {
                           const std::string chunk(10000, ' ');
                           if (offset < 100000) return sink.write(chunk.data(), chunk.size());
                           sink.done();
                           return true;
                         },
                         "application/json");
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->status, 413);
  EXPECT_EQ(Json::parse(chunked->body, nullptr, false)["error"]["message"],
            "request body: larger than the server's limit (--max-message-bytes)")
      << chunked->body;
  const std::string within(60000, ' ');
  auto chunked_within = http_client(server_.http_address())
                            ->Post(
                                "/v1/completions",
                                [&](std::size_t offset, httplib::DataSink& sink) {
                                  if (offset == 0) {
                                    const std::string b = kShort.dump() + within;
                                    return sink.write(b.data(), b.size());
                                  }
                                  sink.done();
                                  return true;
                                },
                                "application/json");
  ASSERT_TRUE(chunked_within);
  EXPECT_EQ(chunked_within->status, 200) << chunked_within->body;
  // Past the bound up to which the rest of a too-large body is read and
  // dropped (4x the limit), the connection is closed after the 413: what
  // the client sent beyond is never parsed as requests of its own (here the
  // body is made of them; httplib alone goes on reading the connection and
  // answers what it finds there).
  {
    std::string requests;
    while (requests.size() < 6 * 65536) requests += "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
    std::string raw =
        "POST /v1/completions HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (std::size_t at = 0; at < requests.size(); at += 8192) {
      const std::string chunk = requests.substr(at, 8192);
      char size[32];
      std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
      raw += size + chunk + "\r\n";
    }
    raw += "0\r\n\r\n";
    RawConnection smuggler(server_.http_address());
    smuggler.send_all(raw);  // may fail once the server has closed its end
    EXPECT_TRUE(smuggler.read_until_closed()) << smuggler.received().substr(0, 500);
    // At most the 413 (a reset after it may lose even that), nothing after.
    const std::string& got = smuggler.received();
    const std::size_t first = got.find("HTTP/1.1 ");
    EXPECT_TRUE(first == std::string::npos || got.find("HTTP/1.1 ", first + 1) == std::string::npos)
        << got.substr(0, 2000);
  }

  // A body declared as a form (curl -d's default) is read as JSON too, past
  // the 8 KB that httplib allows forms, and within --max-message-bytes.
  auto form = client_->Post("/v1/completions", kShort.dump() + std::string(20000, ' '),
                            "application/x-www-form-urlencoded");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 200) << form->body;
  auto huge_form = client_->Post("/v1/completions", std::string(100000, ' '),
                                 "application/x-www-form-urlencoded");
  ASSERT_TRUE(huge_form);
  EXPECT_EQ(huge_form->status, 413);
  auto multipart =
      client_->Post("/v1/completions", httplib::MultipartFormDataItems{{"a", "b", "", ""}});
  ASSERT_TRUE(multipart);
  EXPECT_EQ(multipart->status, 400);
  EXPECT_EQ(Json::parse(multipart->body)["error"]["message"],
            "request body: multipart form data is not accepted here; send a JSON object");

  auto malformed = client_->Post("/v1/completions", "{\"model\": ", "application/json");
  ASSERT_TRUE(malformed);
  EXPECT_EQ(malformed->status, 400);
  EXPECT_EQ(Json::parse(malformed->body)["error"]["message"],
            "request body: not valid JSON (byte 11)");

  auto utf8 = client_->Post("/v1/completions", "{\"model\": \"slow\", \"prompt\": \"\xc3\x28\"}",
                            "application/json");
  ASSERT_TRUE(utf8);
  EXPECT_EQ(utf8->status, 400);
  EXPECT_EQ(Json::parse(utf8->body)["error"]["message"], "request body: not valid UTF-8 (byte 29)");

  const HttpAnswer unknown =
      post(*client_, "/v1/completions", {{"model", "nope"}, {"prompt", "x"}});
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.json()["error"]["param"], "model");
  auto route = client_->Get("/v2/everything");
  ASSERT_TRUE(route);
  EXPECT_EQ(route->status, 404);
  EXPECT_EQ(Json::parse(route->body)["error"]["message"], "no route GET /v2/everything");
  // The server is unharmed.
  const HttpAnswer fine = post(*client_, "/v1/completions", kShort);
  EXPECT_EQ(fine.status, 200) << fine.body;
}

// A body nested a million levels deep (2 MB of brackets in a schema) is
// refused before it is parsed: copying it recursed until the handler's
// stack ran out, and the server died.
TEST_F(ServerHttpTest, DeeplyNestedBodyIsRefusedAndTheServerLives) {
  start();
  const std::string body =
      R"({"model": "slow", "prompt": "x", "response_format": {"type": "json_schema",
      "json_schema": {"name": "p", "schema": )" +
      std::string(1000000, '[') + std::string(1000000, ']') + "}}}";
  auto deep = client_->Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->status, 400);
  EXPECT_EQ(Json::parse(deep->body, nullptr, false)["error"]["message"],
            "request body: nested deeper than 512 levels")
      << deep->body;
  const HttpAnswer fine = post(*client_, "/v1/completions", kShort);
  EXPECT_EQ(fine.status, 200) << fine.body;
}

// X-Stainless-Timeout is the OpenAI SDKs' timeout, which they stop counting
// once the response's headers arrive: it bounds a unary call, but a stream
// only until it begins, and "0" (their whole seconds of a timeout under one)
// is accepted. A stream sent with 1 s is still going after 1.5 s.
TEST_F(ServerHttpTest, StainlessTimeoutBoundsAStreamOnlyUntilItBegins) {
  start();
  const HttpAnswer zero = post(*client_, "/v1/completions", kShort, {{"X-Stainless-Timeout", "0"}});
  EXPECT_EQ(zero.status, 200) << zero.body;
  const HttpAnswer negative =
      post(*client_, "/v1/completions", kShort, {{"X-Stainless-Timeout", "-1"}});
  EXPECT_EQ(negative.status, 400) << negative.body;

  const auto sent = Clock::now();
  RawConnection stream(server_.http_address());
  ASSERT_TRUE(stream.post("/v1/completions", endless(true), "X-Stainless-Timeout: 1\r\n"));
  ASSERT_TRUE(stream.read_until("data: ")) << stream.received();
  // Read until 1.5 s after sending, however late the first event came, and
  // then until more comes: the stream outlived its 1 s timeout.
  const auto past_timeout = sent + milliseconds(1500);
  for (auto now = Clock::now(); now < past_timeout && !stream.closed(); now = Clock::now())
    stream.read_past(stream.received().size(),
                     std::chrono::duration_cast<milliseconds>(past_timeout - now));
  EXPECT_TRUE(stream.read_past(stream.received().size()))
      << "nothing came after the timeout: " << stream.received().substr(0, 2000);
  EXPECT_EQ(stream.received().find("[DONE]"), std::string::npos) << stream.received();
  EXPECT_EQ(stream.received().find("\"error\""), std::string::npos) << stream.received();
  stream.close_now();
  ASSERT_TRUE(wait_until(is_idle, "idle after the stream's client left"));

  const HttpAnswer unary =
      post(*client_, "/v1/completions", endless(false), {{"X-Stainless-Timeout", "1"}});
  EXPECT_EQ(unary.status, 504) << unary.body;
}

TEST_F(ServerHttpTest, SlowClientCostsNothingElseAndIsDisconnected) {
  start({"--http-idle-timeout-s", "1"});
  RawConnection slow(server_.http_address());
  ASSERT_TRUE(slow.send_all("POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Le"));
  // Others are served meanwhile.
  const HttpAnswer fine = post(*client_, "/v1/completions", kShort);
  EXPECT_EQ(fine.status, 200) << fine.body;
  EXPECT_TRUE(wait_until(is_idle, "idle"));
  // The idle timeout ends the stalled connection.
  EXPECT_TRUE(slow.read_until_closed()) << slow.received();
  // One that stalls in the middle of its body is told why.
  RawConnection cut(server_.http_address());
  ASSERT_TRUE(
      cut.send_all("POST /v1/completions HTTP/1.1\r\nHost: test\r\n"
                   "Content-Length: 100\r\n\r\n{\"model\""));
  EXPECT_TRUE(cut.read_until_closed()) << cut.received();
  EXPECT_TRUE(cut.received().starts_with("HTTP/1.1 400")) << cut.received();
  EXPECT_NE(cut.received().find("not a complete HTTP request"), std::string::npos)
      << cut.received();
}

TEST_F(ServerHttpTest, BearerTokenAsForGrpcAndHealthOpen) {
  start({"--auth-token", "s3cret"});
  const HttpAnswer none = post(*client_, "/v1/completions", kShort);
  EXPECT_EQ(none.status, 401) << none.body;
  EXPECT_EQ(none.json()["error"]["code"], "invalid_api_key");
  EXPECT_EQ(post(*client_, "/v1/completions", kShort, {{"Authorization", "Bearer wrong"}}).status,
            401);
  EXPECT_EQ(post(*client_, "/v1/completions", kShort, {{"Authorization", "Bearer s3cret"}}).status,
            200);
  // The scheme's case does not matter; the token's does.
  EXPECT_EQ(post(*client_, "/v1/completions", kShort, {{"Authorization", "bearer s3cret"}}).status,
            200);
  EXPECT_EQ(post(*client_, "/v1/completions", kShort, {{"Authorization", "Bearer S3CRET"}}).status,
            401);
  auto models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(Json::parse(health->body)["status"], "ready");
}

TEST_F(ServerHttpTest, DrainingAnswers503AndLetsTheOpenStreamFinish) {
  start({"--grace-period-s", "300"});
  RawConnection stream(server_.http_address());
  ASSERT_TRUE(stream.post("/v1/completions", {{"model", "slow"},
                                              {"prompt", "finishing"},
                                              {"max_tokens", kUnderSanitizer ? 24 : 64},
                                              {"ignore_eos", true},
                                              {"stream", true}}));
  ASSERT_TRUE(stream.read_until("data: ")) << stream.received();
  ASSERT_TRUE(server_.signal(SIGTERM));
  // /health turns 503 "draining" (polled: each call is a real round trip).
  int health_status = 0;
  std::string health_body;
  const auto deadline = Clock::now() + patience();
  while (health_status != 503 && Clock::now() < deadline) {
    auto h = http_client(server_.http_address())->Get("/health");
    if (!h) break;
    health_status = h->status;
    health_body = h->body;
  }
  EXPECT_EQ(health_status, 503);
  EXPECT_EQ(Json::parse(health_body, nullptr, false)["status"], "draining") << health_body;
  const HttpAnswer refused = post(*http_client(server_.http_address()), "/v1/completions", kShort);
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.header("Retry-After"), "5");
  // The open stream still ends normally.
  EXPECT_TRUE(stream.read_until("data: [DONE]\n\n")) << stream.received();
  EXPECT_NE(stream.received().find("\"finish_reason\":\"length\""), std::string::npos);
  EXPECT_EQ(server_.wait_exit(patience()), 0) << server_.describe();
}

// --- On the trained stories260K model: the same tokens as gRPC ---------------

class ServerHttpStoriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HEARTH_REQUIRE_SHARED();
    const std::string tmpl =
        (fs::path(HEARTH_SOURCE_DIR) / "tests/chat/templates/HuggingFaceH4-zephyr-7b-beta.jinja")
            .string();
    HEARTH_START_SERVER(server_, server_args({"--model", "stories=" + stories_path().string(),
                                              "--chat-template", "stories=" + tmpl, "--kv-cache",
                                              "float", "--http-listen", "127.0.0.1:0"}));
    stub_ = make_stub(plain_channel(server_.grpc_address()));
    client_ = http_client(server_.http_address());
  }
  ServerProcess server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
  std::unique_ptr<httplib::Client> client_;
};

constexpr char kPrompt[] = "Once upon a time, there was a little girl named Lily.";

TEST_F(ServerHttpStoriesTest, GreedyCompletionGivesGrpcsTokens) {
  v1::GenerateRequest g = make_request("stories", kPrompt, 40);
  g.set_logprobs(true);
  v1::CompleteResponse grpc_answer;
  ASSERT_TRUE(complete(*stub_, g, &grpc_answer).ok());

  const HttpAnswer a = post(*client_, "/v1/completions",
                            {{"model", "stories"},
                             {"prompt", kPrompt},
                             {"max_tokens", 40},
                             {"temperature", 0},
                             {"logprobs", 0}});
  ASSERT_EQ(a.status, 200) << a.body;
  const Json j = a.json();
  EXPECT_EQ(j["choices"][0]["text"], grpc_answer.text());
  const Json& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), static_cast<std::size_t>(grpc_answer.logprobs_size()));
  for (int i = 0; i < grpc_answer.logprobs_size(); ++i) {
    EXPECT_EQ(lp["tokens"][i], grpc_answer.logprobs(i).chosen().text()) << "token " << i;
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), grpc_answer.logprobs(i).chosen().logprob(),
                1e-6)
        << "token " << i;
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], grpc_answer.done().usage().prompt_tokens());
  EXPECT_EQ(j["usage"]["completion_tokens"], grpc_answer.done().usage().generated_tokens());
}

// What a completion returned, unary or streamed: its text, finish reason
// and logprobs' tokens and text offsets.
struct CompletionWithLogprobs {
  std::string text, finish;
  std::vector<std::string> tokens;
  std::vector<std::size_t> offsets;
};

CompletionWithLogprobs read_completion(const HttpAnswer& a, bool stream) {
  CompletionWithLogprobs out;
  std::vector<Json> choices;
  if (stream) {
    for (const std::string& e : sse_events(a.body))
      if (e != "[DONE]") choices.push_back(Json::parse(e)["choices"][0]);
  } else {
    choices.push_back(a.json()["choices"][0]);
  }
  for (const Json& c : choices) {
    out.text += c["text"].get<std::string>();
    if (!c["finish_reason"].is_null()) out.finish = c["finish_reason"];
    if (c["logprobs"].is_null()) continue;
    for (const Json& t : c["logprobs"]["tokens"]) out.tokens.push_back(t);
    for (const Json& o : c["logprobs"]["text_offset"]) out.offsets.push_back(o);
  }
  return out;
}

// Logprobs describe the text returned: each token's text_offset is where
// its text starts in it (also after a stop string held text back and let
// it go), and the tokens of a stop string, cut from the text, are not
// listed: the tokens cover exactly the text, the last one starting in it.
TEST_F(ServerHttpStoriesTest, LogprobsFollowTheTextAStopStringLeaves) {
  for (const bool stream : {false, true}) {
    for (const char* stop : {"Lily.", "Lily!"}) {
      SCOPED_TRACE(std::string(stop) + (stream ? " streamed" : " unary"));
      const HttpAnswer a = post(*client_, "/v1/completions",
                                {{"model", "stories"},
                                 {"prompt", "Once upon a time"},
                                 {"max_tokens", 20},
                                 {"temperature", 0},
                                 {"logprobs", 0},
                                 {"stop", Json::array({stop})},
                                 {"stream", stream}});
      ASSERT_EQ(a.status, 200) << a.body;
      const CompletionWithLogprobs c = read_completion(a, stream);
      // Greedy stories260K: ", there was a little girl named Lily. She ..."
      EXPECT_EQ(c.finish, std::string(stop) == "Lily." ? "stop" : "length");
      ASSERT_EQ(c.tokens.size(), c.offsets.size());
      ASSERT_FALSE(c.tokens.empty());
      std::string joined;
      for (std::size_t i = 0; i < c.tokens.size(); ++i) {
        EXPECT_EQ(c.offsets[i], joined.size()) << "token " << i << " '" << c.tokens[i] << "'";
        joined += c.tokens[i];
      }
      EXPECT_EQ(joined.substr(0, c.text.size()), c.text);
      EXPECT_LT(c.offsets.back(), c.text.size());
      if (std::string(stop) == "Lily!") {
        EXPECT_EQ(c.tokens.size(), 20u);
      }
    }
  }
}

TEST_F(ServerHttpStoriesTest, GreedyStreamedChatGivesGrpcsText) {
  v1::ChatRequest c;
  c.set_model("stories");
  c.set_max_tokens(30);
  v1::ChatMessage* m = c.add_messages();
  m->set_role("user");
  m->set_content("Tell me about Lily.");
  grpc::ClientContext ctx;
  set_deadline(ctx);
  v1::CompleteResponse grpc_answer;
  ASSERT_TRUE(stub_->ChatComplete(&ctx, c, &grpc_answer).ok());

  const HttpAnswer a =
      post(*client_, "/v1/chat/completions",
           {{"model", "stories"},
            {"messages", Json::array({{{"role", "user"}, {"content", "Tell me about Lily."}}})},
            {"max_tokens", 30},
            {"temperature", 0},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.header("Content-Type"), "text/event-stream");
  const std::vector<std::string> events = sse_events(a.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  std::string finish;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const Json e = Json::parse(events[i]);
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    if (e["choices"].empty()) continue;  // the usage chunk
    const Json& choice = e["choices"][0];
    if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(text, grpc_answer.text());
  EXPECT_EQ(finish,
            grpc_answer.done().finish_reason() == v1::FINISH_REASON_LENGTH ? "length" : "stop");
  const Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], grpc_answer.done().usage().prompt_tokens());

  // Both transports are counted, each under its label.
  const auto metrics = scrape(server_);
  EXPECT_EQ(sum_series(metrics, "hearth_requests_total",
                       {"method=\"Chat\"", "code=\"OK\"", "transport=\"http\""}),
            1);
  EXPECT_EQ(sum_series(metrics, "hearth_requests_total",
                       {"method=\"ChatComplete\"", "code=\"OK\"", "transport=\"grpc\""}),
            1);
}

TEST_F(ServerHttpStoriesTest, ModelsAreListed) {
  auto r = client_->Get("/v1/models");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const Json j = Json::parse(r->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "stories");
  EXPECT_EQ(j["data"][0]["object"], "model");
  auto one = client_->Get("/v1/models/stories");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  auto none = client_->Get("/v1/models/other");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
}

}  // namespace
}  // namespace hearth::testing
