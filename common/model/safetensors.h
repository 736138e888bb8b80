// safetensors reader (single file or sharded via model.safetensors.index.json) and a streaming
// writer.
//
// File layout: u64 little-endian header size N, N bytes of JSON
//   {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {...}}
// then the data; offsets are relative to the end of the header. Files are memory-mapped.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/base/mapped_file.h"
#include "common/base/status.h"
#include "common/model/tensor_dtype.h"

namespace astr::model {

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;      // as stored ("F32", "BF16", "I64", ...)
  std::optional<DType> dtype;  // set for F32 / F16 / BF16, the types we read
  std::vector<int64_t> shape;  // torch order
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
  std::string file;  // the shard it lives in
};

class SafetensorsFile {
 public:
  // `path` is a .safetensors file, a model.safetensors.index.json, or a folder holding either.
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::string& path() const { return path_; }
  // All tensors of all shards, sorted by name.
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(const std::string& name) const;
  // The tensor's dtype if we can read it, else an error naming the tensor and its dtype.
  StatusOr<DType> ReadableDType(const SafetensorsTensor& tensor) const;
  // __metadata__ of the (first) file.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  Status AddShard(const std::string& file);

  std::string path_;
  std::vector<std::unique_ptr<MappedFile>> maps_;
  std::map<std::string, SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Streaming writer of one .safetensors file: declare tensors, Open(), then stream their bytes in
// declaration order, then Close().
class SafetensorsWriter {
 public:
  SafetensorsWriter() = default;
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // dtype must be F32, F16 or BF16.
  void AddTensor(const std::string& name, const std::vector<int64_t>& shape, DType dtype);
  Status Open(const std::string& path);
  Status WriteTensorData(const void* data, uint64_t bytes);
  Status Close();

 private:
  struct Pending {
    std::string name;
    std::vector<int64_t> shape;
    DType dtype;
    uint64_t bytes = 0;
  };
  std::string path_;
  std::FILE* file_ = nullptr;
  std::map<std::string, std::string> metadata_;
  std::vector<Pending> tensors_;
  uint64_t total_bytes_ = 0;
  uint64_t written_ = 0;
};

// Convenience for small files: tensors with their raw bytes.
struct SafetensorsTensorData {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
  std::vector<uint8_t> bytes;
};
Status WriteSafetensorsFile(const std::string& path,
                            const std::vector<SafetensorsTensorData>& tensors);

}  // namespace astr::model
