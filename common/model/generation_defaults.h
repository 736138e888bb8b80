// A model's recommended sampling defaults: what its authors ship in generation_config.json (Hugging
// Face folders) or in the GGUF `general.sampling.*` keys (llama.cpp's converter writes them). The
// scheduler serves them as the defaults of requests that leave a field unset (vLLM's
// `--generation-config auto`); a request's own value always wins.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/base/status.h"

namespace astr::model {

struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<int32_t> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<int32_t> penalty_window;  // GGUF general.sampling.penalty_last_n
  std::optional<int32_t> max_tokens;      // generation_config.json max_new_tokens
  std::string source;                     // the file they came from; empty when none was found

  bool empty() const {
    return !temperature && !top_k && !top_p && !min_p && !repetition_penalty && !penalty_window &&
           !max_tokens;
  }
  // "temperature=0.6 top_p=0.95 (from /m/generation_config.json)", or "none".
  std::string Describe() const;
};

// The defaults of the model at `path`: a Hugging Face folder (or a file in one) reads
// generation_config.json next to it; a .gguf file reads its general.sampling.* keys; a .json file
// is read as a generation_config.json. No file or no keys: empty defaults. A value outside the
// range the sampler accepts (temperature < 0, top_p outside (0, 1], ...) is INVALID_ARGUMENT naming
// the file and key, so that a bad file is refused at startup rather than failing every request.
StatusOr<GenerationDefaults> LoadGenerationDefaults(const std::string& path);

// generation_config.json text (the keys above; others such as eos_token_id are ignored).
// `origin` names the text in errors.
StatusOr<GenerationDefaults> ParseGenerationConfigJson(const std::string& text,
                                                       const std::string& origin);

}  // namespace astr::model
