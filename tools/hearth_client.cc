// hearth: the command-line client of a hearth server (gRPC).
//
//   hearth [connection options] SUBCOMMAND [options]
//
// Subcommands: generate (stream a completion), models (ListModels), health
// (grpc.health.v1 Check; exit 0 only when SERVING), bench (a load generator).
// Exit codes: 0 success; 1 an RPC failed ("hearth: <RPC> failed: <CODE>:
// <message>" on stderr) or the server is not SERVING; 2 a usage mistake
// (the message names the flag or subcommand).
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/cli_flags.h"
#include "base/read_file.h"
#include "hearth/v1/inference.grpc.pb.h"
#include "tools/client/bench.h"
#include "tools/client/connection.h"

namespace {

using hearth::Flags;
using hearth::client::ConnectionOptions;
namespace v1 = hearth::v1;
using Clock = std::chrono::steady_clock;

constexpr int kExitRpc = 1;
constexpr int kExitUsage = 2;
// Deadline of the small unary calls (ListModels, health) when --timeout-s is absent.
constexpr double kUnaryTimeoutS = 10;

constexpr const char* kUsage = R"(usage: hearth [connection options] SUBCOMMAND [options]

The command-line client of a hearth server.

subcommands:
  generate    stream the completion of a prompt
  chat        talk to the model through its chat template (interactive or one message)
  models      list the models the server serves
  health      check the server's health (exit 0 only when SERVING)
  bench       load-test Generate with concurrent streams

Run 'hearth SUBCOMMAND --help' for a subcommand's options.

)";

constexpr const char* kGenerateUsage =
    R"(usage: hearth generate [--model NAME] --prompt TEXT [options]

Streams the completion to stdout as it is generated, then statistics to stderr.

  --model NAME            served model (may be omitted when the server serves one)
  --prompt TEXT           prompt text
  --max-tokens N          tokens to generate (default: the server's, 128)
  --temperature T         0 = greedy (default 0)
  --top-k N  --top-p P  --min-p P
  --repeat-penalty R  --presence-penalty P  --frequency-penalty F  --penalty-last-n N
  --seed N                sampling seed (default 0)
  --stop TEXT             stop string (repeatable)
  --ignore-eos            keep generating past end-of-sequence tokens
  --bos / --no-bos        add the BOS token (default: the model's rule)
  --parse-special         parse special-token text such as <s> in the prompt
  --json-schema FILE      structured output: one JSON value valid under the
                          JSON schema in FILE (docs/grammar.md: the subset)
  --any-json              structured output: any JSON value
  --grammar FILE          structured output: a sentence of the GBNF grammar in FILE
  --json                  one JSON object per line: {"text":..,"token_id":..} per
                          piece, then a summary (finish_reason, usage, timings)

)";

constexpr const char* kChatUsage =
    R"(usage: hearth chat [--model NAME] [--message TEXT] [options]

Talks to the model through its chat template (the server's Chat call).
With --message: one reply to stdout, then statistics to stderr. Without: a
conversation on stdin: each line is a user message, the reply streams to
stdout, and the whole history goes with the next message; empty lines are
skipped; end of input or a line "/exit" ends it.

  --model NAME            served model (may be omitted when the server serves one)
  --message TEXT          one user message: reply and exit
  --system TEXT           a system message before the conversation
  --max-tokens N          tokens per reply (default: the server's, 128)
  --temperature T  --top-k N  --top-p P  --min-p P  --seed N
  --repeat-penalty R  --presence-penalty P  --frequency-penalty F  --penalty-last-n N
  --stop TEXT             stop string (repeatable)
  --json-schema FILE      structured output: one JSON value valid under the
                          JSON schema in FILE (docs/grammar.md: the subset)
  --any-json              structured output: any JSON value
  --grammar FILE          structured output: a sentence of the GBNF grammar in FILE

)";

constexpr const char* kModelsUsage = R"(usage: hearth models [--json]

Lists the served models: name, architecture, quantization, parameters, context,
KV cache type, instances (busy/total), queue (depth/capacity), state, source.

  --json                  one JSON object {"models":[...]}

)";

constexpr const char* kHealthUsage = R"(usage: hearth health [--service NAME]

Calls grpc.health.v1.Health/Check and prints SERVING, NOT_SERVING,
SERVICE_UNKNOWN or UNKNOWN. Exit 0 only when SERVING, 1 otherwise.

  --service NAME          a model name (default "": the whole server)

)";

