#include "common/model/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "common/model/architecture.h"
#include "common/model/gguf.h"
#include "tests/support/test_util.h"

namespace astr {
namespace {

bool Contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

std::string WriteConfig(const std::string& json, const std::string& gen = "") {
  const std::string dir = testing::TempDir("cfg");
  std::ofstream(dir + "/config.json") << json;
  if (!gen.empty()) std::ofstream(dir + "/generation_config.json") << gen;
  return dir + "/config.json";
}

constexpr const char* kLlama = R"({"model_type":"llama","vocab_size":32000,"hidden_size":2048,
  "intermediate_size":5632,"num_hidden_layers":22,"num_attention_heads":32,"num_key_value_heads":4,
  "max_position_embeddings":2048,"rms_norm_eps":1e-5,"rope_theta":10000.0,"bos_token_id":1,
  "eos_token_id":2,"tie_word_embeddings":false})";

TEST(ModelConfigTest, HfLlama) {
  auto c = model::ConfigFromHfJson(WriteConfig(kLlama));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->rope_dim, 64);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->rope_layout, model::RopeLayout::kHalf);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_FALSE(c->qkv_bias);
  // TinyLlama-1.1B: 1,100,048,384 parameters.
  EXPECT_EQ(c->ParameterCount(), 1100048384);
}

TEST(ModelConfigTest, HfLlama3ScalingAndEosListAndGenerationConfig) {
  auto c = model::ConfigFromHfJson(WriteConfig(
      R"({"model_type":"llama","vocab_size":128256,"hidden_size":2048,"intermediate_size":8192,
      "num_hidden_layers":16,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":64,
      "rope_theta":500000.0,"tie_word_embeddings":true,"bos_token_id":128000,
      "eos_token_id":[128001,128008],"max_position_embeddings":131072,
      "rope_scaling":{"factor":32.0,"high_freq_factor":4.0,"low_freq_factor":1.0,
      "original_max_position_embeddings":8192,"rope_type":"llama3"}})",
      R"({"eos_token_id":[128001,128009]})"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.type, model::RopeScaling::Type::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_EQ(c->rope_scaling.original_max_position, 8192);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c->rope_theta, 500000.0);
}

TEST(ModelConfigTest, HfQwenAndAstrAi) {
  auto q2 = model::ConfigFromHfJson(WriteConfig(
      R"({"model_type":"qwen2","vocab_size":1000,"hidden_size":64,"intermediate_size":128,
      "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
      "rope_scaling":{"type":"linear","factor":2.0}})"));
  ASSERT_TRUE(q2.ok()) << q2.status().ToString();
  EXPECT_TRUE(q2->qkv_bias);
  EXPECT_EQ(q2->rope_scaling.type, model::RopeScaling::Type::kLinear);
  auto q3 = model::ConfigFromHfJson(WriteConfig(
      R"({"model_type":"qwen3","vocab_size":1000,"hidden_size":64,"intermediate_size":128,
      "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32})"));
  ASSERT_TRUE(q3.ok()) << q3.status().ToString();
  EXPECT_EQ(q3->qk_norm, model::QkNorm::kBeforeRope);
  EXPECT_EQ(q3->head_dim, 32);
  EXPECT_FALSE(q3->qkv_bias);
  auto a = model::ConfigFromHfJson(WriteConfig(
      R"({"model_type":"autoregressive_lm","vocab_size":1000,"hidden_size":64,
      "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,
      "qk_norm":true,"gated_attention":true})"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->rope_layout, model::RopeLayout::kInterleaved);
  EXPECT_EQ(a->qk_norm, model::QkNorm::kAfterRope);
  EXPECT_TRUE(a->gated_attention);
  EXPECT_EQ(a->num_kv_heads, 4);
}

TEST(ModelConfigTest, HfErrorsNameFileAndKey) {
  auto missing = model::ConfigFromHfJson(WriteConfig(R"({"model_type":"llama","vocab_size":10})"));
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(Contains(missing.status().message(), "config.json"));
  EXPECT_TRUE(Contains(missing.status().message(), "'hidden_size'")) << missing.status().message();
  auto arch = model::ConfigFromHfJson(WriteConfig(R"({"model_type":"gpt2"})"));
  EXPECT_TRUE(Contains(arch.status().message(), "gpt2"));
  auto type = model::ConfigFromHfJson(WriteConfig(R"({"model_type":"llama","vocab_size":"x"})"));
  EXPECT_TRUE(Contains(type.status().message(), "'vocab_size'"));
  auto json = model::ConfigFromHfJson(WriteConfig("{not json"));
  EXPECT_TRUE(Contains(json.status().message(), "config.json"));
  auto heads = model::ConfigFromHfJson(WriteConfig(
      R"({"model_type":"llama","vocab_size":10,"hidden_size":64,"intermediate_size":8,
      "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":3})"));
  EXPECT_TRUE(Contains(heads.status().message(), "num_kv_heads")) << heads.status().message();
  auto scaling = model::ConfigFromHfJson(WriteConfig(
      R"({"model_type":"llama","vocab_size":10,"hidden_size":64,"intermediate_size":8,
      "num_hidden_layers":1,"num_attention_heads":4,"rope_scaling":{"rope_type":"dynamic"}})"));
  EXPECT_TRUE(Contains(scaling.status().message(), "dynamic"));
  auto yarn = model::ConfigFromHfJson(WriteConfig(
      R"({"model_type":"llama","vocab_size":10,"hidden_size":64,"intermediate_size":8,
      "num_hidden_layers":1,"num_attention_heads":4,"rope_scaling":{"rope_type":"yarn"}})"));
  EXPECT_TRUE(Contains(yarn.status().message(), "original_max_position_embeddings"))
      << yarn.status().message();
}

// hidden_act picks the MLP's activation; one we do not compute is refused, never run as SiLU.
TEST(ModelConfigTest, HfHiddenAct) {
  auto with = [](const std::string& act) {
    return model::ConfigFromHfJson(WriteConfig(
        R"({"model_type":"llama","vocab_size":10,"hidden_size":64,"intermediate_size":8,
        "num_hidden_layers":1,"num_attention_heads":4)" +
        (act.empty() ? std::string() : ",\"hidden_act\":\"" + act + "\"") + "}"));
  };
  ASSERT_TRUE(with("").ok());
  EXPECT_EQ(with("")->mlp_activation, model::MlpActivation::kSilu);
  EXPECT_EQ(with("silu")->mlp_activation, model::MlpActivation::kSilu);
  EXPECT_EQ(with("gelu_pytorch_tanh")->mlp_activation, model::MlpActivation::kGeluTanh);
  EXPECT_EQ(with("gelu_new")->mlp_activation, model::MlpActivation::kGeluTanh);
  auto gelu = with("gelu");
  EXPECT_EQ(gelu.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(gelu.status().message(), "hidden_act")) << gelu.status().message();
  // Written back as it was read.
  model::ModelConfig c = *with("gelu_pytorch_tanh");
  auto text = model::ConfigToHfJson(c);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_TRUE(Contains(*text, "gelu_pytorch_tanh")) << *text;
}

