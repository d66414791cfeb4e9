#include "chat/chat_prompt.h"

#include "base/read_file.h"
#include "base/str_cat.h"

namespace hearth::chat {

absl::StatusOr<ChatPrompt> ChatPrompt::create(std::string_view source, std::string origin,
                                              std::string bos_token, std::string eos_token) {
  absl::StatusOr<ChatTemplate> parsed = ChatTemplate::parse(source);
  if (!parsed.ok())
    return absl::Status(parsed.status().code(),
                        str_cat("chat template (", origin, "): ", parsed.status().message()));
  return ChatPrompt(std::move(*parsed), std::move(origin), std::move(bos_token),
                    std::move(eos_token));
}

absl::StatusOr<ChatPrompt> ChatPrompt::load(const std::string& override_path,
                                            std::optional<std::string_view> model_template,
                                            std::string bos_token, std::string eos_token,
                                            std::string override_flag) {
  if (override_path.empty()) {
    if (!model_template)
      return absl::FailedPreconditionError(
          "no chat template (the model file has no tokenizer.chat_template)");
    return create(*model_template, "tokenizer.chat_template", std::move(bos_token),
                  std::move(eos_token));
  }
  absl::StatusOr<std::string> text = read_whole_file(override_path);
  if (!text.ok())
    return absl::Status(text.status().code(), str_cat("chat template: ", text.status().message()));
  if (text->empty())
    return absl::InvalidArgumentError(str_cat("chat template '", override_path, "' is empty"));
  // Load errors name the file (the operator's); render errors, which reach
  // clients, name only the flag.
  absl::StatusOr<ChatPrompt> prompt =
      create(*text, override_path, std::move(bos_token), std::move(eos_token));
  if (prompt.ok()) prompt->origin_ = std::move(override_flag);
  return prompt;
}

namespace {

// A render error's text as clients get it: at most kMaxErrorBytes of it (a
// template's raise_exception may print a value megabytes long), cut at a
// character boundary.
std::string_view bounded_error(std::string_view message) {
  constexpr std::size_t kMaxErrorBytes = 4096;
  if (message.size() <= kMaxErrorBytes) return message;
  std::size_t end = kMaxErrorBytes;
  while (end > 0 && (static_cast<unsigned char>(message[end]) & 0xC0) == 0x80) --end;
  return message.substr(0, end);
}

}  // namespace

absl::StatusOr<std::string> ChatPrompt::render(ChatContext context) const {
  context.bos_token = bos_;
  context.eos_token = eos_;
  absl::StatusOr<std::string> text = template_.render(context);
  if (!text.ok()) {
    const std::string message(text.status().message());
    const std::string_view kept = bounded_error(message);
    return absl::Status(
        text.status().code(),
        str_cat("chat template (", origin_, "): ", kept,
                kept.size() < message.size() ? str_cat(" ... (", message.size(), " bytes in all)")
                                             : std::string()));
  }
  return text;
}

}  // namespace hearth::chat
