#include "worker/step_sampling.h"

#include <algorithm>
#include <chrono>

#include "common/base/clock.h"

namespace astr {
namespace {

// The device sampler returns no sampling mask: a step where a row asks for one draws on the host.
bool AnyWantsMask(std::span<const SequenceSampler* const> samplers) {
  for (const SequenceSampler* s : samplers) {
    if (s->params().return_sampling_mask) return true;
  }
  return false;
}

}  // namespace

StepSampling::StepSampling(const Backend& backend) {
  if (!backend.samples_on_device()) {
    logits_.resize(static_cast<size_t>(backend.max_sample_rows() * backend.config().vocab_size));
  }
}

Status StepSampling::Run(Backend& backend, const StepBatch& batch,
                         std::span<const SequenceSampler* const> samplers,
                         std::span<const RowScore> scores, std::span<SampleResult> results,
                         int64_t* forward_ns, int64_t* sample_ns,
                         std::span<const uint32_t* const> masks,
                         const std::function<Status()>& before_draws) {
  const size_t rows = samplers.size() + scores.size();
  if (rows != batch.sample_rows.size() || results.size() < rows) {
    return InternalError("step sampling: " + std::to_string(samplers.size()) + " samplers and " +
                         std::to_string(scores.size()) + " scores for " +
                         std::to_string(batch.sample_rows.size()) + " logits rows");
  }
  if (!masks.empty() && masks.size() != samplers.size()) {
    return InternalError("step sampling: " + std::to_string(masks.size()) + " masks for " +
                         std::to_string(samplers.size()) + " samplers");
  }
  const auto start = std::chrono::steady_clock::now();
  if (backend.samples_on_device() && scores.empty() && !AnyWantsMask(samplers)) {
    // Masks go to the device with the step's other sampling edits (one upload).
    ASTR_RETURN_IF_ERROR(backend.ForwardSample(batch, samplers, results, masks, before_draws));
    if (forward_ns != nullptr) *forward_ns = NanosSince(start);
    if (sample_ns != nullptr) *sample_ns = 0;
    return OkStatus();
  }
  const int64_t vocab = backend.config().vocab_size;
  // Grows once per larger scoring (or sampling-mask) step on a device-sampling backend; never on
  // the host path, whose buffer holds max_sample_rows rows from the start.
  const size_t need = rows * static_cast<size_t>(vocab);
  if (logits_.size() < need) logits_.resize(need);
  ASTR_RETURN_IF_ERROR(backend.Forward(batch, logits_.data()));
  if (forward_ns != nullptr) *forward_ns = NanosSince(start);
  if (before_draws) ASTR_RETURN_IF_ERROR(before_draws());
  const auto sample_start = std::chrono::steady_clock::now();
  // Rows split in contiguous ranges over the backend's idle host threads (a greedy or logprob
  // pass over a 262144-token row takes ~0.1-1 ms); the same draws whatever the split.
  const int threads = samplers.size() > 1 ? std::max(1, backend.host_threads()) : 1;
  if (scratch_.size() < static_cast<size_t>(threads)) scratch_.resize(threads);
  auto draw = [&](int thread, int num_threads) {
    const size_t n = samplers.size();
    const size_t begin = n * thread / num_threads, end = n * (thread + 1) / num_threads;
    for (size_t i = begin; i < end; ++i) {
      results[i] = Sample(logits_.data() + static_cast<int64_t>(i) * vocab, vocab, *samplers[i],
                          scratch_[thread], masks.empty() ? nullptr : masks[i]);
    }
  };
  if (threads > 1) {
    backend.RunOnHostThreads(draw);
  } else {
    draw(0, 1);
  }
  for (size_t j = 0; j < scores.size(); ++j) {  // in order: rows of one scorer follow its context
    const size_t row = samplers.size() + j;
    results[row] = scores[j].scorer->Score(logits_.data() + static_cast<int64_t>(row) * vocab,
                                           vocab, scores[j].token);
  }
  if (sample_ns != nullptr) *sample_ns = NanosSince(sample_start);
  return OkStatus();
}

}  // namespace astr
