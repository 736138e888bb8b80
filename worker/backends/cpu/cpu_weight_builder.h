// The CPU backend's weight sets, and its WeightBuilder (Backend::BeginWeights): a pushed update
// is packed group by group (CpuWeightGroups) on a thread of its own while the rest of the update
// is still arriving, into the storage of a spare set where one is kept, and each group's received
// bytes go back to ReceiveBuffers as soon as it is packed.
#pragma once

#include <functional>
#include <memory>

#include "common/model/model_config.h"
#include "worker/backend.h"
#include "worker/backends/cpu/cpu_weights.h"

namespace astr {

struct CpuWeightSet final : WeightSet {
  std::shared_ptr<CpuWeights> weights;
  size_t bytes() const override { return weights == nullptr ? 0 : weights->bytes(); }
};

// `served`: the set served when the build begins (tensors the update does not carry are copied
// from it; it is kept alive until the build ends). `spare`: storage to pack into (may be null).
// `give_back` receives the storage a build leaves unused (the spare's, or a failed build's).
std::unique_ptr<WeightBuilder> MakeCpuWeightBuilder(
    const model::ModelConfig& config, cpu::WeightType type, int threads,
    std::shared_ptr<const CpuWeights> served, std::unique_ptr<CpuWeights> spare,
    std::function<void(std::unique_ptr<CpuWeights>)> give_back);

}  // namespace astr
