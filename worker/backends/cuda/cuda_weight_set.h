// A weight update for the CUDA backend, held on the host in the exact device layout of the served
// weights, and swapped with them in place.
//
// In place means every device buffer keeps its address: the captured CUDA graphs (which hold the
// weights' addresses as kernel arguments) stay valid and are not re-captured, and nothing is
// allocated on the device, so an update needs no GPU memory beyond the served weights.
//
// Cost of a swap, for W = the weights' bytes (CudaWeights::bytes() less inv_freq): W bytes device
// to host (the served weights, into the set, which then holds them for a rollback) and W bytes host
// to device (the new weights), through pinned staging chunks, two in flight; plus 2 W bytes of host
// memcpy between the set's pageable buffers and the staging. The stream is synchronized at the end.
// Host memory: W for the set plus 4 staging chunks of at most kCudaSwapChunkBytes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/model_config.h"
#include "worker/backend.h"
#include "worker/backends/cuda/cuda_weights.h"
#include "worker/backends/cuda/device_memory.h"

namespace astr::cuda {

// Bytes per staging chunk (each of the two in flight has one chunk each way).
inline constexpr size_t kCudaSwapChunkBytes = size_t{16} << 20;

class CudaWeightSet final : public WeightSet {
 public:
  // Converts every tensor of `source`, read with the shapes of `config` (the served model's), on
  // the host (ConvertCudaWeights, the path loading takes) and checks each buffer's size against
  // its counterpart in `served`; allocates the staging. Reads nothing but the addresses and sizes
  // of `served`, so it may run while steps run. Every check of an update happens here: Exchange
  // cannot fail but for a CUDA error.
  static StatusOr<std::unique_ptr<CudaWeightSet>> Prepare(const model::TensorSource& source,
                                                          const model::ModelConfig& config,
                                                          const CudaWeights& served, bool progress);
  ~CudaWeightSet() override;
  CudaWeightSet(const CudaWeightSet&) = delete;
  CudaWeightSet& operator=(const CudaWeightSet&) = delete;

  // Host bytes: the weights plus the staging.
  size_t bytes() const override;
  // The bytes that cross the bus each way in Exchange.
  size_t weight_bytes() const { return weight_bytes_; }
  // Whether Prepare checked it against `served`.
  bool prepared_for(const CudaWeights& served) const { return served_ == &served; }

  // Exchanges the contents of the set and of the device buffers it was prepared against, on
  // `stream` (which must have no other work in flight: no step runs during a swap); synchronizes
  // the stream. Afterwards the device holds the set's weights and the set the ones served
  // before, so a second Exchange undoes the first. On a CUDA error the buffers are left partly
  // exchanged and the error is returned.
  Status Exchange(cudaStream_t stream);

 private:
  // One device buffer of the served weights and its contents in this set.
  struct Buffer {
    void* device = nullptr;
    size_t bytes = 0;
    std::unique_ptr<uint8_t[]> host;
  };
  // A chunk in flight: its staging and the event recorded after its two copies.
  struct Stage {
    PinnedMemory in;   // the set's bytes, on their way to the device
    PinnedMemory out;  // the device's bytes, on their way to the set
    cudaEvent_t done = nullptr;
    uint8_t* pending = nullptr;  // where `out` goes in the set once `done`; null if nothing
    size_t pending_bytes = 0;
  };

  CudaWeightSet() = default;
  Status AllocateStaging(size_t chunk_bytes);
  // Waits for the stage's copies and moves what came from the device into the set.
  Status Drain(Stage& stage);

  const CudaWeights* served_ = nullptr;
  std::vector<Buffer> buffers_;
  size_t weight_bytes_ = 0;
  Stage stages_[2];
};

}  // namespace astr::cuda
