// server/model_spec.h in-process: the config file, --model and
// --chat-template, each mistake refused naming the file and line or the flag.
#include "server/model_spec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hearth::server {
namespace {

ModelSpec defaults() {
  ModelSpec d;
  d.instances = 3;
  d.queue = 5;
  return d;
}

std::string refusal(std::string_view text) {
  absl::StatusOr<std::vector<ModelSpec>> specs = parse_model_config(text, "m.conf", defaults());
  if (specs.ok()) return "(accepted)";
  EXPECT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument) << specs.status();
  return std::string(specs.status().message());
}

TEST(ModelConfig, SectionsTakeTheirKeysAndTheDefaultsForTheRest) {
  absl::StatusOr<std::vector<ModelSpec>> specs = parse_model_config(R"(
# two models
[model a]
path = /models/a.gguf   # a comment after a value
instances = 2
context = 2048
kv_cache = float
chat_template = /t/a.jinja

[model b/c:1]
path=builtin:demo
step_tokens = 32
)",
                                                                    "m.conf", defaults());
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  const ModelSpec& a = (*specs)[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.path, "/models/a.gguf");
  EXPECT_EQ(a.instances, 2u);
  EXPECT_EQ(a.queue, 5u);  // the default
  EXPECT_EQ(a.context, 2048u);
  EXPECT_EQ(a.kv_cache, engine::KvCacheType::kFloat);
  EXPECT_EQ(a.chat_template, "/t/a.jinja");
  const ModelSpec& b = (*specs)[1];
  EXPECT_EQ(b.name, "b/c:1");
  EXPECT_TRUE(b.is_demo());
  EXPECT_EQ(b.instances, 3u);
  EXPECT_EQ(b.step_tokens, 32u);
  // Keys repeat across sections, not within one.
  EXPECT_EQ(refusal("[model a]\npath = x\n[model b]\npath = y\n"), "(accepted)");
}

TEST(ModelConfig, MistakesNameTheFileTheLineAndTheKey) {
  EXPECT_EQ(refusal("[model a]\npath = x\ninstances = 2\ninstances = 3\n"),
            "m.conf:4: instances: already set on line 3");
  EXPECT_EQ(refusal("[model a]\npath = x\ninstances = 0\n"),
            "m.conf:3: instances: '0' is not an integer in [1, 64]");
  EXPECT_EQ(refusal("[model a]\npath = x\nkv_cache = fp8\n"),
            "m.conf:3: kv_cache: 'fp8' is not int8 or float");
  EXPECT_EQ(refusal("[model a]\npath = x\ncolour = red\n"),
            "m.conf:3: unknown key 'colour' (known: path, instances, queue, context, kv_cache, "
            "step_tokens, chat_template)");
  EXPECT_EQ(refusal("path = x\n"), "m.conf:1: 'key = value' before the first [model NAME]");
  EXPECT_EQ(refusal("[model a]\nnonsense\n"), "m.conf:2: expected 'key = value' or [model NAME]");
  EXPECT_EQ(refusal("[modle a]\n"), "m.conf:1: a section header is [model NAME]");
  EXPECT_EQ(refusal("[model a]\ninstances = 2\n"), "m.conf: model 'a' has no path");
  EXPECT_EQ(refusal("# nothing\n"), "m.conf: no [model NAME] section");
}

TEST(ModelSpecs, ContextOneAndNamesTwiceAreRefused) {
  ModelSpec a = defaults();
  a.name = "a";
  a.path = "x";
  EXPECT_TRUE(validate_specs({a}).ok());
  ModelSpec tiny = a;
  tiny.context = 1;
  EXPECT_EQ(validate_specs({tiny}).message(),
            "model 'a': context 1 (--context, or its config key) leaves no room to generate (0: "
            "the model's own; at least 2)");
  EXPECT_EQ(validate_specs({a, a}).message(), "model 'a' is configured twice");
}

// --chat-template NAME=FILE names a model, FILE alone every model; a model
// given one twice, or one its config section already set, is refused
// (config keys win over flags, so the flag would be dropped unseen).
TEST(ChatTemplateFlags, ATemplateIsSetOnceWhereverItComesFrom) {
  std::vector<ModelSpec> specs(2, defaults());
  specs[0].name = "a";
  specs[1].name = "b";
  EXPECT_FALSE(apply_chat_template_flags({"a=/t/a.jinja", "/t/all.jinja"}, specs).ok())
      << "model a was given two";
  specs[0].chat_template.clear();
  specs[1].chat_template.clear();
  ASSERT_TRUE(apply_chat_template_flags({"a=/t/a.jinja"}, specs).ok());
  EXPECT_EQ(specs[0].chat_template, "/t/a.jinja");
  EXPECT_EQ(specs[1].chat_template, "");
  specs[0].chat_template = "/from/config.jinja";
  const absl::Status twice = apply_chat_template_flags({"a=/t/other.jinja"}, specs);
  EXPECT_EQ(twice.message(),
            "'a=/t/other.jinja': model 'a' already has a chat template ('/from/config.jinja')");
}

}  // namespace
}  // namespace hearth::server