// Gemma 3 270M's config.json as published (transformers 4.5x keys), layer_types left out so that
// the pattern default applies.
constexpr const char* kGemma3_270m = R"({"model_type":"gemma3_text","vocab_size":262144,
  "hidden_size":640,"intermediate_size":2048,"num_hidden_layers":18,"num_attention_heads":4,
  "num_key_value_heads":1,"head_dim":256,"query_pre_attn_scalar":256,"rms_norm_eps":1e-6,
  "rope_theta":1000000.0,"rope_local_base_freq":10000.0,"rope_scaling":null,"sliding_window":512,
  "_sliding_window_pattern":6,"hidden_activation":"gelu_pytorch_tanh","max_position_embeddings":32768,
  "attn_logit_softcapping":null,"final_logit_softcapping":null,"use_bidirectional_attention":false,
  "bos_token_id":2,"eos_token_id":1})";

TEST(ModelConfigTest, HfGemma3) {
  auto c = model::ConfigFromHfJson(WriteConfig(kGemma3_270m));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "gemma3");
  EXPECT_TRUE(c->tie_word_embeddings);  // Gemma3TextConfig's default
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_EQ(c->qk_norm, model::QkNorm::kBeforeRope);
  EXPECT_EQ(c->mlp_activation, model::MlpActivation::kGeluTanh);
  EXPECT_EQ(c->norm_weight_offset, 1.0);
  EXPECT_FLOAT_EQ(static_cast<float>(c->embed_scale), std::sqrt(640.0f));
  EXPECT_FLOAT_EQ(c->AttnScale(), 1.0f / 16.0f);
  EXPECT_EQ(c->sliding_window, 512);
  // Layers 5, 11 and 17 are global with the main base; the others slide with the local one.
  for (int64_t l = 0; l < 18; ++l) {
    const bool global = l % 6 == 5;
    EXPECT_EQ(c->LayerWindow(l), global ? 0 : 512) << l;
    EXPECT_EQ(c->LayerUsesLocalRope(l), !global) << l;
  }
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_local_theta, 1e4);
  // Google's published count for gemma-3-270m.
  EXPECT_EQ(c->ParameterCount(), 268098176);
  // The HF names of its norms.
  bool post_ffw = false;
  for (const model::WeightSpec& w : model::ExpectedWeights(*c)) {
    post_ffw = post_ffw || model::HfNameFromCanonical("gemma3", w.name) ==
                               "model.layers.17.post_feedforward_layernorm.weight";
  }
  EXPECT_TRUE(post_ffw);

  // Written and read back: the same layer.
  auto text = model::ConfigToHfJson(*c);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_TRUE(Contains(*text, "\"gemma3_text\"") && Contains(*text, "full_attention")) << *text;
  auto back = model::ConfigFromHfJson(WriteConfig(*text));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->sliding_window_pattern, 6);
  EXPECT_EQ(back->rope_local_theta, 1e4);
  EXPECT_EQ(back->AttnScale(), c->AttnScale());
  EXPECT_EQ(back->ParameterCount(), c->ParameterCount());
}

TEST(ModelConfigTest, HfGemma3Transformers5Keys) {
  // As transformers 5 writes it: rope_parameters per layer type and an explicit layer_types.
  auto c = model::ConfigFromHfJson(WriteConfig(
      R"({"model_type":"gemma3_text","vocab_size":300,"hidden_size":64,"intermediate_size":96,
      "num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,
      "query_pre_attn_scalar":24,"sliding_window":8,"tie_word_embeddings":false,
      "layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"],
      "rope_parameters":{"full_attention":{"rope_theta":500000.0,"rope_type":"linear","factor":8.0},
      "sliding_attention":{"rope_theta":20000.0,"rope_type":"default"}}})"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->sliding_window_pattern, 2);
  EXPECT_EQ(c->LayerWindow(0), 8);
  EXPECT_EQ(c->LayerWindow(3), 0);
  EXPECT_EQ(c->rope_theta, 5e5);
  EXPECT_EQ(c->rope_local_theta, 2e4);
  EXPECT_EQ(c->rope_scaling.type, model::RopeScaling::Type::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_FLOAT_EQ(c->AttnScale(), 1.0f / std::sqrt(24.0f));
}

// gemma-3-4b-it's config.json: the multimodal wrapper, whose text_config gives six keys and leaves
// the rest to Gemma3TextConfig's defaults.
TEST(ModelConfigTest, HfGemma3MultimodalWrapperReadsItsTextStack) {
  auto c = model::ConfigFromHfJson(WriteConfig(R"({
      "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
      "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
      "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
      "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                      "model_type": "gemma3_text", "num_hidden_layers": 34,
                      "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                      "sliding_window": 1024},
      "torch_dtype": "bfloat16",
      "vision_config": {"hidden_size": 1152, "image_size": 896, "model_type": "siglip_vision_model",
                        "num_hidden_layers": 27, "patch_size": 14}})"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "gemma3");
  EXPECT_EQ(c->vocab_size, 262208);
  EXPECT_EQ(c->num_heads, 8);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->max_context_tokens, 131072);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_FLOAT_EQ(c->AttnScale(), 1.0f / 16.0f);  // query_pre_attn_scalar 256
  EXPECT_EQ(c->sliding_window, 1024);
  EXPECT_EQ(c->sliding_window_pattern, 6);
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_local_theta, 1e4);
  EXPECT_EQ(c->rope_scaling.type, model::RopeScaling::Type::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1, 106}));  // the wrapper's
  EXPECT_EQ(c->bos_token_id, 2);
  // The text stack's parameters: embedding 262208 x 2560, 34 layers of q [2048, 2560],
  // k / v [1024, 2560], o [2560, 2048], gate / up / down 2560 x 10240, four norms of 2560 and
  // q / k norms of 256; the final norm.
  const int64_t layer =
      2048 * 2560 + 2 * 1024 * 2560 + 2560 * 2048 + 3 * 2560 * 10240 + 4 * 2560 + 2 * 256;
  EXPECT_EQ(c->ParameterCount(), int64_t{262208} * 2560 + 34 * layer + 2560);
  // Its tensors, under either prefix, are the text model's; the vision tower's are nothing.
  EXPECT_EQ(
      model::CanonicalFromHfName("gemma3", "language_model.model.layers.3.mlp.up_proj.weight"),
      "layers.3.up_proj");
  EXPECT_EQ(model::CanonicalFromHfName("gemma3", "model.language_model.embed_tokens.weight"),
            "embed");
  EXPECT_EQ(model::CanonicalFromHfName("gemma3", "vision_tower.vision_model.post_layernorm.weight"),
            "");
  // A wrapper without text_config is refused naming the key.
  auto bare = model::ConfigFromHfJson(WriteConfig(R"({"model_type": "gemma3"})"));
  EXPECT_TRUE(Contains(bare.status().message(), "text_config")) << bare.status().message();
}

