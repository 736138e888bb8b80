// The benchmark-only StepRunner: no weights, no KV pool, no forward pass. It answers each sample
// row at once with a token that depends only on (live_id, position), so runs are reproducible, and
// that is never one of the sequence's EOS or stop ids, so sequences run to max_tokens and the
// scheduler's batches stay full.
#include <algorithm>
#include <chrono>

#include "common/base/clock.h"
#include "worker/service/step_runner.h"

namespace astr {
namespace {

// splitmix64's finalizer: spreads consecutive positions over the whole id list.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

bool Contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// The instant runner computes with no weights, so an update has nothing to hold.
struct NoWeights final : WeightSet {
  size_t bytes() const override { return 0; }
};

class InstantRunner final : public StepRunner {
 public:
  InstantRunner(model::ModelConfig config, RunnerLimits limits, std::vector<int32_t> ordinary_ids)
      : config_(std::move(config)), limits_(limits), ordinary_(std::move(ordinary_ids)) {}

  std::string name() const override { return "instant"; }
  std::string dtype() const override { return "none"; }
  const model::ModelConfig& config() const override { return config_; }
  const RunnerLimits& limits() const override { return limits_; }

  StatusOr<std::unique_ptr<WeightSet>> PrepareWeights(
      const model::TensorSource& /*source*/) override {
    return std::unique_ptr<WeightSet>(new NoWeights());
  }
  std::unique_ptr<WeightSet> SwapWeights(std::unique_ptr<WeightSet> set) override { return set; }

  Status Run(const StepBatch& batch, std::span<const SampleRequest> samples,
             std::span<const RowScore> scores, std::span<SampleResult> out, RunTimings* timings,
             const std::function<Status()>& before_draws, bool /*masks_coming*/) override {
    if (before_draws) ASTR_RETURN_IF_ERROR(before_draws());
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < samples.size(); ++i) {
      out[i] = SampleResult{};
      out[i].token = Pick(samples[i]);
      // Its draw is certain: the sampling mask is the token alone.
      if (samples[i].sampler->params().return_sampling_mask) {
        out[i].mask.count = 1;
        out[i].mask.ids.assign(1, out[i].token);
      }
    }
    for (size_t j = 0; j < scores.size(); ++j) {
      out[samples.size() + j] = SampleResult{};
      out[samples.size() + j].token = scores[j].token;
    }
    timings->forward_ns = 0;
    timings->sample_ns = NanosSince(start);
    return OkStatus();
  }

 private:
  static bool Allowed(const SampleRequest& s, int32_t id) {
    return s.allowed == nullptr || (s.allowed[id / 32] >> (id % 32) & 1u) != 0;
  }

  int32_t Pick(const SampleRequest& s) const {
    const SamplingParams& p = s.sampler->params();
    const size_t n = ordinary_.size();
    const size_t first = Mix(s.live_id * 0x100000001B3ULL + static_cast<uint64_t>(s.position)) % n;
    for (size_t k = 0; k < n; ++k) {
      const int32_t id = ordinary_[(first + k) % n];
      if (!Contains(p.eos_token_ids, id) && !Contains(p.stop_token_ids, id) && Allowed(s, id)) {
        return id;
      }
    }
    if (s.allowed != nullptr) {  // a constraint: its first allowed token (a stop id at its end)
      for (int32_t id = 0; id < config_.vocab_size; ++id) {
        if (Allowed(s, id)) return id;
      }
    }
    return ordinary_[first];  // every ordinary id is a stop id of this sequence: nothing better
  }

  model::ModelConfig config_;
  RunnerLimits limits_;
  std::vector<int32_t> ordinary_;
};

}  // namespace

StatusOr<std::unique_ptr<StepRunner>> MakeInstantRunner(model::ModelConfig config,
                                                        RunnerLimits limits,
                                                        std::vector<int32_t> ordinary_ids) {
  if (ordinary_ids.empty()) return InvalidArgumentError("instant backend: no ordinary token ids");
  for (int32_t id : ordinary_ids) {
    if (id < 0 || id >= config.vocab_size) {
      return InvalidArgumentError("instant backend: token id " + std::to_string(id) +
                                  " outside the vocabulary of " +
                                  std::to_string(config.vocab_size));
    }
  }
  return std::unique_ptr<StepRunner>(
      new InstantRunner(std::move(config), limits, std::move(ordinary_ids)));
}

}  // namespace astr
