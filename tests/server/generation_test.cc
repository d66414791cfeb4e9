// What hearth-server generates is what the engine generates: the streamed
// pieces (order, text, token ids) equal hearth-generate --json's on the same
// model file and settings, greedy and sampled; Complete is the concatenation
// of the stream.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/unicode.h"
#include "tests/server/test_util.h"

namespace hearth::testing {
namespace {

constexpr char kModel[] = "small";
constexpr int kContext = 256;

// One hearth-generate --json run, parsed.
struct EngineRun {
  std::vector<std::pair<std::string, std::int32_t>> pieces;  // (text, token)
  std::vector<std::int32_t> prompt_ids, generated_ids;
  std::string finish, text;
  std::uint32_t prompt_tokens = 0, generated_tokens = 0;
};

// A minimal JSON reader for hearth-generate's lines: objects, arrays,
// strings (with \uXXXX escapes and surrogate pairs), numbers, literals.
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  double number = 0;
  std::string str;
  std::vector<Json> items;
  std::map<std::string, Json> fields;

  const Json& at(const std::string& key) const {
    static const Json null;
    auto it = fields.find(key);
    if (it == fields.end()) {
      ADD_FAILURE() << "no '" << key << "' in a hearth-generate JSON object";
      return null;
    }
    return it->second;
  }
  std::vector<std::int32_t> ints() const {
    std::vector<std::int32_t> out;
    for (const Json& j : items) out.push_back(static_cast<std::int32_t>(j.number));
    return out;
  }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& s) : s_(s) {}
  bool parse(Json* out) {
    ws();
    if (!value(out)) return false;
    ws();
    return pos_ == s_.size();
  }

 private:
  void ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    ws();
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  bool hex4(std::uint32_t* v) {
    if (pos_ + 4 > s_.size()) return false;
    *v = static_cast<std::uint32_t>(std::stoul(s_.substr(pos_, 4), nullptr, 16));
    pos_ += 4;
    return true;
  }
  bool string(std::string* out) {
    if (!eat('"')) return false;
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (pos_ >= s_.size()) return false;
      const char e = s_[pos_++];
      static const std::string kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
      if (const std::size_t k = kFrom.find(e); k != std::string::npos) {
        *out += kTo[k];
      } else if (e == 'u') {
        std::uint32_t cp = 0, lo = 0;
        if (!hex4(&cp)) return false;
        if (cp >= 0xD800 && cp < 0xDC00) {
          if (s_.compare(pos_, 2, "\\u") != 0) return false;
          pos_ += 2;
          if (!hex4(&lo)) return false;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        engine::append_utf8(*out, static_cast<char32_t>(cp));
      } else {
        return false;
      }
    }
    return false;
  }
  bool value(Json* out) {
    ws();
    if (pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '{') {
      out->kind = Json::kObject;
      ++pos_;
      if (eat('}')) return true;
      do {
        std::string key;
        Json v;
        if (!string(&key) || !eat(':') || !value(&v)) return false;
        out->fields[key] = std::move(v);
      } while (eat(','));
      return eat('}');
    }
    if (c == '[') {
      out->kind = Json::kArray;
      ++pos_;
      if (eat(']')) return true;
      do {
        Json v;
        if (!value(&v)) return false;
        out->items.push_back(std::move(v));
      } while (eat(','));
      return eat(']');
    }
    if (c == '"') {
      out->kind = Json::kString;
      return string(&out->str);
    }
    for (const char* lit : {"true", "false", "null"}) {
      if (s_.compare(pos_, std::strlen(lit), lit) == 0) {
        pos_ += std::strlen(lit);
        out->kind = lit[0] == 'n' ? Json::kNull : Json::kBool;
        return true;
      }
    }
    char* end = nullptr;
    out->kind = Json::kNumber;
    out->number = std::strtod(s_.c_str() + pos_, &end);
    if (end == s_.c_str() + pos_) return false;
    pos_ = static_cast<std::size_t>(end - s_.c_str());
    return true;
  }

  const std::string& s_;
  std::size_t pos_ = 0;
};

std::string float_arg(float f) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(f));  // round-trips exactly
  return buf;
}

