// RoPE inverse frequencies for a model config, scaling included (linear, llama3).
#pragma once

#include <vector>

#include "common/model/model_config.h"

namespace astr {

// inv_freq[i] for i < rope_dim / 2: theta^(-2i / rope_dim), then the config's rope scaling. With
// `local`, those of the sliding-window layers: rope_local_theta and no scaling when the config has
// a local base (ModelConfig::LayerUsesLocalRope), else the same.
std::vector<float> RopeInvFreq(const model::ModelConfig& config, bool local = false);

}  // namespace astr
