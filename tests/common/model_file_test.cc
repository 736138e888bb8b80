#include "common/model/model_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/model/gguf.h"
#include "common/model/safetensors.h"
#include "tests/support/test_util.h"

namespace astr {
namespace {

bool Contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

TEST(ModelFileTest, Stories260K) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  auto m = model::ModelFile::Open(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const model::ModelFile& f = **m;
  EXPECT_EQ(f.format(), model::ModelFile::Format::kGguf);
  EXPECT_EQ(f.config().num_heads, 8);
  EXPECT_EQ(f.config().vocab_size, 512);
  EXPECT_TRUE(f.ValidateWeights().ok()) << f.ValidateWeights().ToString();
  EXPECT_EQ(f.TensorNames().size(), 48u);
  EXPECT_TRUE(f.Has("layers.4.down_proj"));
  EXPECT_FALSE(f.Has("layers.5.down_proj"));
  auto raw = f.Raw("layers.0.k_proj");
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->source_name, "blk.0.attn_k.weight");
  EXPECT_EQ(raw->dtype, model::DType::kF32);
  EXPECT_EQ(raw->shape, (std::vector<int64_t>{32, 64}));
  std::vector<float> w;
  ASSERT_TRUE(f.LoadF32("layers.0.k_proj", {32, 64}, &w).ok());
  EXPECT_EQ(std::memcmp(w.data(), raw->data, 32 * 64 * 4), 0);
  for (const auto& spec : model::ExpectedWeights(f.config())) {
    ASSERT_TRUE(f.LoadF32(spec.name, spec.shape, &w).ok()) << spec.name;
  }
  const model::Vocab* v = f.vocab();
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->model, "llama");
  ASSERT_EQ(v->tokens.size(), 512u);
  EXPECT_EQ(v->tokens[0], "<unk>");
  EXPECT_EQ(v->tokens[1], "<s>");
  EXPECT_EQ(v->tokens[2], "</s>");
  EXPECT_EQ(v->tokens[3], "<0x00>");
  EXPECT_EQ(v->tokens[258], "<0xFF>");
  ASSERT_EQ(v->scores.size(), 512u);
  EXPECT_EQ(v->scores[259], 0.0f);
  EXPECT_EQ(v->scores[260], -1.0f);
  ASSERT_EQ(v->types.size(), 512u);
  EXPECT_EQ(v->types[0], model::TokenType::kUnknown);
  EXPECT_EQ(v->types[1], model::TokenType::kControl);
  EXPECT_EQ(v->types[3], model::TokenType::kByte);
  EXPECT_EQ(v->types[300], model::TokenType::kNormal);
  EXPECT_EQ(v->bos_id, 1);
  EXPECT_EQ(v->eos_id, 2);
  EXPECT_EQ(v->unk_id, 0);
  EXPECT_EQ(v->pad_id, -1);
  EXPECT_TRUE(v->add_bos);
  EXPECT_TRUE(v->merges.empty());
  EXPECT_TRUE(Contains(f.Describe(), "292800 params")) << f.Describe();
}

TEST(ModelFileTest, Stories260KErrorsNameFileAndTensor) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  auto m = model::ModelFile::Open(path);
  ASSERT_TRUE(m.ok());
  std::vector<float> w;
  Status s = (*m)->LoadF32("layers.0.q_proj", {64, 32}, &w);
  EXPECT_TRUE(Contains(s.message(), "stories260K.gguf")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "layers.0.q_proj") && Contains(s.message(), "[64, 64]") &&
              Contains(s.message(), "[64, 32]"))
      << s.message();
  s = (*m)->LoadF32("layers.9.q_proj", {64, 64}, &w);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s.message(), "blk.9.attn_q.weight")) << s.message();
}

TEST(ModelFileTest, TinyRandomF16) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/llama-2-tiny-random.gguf");
  auto m = model::ModelFile::Open(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const model::ModelFile& f = **m;
  EXPECT_EQ(f.config().hidden_size, 8);
  EXPECT_EQ(f.config().num_heads, 2);
  EXPECT_EQ(f.config().rope_dim, 4);
  EXPECT_EQ(f.config().max_context_tokens, 4096);
  EXPECT_EQ(f.config().ParameterCount(), 513048);
  EXPECT_TRUE(f.ValidateWeights().ok()) << f.ValidateWeights().ToString();
  EXPECT_EQ(f.Raw("layers.0.q_proj")->dtype, model::DType::kF16);
  EXPECT_EQ(f.Raw("final_norm")->dtype, model::DType::kF32);
  std::vector<float> w;
  ASSERT_TRUE(f.LoadF32("lm_head", {32000, 8}, &w).ok());
  ASSERT_EQ(w.size(), 256000u);
  for (float x : w) ASSERT_TRUE(std::isfinite(x));
  ASSERT_NE(f.vocab(), nullptr);
  EXPECT_EQ(f.vocab()->tokens.size(), 32000u);
}

