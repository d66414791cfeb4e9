// Fuzz target: chat template text (optionally followed by a NUL byte and a
// JSON object of variables, its "messages" list becoming the messages) ->
// chat::ChatTemplate::parse -> render, under small render limits. Must never
// crash, leak or hang; every failure must be INVALID_ARGUMENT (bad template
// or a render-time template error), FAILED_PRECONDITION (a macro called
// after its scope ended) or RESOURCE_EXHAUSTED (a render limit), and an
// output must stay within the output limit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "chat/chat_template.h"

namespace {

using hearth::chat::ChatContext;
using hearth::chat::ChatTemplate;
using hearth::chat::RenderLimits;
using Json = nlohmann::ordered_json;

void check_error(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kResourceExhausted) return;
  if (s.code() != absl::StatusCode::kInvalidArgument &&
      s.code() != absl::StatusCode::kFailedPrecondition)
    std::abort();
}

ChatContext context_from(std::string_view json_text) {
  ChatContext ctx;
  ctx.bos_token = "<s>";
  ctx.eos_token = "</s>";
  ctx.add_generation_prompt = true;
  ctx.now_unix_seconds = 1721995200;
  ctx.messages = Json::array({{{"role", "system"}, {"content", "sys"}},
                              {{"role", "user"}, {"content", "héllo 🙂"}},
                              {{"role", "assistant"}, {"content", nullptr}}});
  Json vars = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!vars.is_object()) return ctx;
  if (vars.contains("messages") && vars["messages"].is_array()) {
    ctx.messages = vars["messages"];
    vars.erase("messages");
  }
  ctx.extra = std::move(vars);
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl.ok()) {
    check_error(tmpl.status());
    return 0;
  }
  const ChatContext ctx =
      context_from(nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1));
  RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_list_items = 1 << 12;
  limits.max_steps = 100000;
  limits.max_call_depth = 16;
  auto out = tmpl->render(ctx, limits);
  if (!out.ok()) {
    check_error(out.status());
  } else if (out->size() > limits.max_output_bytes) {
    std::abort();
  }
  return 0;
}