TEST(ModelConfigTest, HfGemma3Refusals) {
  auto with = [](const std::string& extra) {
    std::string j = kGemma3_270m;
    j.insert(j.size() - 1, "," + extra);
    return model::ConfigFromHfJson(WriteConfig(j));
  };
  auto irregular = with(R"("num_hidden_layers":3,"layer_types":["full_attention",
      "sliding_attention","full_attention"])");
  // The duplicate key: nlohmann keeps the last, 3 layers.
  EXPECT_EQ(irregular.status().code(), StatusCode::kUnimplemented) << irregular.status().ToString();
  EXPECT_TRUE(Contains(irregular.status().message(), "layer_types"));
  auto softcap = with(R"("final_logit_softcapping":30.0)");
  EXPECT_EQ(softcap.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(softcap.status().message(), "final_logit_softcapping"));
  auto bidirectional = with(R"("use_bidirectional_attention":true)");
  EXPECT_EQ(bidirectional.status().code(), StatusCode::kUnimplemented);
  auto scalar = with(R"("query_pre_attn_scalar":0)");
  EXPECT_EQ(scalar.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(scalar.status().message(), "query_pre_attn_scalar"));
  auto count = with(R"("layer_types":["sliding_attention"])");
  EXPECT_TRUE(Contains(count.status().message(), "layer_types")) << count.status().ToString();
  // An unknown model_type lists the ones read, the multimodal wrapper among them.
  auto other = model::ConfigFromHfJson(WriteConfig(R"({"model_type":"paligemma"})"));
  EXPECT_EQ(other.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(other.status().message(), "gemma3 (text only)")) << other.status().message();
}

TEST(ModelConfigTest, GgufGemma3RoundTrip) {
  model::ModelConfig m;
  m.architecture = "gemma3";
  m.vocab_size = 64, m.hidden_size = 32, m.intermediate_size = 48, m.num_layers = 6;
  m.num_heads = 2, m.num_kv_heads = 1, m.head_dim = 16, m.rope_dim = 16, m.max_context_tokens = 128;
  m.qk_norm = model::QkNorm::kBeforeRope, m.rope_theta = 1e6, m.tie_word_embeddings = true;
  m.mlp_activation = model::MlpActivation::kGeluTanh, m.sandwich_norms = true;
  m.embed_scale = std::sqrt(32.0), m.attn_scale = 0.25, m.sliding_window = 7;
  m.sliding_window_pattern = 6, m.rope_local_theta = 1e4;
  const std::string dir = testing::TempDir("cfg_gguf_gemma3");
  model::GgufWriter w;
  ASSERT_TRUE(model::AddGgufMetadata(m, &w).ok());
  w.AddTensor("token_embd.weight", {64, 32}, model::DType::kF32);
  ASSERT_TRUE(w.Open(dir + "/g3.gguf").ok());
  std::vector<float> zeros(64 * 32);
  ASSERT_TRUE(w.WriteTensorData(zeros.data(), zeros.size() * 4).ok());
  ASSERT_TRUE(w.Close().ok());
  auto g = model::GgufFile::Open(dir + "/g3.gguf");
  ASSERT_TRUE(g.ok());
  auto c = model::ConfigFromGguf(**g);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "gemma3");
  EXPECT_EQ(c->norm_weight_offset, 0.0);  // llama.cpp's converter stores 1 + w
  EXPECT_EQ(c->sliding_window, 7);
  EXPECT_EQ(c->LayerWindow(5), 0);
  EXPECT_EQ(c->rope_local_theta, 1e4);
  EXPECT_EQ(c->AttnScale(), 0.25f);
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_EQ(c->ParameterCount(), m.ParameterCount());
  // A config llama.cpp could not read the same way is not written.
  m.sliding_window_pattern = 2;
  model::GgufWriter w2;
  EXPECT_FALSE(model::AddGgufMetadata(m, &w2).ok());

  // Gemma 2: the caps travel in GGUF keys; the pattern is llama.cpp's alternation.
  m.architecture = "gemma2";
  m.qk_norm = model::QkNorm::kNone, m.rope_local_theta = 0.0;
  m.attn_softcap = 50.0, m.final_softcap = 30.0;
  model::GgufWriter w3;
  ASSERT_TRUE(model::AddGgufMetadata(m, &w3).ok());
  w3.AddTensor("token_embd.weight", {64, 32}, model::DType::kF32);
  ASSERT_TRUE(w3.Open(dir + "/g2.gguf").ok());
  ASSERT_TRUE(w3.WriteTensorData(zeros.data(), zeros.size() * 4).ok());
  ASSERT_TRUE(w3.Close().ok());
  auto g2 = model::GgufFile::Open(dir + "/g2.gguf");
  ASSERT_TRUE(g2.ok());
  auto c2 = model::ConfigFromGguf(**g2);
  ASSERT_TRUE(c2.ok()) << c2.status().ToString();
  EXPECT_EQ(c2->architecture, "gemma2");
  EXPECT_EQ(c2->attn_softcap, 50.0);
  EXPECT_EQ(c2->final_softcap, 30.0);
  EXPECT_EQ(c2->LayerWindow(0), 7);
  EXPECT_EQ(c2->LayerWindow(1), 0);
  EXPECT_EQ(c2->ParameterCount(), m.ParameterCount());
}

TEST(ModelConfigTest, HfGemma2) {
  // gemma-2-2b's config.json (layer_types left out: Gemma 2 alternates, layer 0 sliding).
  const std::string gemma2 = R"({"model_type":"gemma2","vocab_size":256000,"hidden_size":2304,
      "intermediate_size":9216,"num_hidden_layers":26,"num_attention_heads":8,
      "num_key_value_heads":4,"head_dim":256,"query_pre_attn_scalar":256,"sliding_window":4096,
      "final_logit_softcapping":30.0,"attn_logit_softcapping":50.0,"rope_theta":10000.0,
      "hidden_activation":"gelu_pytorch_tanh","max_position_embeddings":8192,"rms_norm_eps":1e-6,
      "bos_token_id":2,"eos_token_id":1})";
  auto c = model::ConfigFromHfJson(WriteConfig(gemma2));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "gemma2");
  EXPECT_EQ(c->attn_softcap, 50.0);
  EXPECT_EQ(c->final_softcap, 30.0);
  EXPECT_EQ(c->qk_norm, model::QkNorm::kNone);
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_EQ(c->norm_weight_offset, 1.0);
  EXPECT_EQ(c->LayerWindow(0), 4096);
  EXPECT_EQ(c->LayerWindow(1), 0);
  EXPECT_FALSE(c->LayerUsesLocalRope(0));  // one RoPE base
  EXPECT_TRUE(c->tie_word_embeddings);
  // Google's published count for gemma-2-2b.
  EXPECT_EQ(c->ParameterCount(), 2614341888);
  auto text = model::ConfigToHfJson(*c);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto back = model::ConfigFromHfJson(WriteConfig(*text));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->attn_softcap, 50.0);
  EXPECT_EQ(back->final_softcap, 30.0);
  EXPECT_EQ(back->sliding_window_pattern, 2);
  // null turns a cap off; an absent key takes Gemma2Config's default.
  std::string uncapped = gemma2;
  uncapped.replace(uncapped.find("30.0"), 4, "null");
  auto off = model::ConfigFromHfJson(WriteConfig(uncapped));
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->final_softcap, 0.0);
  EXPECT_EQ(off->attn_softcap, 50.0);
  std::string negative = gemma2;
  negative.replace(negative.find("50.0"), 4, "-1.0");
  auto bad = model::ConfigFromHfJson(WriteConfig(negative));
  EXPECT_TRUE(Contains(bad.status().message(), "attn_logit_softcapping")) << bad.status().message();
}

