// Each architecture astr runs, described once: the files that name it (HF config.json model_type,
// GGUF general.architecture), how its config keys become the hyper-parameters of the decoder layer
// every backend runs (ModelConfig, model_config.h), and the names its tensors have in HF
// safetensors and in GGUF (as llama.cpp's converter writes them). The descriptions live in
// common/model/arch/, one file per family; adding an architecture is one description there plus
// whatever op no backend has yet (docs/engine.md, "Adding an architecture").
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/model_config.h"

namespace astr::model {

class ConfigJson;
class GgufKeys;
class GgufWriter;

// A tensor's canonical name (ExpectedWeights) and its names in GGUF and in HF safetensors. Layer
// tensors give the part after "layers.N." / "blk.N." / "model.layers.N.".
struct TensorNames {
  const char* canonical;
  const char* gguf;
  const char* hf;
};

// A file tensor that holds several canonical layer tensors stacked along its rows (Phi-3's
// qkv_proj, gate_up_proj): the model file exposes each part as its own tensor, a view of its rows.
struct FusedTensorNames {
  const char* gguf;                // layer suffix in GGUF
  const char* hf;                  // layer suffix in HF
  std::vector<std::string> parts;  // canonical suffixes, in row order (CanonicalRows each)
};

// The tensors of one expert of a mixture-of-experts layer: the canonical part ("gate_proj": the
// expert's tensor is layers.N.experts.E.gate_proj), its HF layer suffix with "{e}" where the expert
// index goes ("mlp.experts.{e}.gate_proj.weight"), and the GGUF layer suffix of the tensor that
// stacks every expert's ("ffn_gate_exps.weight", [experts, rows, cols]; the model file exposes
// each expert's rows as its own tensor).
struct ExpertTensorNames {
  const char* canonical;
  const char* gguf_stacked;
  const char* hf;
};

struct Architecture {
  const char* name;  // ModelConfig::architecture
  // config.json model_type values read as this architecture; the first is written.
  std::vector<std::string> hf_model_types;
  // general.architecture values read as this architecture (none: no GGUF form); the first is
  // written.
  std::vector<std::string> gguf_names;
  // Layer tensors named otherwise than in the LLaMA family (e.g. Gemma's four norms).
  std::vector<TensorNames> layer_names;
  // Layer tensors the files hold fused.
  std::vector<FusedTensorNames> fused_names;
  // Mixture of experts: whether the architecture has MoE layers (ModelConfig::num_experts; the
  // others refuse a config with experts), and its expert tensors' names (empty: Qwen-MoE's,
  // kExpertNames in architecture.cc).
  bool moe = false;
  std::vector<ExpertTensorNames> expert_names;
  // HF checkpoints hold a MoE layer's experts as gpt-oss's do, four tensors per layer in `x @ W`
  // form: mlp.experts.gate_up_proj [experts, hidden, 2 * moe_ffn] (gate and up columns
  // interleaved), gate_up_proj_bias [experts, 2 * moe_ffn] (likewise), down_proj [experts,
  // moe_ffn, hidden], down_proj_bias [experts, hidden]. The model file exposes each expert's
  // canonical tensors (gate_proj, up_proj, down_proj and their biases) as copies, transposed.
  bool hf_experts_transposed = false;
  // The files hold multi-token-prediction layers (GLM-4.5's num_nextn_predict_layers, llama.cpp's
  // nextn_predict_layers) numbered from the served layers' count on: the model file skips every
  // tensor of a layer past the config's (HF model.layers.N., GGUF blk.N.).
  bool mtp_layers = false;
  // ModelConfig::norm_weight_offset of the architecture's HF checkpoints (Gemma: 1, its norms
  // scale by 1 + w); converting to HF subtracts the difference from every norm.
  double hf_norm_weight_offset = 0.0;
  // Multimodal wrappers whose language model is this architecture (Gemma 3's "gemma3",
  // Gemma3ForConditionalGeneration): config.json holds the text model's keys under text_config,
  // given over `hf_text_defaults` (the text config class's defaults, which the wrapper's file
  // relies on), and the tensors sit under language_model. prefixes (CanonicalFromHfName strips
  // them; the vision tower's tensors map to nothing). Only the text stack is served.
  std::vector<std::string> hf_wrapper_model_types;
  nlohmann::json (*hf_text_defaults)() = nullptr;
  // transformers' class default of original_max_position_embeddings (Phi3Config: 4096), which a
  // config.json's top-level key overrides and which wins over the rope block's own; 0 = none.
  int64_t hf_original_max_position = 0;
  // The architecture's own config keys, read after the dims every architecture shares (vocab,
  // hidden, layers, heads, head_dim, context, eps, rope_theta, rope_scaling, tying, bos / eos).
  Status (*read_hf)(const ConfigJson& r, ModelConfig* c) = nullptr;
  Status (*read_gguf)(const GgufKeys& k, ModelConfig* c) = nullptr;
  // Writes them (make-model, convert): an error when the config has a feature the format cannot
  // say. Null: that format is not written.
  Status (*write_hf)(const ModelConfig& c, nlohmann::json* j) = nullptr;
  Status (*write_gguf)(const ModelConfig& c, GgufWriter* w) = nullptr;
};

// All described architectures, in the order docs/engine.md lists them.
const std::vector<const Architecture*>& Architectures();
// Null when none matches.
const Architecture* FindArchitecture(const std::string& name);
const Architecture* ArchitectureOfHfModelType(const std::string& model_type);
// The architecture of a multimodal wrapper's language model (hf_wrapper_model_types), or null.
const Architecture* ArchitectureOfHfWrapper(const std::string& model_type);
const Architecture* ArchitectureOfGguf(const std::string& general_architecture);
// "llama, mistral, ..." for errors.
std::string SupportedHfModelTypes();
std::string SupportedGgufArchitectures();

// Tensor name mapping of architecture `arch` (ModelConfig::architecture) between the canonical
// names and the file formats; "" when a name has no counterpart.
std::string CanonicalFromGgufName(const std::string& arch, const std::string& gguf_name);
// (An HF name under a multimodal wrapper's language model, language_model.model.X,
// model.language_model.X or language_model.lm_head.X, maps as model.X / lm_head.X.)
std::string CanonicalFromHfName(const std::string& arch, const std::string& hf_name);
std::string GgufNameFromCanonical(const std::string& arch, const std::string& canonical);
std::string HfNameFromCanonical(const std::string& arch, const std::string& canonical);

// Whether canonical tensor `canonical` is an RMSNorm weight (attn_norm, q_norm, final_norm, ...).
bool IsNormTensor(const std::string& canonical);
// What to add to the Hugging Face form of tensor `canonical` to get the form a model with `config`
// holds: for a norm whose architecture's HF offset differs from config.norm_weight_offset (Gemma
// served from GGUF: HF w, GGUF 1 + w), that difference; else 0.
float HfNormShift(const ModelConfig& config, const std::string& canonical);

// Rows of canonical layer tensor `part` ("q_proj", "k_proj", "gate_proj", ...) in `config`; 0 for a
// name that is no projection.
int64_t CanonicalRows(const ModelConfig& config, const std::string& part);
// Whether file tensor `file_name` (a GGUF name when `gguf`, else HF) is one of the fused tensors of
// architecture `arch`: then its layer ("3") and description.
bool MatchFusedTensor(const std::string& arch, const std::string& file_name, bool gguf,
                      std::string* layer, const FusedTensorNames** fused);

// transformers 5's in-memory names of a MoE layer's tensors (a trainer's state_dict), which its
// checkpoints spell per expert: mlp.gate.weight (the router, whatever the checkpoint calls it),
// mlp.experts.gate_up_proj [experts, 2 * moe_ffn, hidden] (each expert's gate rows, then its up
// rows) and mlp.experts.down_proj [experts, hidden, moe_ffn]. For `hf_name` (model.layers.N. ...)
// one of them in a MoE layer of `config`: its layer, the canonical tensors it holds in row order
// (layers.N.router alone for the router) and its shape.
bool MatchHfStackedExperts(const ModelConfig& config, const std::string& hf_name,
                           std::string* layer, std::vector<std::string>* parts,
                           std::vector<int64_t>* shape);

// gpt-oss-style stacked experts (Architecture::hf_experts_transposed): for `rest` (a layer tensor's
// HF name after "model.layers.N.") one of mlp.experts.gate_up_proj [experts, hidden, 2 * moe_ffn]
// (x @ W; column 2j of expert e is its gate_proj row j, 2j + 1 its up_proj row j),
// gate_up_proj_bias [experts, 2 * moe_ffn] (gate_bias / up_bias interleaved alike),
// down_proj [experts, moe_ffn, hidden] (down_proj transposed) or down_proj_bias [experts, hidden]:
// its shape, and the canonical parts each expert's slice holds (with their shapes, [rows] for a
// bias). False for any other name.
struct TransposedExpertPart {
  std::string part;            // "gate_proj", "up_bias", ...
  std::vector<int64_t> shape;  // the canonical tensor's
};
bool MatchTransposedExperts(const ModelConfig& config, const std::string& rest,
                            std::vector<int64_t>* shape, std::vector<TransposedExpertPart>* parts);
// Copies expert e's part `part` (an index into MatchTransposedExperts' parts) out of the stacked
// tensor `src` (elements of `elem_bytes` bytes, any element type) into dst, row-major in its
// canonical shape.
void CopyTransposedExpert(const ModelConfig& config, const std::string& rest, size_t part,
                          int64_t e, const void* src, size_t elem_bytes, void* dst);

// Whether file tensor `file_name` (GGUF) stacks one tensor of every expert of a MoE layer
// (ffn_gate_exps.weight, ...): then its layer and the canonical part of each expert ("gate_proj").
bool MatchStackedExperts(const std::string& arch, const std::string& file_name, std::string* layer,
                         std::string* part);

// Splits "<prefix><digits>.<rest>" (e.g. "layers.3.q_proj" with prefix "layers."); false when
// `name` does not have that form.
bool SplitLayerName(const std::string& name, const std::string& prefix, std::string* layer,
                    std::string* rest);

}  // namespace astr::model
