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
  // Allocates what the draws need for at most `max_rows` rows (called once, at backend creation):
  // the device buffer for the edits, sized for every row's constraint mask plus the larger of
  // 1 MiB and one row's most edits (a bias and a penalty entry for every id), and pinned host
  // memory for the edits' staging and the results. A step never allocates: edits beyond the
  // buffer are drawn in chunks of rows (see Launch).
  // `min_edit_bytes`: the edit buffer's floor (tests shrink it to exercise the chunks).
  Status Reserve(int64_t max_rows, int64_t vocab, size_t min_edit_bytes = size_t{1} << 20);
  // Packs the rows' parameters into params_out (the workspace's pinned metadata, uploaded with the
  // step metadata) and keeps their edits for Launch.
  void Pack(std::span<const SequenceSampler* const> samplers, int64_t vocab,
            DeviceSamplingParams* params_out);
  // Draws one token per packed row from logits [rows, vocab] (device; overwritten) and fills
  // `results`. `params` is the device copy of what Pack wrote. `masks`: empty, or per row its
  // constraint mask ((vocab + 31) / 32 words; null: none), uploaded with the edits. The edits and
  // the results travel through pinned memory. Rows whose edits together exceed the reserved
  // buffer are drawn in several launches (the stream is synchronized between them). Synchronizes
  // `stream`.
  Status Launch(float* logits, float* raw_logits, const DeviceSamplingParams* params,
                DeviceSampleResult* device_results, int64_t vocab, cudaStream_t stream,
                std::span<SampleResult> results, std::span<const uint32_t* const> masks = {});
  int64_t edit_capacity_bytes() const { return static_cast<int64_t>(edits_.bytes()); }
  // Launches of the sampling kernel so far (more than one per step only for chunked edits).
  int64_t launches() const { return launches_; }

 private:
  // Stages rows [r0, r1)'s edits in staging_, uploads them and launches their draws.
  Status LaunchRows(int r0, int r1, float* logits, float* raw_logits,
                    const DeviceSamplingParams* params, DeviceSampleResult* device_results,
                    int64_t vocab, cudaStream_t stream, std::span<const uint32_t* const> masks,
                    bool masked);
  // The bytes rows [r0, r1), `masked` of them with a mask, stage (16-byte aligned arrays).
  size_t StagedBytes(int r0, int r1, int masked, int64_t words) const;

  SamplingBatch batch_;
  DeviceMemory edits_;    // the edit arrays on the device, back to back
  PinnedMemory staging_;  // the same bytes on the host, as uploaded
  PinnedMemory results_;  // DeviceSampleResult per row, as downloaded
  int64_t max_rows_ = 0;
  int64_t launches_ = 0;
};

}  // namespace astr::cuda