TEST(ModelConfigTest, HfPhi3) {
  const std::string phi3 = R"({"model_type":"phi3","vocab_size":32064,"hidden_size":3072,
      "intermediate_size":8192,"num_hidden_layers":32,"num_attention_heads":32,
      "num_key_value_heads":32,"max_position_embeddings":4096,"rope_theta":10000.0,
      "sliding_window":2047,"hidden_act":"silu","rms_norm_eps":1e-5})";
  auto c = model::ConfigFromHfJson(WriteConfig(phi3));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "phi3");
  EXPECT_EQ(c->sliding_window, 2047);
  EXPECT_EQ(c->rope_scaling.type, model::RopeScaling::Type::kNone);
  // Phi-3-mini-4k: 3,821,079,552 parameters (q/k/v and gate/up fused in the file, same count).
  EXPECT_EQ(c->ParameterCount(), 3821079552);
}

// Qwen3-30B-A3B's config.json (Hugging Face): 48 layers of 128 experts, 8 per token.
constexpr const char* kQwen3Moe = R"({"model_type":"qwen3_moe","vocab_size":151936,
  "hidden_size":2048,"intermediate_size":6144,"moe_intermediate_size":768,"num_hidden_layers":48,
  "num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,"max_position_embeddings":40960,
  "rope_theta":1000000.0,"rms_norm_eps":1e-6,"num_experts":128,"num_experts_per_tok":8,
  "norm_topk_prob":true,"decoder_sparse_step":1,"mlp_only_layers":[],"tie_word_embeddings":false,
  "hidden_act":"silu","bos_token_id":151643,"eos_token_id":151645})";

TEST(ModelConfigTest, HfQwen3Moe) {
  auto c = model::ConfigFromHfJson(WriteConfig(kQwen3Moe));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "qwen3_moe");
  EXPECT_EQ(c->qk_norm, model::QkNorm::kBeforeRope);
  EXPECT_EQ(c->num_experts, 128);
  EXPECT_EQ(c->num_experts_per_tok, 8);
  EXPECT_EQ(c->moe_intermediate_size, 768);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_FALSE(c->HasDenseLayers());
  // The published count: 30.5B parameters (30,532,122,624).
  EXPECT_EQ(c->ParameterCount(), 30532122624);
  // transformers 5 writes num_experts as num_local_experts; mlp_only_layers and
  // decoder_sparse_step leave dense layers.
  std::string j = kQwen3Moe;
  j.replace(j.find("\"num_experts\""), 13, "\"num_local_experts\"");
  j.replace(j.find("\"mlp_only_layers\":[]"), 20, "\"mlp_only_layers\":[0,5]");
  j.replace(j.find("\"decoder_sparse_step\":1"), 23, "\"decoder_sparse_step\":2");
  auto d = model::ConfigFromHfJson(WriteConfig(j));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->num_experts, 128);
  EXPECT_EQ(d->dense_layers, (std::vector<int64_t>{0, 5}));
  // Layer l is MoE when (l + 1) % 2 == 0 and l is not 0 or 5.
  std::vector<int64_t> moe;
  for (int64_t l = 0; l < 8; ++l) {
    if (d->LayerIsMoe(l)) moe.push_back(l);
  }
  EXPECT_EQ(moe, (std::vector<int64_t>{1, 3, 7}));
}

// gpt-oss-20b's config.json (openai/gpt-oss-20b, less its quantization_config and layer_types,
// whose default is the same alternation).
constexpr const char* kGptOss20b = R"({"model_type":"gpt_oss","architectures":["GptOssForCausalLM"],
  "attention_bias":true,"attention_dropout":0.0,"eos_token_id":200002,"experts_per_token":4,
  "head_dim":64,"hidden_act":"silu","hidden_size":2880,"initial_context_length":4096,
  "initializer_range":0.02,"intermediate_size":2880,"max_position_embeddings":131072,
  "num_attention_heads":64,"num_experts_per_tok":4,"num_hidden_layers":24,
  "num_key_value_heads":8,"num_local_experts":32,"output_router_logits":false,
  "pad_token_id":199999,"rms_norm_eps":1e-05,"rope_scaling":{"beta_fast":32.0,"beta_slow":1.0,
  "factor":32.0,"original_max_position_embeddings":4096,"rope_type":"yarn","truncate":false},
  "rope_theta":150000,"router_aux_loss_coef":0.9,"sliding_window":128,"swiglu_limit":7.0,
  "tie_word_embeddings":false,"use_cache":true,"vocab_size":201088})";

TEST(ModelConfigTest, HfGptOss) {
  auto c = model::ConfigFromHfJson(WriteConfig(kGptOss20b));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "gpt_oss");
  EXPECT_TRUE(c->qkv_bias && c->o_bias && c->attn_sinks && c->router_bias && c->expert_bias);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->mlp_activation, model::MlpActivation::kSwigluClamped);
  EXPECT_EQ(c->swiglu_limit, 7.0);
  EXPECT_EQ(c->swiglu_alpha, 1.702);
  EXPECT_EQ(c->num_experts, 32);
  EXPECT_EQ(c->num_experts_per_tok, 4);
  EXPECT_EQ(c->moe_intermediate_size, 2880);
  EXPECT_EQ(c->sliding_window, 128);
  EXPECT_EQ(c->LayerWindow(0), 128);
  EXPECT_EQ(c->LayerWindow(1), 0);
  EXPECT_EQ(c->rope_layout, model::RopeLayout::kHalf);
  EXPECT_EQ(c->rope_theta, 150000.0);
  EXPECT_EQ(c->rope_scaling.type, model::RopeScaling::Type::kYarn);
  EXPECT_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_EQ(c->rope_scaling.original_max_position, 4096);
  EXPECT_FALSE(c->rope_scaling.truncate);
  EXPECT_NEAR(c->rope_scaling.attention_factor, 1.0 + 0.1 * std::log(32.0), 1e-12);
  // The model card's counts: 20.91B parameters for gpt-oss-20b, 116.83B for gpt-oss-120b (36
  // layers of 128 experts), summed by hand from the tensor shapes (biases and sinks included).
  EXPECT_EQ(c->ParameterCount(), 20914757184);
  auto replace = [](std::string j, const std::string& from, const std::string& to) {
    return j.replace(j.find(from), from.size(), to);
  };
  std::string j = replace(kGptOss20b, "\"num_hidden_layers\":24", "\"num_hidden_layers\":36");
  j = replace(j, "\"num_local_experts\":32", "\"num_local_experts\":128");
  auto big = model::ConfigFromHfJson(WriteConfig(j));
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(big->ParameterCount(), 116829156672);
  // No attention_bias: no q/k/v/o biases.
  j = replace(kGptOss20b, "\"attention_bias\":true", "\"attention_bias\":false");
  auto plain = model::ConfigFromHfJson(WriteConfig(j));
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(plain->qkv_bias || plain->o_bias);
}

