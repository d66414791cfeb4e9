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

}  // namespace
}  // namespace hearth::chat