TEST(ModelFileTest, NameMapping) {
  EXPECT_EQ(model::CanonicalFromGgufName("llama", "blk.12.ffn_down.weight"), "layers.12.down_proj");
  EXPECT_EQ(model::CanonicalFromGgufName("qwen2", "blk.0.attn_q.bias"), "layers.0.q_bias");
  EXPECT_EQ(model::CanonicalFromGgufName("llama", "output.weight"), "lm_head");
  EXPECT_EQ(model::CanonicalFromGgufName("llama", "blk.x.attn_q.weight"), "");
  EXPECT_EQ(model::CanonicalFromGgufName("llama", "rope_freqs.weight"), "");
  EXPECT_EQ(
      model::CanonicalFromHfName("autoregressive_lm", "model.layers.3.self_attn.gate_proj.weight"),
      "layers.3.attn_gate");
  EXPECT_EQ(model::CanonicalFromHfName("llama", "model.layers.3.post_attention_layernorm.weight"),
            "layers.3.mlp_norm");
  EXPECT_EQ(model::HfNameFromCanonical("qwen3", "layers.1.k_norm"),
            "model.layers.1.self_attn.k_norm.weight");
  EXPECT_EQ(model::GgufNameFromCanonical("llama", "embed"), "token_embd.weight");
  // Gemma 3 names its four norms otherwise: HF's post_attention_layernorm is the norm after
  // attention there (llama.cpp's post_attention_norm), not the MLP's input norm.
  EXPECT_EQ(model::CanonicalFromHfName("gemma3", "model.layers.2.post_attention_layernorm.weight"),
            "layers.2.post_attn_norm");
  EXPECT_EQ(model::CanonicalFromHfName("gemma3", "model.layers.2.pre_feedforward_layernorm.weight"),
            "layers.2.mlp_norm");
  EXPECT_EQ(
      model::CanonicalFromHfName("gemma3", "model.layers.2.post_feedforward_layernorm.weight"),
      "layers.2.post_mlp_norm");
  EXPECT_EQ(model::CanonicalFromGgufName("gemma3", "blk.5.post_ffw_norm.weight"),
            "layers.5.post_mlp_norm");
  EXPECT_EQ(model::CanonicalFromGgufName("gemma3", "blk.5.ffn_norm.weight"), "layers.5.mlp_norm");
  EXPECT_EQ(model::CanonicalFromGgufName("gemma3", "blk.5.post_attention_norm.weight"),
            "layers.5.post_attn_norm");
  EXPECT_EQ(model::HfNameFromCanonical("gemma3", "layers.0.q_proj"),
            "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(model::CanonicalFromHfName("llama", "model.layers.2.pre_feedforward_layernorm.weight"),
            "");
  // Interleaved -> half for one head of 4 rows: rows [0,1,2,3] -> [0,2,1,3].
  std::vector<float> w = {0, 0, 1, 1, 2, 2, 3, 3};
  EXPECT_EQ(model::InterleavedToHalfRows(w, 4, 2, 4), (std::vector<float>{0, 0, 2, 2, 1, 1, 3, 3}));
  EXPECT_EQ(model::HalfToInterleavedRows(model::InterleavedToHalfRows(w, 4, 2, 4), 4, 2, 4), w);
}

// A small HF folder written by hand: config.json + model.safetensors with every expected weight.
class HfFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir("hf");
    config_ = R"({"model_type":"qwen2","vocab_size":32,"hidden_size":16,"intermediate_size":24,
      "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"eos_token_id":2})";
  }
  void Write(const std::string& skip = "", const std::string& reshape = "",
             const std::string& int_tensor = "") {
    std::ofstream(dir_ + "/config.json") << config_;
    auto c = model::ConfigFromHfJson(dir_ + "/config.json");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    std::vector<model::SafetensorsTensorData> tensors;
    for (const model::WeightSpec& w : model::ExpectedWeights(*c)) {
      if (w.name == skip) continue;
      auto shape = w.shape;
      if (w.name == reshape) shape[0] += 1;
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = 0.001f * static_cast<float>(i % 97);
      std::vector<uint8_t> bytes(n * 2);
      model::QuantizeFromF32(model::DType::kBF16, v.data(), n, bytes.data());
      tensors.push_back(
          {model::HfNameFromCanonical(c->architecture, w.name), shape, model::DType::kBF16, bytes});
    }
    if (!int_tensor.empty()) {
      std::ofstream(dir_ + "/config.json") << config_;
    }
    ASSERT_TRUE(model::WriteSafetensorsFile(dir_ + "/model.safetensors", tensors).ok());
  }
  std::string dir_, config_;
};