constexpr const char* kBenchUsage = R"(usage: hearth bench [--model NAME] [options]

Runs --requests Generate streams, at most --concurrency at a time, and prints
requests/s, tokens/s, per-stream decode tok/s (tokens after the first / time
from the first to the last token, as hearth-generate measures it), time to
first token and inter-token latency percentiles (nearest rank, client-side)
and errors by status code. Exit 1 when any request failed unexpectedly.

  --model NAME            served model (may be omitted when the server serves one)
  --concurrency N         streams in flight (default 1)
  --requests M            requests in all (default 10)
  --warmup W              requests run first, one at a time, not measured (default 0)
  --prompt TEXT           prompt (default "Once upon a time")
  --prompt-tokens N       instead: a prompt of about N tokens (repeated words)
  --max-tokens K          tokens per request (default 64)
  --temperature T  --seed N
  --no-ignore-eos         stop at end-of-sequence (default: generate K tokens)
  --json                  the summary as one JSON object
  --quiet                 no progress line (also off when stderr is not a terminal)
fault mix (each request independently, chosen from --mix-seed):
  --cancel-fraction F     cancel after the first piece (CANCELLED counted as expected)
  --deadline-fraction F   use a deadline of --short-deadline-ms D (default 50);
                          DEADLINE_EXCEEDED counted as expected
  --short-deadline-max-tokens K  max tokens of those requests (default --max-tokens)
  --long-prompt-fraction F  use a prompt of about --long-prompt-tokens N (default 512);
                          the summary then also gives the TTFT of those requests apart
                          and the inter-token latency of the others (all their gaps,
                          and the gaps that overlap a long prompt's prefill)
  --mix-seed S            seed of these choices (default 1)
prefix reuse (the summary counts the prompt tokens served from a KV cache):
  --shared-prefix-tokens N  every prompt: one shared prefix of about N tokens, then
                          the request's own --prompt-tokens (default 20) words
  --chat-turns T          --concurrency conversations of T turns; each turn resends
                          the conversation so far plus its own words (--requests is
                          then concurrency x T)
  --no-prefix-reuse       set disable_prefix_reuse: every prompt is computed whole

)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return kExitUsage;
}

int rpc_failure(const char* rpc, const grpc::Status& status) {
  std::fprintf(stderr, "%s\n", hearth::client::rpc_error(rpc, status).c_str());
  return kExitRpc;
}

// The subcommand's Flags, with the connection flags added.
Flags make_flags(const std::string& tool, std::vector<std::string> value_flags,
                 std::vector<std::string> bool_flags) {
  for (const char* f : hearth::client::kConnectionValueFlags) value_flags.emplace_back(f);
  for (const char* f : hearth::client::kConnectionBoolFlags) bool_flags.emplace_back(f);
  bool_flags.emplace_back("help");
  return Flags(tool, std::move(value_flags), std::move(bool_flags));
}

