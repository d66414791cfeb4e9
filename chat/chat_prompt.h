// ChatPrompt: one model's chat template with that model's BOS and EOS token
// texts: what turns a conversation into the model's prompt text. Knows no
// model file: the caller reads the template and the token texts.
//
// Immutable after create(); render() may run on many threads at once.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "chat/chat_template.h"

namespace hearth::chat {

class ChatPrompt {
 public:
  // Parses `source`. `origin` says where it came from, for messages
  // ("tokenizer.chat_template", a file's path); parse and render errors
  // name it (load() keeps a file's path out of render errors, which reach
  // clients).
  static absl::StatusOr<ChatPrompt> create(std::string_view source, std::string origin,
                                           std::string bos_token, std::string eos_token);

  // A model's template: the file at `override_path` when not empty (NotFound
  // naming it when unreadable), else `model_template`, the one the model
  // file carries (FailedPrecondition when it carries none). Parse errors
  // as create(); render errors of an override name `override_flag`, the
  // flag that gave the file.
  static absl::StatusOr<ChatPrompt> load(const std::string& override_path,
                                         std::optional<std::string_view> model_template,
                                         std::string bos_token, std::string eos_token,
                                         std::string override_flag = "--chat-template");

  // The prompt text for `context` (its bos_token and eos_token are set to the
  // model's). The template's own errors are INVALID_ARGUMENT naming the
  // construct and line:column (or its raise_exception message).
  absl::StatusOr<std::string> render(ChatContext context) const;

  // Whether `prompt` already begins with the BOS text, so that tokenizing
  // it must not add a second BOS token.
  bool starts_with_bos(std::string_view prompt) const {
    return !bos_.empty() && prompt.substr(0, bos_.size()) == bos_;
  }
  const std::string& origin() const { return origin_; }

 private:
  ChatPrompt(ChatTemplate t, std::string origin, std::string bos, std::string eos)
      : template_(std::move(t)),
        origin_(std::move(origin)),
        bos_(std::move(bos)),
        eos_(std::move(eos)) {}

  ChatTemplate template_;
  std::string origin_;
  std::string bos_, eos_;
};

}  // namespace hearth::chat
