// A weight update read from a local safetensors checkpoint for `astr admin update-weights
// --from-safetensors`: the manifest (Hugging Face names as stored, dtype, shape, XXH64 of each
// tensor's bytes) and, per tensor, its bytes inside the memory-mapped file, from which
// AdminClient::UpdateWeights builds each bucket. Nothing is copied whole.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "astr/v1/admin.pb.h"
#include "common/base/status.h"
#include "common/model/safetensors.h"

namespace astr::cli {

struct SafetensorsUpload {
  // Owns the mappings that `data` points into.
  std::unique_ptr<model::SafetensorsFile> file;
  // Tensors in file order (shard by shard, by offset), so that the upload reads the mapping
  // front to back.
  v1::WeightManifest manifest;
  // data[i]: the bytes of manifest.tensors(i).
  std::vector<std::span<const uint8_t>> data;
  int64_t total_bytes = 0;
};

// `path`: a folder holding model.safetensors or model.safetensors.index.json (shards), or one of
// those files. A tensor of a dtype other than F32, F16 or BF16 is an error naming it.
StatusOr<SafetensorsUpload> ReadSafetensorsUpload(const std::string& path,
                                                  const std::string& label);

}  // namespace astr::cli
