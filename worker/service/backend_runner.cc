// StepRunner over a Backend: the forward pass writes the logits of every sample row into one
// buffer sized once for the largest step, then each row is sampled on this thread with its
// sequence's sampler and a scratch reused across steps.
#include "worker/service/step_runner.h"

namespace astr {
namespace {

class BackendRunner final : public StepRunner {
 public:
  BackendRunner(std::unique_ptr<Backend> backend, std::string dtype)
      : backend_(std::move(backend)), dtype_(std::move(dtype)) {
    limits_ = {.num_pages = backend_->num_pages(),
               .page_size = backend_->page_size(),
               .max_batch_tokens = backend_->max_batch_tokens(),
               .max_sample_rows = backend_->max_sample_rows()};
    logits_.resize(backend_->max_sample_rows() * backend_->config().vocab_size);
  }

  std::string name() const override { return backend_->name(); }
  std::string dtype() const override { return dtype_; }
  const ModelConfig& config() const override { return backend_->config(); }
  const RunnerLimits& limits() const override { return limits_; }

  Status Run(const StepBatch& batch, std::span<const SampleRequest> samples,
             std::span<SampleResult> out, RunTimings* timings) override {
    if (samples.size() != batch.sample_rows.size() || out.size() < samples.size()) {
      return InternalError("step runner: " + std::to_string(samples.size()) + " samples for " +
                           std::to_string(batch.sample_rows.size()) + " sample rows");
    }
    const auto forward_start = std::chrono::steady_clock::now();
    ASTR_RETURN_IF_ERROR(backend_->Forward(batch, logits_.data()));
    timings->forward_ns = NanosSince(forward_start);
    const auto sample_start = std::chrono::steady_clock::now();
    const int64_t vocab = backend_->config().vocab_size;
    for (size_t i = 0; i < samples.size(); ++i) {
      out[i] = Sample(logits_.data() + static_cast<int64_t>(i) * vocab, vocab, *samples[i].sampler,
                      scratch_);
    }
    timings->sample_ns = NanosSince(sample_start);
    return OkStatus();
  }

 private:
  std::unique_ptr<Backend> backend_;
  std::string dtype_;
  RunnerLimits limits_;
  std::vector<float> logits_;  // [max_sample_rows, vocab]
  SamplerScratch scratch_;
};

}  // namespace

std::unique_ptr<StepRunner> MakeBackendRunner(std::unique_ptr<Backend> backend, std::string dtype) {
  return std::make_unique<BackendRunner>(std::move(backend), std::move(dtype));
}

}  // namespace astr
