#include "worker/backends/cuda/device_sampler.h"

#include <algorithm>
#include <cstring>

#include "worker/backends/cuda/sampling_pack.h"

namespace astr::cuda {
namespace {

size_t Align16(size_t n) { return (n + 15) / 16 * 16; }

// Copies `n` elements to `base + *offset` (16-byte aligned) and advances *offset; returns where.
template <typename T>
size_t Put(char* base, size_t* offset, const T* v, size_t n) {
  const size_t at = Align16(*offset);
  if (n > 0) std::memcpy(base + at, v, n * sizeof(T));
  *offset = at + n * sizeof(T);
  return at;
}

}  // namespace

Status DeviceSampler::Reserve(int64_t max_rows, int64_t vocab, size_t min_edit_bytes) {
  max_rows_ = std::max<int64_t>(max_rows, 1);
  const size_t words = static_cast<size_t>((vocab + 31) / 32);
  // Every row masked, plus the larger of min_edit_bytes and one row's most edits: a bias entry for
  // every id and its min_tokens stop ids (8 bytes each), a penalty entry for every id (8 bytes).
  const size_t masks = static_cast<size_t>(max_rows_) * (words * 4 + 4) + 64;
  const size_t one_row = static_cast<size_t>(vocab) * 16 + 8 * 1024 + 4 * 16;
  const size_t bytes = Align16(masks) + std::max(min_edit_bytes, one_row);
  ASTR_ASSIGN_OR_RETURN(edits_, DeviceAllocator::Allocate(bytes, "sampling edits"));
  ASTR_ASSIGN_OR_RETURN(staging_, PinnedMemory::Allocate(bytes, "sampling edits (staging)"));
  ASTR_ASSIGN_OR_RETURN(
      results_, PinnedMemory::Allocate(static_cast<size_t>(max_rows_) * sizeof(DeviceSampleResult),
                                       "sampled tokens"));
  return OkStatus();
}

void DeviceSampler::Pack(std::span<const SequenceSampler* const> samplers, int64_t vocab,
                         DeviceSamplingParams* params_out) {
  batch_.Clear();
  for (const SequenceSampler* s : samplers) PackSamplingRow(*s, vocab, &batch_);
  std::copy(batch_.params.begin(), batch_.params.end(), params_out);
}

size_t DeviceSampler::StagedBytes(int r0, int r1, int masked, int64_t words) const {
  const size_t bias =
      static_cast<size_t>(batch_.params[r1 - 1].bias_end - batch_.params[r0].bias_begin);
  const size_t penalty =
      static_cast<size_t>(batch_.params[r1 - 1].penalty_end - batch_.params[r0].penalty_begin);
  size_t n = 2 * Align16(bias * 4) + 2 * Align16(penalty * 4);
  if (masked > 0) {
    n += Align16(static_cast<size_t>(r1 - r0) * 4) + static_cast<size_t>(masked) * words * 4;
  }
  return n + 64;
}

Status DeviceSampler::LaunchRows(int r0, int r1, float* logits, float* raw_logits,
                                 const DeviceSamplingParams* params,
                                 DeviceSampleResult* device_results, int64_t vocab,
                                 cudaStream_t stream, std::span<const uint32_t* const> masks,
                                 bool masked) {
  const int64_t words = (vocab + 31) / 32;
  const int32_t b0 = batch_.params[r0].bias_begin, b1 = batch_.params[r1 - 1].bias_end;
  const int32_t p0 = batch_.params[r0].penalty_begin, p1 = batch_.params[r1 - 1].penalty_end;
  char* host = staging_.as<char>();
  size_t used = 0;
  const size_t bias_ids = Put(host, &used, batch_.bias_ids.data() + b0, b1 - b0);
  const size_t bias_values = Put(host, &used, batch_.bias_values.data() + b0, b1 - b0);
  const size_t penalty_ids = Put(host, &used, batch_.penalty_ids.data() + p0, p1 - p0);
  const size_t penalty_generated = Put(host, &used, batch_.penalty_generated.data() + p0, p1 - p0);
  size_t mask_rows = 0, mask_words = 0;
  if (masked) {
    mask_rows = Align16(used);
    used = mask_rows + static_cast<size_t>(r1 - r0) * 4;
    mask_words = Align16(used);
    auto* rows = reinterpret_cast<int32_t*>(host + mask_rows);
    auto* out = reinterpret_cast<uint32_t*>(host + mask_words);
    int32_t next = 0;
    for (int r = r0; r < r1; ++r) {
      if (masks[r] == nullptr) {
        rows[r - r0] = -1;
        continue;
      }
      rows[r - r0] = next;
      std::memcpy(out + static_cast<int64_t>(next) * words, masks[r], words * 4);
      ++next;
    }
    used = mask_words + static_cast<size_t>(next) * words * 4;
  }
  char* dev = edits_.as<char>();
  if (used > 0) {
    ASTR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev, host, used, cudaMemcpyHostToDevice, stream),
                              "uploading the sampling edits");
  }
  SamplingArgs a;
  a.logits = logits + static_cast<int64_t>(r0) * vocab;
  a.num_rows = r1 - r0;
  a.vocab = static_cast<int>(vocab);
  a.params = params + r0;
  // The rows' bias and penalty ranges index the whole step's arrays: point the kernel at where
  // entry 0 would be, so that those indexes land in this chunk's slice.
  a.bias_ids = reinterpret_cast<const int32_t*>(dev + bias_ids) - b0;
  a.bias_values = reinterpret_cast<const float*>(dev + bias_values) - b0;
  a.penalty_ids = reinterpret_cast<const int32_t*>(dev + penalty_ids) - p0;
  a.penalty_generated = reinterpret_cast<const int32_t*>(dev + penalty_generated) - p0;
  a.raw_logits = raw_logits + static_cast<int64_t>(r0) * vocab;
  a.results = device_results + r0;
  if (masked) {
    a.mask_rows = reinterpret_cast<const int32_t*>(dev + mask_rows);
    a.allowed = reinterpret_cast<const uint32_t*>(dev + mask_words);
    a.mask_words = static_cast<int>(words);
  }
  ASTR_CUDA_RETURN_IF_ERROR(LaunchSampling(a, stream), "launching the sampling kernel");
  ++launches_;
  return OkStatus();
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
  if (rows > max_rows_ || edits_.get() == nullptr) {
    return InvalidArgumentError("sampling: " + std::to_string(rows) + " rows, reserved for " +
                                std::to_string(max_rows_));
  }
  const int64_t words = (vocab + 31) / 32;
  const size_t capacity = edits_.bytes();
  // Rows go in chunks whose edits fit the buffer (one chunk unless a step carries more edits than
  // Reserve sized for). A chunk's upload may only overwrite the staging once the previous chunk's
  // upload has run: the stream is synchronized between chunks.
  for (int r0 = 0; r0 < rows;) {
    // Extend the chunk row by row while its edits fit (O(1) per row: the edit ranges are
    // contiguous, and the masked rows are counted as they join).
    int r1 = r0, masked = 0;
    while (r1 < rows) {
      const int with = masked + (!masks.empty() && masks[r1] != nullptr ? 1 : 0);
      if (StagedBytes(r0, r1 + 1, with, words) > capacity) break;
      masked = with;
      ++r1;
    }
    if (r1 == r0) {
      return InvalidArgumentError("sampling: row " + std::to_string(r0) +
                                  " has more edits than the sampling buffer holds");
    }
    if (r0 > 0) {
      ASTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "between sampling chunks");
    }
    ASTR_RETURN_IF_ERROR(LaunchRows(r0, r1, logits, raw_logits, params, device_results, vocab,
                                    stream, masks, masked > 0));
    r0 = r1;
  }
  DeviceSampleResult* host = results_.as<DeviceSampleResult>();
  ASTR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, device_results, rows * sizeof(DeviceSampleResult),
                                            cudaMemcpyDeviceToHost, stream),
                            "copying the sampled tokens");
  ASTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "sampling on the device");
  for (int i = 0; i < rows; ++i) {
    const DeviceSampleResult& d = host[i];
    if (d.token < 0 || d.token >= vocab || d.num_top < 0 || d.num_top > kMaxTopLogprobs) {
      // Never from a kernel that ran: a fault, or results read before they arrived.
      return InternalError("sampling on the device: row " + std::to_string(i) +
                           " came back with token " + std::to_string(d.token) + " (vocabulary " +
                           std::to_string(vocab) + ") and " + std::to_string(d.num_top) +
                           " alternatives");
    }
    SampleResult& r = results[i];
    r.token = d.token;
    r.logprob = d.logprob;
    r.num_top = d.num_top;
    r.mask = SamplingMask{};  // the device draws no sampling mask (StepSampling: host path)
    for (int j = 0; j < d.num_top && j < kMaxTopLogprobs; ++j) {
      r.top[j] = {d.top_ids[j], d.top_logprobs[j]};
    }
  }
  return OkStatus();
}

}  // namespace astr::cuda
