// How AdminClient::UpdateWeights splits a weight update into messages ("buckets" of chunks). The
// plan is computed from the tensors' sizes alone, so that it is testable without a server and the
// sender only copies bytes into each message as it goes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/base/status.h"

namespace astr::client {

// Bytes [offset, offset + bytes) of one tensor of the manifest.
struct WeightChunkSpan {
  int32_t tensor = 0;  // index into WeightManifest.tensors
  int64_t offset = 0;
  int64_t bytes = 0;

  bool operator==(const WeightChunkSpan&) const = default;
};

// The chunks of one UpdateWeightsRequest.
using WeightBucket = std::vector<WeightChunkSpan>;

// Tensors of `tensor_bytes[i]` bytes each, in index order, packed into buckets of at most
// `bucket_bytes` bytes of data: every bucket but the last holds exactly `bucket_bytes`, and
// a tensor that does not fit in what is left of a bucket continues in the next one, so each
// tensor's chunks come in order with offset = bytes of it planned before. A tensor of 0 bytes
// gets no chunk. INVALID_ARGUMENT when bucket_bytes <= 0 or a size is negative.
StatusOr<std::vector<WeightBucket>> PlanWeightBuckets(std::span<const int64_t> tensor_bytes,
                                                      int64_t bucket_bytes);

}  // namespace astr::client
