#include "astr/weight_buckets.h"

#include <algorithm>
#include <string>

namespace astr::client {

StatusOr<std::vector<WeightBucket>> PlanWeightBuckets(std::span<const int64_t> tensor_bytes,
                                                      int64_t bucket_bytes) {
  if (bucket_bytes <= 0) {
    return InvalidArgumentError("bucket_bytes must be > 0, got " + std::to_string(bucket_bytes));
  }
  std::vector<WeightBucket> buckets;
  int64_t room = 0;  // bytes left in buckets.back()
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    if (tensor_bytes[i] < 0) {
      return InvalidArgumentError("tensor " + std::to_string(i) + " has " +
                                  std::to_string(tensor_bytes[i]) + " bytes");
    }
    for (int64_t offset = 0; offset < tensor_bytes[i];) {
      if (room == 0) {
        buckets.emplace_back();
        room = bucket_bytes;
      }
      const int64_t bytes = std::min(room, tensor_bytes[i] - offset);
      buckets.back().push_back({static_cast<int32_t>(i), offset, bytes});
      offset += bytes;
      room -= bytes;
    }
  }
  return buckets;
}

}  // namespace astr::client
