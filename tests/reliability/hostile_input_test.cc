// Hostile requests, table-driven: out-of-range and non-finite numbers,
// invalid UTF-8 (hand-encoded wire bytes: the generated setters and
// serializers would complain), prompts at and past the context length, 0 to
// 10,000 stop strings, messages over --max-message-bytes, model names with odd
// characters, malformed protobuf. Each case gets the status and message it
// should (through Generate and Complete where both apply), and after each one
// a good request still succeeds: the server keeps serving.
//
// The server: the demo model with --context 64 and --max-message-bytes 65536.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "tests/reliability/reliability_util.h"

namespace hearth::testing {
namespace {

constexpr char kDemo[] = "demo";
constexpr std::uint32_t kContext = 64;
constexpr int kMaxMessageBytes = 65536;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// "a a a ... a": with the demo tokenizer, one token per "a" after BOS (checked
// through Tokenize before use).
std::string a_prompt(std::size_t words) {
  std::string s;
  for (std::size_t i = 0; i < words; ++i) s += i ? " a" : "a";
  return s;
}

class HostileInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess;
    ASSERT_TRUE(server_->start(
        HEARTH_SERVER_BIN,
        server_args({"--context", std::to_string(kContext), "--max-message-bytes",
                     std::to_string(kMaxMessageBytes), "--kernel-threads", "1", "--queue", "4"})))
        << server_->error();
    channel_ = new std::shared_ptr<grpc::Channel>(plain_channel(server_->grpc_address()));
    stub_ = make_stub(*channel_).release();
  }
  static void TearDownTestSuite() {
    delete stub_;
    delete channel_;
    delete server_;  // kills the server; a sanitizer report in its stderr fails the suite
  }
  void SetUp() override { ASSERT_TRUE(server_ != nullptr && server_->running()); }
  void TearDown() override {
    EXPECT_TRUE(server_->running()) << "the server died:" << server_->describe();
  }

