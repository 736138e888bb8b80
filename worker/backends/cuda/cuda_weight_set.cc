#include "worker/backends/cuda/cuda_weight_set.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <span>

namespace astr::cuda {

StatusOr<std::unique_ptr<CudaWeightSet>> CudaWeightSet::Prepare(const model::TensorSource& source,
                                                                const model::ModelConfig& config,
                                                                const CudaWeights& served,
                                                                bool progress) {
  std::unique_ptr<CudaWeightSet> set(new CudaWeightSet());
  set->served_ = &served;
  size_t largest = 0;
  auto keep = [&](const WeightSlot& slot, const std::string& what,
                  std::span<const uint8_t> host) -> Status {
    if (slot.model == nullptr &&
        (slot.layer < 0 || static_cast<size_t>(slot.layer) >= served.layers.size())) {
      return InvalidArgumentError("weight update: '" + what + "' is in layer " +
                                  std::to_string(slot.layer) + ", the served model has " +
                                  std::to_string(served.layers.size()));
    }
    const DeviceMemory& device = served.at(slot);
    if (device.get() == nullptr || device.bytes() != host.size()) {
      return InvalidArgumentError("weight update: '" + what + "' converts to " +
                                  std::to_string(host.size()) + " bytes, the served buffer holds " +
                                  std::to_string(device.bytes()));
    }
    Buffer b;
    b.device = device.get();
    b.bytes = host.size();
    b.host.reset(new (std::nothrow) uint8_t[b.bytes]);
    if (b.host == nullptr) {
      return ResourceExhaustedError("weight update: no host memory for the " +
                                    std::to_string(b.bytes) + " bytes of '" + what + "'");
    }
    std::memcpy(b.host.get(), host.data(), b.bytes);
    set->weight_bytes_ += b.bytes;
    largest = std::max(largest, b.bytes);
    set->buffers_.push_back(std::move(b));
    return OkStatus();
  };
  ASTR_RETURN_IF_ERROR(
      ConvertCudaWeights(source, config, progress ? "preparing a weight update" : "", keep));
  ASTR_RETURN_IF_ERROR(set->AllocateStaging(std::min(kCudaSwapChunkBytes, largest)));
  return set;
}

CudaWeightSet::~CudaWeightSet() {
  for (Stage& s : stages_) {
    if (s.done != nullptr) cudaEventDestroy(s.done);
  }
}

size_t CudaWeightSet::bytes() const {
  size_t total = weight_bytes_;
  for (const Stage& s : stages_) total += s.in.bytes() + s.out.bytes();
  return total;
}

Status CudaWeightSet::AllocateStaging(size_t chunk_bytes) {
  for (Stage& s : stages_) {
    ASTR_ASSIGN_OR_RETURN(s.in, PinnedMemory::Allocate(chunk_bytes, "weight swap staging"));
    ASTR_ASSIGN_OR_RETURN(s.out, PinnedMemory::Allocate(chunk_bytes, "weight swap staging"));
    ASTR_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming),
                              "creating a weight swap event");
  }
  return OkStatus();
}

Status CudaWeightSet::Drain(Stage& stage) {
  if (stage.pending == nullptr) return OkStatus();
  ASTR_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stage.done), "swapping weights");
  std::memcpy(stage.pending, stage.out.get(), stage.pending_bytes);
  stage.pending = nullptr;
  return OkStatus();
}

Status CudaWeightSet::Exchange(cudaStream_t stream) {
  // Chunk by chunk, alternating between the two stages: while one chunk's copies run, the host
  // fills the other stage's `in` and empties its `out` of the chunk before.
  const size_t chunk = stages_[0].in.bytes();
  int next = 0;
  auto exchange = [&]() -> Status {
    for (Buffer& b : buffers_) {
      for (size_t off = 0; off < b.bytes; off += chunk) {
        const size_t n = std::min(chunk, b.bytes - off);
        Stage& stage = stages_[next];
        next ^= 1;
        ASTR_RETURN_IF_ERROR(Drain(stage));
        uint8_t* host = b.host.get() + off;
        uint8_t* device = static_cast<uint8_t*>(b.device) + off;
        std::memcpy(stage.in.get(), host, n);
        // One stream: the served bytes are read out before the new ones overwrite them.
        ASTR_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(stage.out.get(), device, n, cudaMemcpyDeviceToHost, stream),
            "copying the served weights to the host");
        ASTR_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(device, stage.in.get(), n, cudaMemcpyHostToDevice, stream),
            "copying the new weights to the device");
        ASTR_CUDA_RETURN_IF_ERROR(cudaEventRecord(stage.done, stream), "swapping weights");
        stage.pending = host;
        stage.pending_bytes = n;
      }
    }
    ASTR_RETURN_IF_ERROR(Drain(stages_[next]));
    ASTR_RETURN_IF_ERROR(Drain(stages_[next ^ 1]));
    ASTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "swapping weights");
    return OkStatus();
  };
  const Status status = exchange();
  if (!status.ok()) {
    // Nothing may still be in flight, nor be moved into the set by a later Exchange.
    (void)cudaStreamSynchronize(stream);
    for (Stage& s : stages_) s.pending = nullptr;
  }
  return status;
}

}  // namespace astr::cuda
