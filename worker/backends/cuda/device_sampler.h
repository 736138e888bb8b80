// The CUDA backend's token draws on the GPU (kernels/cuda/sampling.h): packs each sample row's
// parameters and sparse edits (logit bias, min_tokens masks, penalty counts) on the host, uploads
// the edits in one copy, launches the sampling kernel on the logits left on the device by the
// forward pass and brings back only the results. Sampling stays outside the CUDA graphs.
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <vector>

#include "common/base/status.h"
#include "kernels/cuda/sampling.h"
#include "worker/backends/cuda/device_memory.h"
#include "worker/sampler.h"

namespace astr::cuda {

class DeviceSampler {
 public:
  // Packs the rows' parameters into params_out (the workspace's pinned metadata, uploaded with the
  // step metadata) and keeps their edits for Launch.
  void Pack(std::span<const SequenceSampler* const> samplers, int64_t vocab,
            DeviceSamplingParams* params_out);
  // Draws one token per packed row from logits [rows, vocab] (device; overwritten) and fills
  // `results`. `params` is the device copy of what Pack wrote. `masks`: empty, or per row its
  // constraint mask ((vocab + 31) / 32 words; null: none), uploaded with the edits. Synchronizes
  // `stream`.
  Status Launch(float* logits, float* raw_logits, const DeviceSamplingParams* params,
                DeviceSampleResult* device_results, int64_t vocab, cudaStream_t stream,
                std::span<SampleResult> results, std::span<const uint32_t* const> masks = {});
  // Device allocations for the edits happen only when a step carries more edits than any before.
  int64_t edit_capacity_bytes() const { return static_cast<int64_t>(edits_.bytes()); }

 private:
  SamplingBatch batch_;
  std::vector<char> staging_;  // the edit arrays, back to back, as uploaded
  std::vector<int32_t> mask_rows_;    // per row: its row of mask_words_, or -1
  std::vector<uint32_t> mask_words_;  // the masked rows' masks, back to back
  DeviceMemory edits_;
  std::vector<DeviceSampleResult> host_results_;
};

}  // namespace astr::cuda
