// A whole file mapped read-only into memory. Weight readers hand out pointers into the mapping, so
// the MappedFile must outlive every view taken from it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/base/status.h"

namespace astr {

class MappedFile {
 public:
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  MappedFile(std::string path, const uint8_t* data, uint64_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_ = nullptr;  // nullptr for an empty file
  uint64_t size_ = 0;
};

// Drops the resident pages covering [data, data + bytes) (rounded out to whole pages), which must
// lie inside a MappedFile: the kernel reads them from the file again if they are touched later.
// Only for mappings: on anonymous memory it would zero the pages.
void ReleaseMappedPages(const void* data, uint64_t bytes);

}  // namespace astr
