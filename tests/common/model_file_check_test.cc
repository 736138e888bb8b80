// ModelFile::Open checks a model's config against the tensors that exist before anything is sized
// from it: every value a file declares for layers, dims, heads, ffn or vocab either agrees with a
// tensor's shape or fails Open with the key, the value and the tensor. The files are stories260K
// (facts from /work/shared/models/README.md: 5 layers, embedding 64, 8 heads, 4 kv heads, head_dim
// 8, ffn 172, vocab 512) and a small HF folder, each with one key edited. None of these calls can
// size anything from the edited value, so a regression fails instead of hanging.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/model/gguf.h"
#include "common/model/model_file.h"
#include "common/model/safetensors.h"
#include "tests/support/test_util.h"

namespace astr {
namespace {

using json = nlohmann::json;

constexpr int64_t kInt32Max = 2147483647;

// A copy of the GGUF file `src` with the metadata `edits` (replaced in place, or appended) and
// without the tensors whose names start with `drop_prefix`.
std::string EditGguf(const std::string& src, const std::string& tag,
                     const std::vector<std::pair<std::string, model::GgufValue>>& edits,
                     const std::string& drop_prefix = "") {
  auto g = model::GgufFile::Open(src);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  std::vector<std::pair<std::string, model::GgufValue>> metadata = (*g)->metadata();
  for (const auto& [key, value] : edits) {
    auto it = std::find_if(metadata.begin(), metadata.end(),
                           [&](const auto& kv) { return kv.first == key; });
    if (it != metadata.end()) {
      it->second = value;
    } else {
      metadata.emplace_back(key, value);
    }
  }
  std::vector<model::GgufTensorData> tensors;
  for (const model::GgufTensor& t : (*g)->tensors()) {
    if (!drop_prefix.empty() && t.name.rfind(drop_prefix, 0) == 0) continue;
    tensors.push_back({t.name, t.shape, t.dtype, std::vector<uint8_t>(t.data, t.data + t.bytes)});
  }
  const std::string out = testing::TempDir("check_" + tag) + "/model.gguf";
  EXPECT_TRUE(model::WriteGgufFile(out, metadata, tensors).ok());
  return out;
}

// The error Open gives for `path`, which must fail; OpenUnchecked must open it and CheckConfig and
// ValidateWeights (which would otherwise walk the config's layers) must give the same error.
std::string OpenError(const std::string& path) {
  auto m = model::ModelFile::Open(path);
  if (m.ok()) return "Open succeeded";
  auto unchecked = model::ModelFile::OpenUnchecked(path);
  if (unchecked.ok()) {
    EXPECT_EQ((*unchecked)->CheckConfig().message(), m.status().message());
    EXPECT_EQ((*unchecked)->ValidateWeights().message(), m.status().message());
  }
  return m.status().message();
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

class GgufCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = testing::SharedFile("models/stories260K.gguf");
    if (src_.empty()) GTEST_SKIP() << "shared test data missing: models/stories260K.gguf";
  }
  std::string Edit(const std::string& key, model::GgufValue value, const std::string& tag) {
    return EditGguf(src_, tag, {{key, std::move(value)}});
  }
  std::string src_;
};

TEST_F(GgufCheckTest, UneditedFileOpens) {
  auto m = model::ModelFile::Open(EditGguf(src_, "same", {}));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE((*m)->ValidateWeights().ok());
}

TEST_F(GgufCheckTest, BlockCountMustMatchTheLayers) {
  const std::string huge = Edit("llama.block_count", model::GgufValue::U32(kInt32Max), "huge");
  EXPECT_HAS(OpenError(huge),
             "model.gguf: llama.block_count = 2147483647 but the weights hold 5 layers "
             "(blk.0 .. blk.4)");
  EXPECT_HAS(OpenError(Edit("llama.block_count", model::GgufValue::U32(6), "six")),
             "llama.block_count = 6 but the weights hold 5 layers (blk.0 .. blk.4)");
  EXPECT_HAS(OpenError(Edit("llama.block_count", model::GgufValue::U32(4), "four")),
             "llama.block_count = 4 but the weights hold 5 layers");
  // Layer 2 missing, layers 0, 1, 3, 4 there.
  EXPECT_HAS(OpenError(EditGguf(src_, "gap", {}, "blk.2.")),
             "llama.block_count = 5 but there is no tensor blk.2.* (the weights hold 4 layers, "
             "up to blk.4)");
  // Layers 0..4 there and layer 4 dropped from the count: the last one is extra.
  EXPECT_HAS(OpenError(EditGguf(src_, "extra", {{"llama.block_count", model::GgufValue::U32(3)}},
                                "blk.3.")),
             "llama.block_count = 3 but the weights also hold layer blk.4.*");
}

TEST_F(GgufCheckTest, DimsMustMatchTheTensors) {
  EXPECT_HAS(OpenError(Edit("llama.embedding_length", model::GgufValue::U32(65), "hidden")),
             "llama.embedding_length = 65 but token_embd.weight has shape [512, 64] (64 columns)");
  EXPECT_HAS(OpenError(Edit("llama.feed_forward_length", model::GgufValue::U32(173), "ffn")),
             "llama.feed_forward_length = 173 but blk.0.ffn_gate.weight has shape [172, 64]");
  EXPECT_HAS(
      OpenError(Edit("llama.feed_forward_length", model::GgufValue::U32(kInt32Max), "ffn_huge")),
      "llama.feed_forward_length = 2147483647 but blk.0.ffn_gate.weight has shape");
  // 4 kv heads x head_dim 8 = 32 rows of attn_k.
  EXPECT_HAS(OpenError(Edit("llama.attention.head_count_kv", model::GgufValue::U32(8), "kv")),
             "llama.attention.head_count_kv = 8 x llama.attention.key_length = 8 (= hidden size / "
             "heads) but blk.0.attn_k.weight has shape [32, 64] (32 rows)");
  EXPECT_HAS(OpenError(Edit("llama.attention.key_length", model::GgufValue::U32(16), "head_dim")),
             "llama.attention.head_count = 8 x llama.attention.key_length = 16 but "
             "blk.0.attn_q.weight has shape [64, 64] (64 rows)");
  EXPECT_HAS(OpenError(EditGguf(src_, "heads",
                                {{"llama.attention.head_count", model::GgufValue::U32(16)},
                                 {"llama.attention.key_length", model::GgufValue::U32(8)}})),
             "llama.attention.head_count = 16 x llama.attention.key_length = 8 but "
             "blk.0.attn_q.weight has shape [64, 64]");
  // heads x head_dim overflows int64: still an error about the same tensor, not a wrapped product.
  EXPECT_HAS(
      OpenError(EditGguf(src_, "overflow",
                         {{"llama.attention.head_count", model::GgufValue::U32(kInt32Max)},
                          {"llama.attention.head_count_kv", model::GgufValue::U32(kInt32Max)},
                          {"llama.attention.key_length", model::GgufValue::U64(uint64_t{1} << 40)},
                          {"llama.rope.dimension_count", model::GgufValue::U32(8)}})),
      "llama.attention.head_count = 2147483647 x llama.attention.key_length = "
      "1099511627776 but blk.0.attn_q.weight has shape [64, 64]");
}

// A one-layer GGUF qwen3moe as llama.cpp's converter writes it (hidden 8, 2 heads of 4, 4 experts
// of ffn 6 stacked in ffn_{gate,up,down}_exps, router ffn_gate_inp), zero weights.
std::string WriteQwen3MoeGguf(const std::string& tag,
                              const std::vector<std::pair<std::string, model::GgufValue>>& edits,
                              const std::vector<int64_t>& up_exps_shape = {4, 6, 8}) {
  std::vector<std::pair<std::string, model::GgufValue>> meta = {
      {"general.architecture", model::GgufValue::String("qwen3moe")},
      {"qwen3moe.context_length", model::GgufValue::U32(64)},
      {"qwen3moe.embedding_length", model::GgufValue::U32(8)},
      {"qwen3moe.block_count", model::GgufValue::U32(1)},
      {"qwen3moe.feed_forward_length", model::GgufValue::U32(12)},
      {"qwen3moe.attention.head_count", model::GgufValue::U32(2)},
      {"qwen3moe.attention.head_count_kv", model::GgufValue::U32(2)},
      {"qwen3moe.attention.key_length", model::GgufValue::U32(4)},
      {"qwen3moe.expert_count", model::GgufValue::U32(4)},
      {"qwen3moe.expert_used_count", model::GgufValue::U32(2)},
      {"qwen3moe.expert_feed_forward_length", model::GgufValue::U32(6)}};
  for (const auto& [key, value] : edits) {
    for (auto& kv : meta) {
      if (kv.first == key) kv.second = value;
    }
  }
  auto zeros = [](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return model::GgufTensorData{name, shape, model::DType::kF32,
                                 std::vector<uint8_t>(static_cast<size_t>(n) * 4)};
  };
  const std::vector<model::GgufTensorData> tensors = {
      zeros("token_embd.weight", {16, 8}),
      zeros("output_norm.weight", {8}),
      zeros("output.weight", {16, 8}),
      zeros("blk.0.attn_norm.weight", {8}),
      zeros("blk.0.attn_q.weight", {8, 8}),
      zeros("blk.0.attn_k.weight", {8, 8}),
      zeros("blk.0.attn_v.weight", {8, 8}),
      zeros("blk.0.attn_q_norm.weight", {4}),
      zeros("blk.0.attn_k_norm.weight", {4}),
      zeros("blk.0.attn_output.weight", {8, 8}),
      zeros("blk.0.ffn_norm.weight", {8}),
      zeros("blk.0.ffn_gate_inp.weight", {4, 8}),
      zeros("blk.0.ffn_gate_exps.weight", {4, 6, 8}),
      zeros("blk.0.ffn_up_exps.weight", up_exps_shape),
      zeros("blk.0.ffn_down_exps.weight", {4, 8, 6})};
  const std::string out = testing::TempDir("check_moe_" + tag) + "/model.gguf";
  EXPECT_TRUE(model::WriteGgufFile(out, meta, tensors).ok());
  return out;
}

TEST(MoeGgufCheckTest, StackedExpertsOpenAsOneTensorPerExpert) {
  auto m = model::ModelFile::Open(WriteQwen3MoeGguf("ok", {}));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE((*m)->ValidateWeights().ok()) << (*m)->ValidateWeights().ToString();
  auto t = (*m)->Raw("layers.0.experts.3.down_proj");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape, (std::vector<int64_t>{8, 6}));
  EXPECT_EQ(t->source_name, "blk.0.ffn_down_exps.weight[3]");
  EXPECT_EQ(t->bytes, 8u * 6 * 4);
  auto t0 = (*m)->Raw("layers.0.experts.0.down_proj");
  ASSERT_TRUE(t0.ok());
  // Expert 3's slice starts three experts' bytes after expert 0's.
  EXPECT_EQ(static_cast<const uint8_t*>(t->data) - static_cast<const uint8_t*>(t0->data),
            3 * 8 * 6 * 4);
}