TEST_F(HfFolderTest, LoadsAndValidates) {
  Write();
  auto m = model::ModelFile::Open(dir_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->format(), model::ModelFile::Format::kHf);
  EXPECT_EQ((*m)->vocab(), nullptr);
  EXPECT_TRUE((*m)->ValidateWeights().ok()) << (*m)->ValidateWeights().ToString();
  std::vector<float> w;
  ASSERT_TRUE((*m)->LoadF32("layers.1.k_bias", {8}, &w).ok());
  EXPECT_FLOAT_EQ(w[5], model::Bf16ToF32(model::F32ToBf16(0.005f)));
}

TEST_F(HfFolderTest, MissingTensorWrongShapeMissingConfig) {
  Write("layers.1.v_bias");
  auto m = model::ModelFile::Open(dir_);
  ASSERT_TRUE(m.ok());
  Status s = (*m)->ValidateWeights();
  EXPECT_TRUE(Contains(s.message(), "layers.1.v_bias") &&
              Contains(s.message(), "model.layers.1.self_attn.v_proj.bias") &&
              Contains(s.message(), dir_))
      << s.message();
  Write("", "layers.0.up_proj");
  m = model::ModelFile::Open(dir_);
  ASSERT_TRUE(m.ok());
  s = (*m)->ValidateWeights();
  EXPECT_TRUE(Contains(s.message(), "layers.0.up_proj") && Contains(s.message(), "[25, 16]") &&
              Contains(s.message(), "[24, 16]"))
      << s.message();
  std::remove((dir_ + "/config.json").c_str());
  m = model::ModelFile::Open(dir_);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(Contains(m.status().message(), "config.json"));
  config_ = R"({"model_type":"qwen2","vocab_size":32,"hidden_size":16})";
  std::ofstream(dir_ + "/config.json") << config_;
  m = model::ModelFile::Open(dir_);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(Contains(m.status().message(), "'intermediate_size'")) << m.status().message();
}

