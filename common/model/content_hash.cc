#include "common/model/content_hash.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "common/base/mapped_file.h"

namespace astr::model {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Little-endian loads; memcpy keeps unaligned reads defined (it compiles to one mov on x86/ARM).
inline uint64_t Read64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}
inline uint32_t Read32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  return v;
}

// One lane step: multiply the word in, rotate, multiply again.
inline uint64_t Round(uint64_t acc, uint64_t word) {
  acc += word * kP2;
  acc = Rotl(acc, 31);
  return acc * kP1;
}

inline uint64_t MergeRound(uint64_t acc, uint64_t lane) {
  acc ^= Round(0, lane);
  return acc * kP1 + kP4;
}

void AppendU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

uint64_t ContentHash64(const void* data, size_t size, uint64_t seed) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const uint8_t* const end = p + size;
  uint64_t h;
  if (size >= 32) {
    // Four independent accumulators: the multiply latency of one overlaps the others.
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    const uint8_t* const last_stripe = end - 32;
    do {
      v1 = Round(v1, Read64(p));
      v2 = Round(v2, Read64(p + 8));
      v3 = Round(v3, Read64(p + 16));
      v4 = Round(v4, Read64(p + 24));
      p += 32;
    } while (p <= last_stripe);
    h = Rotl(v1, 1) + Rotl(v2, 7) + Rotl(v3, 12) + Rotl(v4, 18);
    h = MergeRound(h, v1);
    h = MergeRound(h, v2);
    h = MergeRound(h, v3);
    h = MergeRound(h, v4);
  } else {
    h = seed + kP5;
  }
  h += static_cast<uint64_t>(size);
  // The tail (fewer than 32 bytes): 8-byte words, then one 4-byte word, then single bytes.
  while (end - p >= 8) {
    h ^= Round(0, Read64(p));
    h = Rotl(h, 27) * kP1 + kP4;
    p += 8;
  }
  if (end - p >= 4) {
    h ^= static_cast<uint64_t>(Read32(p)) * kP1;
    h = Rotl(h, 23) * kP2 + kP3;
    p += 4;
  }
  while (p < end) {
    h ^= static_cast<uint64_t>(*p) * kP5;
    h = Rotl(h, 11) * kP1;
    ++p;
  }
  // Avalanche: every input bit reaches every output bit.
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

std::string ContentHashHex(uint64_t hash) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, hash >>= 4) out[i] = kDigits[hash & 0xF];
  return out;
}

StatusOr<uint64_t> FileContentHash(const std::string& path) {
  ASTR_ASSIGN_OR_RETURN(auto map, MappedFile::Open(path));
  return ContentHash64(map->data(), map->size());
}

StatusOr<std::string> ModelContentHash(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    ASTR_ASSIGN_OR_RETURN(uint64_t h, FileContentHash(path));
    return ContentHashHex(h);
  }
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 12 && name.ends_with(".safetensors") && entry.is_regular_file(ec)) {
      names.push_back(name);
    }
  }
  if (ec) return NotFoundError(path + ": cannot list the folder: " + ec.message());
  if (names.empty()) return NotFoundError(path + ": no *.safetensors files to hash");
  std::sort(names.begin(), names.end());
  names.insert(names.begin(), "config.json");
  std::vector<uint8_t> records;
  for (const std::string& name : names) {
    const std::string file = (fs::path(path) / name).string();
    ASTR_ASSIGN_OR_RETURN(auto map, MappedFile::Open(file));
    records.insert(records.end(), name.begin(), name.end());
    records.push_back(0);
    AppendU64(&records, map->size());
    AppendU64(&records, ContentHash64(map->data(), map->size()));
  }
  return ContentHashHex(ContentHash64(records.data(), records.size()));
}

}  // namespace astr::model
