// StepRunner over a Backend: the forward pass, one draw per sample row and one score per scored row
// through StepSampling (draws on the backend's device where it samples there and the step scores
// nothing, else on this thread with buffers reused across steps).
#include "worker/service/step_runner.h"
#include "worker/step_sampling.h"

namespace astr {
namespace {

class BackendRunner final : public StepRunner {
 public:
  BackendRunner(std::unique_ptr<Backend> backend, std::string dtype)
      : backend_(std::move(backend)), dtype_(std::move(dtype)) {
    limits_ = {.num_pages = backend_->num_pages(),
               .page_size = backend_->page_size(),
               .max_batch_tokens = backend_->max_batch_tokens(),
               .max_sample_rows = backend_->max_sample_rows(),
               .kv_window_tables = backend_->kv_window_tables(),
               .kv_window_tokens = backend_->kv_window_tokens()};
    samplers_.reserve(static_cast<size_t>(backend_->max_sample_rows()));
  }

  std::string name() const override { return backend_->name(); }
  std::string dtype() const override { return dtype_; }
  const model::ModelConfig& config() const override { return backend_->config(); }
  const RunnerLimits& limits() const override { return limits_; }

  Status Run(const StepBatch& batch, std::span<const SampleRequest> samples,
             std::span<const RowScore> scores, std::span<SampleResult> out, RunTimings* timings,
             const std::function<Status()>& before_draws, bool masks_coming) override {
    const size_t rows = samples.size() + scores.size();
    if (rows != batch.sample_rows.size() || out.size() < rows) {
      return InternalError("step runner: " + std::to_string(samples.size()) + " samples and " +
                           std::to_string(scores.size()) + " scores for " +
                           std::to_string(batch.sample_rows.size()) + " logits rows");
    }
    samplers_.clear();
    masks_.clear();
    bool masked = masks_coming;
    for (const SampleRequest& s : samples) {
      samplers_.push_back(s.sampler);
      masks_.push_back(s.allowed);
      masked = masked || s.allowed != nullptr;
    }
    // Masks that come late land in masks_ (which the draws read) once before_draws has run.
    std::function<Status()> hook;
    if (before_draws) {
      hook = [&] {
        ASTR_RETURN_IF_ERROR(before_draws());
        for (size_t i = 0; i < samples.size(); ++i) masks_[i] = samples[i].allowed;
        return OkStatus();
      };
    }
    return sampling_.Run(
        *backend_, batch, samplers_, scores, out.first(rows), &timings->forward_ns,
        &timings->sample_ns,
        masked ? std::span<const uint32_t* const>(masks_) : std::span<const uint32_t* const>(),
        hook);
  }

  StatusOr<std::unique_ptr<WeightSet>> PrepareWeights(const model::TensorSource& source) override {
    return backend_->PrepareWeights(source);
  }
  std::unique_ptr<WeightSet> SwapWeights(std::unique_ptr<WeightSet> set) override {
    return backend_->SwapWeights(std::move(set));
  }
  StatusOr<std::unique_ptr<WeightBuilder>> BeginWeights() override {
    return backend_->BeginWeights();
  }
  void RecycleWeights(std::unique_ptr<WeightSet> set) override {
    backend_->RecycleWeights(std::move(set));
  }
  StatusOr<MemoryChange> ReleaseMemory(MemoryTags tags, bool keep_weights) override {
    return backend_->ReleaseMemory(tags, keep_weights);
  }
  StatusOr<MemoryChange> ResumeMemory(MemoryTags tags) override {
    return backend_->ResumeMemory(tags);
  }
  StatusOr<std::unique_ptr<WeightReceiver>> JoinWeightGroup(const WeightGroupSpec& spec) override {
    return backend_->JoinWeightGroup(spec);
  }
  StatusOr<std::unique_ptr<IpcBuffer>> OpenIpcBuffer(const std::string& handle,
                                                     uint64_t bytes) override {
    return backend_->OpenIpcBuffer(handle, bytes);
  }

 private:
  std::unique_ptr<Backend> backend_;
  std::string dtype_;
  RunnerLimits limits_;
  StepSampling sampling_{*backend_};
  std::vector<const SequenceSampler*> samplers_;  // per sample row of the step
  std::vector<const uint32_t*> masks_;            // per sample row: its constraint mask or null
};

}  // namespace

std::unique_ptr<StepRunner> MakeBackendRunner(std::unique_ptr<Backend> backend, std::string dtype) {
  return std::make_unique<BackendRunner>(std::move(backend), std::move(dtype));
}

}  // namespace astr
