#include "tests/fuzz/model_files.h"

#include <cstring>

#include "common/model/model_config.h"
#include "common/model/model_file.h"

namespace astr::fuzz {

std::string TinyConfigJson() {
  return R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 16,
  "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
  "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2})";
}

std::vector<model::SafetensorsTensorData> TinyWeights() {
  model::ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = 16;
  c.hidden_size = 8;
  c.intermediate_size = 16;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.rope_dim = 4;
  std::vector<model::SafetensorsTensorData> out;
  for (const model::WeightSpec& w : model::ExpectedWeights(c)) {
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    std::vector<float> values(static_cast<size_t>(n), 0.5f);
    model::SafetensorsTensorData t{model::HfNameFromCanonical(c.architecture, w.name), w.shape,
                                   model::DType::kF32,
                                   std::vector<uint8_t>(values.size() * sizeof(float))};
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    out.push_back(std::move(t));
  }
  return out;
}

void OpenAndLoadModel(const std::string& path) {
  auto f = model::ModelFile::Open(path);
  if (!f.ok()) return;
  // Open has checked the config against the tensors: what follows may size things from it.
  (void)(*f)->Describe();
  (void)(*f)->TensorNames();
  if (!(*f)->ValidateWeights().ok()) return;
  std::vector<float> values;
  for (const model::WeightSpec& w : model::ExpectedWeights((*f)->config())) {
    (void)(*f)->LoadF32(w.name, w.shape, &values);
    (void)(*f)->Raw(w.name);
  }
}

}  // namespace astr::fuzz
