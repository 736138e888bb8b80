// A fast, deterministic 64-bit content hash of a model's files, so that a scheduler can check that
// all its workers serve the same weights (InfoResponse.content_hash).
//
// The hash of one byte string is XXH64 with seed 0 (Yann Collet's xxHash, 64-bit variant): four
// independent lanes consume the input in 32-byte stripes of four little-endian 8-byte words, each
// lane doing acc = rotl64(acc + word * P2, 31) * P1; the lanes are then rotated, summed and merged
// (multiply-xor), the length is added, the tail is folded in 8-, 4- and 1-byte steps, and a final
// xor-shift-multiply avalanche spreads every input bit over the result. The four lanes have no
// dependency on each other, so a core runs them in parallel: several GB/s per core, well above
// what a disk delivers. The recipe is xxHash's exactly, so `xxhsum -H64` reproduces a file's hash.
//
// A model's hash:
//   - a single file (GGUF): XXH64 of its bytes;
//   - a Hugging Face folder: XXH64 of the records, for config.json and then every *.safetensors
//     file in byte-wise sorted name order, of
//        name bytes, one 0x00 byte, file size (u64 little-endian), XXH64 of the file (u64 LE).
//     Names, sizes and order all enter the hash, so renaming or reordering shards changes it.
// Printed as 16 lowercase hex digits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/base/status.h"

namespace astr::model {

// XXH64 of `size` bytes at `data` (data may be null when size is 0).
uint64_t ContentHash64(const void* data, size_t size, uint64_t seed = 0);

// `hash` as 16 lowercase hex digits, zero-padded.
std::string ContentHashHex(uint64_t hash);

// ContentHash64 of a whole file, read through a memory mapping. Errors name the file.
StatusOr<uint64_t> FileContentHash(const std::string& path);

// The model hash described above for a .gguf (or any single) file or a Hugging Face folder, as
// 16 hex digits. A folder without config.json or without *.safetensors files is an error.
StatusOr<std::string> ModelContentHash(const std::string& path);

}  // namespace astr::model