TEST(ModelConfigTest, HfGptOssDefaultsAndErrors) {
  // GptOssConfig's defaults: YaRN factor 32 over 4096 (untruncated), theta 150000, window 128.
  auto c = model::ConfigFromHfJson(WriteConfig(R"({"model_type":"gpt_oss","vocab_size":300,
      "hidden_size":64,"intermediate_size":32,"num_hidden_layers":2,"num_attention_heads":4,
      "num_key_value_heads":2,"head_dim":16,"num_local_experts":4,"num_experts_per_tok":2})"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.type, model::RopeScaling::Type::kYarn);
  EXPECT_FALSE(c->rope_scaling.truncate);
  EXPECT_EQ(c->rope_theta, 150000.0);
  EXPECT_EQ(c->sliding_window, 128);
  EXPECT_EQ(c->max_context_tokens, 131072);
  for (const auto& [bad, key] : {std::pair{R"("num_local_experts":0)", "num_local_experts"},
                                 std::pair{R"("swiglu_limit":-1)", "swiglu_limit"},
                                 std::pair{R"("layer_types":["full_attention"])", "layer_types"}}) {
    std::string j = kGptOss20b;
    j.insert(j.size() - 1, std::string(",") + bad);
    // A repeated key: nlohmann keeps the last.
    auto r = model::ConfigFromHfJson(WriteConfig(j));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().ToString();
  }
}

// GLM-4.5-Air's config.json (zai-org/GLM-4.5-Air): 46 layers, the first dense, 128 experts top-8
// with sigmoid routing and one shared expert, partial rotary 0.5, q/k/v biases, an MTP layer.
TEST(ModelConfigTest, HfGlm4Moe) {
  const std::string j = R"({"architectures":["Glm4MoeForCausalLM"],"attention_bias":true,
      "attention_dropout":0.0,"pad_token_id":151329,"eos_token_id":[151329,151336,151338],
      "hidden_act":"silu","head_dim":128,"hidden_size":4096,"partial_rotary_factor":0.5,
      "initializer_range":0.02,"intermediate_size":10944,"max_position_embeddings":131072,
      "model_type":"glm4_moe","moe_intermediate_size":1408,"norm_topk_prob":true,
      "num_attention_heads":96,"n_group":1,"topk_group":1,"n_routed_experts":128,
      "n_shared_experts":1,"routed_scaling_factor":1.0,"num_experts_per_tok":8,
      "first_k_dense_replace":1,"num_hidden_layers":46,"num_key_value_heads":8,
      "rms_norm_eps":1e-05,"rope_scaling":null,"rope_theta":1000000,"num_nextn_predict_layers":1,
      "tie_word_embeddings":false,"use_qk_norm":false,"vocab_size":151552})";
  auto c = model::ConfigFromHfJson(WriteConfig(j));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "glm4_moe");
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_EQ(c->qk_norm, model::QkNorm::kNone);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rope_dim, 64);
  EXPECT_EQ(c->num_experts, 128);
  EXPECT_EQ(c->num_experts_per_tok, 8);
  EXPECT_EQ(c->moe_intermediate_size, 1408);
  EXPECT_EQ(c->shared_expert_intermediate_size, 1408);
  EXPECT_FALSE(c->shared_expert_gated);
  EXPECT_TRUE(c->router_sigmoid && c->router_choice_bias && c->norm_topk_prob);
  EXPECT_EQ(c->router_groups, 1);
  EXPECT_EQ(c->routed_scaling_factor, 1.0);
  EXPECT_FALSE(c->LayerIsMoe(0));
  EXPECT_TRUE(c->LayerIsMoe(1) && c->LayerIsMoe(45));
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{151329, 151336, 151338}));
  // Groups that cannot hold the experts a token needs are refused, naming the key.
  std::string bad = j;
  bad.replace(bad.find("\"topk_group\":1"), 13, "\"topk_group\":9");
  auto r = model::ConfigFromHfJson(WriteConfig(bad));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("topk_group"), std::string::npos) << r.status().ToString();
}

// Qwen1.5-MoE-A2.7B's config.json: 60 experts of 1408 (top 4, raw softmax weights) and a shared
// expert of 5632 on each of 24 layers, q/k/v biases.
TEST(ModelConfigTest, HfQwen2Moe) {
  const std::string j = R"({"model_type":"qwen2_moe","vocab_size":151936,"hidden_size":2048,
      "intermediate_size":5632,"moe_intermediate_size":1408,"shared_expert_intermediate_size":5632,
      "num_hidden_layers":24,"num_attention_heads":16,"num_key_value_heads":16,
      "max_position_embeddings":8192,"rope_theta":1000000.0,"rms_norm_eps":1e-6,"num_experts":60,
      "num_experts_per_tok":4,"norm_topk_prob":false,"decoder_sparse_step":1,
      "use_sliding_window":false,"tie_word_embeddings":false,"hidden_act":"silu"})";
  auto c = model::ConfigFromHfJson(WriteConfig(j));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "qwen2_moe");
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_EQ(c->shared_expert_intermediate_size, 5632);
  EXPECT_FALSE(c->norm_topk_prob);
  // The published count: 14.3B parameters.
  EXPECT_EQ(c->ParameterCount(), 14315784192);
  EXPECT_EQ(
      model::CanonicalFromHfName("qwen2_moe", "model.layers.3.mlp.shared_expert.down_proj.weight"),
      "layers.3.shared_expert.down_proj");
  EXPECT_EQ(model::CanonicalFromHfName("qwen2_moe", "model.layers.3.mlp.shared_expert_gate.weight"),
            "layers.3.shared_expert_gate");
  EXPECT_EQ(model::GgufNameFromCanonical("qwen2_moe", "layers.3.shared_expert_gate"),
            "blk.3.ffn_gate_inp_shexp.weight");
  // Without its shared expert's size the model cannot be built.
  std::string no_shared = j;
  no_shared.replace(no_shared.find("\"shared_expert_intermediate_size\":5632,"), 40, "");
  auto bad = model::ConfigFromHfJson(WriteConfig(no_shared));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status().message(), "shared_expert_intermediate_size"))
      << bad.status().message();
}

