#include "server/openai_api.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>

#include "base/json_shape.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/chat_template.h"
#include "engine/sequence.h"
#include "engine/unicode.h"
#include "hearth/v1/inference.pb.h"
#include "nlohmann/json.hpp"
#include "server/invalid_argument.h"
#include "server/model_registry.h"
#include "server/response_format.h"

namespace hearth::server::openai {
namespace {

using Json = nlohmann::ordered_json;

// The field's value, or nullopt when absent or null (OpenAI's clients send
// null for "not given").
const Json* field(const Json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<std::optional<double>> number(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return invalid(str_cat(name, ": must be a number"));
  return v->get<double>();
}

absl::StatusOr<std::optional<std::int64_t>> integer(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  // nlohmann keeps every non-negative integer unsigned (and calls it an
  // integer too): one past INT64_MAX must not wrap to a negative value.
  if (v->is_number_unsigned()) {
    const std::uint64_t u = v->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(INT64_MAX))
      return invalid(str_cat(name, ": ", u, " is too large"));
    return static_cast<std::int64_t>(u);
  }
  if (v->is_number_integer()) return v->get<std::int64_t>();
  return invalid(str_cat(name, ": must be an integer"));
}

// How an error names field `name` of the object at path `parent`
// ("messages[0].role"), or of the body itself when `parent` is empty.
std::string shown(std::string_view parent, const char* name) {
  return parent.empty() ? std::string(name) : str_cat(parent, ".", name);
}

absl::StatusOr<std::optional<bool>> boolean(const Json& body, const char* name,
                                            std::string_view parent = {}) {
  const Json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return invalid(str_cat(shown(parent, name), ": must be true or false"));
  return v->get<bool>();
}

absl::StatusOr<std::optional<std::string>> string(const Json& body, const char* name,
                                                  std::string_view parent = {}) {
  const Json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return invalid(str_cat(shown(parent, name), ": must be a string"));
  return v->get<std::string>();
}

// A float field into `out` (unchanged when absent); the range checks are
// the request path's (engine::validate_sampling).
absl::Status read_float(const Json& body, const char* name, float& out) {
  HEARTH_ASSIGN_OR_RETURN(std::optional<double> v, number(body, name));
  if (v && std::fabs(*v) > std::numeric_limits<float>::max())  // no float holds it
    return invalid(str_cat(name, ": ", *v, " is out of range"));
  if (v) out = static_cast<float>(*v);
  return absl::OkStatus();
}

// llama.cpp's server names the repetition penalty and its window
// repeat_penalty and repeat_last_n, and its clients send those.
absl::Status read_llama_cpp_penalty(const Json& body, engine::SamplingParams& s) {
  if (field(body, "repeat_penalty") != nullptr) {
    if (field(body, "repetition_penalty") != nullptr)
      return invalid("repeat_penalty: give repetition_penalty or repeat_penalty, not both");
    float v = 0;
    HEARTH_RETURN_IF_ERROR(read_float(body, "repeat_penalty", v));
    if (!(v > 0.0f && v <= 10.0f))
      return invalid(str_cat("repeat_penalty: ", v, " is out of range: allowed (0, 10]"));
    s.repetition_penalty = v;
  }
  HEARTH_ASSIGN_OR_RETURN(std::optional<std::int64_t> last_n, integer(body, "repeat_last_n"));
  if (last_n) {
    if (*last_n < 0 || *last_n > 4096)
      return invalid(str_cat("repeat_last_n: ", *last_n, " is out of range: allowed [0, 4096]"));
    s.penalty_last_n = static_cast<std::int32_t>(*last_n);
  }
  return absl::OkStatus();
}

absl::Status read_stop(const Json& body, std::vector<std::string>& out) {
  const Json* v = field(body, "stop");
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
    return absl::OkStatus();
  }
  if (!v->is_array()) return invalid("stop: must be a string or an array of strings");
  for (std::size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) return invalid(str_cat("stop[", i, "]: must be a string"));
    out.push_back((*v)[i].get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status read_response_format(const Json& body, engine::GenerationRequest& out) {
  const Json* v = field(body, "response_format");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_object()) return invalid("response_format: must be an object");
  HEARTH_ASSIGN_OR_RETURN(std::optional<std::string> type, string(*v, "type", "response_format"));
  if (!type) return invalid("response_format.type: missing (text, json_object or json_schema)");
  hearth::v1::ResponseFormat format;
  if (*type == "json_object") {
    // OpenAI's JSON mode: an object (any JSON value would let a bare string
    // through, which no client of this mode expects).
    format.set_json_schema(R"({"type":"object","additionalProperties":true})");
  } else if (*type == "json_schema") {
    const Json* spec = field(*v, "json_schema");
    if (spec == nullptr || !spec->is_object())
      return invalid("response_format.json_schema: must be an object with a schema");
    const Json* schema = field(*spec, "schema");
    if (schema == nullptr) return invalid("response_format.json_schema.schema: missing");
    format.set_json_schema(dump(*schema));
  } else if (*type != "text") {
    return invalid(
        str_cat("response_format.type: '", *type, "' is not text, json_object or json_schema"));
  }
  HEARTH_ASSIGN_OR_RETURN(out.grammar, compile_response_format(format));
  return absl::OkStatus();
}

// Fields OpenAI defines that hearth cannot honour: refused rather than
// silently ignored.
absl::Status refuse_unsupported(const Json& body) {
  HEARTH_ASSIGN_OR_RETURN(std::optional<std::int64_t> n, integer(body, "n"));
  if (n && *n != 1) return invalid(str_cat("n: ", *n, " is not supported (only 1)"));
  HEARTH_ASSIGN_OR_RETURN(std::optional<std::int64_t> best_of, integer(body, "best_of"));
  if (best_of && *best_of != 1)
    return invalid(str_cat("best_of: ", *best_of, " is not supported (only 1)"));
  HEARTH_ASSIGN_OR_RETURN(std::optional<bool> echo, boolean(body, "echo"));
  if (echo.value_or(false)) return invalid("echo: true is not supported");
  if (const Json* suffix = field(body, "suffix");
      suffix != nullptr && !suffix->empty() &&
      !(suffix->is_string() && suffix->get<std::string>().empty()))
    return invalid("suffix: not supported");
  if (const Json* bias = field(body, "logit_bias"); bias != nullptr && !bias->empty())
    return invalid("logit_bias: not supported");
  // Output other than text (audio) would come back as text alone.
  if (field(body, "audio") != nullptr) return invalid("audio: not supported (text output only)");
  if (const Json* modalities = field(body, "modalities"); modalities != nullptr) {
    if (!modalities->is_array()) return invalid("modalities: must be an array");
    for (std::size_t i = 0; i < modalities->size(); ++i)
      if ((*modalities)[i] != "text")
        return invalid(str_cat("modalities[", i, "]: only \"text\" is supported"));
  }
  return absl::OkStatus();
}

// What completions and chat share: sampling, stop, limits, streaming.
absl::Status read_common(const Json& body, std::size_t max_tokens_limit,
                         std::size_t default_max_tokens, std::uint64_t default_seed, Request& out,
                         engine::GenerationRequest& r, bool& reuse_prefix) {
  HEARTH_RETURN_IF_ERROR(refuse_unsupported(body));
  const char* max_name =
      out.endpoint == Endpoint::kChatCompletions && field(body, "max_completion_tokens") != nullptr
          ? "max_completion_tokens"
          : "max_tokens";
  HEARTH_ASSIGN_OR_RETURN(std::optional<std::int64_t> max_tokens, integer(body, max_name));
  if (max_tokens && (*max_tokens < 1 || static_cast<std::uint64_t>(*max_tokens) > max_tokens_limit))
    return invalid(str_cat(max_name, ": ", *max_tokens, " is out of range: allowed [1, ",
                           max_tokens_limit, "]"));
  r.max_tokens = max_tokens ? static_cast<std::size_t>(*max_tokens) : default_max_tokens;

  engine::SamplingParams& s = r.sampling;
  s.temperature = 1.0f;  // OpenAI's default
  HEARTH_RETURN_IF_ERROR(read_float(body, "temperature", s.temperature));
  HEARTH_RETURN_IF_ERROR(read_float(body, "top_p", s.top_p));
  HEARTH_RETURN_IF_ERROR(read_float(body, "min_p", s.min_p));
  HEARTH_RETURN_IF_ERROR(read_float(body, "presence_penalty", s.presence_penalty));
  HEARTH_RETURN_IF_ERROR(read_float(body, "frequency_penalty", s.frequency_penalty));
  HEARTH_RETURN_IF_ERROR(read_float(body, "repetition_penalty", s.repetition_penalty));
  HEARTH_RETURN_IF_ERROR(read_llama_cpp_penalty(body, s));
  HEARTH_ASSIGN_OR_RETURN(std::optional<std::int64_t> top_k, integer(body, "top_k"));
  if (top_k) {
    if (*top_k < 0 || *top_k > std::numeric_limits<std::int32_t>::max())
      return invalid(str_cat("top_k: ", *top_k, " is out of range: allowed [0, vocabulary]"));
    s.top_k = static_cast<std::int32_t>(*top_k);
  }
  // OpenAI takes top_p in [0, 1]: a nucleus of no probability mass is the
  // most likely token alone (the sampler's top_p must be above 0).
  if (s.top_p == 0.0f) {
    s.top_p = 1.0f;
    s.top_k = 1;
  }
  HEARTH_ASSIGN_OR_RETURN(std::optional<std::int64_t> seed, integer(body, "seed"));
  // -1 asks for a random seed, as llama.cpp's server reads it; other values
  // are used as given (a negative one as its two's complement).
  s.seed = seed && *seed != -1 ? static_cast<std::uint64_t>(*seed) : default_seed;

  HEARTH_RETURN_IF_ERROR(read_stop(body, r.stop));
  HEARTH_ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, boolean(body, "ignore_eos"));
  r.ignore_eos = ignore_eos.value_or(false);
  HEARTH_ASSIGN_OR_RETURN(std::optional<bool> cache_prompt, boolean(body, "cache_prompt"));
  reuse_prefix = cache_prompt.value_or(true);
  HEARTH_RETURN_IF_ERROR(read_response_format(body, r));

