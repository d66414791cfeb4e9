#include "server/request_validation.h"

#include <climits>
#include <map>

#include "base/json_shape.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/chat_template.h"
#include "engine/unicode.h"
#include "server/chat_call.h"
#include "server/invalid_argument.h"
#include "server/response_format.h"

namespace hearth::server {
namespace {

// Reads a base-128 varint at `pos`; false when truncated or longer than 10 bytes.
bool read_varint(std::string_view b, std::size_t& pos, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 70 && pos < b.size(); shift += 7) {
    const auto byte = static_cast<unsigned char>(b[pos++]);
    v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// Walks the wire format of a message of type `d` and names the first string
// field, at any depth, whose bytes are not UTF-8 ("prompt", "stop[1]").
// Empty when there is none or the bytes are not a well-formed message.
std::string first_invalid_utf8_field(std::string_view b, const google::protobuf::Descriptor& d,
                                     const std::string& prefix, int depth) {
  if (depth > 16) return "";
  std::map<int, int> seen;  // repeated fields: how many elements so far
  std::size_t pos = 0;
  while (pos < b.size()) {
    std::uint64_t tag = 0, len = 0;
    if (!read_varint(b, pos, tag)) return "";
    const int number = static_cast<int>(tag >> 3);
    switch (tag & 7) {
      case 0:
        if (!read_varint(b, pos, len)) return "";
        break;
      case 1:
        pos += 8;
        break;
      case 5:
        pos += 4;
        break;
      case 2: {
        if (!read_varint(b, pos, len) || len > b.size() - pos) return "";
        const std::string_view value = b.substr(pos, len);
        pos += len;
        const google::protobuf::FieldDescriptor* f = d.FindFieldByNumber(number);
        if (f == nullptr) break;
        std::string name = prefix + f->name();
        if (f->is_repeated()) name = str_cat(name, "[", seen[number]++, "]");
        if (f->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
          if (const std::size_t bad = engine::first_invalid_utf8(value); bad < value.size())
            return str_cat(name, ": not valid UTF-8 (byte ", bad, " of the field)");
        }
        if (f->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
          std::string inner =
              first_invalid_utf8_field(value, *f->message_type(), name + ".", depth + 1);
          if (!inner.empty()) return inner;
        }
        break;
      }
      default:
        return "";
    }
  }
  return "";
}

}  // namespace

absl::Status parse_request(std::string_view bytes, google::protobuf::Message& out) {
  if (bytes.size() <= static_cast<std::size_t>(INT32_MAX) &&
      out.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return absl::OkStatus();
  const std::string field = first_invalid_utf8_field(bytes, *out.GetDescriptor(), "", 0);
  return invalid(
      field.empty() ? str_cat("request: not a valid ", out.GetDescriptor()->full_name(), " message")
                    : field);
}

namespace {

// The generation options GenerateRequest and ChatRequest share (the same
// field names in both messages).
template <typename Request>
absl::Status map_generation_options(const Request& r, std::size_t max_tokens_limit,
                                    engine::GenerationRequest& out) {
  out.max_tokens = r.has_max_tokens() ? r.max_tokens()
                                      : (kDefaultMaxTokens < max_tokens_limit ? kDefaultMaxTokens
                                                                              : max_tokens_limit);
  out.stop.assign(r.stop().begin(), r.stop().end());
  const hearth::v1::SamplingParams& p = r.sampling();
  engine::SamplingParams& sp = out.sampling;
  sp.temperature = p.temperature();
  sp.top_k = p.top_k();
  sp.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  sp.min_p = p.min_p();
  sp.repetition_penalty = p.repetition_penalty() == 0.0f ? 1.0f : p.repetition_penalty();
  sp.presence_penalty = p.presence_penalty();
  sp.frequency_penalty = p.frequency_penalty();
  if (p.has_penalty_last_n()) sp.penalty_last_n = p.penalty_last_n();
  sp.seed = p.seed();
  out.ignore_eos = r.ignore_eos();
  out.logprobs = r.logprobs();
  out.top_logprobs = r.top_logprobs();
  HEARTH_ASSIGN_OR_RETURN(out.grammar, compile_response_format(r.response_format()));
  return absl::OkStatus();
}

// `text` parsed as JSON, or InvalidArgument naming `field`.
absl::StatusOr<nlohmann::ordered_json> parse_json(const std::string& text, std::string_view field) {
  if (const std::string problem = json_shape_problem(text); !problem.empty())
    return invalid(str_cat(field, ": ", problem));
  nlohmann::ordered_json value = nlohmann::ordered_json::parse(text, nullptr, false);
  if (value.is_discarded()) return invalid(str_cat(field, ": not valid JSON"));
  return value;
}

absl::StatusOr<nlohmann::ordered_json> to_message(const hearth::v1::ChatMessage& m, std::size_t i) {
  const std::string field = str_cat("messages[", i, "]");
  if (m.role().empty()) return invalid(str_cat(field, ".role: must not be empty"));
  nlohmann::ordered_json out = {{"role", m.role()}, {"content", m.content()}};
  if (!m.name().empty()) out["name"] = m.name();
  if (!m.tool_call_id().empty()) out["tool_call_id"] = m.tool_call_id();
  if (!m.tool_calls().empty()) {
    HEARTH_ASSIGN_OR_RETURN(nlohmann::ordered_json calls,
                            parse_json(m.tool_calls(), field + ".tool_calls"));
    if (!calls.is_array()) return invalid(str_cat(field, ".tool_calls: must be a JSON array"));
    out["tool_calls"] = std::move(calls);
  }
  return out;
}

}  // namespace

absl::Status map_generation_request(const hearth::v1::GenerateRequest& r,
                                    std::size_t max_tokens_limit, engine::GenerationRequest& out) {
  out.prompt.assign(r.prompt().data(), r.prompt().size());
  if (r.has_add_bos()) out.tokenize.add_bos = r.add_bos();
  out.tokenize.parse_special = r.parse_special();
  return map_generation_options(r, max_tokens_limit, out);
}

absl::Status map_chat_request(const hearth::v1::ChatRequest& r, std::size_t max_tokens_limit,
                              ChatCall& out) {
  out.model = r.model();
  out.reuse_prefix = !r.disable_prefix_reuse();
  HEARTH_RETURN_IF_ERROR(map_generation_options(r, max_tokens_limit, out.request));
  chat::ChatContext& c = out.conversation;
  c.messages = nlohmann::ordered_json::array();
  for (int i = 0; i < r.messages_size(); ++i) {
    HEARTH_ASSIGN_OR_RETURN(nlohmann::ordered_json m, to_message(r.messages(i), i));
    c.messages.push_back(std::move(m));
  }
  c.add_generation_prompt = r.has_add_generation_prompt() ? r.add_generation_prompt() : true;
  if (!r.tools().empty()) {
    HEARTH_ASSIGN_OR_RETURN(c.tools, parse_json(r.tools(), "tools"));
    if (!c.tools->is_array()) return invalid("tools: must be a JSON array");
  }
  if (!r.template_kwargs().empty()) {
    HEARTH_ASSIGN_OR_RETURN(c.extra, parse_json(r.template_kwargs(), "template_kwargs"));
    if (!c.extra.is_object()) return invalid("template_kwargs: must be a JSON object");
    if (const std::optional<std::string> key = chat::first_reserved_name(c.extra))
      return invalid(str_cat("template_kwargs: '", *key,
                             "' is a name the server sets itself (send messages, tools and "
                             "add_generation_prompt as the request's own fields)"));
  }
  return absl::OkStatus();
}

absl::Status to_generation_request(const hearth::v1::GenerateRequest& r,
                                   std::size_t max_tokens_limit, engine::GenerationRequest& out) {
  HEARTH_RETURN_IF_ERROR(map_generation_request(r, max_tokens_limit, out));
  return check_generation_request(out, max_tokens_limit);
}

}  // namespace hearth::server
