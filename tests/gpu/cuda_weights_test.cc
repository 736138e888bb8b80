// ConvertCudaWeights, on the CPU: every buffer of the CUDA weights exactly once, in the device
// layout cuda_weights.h documents (worked out here from the tensors the model file gives: bf16
// projections with q/k/v(/gate) and gate/up stacked, f32 norms, the qkv bias zero over the gate
// rows), read with the shapes of the config it is given; and the errors of a source that does not
// fit.
#include "worker/backends/cuda/cuda_weights.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/model/model_file.h"
#include "common/model/tensor_dtype.h"
#include "tests/support/test_util.h"

namespace astr::cuda {
namespace {

std::unique_ptr<model::ModelFile> MakeModel(const std::string& tag, const std::string& args) {
  const std::string dir = testing::TempDir(tag);
  const bool hf = args.find("--format hf") != std::string::npos;
  const std::string out = hf ? dir + "/model" : dir + "/model.gguf";
  const std::string cmd = testing::BinDir() + "/astr make-model " + args + " --hidden 64 " +
                          "--layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 300 --seed 5 " +
                          "--out " + out + " > /dev/null";
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << cmd;
    return nullptr;
  }
  auto file = model::ModelFile::Open(out);
  if (!file.ok()) {
    ADD_FAILURE() << file.status().ToString();
    return nullptr;
  }
  return std::move(*file);
}

struct Visit {
  WeightSlot slot;
  std::string what;
  std::vector<uint8_t> bytes;
};

Status Convert(const model::TensorSource& source, const model::ModelConfig& config,
               std::vector<Visit>* visits) {
  return ConvertCudaWeights(
      source, config, "",
      [&](const WeightSlot& slot, const std::string& what, std::span<const uint8_t> host) {
        visits->push_back({slot, what, {host.begin(), host.end()}});
        return OkStatus();
      });
}

using Parts = std::vector<std::pair<std::string, std::vector<int64_t>>>;

std::vector<float> Load(const model::TensorSource& s, const std::string& name,
                        const std::vector<int64_t>& shape) {
  std::vector<float> v;
  const Status st = s.LoadF32(name, shape, &v);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return v;
}

// The tensors one after the other as bf16 (round to nearest even).
std::vector<uint8_t> Bf16Rows(const model::TensorSource& s, const Parts& parts) {
  std::vector<uint8_t> out;
  for (const auto& [name, shape] : parts) {
    for (float x : Load(s, name, shape)) {
      const uint16_t b = model::F32ToBf16(x);
      out.push_back(static_cast<uint8_t>(b & 0xff));
      out.push_back(static_cast<uint8_t>(b >> 8));
    }
  }
  return out;
}

// The tensors one after the other as f32, then `zeros` more zero values.
std::vector<uint8_t> F32s(const model::TensorSource& s, const Parts& parts, int64_t zeros = 0) {
  std::vector<float> all;
  for (const auto& [name, shape] : parts) {
    const std::vector<float> v = Load(s, name, shape);
    all.insert(all.end(), v.begin(), v.end());
  }
  all.resize(all.size() + static_cast<size_t>(zeros), 0.0f);
  std::vector<uint8_t> out(all.size() * sizeof(float));
  std::memcpy(out.data(), all.data(), out.size());
  return out;
}

// What each buffer of `w` (a CudaWeights with no memory, for the buffers' identities) must hold.
std::map<const DeviceMemory*, std::vector<uint8_t>> Expected(const model::TensorSource& s,
                                                             const CudaWeights& w) {
  const model::ModelConfig& c = s.config();
  const int64_t h = c.hidden_size, hd = c.head_dim, ffn = c.intermediate_size;
  const int64_t q = c.num_heads * hd, kv = c.num_kv_heads * hd;
  std::map<const DeviceMemory*, std::vector<uint8_t>> e;
  e[&w.embed] = Bf16Rows(s, {{"embed", {c.vocab_size, h}}});
  if (!c.tie_word_embeddings) e[&w.lm_head] = Bf16Rows(s, {{"lm_head", {c.vocab_size, h}}});
  e[&w.final_norm] = F32s(s, {{"final_norm", {h}}});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const CudaLayerWeights& l = w.layers[i];
    e[&l.attn_norm] = F32s(s, {{p + "attn_norm", {h}}});
    e[&l.mlp_norm] = F32s(s, {{p + "mlp_norm", {h}}});
    Parts qkv = {{p + "q_proj", {q, h}}, {p + "k_proj", {kv, h}}, {p + "v_proj", {kv, h}}};
    if (c.gated_attention) qkv.push_back({p + "attn_gate", {q, h}});
    e[&l.qkv] = Bf16Rows(s, qkv);
    if (c.qkv_bias) {
      e[&l.qkv_bias] = F32s(s, {{p + "q_bias", {q}}, {p + "k_bias", {kv}}, {p + "v_bias", {kv}}},
                            c.gated_attention ? q : 0);
    }
    if (c.qk_norm != model::QkNorm::kNone) {
      e[&l.q_norm] = F32s(s, {{p + "q_norm", {hd}}});
      e[&l.k_norm] = F32s(s, {{p + "k_norm", {hd}}});
    }
    e[&l.o] = Bf16Rows(s, {{p + "o_proj", {h, q}}});
    e[&l.gate_up] = Bf16Rows(s, {{p + "gate_proj", {ffn, h}}, {p + "up_proj", {ffn, h}}});
    e[&l.down] = Bf16Rows(s, {{p + "down_proj", {h, ffn}}});
  }
  return e;
}