  HEARTH_ASSIGN_OR_RETURN(std::optional<bool> stream, boolean(body, "stream"));
  out.stream = stream.value_or(false);
  if (const Json* options = field(body, "stream_options"); options != nullptr) {
    if (!options->is_object()) return invalid("stream_options: must be an object");
    HEARTH_ASSIGN_OR_RETURN(std::optional<bool> usage,
                            boolean(*options, "include_usage", "stream_options"));
    if (usage) {
      if (!out.stream) return invalid("stream_options.include_usage: only with stream: true");
      out.include_usage = *usage;
    }
  }
  return absl::OkStatus();
}

absl::Status read_model(const Json& body, std::string& out) {
  HEARTH_ASSIGN_OR_RETURN(std::optional<std::string> model, string(body, "model"));
  if (!model || model->empty()) return invalid("model: missing (GET /v1/models lists them)");
  out = std::move(*model);
  return absl::OkStatus();
}

absl::Status read_completion(const Json& body, std::size_t max_tokens_limit,
                             std::uint64_t default_seed, Request& out) {
  GenerateCall& call = out.generate;
  HEARTH_RETURN_IF_ERROR(read_model(body, call.model));
  const Json* prompt = field(body, "prompt");
  if (prompt == nullptr) return invalid("prompt: missing");
  if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer())
    return invalid("prompt: token ids are not supported (send the prompt as one string)");
  if (prompt->is_array() && prompt->size() == 1) prompt = &(*prompt)[0];
  if (prompt->is_array())
    return invalid(str_cat("prompt: an array of ", prompt->size(),
                           " prompts is not supported (send one string)"));
  if (!prompt->is_string()) return invalid("prompt: must be a string");
  call.request.prompt = prompt->get<std::string>();