TEST(ModelConfigTest, HfQwen3MoeErrorsNameTheKey) {
  const std::pair<std::pair<std::string, std::string>, std::string> cases[] = {
      {{"\"num_experts_per_tok\":8", "\"num_experts_per_tok\":129"}, "num_experts_per_tok"},
      {{"\"num_experts\":128", "\"num_experts\":0"}, "num_experts"},
      {{"\"moe_intermediate_size\":768", "\"moe_intermediate_size\":-1"}, "moe_intermediate_size"},
      {{"\"mlp_only_layers\":[]", "\"mlp_only_layers\":[48]"}, "mlp_only_layers"},
      {{"\"mlp_only_layers\":[]", "\"mlp_only_layers\":\"all\""}, "mlp_only_layers"},
      {{"\"decoder_sparse_step\":1", "\"decoder_sparse_step\":0"}, "decoder_sparse_step"},
      {{"\"norm_topk_prob\":true", "\"norm_topk_prob\":true,\"shared_expert_intermediate_size\":8"},
       "shared_expert_intermediate_size"},
  };
  for (const auto& [edit, key] : cases) {
    std::string j = kQwen3Moe;
    j.replace(j.find(edit.first), edit.first.size(), edit.second);
    auto c = model::ConfigFromHfJson(WriteConfig(j));
    ASSERT_FALSE(c.ok()) << edit.second;
    EXPECT_TRUE(Contains(c.status().message(), key)) << c.status().message();
  }
  // The experts' count is bounded before anything is sized by it.
  std::string j = kQwen3Moe;
  j.replace(j.find("\"num_experts\":128"), 17, "\"num_experts\":100000");
  auto c = model::ConfigFromHfJson(WriteConfig(j));
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "at most 4096")) << c.status().message();
}

// Mixtral's GGUF files are llama ones with llama.expert_count (llama.cpp's converter).
TEST(ModelConfigTest, GgufLlamaWithExpertsIsMixtral) {
  const std::string dir = testing::TempDir("cfg_mixtral");
  const std::vector<std::pair<std::string, model::GgufValue>> meta = {
      {"general.architecture", model::GgufValue::String("llama")},
      {"llama.context_length", model::GgufValue::U32(32768)},
      {"llama.embedding_length", model::GgufValue::U32(64)},
      {"llama.block_count", model::GgufValue::U32(1)},
      {"llama.feed_forward_length", model::GgufValue::U32(96)},
      {"llama.attention.head_count", model::GgufValue::U32(4)},
      {"llama.expert_count", model::GgufValue::U32(8)},
      {"llama.expert_used_count", model::GgufValue::U32(2)}};
  std::vector<model::GgufTensorData> tensors = {
      {"token_embd.weight", {32, 64}, model::DType::kF32, std::vector<uint8_t>(32 * 64 * 4)}};
  ASSERT_TRUE(model::WriteGgufFile(dir + "/mixtral.gguf", meta, tensors).ok());
  auto g = model::GgufFile::Open(dir + "/mixtral.gguf");
  ASSERT_TRUE(g.ok());
  auto c = model::ConfigFromGguf(**g);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->rope_layout, model::RopeLayout::kInterleaved);
  EXPECT_EQ(c->num_experts, 8);
  EXPECT_EQ(c->num_experts_per_tok, 2);
  EXPECT_EQ(c->moe_intermediate_size, 96);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_TRUE(c->LayerIsMoe(0));
  std::string layer, part;
  EXPECT_TRUE(model::MatchStackedExperts("llama", "blk.0.ffn_up_exps.weight", &layer, &part));
  EXPECT_EQ(part, "up_proj");
  // Mixtral's HF names (Mixtral-8x7B-v0.1).
  EXPECT_EQ(
      model::CanonicalFromHfName("mixtral", "model.layers.31.block_sparse_moe.experts.7.w2.weight"),
      "layers.31.experts.7.down_proj");
  EXPECT_EQ(model::CanonicalFromHfName("mixtral", "model.layers.0.block_sparse_moe.gate.weight"),
            "layers.0.router");
  EXPECT_EQ(model::CanonicalFromHfName("mixtral", "model.layers.0.mlp.gate.weight"), "");
}

TEST(ModelConfigTest, HfMixtral) {
  // Mixtral-8x7B-v0.1's config.json: 46.7B parameters.
  const std::string j = R"({"model_type":"mixtral","vocab_size":32000,"hidden_size":4096,
      "intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,
      "num_key_value_heads":8,"max_position_embeddings":32768,"rope_theta":1000000.0,
      "sliding_window":null,"num_local_experts":8,"num_experts_per_tok":2,"rms_norm_eps":1e-5,
      "router_aux_loss_coef":0.02,"tie_word_embeddings":false,"hidden_act":"silu"})";
  auto c = model::ConfigFromHfJson(WriteConfig(j));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "mixtral");
  EXPECT_EQ(c->num_experts, 8);
  EXPECT_EQ(c->moe_intermediate_size, 14336);
  EXPECT_EQ(c->ParameterCount(), 46702792704);
  auto text = model::ConfigToHfJson(*c);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_TRUE(Contains(*text, "\"num_local_experts\": 8")) << *text;
  // A dense-only architecture cannot be written with experts.
  model::ModelConfig llama = *c;
  llama.architecture = "llama";
  EXPECT_FALSE(model::ConfigToHfJson(llama).ok());
  llama.architecture = "qwen3";
  EXPECT_FALSE(model::ConfigToHfJson(llama).ok());
}

