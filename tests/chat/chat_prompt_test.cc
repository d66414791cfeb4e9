// ChatPrompt: where a model's template comes from, and what its errors say
// (render errors reach clients).
#include "chat/chat_prompt.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace hearth::chat {
namespace {

constexpr const char* kRaises = "{{ raise_exception('roles must alternate') }}";

TEST(ChatPrompt, RenderErrorsNameTheOriginButNeverTheServersFilePath) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("hearth_chat_prompt_test_" + std::to_string(::getpid()) + ".jinja");
  {
    std::ofstream out(path);
    out << kRaises;
  }
  absl::StatusOr<ChatPrompt> from_file = ChatPrompt::load(path.string(), std::nullopt, "", "");
  std::filesystem::remove(path);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  const absl::Status file_error = from_file->render(ChatContext{}).status();
  EXPECT_EQ(file_error.code(), absl::StatusCode::kInvalidArgument) << file_error;
  EXPECT_NE(file_error.message().find("chat template (--chat-template)"), std::string::npos)
      << file_error;
  EXPECT_NE(file_error.message().find("roles must alternate"), std::string::npos) << file_error;
  EXPECT_EQ(file_error.message().find(path.string()), std::string::npos) << file_error;

  absl::StatusOr<ChatPrompt> in_model = ChatPrompt::load("", kRaises, "", "");
  ASSERT_TRUE(in_model.ok()) << in_model.status();
  const absl::Status model_error = in_model->render(ChatContext{}).status();
  EXPECT_NE(model_error.message().find("chat template (tokenizer.chat_template)"),
            std::string::npos)
      << model_error;

  // Load errors are the operator's: they name the file.
  const absl::Status missing = ChatPrompt::load(path.string(), std::nullopt, "", "").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find(path.string()), std::string::npos) << missing;
}

// A template that raises with a huge value sends the client a bounded
// message (it carried up to the interpreter's 64 MiB repr cap), cut at a
// character boundary and saying how long it was (six million bytes and more).
TEST(ChatPrompt, RenderErrorsAreBounded) {
  absl::StatusOr<ChatPrompt> prompt = ChatPrompt::create(
      "{{ raise_exception('x' + ('\u00e9' * 3000000)) }}", "tokenizer.chat_template", "", "");
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  const absl::Status error = prompt->render(ChatContext{}).status();
  EXPECT_EQ(error.code(), absl::StatusCode::kInvalidArgument) << error.message().substr(0, 200);
  EXPECT_LT(error.message().size(), 4300u);
  EXPECT_NE(error.message().find(" bytes in all)"), std::string::npos)
      << error.message().substr(error.message().size() - 100);
  const std::string text(error.message());
  const std::size_t cut = text.find(" ... (");
  ASSERT_NE(cut, std::string::npos);
  EXPECT_NE(static_cast<unsigned char>(text[cut - 1]), 0xC3u);  // not half of an "é"
}

}  // namespace
}  // namespace hearth::chat