  constexpr std::size_t kCompletionDefaultMaxTokens = 16;  // OpenAI's
  HEARTH_RETURN_IF_ERROR(read_common(body, max_tokens_limit,
                                     std::min(kCompletionDefaultMaxTokens, max_tokens_limit),
                                     default_seed, out, call.request, call.reuse_prefix));
  call.method = out.stream ? "Generate" : "Complete";
  HEARTH_ASSIGN_OR_RETURN(std::optional<std::int64_t> logprobs, integer(body, "logprobs"));
  if (logprobs) {
    if (*logprobs < 0 || *logprobs > static_cast<std::int64_t>(engine::kMaxTopLogprobs))
      return invalid(str_cat("logprobs: ", *logprobs, " is out of range: allowed [0, ",
                             engine::kMaxTopLogprobs, "]"));
    call.request.logprobs = true;
    call.request.top_logprobs = static_cast<std::size_t>(*logprobs);
  }
  return absl::OkStatus();
}

// A message's content as the template sees it: a string (text parts are
// joined).
absl::StatusOr<std::string> message_content(const Json& message, const std::string& name) {
  const Json* content = field(message, "content");
  if (content == nullptr) return std::string();
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array())
    return invalid(str_cat(name, ".content: must be a string or an array of parts"));
  std::string text;
  for (std::size_t j = 0; j < content->size(); ++j) {
    const Json& part = (*content)[j];
    const std::string part_name = str_cat(name, ".content[", j, "]");
    if (!part.is_object()) return invalid(str_cat(part_name, ": must be an object"));
    HEARTH_ASSIGN_OR_RETURN(std::optional<std::string> type, string(part, "type", part_name));
    if (type.value_or("") != "text")
      return invalid(
          str_cat(part_name, ".type: '", type.value_or(""), "' is not supported (only text)"));
    HEARTH_ASSIGN_OR_RETURN(std::optional<std::string> part_text, string(part, "text", part_name));
    if (!part_text) return invalid(str_cat(part_name, ".text: missing"));
    text += *part_text;
  }
  return text;
}