TEST(MoeGgufCheckTest, ExpertDimsMustMatchTheTensors) {
  EXPECT_HAS(OpenError(WriteQwen3MoeGguf("experts",
                                         {{"qwen3moe.expert_count", model::GgufValue::U32(5)}})),
             "qwen3moe.expert_count = 5 but blk.0.ffn_gate_inp.weight has shape [4, 8] (4 rows)");
  EXPECT_HAS(OpenError(WriteQwen3MoeGguf(
                 "ffn", {{"qwen3moe.expert_feed_forward_length", model::GgufValue::U32(7)}})),
             "tensor 'blk.0.ffn_gate_exps.weight' has shape [4, 6, 8], expected "
             "[qwen3moe.expert_count = 4, qwen3moe.expert_feed_forward_length = 7, cols] (it holds "
             "layers.0.experts.0.gate_proj)");
  EXPECT_HAS(OpenError(WriteQwen3MoeGguf(
                 "used", {{"qwen3moe.expert_used_count", model::GgufValue::U32(5)}})),
             "num_experts_per_tok");
  // A stacked tensor of the wrong shape: each expert's tensor is an error naming it.
  auto m = model::ModelFile::Open(WriteQwen3MoeGguf("shape", {}, {3, 6, 8}));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::string err = (*m)->ValidateWeights().ToString();
  EXPECT_HAS(err,
             "tensor 'blk.0.ffn_up_exps.weight' has shape [3, 6, 8], expected "
             "[qwen3moe.expert_count = 4, qwen3moe.expert_feed_forward_length = 6, cols] (it "
             "holds layers.0.experts.0.up_proj)");
}