void ExpectDeviceLayout(const model::TensorSource& source) {
  std::vector<Visit> visits;
  const Status st = Convert(source, source.config(), &visits);
  ASSERT_TRUE(st.ok()) << st.ToString();
  CudaWeights w;
  w.layers.resize(source.config().num_layers);
  std::map<const DeviceMemory*, std::vector<uint8_t>> want = Expected(source, w);
  EXPECT_EQ(visits.size(), want.size());
  for (const Visit& v : visits) {
    const DeviceMemory* buffer = &w.at(v.slot);
    auto it = want.find(buffer);
    ASSERT_NE(it, want.end()) << v.what << ": a buffer not expected, or visited twice";
    EXPECT_TRUE(v.bytes == it->second) << v.what << ": " << v.bytes.size() << " bytes, expected "
                                       << it->second.size() << " (or other contents)";
    want.erase(it);
  }
}

// A source that passes every tensor through, but may lie about one (count_delta more values)
// and, with `biases`, adds qkv biases (deterministic values) to a model that has none.
class EditedSource final : public model::TensorSource {
 public:
  EditedSource(const model::ModelFile& base, bool biases, std::string lie = "", int count_delta = 0)
      : base_(base), config_(base.config()), lie_(std::move(lie)), count_delta_(count_delta) {
    if (biases) config_.qkv_bias = true;
  }
  const model::ModelConfig& config() const override { return config_; }
  Status LoadF32(const std::string& name, const std::vector<int64_t>& shape,
                 std::vector<float>* out) const override {
    if (config_.qkv_bias && !base_.config().qkv_bias && name.ends_with("_bias")) {
      out->resize(static_cast<size_t>(shape[0]));
      for (size_t i = 0; i < out->size(); ++i) out->at(i) = 0.5f + 0.01f * static_cast<float>(i);
      return OkStatus();
    }
    ASTR_RETURN_IF_ERROR(base_.LoadF32(name, shape, out));
    if (name == lie_) {
      out->resize(static_cast<size_t>(static_cast<int64_t>(out->size()) + count_delta_), 1.0f);
    }
    return OkStatus();
  }
  StatusOr<model::TensorView> Raw(const std::string& name) const override {
    return base_.Raw(name);
  }

 private:
  const model::ModelFile& base_;
  model::ModelConfig config_;
  std::string lie_;
  int count_delta_;
};

TEST(ConvertCudaWeights, QkvBiasUntiedHead) {
  auto file = MakeModel("cw_qwen2", "--arch qwen2 --dtype f32");
  ASSERT_NE(file, nullptr);
  ASSERT_TRUE(file->config().qkv_bias);
  ASSERT_FALSE(file->config().tie_word_embeddings);
  ExpectDeviceLayout(*file);
}

TEST(ConvertCudaWeights, QkNormTiedHead) {
  auto file = MakeModel("cw_qwen3", "--arch qwen3 --tie --dtype f32");
  ASSERT_NE(file, nullptr);
  ASSERT_NE(file->config().qk_norm, model::QkNorm::kNone);
  ASSERT_TRUE(file->config().tie_word_embeddings);
  ExpectDeviceLayout(*file);
}

TEST(ConvertCudaWeights, GatedAttentionWithBiasHasZerosOverTheGateRows) {
  auto file = MakeModel("cw_gated", "--arch autoregressive_lm --format hf --dtype bf16");
  ASSERT_NE(file, nullptr);
  ASSERT_TRUE(file->config().gated_attention);
  ExpectDeviceLayout(EditedSource(*file, /*biases=*/true));
}

TEST(ConvertCudaWeights, ReadsWithTheShapesOfTheConfigItIsGiven) {
  auto file = MakeModel("cw_shape", "--arch llama --dtype f32");
  ASSERT_NE(file, nullptr);
  model::ModelConfig served = file->config();
  served.intermediate_size = 128;  // the file has 96
  std::vector<Visit> visits;
  const Status st = Convert(*file, served, &visits);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layers.0.gate_proj"), std::string::npos) << st.message();
  for (const Visit& v : visits) EXPECT_EQ(v.what.find("gate_proj"), std::string::npos) << v.what;
}

TEST(ConvertCudaWeights, ASourceThatReturnsTheWrongCountFailsBeforeItsBuffer) {
  auto file = MakeModel("cw_count", "--arch llama --dtype f32");
  ASSERT_NE(file, nullptr);
  for (int delta : {1, -1}) {
    SCOPED_TRACE(delta);
    const EditedSource source(*file, /*biases=*/false, "layers.1.o_proj", delta);
    std::vector<Visit> visits;
    const Status st = Convert(source, source.config(), &visits);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    // hidden 64 x (4 heads * head_dim 16) values.
    EXPECT_NE(st.message().find("tensor 'layers.1.o_proj' has " + std::to_string(4096 + delta) +
                                " values, expected 4096"),
              std::string::npos)
        << st.message();
    ASSERT_FALSE(visits.empty());
    EXPECT_EQ(visits.back().what, "layers.1.q_proj");  // the buffer before o
  }
}

}  // namespace
}  // namespace astr::cuda