absl::StatusOr<Json> template_message(const Json& message, std::size_t i) {
  const std::string name = str_cat("messages[", i, "]");
  if (!message.is_object()) return invalid(str_cat(name, ": must be an object"));
  HEARTH_ASSIGN_OR_RETURN(std::optional<std::string> role, string(message, "role", name));
  if (!role || role->empty()) return invalid(str_cat(name, ".role: must not be empty"));
  // OpenAI's roles; "developer" is its newer name for "system", which is
  // the one templates know (they drop or refuse a role they do not).
  if (*role == "developer") role = "system";
  if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool")
    return invalid(str_cat(name, ".role: '", *role,
                           "' is not one of system, developer, user, assistant, tool"));
  HEARTH_ASSIGN_OR_RETURN(std::string content, message_content(message, name));
  Json out = {{"role", *role}, {"content", std::move(content)}};
  HEARTH_ASSIGN_OR_RETURN(std::optional<std::string> speaker, string(message, "name", name));
  if (speaker) out["name"] = *speaker;
  HEARTH_ASSIGN_OR_RETURN(std::optional<std::string> call_id,
                          string(message, "tool_call_id", name));
  if (call_id) out["tool_call_id"] = *call_id;
  if (const Json* calls = field(message, "tool_calls"); calls != nullptr) {
    if (!calls->is_array()) return invalid(str_cat(name, ".tool_calls: must be an array"));
    out["tool_calls"] = *calls;
  }
  return out;
}

