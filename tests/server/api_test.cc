// The request-level API: every validation error (status code and the field
// its message names), the boundaries that must still be accepted,
// Tokenize/Detokenize against the engine's tokenizer, and what
// ListModels/GetModel report.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "engine/unicode.h"
#include "tests/server/test_util.h"

namespace hearth::testing {
namespace {

constexpr std::uint32_t kMaxTokensLimit = 64;
constexpr std::uint32_t kContext = 64;
constexpr std::uint32_t kDemoVocab = 4096;

// The built-in demo model as the engine builds it: the reference for the
// server's tokenizer and model facts.
struct DemoReference {
  std::string bytes;
  std::unique_ptr<engine::GgufFile> file;
  std::unique_ptr<engine::Tokenizer> tokenizer;
  std::uint64_t parameters = 0;
};
const DemoReference& demo_reference() {
  static DemoReference* ref = [] {
    auto* r = new DemoReference();
    auto bytes = engine::synthesize_model(engine::demo_model_spec());
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (!bytes.ok()) return r;
    r->bytes = std::move(*bytes);
    auto file = engine::GgufFile::parse(reinterpret_cast<const std::uint8_t*>(r->bytes.data()),
                                        r->bytes.size(), "demo");
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return r;
    r->file = std::move(*file);
    for (const auto& t : r->file->tensors()) r->parameters += t.n_elements;
    auto tok = engine::Tokenizer::from_gguf(*r->file);
    EXPECT_TRUE(tok.ok()) << tok.status();
    if (tok.ok()) r->tokenizer = std::move(*tok);
    return r;
  }();
  return *ref;
}

class ServerApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess();
    if (!server_->start(
            HEARTH_SERVER_BIN,
            server_args({"--instances", "2", "--queue", "3", "--context", std::to_string(kContext),
                         "--max-tokens-limit", std::to_string(kMaxTokensLimit)})))
      start_error_ = new std::string(server_->error());
  }
  static void TearDownTestSuite() {
    delete server_;
    delete start_error_;
    server_ = nullptr;
    start_error_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
    ASSERT_TRUE(server_->running()) << server_->describe();
    stub_ = make_stub(plain_channel(server_->grpc_address()));
  }

  v1::GenerateRequest ok_request() const {
    v1::GenerateRequest r = make_request("demo", "Hello there", 2);
    r.set_ignore_eos(true);
    return r;
  }

  // `req` is refused by Generate and by Complete with `code`, and the
  // message names `field`.
  void expect_refused(const v1::GenerateRequest& req, grpc::StatusCode code,
                      const std::string& field, const std::string& what) {
    SCOPED_TRACE(what);
    const StreamResult s = generate(*stub_, req);
    EXPECT_EQ(s.status.error_code(), code) << "Generate: " << status_text(s.status);
    EXPECT_NE(s.status.error_message().find(field), std::string::npos)
        << "Generate: the message should name '" << field << "': " << status_text(s.status);
    EXPECT_TRUE(s.pieces.empty() && s.dones.empty()) << "Generate sent messages before failing";
    v1::CompleteResponse resp;
    const grpc::Status c = complete(*stub_, req, &resp);
    EXPECT_EQ(c.error_code(), code) << "Complete: " << status_text(c);
    EXPECT_NE(c.error_message().find(field), std::string::npos)
        << "Complete: the message should name '" << field << "': " << status_text(c);
  }
  void expect_invalid(const std::function<void(v1::GenerateRequest&)>& mutate,
                      const std::string& field, const std::string& what) {
    v1::GenerateRequest req = ok_request();
    mutate(req);
    expect_refused(req, grpc::StatusCode::INVALID_ARGUMENT, field, what);
  }
  void expect_accepted(const std::function<void(v1::GenerateRequest&)>& mutate,
                       const std::string& what) {
    SCOPED_TRACE(what);
    v1::GenerateRequest req = ok_request();
    mutate(req);
    v1::CompleteResponse resp;
    const grpc::Status c = complete(*stub_, req, &resp);
    EXPECT_TRUE(c.ok()) << status_text(c);
  }

