// `astr inspect PATH`: what a model file holds — config, tensors, parameter count, vocabulary.
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/base/flags.h"
#include "common/model/model_file.h"
#include "tools/command.h"

namespace astr {
namespace {

using json = nlohmann::json;

const char* LayoutName(model::RopeLayout l) {
  return l == model::RopeLayout::kHalf ? "half" : "interleaved";
}
const char* QkNormName(model::QkNorm q) {
  return q == model::QkNorm::kNone         ? "none"
         : q == model::QkNorm::kBeforeRope ? "before_rope"
                                           : "after_rope";
}
const char* ScalingName(model::RopeScaling::Type t) {
  return t == model::RopeScaling::Type::kNone     ? "none"
         : t == model::RopeScaling::Type::kLinear ? "linear"
         : t == model::RopeScaling::Type::kLlama3 ? "llama3"
         : t == model::RopeScaling::Type::kYarn   ? "yarn"
                                                  : "longrope";
}

json RopeScalingJson(const model::RopeScaling& s) {
  json j = {{"type", ScalingName(s.type)}, {"factor", s.factor}};
  if (s.type == model::RopeScaling::Type::kLlama3 ||
      s.type == model::RopeScaling::Type::kLongRope || s.type == model::RopeScaling::Type::kYarn) {
    j["original_max_position"] = s.original_max_position;
  }
  if (s.type == model::RopeScaling::Type::kLongRope || s.type == model::RopeScaling::Type::kYarn) {
    j["attention_factor"] = s.attention_factor;
  }
  if (s.type == model::RopeScaling::Type::kYarn) {
    j["beta_fast"] = s.beta_fast;
    j["beta_slow"] = s.beta_slow;
    j["truncate"] = s.truncate;
  }
  return j;
}

// `checked`: the weights confirm the config's dims (ModelFile::CheckConfig), so that the parameter
// count, which walks every layer, is both meaningful and bounded.
json ConfigJson(const model::ModelConfig& c, bool checked) {
  json j = {{"architecture", c.architecture},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_layers", c.num_layers},
            {"num_heads", c.num_heads},
            {"num_kv_heads", c.num_kv_heads},
            {"head_dim", c.head_dim},
            {"rope_dim", c.rope_dim},
            {"max_context_tokens", c.max_context_tokens},
            {"rms_norm_eps", c.rms_norm_eps},
            {"rope_theta", c.rope_theta},
            {"rope_layout", LayoutName(c.rope_layout)},
            {"rope_scaling", RopeScalingJson(c.rope_scaling)},
            {"qkv_bias", c.qkv_bias},
            {"qk_norm", QkNormName(c.qk_norm)},
            {"gated_attention", c.gated_attention},
            {"mlp_activation", c.mlp_activation == model::MlpActivation::kGeluTanh ? "gelu_tanh"
                               : c.mlp_activation == model::MlpActivation::kSwigluClamped
                                   ? "swiglu_clamped"
                                   : "silu"},
            {"sliding_window", c.sliding_window},
            {"sliding_window_pattern", c.sliding_window_pattern},
            {"rope_local_theta", c.rope_local_theta},
            {"attn_scale", c.AttnScale()},
            {"embed_scale", c.embed_scale},
            {"attn_softcap", c.attn_softcap},
            {"final_softcap", c.final_softcap},
            {"sandwich_norms", c.sandwich_norms},
            {"norm_weight_offset", c.norm_weight_offset},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"bos_token_id", c.bos_token_id},
            {"eos_token_ids", c.eos_token_ids}};
  if (c.num_experts > 0) {
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["moe_layer_step"] = c.moe_layer_step;
    j["dense_layers"] = c.dense_layers;
    j["router_bias"] = c.router_bias;
    j["expert_bias"] = c.expert_bias;
  }
  if (c.mlp_activation == model::MlpActivation::kSwigluClamped) {
    j["swiglu_limit"] = c.swiglu_limit;
    j["swiglu_alpha"] = c.swiglu_alpha;
  }
  if (c.o_bias) j["o_bias"] = true;
  if (c.attn_sinks) j["attn_sinks"] = true;
  j["parameter_count"] = checked ? json(c.ParameterCount()) : json(nullptr);
  return j;
}

json VocabJson(const model::Vocab& v) {
  json first = json::array();
  for (size_t i = 0; i < v.tokens.size() && i < 8; ++i) first.push_back(v.tokens[i]);
  return {{"size", v.tokens.size()}, {"model", v.model},          {"pre", v.pre},
          {"bos_id", v.bos_id},      {"eos_id", v.eos_id},        {"unk_id", v.unk_id},
          {"pad_id", v.pad_id},      {"merges", v.merges.size()}, {"first_tokens", first}};
}

// What the file holds even when its config disagrees with its tensors (the file was opened
// unchecked): the config as declared, the tensors, and the disagreement as weights_error.
StatusOr<json> Inspect(const model::ModelFile& m, bool with_tensors) {
  const Status checked = m.CheckConfig();
  json j = {{"path", m.path()},
            {"format", m.format() == model::ModelFile::Format::kGguf ? "gguf" : "hf"},
            {"config", ConfigJson(m.config(), checked.ok())}};
  std::map<std::string, int64_t> dtype_counts;
  json tensors = json::array();
  int64_t stored_params = 0;
  for (const std::string& name : m.TensorNames()) {
    ASTR_ASSIGN_OR_RETURN(model::TensorView t, m.Raw(name));
    ++dtype_counts[std::string(model::DTypeName(t.dtype))];
    stored_params += t.num_elements();
    if (with_tensors) {
      tensors.push_back({{"name", name},
                         {"file_name", t.source_name},
                         {"dtype", model::DTypeName(t.dtype)},
                         {"shape", t.shape}});
    }
  }
  j["tensor_count"] = m.TensorNames().size();
  j["stored_parameters"] = stored_params;
  j["dtypes"] = dtype_counts;
  if (with_tensors) j["tensors"] = tensors;
  const Status valid = checked.ok() ? m.ValidateWeights() : checked;
  j["weights_valid"] = valid.ok();
  if (!valid.ok()) j["weights_error"] = valid.message();
  if (m.vocab() != nullptr) j["vocab"] = VocabJson(*m.vocab());
  return j;
}

// One tensor's values, dequantized to f32 (as the backends read them, before any packing): a JSON
// object with its name, stored dtype, shape and values in storage order.
StatusOr<json> Dump(const model::ModelFile& m, const std::string& name) {
  ASTR_ASSIGN_OR_RETURN(model::TensorView t, m.Raw(name));
  std::vector<float> values(static_cast<size_t>(t.num_elements()));
  model::DequantizeToF32(t.dtype, t.data, t.num_elements(), values.data());
  return json{{"name", name},
              {"dtype", model::DTypeName(t.dtype)},
              {"shape", t.shape},
              {"values", values}};
}

void PrintText(const json& j) {
  const json& c = j["config"];
  std::printf("%s (%s)\n", j["path"].get<std::string>().c_str(),
              j["format"].get<std::string>().c_str());
  std::printf("config:\n");
  for (const auto& [k, v] : c.items()) std::printf("  %-20s %s\n", k.c_str(), v.dump().c_str());
  std::printf("tensors: %lld (%lld stored parameters)",
              static_cast<long long>(j["tensor_count"].get<int64_t>()),
              static_cast<long long>(j["stored_parameters"].get<int64_t>()));
  for (const auto& [k, v] : j["dtypes"].items())
    std::printf(", %s x%lld", k.c_str(), static_cast<long long>(v.get<int64_t>()));
  std::printf("\n");
  if (j.contains("tensors")) {
    for (const json& t : j["tensors"]) {
      std::printf("  %-32s %-5s %-16s %s\n", t["name"].get<std::string>().c_str(),
                  t["dtype"].get<std::string>().c_str(), t["shape"].dump().c_str(),
                  t["file_name"].get<std::string>().c_str());
    }
  }
  std::printf("weights: %s\n", j["weights_valid"].get<bool>()
                                   ? "ok"
                                   : j["weights_error"].get<std::string>().c_str());
  if (j.contains("vocab")) {
    const json& v = j["vocab"];
    std::printf(
        "vocab: %lld tokens, model %s, bos %lld, eos %lld, unk %lld, first %s\n",
        static_cast<long long>(v["size"].get<int64_t>()), v["model"].get<std::string>().c_str(),
        static_cast<long long>(v["bos_id"].get<int64_t>()),
        static_cast<long long>(v["eos_id"].get<int64_t>()),
        static_cast<long long>(v["unk_id"].get<int64_t>()), v["first_tokens"].dump().c_str());
  }
}

int RunInspect(int argc, const char* const* argv) {
  std::string path;
  std::string dump;
  bool as_json = false, with_tensors = false;
  FlagSet fs(argv[0], "Show a model file's config, tensors and vocabulary.");
  fs.Positional("path", &path, "A .gguf file or a Hugging Face model folder.");
  fs.Bool("json", &as_json, "Print JSON instead of text.");
  fs.Bool("tensors", &with_tensors, "List every tensor (name, dtype, shape).");
  fs.String("dump", &dump,
            "Print one tensor (a name --tensors lists) as JSON: its stored dtype, shape and "
            "values dequantized to f32, in storage order.");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  // Unchecked, so that a config the tensors disagree with is shown with the disagreement; a file
  // whose metadata cannot be read at all (or is out of every range) is still an error.
  auto model = model::ModelFile::OpenUnchecked(path);
  if (!dump.empty()) {
    StatusOr<json> d = model.ok() ? Dump(**model, dump) : StatusOr<json>(model.status());
    if (!d.ok()) {
      std::fprintf(stderr, "astr inspect: %s\n", d.status().ToString().c_str());
      return 1;
    }
    std::cout << d->dump() << "\n";
    return 0;
  }
  StatusOr<json> j = model.ok() ? Inspect(**model, with_tensors) : StatusOr<json>(model.status());
  if (!j.ok()) {
    std::fprintf(stderr, "astr inspect: %s\n", j.status().ToString().c_str());
    return 1;
  }
  if (as_json) {
    std::cout << j->dump(2) << "\n";
  } else {
    PrintText(*j);
  }
  return 0;
}

}  // namespace

ASTR_REGISTER_COMMAND("inspect", "Show a model file's config, tensors and vocabulary.", RunInspect);

}  // namespace astr
