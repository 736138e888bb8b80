#include "worker/backends/cuda/device_sampler.h"

#include <algorithm>
#include <cstring>

#include "worker/backends/cuda/sampling_pack.h"

namespace astr::cuda {
namespace {

// Appends `v` to `out` at a 16-byte aligned offset; returns the offset.
template <typename T>
size_t Append(std::vector<char>* out, const std::vector<T>& v) {
  const size_t offset = (out->size() + 15) / 16 * 16;
  out->resize(offset + v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out->data() + offset, v.data(), v.size() * sizeof(T));
  return offset;
}

}  // namespace

void DeviceSampler::Pack(std::span<const SequenceSampler* const> samplers, int64_t vocab,
                         DeviceSamplingParams* params_out) {
  batch_.Clear();
  for (const SequenceSampler* s : samplers) PackSamplingRow(*s, vocab, &batch_);
  std::copy(batch_.params.begin(), batch_.params.end(), params_out);
}

Status DeviceSampler::Launch(float* logits, float* raw_logits, const DeviceSamplingParams* params,
                             DeviceSampleResult* device_results, int64_t vocab, cudaStream_t stream,
                             std::span<SampleResult> results,
                             std::span<const uint32_t* const> masks) {
  const int rows = static_cast<int>(batch_.params.size());
  if (rows == 0) return OkStatus();
  if (!masks.empty() && static_cast<int>(masks.size()) != rows) {
    return InvalidArgumentError("sampling: " + std::to_string(masks.size()) + " masks for " +
                                std::to_string(rows) + " rows");
  }
  const int64_t words = (vocab + 31) / 32;
  mask_rows_.clear();
  mask_words_.clear();
  bool masked = false;
  for (const uint32_t* m : masks) {
    if (m == nullptr) {
      mask_rows_.push_back(-1);
      continue;
    }
    mask_rows_.push_back(static_cast<int32_t>(mask_words_.size() / words));
    mask_words_.insert(mask_words_.end(), m, m + words);
    masked = true;
  }
  staging_.clear();
  const size_t bias_ids = Append(&staging_, batch_.bias_ids);
  const size_t bias_values = Append(&staging_, batch_.bias_values);
  const size_t penalty_ids = Append(&staging_, batch_.penalty_ids);
  const size_t penalty_generated = Append(&staging_, batch_.penalty_generated);
  const size_t mask_rows = masked ? Append(&staging_, mask_rows_) : 0;
  const size_t mask_words = masked ? Append(&staging_, mask_words_) : 0;
  if (staging_.size() > edits_.bytes()) {
    // Grows (doubling) only when a step carries more edits than any before.
    ASTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "before growing the sampling edits");
    ASTR_ASSIGN_OR_RETURN(edits_,
                          DeviceAllocator::Allocate(std::max<size_t>(2 * staging_.size(), 1 << 16),
                                                    "sampling edits"));
  }
  char* base = edits_.as<char>();
  if (!staging_.empty()) {
    ASTR_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(base, staging_.data(), staging_.size(), cudaMemcpyHostToDevice, stream),
        "uploading the sampling edits");
  }
  SamplingArgs a;
  a.logits = logits;
  a.num_rows = rows;
  a.vocab = static_cast<int>(vocab);
  a.params = params;
  a.bias_ids = reinterpret_cast<const int32_t*>(base + bias_ids);
  a.bias_values = reinterpret_cast<const float*>(base + bias_values);
  a.penalty_ids = reinterpret_cast<const int32_t*>(base + penalty_ids);
  a.penalty_generated = reinterpret_cast<const int32_t*>(base + penalty_generated);
  a.raw_logits = raw_logits;
  a.results = device_results;
  if (masked) {
    a.mask_rows = reinterpret_cast<const int32_t*>(base + mask_rows);
    a.allowed = reinterpret_cast<const uint32_t*>(base + mask_words);
    a.mask_words = static_cast<int>(words);
  }
  ASTR_CUDA_RETURN_IF_ERROR(LaunchSampling(a, stream), "launching the sampling kernel");
  host_results_.resize(static_cast<size_t>(rows));
  ASTR_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_results_.data(), device_results, rows * sizeof(DeviceSampleResult),
                      cudaMemcpyDeviceToHost, stream),
      "copying the sampled tokens");
  ASTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "sampling on the device");
  for (int i = 0; i < rows; ++i) {
    const DeviceSampleResult& d = host_results_[i];
    SampleResult& r = results[i];
    r.token = d.token;
    r.logprob = d.logprob;
    r.num_top = d.num_top;
    for (int j = 0; j < d.num_top && j < kMaxTopLogprobs; ++j) {
      r.top[j] = {d.top_ids[j], d.top_logprobs[j]};
    }
  }
  return OkStatus();
}

}  // namespace astr::cuda
