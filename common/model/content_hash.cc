#include "common/model/content_hash.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

#include "common/base/mapped_file.h"

// Header-only: every xxHash function is inlined here, so there is no library to link (the bare GPU
// build has only the header, staged by scripts/stage_deps.sh).
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace astr::model {
namespace {

void AppendU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

uint64_t ContentHash64(const void* data, size_t size, uint64_t seed) {
  return XXH64(data, size, seed);
}

ContentHasher64::ContentHasher64(uint64_t seed) : state_(XXH64_createState()) {
  XXH64_reset(static_cast<XXH64_state_t*>(state_), seed);
}
ContentHasher64::~ContentHasher64() {
  if (state_ != nullptr) XXH64_freeState(static_cast<XXH64_state_t*>(state_));
}
ContentHasher64::ContentHasher64(ContentHasher64&& other) noexcept : state_(other.state_) {
  other.state_ = nullptr;
}
ContentHasher64& ContentHasher64::operator=(ContentHasher64&& other) noexcept {
  std::swap(state_, other.state_);
  return *this;
}
void ContentHasher64::Update(const void* data, size_t size) {
  if (size > 0) XXH64_update(static_cast<XXH64_state_t*>(state_), data, size);
}
uint64_t ContentHasher64::Digest() const {
  return XXH64_digest(static_cast<const XXH64_state_t*>(state_));
}

uint64_t ContentHash3_64(const void* data, size_t size, uint64_t seed) {
  return XXH3_64bits_withSeed(data, size, seed);
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
