// CudaGraphContext: one CUDA graph per decode batch-size bucket (powers of two up to the max batch,
// plus the max itself). A decode batch is padded up to its bucket. The first step at a bucket runs
// eagerly (the warm-up and live run: lazy initialisation in cuBLASLt and the kernels happens
// outside any capture), then the same enqueue is captured and instantiated; later steps at that
// bucket replay the graph. Everything the graph reads lives at a stable address in the
// InferenceWorkspace and is rewritten in place before each replay. Batches larger than the largest
// bucket, and every prefill step, run eagerly. A bucket whose capture fails (logged) runs eagerly
// from then on.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "common/base/status.h"

namespace astr::cuda {

// 1, 2, 4, ... below max_batch, then max_batch (max_batch >= 1).
std::vector<int> GraphBuckets(int max_batch);
// The smallest bucket >= batch, or -1 if batch exceeds them all (or batch < 1).
int BucketFor(int batch, const std::vector<int>& buckets);

class CudaGraphContext {
 public:
  CudaGraphContext(std::vector<int> buckets, bool enabled);
  ~CudaGraphContext();
  CudaGraphContext(const CudaGraphContext&) = delete;
  CudaGraphContext& operator=(const CudaGraphContext&) = delete;

  bool enabled() const { return enabled_; }
  const std::vector<int>& buckets() const { return buckets_; }
  // Runs `enqueue` (which enqueues the forward pass of `bucket` rows on `stream`) for the bucket:
  // by graph replay once captured, else eagerly and then captures it. `enqueue` must be a pure
  // function of the workspace's current contents (no host decisions that change between steps).
  Status Run(int bucket, cudaStream_t stream, const std::function<Status(cudaStream_t)>& enqueue);
  int captured() const;  // graphs instantiated so far
  int64_t replays() const { return replays_; }

 private:
  std::vector<int> buckets_;
  bool enabled_;
  std::vector<cudaGraphExec_t> execs_;  // per bucket index; null until captured
  std::vector<char> failed_;            // per bucket index: capture failed, run eagerly
  int64_t replays_ = 0;
};

}  // namespace astr::cuda
