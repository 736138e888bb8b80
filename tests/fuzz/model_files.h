// Model files for the targets that fuzz them. A tiny llama checkpoint in Hugging Face form
// (safetensors_fuzz, safetensors_index_fuzz fuzz one file of its folder, and the rest of the folder
// is this valid model, so that a fuzzed file that parses goes on through ModelFile's checks), and
// opening a model the way a worker does.
#pragma once

#include <string>
#include <vector>

#include "common/model/safetensors.h"

namespace astr::fuzz {

// config.json of the tiny model: hidden 8, 1 layer, 2 heads of 4, vocab 16, untied lm_head.
std::string TinyConfigJson();
// Its weights under their Hugging Face names, f32, every value 0.5.
std::vector<model::SafetensorsTensorData> TinyWeights();
// Opens the model at `path` (a .gguf file or a model folder) as a worker would, validates it and
// loads every weight it expects.
void OpenAndLoadModel(const std::string& path);

}  // namespace astr::fuzz
