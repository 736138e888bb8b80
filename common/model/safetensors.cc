#include "common/model/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/base/file_util.h"
#include "common/base/json_depth.h"

namespace astr::model {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// A header larger than this is refused, as the reference implementation (huggingface/safetensors)
// refuses it; real ones are a few MB at most. Parsed JSON takes ~10x the text, so this also bounds
// the memory a hostile header can ask for.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Most dims a tensor may have (real checkpoints use up to 5); a longer shape is corrupt.
constexpr size_t kMaxDims = 8;

// Element size of every safetensors dtype, so that headers of files holding tensors we do not read
// can still be validated.
std::optional<uint64_t> ElementSize(const std::string& dtype) {
  static const std::map<std::string, uint64_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = kSizes.find(dtype);
  if (it == kSizes.end()) return std::nullopt;
  return it->second;
}

std::optional<DType> ReadableDType(const std::string& dtype) {
  if (dtype == "F32") return DType::kF32;
  if (dtype == "F16") return DType::kF16;
  if (dtype == "BF16") return DType::kBF16;
  return std::nullopt;
}

}  // namespace

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  std::string target = path;
  if (fs::is_directory(path)) {
    if (fs::exists(fs::path(path) / "model.safetensors.index.json")) {
      target = (fs::path(path) / "model.safetensors.index.json").string();
    } else if (fs::exists(fs::path(path) / "model.safetensors")) {
      target = (fs::path(path) / "model.safetensors").string();
    } else {
      return NotFoundError(path + ": no model.safetensors or model.safetensors.index.json");
    }
  }
  if (target.size() < 5 || target.substr(target.size() - 5) != ".json") {
    ASTR_RETURN_IF_ERROR(f->AddShard(target));
    return f;
  }
  // Sharded: weight_map names the shard of every tensor.
  f->path_ = target;
  ASTR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(target));
  ASTR_RETURN_IF_ERROR(CheckJsonDepth(text, target));
  json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
      !index["weight_map"].is_object()) {
    return InvalidArgumentError(target + ": not valid JSON with a 'weight_map' object");
  }
  const fs::path dir = fs::path(target).parent_path();
  std::set<std::string> shards;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) {
      return InvalidArgumentError(target + ": weight_map entry '" + name + "' is not a string");
    }
    shards.insert(shard.get<std::string>());
  }
  for (const std::string& shard : shards) {
    if (shard.find("..") != std::string::npos || shard.find('/') != std::string::npos) {
      return InvalidArgumentError(target + ": shard name '" + shard + "' is not a plain file name");
    }
    ASTR_RETURN_IF_ERROR(f->AddShard((dir / shard).string()));
  }
  for (const auto& [name, shard] : index["weight_map"].items()) {
    const SafetensorsTensor* t = f->Find(name);
    const std::string shard_path = (dir / shard.get<std::string>()).string();
    if (t == nullptr || t->file != shard_path) {
      return NotFoundError(target + ": tensor '" + name + "' is not in its shard " + shard_path);
    }
  }
  return f;
}

