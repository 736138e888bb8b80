#include "worker/step_sampling.h"

#include <chrono>

#include "common/base/clock.h"

namespace astr {

StepSampling::StepSampling(const Backend& backend) {
  if (!backend.samples_on_device()) {
    logits_.resize(static_cast<size_t>(backend.max_sample_rows() * backend.config().vocab_size));
  }
}

Status StepSampling::Run(Backend& backend, const StepBatch& batch,
                         std::span<const SequenceSampler* const> samplers,
                         std::span<SampleResult> results, int64_t* forward_ns, int64_t* sample_ns) {
  if (samplers.size() != batch.sample_rows.size() || results.size() < samplers.size()) {
    return InternalError("step sampling: " + std::to_string(samplers.size()) + " samplers for " +
                         std::to_string(batch.sample_rows.size()) + " sample rows");
  }
  const auto start = std::chrono::steady_clock::now();
  if (backend.samples_on_device()) {
    ASTR_RETURN_IF_ERROR(backend.ForwardSample(batch, samplers, results));
    if (forward_ns != nullptr) *forward_ns = NanosSince(start);
    if (sample_ns != nullptr) *sample_ns = 0;
    return OkStatus();
  }
  ASTR_RETURN_IF_ERROR(backend.Forward(batch, logits_.data()));
  if (forward_ns != nullptr) *forward_ns = NanosSince(start);
  const auto sample_start = std::chrono::steady_clock::now();
  const int64_t vocab = backend.config().vocab_size;
  for (size_t i = 0; i < samplers.size(); ++i) {
    results[i] =
        Sample(logits_.data() + static_cast<int64_t>(i) * vocab, vocab, *samplers[i], scratch_);
  }
  if (sample_ns != nullptr) *sample_ns = NanosSince(sample_start);
  return OkStatus();
}

}  // namespace astr