TEST_F(GgufCheckTest, ContextLengthIsCapped) {
  EXPECT_HAS(OpenError(Edit("llama.context_length", model::GgufValue::U32(kInt32Max), "ctx")),
             "key 'llama.context_length' = 2147483647 is more than the longest context astr "
             "accepts (16777216 tokens)");
  // The cap itself is accepted.
  EXPECT_TRUE(model::ModelFile::Open(
                  Edit("llama.context_length", model::GgufValue::U32(1 << 24), "ctx_max"))
                  .ok());
}

// A llama HF folder (2 layers, hidden 16, 4 heads of 4, 2 kv heads, ffn 24, vocab 32) whose
// config.json is then edited.
class HfCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir("hf_check");
    model::ModelConfig c;
    c.architecture = "llama";
    c.vocab_size = 32, c.hidden_size = 16, c.intermediate_size = 24, c.num_layers = 2;
    c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 4, c.rope_dim = 4, c.max_context_tokens = 64;
    c.bos_token_id = 1, c.eos_token_ids = {2};
    auto text = model::ConfigToHfJson(c);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    config_ = json::parse(*text);
    std::vector<model::SafetensorsTensorData> tensors;
    for (const model::WeightSpec& w : model::ExpectedWeights(c)) {
      if (w.name == skip_) continue;
      int64_t n = 1;
      for (int64_t d : w.shape) n *= d;
      tensors.push_back({model::HfNameFromCanonical(c.architecture, w.name), w.shape,
                         model::DType::kBF16, std::vector<uint8_t>(static_cast<size_t>(n) * 2, 0)});
    }
    ASSERT_TRUE(model::WriteSafetensorsFile(dir_ + "/model.safetensors", tensors).ok());
  }
  // The folder with config.json's `key` set to `value`.
  std::string With(const std::string& key, const json& value) {
    json j = config_;
    j[key] = value;
    std::ofstream(dir_ + "/config.json") << j.dump();
    return dir_;
  }
  std::string dir_, skip_;
  json config_;
};