  static std::uint32_t tokens_of(const std::string& text) {
    v1::TokenizeRequest req;
    req.set_model(kDemo);
    req.set_text(text);
    v1::TokenizeResponse resp;
    grpc::ClientContext ctx;
    set_deadline(ctx, seconds(30));
    const grpc::Status s = stub_->Tokenize(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << status_text(s);
    return static_cast<std::uint32_t>(resp.token_ids_size());
  }

  // A good request succeeds: the server is still serving.
  static void expect_still_serving(const std::string& after) {
    v1::GenerateRequest req = make_request(kDemo, "still serving", 2);
    req.set_ignore_eos(true);
    v1::CompleteResponse resp;
    const grpc::Status s = complete(*stub_, req, &resp);
    EXPECT_TRUE(s.ok()) << "after " << after << ": " << status_text(s);
    EXPECT_EQ(resp.token_ids_size(), 2) << "after " << after;
  }

  static ServerProcess* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
  static v1::Inference::Stub* stub_;
};

ServerProcess* HostileInputTest::server_ = nullptr;
std::shared_ptr<grpc::Channel>* HostileInputTest::channel_ = nullptr;
v1::Inference::Stub* HostileInputTest::stub_ = nullptr;

struct RequestCase {
  std::string name;
  std::function<void(v1::GenerateRequest&)> edit;  // applied to a good request
  grpc::StatusCode code;
  std::string message;  // a substring the status message must contain
};

// A good request for the demo model (OK unless an edit breaks it).
v1::GenerateRequest good_request() {
  v1::GenerateRequest r = make_request(kDemo, "once upon a time", 4);
  r.set_ignore_eos(true);
  return r;
}

TEST_F(HostileInputTest, OutOfRangeFieldsAreInvalidArgumentNamingTheField) {
  using v1::GenerateRequest;
  auto sampling = [](auto set) {
    return [set](GenerateRequest& r) {
      r.mutable_sampling()->set_temperature(0.7f);
      set(*r.mutable_sampling());
    };
  };
  const auto INVALID = grpc::StatusCode::INVALID_ARGUMENT;
  const std::vector<RequestCase> cases = {
      {"max_tokens 0", [](auto& r) { r.set_max_tokens(0); }, INVALID,
       "max_tokens: 0 is out of range: allowed [1, 4096]"},
      {"max_tokens limit+1", [](auto& r) { r.set_max_tokens(4097); }, INVALID,
       "max_tokens: 4097 is out of range"},
      {"max_tokens 2^32-1", [](auto& r) { r.set_max_tokens(0xFFFFFFFFu); }, INVALID,
       "max_tokens: 4294967295 is out of range"},
      {"temperature NaN", sampling([](auto& s) { s.set_temperature(kNaN); }), INVALID,
       "sampling.temperature"},
      {"temperature -1", sampling([](auto& s) { s.set_temperature(-1); }), INVALID,
       "sampling.temperature"},
      {"temperature 1e30", sampling([](auto& s) { s.set_temperature(1e30f); }), INVALID,
       "sampling.temperature"},
      {"temperature +inf", sampling([](auto& s) { s.set_temperature(kInf); }), INVALID,
       "sampling.temperature"},
      {"top_k -1", sampling([](auto& s) { s.set_top_k(-1); }), INVALID, "sampling.top_k"},
      {"top_k INT32_MIN", sampling([](auto& s) { s.set_top_k(INT32_MIN); }), INVALID,
       "sampling.top_k"},
      {"top_k INT32_MAX (past the vocabulary)", sampling([](auto& s) { s.set_top_k(INT32_MAX); }),
       INVALID, "sampling.top_k"},
      {"top_p NaN", sampling([](auto& s) { s.set_top_p(kNaN); }), INVALID, "sampling.top_p"},
      {"top_p -0.5", sampling([](auto& s) { s.set_top_p(-0.5f); }), INVALID, "sampling.top_p"},
      {"top_p 1.5", sampling([](auto& s) { s.set_top_p(1.5f); }), INVALID, "sampling.top_p"},
      {"top_p -inf", sampling([](auto& s) { s.set_top_p(-kInf); }), INVALID, "sampling.top_p"},
      {"min_p 1", sampling([](auto& s) { s.set_min_p(1); }), INVALID, "sampling.min_p"},
      {"min_p NaN", sampling([](auto& s) { s.set_min_p(kNaN); }), INVALID, "sampling.min_p"},
      {"min_p -0.1", sampling([](auto& s) { s.set_min_p(-0.1f); }), INVALID, "sampling.min_p"},
      {"repetition_penalty -1", sampling([](auto& s) { s.set_repetition_penalty(-1); }), INVALID,
       "sampling.repetition_penalty"},
      {"repetition_penalty 1e9", sampling([](auto& s) { s.set_repetition_penalty(1e9f); }), INVALID,
       "sampling.repetition_penalty"},
      {"repetition_penalty NaN", sampling([](auto& s) { s.set_repetition_penalty(kNaN); }), INVALID,
       "sampling.repetition_penalty"},
      {"presence_penalty 2.5", sampling([](auto& s) { s.set_presence_penalty(2.5f); }), INVALID,
       "sampling.presence_penalty"},
      {"presence_penalty -inf", sampling([](auto& s) { s.set_presence_penalty(-kInf); }), INVALID,
       "sampling.presence_penalty"},
      {"frequency_penalty NaN", sampling([](auto& s) { s.set_frequency_penalty(kNaN); }), INVALID,
       "sampling.frequency_penalty"},
      {"frequency_penalty -1e30", sampling([](auto& s) { s.set_frequency_penalty(-1e30f); }),
       INVALID, "sampling.frequency_penalty"},
      {"penalty_last_n -1", sampling([](auto& s) { s.set_penalty_last_n(-1); }), INVALID,
       "sampling.penalty_last_n"},
      {"penalty_last_n 4097", sampling([](auto& s) { s.set_penalty_last_n(4097); }), INVALID,
       "sampling.penalty_last_n"},
      {"penalty_last_n INT32_MAX", sampling([](auto& s) { s.set_penalty_last_n(INT32_MAX); }),
       INVALID, "sampling.penalty_last_n"},
      {"empty prompt", [](auto& r) { r.clear_prompt(); }, INVALID, "prompt: must not be empty"},
      {"17 stop strings",
       [](auto& r) {
         for (int i = 0; i < 17; ++i) r.add_stop("s" + std::to_string(i));
       },
       INVALID, "stop: 17 strings given, at most 16 allowed"},
      {"10,000 stop strings",
       [](auto& r) {
         for (int i = 0; i < 10000; ++i) r.add_stop("x");
       },
       INVALID, "stop: 10000 strings given, at most 16 allowed"},
      {"empty stop string", [](auto& r) { r.add_stop(""); }, INVALID, "stop[0]: must not be empty"},
      {"empty stop string among others",
       [](auto& r) {
         for (int i = 0; i < 5; ++i) r.add_stop("s" + std::to_string(i));
         r.add_stop("");
       },
       INVALID, "stop[5]: must not be empty"},
      {"257-byte stop string", [](auto& r) { r.add_stop(std::string(257, 'z')); }, INVALID,
       "stop[0]: 257 bytes, at most 256 allowed"},
      // Accepted edges.
      {"0 stop strings", [](auto& r) { r.clear_stop(); }, grpc::StatusCode::OK, ""},
      {"16 stop strings of 256 bytes",
       [](auto& r) {
         for (int i = 0; i < 16; ++i) r.add_stop(std::string(256, static_cast<char>('a' + i)));
       },
       grpc::StatusCode::OK, ""},
      {"max_tokens at the limit (stops at the context)", [](auto& r) { r.set_max_tokens(4096); },
       grpc::StatusCode::OK, ""},
      {"seed 2^64-1, top_k 0, top_p 1, min_p 0", sampling([](auto& s) {
         s.set_seed(UINT64_MAX);
         s.set_top_k(0);
         s.set_top_p(1);
         s.set_min_p(0);
       }),
       grpc::StatusCode::OK, ""},
      {"penalties at their bounds", sampling([](auto& s) {
         s.set_repetition_penalty(10);
         s.set_presence_penalty(-2);
         s.set_frequency_penalty(2);
         s.set_penalty_last_n(4096);
       }),
       grpc::StatusCode::OK, ""},
      {"NUL bytes, emoji, RTL and combining marks in the prompt",
       [](auto& r) {
         // Appended, not operator+ on a temporary: GCC 12 at -O2 under TSan
         // warns (-Warray-bounds) about the latter's inlined memcpy.
         std::string prompt("a\0b\0", 4);
         prompt.append("\xF0\x9F\x94\xA5 \xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D e\xCC\x81");
         r.set_prompt(prompt);
       },
       grpc::StatusCode::OK, ""},
      {"stop string of NUL and emoji",
       [](auto& r) {
         std::string stop("\0", 1);
         stop.append("\xF0\x9F\x94\xA5");
         r.add_stop(stop);
       },
       grpc::StatusCode::OK, ""},
  };
  for (const RequestCase& c : cases) {
    SCOPED_TRACE(c.name);
    GenerateRequest req = good_request();
    c.edit(req);
    // Streaming.
    const StreamResult r = generate(*stub_, req);
    EXPECT_EQ(r.status.error_code(), c.code) << describe_status(r.status);
    EXPECT_NE(r.status.error_message().find(c.message), std::string::npos)
        << describe_status(r.status);
    if (c.code == grpc::StatusCode::OK) {
      EXPECT_EQ(r.dones.size(), 1u);
    } else {
      EXPECT_TRUE(r.pieces.empty() && r.dones.empty()) << "output on a refused request";
    }
    // Unary.
    v1::CompleteResponse resp;
    const grpc::Status s = complete(*stub_, req, &resp);
    EXPECT_EQ(s.error_code(), c.code) << describe_status(s);
    EXPECT_NE(s.error_message().find(c.message), std::string::npos) << describe_status(s);
    expect_still_serving(c.name);
  }
}

TEST_F(HostileInputTest, PromptsAtAndPastTheContext) {
  // One token per "a", plus BOS: checked, since the cases depend on it.
  ASSERT_EQ(tokens_of(a_prompt(10)), 11u);
  ASSERT_EQ(tokens_of(a_prompt(kContext - 1)), kContext);

  {  // Context - 1 prompt tokens: room for exactly one more position.
    v1::GenerateRequest req = make_request(kDemo, a_prompt(kContext - 2), 100);
    req.set_ignore_eos(true);
    const StreamResult r = generate(*stub_, req);
    ASSERT_TRUE(r.status.ok()) << describe_status(r.status);
    ASSERT_EQ(r.dones.size(), 1u);
    EXPECT_EQ(r.dones.front().usage().prompt_tokens(), kContext - 1);
    EXPECT_EQ(r.dones.front().finish_reason(), v1::FINISH_REASON_CONTEXT_LIMIT);
    EXPECT_GE(r.dones.front().usage().generated_tokens(), 1u);
    EXPECT_LE(r.dones.front().usage().generated_tokens(), 2u);
    expect_still_serving("a prompt of context - 1 tokens");
  }
  struct Case {
    std::size_t words;
    std::string message;
  };
  const std::vector<Case> cases = {
      {kContext - 1,
       "prompt: 64 tokens do not fit the context of 64 tokens (at most 63 leave room "
       "to generate)"},
      {kContext, "prompt: 65 tokens do not fit the context of 64 tokens"},
      // So long that no tokenization could fit: refused before tokenizing.
      {9999, "prompt: 19997 bytes of text cannot fit the context of 64 tokens"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.words + 1) + " prompt tokens");
    v1::GenerateRequest req = make_request(kDemo, a_prompt(c.words), 8);
    const StreamResult r = generate(*stub_, req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << describe_status(r.status);
    EXPECT_NE(r.status.error_message().find(c.message), std::string::npos)
        << describe_status(r.status);
    EXPECT_TRUE(r.pieces.empty());
    v1::CompleteResponse resp;
    const grpc::Status s = complete(*stub_, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << describe_status(s);
    expect_still_serving(std::to_string(c.words + 1) + " prompt tokens");
  }
  // Refused before taking an instance: nothing waits or runs.
  v1::ModelInfo info;
  ASSERT_TRUE(get_model(*stub_, kDemo, &info).ok());
  EXPECT_EQ(info.instances_busy(), 0u);
  EXPECT_EQ(info.queue_depth(), 0u);
}

TEST_F(HostileInputTest, MessagesOverTheLimitAreResourceExhausted) {
  struct Case {
    std::string name;
    std::string method;
    std::string bytes;
  };
  v1::GenerateRequest big_prompt = good_request();
  big_prompt.set_prompt(std::string(kMaxMessageBytes + 1, 'a'));
  v1::GenerateRequest many_stops = good_request();
  for (int i = 0; i < 20000; ++i) many_stops.add_stop("xyz");
  v1::TokenizeRequest big_text;
  big_text.set_model(kDemo);
  big_text.set_text(std::string(4 * kMaxMessageBytes, 'b'));
  v1::DetokenizeRequest many_ids;
  many_ids.set_model(kDemo);
  for (int i = 0; i < kMaxMessageBytes; ++i) many_ids.add_token_ids(1000);
  const std::vector<Case> cases = {
      {"prompt of max-message-bytes + 1", "Complete", big_prompt.SerializeAsString()},
      {"20,000 stop strings (over the limit)", "Complete", many_stops.SerializeAsString()},
      {"Tokenize of 4 x max-message-bytes", "Tokenize", big_text.SerializeAsString()},
      {"Detokenize of 65,536 ids", "Detokenize", many_ids.SerializeAsString()},
      {"1 MiB of zeros", "Complete", std::string(1 << 20, '\0')},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_GT(c.bytes.size(), static_cast<std::size_t>(kMaxMessageBytes));
    const grpc::Status s = raw_unary(*channel_, c.method, c.bytes, nullptr);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << describe_status(s);
    std::cout << "[hostile] " << c.name << " (" << c.bytes.size()
              << " bytes): " << describe_status(s) << std::endl;
    if (c.method == "Complete") {
      int messages = 0;
      const grpc::Status g = raw_generate(*channel_, c.bytes, &messages);
      EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << describe_status(g);
      EXPECT_EQ(messages, 0);
    }
    expect_still_serving(c.name);
  }
}

TEST_F(HostileInputTest, UnknownModelNamesAreNotFoundQuotingTheName) {
  const std::vector<std::string> names = {
      "",  // left out: INVALID_ARGUMENT "model: missing (serving: ...)" instead
      "no-such-model",
      "DEMO",
      "demo ",
      " demo",
      "../../../etc/passwd",
      "'; DROP TABLE models; --",
      "%s%s%n%x{}{0}",
      "\xE6\xA8\xA1\xE5\x9E\x8B\xF0\x9F\x94\xA5",  // 模型🔥
      "line\nbreak\r\ttab",
      std::string("nul\0inside", 10),
      "\x7F\x01\x1B[31mred",
      std::string(2000, 'x'),
  };
  for (const std::string& name : names) {
    SCOPED_TRACE("model name of " + std::to_string(name.size()) + " bytes: " + name.substr(0, 40));
    const std::string quoted = name.empty() ? "model: missing" : "'" + name + "'";
    auto check = [&](const grpc::Status& s, const char* rpc) {
      EXPECT_EQ(s.error_code(),
                name.empty() ? grpc::StatusCode::INVALID_ARGUMENT : grpc::StatusCode::NOT_FOUND)
          << rpc << ": " << describe_status(s);
      EXPECT_NE(s.error_message().find(quoted), std::string::npos)
          << rpc << " should quote the name: " << describe_status(s);
      EXPECT_NE(s.error_message().find("'demo'"), std::string::npos)
          << rpc << " should list the served models: " << describe_status(s);
    };
    v1::GenerateRequest req = good_request();
    req.set_model(name);
    check(generate(*stub_, req).status, "Generate");
    v1::CompleteResponse cresp;
    check(complete(*stub_, req, &cresp), "Complete");
    v1::ModelInfo info;
    check(get_model(*stub_, name, &info), "GetModel");
    {
      v1::TokenizeRequest t;
      t.set_model(name);
      t.set_text("hello");
      v1::TokenizeResponse tr;
      grpc::ClientContext ctx;
      set_deadline(ctx, seconds(30));
      check(stub_->Tokenize(&ctx, t, &tr), "Tokenize");
    }
    {
      v1::DetokenizeRequest d;
      d.set_model(name);
      d.add_token_ids(1);
      v1::DetokenizeResponse dr;
      grpc::ClientContext ctx;
      set_deadline(ctx, seconds(30));
      check(stub_->Detokenize(&ctx, d, &dr), "Detokenize");
    }
    // The health service knows no such service ("" is the whole server; gRPC's
    // health service refuses names over 200 bytes as unparsable).
    if (!name.empty()) {
      int serving = -1;
      const grpc::Status h = health_check(*channel_, name, &serving);
      EXPECT_TRUE(h.error_code() == grpc::StatusCode::NOT_FOUND ||
                  (name.size() > 200 && h.error_code() == grpc::StatusCode::INVALID_ARGUMENT))
          << describe_status(h);
    }
    expect_still_serving("model name " + name.substr(0, 40));
  }
}

TEST_F(HostileInputTest, TokenIdsOutsideTheVocabularyAreInvalidArgument) {
  v1::ModelInfo info;
  ASSERT_TRUE(get_model(*stub_, kDemo, &info).ok());
  const auto vocab = static_cast<std::int32_t>(info.vocab_size());
  for (const std::int32_t id : {-1, INT32_MIN, vocab, INT32_MAX}) {
    SCOPED_TRACE(id);
    v1::DetokenizeRequest d;
    d.set_model(kDemo);
    d.add_token_ids(1);
    d.add_token_ids(id);
    v1::DetokenizeResponse dr;
    grpc::ClientContext ctx;
    set_deadline(ctx, seconds(30));
    const grpc::Status s = stub_->Detokenize(&ctx, d, &dr);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << describe_status(s);
    EXPECT_NE(s.error_message().find("token_ids[1]: " + std::to_string(id)), std::string::npos)
        << describe_status(s);
    expect_still_serving("token id " + std::to_string(id));
  }
}

// Wire bytes the generated code would not produce. Generate and Complete
// parse their request bytes themselves (gRPC's parser would refuse invalid
// UTF-8 in a proto3 string with a bare INTERNAL): INVALID_ARGUMENT naming the
// field. The other methods go through gRPC's parser: whatever the status, it
// must be an error (not UNKNOWN) and leave the server serving.
TEST_F(HostileInputTest, InvalidUtf8AndMalformedProtobufAreRefused) {
  const std::string good = good_request().SerializeAsString();
  struct Case {
    std::string name;
    std::string bytes;
    std::string message;
  };
  const std::string kMalformed = "request: not a valid hearth.v1.GenerateRequest message";
  // Later occurrences of a singular field win when parsing: appending a field
  // overrides the good request's value.
  const std::vector<Case> cases = {
      {"prompt 0xFF 0xFE", good + pb_bytes_field(2, "\xFF\xFE"), "prompt: not valid UTF-8"},
      {"prompt with a truncated sequence", good + pb_bytes_field(2, "abc\xC3"),
       "prompt: not valid UTF-8 (byte 3 of the field)"},
      {"prompt with an overlong '/'", good + pb_bytes_field(2, "\xC0\xAF"),
       "prompt: not valid UTF-8"},
      {"prompt with a UTF-16 surrogate", good + pb_bytes_field(2, "a\xED\xA0\x80z"),
       "prompt: not valid UTF-8"},
      {"prompt with a code point past U+10FFFF", good + pb_bytes_field(2, "\xF4\x90\x80\x80"),
       "prompt: not valid UTF-8"},
      {"stop string 0xFF", good + pb_bytes_field(5, "\xFF"), "stop[0]: not valid UTF-8"},
      {"stop[3] invalid among valid ones",
       good + pb_bytes_field(5, "a") + pb_bytes_field(5, "b") + pb_bytes_field(5, "c") +
           pb_bytes_field(5, "\xE2\x82"),
       "stop[3]: not valid UTF-8"},
      {"model name 0xC3 0x28", good + pb_bytes_field(1, "\xC3\x28"), "model: not valid UTF-8"},
      {"truncated varint", good + "\x18\xFF\xFF", kMalformed},
      {"length past the end", good + "\x12\x7F" + "abc", kMalformed},
      {"field number 0", good + std::string("\x00\x01", 2), kMalformed},
      {"end-group without start-group", good + "\x0C", kMalformed},
      {"random bytes", "\xDE\xAD\xBE\xEF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\x01", kMalformed},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string resp;
    const grpc::Status s = raw_unary(*channel_, "Complete", c.bytes, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << describe_status(s);
    EXPECT_NE(s.error_message().find(c.message), std::string::npos) << describe_status(s);
    int messages = 0;
    const grpc::Status g = raw_generate(*channel_, c.bytes, &messages);
    EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << describe_status(g);
    EXPECT_NE(g.error_message().find(c.message), std::string::npos) << describe_status(g);
    EXPECT_EQ(messages, 0);
    std::cout << "[hostile] " << c.name << ": Complete " << describe_status(s) << "; Generate "
              << describe_status(g) << std::endl;
    expect_still_serving(c.name);
  }

  // The other methods: gRPC's parser.
  v1::TokenizeRequest t;
  t.set_model(kDemo);
  t.set_text("ok");
  v1::DetokenizeRequest d;
  d.set_model(kDemo);
  d.add_token_ids(1);
  const std::vector<std::pair<std::string, std::pair<std::string, std::string>>> others = {
      {"Tokenize text 0xFF", {"Tokenize", t.SerializeAsString() + pb_bytes_field(2, "\xFF")}},
      {"Tokenize model 0xFF", {"Tokenize", t.SerializeAsString() + pb_bytes_field(1, "\xFF")}},
      {"Detokenize model 0xFF", {"Detokenize", d.SerializeAsString() + pb_bytes_field(1, "\xFF")}},
      {"GetModel model 0xFF", {"GetModel", pb_bytes_field(1, "demo\xFF")}},
      {"GetModel random bytes", {"GetModel", "\xDE\xAD\xBE\xEF"}},
  };
  for (const auto& [name, call] : others) {
    SCOPED_TRACE(name);
    const grpc::Status s = raw_unary(*channel_, call.first, call.second, nullptr);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.error_code(), grpc::StatusCode::UNKNOWN) << describe_status(s);
    std::cout << "[hostile] " << name << ": " << describe_status(s) << std::endl;
    expect_still_serving(name);
  }
}

TEST_F(HostileInputTest, UnknownFieldsAreIgnored) {
  // Forward compatibility: fields this server does not know are skipped.
  const std::string bytes = good_request().SerializeAsString() + pb_varint_field(99, 12345) +
                            pb_bytes_field(100, "from a newer client") +
                            pb_bytes_field(4, pb_varint_field(77, 1));  // inside sampling
  std::string resp;
  const grpc::Status s = raw_unary(*channel_, "Complete", bytes, &resp);
  ASSERT_TRUE(s.ok()) << describe_status(s);
  v1::CompleteResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(resp));
  EXPECT_EQ(parsed.token_ids_size(), 4);
  // A known field number with the wrong wire type is an unknown field too
  // (protobuf's rule): the request keeps its prompt.
  const std::string wrong_type = good_request().SerializeAsString() + pb_varint_field(2, 5);
  const grpc::Status w = raw_unary(*channel_, "Complete", wrong_type, &resp);
  ASSERT_TRUE(w.ok()) << describe_status(w);
  ASSERT_TRUE(parsed.ParseFromString(resp));
  EXPECT_EQ(parsed.token_ids_size(), 4);
}

}  // namespace
}  // namespace hearth::testing
