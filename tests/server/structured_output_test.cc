// Structured output through a real hearth-server serving the trained
// stories260K model (../shared), two instances so the step loop batches
// constrained and free sequences together: Generate, Complete, Chat and
// ChatComplete with response_format (a JSON schema, any JSON, a grammar)
// give complete values, checked by Python's json module and the jsonschema
// package (tests/grammar/validate_samples.py); formats hearth cannot honour
// are INVALID_ARGUMENT naming the field and the schema path.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/server/stories_model.h"

namespace hearth::testing {
namespace {

const fs::path kSchemas = fs::path(HEARTH_SOURCE_DIR) / "tests/grammar/schemas";
const fs::path kZephyr =
    fs::path(HEARTH_SOURCE_DIR) / "tests/chat/templates/HuggingFaceH4-zephyr-7b-beta.jinja";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in.good()) << p;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The schema files, sorted: the first and the last (the hardest) are used.
std::vector<fs::path> schema_files() {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(kSchemas))
    if (e.path().extension() == ".json") v.push_back(e.path());
  std::sort(v.begin(), v.end());
  return v;
}

v1::GenerateRequest constrained(const std::string& schema, std::uint64_t seed) {
  v1::GenerateRequest r = make_request("stories", "Once upon a time", 400);
  r.mutable_sampling()->set_temperature(1.0f);
  r.mutable_sampling()->set_seed(seed);
  r.mutable_response_format()->set_json_schema(schema);
  return r;
}

v1::ChatRequest chat_request(const std::string& schema, std::uint64_t seed) {
  v1::ChatRequest r;
  r.set_model("stories");
  v1::ChatMessage* m = r.add_messages();
  m->set_role("user");
  m->set_content("Describe Lily's dog as JSON.");
  r.set_max_tokens(400);
  r.mutable_sampling()->set_temperature(1.0f);
  r.mutable_sampling()->set_seed(seed);
  r.mutable_response_format()->set_json_schema(schema);
  return r;
}

struct Sample {
  std::string schema;  // file name under kSchemas
  std::uint64_t seed;
  std::string text;
  v1::FinishReason finish;
};

// validate_samples.py over `samples`; its report on failure.
void expect_valid(const std::vector<Sample>& samples) {
  nlohmann::json list = nlohmann::json::array();
  for (const Sample& s : samples)
    list.push_back({{"schema", s.schema},
                    {"seed", s.seed},
                    {"finish", s.finish == v1::FINISH_REASON_EOS ? "eos" : "other"},
                    {"text", s.text}});
  const fs::path file = fs::path(::testing::TempDir()) /
                        ("structured_output_server_" + std::to_string(getpid()) + ".json");
  std::ofstream(file) << list.dump();
  const std::string cmd = "python3 " + (kSchemas.parent_path() / "validate_samples.py").string() +
                          " " + kSchemas.string() + " " + file.string() + " 2>&1";
  std::string report;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) report.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << cmd << " (needs python3-jsonschema):\n" << report;
  } else {
    ADD_FAILURE() << "cannot run " << cmd;
  }
  fs::remove(file);
}

class StructuredOutputServer : public ::testing::Test {
 protected:
  void SetUp() override {
    HEARTH_REQUIRE_SHARED();
    HEARTH_START_SERVER(
        server_, server_args({"--model", "stories=" + stories_path().string(), "--chat-template",
                              "stories=" + kZephyr.string(), "--instances", "2"}));
    stub_ = make_stub(plain_channel(server_.grpc_address()));
  }

  grpc::Status refusal(const v1::ResponseFormat& format) {
    v1::GenerateRequest r = make_request("stories", "Once upon a time", 8);
    *r.mutable_response_format() = format;
    v1::CompleteResponse out;
    return complete(*stub_, r, &out);
  }