  std::vector<std::int32_t> tokenize(const std::string& text, std::optional<bool> add_bos = {},
                                     bool parse_special = false,
                                     std::vector<std::string>* pieces = nullptr) {
    grpc::ClientContext ctx;
    set_deadline(ctx);
    v1::TokenizeRequest req;
    req.set_model("demo");
    req.set_text(text);
    if (add_bos) req.set_add_bos(*add_bos);
    req.set_parse_special(parse_special);
    v1::TokenizeResponse resp;
    const grpc::Status s = stub_->Tokenize(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << status_text(s);
    if (pieces) pieces->assign(resp.pieces().begin(), resp.pieces().end());
    EXPECT_EQ(resp.pieces_size(), resp.token_ids_size());
    return {resp.token_ids().begin(), resp.token_ids().end()};
  }
  grpc::Status detokenize(const std::vector<std::int32_t>& ids, std::string* text,
                          const std::string& model = "demo") {
    grpc::ClientContext ctx;
    set_deadline(ctx);
    v1::DetokenizeRequest req;
    req.set_model(model);
    for (std::int32_t id : ids) req.add_token_ids(id);
    v1::DetokenizeResponse resp;
    const grpc::Status s = stub_->Detokenize(&ctx, req, &resp);
    *text = resp.text();
    return s;
  }

  static ServerProcess* server_;
  static std::string* start_error_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};
ServerProcess* ServerApiTest::server_ = nullptr;
std::string* ServerApiTest::start_error_ = nullptr;

TEST_F(ServerApiTest, TheBaselineRequestIsAccepted) {
  // Every refusal below changes one field of this request.
  expect_accepted([](auto&) {}, "baseline");
}

TEST_F(ServerApiTest, UnknownModelIsNotFound) {
  v1::GenerateRequest req = ok_request();
  req.set_model("no-such-model");
  expect_refused(req, grpc::StatusCode::NOT_FOUND, "no-such-model", "Generate/Complete");
  v1::ModelInfo info;
  grpc::Status s = get_model(*stub_, "no-such-model", &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << status_text(s);
  EXPECT_NE(s.error_message().find("no-such-model"), std::string::npos) << status_text(s);
  {
    grpc::ClientContext ctx;
    set_deadline(ctx);
    v1::TokenizeRequest treq;
    treq.set_model("no-such-model");
    treq.set_text("hi");
    v1::TokenizeResponse tresp;
    s = stub_->Tokenize(&ctx, treq, &tresp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << status_text(s);
  }
  std::string text;
  s = detokenize({5, 6}, &text, "no-such-model");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << status_text(s);
  // Left out, the required field is invalid, not an unknown name.
  v1::GenerateRequest unnamed = ok_request();
  unnamed.set_model("");
  expect_refused(unnamed, grpc::StatusCode::INVALID_ARGUMENT, "model: missing", "no model");
}

TEST_F(ServerApiTest, PromptAndMaxTokensAreValidated) {
  expect_invalid([](auto& r) { r.set_prompt(""); }, "prompt", "empty prompt");
  expect_invalid([](auto& r) { r.set_max_tokens(0); }, "max_tokens", "max_tokens 0");
  expect_invalid([](auto& r) { r.set_max_tokens(kMaxTokensLimit + 1); }, "max_tokens",
                 "max_tokens beyond --max-tokens-limit");
  expect_invalid([](auto& r) { r.set_max_tokens(std::numeric_limits<std::uint32_t>::max()); },
                 "max_tokens", "max_tokens 2^32-1");
  expect_accepted([](auto& r) { r.set_max_tokens(kMaxTokensLimit); }, "max_tokens at the limit");
}

TEST_F(ServerApiTest, SamplingParametersAreValidated) {
  using R = v1::GenerateRequest;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::function<void(R&)> mutate;
    const char* field;
    const char* what;
  };
  const std::vector<Case> bad = {
      {[](R& r) { r.mutable_sampling()->set_temperature(-0.5f); }, "temperature",
       "temperature -0.5"},
      {[](R& r) { r.mutable_sampling()->set_temperature(100.5f); }, "temperature",
       "temperature 100.5"},
      {[&](R& r) { r.mutable_sampling()->set_temperature(nan); }, "temperature", "temperature NaN"},
      {[&](R& r) { r.mutable_sampling()->set_temperature(inf); }, "temperature", "temperature inf"},
      {[](R& r) { r.mutable_sampling()->set_top_k(-1); }, "top_k", "top_k -1"},
      {[](R& r) { r.mutable_sampling()->set_top_k(kDemoVocab + 1); }, "top_k", "top_k vocab+1"},
      {[](R& r) { r.mutable_sampling()->set_top_p(-0.1f); }, "top_p", "top_p -0.1"},
      {[](R& r) { r.mutable_sampling()->set_top_p(1.5f); }, "top_p", "top_p 1.5"},
      {[&](R& r) { r.mutable_sampling()->set_top_p(nan); }, "top_p", "top_p NaN"},
      {[](R& r) { r.mutable_sampling()->set_min_p(-0.1f); }, "min_p", "min_p -0.1"},
      {[](R& r) { r.mutable_sampling()->set_min_p(1.0f); }, "min_p", "min_p 1"},
      {[](R& r) { r.mutable_sampling()->set_repetition_penalty(-1.0f); }, "repetition_penalty",
       "repetition_penalty -1"},
      {[](R& r) { r.mutable_sampling()->set_repetition_penalty(10.5f); }, "repetition_penalty",
       "repetition_penalty 10.5"},
      {[](R& r) { r.mutable_sampling()->set_presence_penalty(2.5f); }, "presence_penalty",
       "presence_penalty 2.5"},
      {[](R& r) { r.mutable_sampling()->set_presence_penalty(-2.5f); }, "presence_penalty",
       "presence_penalty -2.5"},
      {[](R& r) { r.mutable_sampling()->set_frequency_penalty(2.5f); }, "frequency_penalty",
       "frequency_penalty 2.5"},
      {[](R& r) { r.mutable_sampling()->set_frequency_penalty(-3.0f); }, "frequency_penalty",
       "frequency_penalty -3"},
      {[](R& r) { r.mutable_sampling()->set_penalty_last_n(-1); }, "penalty_last_n",
       "penalty_last_n -1"},
      {[](R& r) { r.mutable_sampling()->set_penalty_last_n(4097); }, "penalty_last_n",
       "penalty_last_n 4097"},
  };
  for (const Case& c : bad) expect_invalid(c.mutate, c.field, c.what);

  // The documented ranges' ends are accepted.
  const std::vector<std::pair<std::function<void(R&)>, const char*>> good = {
      {[](R& r) { r.mutable_sampling()->set_temperature(100.0f); }, "temperature 100"},
      {[](R& r) { r.mutable_sampling()->set_top_k(kDemoVocab); }, "top_k vocab"},
      {[](R& r) { r.mutable_sampling()->set_top_p(1.0f); }, "top_p 1"},
      {[](R& r) { r.mutable_sampling()->set_min_p(0.99f); }, "min_p 0.99"},
      {[](R& r) { r.mutable_sampling()->set_repetition_penalty(10.0f); }, "repetition_penalty 10"},
      {[](R& r) {
         r.mutable_sampling()->set_presence_penalty(-2.0f);
         r.mutable_sampling()->set_frequency_penalty(2.0f);
       },
       "penalties -2 / 2"},
      {[](R& r) { r.mutable_sampling()->set_penalty_last_n(4096); }, "penalty_last_n 4096"},
      {[](R& r) { r.mutable_sampling()->set_penalty_last_n(0); }, "penalty_last_n 0"},
  };
  for (const auto& [mutate, what] : good) expect_accepted(mutate, what);
}

TEST_F(ServerApiTest, StopStringsAreValidated) {
  expect_invalid(
      [](auto& r) {
        for (int i = 0; i < 17; ++i) r.add_stop("stop" + std::to_string(i));
      },
      "stop", "17 stop strings");
  expect_invalid([](auto& r) { r.add_stop(""); }, "stop", "an empty stop string");
  expect_invalid(
      [](auto& r) {
        r.add_stop("fine");
        r.add_stop("");
      },
      "stop", "an empty stop string after a good one");
  expect_invalid([](auto& r) { r.add_stop(std::string(257, 'x')); }, "stop",
                 "a 257-byte stop string");
  expect_accepted(
      [](auto& r) {
        for (int i = 0; i < 16; ++i) r.add_stop(std::string(255, 'x') + static_cast<char>('a' + i));
      },
      "16 stop strings of 256 bytes");
}

TEST_F(ServerApiTest, PromptMustLeaveRoomInTheContext) {
  // Grow a prompt one word at a time until its tokens (with the BOS the
  // model's rule adds, as Generate does) fill the context exactly.
  std::string prompt = "start";
  std::string fits;  // the longest prompt seen that leaves one position free
  while (tokenize(prompt).size() < kContext) {
    if (tokenize(prompt).size() == kContext - 1) fits = prompt;
    prompt += " x";
    ASSERT_LT(prompt.size(), 10u * kContext) << "the prompt never reached the context";
  }
  ASSERT_EQ(tokenize(prompt).size(), kContext) << "pick words that add one token each";
  ASSERT_FALSE(fits.empty());
  expect_invalid([&](auto& r) { r.set_prompt(prompt); }, "prompt", "prompt fills the context");
  expect_invalid([&](auto& r) { r.set_prompt(prompt + " and much more text beyond"); }, "prompt",
                 "prompt beyond the context");
  // One position left: one token is generated, then the context is full.
  v1::GenerateRequest req = ok_request();
  req.set_prompt(fits);
  req.set_max_tokens(10);
  v1::CompleteResponse resp;
  const grpc::Status s = complete(*stub_, req, &resp);
  ASSERT_TRUE(s.ok()) << status_text(s);
  EXPECT_EQ(resp.done().usage().prompt_tokens(), kContext - 1);
  EXPECT_GE(resp.token_ids_size(), 1);
  EXPECT_EQ(resp.done().finish_reason(), v1::FINISH_REASON_CONTEXT_LIMIT);
}

TEST_F(ServerApiTest, TokenizeMatchesTheEngineAndDetokenizeRoundTrips) {
  const DemoReference& ref = demo_reference();
  ASSERT_NE(ref.tokenizer, nullptr);
  for (const std::string text : {"Hello world", "  two leading spaces", "line one\nline two",
                                 "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x99\x82", "x"}) {
    SCOPED_TRACE(text);
    for (std::optional<bool> bos :
         {std::optional<bool>(), std::optional<bool>(true), std::optional<bool>(false)}) {
      std::vector<std::string> pieces;
      const std::vector<std::int32_t> ids = tokenize(text, bos, false, &pieces);
      engine::TokenizeOptions opts;
      opts.add_bos = bos;
      auto want = ref.tokenizer->encode(text, opts);
      ASSERT_TRUE(want.ok());
      EXPECT_EQ(ids, *want);
      ASSERT_EQ(pieces.size(), ids.size());
      for (std::size_t i = 0; i < ids.size(); ++i)
        EXPECT_EQ(pieces[i], std::string(ref.tokenizer->piece(ids[i]))) << "piece " << i;
      if (bos.has_value()) {
        ASSERT_FALSE(ids.empty());
        EXPECT_EQ(ids.front() == ref.tokenizer->bos(), *bos);
      }
      std::string back;
      const grpc::Status s = detokenize(ids, &back);
      ASSERT_TRUE(s.ok()) << status_text(s);
      EXPECT_EQ(back, text) << "Detokenize(Tokenize(text)) != text";
    }
  }
  // parse_special turns "<s>" into the BOS id; without it "<s>" is text.
  const std::vector<std::int32_t> special = tokenize("<s>Once", false, true);
  ASSERT_FALSE(special.empty());
  EXPECT_EQ(special.front(), ref.tokenizer->bos());
  const std::vector<std::int32_t> plain = tokenize("<s>Once", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), ref.tokenizer->bos()), 0);
}

