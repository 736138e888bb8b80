// A fast, deterministic 64-bit content hash of a model's files, so that a scheduler can check that
// all its workers serve the same weights (InfoResponse.content_hash).
//
// The hash of one byte string is XXH64 with seed 0, computed by xxHash itself (Debian's
// libxxhash-dev, used header-only so that the bare GPU build needs only xxhash.h), so
// `xxhsum -H64` reproduces a file's hash.
//
// A model's hash (format 1, the one published today):
//   - a single file (GGUF): XXH64 of its bytes;
//   - a Hugging Face folder: XXH64 of the records, for config.json and then every *.safetensors
//     file in byte-wise sorted name order, of
//        name bytes, one 0x00 byte, file size (u64 little-endian), XXH64 of the file (u64 LE).
//     Names, sizes and order all enter the hash, so renaming or reordering shards changes it.
// Printed as 16 lowercase hex digits, untagged. Schedulers compare the strings for equality, so a
// different recipe must never reuse this form: a future format is printed with a scheme tag in
// front, e.g. "xxh3:" + 16 hex digits, and then compares unequal to every format-1 hash (a mixed
// fleet is refused as serving different models, never wrongly accepted).
//
// ContentHash3_64 (XXH3, 64-bit) is the faster choice for new checksums, such as per-tensor weight
// checksums; it is not part of the published model hash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/base/status.h"

namespace astr::model {

// XXH64 of `size` bytes at `data` (data may be null when size is 0).
uint64_t ContentHash64(const void* data, size_t size, uint64_t seed = 0);

// XXH3-64 of `size` bytes at `data` (data may be null when size is 0): a different function from
// ContentHash64 and faster on large buffers, since it reads 64-byte stripes with SIMD (about 1.5x
// with the SSE2 of a plain x86-64 build, 4x with AVX2, on cached data; docs/worker.md).
uint64_t ContentHash3_64(const void* data, size_t size, uint64_t seed = 0);

// ContentHash64 over bytes that arrive in pieces: Update(a); Update(b) digests as a + b would.
class ContentHasher64 {
 public:
  explicit ContentHasher64(uint64_t seed = 0);
  ~ContentHasher64();
  ContentHasher64(ContentHasher64&& other) noexcept;
  ContentHasher64& operator=(ContentHasher64&& other) noexcept;
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  void* state_;  // XXH64_state_t
};

// `hash` as 16 lowercase hex digits, zero-padded.
std::string ContentHashHex(uint64_t hash);

// ContentHash64 of a whole file, read through a memory mapping. Errors name the file.
StatusOr<uint64_t> FileContentHash(const std::string& path);

// The model hash described above for a .gguf (or any single) file or a Hugging Face folder, as
// 16 hex digits. A folder without config.json or without *.safetensors files is an error.
StatusOr<std::string> ModelContentHash(const std::string& path);

}  // namespace astr::model
