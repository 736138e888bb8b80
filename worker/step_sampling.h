// One step's forward pass and draws: on the backend's device where it samples there
// (Backend::samples_on_device), else the logits come to the host and Sample() draws each row. The
// offline engine and the worker's step runner both go through this, so they cannot disagree about
// which path a backend takes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/base/status.h"
#include "worker/backend.h"
#include "worker/sampler.h"

namespace astr {

class StepSampling {
 public:
  // Sizes the host logits buffer (only for backends that sample on the host).
  explicit StepSampling(const Backend& backend);

  // samplers[i] is the state of sample row i of `batch`; results[i] gets its draw. The times of the
  // forward pass and the draws go to *forward_ns / *sample_ns when non-null (device sampling counts
  // as forward time: it runs in the same device stream).
  Status Run(Backend& backend, const StepBatch& batch,
             std::span<const SequenceSampler* const> samplers, std::span<SampleResult> results,
             int64_t* forward_ns = nullptr, int64_t* sample_ns = nullptr);

 private:
  std::vector<float> logits_;  // [max_sample_rows, vocab] host path only
  SamplerScratch scratch_;
};

}  // namespace astr