  ServerProcess server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

TEST_F(StructuredOutputServer, ConstrainedAndFreeSequencesShareTheBatchedLoop) {
  const std::vector<fs::path> files = schema_files();
  ASSERT_EQ(files.size(), 10u);
  const fs::path first = files.front(), last = files.back();
  const std::string first_schema = read_file(first), last_schema = read_file(last);

  // Six constrained streams, two chats and one free generation at once.
  constexpr int kStreams = 6;
  std::vector<Sample> samples(kStreams + 2);
  std::vector<StreamResult> streams(kStreams);
  StreamResult free_text;
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i)
    threads.emplace_back([&, i] {
      const bool hard = i % 2 == 1;
      streams[i] = generate(*stub_, constrained(hard ? last_schema : first_schema, i));
      samples[i] = {(hard ? last : first).filename().string(), static_cast<std::uint64_t>(i),
                    streams[i].text(),
                    streams[i].dones.empty() ? v1::FINISH_REASON_UNSPECIFIED
                                             : streams[i].dones[0].finish_reason()};
    });
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      grpc::ClientContext ctx;
      set_deadline(ctx);
      v1::CompleteResponse out;
      const grpc::Status st = stub_->ChatComplete(&ctx, chat_request(last_schema, 100 + i), &out);
      EXPECT_TRUE(st.ok()) << status_text(st);
      samples[kStreams + i] = {last.filename().string(), 100u + i, out.text(),
                               out.done().finish_reason()};
    });
  threads.emplace_back([&] {
    v1::GenerateRequest r = make_request("stories", "Once upon a time", 48);
    r.set_ignore_eos(true);
    free_text = generate(*stub_, r);
  });
  for (std::thread& t : threads) t.join();

  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(streams[i].status.ok()) << i << ": " << status_text(streams[i].status);
    EXPECT_EQ(streams[i].dones.size(), 1u);
  }
  ASSERT_TRUE(free_text.status.ok()) << status_text(free_text.status);
  EXPECT_EQ(free_text.ids().size(), 48u) << "the free sequence ran its own course";
  expect_valid(samples);

  // The unary twin gives the same value for the same seed.
  v1::CompleteResponse unary;
  ASSERT_TRUE(complete(*stub_, constrained(last_schema, 1), &unary).ok());
  EXPECT_EQ(unary.text(), streams[1].text());
  EXPECT_EQ(unary.done().finish_reason(), v1::FINISH_REASON_EOS);
}

TEST_F(StructuredOutputServer, AnyJsonAndAGrammar) {
  for (std::uint64_t seed = 0; seed < 6; ++seed) {
    v1::GenerateRequest r = make_request("stories", "Once upon a time", 400);
    r.mutable_sampling()->set_temperature(1.0f);
    r.mutable_sampling()->set_seed(seed);
    r.mutable_response_format()->set_any_json(true);
    v1::CompleteResponse out;
    const grpc::Status st = complete(*stub_, r, &out);
    ASSERT_TRUE(st.ok()) << status_text(st);
    EXPECT_EQ(out.done().finish_reason(), v1::FINISH_REASON_EOS) << out.text();
    EXPECT_FALSE(nlohmann::json::parse(out.text(), nullptr, false).is_discarded())
        << "seed " << seed << ": " << out.text();

    r.mutable_response_format()->set_grammar(
        "# a yes or no, then a three-digit number\n"
        "root ::= (\"yes\" | \"no\") \" \" [1-9] [0-9]{2}\n");
    ASSERT_TRUE(complete(*stub_, r, &out).ok());
    EXPECT_EQ(out.done().finish_reason(), v1::FINISH_REASON_EOS);
    const std::string t = out.text();
    const std::size_t space = t.find(' ');
    ASSERT_NE(space, std::string::npos) << t;
    EXPECT_TRUE(t.substr(0, space) == "yes" || t.substr(0, space) == "no") << t;
    const std::string digits = t.substr(space + 1);
    ASSERT_EQ(digits.size(), 3u) << t;
    EXPECT_TRUE(digits[0] >= '1' && digits[0] <= '9' && std::isdigit(digits[1]) &&
                std::isdigit(digits[2]))
        << t;
  }
}

TEST_F(StructuredOutputServer, FormatsItCannotHonourAreRefusedNamingTheField) {
  struct Case {
    std::string what, schema, grammar;
    bool any_json_false = false;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"bounds",
       R"({"type":"object","properties":{"age":{"type":"integer","minimum":10,"maximum":5}}})", "",
       false, "response_format.json_schema: schema #/properties/age"},
      {"not json", "{\"type\": ", "", false, "response_format.json_schema"},
      {"keyword", R"({"not":{"type":"string"}})", "", false,
       "response_format.json_schema: schema #: unsupported keyword \"not\""},
      {"ref", R"({"$ref":"#/$defs/missing"})", "", false, "response_format.json_schema"},
      {"syntax", "", "root ::= \"a\" |\nitem ::= [a-", false, "response_format.grammar: line 2"},
      {"no root", "", "start ::= \"a\"", false, "root"},
      {"undefined", "", "root ::= item", false, "item"},
      {"left recursion", "", "root ::= root \"a\" | \"a\"", false, "root"},
      {"any_json false", "", "", true, "response_format.any_json"},
  };
  for (const Case& c : cases) {
    v1::ResponseFormat f;
    if (!c.schema.empty()) f.set_json_schema(c.schema);
    if (!c.grammar.empty()) f.set_grammar(c.grammar);
    if (c.any_json_false) f.set_any_json(false);
    const grpc::Status st = refusal(f);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
    EXPECT_NE(st.error_message().find(c.message), std::string::npos)
        << c.what << ": " << st.error_message();
  }
  // Chat names the same field.
  v1::ChatRequest chat = chat_request(cases[0].schema, 0);
  v1::CompleteResponse out;
  grpc::ClientContext ctx;
  set_deadline(ctx);
  const grpc::Status st = stub_->ChatComplete(&ctx, chat, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("response_format.json_schema: schema #/properties/age"),
            std::string::npos)
      << st.error_message();
}

