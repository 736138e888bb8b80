// A minimal driver for model tests: runs sequences through a Backend step by step with greedy
// picking, following an explicit schedule (when each sequence joins, how its prompt is chunked),
// and records the logits of every sampled step. It uses only the public StepBatch contract.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/backend.h"

namespace astr::testing {

struct DrivenSequence {
  std::vector<int32_t> prompt;
  int64_t join_step = 0;    // step at which the sequence enters the batch
  int64_t chunk = 1 << 30;  // most prompt tokens per step
  int64_t max_new = 8;      // tokens to generate greedily
  // Outputs.
  std::vector<int32_t> generated;
  std::vector<std::vector<float>> logits;  // one row per generated token
};

// Runs all sequences to completion. Pages are handed out from a shuffled permutation of the pool,
// so sequences hold non-contiguous pages.
Status DriveGreedy(Backend& backend, std::vector<DrivenSequence>& seqs, uint32_t page_seed = 1);

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace astr::testing