// A token that is part of a character (a byte token) alone gives U+FFFD,
// not bytes that no proto string may hold (clients refuse such a response).
TEST_F(ServerApiTest, DetokenizeOfAPartialCharacterGivesReplacementCharacters) {
  const DemoReference& ref = demo_reference();
  ASSERT_NE(ref.tokenizer, nullptr);
  std::size_t partial = 0;
  for (std::int32_t id = 0; id < static_cast<std::int32_t>(kDemoVocab); ++id) {
    const std::string raw = ref.tokenizer->decode(std::vector<std::int32_t>{id});
    if (engine::is_valid_utf8(raw)) continue;
    ++partial;
    std::string text;
    const grpc::Status s = detokenize({id}, &text);
    ASSERT_TRUE(s.ok()) << "token " << id << ": " << status_text(s);
    EXPECT_TRUE(engine::is_valid_utf8(text)) << "token " << id;
    EXPECT_EQ(text, engine::sanitize_utf8(raw)) << "token " << id;
  }
  EXPECT_GT(partial, 0u) << "the demo vocabulary has no byte token to check";
}

TEST_F(ServerApiTest, DetokenizeRefusesIdsOutsideTheVocabulary) {
  std::string text;
  for (const std::vector<std::int32_t>& ids :
       {std::vector<std::int32_t>{300, static_cast<std::int32_t>(kDemoVocab)},
        std::vector<std::int32_t>{-1}, std::vector<std::int32_t>{1 << 30}}) {
    const grpc::Status s = detokenize(ids, &text);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status_text(s);
    EXPECT_NE(s.error_message().find("token_ids"), std::string::npos) << status_text(s);
  }
  // The last id of the vocabulary is fine.
  const grpc::Status s = detokenize({static_cast<std::int32_t>(kDemoVocab - 1)}, &text);
  EXPECT_TRUE(s.ok()) << status_text(s);
}