absl::Status read_chat(const Json& body, std::size_t max_tokens_limit, std::uint64_t default_seed,
                       Request& out) {
  ChatCall& call = out.chat;
  HEARTH_RETURN_IF_ERROR(read_model(body, call.model));
  const Json* messages = field(body, "messages");
  if (messages == nullptr || !messages->is_array() || messages->empty())
    return invalid("messages: must be a non-empty array");
  chat::ChatContext& c = call.conversation;
  c.messages = Json::array();
  for (std::size_t i = 0; i < messages->size(); ++i) {
    HEARTH_ASSIGN_OR_RETURN(Json m, template_message((*messages)[i], i));
    c.messages.push_back(std::move(m));
  }
  HEARTH_ASSIGN_OR_RETURN(std::optional<bool> generation_prompt,
                          boolean(body, "add_generation_prompt"));
  c.add_generation_prompt = generation_prompt.value_or(true);
  if (field(body, "functions") != nullptr || field(body, "function_call") != nullptr)
    return invalid("functions: not supported (OpenAI's older form; send tools)");
  // The template offers the tools and the model decides ("auto"); "none"
  // leaves them out of the prompt. Forcing a call needs a grammar hearth
  // does not build from tools, so it is refused rather than ignored.
  bool offer_tools = true;
  if (const Json* choice = field(body, "tool_choice"); choice != nullptr) {
    if (*choice == "none")
      offer_tools = false;
    else if (*choice != "auto")
      return invalid(str_cat("tool_choice: ", dump(*choice),
                             " is not supported (only \"auto\" and \"none\")"));
  }
  if (const Json* tools = field(body, "tools"); tools != nullptr) {
    if (!tools->is_array()) return invalid("tools: must be an array");
    if (offer_tools) c.tools = *tools;
  }
  if (const Json* kwargs = field(body, "chat_template_kwargs"); kwargs != nullptr) {
    if (!kwargs->is_object()) return invalid("chat_template_kwargs: must be an object");
    if (const std::optional<std::string> key = chat::first_reserved_name(*kwargs))
      return invalid(str_cat("chat_template_kwargs.", *key,
                             ": the server sets this name itself (send messages, tools and "
                             "add_generation_prompt as the request's own fields)"));
    c.extra = *kwargs;
  }

  HEARTH_RETURN_IF_ERROR(read_common(body, max_tokens_limit, max_tokens_limit, default_seed, out,
                                     call.request, call.reuse_prefix));
  call.method = out.stream ? "Chat" : "ChatComplete";
  HEARTH_ASSIGN_OR_RETURN(std::optional<bool> logprobs, boolean(body, "logprobs"));
  call.request.logprobs = logprobs.value_or(false);
  HEARTH_ASSIGN_OR_RETURN(std::optional<std::int64_t> top, integer(body, "top_logprobs"));
  if (top) {
    if (*top < 0 || *top > static_cast<std::int64_t>(engine::kMaxTopLogprobs))
      return invalid(str_cat("top_logprobs: ", *top, " is out of range: allowed [0, ",
                             engine::kMaxTopLogprobs, "]"));
    call.request.top_logprobs = static_cast<std::size_t>(*top);
  }
  return absl::OkStatus();
}

const char* finish_reason(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kEos:
    case engine::FinishReason::kStopString:
      return "stop";
    case engine::FinishReason::kMaxTokens:
    case engine::FinishReason::kContextLimit:
      return "length";
    case engine::FinishReason::kCancelled:
      break;
  }
  return "stop";
}

Json byte_values(std::string_view raw) {
  Json bytes = Json::array();
  for (char c : raw) bytes.push_back(static_cast<unsigned char>(c));
  return bytes;
}

// One token in chat's logprobs format: token, logprob, bytes, top_logprobs.
Json chat_logprob(const engine::TokenLogprob& t, const engine::Tokenizer& tokenizer,
                  const engine::TokenLogprobs* with_top) {
  const std::string raw = tokenizer.token_text(t.id);
  Json out = {
      {"token", engine::sanitize_utf8(raw)}, {"logprob", t.logprob}, {"bytes", byte_values(raw)}};
  if (with_top != nullptr) {
    Json top = Json::array();
    for (const engine::TokenLogprob& alt : with_top->alternatives())
      top.push_back(chat_logprob(alt, tokenizer, nullptr));
    out["top_logprobs"] = std::move(top);
  }
  return out;
}

// Completions' logprobs of one token, as parallel arrays of length one.
Json completion_logprobs(const PieceLogprobs& lp, std::size_t text_offset) {
  Json top = Json::object();
  for (const engine::TokenLogprob& alt : lp.values.alternatives())
    top[engine::sanitize_utf8(lp.tokenizer.token_text(alt.id))] = alt.logprob;
  return {{"tokens", {engine::sanitize_utf8(lp.tokenizer.token_text(lp.values.chosen.id))}},
          {"token_logprobs", {lp.values.chosen.logprob}},
          {"top_logprobs", {std::move(top)}},
          {"text_offset", {text_offset}}};
}

