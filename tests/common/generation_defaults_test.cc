#include "common/model/generation_defaults.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/model/gguf.h"
#include "tests/support/test_util.h"

namespace astr {
namespace {

using model::GgufValue;

bool Contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// Qwen2.5-7B-Instruct's generation_config.json, as published.
constexpr const char* kQwen = R"({
  "bos_token_id": 151643, "pad_token_id": 151643, "do_sample": true,
  "eos_token_id": [151645, 151643], "repetition_penalty": 1.05, "temperature": 0.7,
  "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0"})";

TEST(GenerationDefaultsTest, HfFolderReadsGenerationConfig) {
  const std::string dir = testing::TempDir("gen");
  std::ofstream(dir + "/generation_config.json") << kQwen;
  for (const std::string& path : {dir, dir + "/config.json", dir + "/model.safetensors"}) {
    auto d = model::LoadGenerationDefaults(path);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_FLOAT_EQ(*d->temperature, 0.7f);
    EXPECT_EQ(*d->top_k, 20);
    EXPECT_FLOAT_EQ(*d->top_p, 0.8f);
    EXPECT_FLOAT_EQ(*d->repetition_penalty, 1.05f);
    EXPECT_FALSE(d->min_p.has_value());
    EXPECT_FALSE(d->max_tokens.has_value());
    EXPECT_FALSE(d->penalty_window.has_value());
    EXPECT_TRUE(Contains(d->Describe(), "temperature=0.7")) << d->Describe();
    EXPECT_TRUE(Contains(d->Describe(), "generation_config.json")) << d->Describe();
  }
}

TEST(GenerationDefaultsTest, NoFileOrNoKeysIsEmpty) {
  const std::string dir = testing::TempDir("gen_none");
  auto none = model::LoadGenerationDefaults(dir);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(none->Describe(), "none");
  // SmolLM2-135M-Instruct's file: ids only, no recommendation.
  std::ofstream(dir + "/generation_config.json")
      << R"({"_from_model_config": true, "bos_token_id": 1, "eos_token_id": 2,
             "pad_token_id": 2, "transformers_version": "4.42.3"})";
  auto ids_only = model::LoadGenerationDefaults(dir);
  ASSERT_TRUE(ids_only.ok()) << ids_only.status().ToString();
  EXPECT_TRUE(ids_only->empty());
  EXPECT_TRUE(ids_only->source.empty());
}

TEST(GenerationDefaultsTest, JsonFileAndMaxNewTokens) {
  const std::string path = testing::TempDir("gen_file") + "/mine.json";
  std::ofstream(path) << R"({"temperature": 0, "max_new_tokens": 64, "min_p": 0.05})";
  auto d = model::LoadGenerationDefaults(path);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d->temperature, 0.0f);
  EXPECT_EQ(*d->max_tokens, 64);
  EXPECT_FLOAT_EQ(*d->min_p, 0.05f);
  EXPECT_EQ(d->source, path);
  auto missing = model::LoadGenerationDefaults(path + ".absent.json");
  EXPECT_FALSE(missing.ok());
}

TEST(GenerationDefaultsTest, BadValuesNameTheFileAndKey) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"temperature": -1})", "temperature"},
      {R"({"top_p": 0})", "top_p"},
      {R"({"top_p": 1.5})", "top_p"},
      {R"({"top_k": -3})", "top_k"},
      {R"({"min_p": 2})", "min_p"},
      {R"({"repetition_penalty": 0})", "repetition_penalty"},
      {R"({"max_new_tokens": 0})", "max_new_tokens"},
      {R"({"top_k": 2.5})", "top_k"},
      {R"({"temperature": "hot"})", "temperature"},
      {R"([1, 2])", "not a JSON object"},
      {R"({"temperature": )", "not valid JSON"},
  };
  for (const auto& [text, key] : cases) {
    auto d = model::ParseGenerationConfigJson(text, "/m/generation_config.json");
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_TRUE(Contains(d.status().message(), "/m/generation_config.json")) << text;
    EXPECT_TRUE(Contains(d.status().message(), key)) << d.status().message();
  }
}

std::string WriteGguf(const std::string& tag,
                      const std::vector<std::pair<std::string, GgufValue>>& keys) {
  const std::string path = testing::TempDir(tag) + "/m.gguf";
  std::vector<std::pair<std::string, GgufValue>> metadata = {
      {"general.architecture", GgufValue::String("llama")}};
  metadata.insert(metadata.end(), keys.begin(), keys.end());
  const Status s = model::WriteGgufFile(path, metadata, {});
  EXPECT_TRUE(s.ok()) << s.ToString();
  return path;
}

TEST(GenerationDefaultsTest, GgufSamplingKeys) {
  // The keys and types llama.cpp's gguf-py writes (general.sampling.top_k and penalty_last_n are
  // int32, the rest float32).
  const std::string path =
      WriteGguf("gen_gguf", {{"general.sampling.temp", GgufValue::F32(0.6f)},
                             {"general.sampling.top_k", GgufValue::I32(20)},
                             {"general.sampling.top_p", GgufValue::F32(0.95f)},
                             {"general.sampling.min_p", GgufValue::F32(0.0f)},
                             {"general.sampling.penalty_repeat", GgufValue::F32(1.1f)},
                             {"general.sampling.penalty_last_n", GgufValue::I32(64)}});
  auto d = model::LoadGenerationDefaults(path);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FLOAT_EQ(*d->temperature, 0.6f);
  EXPECT_EQ(*d->top_k, 20);
  EXPECT_FLOAT_EQ(*d->top_p, 0.95f);
  EXPECT_EQ(*d->min_p, 0.0f);
  EXPECT_FLOAT_EQ(*d->repetition_penalty, 1.1f);
  EXPECT_EQ(*d->penalty_window, 64);
  EXPECT_EQ(d->source, path);
}

TEST(GenerationDefaultsTest, GgufPenaltyLastN) {
  // llama.cpp: -1 = the whole context (astr's window 0), 0 = penalties off.
  auto whole = model::LoadGenerationDefaults(
      WriteGguf("gen_last_all", {{"general.sampling.penalty_repeat", GgufValue::F32(1.2f)},
                                 {"general.sampling.penalty_last_n", GgufValue::I32(-1)}}));
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_FLOAT_EQ(*whole->repetition_penalty, 1.2f);
  EXPECT_FALSE(whole->penalty_window.has_value());
  auto off = model::LoadGenerationDefaults(
      WriteGguf("gen_last_off", {{"general.sampling.penalty_repeat", GgufValue::F32(1.2f)},
                                 {"general.sampling.penalty_last_n", GgufValue::I32(0)}}));
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->repetition_penalty.has_value());
  auto none = model::LoadGenerationDefaults(WriteGguf("gen_gguf_none", {}));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
  auto bad = model::LoadGenerationDefaults(
      WriteGguf("gen_gguf_bad", {{"general.sampling.top_p", GgufValue::F32(0.0f)}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status().message(), "general.sampling.top_p"));
}

}  // namespace
}  // namespace astr