TEST_F(HfFolderTest, UnsupportedDtypeNamesTensor) {
  std::ofstream(dir_ + "/config.json") << config_;
  // A mapped tensor stored as I32 (hand-written header).
  const std::string header =
      R"({"model.norm.weight":{"dtype":"I32","shape":[16],"data_offsets":[0,64]}})";
  std::ofstream out(dir_ + "/model.safetensors", std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << std::string(64, '\0');
  out.close();
  // The folder holds none of the layers config.json declares: Open refuses it, OpenUnchecked (what
  // astr inspect shows) still maps the tensor.
  auto checked = model::ModelFile::Open(dir_);
  ASSERT_FALSE(checked.ok());
  EXPECT_TRUE(Contains(checked.status().message(), "num_hidden_layers = 2 but the weights hold no"))
      << checked.status().message();
  auto m = model::ModelFile::OpenUnchecked(dir_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE((*m)->Has("final_norm"));
  std::vector<float> w;
  Status s = (*m)->LoadF32("final_norm", {16}, &w);
  EXPECT_TRUE(Contains(s.message(), "model.norm.weight") && Contains(s.message(), "I32"))
      << s.message();
}

TEST(ModelFileGgufTest, QuantizedGgufAndUnsupportedArchitecture) {
  const std::string dir = testing::TempDir("mf_gguf");
  model::ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = 8, c.hidden_size = 32, c.intermediate_size = 32, c.num_layers = 1;
  c.num_heads = 2, c.num_kv_heads = 2, c.head_dim = 16, c.rope_dim = 16, c.max_context_tokens = 64;
  c.rope_layout = model::RopeLayout::kInterleaved, c.tie_word_embeddings = true;
  model::GgufWriter w;
  ASSERT_TRUE(model::AddGgufMetadata(c, &w).ok());
  auto specs = model::ExpectedWeights(c);
  for (const auto& s : specs) {
    w.AddTensor(model::GgufNameFromCanonical(c.architecture, s.name), s.shape,
                s.shape.size() == 1 ? model::DType::kF32 : model::DType::kQ8_0);
  }
  ASSERT_TRUE(w.Open(dir + "/q8.gguf").ok());
  for (const auto& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    std::vector<float> v(n, 0.5f);
    const model::DType dt = s.shape.size() == 1 ? model::DType::kF32 : model::DType::kQ8_0;
    std::vector<uint8_t> bytes(*model::DTypeByteSize(dt, n));
    model::QuantizeFromF32(dt, v.data(), n, bytes.data());
    ASSERT_TRUE(w.WriteTensorData(bytes.data(), bytes.size()).ok());
  }
  ASSERT_TRUE(w.Close().ok());
  auto m = model::ModelFile::Open(dir + "/q8.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE((*m)->config().tie_word_embeddings);
  EXPECT_TRUE((*m)->ValidateWeights().ok());
  EXPECT_EQ((*m)->vocab(), nullptr);
  std::vector<float> q;
  ASSERT_TRUE((*m)->LoadF32("layers.0.gate_proj", {32, 32}, &q).ok());
  for (float x : q) ASSERT_NEAR(x, 0.5f, 1e-3);  // the f16 scale 0.5/127 is rounded
  ASSERT_TRUE(model::WriteGgufFile(dir + "/phi.gguf",
                                   {{"general.architecture", model::GgufValue::String("phi3")}}, {})
                  .ok());
  auto bad = model::ModelFile::Open(dir + "/phi.gguf");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status().message(), "phi3") &&
              Contains(bad.status().message(), "phi.gguf"));
  auto none = model::ModelFile::Open(dir + "/nothing.gguf");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace astr

namespace astr {
namespace {

// Phi-3's fused qkv_proj / gate_up_proj: the parts are views of the fused tensor's rows, and a
// fused tensor of the wrong height is an error naming it and what it should hold.
TEST(ModelFileFusedTest, Phi3PartsAreRowViews) {
  const std::string dir = testing::TempDir("phi3");
  std::ofstream(dir + "/config.json")
      << R"({"model_type":"phi3","vocab_size":16,"hidden_size":8,"intermediate_size":6,
      "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1})";
  auto make = [](const std::string& name, std::vector<int64_t> shape) {
    model::SafetensorsTensorData t{name, shape, model::DType::kF32, {}};
    const int64_t n = shape[0] * (shape.size() > 1 ? shape[1] : 1);
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
    const auto* b = reinterpret_cast<const uint8_t*>(v.data());
    t.bytes.assign(b, b + v.size() * sizeof(float));
    return t;
  };
  auto write = [&](int64_t qkv_rows) {
    std::vector<model::SafetensorsTensorData> t = {
        make("model.embed_tokens.weight", {16, 8}),
        make("model.norm.weight", {8}),
        make("lm_head.weight", {16, 8}),
        make("model.layers.0.input_layernorm.weight", {8}),
        make("model.layers.0.self_attn.qkv_proj.weight", {qkv_rows, 8}),
        make("model.layers.0.self_attn.o_proj.weight", {8, 8}),
        make("model.layers.0.post_attention_layernorm.weight", {8}),
        make("model.layers.0.mlp.gate_up_proj.weight", {12, 8}),
        make("model.layers.0.mlp.down_proj.weight", {8, 6})};
    ASSERT_TRUE(model::WriteSafetensorsFile(dir + "/model.safetensors", t).ok());
  };
  write(16);  // q 8 + k 4 + v 4
  auto f = model::ModelFile::Open(dir);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE((*f)->ValidateWeights().ok());
  std::vector<float> k, up;
  ASSERT_TRUE((*f)->LoadF32("layers.0.k_proj", {4, 8}, &k).ok());
  EXPECT_EQ(k[0], 64.0f);  // row 8 of the fused tensor
  ASSERT_TRUE((*f)->LoadF32("layers.0.up_proj", {6, 8}, &up).ok());
  EXPECT_EQ(up[0], 48.0f);  // row 6
  EXPECT_EQ((*f)->Raw("layers.0.v_proj")->source_name,
            "model.layers.0.self_attn.qkv_proj.weight[12:16]");

  write(15);
  auto bad = model::ModelFile::Open(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("qkv_proj.weight' has shape [15, 8], expected [q_proj + "
                                        "k_proj + v_proj = 16"),
            std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace astr