TEST_F(ServerApiTest, ListModelsAndGetModelDescribeTheDemoModel) {
  const DemoReference& ref = demo_reference();
  grpc::ClientContext ctx;
  set_deadline(ctx);
  v1::ListModelsResponse list;
  const grpc::Status s = stub_->ListModels(&ctx, v1::ListModelsRequest(), &list);
  ASSERT_TRUE(s.ok()) << status_text(s);
  ASSERT_EQ(list.models_size(), 1) << list.DebugString();
  const v1::ModelInfo& m = list.models(0);
  EXPECT_EQ(m.name(), "demo");
  EXPECT_TRUE(m.demo());
  EXPECT_EQ(m.source(), "builtin:demo");
  EXPECT_EQ(m.architecture(), "llama");
  EXPECT_EQ(m.quantization(), "Q8_0");
  EXPECT_EQ(m.parameters(), ref.parameters);
  EXPECT_EQ(m.context_length(), kContext);
  EXPECT_EQ(m.vocab_size(), kDemoVocab);
  EXPECT_EQ(m.instances(), 2u);
  EXPECT_EQ(m.queue_capacity(), 3u);
  EXPECT_EQ(m.state(), v1::ModelInfo::STATE_SERVING);
  EXPECT_EQ(m.kv_cache_type(), "int8");
  EXPECT_EQ(m.error(), "");
  v1::ModelInfo one;
  ASSERT_TRUE(get_model(*stub_, "demo", &one).ok());
  EXPECT_EQ(one.SerializeAsString(), m.SerializeAsString())
      << "GetModel: " << one.DebugString() << "\nListModels: " << m.DebugString();
}

