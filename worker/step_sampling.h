// One step's forward pass and draws: on the backend's device where it samples there
// (Backend::samples_on_device), else the logits come to the host and Sample() draws each row. The
// offline engine and the worker's step runner both go through this, so they cannot disagree about
// which path a backend takes.
//
// A step may also score rows (prompt scoring): their logits always come to the host, where a
// PromptScorer turns each into the logprob of a given token. A step that scores any row therefore
// takes the host path for its draws too, on every backend. So does a step with a row whose params
// ask for the sampling mask (SamplingParams.return_sampling_mask): the device sampler does not
// produce it, so such a step brings its logits to the host. Constraint masks (structured outputs)
// are applied where the draws happen: on the host, or on the device with the sampling kernel.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/base/status.h"
#include "worker/backend.h"
#include "worker/sampler.h"

namespace astr {

// A logits row scored rather than drawn from: the logprob of `token` under `scorer`, which then
// moves past the token (PromptScorer::Score).
struct RowScore {
  PromptScorer* scorer = nullptr;
  int32_t token = 0;
};

class StepSampling {
 public:
  // Sizes the host logits buffer (only for backends that sample on the host; a device-sampling
  // backend gets one at its first step that scores rows).
  explicit StepSampling(const Backend& backend);

  // The logits rows of `batch` (StepBatch::sample_rows) are the draws, then the scores:
  // samplers[i] is the state of row i and results[i] gets its draw; scores[j] is row
  // samplers.size() + j and results[samplers.size() + j] gets its score. Scores are computed in
  // order, so several rows of one scorer follow its context. The times of the forward pass and
  // the draws go to *forward_ns / *sample_ns when non-null (device sampling counts as forward
  // time: it runs in the same device stream). masks[i], when `masks` is not empty, is row i's
  // constraint mask (Sample's `allowed`) or null (a device-sampling backend uploads them with the
  // step's sampling edits). `before_draws` runs after the forward pass, before the draws read
  // `masks` (which it may change through the span's storage).
  Status Run(Backend& backend, const StepBatch& batch,
             std::span<const SequenceSampler* const> samplers, std::span<const RowScore> scores,
             std::span<SampleResult> results, int64_t* forward_ns = nullptr,
             int64_t* sample_ns = nullptr, std::span<const uint32_t* const> masks = {},
             const std::function<Status()>& before_draws = {});

 private:
  std::vector<float> logits_;  // [logits rows, vocab] host path only
  // One per host thread of the backend (Backend::host_threads): the draws of a step's rows are
  // spread over them (each row's draw depends on its own state only).
  std::vector<SamplerScratch> scratch_;
};

}  // namespace astr