// Parses flags; on a mistake, or --help, returns the exit code to use.
std::optional<int> parse_flags(Flags& flags, const std::string& tool, const char* usage, int argc,
                               char** argv) {
  if (!flags.parse(argc, argv, 1)) return usage_error(flags.error());
  if (flags.get_bool("help").value_or(false)) {
    std::fputs(usage, stdout);
    std::fputs(hearth::client::kConnectionUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty())
    return usage_error(tool + ": unexpected argument '" + flags.positional()[0] + "' (see --help)");
  return std::nullopt;
}

struct Client {
  ConnectionOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Inference::Stub> stub;
};

std::optional<int> connect(Flags& flags, const std::string& tool, double default_timeout_s,
                           Client* client) {
  auto options = hearth::client::connection_options_from_flags(flags, default_timeout_s);
  if (!options.ok()) return usage_error(tool + ": " + std::string(options.status().message()));
  client->options = *options;
  auto channel = hearth::client::make_channel(client->options);
  if (!channel.ok()) return usage_error(tool + ": " + std::string(channel.status().message()));
  client->channel = *channel;
  client->stub = v1::Inference::NewStub(client->channel);
  return std::nullopt;
}

grpc::Status list_models(Client& client, v1::ListModelsResponse* out) {
  grpc::ClientContext context;
  hearth::client::prepare_context(
      &context, client.options,
      client.options.timeout_s > 0 ? client.options.timeout_s : kUnaryTimeoutS);
  return client.stub->ListModels(&context, v1::ListModelsRequest(), out);
}

// --model, or the only model the server serves.
std::optional<int> resolve_model(Flags& flags, const std::string& tool, Client& client,
                                 std::string* model) {
  if (flags.has("model")) {
    *model = flags.get("model");
    if (model->empty()) return usage_error(tool + ": --model: empty name");
    return std::nullopt;
  }
  v1::ListModelsResponse models;
  const grpc::Status status = list_models(client, &models);
  if (!status.ok()) return rpc_failure("ListModels", status);
  if (models.models_size() != 1) {
    std::string names;
    for (const auto& m : models.models()) names += (names.empty() ? "" : ", ") + m.name();
    return usage_error(tool + ": --model is required: the server serves " +
                       std::to_string(models.models_size()) + " models" +
                       (names.empty() ? "" : " (" + names + ")"));
  }
  *model = models.models(0).name();
  return std::nullopt;
}

const char* finish_reason_name(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_EOS:
      return "eos";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_CONTEXT_LIMIT:
      return "context";
    default:
      return "unspecified";
  }
}