// transformers 5's in-memory names of a MoE layer: the stacked experts and the router.
TEST(ModelConfigTest, Transformers5StackedExperts) {
  model::ModelConfig c;
  c.architecture = "qwen3_moe";
  c.num_layers = 3, c.hidden_size = 8, c.num_experts = 2, c.moe_intermediate_size = 4;
  c.num_experts_per_tok = 1, c.dense_layers = {1};
  std::string layer;
  std::vector<std::string> parts;
  std::vector<int64_t> shape;
  ASSERT_TRUE(model::MatchHfStackedExperts(c, "model.layers.2.mlp.experts.gate_up_proj", &layer,
                                           &parts, &shape));
  EXPECT_EQ(layer, "2");
  EXPECT_EQ(parts, (std::vector<std::string>{
                       "layers.2.experts.0.gate_proj", "layers.2.experts.0.up_proj",
                       "layers.2.experts.1.gate_proj", "layers.2.experts.1.up_proj"}));
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 8, 8}));
  ASSERT_TRUE(model::MatchHfStackedExperts(c, "model.layers.0.mlp.experts.down_proj", &layer,
                                           &parts, &shape));
  EXPECT_EQ(parts.size(), 2u);
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 8, 4}));
  ASSERT_TRUE(
      model::MatchHfStackedExperts(c, "model.layers.0.mlp.gate.weight", &layer, &parts, &shape));
  EXPECT_EQ(parts, (std::vector<std::string>{"layers.0.router"}));
  // Layer 1 is dense (mlp_only_layers); a dense architecture has no experts.
  EXPECT_FALSE(model::MatchHfStackedExperts(c, "model.layers.1.mlp.experts.down_proj", &layer,
                                            &parts, &shape));
  c.architecture = "qwen3";
  EXPECT_FALSE(model::MatchHfStackedExperts(c, "model.layers.0.mlp.experts.down_proj", &layer,
                                            &parts, &shape));
}

TEST(ModelConfigTest, ExpertTensorNames) {
  EXPECT_EQ(model::CanonicalFromHfName("qwen3_moe", "model.layers.3.mlp.experts.17.up_proj.weight"),
            "layers.3.experts.17.up_proj");
  EXPECT_EQ(model::CanonicalFromHfName("qwen3_moe", "model.layers.3.mlp.gate.weight"),
            "layers.3.router");
  EXPECT_EQ(model::HfNameFromCanonical("qwen3_moe", "layers.0.experts.5.down_proj"),
            "model.layers.0.mlp.experts.5.down_proj.weight");
  EXPECT_EQ(model::GgufNameFromCanonical("qwen3_moe", "layers.2.experts.5.gate_proj"),
            "blk.2.ffn_gate_exps.weight");
  EXPECT_EQ(model::GgufNameFromCanonical("qwen3_moe", "layers.2.router"),
            "blk.2.ffn_gate_inp.weight");
  // Not an expert index, or an architecture without experts: unmapped.
  EXPECT_EQ(model::CanonicalFromHfName("qwen3_moe", "model.layers.3.mlp.experts.x.up_proj.weight"),
            "");
  EXPECT_EQ(model::CanonicalFromHfName("qwen3", "model.layers.3.mlp.experts.1.up_proj.weight"), "");
  std::string layer, part;
  EXPECT_TRUE(model::MatchStackedExperts("qwen3_moe", "blk.4.ffn_down_exps.weight", &layer, &part));
  EXPECT_EQ(layer, "4");
  EXPECT_EQ(part, "down_proj");
  EXPECT_FALSE(model::MatchStackedExperts("qwen3", "blk.4.ffn_down_exps.weight", &layer, &part));
}

// "[a, a + step, ...]" with n numbers.
std::string Factors(int n, double a, double step) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(a + step * i);
  return s + "]";
}

// Phi-4-mini's shape: partial rotary 0.75 of head 128 = 96 rotated dims, so 48 factors each.
TEST(ModelConfigTest, HfPhi3LongRope) {
  const std::string phi4 = R"({"model_type":"phi3","vocab_size":200064,"hidden_size":3072,
      "intermediate_size":8192,"num_hidden_layers":32,"num_attention_heads":24,
      "num_key_value_heads":8,"max_position_embeddings":131072,"rope_theta":10000.0,
      "partial_rotary_factor":0.75,"tie_word_embeddings":true,"hidden_act":"silu",
      "rms_norm_eps":1e-5,)";
  const std::string scaling = R"("rope_scaling":{"type":"longrope","short_factor":)" +
                              Factors(48, 1.0, 0.01) + R"(,"long_factor":)" +
                              Factors(48, 1.0, 0.5) + "}";
  // No original_max_position_embeddings in the file: Phi3Config's default, 4096.
  auto c = model::ConfigFromHfJson(WriteConfig(phi4 + scaling + "}"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_dim, 96);
  const model::RopeScaling& s = c->rope_scaling;
  EXPECT_EQ(s.type, model::RopeScaling::Type::kLongRope);
  EXPECT_EQ(s.original_max_position, 4096);
  ASSERT_EQ(s.short_factor.size(), 48u);
  EXPECT_DOUBLE_EQ(s.short_factor[47], 1.47);
  EXPECT_DOUBLE_EQ(s.long_factor[2], 2.0);
  // factor = 131072 / 4096 = 2^5, so ln(factor) / ln(4096) = 5 / 12.
  EXPECT_NEAR(s.attention_factor, std::sqrt(17.0 / 12.0), 1e-12);

  // The top-level key wins over rope_scaling's own; an explicit attention_factor is kept.
  std::string own = phi4 + R"("original_max_position_embeddings":8192,)" + scaling;
  own.insert(own.size() - 1, R"(,"original_max_position_embeddings":2048,"attention_factor":1.5)");
  auto o = model::ConfigFromHfJson(WriteConfig(own + "}"));
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->rope_scaling.original_max_position, 8192);
  EXPECT_EQ(o->rope_scaling.attention_factor, 1.5);

  // transformers 5's spelling (rope_parameters, rope_type) reads the same.
  std::string v5 = phi4 + scaling;
  v5.replace(v5.find(R"("rope_scaling":{"type")"), 22, R"("rope_parameters":{"rope_type")");
  auto p = model::ConfigFromHfJson(WriteConfig(v5 + "}"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rope_scaling.type, model::RopeScaling::Type::kLongRope);
  EXPECT_EQ(p->rope_scaling.long_factor, s.long_factor);

  // Round trip through config.json.
  auto text = model::ConfigToHfJson(*c);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto back = model::ConfigFromHfJson(WriteConfig(*text));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rope_scaling.short_factor, s.short_factor);
  EXPECT_EQ(back->rope_scaling.original_max_position, 4096);
  EXPECT_NEAR(back->rope_scaling.attention_factor, s.attention_factor, 1e-12);

  // Factors of the wrong length, or not numbers, are refused naming the key.
  auto short_list = model::ConfigFromHfJson(WriteConfig(
      phi4 + R"("rope_scaling":{"type":"su","short_factor":[1.0],"long_factor":[2.0]}})"));
  EXPECT_TRUE(Contains(short_list.status().message(), "short_factor"))
      << short_list.status().message();
  auto text_list = model::ConfigFromHfJson(WriteConfig(
      phi4 + R"("rope_scaling":{"type":"longrope","short_factor":"x","long_factor":[2.0]}})"));
  EXPECT_TRUE(Contains(text_list.status().message(), "short_factor"))
      << text_list.status().message();
}