// The hearth-generate flags that ask for what `req` asks.
std::vector<std::string> engine_flags(const v1::GenerateRequest& req) {
  const v1::SamplingParams& s = req.sampling();
  std::vector<std::string> f = {"--prompt",     req.prompt(),
                                "--max-tokens", std::to_string(req.max_tokens()),
                                "--context",    std::to_string(kContext),
                                "--json"};
  auto add = [&](const char* flag, const std::string& v) {
    f.push_back(flag);
    f.push_back(v);
  };
  if (s.temperature() != 0) add("--temperature", float_arg(s.temperature()));
  if (s.top_k() != 0) add("--top-k", std::to_string(s.top_k()));
  if (s.top_p() != 0) add("--top-p", float_arg(s.top_p()));
  if (s.min_p() != 0) add("--min-p", float_arg(s.min_p()));
  if (s.repetition_penalty() != 0) add("--repeat-penalty", float_arg(s.repetition_penalty()));
  if (s.presence_penalty() != 0) add("--presence-penalty", float_arg(s.presence_penalty()));
  if (s.frequency_penalty() != 0) add("--frequency-penalty", float_arg(s.frequency_penalty()));
  if (s.has_penalty_last_n()) add("--penalty-last-n", std::to_string(s.penalty_last_n()));
  if (s.seed() != 0) add("--seed", std::to_string(s.seed()));
  for (const std::string& stop : req.stop()) add("--stop", stop);
  if (req.ignore_eos()) f.push_back("--ignore-eos");
  return f;
}

EngineRun run_engine(const std::string& model_path, const v1::GenerateRequest& req) {
  std::vector<std::string> args = {"--model", model_path};
  const std::vector<std::string> f = engine_flags(req);
  args.insert(args.end(), f.begin(), f.end());
  const ProcessResult r = run_process(HEARTH_GENERATE_BIN, args);
  EngineRun run;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::size_t start = 0;
  std::vector<Json> lines;
  while (start < r.out.size()) {
    std::size_t end = r.out.find('\n', start);
    if (end == std::string::npos) end = r.out.size();
    const std::string text = r.out.substr(start, end - start);
    Json line;
    const bool ok = JsonReader(text).parse(&line) && line.kind == Json::kObject;
    EXPECT_TRUE(ok) << "hearth-generate printed a line that is not a JSON object: " << text;
    if (ok) lines.push_back(std::move(line));
    start = end + 1;
  }
  if (lines.empty()) {
    ADD_FAILURE() << "hearth-generate printed nothing\n" << r.err;
    return run;
  }
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    run.pieces.emplace_back(lines[i].at("text").str,
                            static_cast<std::int32_t>(lines[i].at("token").number));
  }
  const Json& s = lines.back();
  run.prompt_ids = s.at("prompt_ids").ints();
  run.generated_ids = s.at("generated_ids").ints();
  run.finish = s.at("finish_reason").str;
  run.text = s.at("text").str;
  const Json& stats = s.at("stats");
  run.prompt_tokens = static_cast<std::uint32_t>(stats.at("prompt_tokens").number);
  run.generated_tokens = static_cast<std::uint32_t>(stats.at("generated_tokens").number);
  return run;
}

v1::FinishReason finish_of(const std::string& engine_name) {
  static const std::map<std::string, v1::FinishReason> m = {
      {"eos", v1::FINISH_REASON_EOS},
      {"stop", v1::FINISH_REASON_STOP},
      {"length", v1::FINISH_REASON_LENGTH},
      {"context", v1::FINISH_REASON_CONTEXT_LIMIT}};
  auto it = m.find(engine_name);
  EXPECT_NE(it, m.end()) << "unknown engine finish reason '" << engine_name << "'";
  return it == m.end() ? v1::FINISH_REASON_UNSPECIFIED : it->second;
}

class ServerGenerationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_path_ = new std::string(small_model());
    server_ = new ServerProcess();
    if (model_path_->empty()) return;
    if (!server_->start(HEARTH_SERVER_BIN,
                        server_args({"--model", std::string(kModel) + "=" + *model_path_,
                                     "--context", std::to_string(kContext)}))) {
      start_error_ = new std::string(server_->error());
    }
  }
  static void TearDownTestSuite() {
    delete server_;
    delete model_path_;
    delete start_error_;
    server_ = nullptr;
    model_path_ = nullptr;
    start_error_ = nullptr;
  }
  void SetUp() override {
    ASSERT_FALSE(model_path_->empty());
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
    ASSERT_TRUE(server_->running()) << server_->describe();
    channel_ = plain_channel(server_->grpc_address());
    stub_ = make_stub(channel_);
  }

  // The stream and the engine's run of `req`: every piece equal, in order.
  StreamResult expect_stream_equals_engine(const v1::GenerateRequest& req) {
    const EngineRun engine = run_engine(*model_path_, req);
    const StreamResult got = generate(*stub_, req);
    EXPECT_TRUE(got.status.ok()) << status_text(got.status);
    EXPECT_EQ(got.dones.size(), 1u) << "one Done per stream";
    EXPECT_FALSE(got.piece_after_done) << "a piece came after Done";
    std::vector<std::pair<std::string, std::int32_t>> pieces;
    for (const auto& p : got.pieces) pieces.emplace_back(p.text(), p.token_id());
    EXPECT_EQ(pieces, engine.pieces) << "the streamed pieces differ from hearth-generate's";
    EXPECT_EQ(got.ids(), engine.generated_ids);
    EXPECT_EQ(got.text(), engine.text);
    if (!got.dones.empty()) {
      const v1::Done& d = got.dones.front();
      EXPECT_EQ(d.finish_reason(), finish_of(engine.finish))
          << v1::FinishReason_Name(d.finish_reason()) << " vs engine '" << engine.finish << "'";
      EXPECT_EQ(d.usage().prompt_tokens(), engine.prompt_tokens);
      EXPECT_EQ(d.usage().generated_tokens(), engine.generated_tokens);
      if (req.echo_prompt_ids()) {
        EXPECT_EQ(
            std::vector<std::int32_t>(d.usage().prompt_ids().begin(), d.usage().prompt_ids().end()),
            engine.prompt_ids);
      } else {
        EXPECT_EQ(d.usage().prompt_ids_size(), 0) << "prompt_ids without echo_prompt_ids";
      }
    }
    return got;
  }

  // Complete of `req` equals the concatenated stream `s` of the same request.
  void expect_complete_equals_stream(const v1::GenerateRequest& req, const StreamResult& s) {
    v1::CompleteResponse c;
    const grpc::Status st = complete(*stub_, req, &c);
    ASSERT_TRUE(st.ok()) << status_text(st);
    ASSERT_EQ(s.dones.size(), 1u);
    const v1::Done& d = s.dones.front();
    EXPECT_EQ(c.text(), s.text());
    EXPECT_EQ(std::vector<std::int32_t>(c.token_ids().begin(), c.token_ids().end()), s.ids());
    EXPECT_EQ(c.done().finish_reason(), d.finish_reason());
    EXPECT_EQ(c.done().usage().prompt_tokens(), d.usage().prompt_tokens());
    EXPECT_EQ(c.done().usage().generated_tokens(), d.usage().generated_tokens());
    EXPECT_EQ(
        std::vector<std::int32_t>(c.done().usage().prompt_ids().begin(),
                                  c.done().usage().prompt_ids().end()),
        std::vector<std::int32_t>(d.usage().prompt_ids().begin(), d.usage().prompt_ids().end()));
  }

  static std::string* model_path_;
  static ServerProcess* server_;
  static std::string* start_error_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};
std::string* ServerGenerationTest::model_path_ = nullptr;
ServerProcess* ServerGenerationTest::server_ = nullptr;
std::string* ServerGenerationTest::start_error_ = nullptr;

v1::GenerateRequest greedy_request() {
  v1::GenerateRequest req = make_request(kModel, "Once upon a time, in a quiet village", 40);
  req.set_echo_prompt_ids(true);
  return req;
}

v1::GenerateRequest sampled_request(std::uint64_t seed) {
  v1::GenerateRequest req = make_request(kModel, "The weather today is", 48);
  v1::SamplingParams* s = req.mutable_sampling();
  s->set_temperature(0.9f);
  s->set_top_k(60);
  s->set_top_p(0.95f);
  s->set_min_p(0.01f);
  s->set_repetition_penalty(1.1f);
  s->set_presence_penalty(0.2f);
  s->set_frequency_penalty(0.1f);
  s->set_penalty_last_n(32);
  s->set_seed(seed);
  req.set_ignore_eos(true);
  return req;
}

TEST_F(ServerGenerationTest, GreedyStreamEqualsTheEngine) {
  const v1::GenerateRequest req = greedy_request();
  const StreamResult s = expect_stream_equals_engine(req);
  // A comparison worth making: the completion is not trivially short.
  EXPECT_GE(s.ids().size(), 8u) << "pick a prompt the model continues for a while";
}