// A grammar whose start is within the matcher's bounds but whose output
// soon has more parses than it follows ends the request saying so, not as
// if the grammar allowed no token.
TEST_F(StructuredOutputServer, AGrammarPastTheParseBoundEndsSayingSo) {
  v1::GenerateRequest r = make_request("stories", "Once upon a time", 16);
  r.mutable_response_format()->set_grammar("root ::= \"x\" \"y\" (\"a\"?){10000} \"b\"");
  v1::CompleteResponse out;
  const grpc::Status st = complete(*stub_, r, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status_text(st);
  EXPECT_NE(
      st.error_message().find(
          "response_format: the output so far passes the grammar matcher's bounds (more than 4096 "
          "ways to parse it"),
      std::string::npos)
      << st.error_message();
}

// `hearth generate` and `hearth chat` with --json-schema, --grammar and
// --any-json print what the unary call returns for the same request, and
// refuse conflicting or unreadable format flags naming them.
TEST_F(StructuredOutputServer, CliSendsTheFormatFromItsFlags) {
  const fs::path schema = schema_files().back();
  const fs::path grammar = fs::path(::testing::TempDir()) / "yes-no.gbnf";
  std::ofstream(grammar) << "root ::= (\"yes\" | \"no\") \".\"\n";
  const std::vector<std::string> common = {"--server",
                                           server_.grpc_address(),
                                           "generate",
                                           "--model",
                                           "stories",
                                           "--prompt",
                                           "Once upon a time",
                                           "--temperature",
                                           "1",
                                           "--seed",
                                           "7",
                                           "--max-tokens",
                                           "400"};
  struct Case {
    std::string flag, file;
    void (*set)(v1::ResponseFormat&, const std::string&);
  };
  const Case cases[] = {
      {"--json-schema", schema.string(),
       [](v1::ResponseFormat& f, const std::string& p) { f.set_json_schema(read_file(p)); }},
      {"--grammar", grammar.string(),
       [](v1::ResponseFormat& f, const std::string& p) { f.set_grammar(read_file(p)); }},
      {"--any-json", "", [](v1::ResponseFormat& f, const std::string&) { f.set_any_json(true); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flag);
    std::vector<std::string> args = common;
    args.push_back(c.flag);
    if (!c.file.empty()) args.push_back(c.file);
    const ProcessResult cli = run_process(HEARTH_CLI_BIN, args);
    ASSERT_EQ(cli.exit_code, 0) << cli.err;
    v1::GenerateRequest r = make_request("stories", "Once upon a time", 400);
    r.mutable_sampling()->set_temperature(1.0f);
    r.mutable_sampling()->set_seed(7);
    c.set(*r.mutable_response_format(), c.file);
    v1::CompleteResponse unary;
    ASSERT_TRUE(complete(*stub_, r, &unary).ok());
    EXPECT_EQ(unary.done().finish_reason(), v1::FINISH_REASON_EOS);
    EXPECT_EQ(cli.out, unary.text() + "\n");
  }
  // chat takes the same flags.
  const ProcessResult chat =
      run_process(HEARTH_CLI_BIN, {"--server", server_.grpc_address(), "chat", "--model", "stories",
                                   "--message", "Hello", "--grammar", grammar.string()});
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  EXPECT_TRUE(chat.out == "yes.\n" || chat.out == "no.\n") << chat.out;

  std::vector<std::string> both = common;
  both.insert(both.end(), {"--any-json", "--grammar", grammar.string()});
  const ProcessResult conflict = run_process(HEARTH_CLI_BIN, both);
  EXPECT_NE(conflict.exit_code, 0);
  EXPECT_NE(conflict.err.find("--json-schema, --grammar and --any-json exclude each other"),
            std::string::npos)
      << conflict.err;
  const std::string absent = (fs::path(::testing::TempDir()) / "absent.json").string();
  std::vector<std::string> missing = common;
  missing.insert(missing.end(), {"--json-schema", absent});
  const ProcessResult unreadable = run_process(HEARTH_CLI_BIN, missing);
  EXPECT_NE(unreadable.exit_code, 0);
  EXPECT_NE(unreadable.err.find("--json-schema: cannot read '" + absent + "'"), std::string::npos)
      << unreadable.err;
}

}  // namespace
}  // namespace hearth::testing
