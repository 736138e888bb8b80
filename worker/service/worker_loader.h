// Everything astr-worker does before it serves: open the model, hash its files, find its EOS ids,
// build the step runner the --backend flag names (loading weights and allocating the KV pool for
// cpu; neither for instant), and describe the result as the static part of InfoResponse.
#pragma once

#include <memory>
#include <string>

#include "astr/v1/worker.pb.h"
#include "common/base/status.h"
#include "worker/backend.h"
#include "worker/service/executor.h"
#include "worker/service/weight_updates.h"

namespace astr {

struct WorkerConfig {
  std::string model_path;       // .gguf file or Hugging Face folder
  std::string backend = "cpu";  // "cpu" or "instant"
  // Threads, weight dtype, page size, num_pages / kv_cache_bytes, max_batch_tokens, and
  // max_sample_rows = the most entries of one step (Info.max_batch).
  BackendOptions backend_options;
};

struct LoadedWorker {
  // Model identity, dims, pool and limits; the live counters are left 0.
  v1::InfoResponse info;
  std::unique_ptr<WorkerExecutor> executor;
  // The weight-update state over the loaded checkpoint.
  std::unique_ptr<WeightUpdates> updates;
};

// Logs one INFO line per stage (open, hash, weights, pool). Errors name the flag or file.
StatusOr<LoadedWorker> LoadWorker(const WorkerConfig& config);

// The backends LoadWorker knows, for --help and error messages.
inline constexpr const char* kWorkerBackends = "auto, cpu, cuda or instant";
// OK if `value` is one of kWorkerBackends; else INVALID_ARGUMENT naming `source`.
Status CheckWorkerBackend(const std::string& value, const std::string& source);

}  // namespace astr
