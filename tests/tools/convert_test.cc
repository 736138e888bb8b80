// Runs the `astr` CLI (make-model, convert, inspect) and checks its output files with the library.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "common/model/model_file.h"
#include "tests/support/test_util.h"

namespace astr {
namespace {

int Astr(const std::string& args) {
  const std::string cmd = testing::BinDir() + "/astr " + args + " >/dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// llama.cpp's permute, written out independently: HF row h*hd + s*hd/2 + i -> GGUF row h*hd + 2i +
// s.
std::vector<float> HfToGgufOrder(const std::vector<float>& hf, int64_t rows, int64_t cols,
                                 int64_t hd) {
  std::vector<float> out(hf.size());
  for (int64_t h = 0; h < rows / hd; ++h)
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t i = 0; i < hd / 2; ++i)
        for (int64_t c = 0; c < cols; ++c)
          out[(h * hd + 2 * i + s) * cols + c] = hf[(h * hd + s * hd / 2 + i) * cols + c];
  return out;
}

TEST(ConvertTest, Stories260KToHfFolder) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  const std::string out = testing::TempDir("convert") + "/hf";
  ASSERT_EQ(Astr("convert " + path + " " + out), 0);
  auto src = model::ModelFile::Open(path);
  auto dst = model::ModelFile::Open(out);
  ASSERT_TRUE(src.ok() && dst.ok()) << dst.status().ToString();
  model::ModelConfig a = (*src)->config(), b = (*dst)->config();
  EXPECT_EQ(b.architecture, "llama");
  EXPECT_EQ(b.rope_layout, model::RopeLayout::kHalf);
  EXPECT_EQ(a.rope_layout, model::RopeLayout::kInterleaved);
  EXPECT_EQ(b.hidden_size, a.hidden_size);
  EXPECT_EQ(b.num_kv_heads, a.num_kv_heads);
  EXPECT_EQ(b.head_dim, a.head_dim);
  EXPECT_EQ(b.vocab_size, a.vocab_size);
  EXPECT_EQ(b.max_context_tokens, a.max_context_tokens);
  EXPECT_FLOAT_EQ(static_cast<float>(b.rms_norm_eps), static_cast<float>(a.rms_norm_eps));
  EXPECT_EQ(b.bos_token_id, 1);
  EXPECT_EQ(b.eos_token_ids, a.eos_token_ids);
  EXPECT_EQ(b.ParameterCount(), a.ParameterCount());
  ASSERT_TRUE((*dst)->ValidateWeights().ok());
  EXPECT_EQ((*dst)->Raw("embed")->dtype, model::DType::kF32);  // an all-F32 source stays F32
  for (const model::WeightSpec& w : model::ExpectedWeights(a)) {
    std::vector<float> x, y;
    ASSERT_TRUE((*src)->LoadF32(w.name, w.shape, &x).ok());
    ASSERT_TRUE((*dst)->LoadF32(w.name, w.shape, &y).ok());
    const bool qk =
        w.name.find("q_proj") != std::string::npos || w.name.find("k_proj") != std::string::npos;
    if (qk) {
      EXPECT_NE(x, y) << w.name;
      y = HfToGgufOrder(y, w.shape[0], w.shape[1], a.head_dim);
    }
    EXPECT_EQ(x, y) << w.name;
  }
}

// A Gemma GGUF holds each norm as 1 + w (llama.cpp's converter); the HF folder holds w of a 1 + w
// scale, and every other tensor as it was. A fused architecture (Phi-3) is refused.
TEST(ConvertTest, GemmaNormsShiftAndFusedArchitecturesAreRefused) {
  const std::string dir = testing::TempDir("convert_gemma");
  ASSERT_EQ(Astr("make-model --arch gemma2 --dtype f32 --out " + dir + "/g2.gguf"), 0);
  ASSERT_EQ(Astr("convert " + dir + "/g2.gguf " + dir + "/hf"), 0);
  auto src = model::ModelFile::Open(dir + "/g2.gguf");
  auto dst = model::ModelFile::Open(dir + "/hf");
  ASSERT_TRUE(src.ok() && dst.ok()) << dst.status().ToString();
  EXPECT_EQ((*src)->config().norm_weight_offset, 0.0);
  EXPECT_EQ((*dst)->config().norm_weight_offset, 1.0);
  EXPECT_EQ((*dst)->config().attn_softcap, (*src)->config().attn_softcap);
  int norms = 0;
  for (const model::WeightSpec& w : model::ExpectedWeights((*src)->config())) {
    std::vector<float> x, y;
    ASSERT_TRUE((*src)->LoadF32(w.name, w.shape, &x).ok());
    ASSERT_TRUE((*dst)->LoadF32(w.name, w.shape, &y).ok());
    if (w.name.ends_with("norm")) {
      ++norms;
      for (float& v : y) v += 1.0f;
    }
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-6f) << w.name;
  }
  EXPECT_EQ(norms, 1 + 4 * 2);  // final + four a layer, two layers
  ASSERT_EQ(Astr("make-model --arch phi3 --dtype f32 --out " + dir + "/p3.gguf"), 0);
  EXPECT_EQ(Astr("convert " + dir + "/p3.gguf " + dir + "/p3"), 1);
}

