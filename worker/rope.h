// RoPE inverse frequencies for a model config, scaling included (linear, llama3, LongRoPE, YaRN).
#pragma once

#include <cstdint>
#include <vector>

#include "common/model/model_config.h"

namespace astr {

// inv_freq[i] for i < rope_dim / 2: theta^(-2i / rope_dim), then the config's rope scaling. With
// `local`, those of the sliding-window layers: rope_local_theta and no scaling when the config has
// a local base (ModelConfig::LayerUsesLocalRope), else the same.
// LongRoPE: the short factors' frequencies.
std::vector<float> RopeInvFreq(const model::ModelConfig& config, bool local = false);

// LongRoPE (RopeScaling::kLongRope; empty / 1 / false otherwise, and for layers with their own
// local base): the long factors' frequencies, the cos / sin factor, and which rows of a step take
// the long ones: every row of a batch entry whose sequence is computed with them (StepBatch::
// rope_long: it started holding more tokens than original_max_position), or whose last position
// reaches original_max_position. transformers picks the set by the sequence length of each forward
// pass, and Phi-3's generate recomputes the whole sequence with the long set when it grows past
// the original context; the scheduler does the same by restarting such a sequence
// (InfoResponse.longrope_original_context), so the second rule only serves plans that do not.
// Entry b owns rows [qo_indptr[b], qo_indptr[b+1]).
std::vector<float> RopeInvFreqLong(const model::ModelConfig& config, bool local = false);
// The factor on cos / sin: LongRoPE's and YaRN's attention_factor, else 1.
float RopeCosSinScale(const model::ModelConfig& config, bool local = false);
bool RopeUsesLongFactors(const model::ModelConfig& config);
// original_max_position for a LongRoPE model, else 0 (InfoResponse.longrope_original_context).
int32_t LongRopeOriginalContext(const model::ModelConfig& config);
// Fills use_long[row] (rows = qo_indptr.back()) with 1 / 0; false when no row takes them.
template <typename T>
bool RopeLongRows(const model::ModelConfig& config, const std::vector<int32_t>& positions,
                  const std::vector<int32_t>& qo_indptr, const std::vector<uint8_t>& entry_long,
                  T* use_long) {
  bool any = false;
  for (size_t b = 0; b + 1 < qo_indptr.size(); ++b) {
    const int32_t begin = qo_indptr[b], end = qo_indptr[b + 1];
    const bool lng = RopeUsesLongFactors(config) && end > begin &&
                     ((b < entry_long.size() && entry_long[b] != 0) ||
                      positions[end - 1] >= config.rope_scaling.original_max_position);
    any = any || lng;
    for (int32_t r = begin; r < end; ++r) use_long[r] = lng ? 1 : 0;
  }
  return any;
}

}  // namespace astr