// llama.cpp's converter: the factors as tensors, the cos / sin factor as a key.
TEST(ModelConfigTest, GgufPhi3LongRope) {
  const std::string dir = testing::TempDir("cfg_phi3_longrope");
  auto f32 = [](const std::string& name, std::vector<float> v) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return model::GgufTensorData{name, {static_cast<int64_t>(v.size())}, model::DType::kF32, bytes};
  };
  const std::vector<std::pair<std::string, model::GgufValue>> meta = {
      {"general.architecture", model::GgufValue::String("phi3")},
      {"phi3.context_length", model::GgufValue::U32(131072)},
      {"phi3.embedding_length", model::GgufValue::U32(64)},
      {"phi3.block_count", model::GgufValue::U32(1)},
      {"phi3.feed_forward_length", model::GgufValue::U32(96)},
      {"phi3.attention.head_count", model::GgufValue::U32(4)},
      {"phi3.rope.dimension_count", model::GgufValue::U32(8)},
      {"phi3.rope.scaling.original_context_length", model::GgufValue::U32(4096)},
      {"phi3.rope.scaling.attn_factor", model::GgufValue::F32(1.25f)}};
  std::vector<model::GgufTensorData> tensors = {
      {"token_embd.weight", {32, 64}, model::DType::kF32, std::vector<uint8_t>(32 * 64 * 4)},
      f32("rope_factors_long.weight", {1, 2, 3, 4}),
      f32("rope_factors_short.weight", {1, 1.5, 1.5, 2})};
  ASSERT_TRUE(model::WriteGgufFile(dir + "/phi3.gguf", meta, tensors).ok());
  auto g = model::GgufFile::Open(dir + "/phi3.gguf");
  ASSERT_TRUE(g.ok());
  auto c = model::ConfigFromGguf(**g);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.type, model::RopeScaling::Type::kLongRope);
  EXPECT_EQ(c->rope_scaling.long_factor, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(c->rope_scaling.short_factor, (std::vector<double>{1, 1.5, 1.5, 2}));
  EXPECT_EQ(c->rope_scaling.attention_factor, 1.25);
  EXPECT_EQ(c->rope_scaling.original_max_position, 4096);

  // One set without the other is refused.
  tensors.pop_back();
  ASSERT_TRUE(model::WriteGgufFile(dir + "/half.gguf", meta, tensors).ok());
  auto h = model::GgufFile::Open(dir + "/half.gguf");
  ASSERT_TRUE(h.ok());
  auto bad = model::ConfigFromGguf(**h);
  EXPECT_TRUE(Contains(bad.status().message(), "rope_factors_short")) << bad.status().message();
}

TEST(ModelConfigTest, ExpectedWeightsAndHfJsonRoundTrip) {
  model::ModelConfig c;
  c.architecture = "qwen2";
  c.vocab_size = 100, c.hidden_size = 16, c.intermediate_size = 32, c.num_layers = 1;
  c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 4, c.rope_dim = 4, c.max_context_tokens = 64;
  c.qkv_bias = true, c.tie_word_embeddings = true, c.bos_token_id = 1, c.eos_token_ids = {2, 3};
  ASSERT_TRUE(c.Validate().ok());
  auto w = model::ExpectedWeights(c);
  // embed, final_norm, and 12 per layer (no lm_head, biases on).
  ASSERT_EQ(w.size(), 14u);
  EXPECT_EQ(w[3].name, "layers.0.q_proj");
  EXPECT_EQ(w[3].shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(w[5].shape, (std::vector<int64_t>{8, 16}));  // v_proj
  // 100*16 + 16 + (16 + 256 + 128 + 128 + 16 + 8 + 8 + 256 + 16 + 3*512)
  EXPECT_EQ(c.ParameterCount(), 1600 + 16 + 16 + 256 + 256 + 256 + 32 + 16 + 1536);
  auto text = model::ConfigToHfJson(c);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto back = model::ConfigFromHfJson(WriteConfig(*text));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ParameterCount(), c.ParameterCount());
  EXPECT_EQ(back->eos_token_ids, c.eos_token_ids);
  EXPECT_TRUE(back->qkv_bias && back->tie_word_embeddings);
}

TEST(ModelConfigTest, GgufStories260K) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  auto g = model::GgufFile::Open(path);
  ASSERT_TRUE(g.ok());
  auto c = model::ConfigFromGguf(**g);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_layers, 5);
  EXPECT_EQ(c->intermediate_size, 172);
  EXPECT_EQ(c->num_heads, 8);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->rope_dim, 8);
  EXPECT_EQ(c->vocab_size, 512);
  EXPECT_EQ(c->max_context_tokens, 2048);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_NEAR(c->rms_norm_eps, 1e-5, 1e-12);
  EXPECT_EQ(c->rope_layout, model::RopeLayout::kInterleaved);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(c->ParameterCount(), 292800);
}

TEST(ModelConfigTest, GgufUnsupportedArchitectureAndMetadataRoundTrip) {
  const std::string dir = testing::TempDir("cfg_gguf");
  ASSERT_TRUE(model::WriteGgufFile(dir + "/gpt.gguf",
                                   {{"general.architecture", model::GgufValue::String("gpt2")}}, {})
                  .ok());
  auto g = model::GgufFile::Open(dir + "/gpt.gguf");
  ASSERT_TRUE(g.ok());
  auto c = model::ConfigFromGguf(**g);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "gpt2") && Contains(c.status().message(), "gpt.gguf"));

  model::ModelConfig m;
  m.architecture = "qwen3";
  m.vocab_size = 64, m.hidden_size = 32, m.intermediate_size = 48, m.num_layers = 1;
  m.num_heads = 4, m.num_kv_heads = 1, m.head_dim = 16, m.rope_dim = 16, m.max_context_tokens = 128;
  m.qk_norm = model::QkNorm::kBeforeRope, m.rope_theta = 1e6, m.tie_word_embeddings = true;
  model::GgufWriter w;
  ASSERT_TRUE(model::AddGgufMetadata(m, &w).ok());
  w.AddTensor("token_embd.weight", {64, 32}, model::DType::kF32);
  ASSERT_TRUE(w.Open(dir + "/q3.gguf").ok());
  std::vector<float> zeros(64 * 32);
  ASSERT_TRUE(w.WriteTensorData(zeros.data(), zeros.size() * 4).ok());
  ASSERT_TRUE(w.Close().ok());
  auto g3 = model::GgufFile::Open(dir + "/q3.gguf");
  ASSERT_TRUE(g3.ok());
  auto c3 = model::ConfigFromGguf(**g3);
  ASSERT_TRUE(c3.ok()) << c3.status().ToString();
  EXPECT_EQ(c3->head_dim, 16);  // key_length, not hidden / heads
  EXPECT_EQ(c3->qk_norm, model::QkNorm::kBeforeRope);
  EXPECT_EQ(c3->rope_layout, model::RopeLayout::kHalf);
  EXPECT_TRUE(c3->tie_word_embeddings);
  EXPECT_EQ(c3->rope_theta, 1e6);
  EXPECT_EQ(c3->ParameterCount(), m.ParameterCount());
}

}  // namespace
}  // namespace astr