// A choice's "logprobs" from LogprobQueue entries: chat's {"content": [...]},
// a completion's parallel arrays.
Json logprobs_object(Endpoint endpoint, const Json& entries) {
  if (endpoint == Endpoint::kChatCompletions) return {{"content", entries}};
  Json out = {{"tokens", Json::array()},
              {"token_logprobs", Json::array()},
              {"top_logprobs", Json::array()},
              {"text_offset", Json::array()}};
  for (const Json& e : entries)
    for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      out[key].push_back(e[key][0]);
  return out;
}

Json head_json(const ResponseHead& head, bool chunk) {
  const bool chat = head.endpoint == Endpoint::kChatCompletions;
  Json out = {
      {"id", head.id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
      {"created", head.created},
      {"model", head.model}};
  if (chunk && head.usage_in_chunks) out["usage"] = nullptr;
  return out;
}

Json usage_json(const GenerateOutcome& o) {
  const std::size_t prompt = o.prompt_ids.size();
  return {{"prompt_tokens", prompt},
          {"completion_tokens", o.generated_tokens},
          {"total_tokens", prompt + o.generated_tokens},
          {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
}

std::string event(const Json& value) { return str_cat("data: ", dump(value), "\n\n"); }

// The field an error message names: its text up to the first ':', ' ' or
// '=' when that looks like a field path ("messages[2].role").
std::string named_field(std::string_view message) {
  // A chat template's refusal (its raise_exception) is about the conversation.
  if (message.starts_with("chat template (")) return "messages";
  const std::size_t end = message.find_first_of(": =");
  if (end == std::string_view::npos || end == 0 || message.substr(end).starts_with(" body"))
    return "";
  const std::string_view name = message.substr(0, end);
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
          c == '[' || c == ']'))
      return "";
  return std::string(name);
}

}  // namespace

std::string dump(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

absl::StatusOr<Request> parse_request(Endpoint endpoint, std::string_view body,
                                      std::size_t max_tokens_limit, std::uint64_t default_seed) {
  if (const std::size_t bad = engine::first_invalid_utf8(body); bad < body.size())
    return invalid(str_cat("request body: not valid UTF-8 (byte ", bad, ")"));
  if (const std::string problem = json_shape_problem(body); !problem.empty())
    return invalid(str_cat("request body: ", problem));
  Json json = Json::parse(body, nullptr, false);
  if (json.is_discarded()) {
    // Parse again to learn where and why (the non-throwing parse says neither).
    try {
      const Json again = Json::parse(body);
    } catch (const Json::parse_error& e) {
      return invalid(str_cat("request body: not valid JSON (byte ", e.byte, ")"));
    } catch (const Json::exception& e) {  // e.g. a number beyond a double's range
      return invalid(str_cat("request body: not valid JSON (", e.what(), ")"));
    }
    return invalid("request body: not valid JSON");
  }
  if (!json.is_object()) return invalid("request body: must be a JSON object");
  Request out;
  out.endpoint = endpoint;
  if (endpoint == Endpoint::kCompletions)
    HEARTH_RETURN_IF_ERROR(read_completion(json, max_tokens_limit, default_seed, out));
  else
    HEARTH_RETURN_IF_ERROR(read_chat(json, max_tokens_limit, default_seed, out));
  return out;
}

void LogprobQueue::add(std::string_view text, const PieceLogprobs* logprobs) {
  if (logprobs != nullptr) {
    held_.emplace_back(decoded_, endpoint_ == Endpoint::kChatCompletions
                                     ? chat_logprob(logprobs->values.chosen, logprobs->tokenizer,
                                                    &logprobs->values)
                                     : completion_logprobs(*logprobs, decoded_));
    decoded_ += logprobs->values.text_bytes;
  }
  output_ += text.size();
  std::size_t n = 0;
  while (n < held_.size() && held_[n].first < output_) ++n;
  for (std::size_t i = 0; i < n; ++i) released_.push_back(std::move(held_[i].second));
  held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(n));
}

Json LogprobQueue::take_released() { return std::exchange(released_, Json::array()); }

Json LogprobQueue::take_rest(engine::FinishReason finish) {
  Json out = take_released();
  if (finish != engine::FinishReason::kStopString)
    for (auto& [offset, entry] : held_) out.push_back(std::move(entry));
  held_.clear();
  return out;
}