TEST_F(HfCheckTest, UneditedFolderOpens) {
  auto m = model::ModelFile::Open(With("model_type", "llama"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE((*m)->ValidateWeights().ok());
}

TEST_F(HfCheckTest, NumHiddenLayersMustMatchTheLayers) {
  EXPECT_HAS(OpenError(With("num_hidden_layers", kInt32Max)),
             "config.json: num_hidden_layers = 2147483647 but the weights hold 2 layers "
             "(model.layers.0 .. model.layers.1)");
  EXPECT_HAS(OpenError(With("num_hidden_layers", 3)),
             "config.json: num_hidden_layers = 3 but the weights hold 2 layers");
  EXPECT_HAS(OpenError(With("num_hidden_layers", 1)),
             "config.json: num_hidden_layers = 1 but the weights hold 2 layers");
}

TEST_F(HfCheckTest, DimsMustMatchTheTensors) {
  EXPECT_HAS(OpenError(With("vocab_size", 33)),
             "config.json: vocab_size = 33 but model.embed_tokens.weight has shape [32, 16] (32 "
             "token rows)");
  EXPECT_HAS(OpenError(With("hidden_size", 32)),
             "config.json: hidden_size = 32 but model.embed_tokens.weight has shape [32, 16] (16 "
             "columns)");
  EXPECT_HAS(OpenError(With("num_attention_heads", 8)),
             "config.json: num_attention_heads = 8 x head_dim = 4 but "
             "model.layers.0.self_attn.q_proj.weight has shape [16, 16] (16 rows)");
  EXPECT_HAS(OpenError(With("num_key_value_heads", 4)),
             "config.json: num_key_value_heads = 4 x head_dim = 4 (= hidden size / heads) but "
             "model.layers.0.self_attn.k_proj.weight has shape [8, 16] (8 rows)");
  EXPECT_HAS(OpenError(With("head_dim", 8)),
             "num_attention_heads = 4 x head_dim = 8 but model.layers.0.self_attn.q_proj.weight");
  EXPECT_HAS(OpenError(With("intermediate_size", kInt32Max)),
             "config.json: intermediate_size = 2147483647 but "
             "model.layers.0.mlp.gate_proj.weight has shape [24, 16] (24 rows)");
}

TEST_F(HfCheckTest, SizesNoTensorConfirmsAreCapped) {
  EXPECT_HAS(OpenError(With("max_position_embeddings", kInt32Max)),
             "config.json: key 'max_position_embeddings' = 2147483647 is more than the longest "
             "context astr accepts (16777216 tokens)");
  json j = config_;
  j["model_type"] = "mistral";
  j["sliding_window"] = int64_t{1} << 32;
  std::ofstream(dir_ + "/config.json") << j.dump();
  EXPECT_HAS(OpenError(dir_), "config.json: key 'sliding_window' = 4294967296 is more than");
  EXPECT_HAS(OpenError(With("partial_rotary_factor", 1e300)),
             "key 'partial_rotary_factor' must be in (0, 1]");
}

TEST_F(HfCheckTest, MissingDefiningTensorIsNamed) {
  skip_ = "layers.0.q_proj";
  SetUp();
  EXPECT_HAS(OpenError(With("model_type", "llama")),
             "missing tensor 'layers.0.q_proj' (model.layers.0.self_attn.q_proj.weight)");
}

// `astr inspect` opens such files unchecked: it shows the config as declared, the tensors, and the
// disagreement as the weights error, at once. The runs are bounded in time and address space, so a
// regression that sizes something from the edited value fails instead of taking the machine.
testing::CommandResult Inspect(const std::string& args,
                               const std::string& stderr_to = "/dev/null") {
  return testing::RunCommand("ulimit -v 4000000; timeout 60 " + testing::BinDir() +
                             "/astr inspect " + args + " 2>" + stderr_to);
}

TEST_F(GgufCheckTest, InspectShowsTheFileAndTheDisagreement) {
  const std::string path = Edit("llama.block_count", model::GgufValue::U32(kInt32Max), "inspect");
  auto r = Inspect("--json " + path);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["config"]["num_layers"], kInt32Max);  // as declared
  EXPECT_TRUE(j["config"]["parameter_count"].is_null());
  EXPECT_EQ(j["tensor_count"], 48);
  EXPECT_EQ(j["weights_valid"], false);
  EXPECT_HAS(j["weights_error"].get<std::string>(),
             "llama.block_count = 2147483647 but the weights hold 5 layers (blk.0 .. blk.4)");
  EXPECT_EQ(j["vocab"]["size"], 512);
  // A value out of every range (no tensor could confirm it) leaves nothing to show: an error.
  r = Inspect(Edit("llama.context_length", model::GgufValue::U32(kInt32Max), "inspect_ctx"), "&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_HAS(r.out, "key 'llama.context_length' = 2147483647 is more than");
}

TEST_F(HfCheckTest, InspectShowsTheFolderAndTheDisagreement) {
  const std::string dir = With("num_hidden_layers", kInt32Max);
  auto r = Inspect(dir);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_HAS(r.out, "num_layers           2147483647");
  EXPECT_HAS(r.out, "tensors: 21 (");  // embed, final_norm, lm_head + 9 per layer
  EXPECT_HAS(r.out, "weights: " + dir +
                        "/config.json: num_hidden_layers = 2147483647 but the weights hold 2 "
                        "layers (model.layers.0 .. model.layers.1)");
}

}  // namespace
}  // namespace astr