// Models from files: names, sources, quantization, the KV cache type and the
// context cap (the model's own context, at most 4096).
TEST(ServerApiFileModelsTest, ListModelsDescribesEveryFileModel) {
  const std::string q8 = small_model();
  const std::string q4 =
      synth_model("q4_long", {"--type", "q4_0", "--context", "8192", "--vocab", "512"});
  ASSERT_FALSE(q8.empty());
  ASSERT_FALSE(q4.empty());
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args({"--model", "beta=" + q4, "--model", "alpha=" + q8,
                                           "--kv-cache", "float", "--instances", "1"}));
  auto stub = make_stub(plain_channel(server.grpc_address()));
  grpc::ClientContext ctx;
  set_deadline(ctx);
  v1::ListModelsResponse list;
  const grpc::Status s = stub->ListModels(&ctx, v1::ListModelsRequest(), &list);
  ASSERT_TRUE(s.ok()) << status_text(s);
  std::vector<v1::ModelInfo> models(list.models().begin(), list.models().end());
  std::sort(models.begin(), models.end(),
            [](const auto& a, const auto& b) { return a.name() < b.name(); });
  ASSERT_EQ(models.size(), 2u) << list.DebugString();
  EXPECT_EQ(models[0].name(), "alpha");
  EXPECT_EQ(models[0].source(), q8);
  EXPECT_EQ(models[0].quantization(), "Q8_0");
  EXPECT_EQ(models[0].context_length(), 2048u);
  EXPECT_EQ(models[0].vocab_size(), 4096u);
  EXPECT_EQ(models[1].name(), "beta");
  EXPECT_EQ(models[1].source(), q4);
  EXPECT_EQ(models[1].quantization(), "Q4_0");
  EXPECT_EQ(models[1].context_length(), 4096u) << "the default context is capped at 4096";
  EXPECT_EQ(models[1].vocab_size(), 512u);
  for (const v1::ModelInfo& m : models) {
    EXPECT_FALSE(m.demo()) << m.name();
    EXPECT_EQ(m.architecture(), "llama");
    EXPECT_EQ(m.kv_cache_type(), "float");
    EXPECT_EQ(m.instances(), 1u);
    EXPECT_EQ(m.queue_capacity(), 8u) << "the default --queue";
    EXPECT_EQ(m.state(), v1::ModelInfo::STATE_SERVING);
    EXPECT_GT(m.parameters(), 0u);
  }
  EXPECT_GT(models[0].parameters(), models[1].parameters()) << "vocab 4096 vs 512";
  // Each one generates under its own name; the demo model is not served.
  for (const char* name : {"alpha", "beta"}) {
    v1::CompleteResponse resp;
    v1::GenerateRequest req = make_request(name, "hello", 3);
    req.set_ignore_eos(true);
    const grpc::Status c = complete(*stub, req, &resp);
    EXPECT_TRUE(c.ok()) << name << ": " << status_text(c);
    EXPECT_EQ(resp.token_ids_size(), 3) << name;
  }
  v1::ModelInfo info;
  EXPECT_EQ(get_model(*stub, "demo", &info).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace hearth::testing