void ResponseBuilder::add_piece(std::string_view text, std::int32_t token,
                                const PieceLogprobs* logprobs) {
  logprobs_ = logprobs_ || logprobs != nullptr;
  queue_.add(text, token >= 0 ? logprobs : nullptr);
  text_.append(text);
}

std::string ResponseBuilder::finish(const GenerateOutcome& outcome) const {
  Json out = head_json(head_, false);
  Json choice = {{"index", 0}};
  Json logprobs = nullptr;
  if (logprobs_) {
    LogprobQueue rest = queue_;
    logprobs = logprobs_object(head_.endpoint, rest.take_rest(outcome.finish));
  }
  if (head_.endpoint == Endpoint::kChatCompletions) {
    choice["message"] = {{"role", "assistant"}, {"content", text_}};
  } else {
    choice["text"] = text_;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason(outcome.finish);
  out["choices"] = Json::array({std::move(choice)});
  out["usage"] = usage_json(outcome);
  return dump(out);
}

std::string role_event(const ResponseHead& head) {
  Json out = head_json(head, true);
  out["choices"] = Json::array({{{"index", 0},
                                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}});
  return event(out);
}

std::string piece_event(const ResponseHead& head, std::string_view text, const Json& logprobs) {
  if (logprobs.empty() && text.empty()) return "";
  Json out = head_json(head, true);
  Json choice = {{"index", 0}};
  if (head.endpoint == Endpoint::kChatCompletions)
    choice["delta"] = {{"content", text}};
  else
    choice["text"] = text;
  choice["logprobs"] = logprobs.empty() ? Json(nullptr) : logprobs_object(head.endpoint, logprobs);
  choice["finish_reason"] = nullptr;
  out["choices"] = Json::array({std::move(choice)});
  return event(out);
}

std::string finish_event(const ResponseHead& head, const GenerateOutcome& outcome) {
  Json out = head_json(head, true);
  Json choice = {{"index", 0}};
  if (head.endpoint == Endpoint::kChatCompletions)
    choice["delta"] = Json::object();
  else
    choice["text"] = "";
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason(outcome.finish);
  out["choices"] = Json::array({std::move(choice)});
  return event(out);
}

std::string usage_event(const ResponseHead& head, const GenerateOutcome& outcome) {
  Json out = head_json(head, true);
  out["choices"] = Json::array();
  out["usage"] = usage_json(outcome);
  return event(out);
}

std::string error_event(const absl::Status& status) {
  return str_cat("data: ", error_body(status, false), "\n\n");
}

int http_status(const absl::Status& status, bool draining) {
  if (is_model_load_failure(status)) return 500;  // not the request's fault, nor passing
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return draining ? 503 : 429;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kCancelled:
      return 499;  // the client closed the request (nginx's convention); nobody reads it
    default:
      return 500;
  }
}

std::string error_body(const absl::Status& status, bool draining) {
  const int http = http_status(status, draining);
  const char* type = http == 401   ? "authentication_error"
                     : http == 404 ? "not_found_error"
                     : http == 429 ? "rate_limit_error"
                     : http == 503 ? "unavailable_error"
                     : http == 504 ? "timeout_error"
                     : http >= 500 ? "server_error"
                                   : "invalid_request_error";
  std::string message(status.message());
  // The request path names sampling fields as the gRPC API nests them.
  if (message.starts_with("sampling.")) message.erase(0, 9);
  const std::string param = http == 400 || http == 404 ? named_field(message) : "";
  std::string code(absl::StatusCodeToString(status.code()));
  if (http == 401) code = "invalid_api_key";
  if (http == 404 && param == "model") code = "model_not_found";
  if (http == 429) code = "rate_limit_exceeded";
  if (engine::is_context_length_exceeded(status)) code = "context_length_exceeded";
  Json error = {{"message", message},
                {"type", type},
                {"param", param.empty() ? Json(nullptr) : Json(param)},
                {"code", code}};
  return dump(Json{{"error", std::move(error)}});
}

}  // namespace hearth::server::openai
