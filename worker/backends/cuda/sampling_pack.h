// Host side of device sampling: flattens one sequence's sampling state (worker/sampler.h) into the
// arrays LaunchSampling reads (kernels/cuda/sampling.h). Plain C++, unit-tested on the CPU.
#pragma once

#include <cstdint>

#include "kernels/cuda/sampling.h"
#include "worker/sampler.h"

namespace astr::cuda {

// Appends one sample row to `batch`: its DeviceSamplingParams and its sparse edits, exactly the
// edits the CPU's Sample() makes for `state` now (worker/sampler.cc ApplyBiasMaskPenalties):
//   - every logit_bias entry (finite, one per id);
//   - while num_generated < min_tokens: every stop id, and every EOS id unless ignore_eos, as -inf
//     (applied after the biases; a repeated id is harmless);
//   - one penalty entry per id with a non-zero count in the window (prompt + generated), with how
//     often it was generated (none when no penalty is on: the sampler keeps no counts then);
// and the RNG counter token_index = num_generated, sequence = state.sequence(). `vocab` maps
// top_k >= vocab to 0 (off), as the CPU does. Allocates only when the batch's vectors grow.
void PackSamplingRow(const SequenceSampler& state, int64_t vocab, SamplingBatch* batch);

}  // namespace astr::cuda
