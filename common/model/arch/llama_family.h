// Config keys the LLaMA-family descriptions share (common/model/arch/llama.cc, qwen.cc).
#pragma once

#include <nlohmann/json.hpp>

#include "common/base/status.h"
#include "common/model/config_reader.h"
#include "common/model/model_config.h"

namespace astr::model::arch {

// sliding_window (Mistral's; with `use_sliding_window_key`, Qwen's flag, which must be false),
// attention_bias (refused unless qkv_bias), hidden_act, mlp_bias (refused).
Status ReadLlamaFamilyHf(const ConfigJson& r, bool use_sliding_window_key, ModelConfig* c);
// hidden_act (or `key`): silu / swish -> SwiGLU, gelu_pytorch_tanh / gelu_new -> GeGLU; any other
// value is refused rather than run as something else.
Status ReadHfActivation(const ConfigJson& r, const std::string& key, const std::string& dflt,
                        ModelConfig* c);
// The features a plain HF LLaMA-family folder cannot say (interleaved rows, q/k norms, gated
// attention, biases, per-layer windows, Gemma's scales and norms): an error naming `model_type`
// unless the config has exactly `qkv_bias` and `qk_norm`.
Status CheckPlainLlamaFeatures(const ModelConfig& c, const std::string& model_type, bool qkv_bias,
                               QkNorm qk_norm);
// layer_types ["sliding_attention", ..., "full_attention", ...] as a period P (layer l global when
// (l + 1) % P == 0; 0 when every layer slides); anything else is refused (Gemma, gpt-oss).
Status ReadLayerTypes(const ConfigJson& r, int64_t num_layers, int64_t* pattern);
// Writes hidden_act and sliding_window.
void WriteLlamaFamilyHf(const ModelConfig& c, nlohmann::json* j);

}  // namespace astr::model::arch