TEST(ConvertTest, F16SourceDefaultsToBf16AndUsageErrors) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/llama-2-tiny-random.gguf");
  const std::string out = testing::TempDir("convert") + "/hf";
  ASSERT_EQ(Astr("convert " + path + " " + out), 0);
  auto dst = model::ModelFile::Open(out);
  ASSERT_TRUE(dst.ok()) << dst.status().ToString();
  EXPECT_EQ((*dst)->Raw("layers.0.o_proj")->dtype, model::DType::kBF16);
  EXPECT_TRUE((*dst)->ValidateWeights().ok());
  EXPECT_EQ(Astr("convert"), 2);
  EXPECT_EQ(Astr("convert /nonexistent.gguf " + out + "2"), 1);
  EXPECT_EQ(Astr("convert --help"), 0);
  EXPECT_EQ(Astr("inspect --json --tensors " + path), 0);
}

TEST(MakeModelTest, EveryArchAndFormatOpensAndValidates) {
  const std::string dir = testing::TempDir("make_model");
  struct Case {
    std::string arch, format, dtype;
  } cases[] = {
      {"llama", "gguf", "f32"},  {"llama", "gguf", "q8_0"}, {"qwen2", "gguf", "f16"},
      {"qwen3", "gguf", "bf16"}, {"llama", "hf", "bf16"},   {"mistral", "hf", "f16"},
      {"qwen2", "hf", "f32"},    {"qwen3", "hf", "bf16"},   {"autoregressive_lm", "hf", "bf16"}};
  for (const Case& c : cases) {
    const std::string out =
        dir + "/" + c.arch + "_" + c.dtype + (c.format == "gguf" ? ".gguf" : "");
    ASSERT_EQ(Astr("make-model --arch " + c.arch + " --format " + c.format + " --dtype " + c.dtype +
                   " --out " + out + " --hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 " +
                   "--vocab 300 --seed 7"),
              0)
        << c.arch << " " << c.format;
    auto m = model::ModelFile::Open(out);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ((*m)->config().architecture, c.arch);
    EXPECT_TRUE((*m)->ValidateWeights().ok()) << (*m)->ValidateWeights().ToString();
    std::vector<float> w;
    ASSERT_TRUE((*m)->LoadF32("layers.1.down_proj", {64, 96}, &w).ok());
    float max_abs = 0;
    for (float x : w) max_abs = std::max(max_abs, std::fabs(x));
    EXPECT_GT(max_abs, 0.01f);
    EXPECT_LT(max_abs, 0.1f);
    if (c.format == "gguf") {
      ASSERT_NE((*m)->vocab(), nullptr);
      EXPECT_EQ((*m)->vocab()->tokens.size(), 300u);
    }
    if (c.arch == "autoregressive_lm") {
      EXPECT_TRUE((*m)->config().gated_attention);
      EXPECT_EQ((*m)->config().qk_norm, model::QkNorm::kAfterRope);
    }
  }
  // Same seed, same weights; another seed, other weights.
  ASSERT_EQ(Astr("make-model --out " + dir + "/a.gguf --seed 3 --dtype f32"), 0);
  ASSERT_EQ(Astr("make-model --out " + dir + "/b.gguf --seed 3 --dtype f32"), 0);
  ASSERT_EQ(Astr("make-model --out " + dir + "/c.gguf --seed 4 --dtype f32"), 0);
  std::vector<float> a, b, c;
  auto ma = model::ModelFile::Open(dir + "/a.gguf");
  auto mb = model::ModelFile::Open(dir + "/b.gguf");
  auto mc = model::ModelFile::Open(dir + "/c.gguf");
  ASSERT_TRUE(ma.ok() && mb.ok() && mc.ok());
  ASSERT_TRUE((*ma)->LoadF32("embed", {512, 64}, &a).ok());
  ASSERT_TRUE((*mb)->LoadF32("embed", {512, 64}, &b).ok());
  ASSERT_TRUE((*mc)->LoadF32("embed", {512, 64}, &c).ok());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(Astr("make-model --arch mistral --format gguf --out " + dir + "/m.gguf"), 1);
  EXPECT_EQ(Astr("make-model --arch gpt2 --format hf --out " + dir + "/g"), 1);
  EXPECT_EQ(Astr("make-model"), 2);
}

TEST(MakeModelTest, InitStdSetsTheWeightSpread) {
  const std::string dir = testing::TempDir("make_model_std");
  // Uniform on [-a, a] has std a / sqrt(3): --init-std 0.15 gives |w| up to 0.26, std 0.15.
  ASSERT_EQ(Astr("make-model --out " + dir + "/s.gguf --dtype f32 --init-std 0.15"), 0);
  auto m = model::ModelFile::Open(dir + "/s.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<float> w;
  ASSERT_TRUE((*m)->LoadF32("layers.0.q_proj", {64, 64}, &w).ok());
  double sum2 = 0, peak = 0;
  for (float x : w) {
    sum2 += double{x} * x;
    peak = std::max(peak, std::fabs(double{x}));
  }
  EXPECT_NEAR(std::sqrt(sum2 / w.size()), 0.15, 0.01);
  EXPECT_LE(peak, 0.15 * std::sqrt(3.0) + 1e-6);
  EXPECT_GT(peak, 0.25);
  // Norm weights keep their scale (around 1).
  ASSERT_TRUE((*m)->LoadF32("layers.0.attn_norm", {64}, &w).ok());
  for (float x : w) EXPECT_NEAR(x, 1.0f, 0.05f);
  EXPECT_EQ(Astr("make-model --out " + dir + "/z.gguf --init-std 0"), 1);
}

}  // namespace
}  // namespace astr