TEST_F(ServerGenerationTest, SeededSampleStreamEqualsTheEngine) {
  const StreamResult a = expect_stream_equals_engine(sampled_request(1234));
  ASSERT_EQ(a.dones.size(), 1u);
  EXPECT_EQ(a.dones.front().finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(a.ids().size(), 48u);
  // The same seed again: the same tokens; another seed: other tokens (the
  // sampler really draws, and really uses the seed).
  EXPECT_EQ(generate(*stub_, sampled_request(1234)).ids(), a.ids());
  EXPECT_NE(generate(*stub_, sampled_request(1235)).ids(), a.ids());
  // Greedy would give yet another sequence.
  v1::GenerateRequest greedy = sampled_request(1234);
  greedy.mutable_sampling()->Clear();
  EXPECT_NE(generate(*stub_, greedy).ids(), a.ids());
}

TEST_F(ServerGenerationTest, StopStringEndsLikeTheEngine) {
  // Choose a stop string from the middle of the greedy completion: three ASCII
  // letters, so it is whole characters.
  const StreamResult full = generate(*stub_, greedy_request());
  ASSERT_TRUE(full.status.ok()) << status_text(full.status);
  const std::string text = full.text();
  std::string stop;
  for (std::size_t i = text.size() / 3; i + 3 <= text.size() && stop.empty(); ++i) {
    const std::string cand = text.substr(i, 3);
    bool letters = true;
    for (char c : cand) letters = letters && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
    if (letters) stop = cand;
  }
  ASSERT_FALSE(stop.empty()) << "no three ASCII letters in '" << text << "'";
  v1::GenerateRequest req = greedy_request();
  req.add_stop(stop);
  req.add_stop("zzzzzzzz-never");
  const StreamResult s = expect_stream_equals_engine(req);
  ASSERT_EQ(s.dones.size(), 1u);
  EXPECT_EQ(s.dones.front().finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(s.text().find(stop), std::string::npos) << "the stop string itself was returned";
  EXPECT_EQ(text.rfind(s.text(), 0), 0u) << "the stopped text is not a prefix of the full text";
  EXPECT_LT(s.text().size(), text.size());
  expect_complete_equals_stream(req, s);
}

TEST_F(ServerGenerationTest, ContextLimitEndsLikeTheEngine) {
  v1::GenerateRequest req = make_request(kModel, "A long story begins here", 1000);
  req.set_ignore_eos(true);
  const StreamResult s = expect_stream_equals_engine(req);
  ASSERT_EQ(s.dones.size(), 1u);
  EXPECT_EQ(s.dones.front().finish_reason(), v1::FINISH_REASON_CONTEXT_LIMIT);
  EXPECT_LE(s.dones.front().usage().prompt_tokens() + s.dones.front().usage().generated_tokens(),
            static_cast<std::uint32_t>(kContext) + 1);
  EXPECT_GT(s.dones.front().usage().generated_tokens(), static_cast<std::uint32_t>(kContext) / 2);
}

TEST_F(ServerGenerationTest, CompleteIsTheConcatenatedStreamGreedy) {
  const v1::GenerateRequest req = greedy_request();
  const StreamResult s = generate(*stub_, req);
  ASSERT_TRUE(s.status.ok()) << status_text(s.status);
  expect_complete_equals_stream(req, s);
}

TEST_F(ServerGenerationTest, CompleteIsTheConcatenatedStreamSampled) {
  v1::GenerateRequest req = sampled_request(99);
  req.set_echo_prompt_ids(true);
  const StreamResult s = generate(*stub_, req);
  ASSERT_TRUE(s.status.ok()) << status_text(s.status);
  expect_complete_equals_stream(req, s);
}

TEST_F(ServerGenerationTest, DoneReportsUsageAndTimings) {
  v1::GenerateRequest req = make_request(kModel, "Counting tokens", 20);
  req.set_ignore_eos(true);
  const StreamResult s = generate(*stub_, req);
  ASSERT_TRUE(s.status.ok()) << status_text(s.status);
  ASSERT_EQ(s.dones.size(), 1u);
  const v1::Done& d = s.dones.front();
  EXPECT_EQ(d.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(d.usage().generated_tokens(), 20u);
  EXPECT_EQ(s.ids().size(), 20u);
  EXPECT_GT(d.usage().prompt_tokens(), 1u);
  EXPECT_EQ(d.instance(), 0u) << "one instance: it is instance 0";
  const v1::Timings& t = d.timings();
  EXPECT_GE(t.queue_s(), 0);
  EXPECT_GT(t.time_to_first_token_s(), 0);
  EXPECT_GE(t.time_to_first_token_s(), t.queue_s());
  EXPECT_GE(t.total_s(), t.time_to_first_token_s());
  EXPECT_GT(t.prefill_tokens_per_s(), 0);
  EXPECT_GT(t.decode_tokens_per_s(), 0);
}

}  // namespace
}  // namespace hearth::testing