Status SafetensorsFile::AddShard(const std::string& file) {
  ASTR_ASSIGN_OR_RETURN(auto map, MappedFile::Open(file));
  const uint64_t size = map->size();
  if (size < 8) return DataLossError(file + ": truncated safetensors file (no header size)");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, map->data(), 8);
  if (header_bytes > kMaxHeaderBytes) {
    return InvalidArgumentError(file + ": header size " + std::to_string(header_bytes) +
                                " is more than the " + std::to_string(kMaxHeaderBytes) +
                                " bytes a safetensors header may have");
  }
  if (header_bytes > size - 8) {
    return DataLossError(file + ": header size " + std::to_string(header_bytes) +
                         " exceeds the file (" + std::to_string(size) + " bytes; truncated?)");
  }
  const char* begin = reinterpret_cast<const char*>(map->data() + 8);
  ASTR_RETURN_IF_ERROR(
      CheckJsonDepth(std::string_view(begin, header_bytes), file + ": header", kMaxJsonDepth));
  json header = json::parse(begin, begin + header_bytes, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return InvalidArgumentError(file + ": header is not a JSON object");
  }
  const uint8_t* data = map->data() + 8 + header_bytes;
  const uint64_t data_bytes = size - 8 - header_bytes;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (entry.is_object() && metadata_.empty()) {
        for (const auto& [k, v] : entry.items()) {
          if (v.is_string()) metadata_[k] = v.get<std::string>();
        }
      }
      continue;
    }
    const std::string what = file + ": tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      return InvalidArgumentError(what + ": needs dtype, shape and data_offsets [begin, end]");
    }
    SafetensorsTensor t;
    t.name = name;
    t.file = file;
    t.dtype_name = entry["dtype"].get<std::string>();
    t.dtype = model::ReadableDType(t.dtype_name);
    std::optional<uint64_t> elem = ElementSize(t.dtype_name);
    if (!elem) return InvalidArgumentError(what + ": unknown dtype '" + t.dtype_name + "'");
    if (entry["shape"].size() > kMaxDims) {
      return InvalidArgumentError(what + ": shape has " + std::to_string(entry["shape"].size()) +
                                  " dims, more than " + std::to_string(kMaxDims));
    }
    uint64_t n = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) {
        return InvalidArgumentError(what + ": bad shape " + entry["shape"].dump());
      }
      t.shape.push_back(d.get<int64_t>());
      n *= d.get<uint64_t>();
      if (n > (uint64_t{1} << 50)) return InvalidArgumentError(what + ": absurd shape");
    }
    const auto& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return InvalidArgumentError(what + ": bad data_offsets " + off.dump());
    }
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > data_bytes) {
      return DataLossError(what + ": data_offsets [" + std::to_string(b) + ", " +
                           std::to_string(e) + ") outside the data (" + std::to_string(data_bytes) +
                           " bytes; truncated file?)");
    }
    if (e - b != n * *elem) {
      return InvalidArgumentError(what + ": shape " + entry["shape"].dump() + " x " + t.dtype_name +
                                  " needs " + std::to_string(n * *elem) +
                                  " bytes but data_offsets span " + std::to_string(e - b));
    }
    t.data = data + b;
    t.bytes = e - b;
    if (tensors_.count(name)) return InvalidArgumentError(what + ": appears in two shards");
    tensors_.emplace(name, std::move(t));
  }
  maps_.push_back(std::move(map));
  return OkStatus();
}

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

StatusOr<DType> SafetensorsFile::ReadableDType(const SafetensorsTensor& t) const {
  if (t.dtype) return *t.dtype;
  return UnimplementedError(t.file + ": tensor '" + t.name + "' has dtype " + t.dtype_name +
                            " (supported: F32, F16, BF16)");
}

// ---------------------------------------------------------------------------------------------------

SafetensorsWriter::~SafetensorsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void SafetensorsWriter::AddTensor(const std::string& name, const std::vector<int64_t>& shape,
                                  DType dtype) {
  tensors_.push_back(Pending{name, shape, dtype, 0});
}

Status SafetensorsWriter::Open(const std::string& path) {
  path_ = path;
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (Pending& t : tensors_) {
    if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16) {
      return InvalidArgumentError(path + ": tensor '" + t.name + "': safetensors cannot store " +
                                  std::string(DTypeName(t.dtype)));
    }
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    ASTR_ASSIGN_OR_RETURN(t.bytes, DTypeByteSize(t.dtype, n));
    if (header.contains(t.name))
      return InvalidArgumentError(path + ": duplicate tensor '" + t.name + "'");
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  total_bytes_ = offset;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned, as HF does
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) return InvalidArgumentError(path + ": cannot create file");
  const uint64_t n = text.size();
  if (std::fwrite(&n, 8, 1, file_) != 1 || std::fwrite(text.data(), 1, n, file_) != n) {
    return InternalError(path + ": write failed");
  }
  return OkStatus();
}

Status SafetensorsWriter::WriteTensorData(const void* data, uint64_t bytes) {
  if (file_ == nullptr) return FailedPreconditionError("SafetensorsWriter: write before Open");
  if (bytes > total_bytes_ - written_) {
    return InvalidArgumentError(path_ + ": more tensor data than declared tensors");
  }
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes) {
    return InternalError(path_ + ": write failed (disk full?)");
  }
  written_ += bytes;
  return OkStatus();
}

Status SafetensorsWriter::Close() {
  if (file_ == nullptr) return FailedPreconditionError("SafetensorsWriter: Close before Open");
  Status status;
  if (written_ != total_bytes_) {
    status = InvalidArgumentError(path_ + ": wrote " + std::to_string(written_) + " of " +
                                  std::to_string(total_bytes_) + " tensor bytes");
  }
  if (std::fclose(file_) != 0 && status.ok()) status = InternalError(path_ + ": close failed");
  file_ = nullptr;
  return status;
}

Status WriteSafetensorsFile(const std::string& path,
                            const std::vector<SafetensorsTensorData>& tensors) {
  SafetensorsWriter w;
  for (const auto& t : tensors) w.AddTensor(t.name, t.shape, t.dtype);
  ASTR_RETURN_IF_ERROR(w.Open(path));
  for (const auto& t : tensors)
    ASTR_RETURN_IF_ERROR(w.WriteTensorData(t.bytes.data(), t.bytes.size()));
  return w.Close();
}

}  // namespace astr::model