std::string num(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// ---------------------------------------------------------------------------

// The generation flags generate and chat share (each only when given: the
// server's defaults apply to the rest). False on a bad value (flags.error()).
template <typename Request>
bool generation_options_from_flags(Flags& flags, Request& request) {
  std::int64_t max_tokens = 0, top_k = 0, last_n = 0, seed = 0;
  double temperature = 0, top_p = 0, min_p = 0, rep = 0, presence = 0, frequency = 0;
  const bool ok = flags.get_int("max-tokens", 1, 1 << 20, &max_tokens) &&
                  flags.get_int("top-k", 0, 1 << 24, &top_k) &&
                  flags.get_int("penalty-last-n", 0, 4096, &last_n) &&
                  flags.get_int("seed", 0, INT64_MAX, &seed) &&
                  flags.get_float("temperature", 0, 100, &temperature) &&
                  flags.get_positive_float("top-p", 1, &top_p) &&
                  flags.get_float("min-p", 0, 1, &min_p) &&
                  flags.get_positive_float("repeat-penalty", 10, &rep) &&
                  flags.get_float("presence-penalty", -2, 2, &presence) &&
                  flags.get_float("frequency-penalty", -2, 2, &frequency);
  if (!ok) return false;
  if (flags.has("max-tokens")) request.set_max_tokens(static_cast<std::uint32_t>(max_tokens));
  auto* sampling = request.mutable_sampling();
  sampling->set_temperature(static_cast<float>(temperature));
  sampling->set_top_k(static_cast<std::int32_t>(top_k));
  sampling->set_top_p(static_cast<float>(top_p));
  sampling->set_min_p(static_cast<float>(min_p));
  sampling->set_repetition_penalty(static_cast<float>(rep));
  sampling->set_presence_penalty(static_cast<float>(presence));
  sampling->set_frequency_penalty(static_cast<float>(frequency));
  if (flags.has("penalty-last-n")) sampling->set_penalty_last_n(static_cast<std::int32_t>(last_n));
  sampling->set_seed(static_cast<std::uint64_t>(seed));
  for (const std::string& s : flags.get_all("stop")) request.add_stop(s);
  return true;
}

const std::vector<std::string> kGenerationValueFlags = {
    "max-tokens",       "temperature",       "top-k",          "top-p", "min-p", "repeat-penalty",
    "presence-penalty", "frequency-penalty", "penalty-last-n", "seed",  "stop",  "json-schema",
    "grammar"};

// --json-schema FILE, --grammar FILE or --any-json (at most one) into the
// request's response_format; a usage error names an unreadable file.
template <typename Request>
std::optional<int> response_format_from_flags(Flags& flags, const std::string& tool,
                                              Request& request) {
  const int given =
      flags.has("json-schema") + flags.has("grammar") + flags.get_bool("any-json").value_or(false);
  if (given > 1)
    return usage_error(tool + ": --json-schema, --grammar and --any-json exclude each other");
  for (const char* flag : {"json-schema", "grammar"}) {
    if (!flags.has(flag)) continue;
    const std::string path = flags.get(flag);
    absl::StatusOr<std::string> read = hearth::read_whole_file(path);
    if (!read.ok())
      return usage_error(tool + ": --" + flag + ": " + std::string(read.status().message()));
    std::string text = std::move(*read);
    if (std::string(flag) == "grammar")
      request.mutable_response_format()->set_grammar(std::move(text));
    else
      request.mutable_response_format()->set_json_schema(std::move(text));
  }
  if (flags.get_bool("any-json").value_or(false))
    request.mutable_response_format()->set_any_json(true);
  return std::nullopt;
}

int cmd_generate(int argc, char** argv) {
  const std::string tool = "hearth generate";
  std::vector<std::string> value_flags = {"model", "prompt"};
  value_flags.insert(value_flags.end(), kGenerationValueFlags.begin(), kGenerationValueFlags.end());
  Flags flags =
      make_flags(tool, value_flags, {"json", "bos", "parse-special", "ignore-eos", "any-json"});
  if (auto rc = parse_flags(flags, tool, kGenerateUsage, argc, argv)) return *rc;
  if (!flags.has("prompt")) return usage_error(tool + ": --prompt is required (see --help)");

  v1::GenerateRequest request;
  request.set_prompt(flags.get("prompt"));
  if (request.prompt().empty()) return usage_error(tool + ": --prompt: empty prompt");
  for (const std::string& s : flags.get_all("stop"))
    if (s.empty()) return usage_error(tool + ": --stop: empty stop string");
  if (!generation_options_from_flags(flags, request)) return usage_error(flags.error());
  if (auto rc = response_format_from_flags(flags, tool, request)) return *rc;
  if (auto bos = flags.get_bool("bos")) request.set_add_bos(*bos);
  request.set_parse_special(flags.get_bool("parse-special").value_or(false));
  request.set_ignore_eos(flags.get_bool("ignore-eos").value_or(false));
  const bool json = flags.get_bool("json").value_or(false);

  Client client;
  if (auto rc = connect(flags, tool, 0, &client)) return *rc;
  std::string model;
  if (auto rc = resolve_model(flags, tool, client, &model)) return *rc;
  request.set_model(model);

  grpc::ClientContext context;
  hearth::client::prepare_context(&context, client.options);
  const auto t0 = Clock::now();
  auto reader = client.stub->Generate(&context, request);
  v1::GenerateResponse response;
  std::string text;
  std::vector<std::int32_t> ids;
  std::vector<double> token_times;
  std::optional<v1::Done> done;
  while (reader->Read(&response)) {
    if (response.has_piece()) {
      const auto& piece = response.piece();
      if (piece.token_id() >= 0) {
        ids.push_back(piece.token_id());
        token_times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      text += piece.text();
      if (json) {
        std::printf("{\"text\":%s,\"token_id\":%d}\n", hearth::json_string(piece.text()).c_str(),
                    piece.token_id());
      } else {
        std::fwrite(piece.text().data(), 1, piece.text().size(), stdout);
      }
      std::fflush(stdout);
    } else if (response.has_done()) {
      done = response.done();
    }
  }
  grpc::Status status = reader->Finish();
  const double total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (status.ok() && !done)
    status = grpc::Status(grpc::StatusCode::INTERNAL, "the stream ended without a Done message");
  if (!status.ok()) {
    if (!json && !text.empty()) std::printf("\n");
    std::fflush(stdout);
    return rpc_failure("Generate", status);
  }

  // Client-side, as hearth-generate measures: tokens after the first over the
  // time from the first to the last token.
  const double client_ttft = token_times.empty() ? 0 : token_times.front();
  const double client_decode =
      token_times.size() >= 2 && token_times.back() > token_times.front()
          ? static_cast<double>(token_times.size() - 1) / (token_times.back() - token_times.front())
          : 0;
  const auto& t = done->timings();
  if (json) {
    std::string id_list = "[";
    for (std::size_t i = 0; i < ids.size(); ++i) id_list += (i ? "," : "") + std::to_string(ids[i]);
    id_list += "]";
    std::printf(
        "{\"finish_reason\":\"%s\",\"prompt_tokens\":%u,\"generated_tokens\":%u,"
        "\"generated_ids\":%s,\"text\":%s,\"model\":%s,\"instance\":%u,\"timings\":{"
        "\"queue_s\":%.6f,\"time_to_first_token_s\":%.6f,\"prefill_tokens_per_s\":%.2f,"
        "\"decode_tokens_per_s\":%.2f,\"total_s\":%.6f},\"client\":{\"time_to_first_token_s\":%.6f,"
        "\"decode_tokens_per_s\":%.2f,\"total_s\":%.6f}}\n",
        finish_reason_name(done->finish_reason()), done->usage().prompt_tokens(),
        done->usage().generated_tokens(), id_list.c_str(), hearth::json_string(text).c_str(),
        hearth::json_string(model).c_str(), done->instance(), t.queue_s(),
        t.time_to_first_token_s(), t.prefill_tokens_per_s(), t.decode_tokens_per_s(), t.total_s(),
        client_ttft, client_decode, total_s);
  } else {
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(
        stderr,
        "[hearth] finish: %s | prompt %u tokens, generated %u | time to first token "
        "%.1f ms | prefill %.1f tok/s | decode %.1f tok/s | queue %.1f ms | instance %u\n"
        "[hearth] client: time to first token %.1f ms | decode %.1f tok/s | total %.3f s\n",
        finish_reason_name(done->finish_reason()), done->usage().prompt_tokens(),
        done->usage().generated_tokens(), t.time_to_first_token_s() * 1e3, t.prefill_tokens_per_s(),
        t.decode_tokens_per_s(), t.queue_s() * 1e3, done->instance(), client_ttft * 1e3,
        client_decode, total_s);
  }
  return 0;
}

// ---------------------------------------------------------------------------

// One Chat call: the reply streams to stdout; `reply` gets its text and
// `done` the Done message.
grpc::Status chat_turn(Client& client, const v1::ChatRequest& request, std::string* reply,
                       v1::Done* done) {
  grpc::ClientContext context;
  hearth::client::prepare_context(&context, client.options);
  auto reader = client.stub->Chat(&context, request);
  v1::GenerateResponse response;
  bool got_done = false;
  reply->clear();
  while (reader->Read(&response)) {
    if (response.has_piece()) {
      *reply += response.piece().text();
      std::fwrite(response.piece().text().data(), 1, response.piece().text().size(), stdout);
      std::fflush(stdout);
    } else if (response.has_done()) {
      *done = response.done();
      got_done = true;
    }
  }
  grpc::Status status = reader->Finish();
  if (status.ok() && !got_done)
    status = grpc::Status(grpc::StatusCode::INTERNAL, "the stream ended without a Done message");
  std::printf("\n");
  std::fflush(stdout);
  return status;
}

void add_message(v1::ChatRequest& request, const std::string& role, const std::string& content) {
  v1::ChatMessage* m = request.add_messages();
  m->set_role(role);
  m->set_content(content);
}

int cmd_chat(int argc, char** argv) {
  const std::string tool = "hearth chat";
  std::vector<std::string> value_flags = {"model", "message", "system"};
  value_flags.insert(value_flags.end(), kGenerationValueFlags.begin(), kGenerationValueFlags.end());
  Flags flags = make_flags(tool, value_flags, {"any-json"});
  if (auto rc = parse_flags(flags, tool, kChatUsage, argc, argv)) return *rc;
  v1::ChatRequest request;
  for (const std::string& s : flags.get_all("stop"))
    if (s.empty()) return usage_error(tool + ": --stop: empty stop string");
  if (!generation_options_from_flags(flags, request)) return usage_error(flags.error());
  if (auto rc = response_format_from_flags(flags, tool, request)) return *rc;
  if (flags.has("message") && flags.get("message").empty())
    return usage_error(tool + ": --message: empty message");
  Client client;
  if (auto rc = connect(flags, tool, 0, &client)) return *rc;
  std::string model;
  if (auto rc = resolve_model(flags, tool, client, &model)) return *rc;
  request.set_model(model);
  if (flags.has("system")) add_message(request, "system", flags.get("system"));

  const bool one_shot = flags.has("message");
  std::string line;
  for (;;) {
    if (one_shot) {
      line = flags.get("message");
    } else if (!std::getline(std::cin, line) || line == "/exit") {
      return 0;
    } else if (line.empty()) {
      continue;
    }
    add_message(request, "user", line);
    std::string reply;
    v1::Done done;
    const grpc::Status status = chat_turn(client, request, &reply, &done);
    if (!status.ok()) return rpc_failure("Chat", status);
    std::fprintf(stderr, "[hearth] finish: %s | prompt %u tokens, generated %u\n",
                 finish_reason_name(done.finish_reason()), done.usage().prompt_tokens(),
                 done.usage().generated_tokens());
    if (one_shot) return 0;
    add_message(request, "assistant", reply);
  }
}

std::string human_count(std::uint64_t n) {
  const double x = static_cast<double>(n);
  if (x >= 1e9) return num("%.2fB", x / 1e9);
  if (x >= 1e6) return num("%.1fM", x / 1e6);
  if (x >= 1e3) return num("%.1fK", x / 1e3);
  return std::to_string(n);
}

std::string state_name(v1::ModelInfo::State s) {
  std::string name = v1::ModelInfo::State_Name(s);
  if (name.rfind("STATE_", 0) == 0) name = name.substr(6);
  return name.empty() ? "STATE_" + std::to_string(static_cast<int>(s)) : name;
}

int cmd_models(int argc, char** argv) {
  const std::string tool = "hearth models";
  Flags flags = make_flags(tool, {}, {"json"});
  if (auto rc = parse_flags(flags, tool, kModelsUsage, argc, argv)) return *rc;
  Client client;
  if (auto rc = connect(flags, tool, kUnaryTimeoutS, &client)) return *rc;
  v1::ListModelsResponse response;
  const grpc::Status status = list_models(client, &response);
  if (!status.ok()) return rpc_failure("ListModels", status);

  using hearth::json_string;
  if (flags.get_bool("json").value_or(false)) {
    std::string out = "{\"models\":[";
    for (int i = 0; i < response.models_size(); ++i) {
      const auto& m = response.models(i);
      if (i) out += ",";
      out += "{\"name\":" + json_string(m.name()) +
             ",\"architecture\":" + json_string(m.architecture()) +
             ",\"parameters\":" + std::to_string(m.parameters()) +
             ",\"quantization\":" + json_string(m.quantization()) +
             ",\"context_length\":" + std::to_string(m.context_length()) +
             ",\"vocab_size\":" + std::to_string(m.vocab_size()) +
             ",\"instances\":" + std::to_string(m.instances()) +
             ",\"instances_busy\":" + std::to_string(m.instances_busy()) +
             ",\"queue_depth\":" + std::to_string(m.queue_depth()) +
             ",\"queue_capacity\":" + std::to_string(m.queue_capacity()) +
             ",\"state\":" + json_string(state_name(m.state())) +
             ",\"kv_cache_type\":" + json_string(m.kv_cache_type()) +
             ",\"source\":" + json_string(m.source()) +
             ",\"demo\":" + (m.demo() ? "true" : "false") + ",\"error\":" + json_string(m.error()) +
             "}";
    }
    out += "]}";
    std::printf("%s\n", out.c_str());
    return 0;
  }

  if (response.models_size() == 0) {
    std::printf("no models\n");
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "ARCH", "QUANT", "PARAMS", "CONTEXT", "KV",
                                                 "INSTANCES", "QUEUE", "STATE", "SOURCE"}};
  bool any_demo = false;
  for (const auto& m : response.models()) {
    any_demo = any_demo || m.demo();
    rows.push_back({m.name() + (m.demo() ? " (demo)" : ""), m.architecture(), m.quantization(),
                    human_count(m.parameters()), std::to_string(m.context_length()),
                    m.kv_cache_type(),
                    std::to_string(m.instances_busy()) + "/" + std::to_string(m.instances()),
                    std::to_string(m.queue_depth()) + "/" + std::to_string(m.queue_capacity()),
                    state_name(m.state()), m.source()});
  }
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
  for (const auto& m : response.models())
    if (!m.error().empty()) std::printf("%s: %s\n", m.name().c_str(), m.error().c_str());
  if (any_demo)
    std::printf("(demo): the built-in synthetic model; random weights, its text is meaningless\n");
  return 0;
}

// ---------------------------------------------------------------------------

int cmd_health(int argc, char** argv) {
  const std::string tool = "hearth health";
  Flags flags = make_flags(tool, {"service"}, {});
  if (auto rc = parse_flags(flags, tool, kHealthUsage, argc, argv)) return *rc;
  Client client;
  if (auto rc = connect(flags, tool, kUnaryTimeoutS, &client)) return *rc;
  auto health = hearth::client::check_health(client.channel, client.options, flags.get("service"));
  if (!health.ok()) {
    // The default health service answers NOT_FOUND for a service it does not know.
    if (health.status().code() == absl::StatusCode::kNotFound) std::printf("SERVICE_UNKNOWN\n");
    std::fflush(stdout);
    std::fprintf(stderr, "hearth: Check failed: %s: %s\n",
                 hearth::client::status_code_name(static_cast<int>(health.status().code())),
                 std::string(health.status().message()).c_str());
    return kExitRpc;
  }
  std::printf("%s\n", hearth::client::health_status_name(*health));
  return *health == hearth::client::HealthStatus::kServing ? 0 : 1;
}

// ---------------------------------------------------------------------------

int cmd_bench(int argc, char** argv) {
  const std::string tool = "hearth bench";
  Flags flags =
      make_flags(tool,
                 {"model", "concurrency", "requests", "warmup", "prompt", "prompt-tokens",
                  "max-tokens", "temperature", "seed", "cancel-fraction", "deadline-fraction",
                  "short-deadline-ms", "short-deadline-max-tokens", "long-prompt-fraction",
                  "long-prompt-tokens", "mix-seed", "shared-prefix-tokens", "chat-turns"},
                 {"json", "quiet", "ignore-eos", "prefix-reuse"});
  if (auto rc = parse_flags(flags, tool, kBenchUsage, argc, argv)) return *rc;
  hearth::client::BenchOptions o;
  std::int64_t concurrency = 1, requests = 10, warmup = 0, prompt_tokens = 0, max_tokens = 64,
               seed = 0, long_tokens = 512, mix_seed = 1, short_max_tokens = 0, shared_prefix = 0,
               chat_turns = 0;
  double temperature = 0, cancel = 0, deadline = 0, short_ms = 50, long_fraction = 0;
  const bool ok = flags.get_int("concurrency", 1, 4096, &concurrency) &&
                  flags.get_int("requests", 1, hearth::client::kMaxBenchRequests, &requests) &&
                  flags.get_int("warmup", 0, 1000000, &warmup) &&
                  flags.get_int("prompt-tokens", 1, 1 << 20, &prompt_tokens) &&
                  flags.get_int("max-tokens", 1, 1 << 20, &max_tokens) &&
                  flags.get_int("seed", 0, INT64_MAX, &seed) &&
                  flags.get_int("short-deadline-max-tokens", 1, 1 << 20, &short_max_tokens) &&
                  flags.get_int("long-prompt-tokens", 1, 1 << 20, &long_tokens) &&
                  flags.get_int("mix-seed", 0, INT64_MAX, &mix_seed) &&
                  flags.get_int("shared-prefix-tokens", 0, 1 << 20, &shared_prefix) &&
                  flags.get_int("chat-turns", 0, 1 << 20, &chat_turns) &&
                  flags.get_float("temperature", 0, 100, &temperature) &&
                  flags.get_float("cancel-fraction", 0, 1, &cancel) &&
                  flags.get_float("deadline-fraction", 0, 1, &deadline) &&
                  flags.get_float("short-deadline-ms", 0.001, 1e9, &short_ms) &&
                  flags.get_float("long-prompt-fraction", 0, 1, &long_fraction);
  if (!ok) return usage_error(flags.error());
  // Each request's outcome is kept for the report: a run's requests are bounded.
  if (chat_turns > hearth::client::kMaxBenchRequests / concurrency)
    return usage_error(
        tool + ": --concurrency x --chat-turns: " + std::to_string(concurrency * chat_turns) +
        " requests; at most " + std::to_string(hearth::client::kMaxBenchRequests) + " per run");
  if (flags.has("prompt") && flags.has("prompt-tokens"))
    return usage_error(tool + ": --prompt and --prompt-tokens: give one, not both");
  if (flags.has("prompt")) {
    o.prompt = flags.get("prompt");
    if (o.prompt.empty()) return usage_error(tool + ": --prompt: empty prompt");
  }
  o.concurrency = static_cast<std::size_t>(concurrency);
  o.requests = static_cast<std::size_t>(requests);
  o.warmup = static_cast<std::size_t>(warmup);
  o.prompt_tokens = static_cast<std::size_t>(prompt_tokens);
  o.max_tokens = static_cast<std::uint32_t>(max_tokens);
  o.seed = static_cast<std::uint64_t>(seed);
  o.long_prompt_tokens = static_cast<std::size_t>(long_tokens);
  o.mix_seed = static_cast<std::uint64_t>(mix_seed);
  o.temperature = temperature;
  o.cancel_fraction = cancel;
  o.deadline_fraction = deadline;
  o.short_deadline_ms = short_ms;
  o.short_deadline_max_tokens = static_cast<std::uint32_t>(short_max_tokens);
  o.long_prompt_fraction = long_fraction;
  o.ignore_eos = flags.get_bool("ignore-eos").value_or(true);
  o.shared_prefix_tokens = static_cast<std::size_t>(shared_prefix);
  o.chat_turns = static_cast<std::size_t>(chat_turns);
  o.prefix_reuse = flags.get_bool("prefix-reuse").value_or(true);
  if (o.chat_turns > 0 && o.shared_prefix_tokens > 0)
    return usage_error(tool + ": --chat-turns and --shared-prefix-tokens: give one, not both");
  o.progress = !flags.get_bool("quiet").value_or(false) && isatty(STDERR_FILENO) == 1;
  const bool json = flags.get_bool("json").value_or(false);

  Client client;
  if (auto rc = connect(flags, tool, 0, &client)) return *rc;
  if (auto rc = resolve_model(flags, tool, client, &o.model)) return *rc;

  double wall_s = 0;
  auto outcomes = hearth::client::run_bench(client.channel, client.options, o, &wall_s);
  if (!outcomes.ok()) {
    std::fprintf(stderr, "hearth: Generate failed: %s: %s\n",
                 hearth::client::status_code_name(static_cast<int>(outcomes.status().code())),
                 std::string(outcomes.status().message()).c_str());
    return kExitRpc;
  }
  const auto summary = hearth::client::summarize(*outcomes, wall_s, o.concurrency);
  if (json) {
    std::printf("%s\n", hearth::client::summary_json(summary).c_str());
  } else {
    std::printf("model:           %s, %u max tokens, prompt %s\n", o.model.c_str(), o.max_tokens,
                o.prompt_tokens ? ("~" + std::to_string(o.prompt_tokens) + " tokens").c_str()
                                : ("\"" + o.prompt + "\"").c_str());
    std::fputs(hearth::client::summary_text(summary).c_str(), stdout);
  }
  std::fflush(stdout);
  return summary.failed > 0 ? kExitRpc : 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The subcommand is the first argument that is not a connection flag (or
  // its value); every flag, before or after it, goes to the subcommand's parser.
  auto is_value_flag = [](const std::string& name) {
    for (const char* f : hearth::client::kConnectionValueFlags)
      if (name == f) return true;
    return false;
  };
  int sub = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      sub = i;
      break;
    }
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::fputs(hearth::client::kConnectionUsage, stdout);
      return 0;
    }
    const std::string name = a.substr(2);
    if (name.find('=') == std::string::npos && is_value_flag(name)) ++i;
  }
  if (sub < 0) {
    std::fputs(kUsage, stderr);
    return usage_error("hearth: no subcommand given");
  }
  const std::string command = argv[sub];
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i)
    if (i != sub) rest.push_back(argv[i]);
  rest.push_back(nullptr);
  const int n = static_cast<int>(rest.size()) - 1;
  if (command == "generate") return cmd_generate(n, rest.data());
  if (command == "chat") return cmd_chat(n, rest.data());
  if (command == "models") return cmd_models(n, rest.data());
  if (command == "health") return cmd_health(n, rest.data());
  if (command == "bench") return cmd_bench(n, rest.data());
  if (command == "help") {
    std::fputs(kUsage, stdout);
    std::fputs(hearth::client::kConnectionUsage, stdout);
    return 0;
  }
  return usage_error("hearth: unknown subcommand '" + command +
                     "' (subcommands: generate, chat, models, health, bench; see hearth --help)");
}
