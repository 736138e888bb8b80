// What executes a validated step for the WorkerExecutor: the forward pass and the sampling. Two
// implementations, chosen once at start (--backend):
//   - the backend runner wraps a Backend (cpu): Forward into a logits buffer, then Sample() each
//     sample row with its sequence's SequenceSampler and Score() each scored row with its
//     PromptScorer (StepSampling);
//   - the instant runner (benchmarks only) computes nothing: each sample row gets a deterministic
//     ordinary token (never special, never an EOS or stop id of its sequence) with logprob 0, and
//     each scored row logprob 0, so that the scheduler's own cost per step can be measured against
//     a worker that answers at once.
// The executor validates plans and keeps sequence state identically for both.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/model_config.h"
#include "worker/backend.h"
#include "worker/sampler.h"
#include "worker/step_batch.h"
#include "worker/step_sampling.h"

namespace astr {

// The pool and step limits a runner serves; the executor validates plans against them.
struct RunnerLimits {
  int64_t num_pages = 0;
  int64_t page_size = 0;
  int64_t max_batch_tokens = 0;  // most rows (T) of one step
  int64_t max_sample_rows = 0;   // most sample rows (S) of one step
  // Sliding-window page groups (Backend::kv_window_tables): window ids per token page, and the
  // window their pages serve (0 and 0 without).
  int64_t kv_window_tables = 0;
  int64_t kv_window_tokens = 0;
};

// One sample row of a step: whose token is drawn, at which position.
struct SampleRequest {
  uint64_t live_id = 0;
  int64_t position = 0;  // position the drawn token will take in its sequence
  const SequenceSampler* sampler = nullptr;
  // The constraint's token mask of this draw (StepEntry.allowed_tokens, validated), or null.
  const uint32_t* allowed = nullptr;
};

// Where the time of one Run went.
struct RunTimings {
  int64_t forward_ns = 0;
  int64_t sample_ns = 0;
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // Backend name reported by Info: "cpu", "instant".
  virtual std::string name() const = 0;
  // Weight dtype the runner computes with ("bf16", "f32"; "none" when it computes nothing).
  virtual std::string dtype() const = 0;
  virtual const model::ModelConfig& config() const = 0;
  virtual const RunnerLimits& limits() const = 0;
  // Runs `batch` (already valid for limits()), draws one token per sample row and scores the
  // scored rows: samples[i] belongs to batch.sample_rows[i] and its result goes to out[i];
  // scores[j] to batch.sample_rows[samples.size() + j] and out[samples.size() + j]. A failure
  // here is an internal error: the caller's sequence state no longer matches the pool.
  // `before_draws`, when set, runs after the forward pass and before any draw (its error ends the
  // step): it may set samples[i].allowed (masks that come after the plan), which the draws then
  // read; `masks_coming` says it will (the draws then read masks even while none is set yet).
  virtual Status Run(const StepBatch& batch, std::span<const SampleRequest> samples,
                     std::span<const RowScore> scores, std::span<SampleResult> out,
                     RunTimings* timings, const std::function<Status()>& before_draws = {},
                     bool masks_coming = false) = 0;
  // Weight updates, as Backend::PrepareWeights / SwapWeights (the instant runner holds no weights:
  // its sets are empty and a swap changes nothing but the version the executor reports). A runner
  // that cannot update says so in PrepareWeights.
  virtual StatusOr<std::unique_ptr<WeightSet>> PrepareWeights(
      const model::TensorSource& /*source*/) {
    return UnimplementedError("the " + name() + " runner cannot update its weights");
  }
  virtual std::unique_ptr<WeightSet> SwapWeights(std::unique_ptr<WeightSet> set) { return set; }
  // Backend::BeginWeights / RecycleWeights.
  virtual StatusOr<std::unique_ptr<WeightBuilder>> BeginWeights() {
    return UnimplementedError("the " + name() + " runner builds weights only from a whole source");
  }
  virtual void RecycleWeights(std::unique_ptr<WeightSet> set) { set.reset(); }
  // Backend::ReleaseMemory / ResumeMemory.
  virtual StatusOr<MemoryChange> ReleaseMemory(MemoryTags, bool /*keep_weights*/) {
    return FailedPreconditionError("the " + name() +
                                   " runner has no device memory to release (it needs the cuda "
                                   "backend)");
  }
  virtual StatusOr<MemoryChange> ResumeMemory(MemoryTags) {
    return FailedPreconditionError("the " + name() +
                                   " runner has no device memory to resume (it needs the cuda "
                                   "backend)");
  }
  // Backend::JoinWeightGroup (runners without a device say they cannot).
  virtual StatusOr<std::unique_ptr<WeightReceiver>> JoinWeightGroup(const WeightGroupSpec&) {
    return FailedPreconditionError("the " + name() +
                                   " runner cannot join an NCCL weight-update group (it needs the "
                                   "cuda backend)");
  }
  // Backend::OpenIpcBuffer (runners without a device say they cannot).
  virtual StatusOr<std::unique_ptr<IpcBuffer>> OpenIpcBuffer(const std::string&, uint64_t) {
    return FailedPreconditionError("the " + name() +
                                   " runner cannot open CUDA IPC buffers (it needs the cuda "
                                   "backend)");
  }
};

// The runner over a real backend; `dtype` is what Info reports.
std::unique_ptr<StepRunner> MakeBackendRunner(std::unique_ptr<Backend> backend, std::string dtype);

// The benchmark runner. `ordinary_ids` are the token ids it may return (non-empty, each in
// [0, config.vocab_size)); per row it picks one from (live_id, position) and skips the sequence's
// EOS and stop ids. INVALID_ARGUMENT when `ordinary_ids` is empty or holds an id out of range.
StatusOr<std::unique_ptr<StepRunner>> MakeInstantRunner(model::ModelConfig config,
                                                        RunnerLimits limits,
                                                        std::vector<int32_t> ordinary_ids);

}  // namespace astr
