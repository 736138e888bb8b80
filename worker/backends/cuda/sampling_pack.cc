#include "worker/backends/cuda/sampling_pack.h"

#include <limits>

namespace astr::cuda {

void PackSamplingRow(const SequenceSampler& state, int64_t vocab, SamplingBatch* batch) {
  const SamplingParams& p = state.params();
  DeviceSamplingParams d{};
  d.greedy = p.temperature < kGreedyTemperature ? 1 : 0;
  d.temperature = p.temperature;
  d.top_k = p.top_k > 0 && p.top_k < vocab ? p.top_k : 0;
  d.top_p = p.top_p;
  d.min_p = p.min_p;
  d.repetition_penalty = p.repetition_penalty;
  d.frequency_penalty = p.frequency_penalty;
  d.presence_penalty = p.presence_penalty;
  d.seed = p.seed;
  d.sequence = state.sequence();
  d.token_index = static_cast<uint64_t>(state.num_generated());
  d.num_top = p.logprobs;
  d.want_logprob = p.return_logprob || p.logprobs > 0 ? 1 : 0;
  d.processed_logprobs = p.logprobs_mode == LogprobsMode::kProcessed ? 1 : 0;

  d.bias_begin = static_cast<int32_t>(batch->bias_ids.size());
  for (const auto& [id, bias] : p.logit_bias) {
    batch->bias_ids.push_back(id);
    batch->bias_values.push_back(bias);
  }
  if (state.num_generated() < p.min_tokens) {
    constexpr float kMask = -std::numeric_limits<float>::infinity();
    for (int32_t id : p.stop_token_ids) {
      batch->bias_ids.push_back(id);
      batch->bias_values.push_back(kMask);
    }
    if (!p.ignore_eos) {
      for (int32_t id : p.eos_token_ids) {
        batch->bias_ids.push_back(id);
        batch->bias_values.push_back(kMask);
      }
    }
  }
  d.bias_end = static_cast<int32_t>(batch->bias_ids.size());

  d.penalty_begin = static_cast<int32_t>(batch->penalty_ids.size());
  state.counts().ForEach([batch](const TokenCounts::Entry& e) {
    batch->penalty_ids.push_back(e.id);
    batch->penalty_generated.push_back(e.generated);
  });
  d.penalty_end = static_cast<int32_t>(batch->penalty_ids.size());
  batch->params.push_back(d);
}

}  // namespace astr::cuda
