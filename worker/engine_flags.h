// Flags shared by the tools that build an engine in-process (`astr run`, `astr-bench`): the
// sampling parameters and the backend / engine sizes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/base/flags.h"
#include "common/model/model_file.h"
#include "worker/backend.h"
#include "worker/engine.h"
#include "worker/sampler.h"

namespace astr {

struct SamplingFlags {
  int64_t max_tokens = 32;
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
  int64_t penalty_window = 0;
  int64_t seed = 0;
  std::string stop_token_ids;
  std::string logit_bias;
  bool ignore_eos = false;
  int64_t min_tokens = 0;
  int64_t logprobs = 0;
  std::string logprobs_mode = "raw";

  void Register(FlagSet* fs);
  // Validated parameters; EOS ids come from the model.
  StatusOr<SamplingParams> ToParams(const model::ModelFile& file) const;
  // The flags parsed (ranges, --stop-token-ids, --logit-bias, --logprobs-mode) without a model:
  // no EOS ids and no vocabulary check. For clients whose server validates against its model.
  StatusOr<SamplingParams> ToParamsWithoutModel() const;
};

struct EngineFlags {
  int64_t threads = 0;
  std::string dtype = "bf16";
  std::string backend;  // "" = $ASTR_BACKEND, else auto
  std::string cuda_graphs = "on";
  std::string cuda_sampling = "on";
  int64_t page_size = 16;
  int64_t num_pages = 0;
  int64_t kv_cache_mb = 1024;
  int64_t max_batch_tokens = 2048;
  int64_t max_running = 64;
  int64_t prefill_chunk = 512;
  bool prefix_cache = false;

  // Every flag below.
  void Register(FlagSet* fs);
  // Only the backend's: --threads, --dtype, --page-size, --num-pages, --kv-cache-mb,
  // --max-batch-tokens (astr-worker, whose scheduler does the engine's planning).
  void RegisterBackend(FlagSet* fs);
  // Each size in range; the error names the flag.
  Status Validate() const;
  BackendOptions BackendOpts() const;
  EngineOptions EngineOpts() const;
  StatusOr<std::unique_ptr<Backend>> CreateBackend(const model::ModelFile& file) const;
};

}  // namespace astr
