#include "common/model/architecture.h"

#include <cstring>

namespace astr::model {

// The descriptions (common/model/arch/*.cc).
extern const Architecture kLlamaArchitecture;
extern const Architecture kMistralArchitecture;
extern const Architecture kMixtralArchitecture;
extern const Architecture kQwen2Architecture;
extern const Architecture kQwen3Architecture;
extern const Architecture kQwen3MoeArchitecture;
extern const Architecture kQwen2MoeArchitecture;
extern const Architecture kAutoregressiveLmArchitecture;
extern const Architecture kGemma2Architecture;
extern const Architecture kGemma3Architecture;
extern const Architecture kPhi3Architecture;
extern const Architecture kGptOssArchitecture;
extern const Architecture kGlm4MoeArchitecture;

namespace {

// The LLaMA family's tensor names; an architecture's layer_names replace entries of the same
// canonical name.
constexpr TensorNames kLayerNames[] = {
    {"attn_norm", "attn_norm.weight", "input_layernorm.weight"},
    {"q_proj", "attn_q.weight", "self_attn.q_proj.weight"},
    {"k_proj", "attn_k.weight", "self_attn.k_proj.weight"},
    {"v_proj", "attn_v.weight", "self_attn.v_proj.weight"},
    {"q_bias", "attn_q.bias", "self_attn.q_proj.bias"},
    {"k_bias", "attn_k.bias", "self_attn.k_proj.bias"},
    {"v_bias", "attn_v.bias", "self_attn.v_proj.bias"},
    {"o_proj", "attn_output.weight", "self_attn.o_proj.weight"},
    {"o_bias", "attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_sinks", "attn_sinks.weight", "self_attn.sinks"},
    {"q_norm", "attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"k_norm", "attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"attn_gate", "attn_gate.weight", "self_attn.gate_proj.weight"},
    {"mlp_norm", "ffn_norm.weight", "post_attention_layernorm.weight"},
    {"gate_proj", "ffn_gate.weight", "mlp.gate_proj.weight"},
    {"up_proj", "ffn_up.weight", "mlp.up_proj.weight"},
    {"down_proj", "ffn_down.weight", "mlp.down_proj.weight"},
    {"router", "ffn_gate_inp.weight", "mlp.gate.weight"},
    {"router_bias", "ffn_gate_inp.bias", "mlp.gate.bias"},
    {"shared_expert.gate_proj", "ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
    {"shared_expert.up_proj", "ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
    {"shared_expert.down_proj", "ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
    {"shared_expert_gate", "ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
};
// The experts' tensors of Qwen-MoE (and the default of every MoE architecture).
const std::vector<ExpertTensorNames> kExpertNames = {
    {"gate_proj", "ffn_gate_exps.weight", "mlp.experts.{e}.gate_proj.weight"},
    {"up_proj", "ffn_up_exps.weight", "mlp.experts.{e}.up_proj.weight"},
    {"down_proj", "ffn_down_exps.weight", "mlp.experts.{e}.down_proj.weight"},
};
const std::vector<ExpertTensorNames>& ExpertNames(const Architecture* arch) {
  return arch != nullptr && !arch->expert_names.empty() ? arch->expert_names : kExpertNames;
}
constexpr TensorNames kGlobalNames[] = {
    {"embed", "token_embd.weight", "model.embed_tokens.weight"},
    {"final_norm", "output_norm.weight", "model.norm.weight"},
    {"lm_head", "output.weight", "lm_head.weight"},
};

enum class Side { kCanonical, kGguf, kHf };
const char* Pick(const TensorNames& n, Side s) {
  return s == Side::kCanonical ? n.canonical : s == Side::kGguf ? n.gguf : n.hf;
}
const char* LayerPrefix(Side s) {
  return s == Side::kCanonical ? "layers." : s == Side::kGguf ? "blk." : "model.layers.";
}

// An expert's tensor: "experts.E.part" (canonical), the HF pattern with E in it, or (GGUF, from the
// canonical side only) the stacked tensor. "" when `rest` is none.
std::string MapExpertSuffix(const Architecture* arch, const std::string& rest, Side from, Side to) {
  if (arch == nullptr || !arch->moe || from == Side::kGguf) return "";
  for (const ExpertTensorNames& n : ExpertNames(arch)) {
    const std::string hf = n.hf;
    const size_t at = hf.find("{e}");
    const std::string before = from == Side::kHf ? hf.substr(0, at) : std::string("experts.");
    const std::string after =
        from == Side::kHf ? hf.substr(at + 3) : std::string(".") + n.canonical;
    if (rest.size() <= before.size() + after.size() || !rest.starts_with(before) ||
        !rest.ends_with(after)) {
      continue;
    }
    const std::string e = rest.substr(before.size(), rest.size() - before.size() - after.size());
    if (e.find_first_not_of("0123456789") != std::string::npos) continue;
    if (to == Side::kGguf) return n.gguf_stacked;
    if (to == Side::kHf) return hf.substr(0, at) + e + hf.substr(at + 3);
    return "experts." + e + "." + n.canonical;
  }
  return "";
}

// The suffix of a layer tensor on side `to`, from its suffix on side `from`; null when unmapped.
const char* MapLayerSuffix(const Architecture* arch, const std::string& rest, Side from, Side to) {
  if (arch != nullptr) {
    for (const TensorNames& n : arch->layer_names) {
      if (rest == Pick(n, from)) return Pick(n, to);
    }
  }
  for (const TensorNames& n : kLayerNames) {
    if (rest != Pick(n, from)) continue;
    if (arch != nullptr) {  // renamed by the architecture: this spelling means nothing there
      for (const TensorNames& o : arch->layer_names) {
        if (std::string(o.canonical) == n.canonical) return nullptr;
      }
    }
    return Pick(n, to);
  }
  return nullptr;
}

std::string MapName(const std::string& arch_name, const std::string& name, Side from, Side to) {
  for (const TensorNames& g : kGlobalNames) {
    if (name == Pick(g, from)) return Pick(g, to);
  }
  std::string layer, rest;
  if (!SplitLayerName(name, LayerPrefix(from), &layer, &rest)) return "";
  const Architecture* arch = FindArchitecture(arch_name);
  if (std::string expert = MapExpertSuffix(arch, rest, from, to); !expert.empty()) {
    return LayerPrefix(to) + layer + "." + expert;
  }
  const char* mapped = MapLayerSuffix(arch, rest, from, to);
  return mapped == nullptr ? "" : LayerPrefix(to) + layer + "." + mapped;
}

std::string JoinAll(bool hf) {
  std::string out;
  for (const Architecture* a : Architectures()) {
    for (const std::string& n : hf ? a->hf_model_types : a->gguf_names) {
      out += (out.empty() ? "" : ", ") + n;
    }
    if (!hf) continue;
    for (const std::string& n : a->hf_wrapper_model_types) {
      out += (out.empty() ? "" : ", ") + n + " (text only)";
    }
  }
  return out;
}

}  // namespace

bool IsNormTensor(const std::string& canonical) { return canonical.ends_with("norm"); }

float HfNormShift(const ModelConfig& config, const std::string& canonical) {
  const Architecture* arch = FindArchitecture(config.architecture);
  if (arch == nullptr || !IsNormTensor(canonical)) return 0.0f;
  return static_cast<float>(arch->hf_norm_weight_offset - config.norm_weight_offset);
}

int64_t CanonicalRows(const ModelConfig& c, const std::string& part) {
  if (part == "q_proj" || part == "attn_gate") return c.num_heads * c.head_dim;
  if (part == "k_proj" || part == "v_proj") return c.num_kv_heads * c.head_dim;
  if (part == "gate_proj" || part == "up_proj") return c.intermediate_size;
  if (part == "o_proj" || part == "down_proj") return c.hidden_size;
  if (part == "router") return c.num_experts;
  if (part == "shared_expert.gate_proj" || part == "shared_expert.up_proj") {
    return c.shared_expert_intermediate_size;
  }
  if (part == "shared_expert.down_proj") return c.hidden_size;
  return 0;
}

bool MatchFusedTensor(const std::string& arch, const std::string& file_name, bool gguf,
                      std::string* layer, const FusedTensorNames** fused) {
  const Architecture* a = FindArchitecture(arch);
  if (a == nullptr || a->fused_names.empty()) return false;
  std::string rest;
  if (!SplitLayerName(file_name, LayerPrefix(gguf ? Side::kGguf : Side::kHf), layer, &rest)) {
    return false;
  }
  for (const FusedTensorNames& f : a->fused_names) {
    if (rest == (gguf ? f.gguf : f.hf)) {
      *fused = &f;
      return true;
    }
  }
  return false;
}

bool MatchHfStackedExperts(const ModelConfig& c, const std::string& hf_name, std::string* layer,
                           std::vector<std::string>* parts, std::vector<int64_t>* shape) {
  const Architecture* a = FindArchitecture(c.architecture);
  std::string rest;
  // (gpt-oss's stacked form is MatchTransposedExperts'.)
  if (a == nullptr || !a->moe || a->hf_experts_transposed || c.num_experts <= 0 ||
      !SplitLayerName(hf_name, LayerPrefix(Side::kHf), layer, &rest)) {
    return false;
  }
  if (layer->size() > 18 || !c.LayerIsMoe(std::stoll(*layer))) return false;
  const std::string p = "layers." + *layer + ".";
  const int64_t e_count = c.num_experts, f = c.moe_intermediate_size, h = c.hidden_size;
  parts->clear();
  if (rest == "mlp.gate.weight") {
    parts->push_back(p + "router");
    *shape = {e_count, h};
  } else if (rest == "mlp.experts.gate_up_proj") {
    for (int64_t e = 0; e < e_count; ++e) {
      parts->push_back(p + "experts." + std::to_string(e) + ".gate_proj");
      parts->push_back(p + "experts." + std::to_string(e) + ".up_proj");
    }
    *shape = {e_count, 2 * f, h};
  } else if (rest == "mlp.experts.down_proj") {
    for (int64_t e = 0; e < e_count; ++e) {
      parts->push_back(p + "experts." + std::to_string(e) + ".down_proj");
    }
    *shape = {e_count, h, f};
  } else {
    return false;
  }
  return true;
}

bool MatchTransposedExperts(const ModelConfig& c, const std::string& rest,
                            std::vector<int64_t>* shape, std::vector<TransposedExpertPart>* parts) {
  const int64_t n = c.num_experts, f = c.moe_intermediate_size, h = c.hidden_size;
  if (rest == "mlp.experts.gate_up_proj") {
    *shape = {n, h, 2 * f};
    *parts = {{"gate_proj", {f, h}}, {"up_proj", {f, h}}};
  } else if (rest == "mlp.experts.gate_up_proj_bias") {
    *shape = {n, 2 * f};
    *parts = {{"gate_bias", {f}}, {"up_bias", {f}}};
  } else if (rest == "mlp.experts.down_proj") {
    *shape = {n, f, h};
    *parts = {{"down_proj", {h, f}}};
  } else if (rest == "mlp.experts.down_proj_bias") {
    *shape = {n, h};
    *parts = {{"down_bias", {h}}};
  } else {
    return false;
  }
  return true;
}

void CopyTransposedExpert(const ModelConfig& c, const std::string& rest, size_t part, int64_t e,
                          const void* src, size_t elem_bytes, void* dst) {
  const int64_t f = c.moe_intermediate_size, h = c.hidden_size;
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  const int64_t p = static_cast<int64_t>(part);
  auto put = [&](int64_t to, int64_t from) {
    std::memcpy(out + to * elem_bytes, in + from * elem_bytes, elem_bytes);
  };
  if (rest == "mlp.experts.gate_up_proj") {  // [E, h, 2f] -> [f, h]
    for (int64_t r = 0; r < f; ++r) {
      for (int64_t k = 0; k < h; ++k) put(r * h + k, (e * h + k) * 2 * f + 2 * r + p);
    }
  } else if (rest == "mlp.experts.gate_up_proj_bias") {  // [E, 2f] -> [f]
    for (int64_t r = 0; r < f; ++r) put(r, e * 2 * f + 2 * r + p);
  } else if (rest == "mlp.experts.down_proj") {  // [E, f, h] -> [h, f]
    for (int64_t r = 0; r < h; ++r) {
      for (int64_t k = 0; k < f; ++k) put(r * f + k, (e * f + k) * h + r);
    }
  } else {  // down_proj_bias [E, h] -> [h]
    std::memcpy(out, in + e * h * elem_bytes, static_cast<size_t>(h) * elem_bytes);
  }
}

bool MatchStackedExperts(const std::string& arch, const std::string& file_name, std::string* layer,
                         std::string* part) {
  const Architecture* a = FindArchitecture(arch);
  if (a == nullptr || !a->moe) return false;
  std::string rest;
  if (!SplitLayerName(file_name, LayerPrefix(Side::kGguf), layer, &rest)) return false;
  for (const ExpertTensorNames& n : ExpertNames(a)) {
    if (rest == n.gguf_stacked) {
      *part = n.canonical;
      return true;
    }
  }
  return false;
}

bool SplitLayerName(const std::string& name, const std::string& prefix, std::string* layer,
                    std::string* rest) {
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return false;
  *layer = name.substr(prefix.size(), dot - prefix.size());
  if (layer->find_first_not_of("0123456789") != std::string::npos) return false;
  *rest = name.substr(dot + 1);
  return true;
}

const std::vector<const Architecture*>& Architectures() {
  static const std::vector<const Architecture*> all = {
      &kLlamaArchitecture,    &kMistralArchitecture,
      &kMixtralArchitecture,  &kQwen2Architecture,
      &kQwen2MoeArchitecture, &kQwen3Architecture,
      &kQwen3MoeArchitecture, &kAutoregressiveLmArchitecture,
      &kGemma2Architecture,   &kGemma3Architecture,
      &kPhi3Architecture,     &kGptOssArchitecture,
      &kGlm4MoeArchitecture};
  return all;
}

const Architecture* FindArchitecture(const std::string& name) {
  for (const Architecture* a : Architectures()) {
    if (name == a->name) return a;
  }
  return nullptr;
}

const Architecture* ArchitectureOfHfWrapper(const std::string& model_type) {
  for (const Architecture* a : Architectures()) {
    for (const std::string& t : a->hf_wrapper_model_types) {
      if (t == model_type) return a;
    }
  }
  return nullptr;
}

const Architecture* ArchitectureOfHfModelType(const std::string& model_type) {
  for (const Architecture* a : Architectures()) {
    for (const std::string& t : a->hf_model_types) {
      if (t == model_type) return a;
    }
  }
  return nullptr;
}

const Architecture* ArchitectureOfGguf(const std::string& general_architecture) {
  for (const Architecture* a : Architectures()) {
    for (const std::string& t : a->gguf_names) {
      if (t == general_architecture) return a;
    }
  }
  return nullptr;
}

std::string SupportedHfModelTypes() { return JoinAll(true); }
std::string SupportedGgufArchitectures() { return JoinAll(false); }

std::string CanonicalFromGgufName(const std::string& arch, const std::string& n) {
  return MapName(arch, n, Side::kGguf, Side::kCanonical);
}
std::string CanonicalFromHfName(const std::string& arch, const std::string& n) {
  // A wrapper's language model: transformers < 4.52 saved language_model.model.X (and
  // language_model.lm_head.X), later ones model.language_model.X.
  for (const auto& [wrapped, plain] :
       {std::pair{"language_model.model.", "model."}, std::pair{"model.language_model.", "model."},
        std::pair{"language_model.lm_head.", "lm_head."}}) {
    const std::string prefix = wrapped;
    if (n.compare(0, prefix.size(), prefix) == 0) {
      return MapName(arch, plain + n.substr(prefix.size()), Side::kHf, Side::kCanonical);
    }
  }
  return MapName(arch, n, Side::kHf, Side::kCanonical);
}
std::string GgufNameFromCanonical(const std::string& arch, const std::string& n) {
  return MapName(arch, n, Side::kCanonical, Side::kGguf);
}
std::string HfNameFromCanonical(const std::string& arch, const std::string& n) {
  return MapName(arch, n, Side::kCanonical, Side::kHf);
}

}  // namespace astr::model
