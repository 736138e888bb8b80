#include "common/model/gguf.h"

#include <cinttypes>
#include <cstring>
#include <limits>
#include <sstream>

namespace astr::model {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are treated as corrupt
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
// Array elements the metadata may hold in all. Each becomes a GgufValue of ~100 bytes, so without a
// budget a file could ask for 100x its size in memory (a u8 array over a multi-GB tensor section).
// The largest real vocabularies (~262k tokens: tokens, scores, types, merges) hold ~1M.
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 23;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// Fixed element size of a scalar gguf type; 0 for string / array.
uint64_t ScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;
  }
}

bool ValidType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

}  // namespace

std::string GgufTypeName(GgufType type) {
  static const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                 "bool", "string", "array", "u64", "i64", "f64"};
  const uint32_t t = static_cast<uint32_t>(type);
  return t < 13 ? kNames[t] : "type#" + std::to_string(t);
}

GgufValue GgufValue::Unsigned(GgufType t, uint64_t v) {
  GgufValue out;
  out.type = t;
  out.u = v;
  out.i = static_cast<int64_t>(v);
  return out;
}
GgufValue GgufValue::Signed(GgufType t, int64_t v) {
  GgufValue out;
  out.type = t;
  out.i = v;
  out.u = static_cast<uint64_t>(v);
  return out;
}
GgufValue GgufValue::F32(float v) {
  GgufValue out;
  out.type = GgufType::kF32;
  out.f = v;
  return out;
}
GgufValue GgufValue::F64(double v) {
  GgufValue out;
  out.type = GgufType::kF64;
  out.f = v;
  return out;
}
GgufValue GgufValue::Bool(bool v) {
  GgufValue out;
  out.type = GgufType::kBool;
  out.b = v;
  return out;
}
GgufValue GgufValue::String(std::string v) {
  GgufValue out;
  out.type = GgufType::kString;
  out.s = std::move(v);
  return out;
}
GgufValue GgufValue::Array(GgufType elem_type, std::vector<GgufValue> elems) {
  GgufValue out;
  out.type = GgufType::kArray;
  out.elem_type = elem_type;
  out.array = std::move(elems);
  return out;
}
GgufValue GgufValue::StringArray(const std::vector<std::string>& v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (const auto& s : v) elems.push_back(String(s));
  return Array(GgufType::kString, std::move(elems));
}
GgufValue GgufValue::F32Array(const std::vector<float>& v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (float x : v) elems.push_back(F32(x));
  return Array(GgufType::kF32, std::move(elems));
}
GgufValue GgufValue::I32Array(const std::vector<int32_t>& v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (int32_t x : v) elems.push_back(I32(x));
  return Array(GgufType::kI32, std::move(elems));
}

bool GgufTypeIsInteger(GgufType type) {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

std::string GgufValue::ToString() const {
  std::ostringstream os;
  switch (type) {
    case GgufType::kString:
      return "\"" + s + "\"";
    case GgufType::kBool:
      return b ? "true" : "false";
    case GgufType::kF32:
    case GgufType::kF64:
      os << f;
      return os.str();
    case GgufType::kU64:
    case GgufType::kU32:
    case GgufType::kU16:
    case GgufType::kU8:
      return std::to_string(u);
    case GgufType::kArray: {
      os << "[" << GgufTypeName(elem_type) << " x " << array.size() << ": ";
      for (size_t k = 0; k < array.size() && k < 4; ++k)
        os << (k ? ", " : "") << array[k].ToString();
      if (array.size() > 4) os << ", ...";
      os << "]";
      return os.str();
    }
    default:
      return std::to_string(i);
  }
}

bool GgufValue::operator==(const GgufValue& o) const {
  if (type != o.type) return false;
  switch (type) {
    case GgufType::kString:
      return s == o.s;
    case GgufType::kBool:
      return b == o.b;
    case GgufType::kF32:
    case GgufType::kF64:
      return f == o.f;
    case GgufType::kArray:
      return elem_type == o.elem_type && array == o.array;
    default:
      return u == o.u;
  }
}

std::string GgmlTypeName(uint32_t t) {
  static const char* kNames[] = {
      "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
      "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
      "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
      "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
      "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
      "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  return t < sizeof(kNames) / sizeof(kNames[0]) ? kNames[t] : "ggml_type#" + std::to_string(t);
}

StatusOr<DType> DTypeFromGgml(uint32_t t) {
  switch (t) {
    case 0:
      return DType::kF32;
    case 1:
      return DType::kF16;
    case 2:
      return DType::kQ4_0;
    case 3:
      return DType::kQ4_1;
    case 6:
      return DType::kQ5_0;
    case 7:
      return DType::kQ5_1;
    case 8:
      return DType::kQ8_0;
    case 10:
      return DType::kQ2_K;
    case 11:
      return DType::kQ3_K;
    case 12:
      return DType::kQ4_K;
    case 13:
      return DType::kQ5_K;
    case 14:
      return DType::kQ6_K;
    case 20:
      return DType::kIQ4_NL;
    case 23:
      return DType::kIQ4_XS;
    case 30:
      return DType::kBF16;
    case 39:
      return DType::kMXFP4;
    default:
      return UnimplementedError("unsupported ggml type " + GgmlTypeName(t) +
                                " (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                                "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4)");
  }
}

uint32_t GgmlFromDType(DType d) {
  switch (d) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ8_0:
      return 8;
    case DType::kBF16:
      return 30;
    case DType::kQ5_0:
      return 6;
    case DType::kQ5_1:
      return 7;
    case DType::kQ2_K:
      return 10;
    case DType::kQ3_K:
      return 11;
    case DType::kQ4_K:
      return 12;
    case DType::kQ5_K:
      return 13;
    case DType::kQ6_K:
      return 14;
    case DType::kIQ4_NL:
      return 20;
    case DType::kIQ4_XS:
      return 23;
    case DType::kMXFP4:
      return 39;
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------------
// Reader

// Walks the mapped bytes; every read is bounds-checked and an error says what was being read.
class GgufParser {
 public:
  GgufParser(GgufFile* file) : f_(file), data_(file->map_->data()), size_(file->map_->size()) {}

  Status Parse();

 private:
  Status Error(const std::string& what) const {
    return DataLossError(f_->path_ + ": " + what + " (at byte " + std::to_string(pos_) + " of " +
                         std::to_string(size_) + ")");
  }
  Status Need(uint64_t n, const std::string& what) const {
    if (n > size_ - pos_) return Error("truncated file while reading " + what);
    return OkStatus();
  }
  template <typename T>
  Status Read(T* out, const std::string& what) {
    ASTR_RETURN_IF_ERROR(Need(sizeof(T), what));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }
  Status ReadString(std::string* out, const std::string& what);
  Status ReadValue(GgufType type, GgufValue* out, const std::string& what, int depth);
  Status ParseMetadata(uint64_t count);
  Status ParseTensorInfos(uint64_t count);
  Status PlaceTensors();

  GgufFile* f_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t values_ = 0;  // array elements read so far, against kMaxMetadataValues
};

Status GgufParser::ReadString(std::string* out, const std::string& what) {
  uint64_t len = 0;
  ASTR_RETURN_IF_ERROR(Read(&len, what + " (string length)"));
  if (len > size_ - pos_) {
    return Error("string length " + std::to_string(len) + " of " + what + " runs past end of file");
  }
  out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
  pos_ += len;
  return OkStatus();
}

Status GgufParser::ReadValue(GgufType type, GgufValue* out, const std::string& what, int depth) {
  out->type = type;
  switch (type) {
#define ASTR_GGUF_INT(TAG, CTYPE, FIELD)  \
  case GgufType::TAG: {                   \
    CTYPE v{};                            \
    ASTR_RETURN_IF_ERROR(Read(&v, what)); \
    out->i = static_cast<int64_t>(v);     \
    out->u = static_cast<uint64_t>(v);    \
    return OkStatus();                    \
  }
    ASTR_GGUF_INT(kU8, uint8_t, u)
    ASTR_GGUF_INT(kI8, int8_t, i)
    ASTR_GGUF_INT(kU16, uint16_t, u)
    ASTR_GGUF_INT(kI16, int16_t, i)
    ASTR_GGUF_INT(kU32, uint32_t, u)
    ASTR_GGUF_INT(kI32, int32_t, i)
    ASTR_GGUF_INT(kU64, uint64_t, u)
    ASTR_GGUF_INT(kI64, int64_t, i)
#undef ASTR_GGUF_INT
    case GgufType::kF32: {
      float v = 0;
      ASTR_RETURN_IF_ERROR(Read(&v, what));
      out->f = v;
      return OkStatus();
    }
    case GgufType::kF64:
      return Read(&out->f, what);
    case GgufType::kBool: {
      uint8_t v = 0;
      ASTR_RETURN_IF_ERROR(Read(&v, what));
      if (v > 1) return Error("bool value " + std::to_string(v) + " of " + what);
      out->b = v != 0;
      return OkStatus();
    }
    case GgufType::kString:
      return ReadString(&out->s, what);
    case GgufType::kArray: {
      if (depth >= kMaxArrayDepth) return Error("arrays nested too deeply in " + what);
      uint32_t elem = 0;
      uint64_t count = 0;
      ASTR_RETURN_IF_ERROR(Read(&elem, what + " (array type)"));
      if (!ValidType(elem))
        return Error("invalid array element type " + std::to_string(elem) + " of " + what);
      ASTR_RETURN_IF_ERROR(Read(&count, what + " (array length)"));
      // Every element takes at least one byte (a string or array at least 8): reject counts that
      // cannot fit before allocating anything.
      const GgufType elem_type = static_cast<GgufType>(elem);
      const uint64_t min_size = ScalarSize(elem_type)            ? ScalarSize(elem_type)
                                : elem_type == GgufType::kString ? 8
                                                                 : 12;
      if (count > (size_ - pos_) / min_size) {
        return Error("array length " + std::to_string(count) + " of " + what +
                     " runs past end of file");
      }
      if (count > kMaxMetadataValues - values_) {
        return Error("array length " + std::to_string(count) + " of " + what +
                     " takes the metadata past " + std::to_string(kMaxMetadataValues) +
                     " array elements in all");
      }
      values_ += count;
      out->elem_type = static_cast<GgufType>(elem);
      out->array.resize(count);
      for (uint64_t k = 0; k < count; ++k) {
        ASTR_RETURN_IF_ERROR(ReadValue(out->elem_type, &out->array[k], what, depth + 1));
      }
      return OkStatus();
    }
  }
  return Error("invalid value type " + std::to_string(static_cast<uint32_t>(type)) + " of " + what);
}

Status GgufParser::ParseMetadata(uint64_t count) {
  f_->metadata_.reserve(count);
  for (uint64_t k = 0; k < count; ++k) {
    std::string key;
    ASTR_RETURN_IF_ERROR(ReadString(&key, "metadata key #" + std::to_string(k)));
    uint32_t type = 0;
    ASTR_RETURN_IF_ERROR(Read(&type, "type of key " + Quote(key)));
    if (!ValidType(type)) {
      return Error("invalid value type " + std::to_string(type) + " of key " + Quote(key));
    }
    GgufValue value;
    ASTR_RETURN_IF_ERROR(ReadValue(static_cast<GgufType>(type), &value, "key " + Quote(key), 0));
    if (f_->metadata_index_.count(key)) return Error("duplicate key " + Quote(key));
    f_->metadata_index_[key] = f_->metadata_.size();
    f_->metadata_.emplace_back(std::move(key), std::move(value));
  }
  return OkStatus();
}

Status GgufParser::ParseTensorInfos(uint64_t count) {
  f_->tensors_.reserve(count);
  for (uint64_t k = 0; k < count; ++k) {
    GgufTensor t;
    ASTR_RETURN_IF_ERROR(ReadString(&t.name, "name of tensor #" + std::to_string(k)));
    const std::string what = "tensor " + Quote(t.name);
    uint32_t n_dims = 0;
    ASTR_RETURN_IF_ERROR(Read(&n_dims, what + " (n_dims)"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return Error(what + " has " + std::to_string(n_dims) + " dims (expected 1.." +
                   std::to_string(kMaxDims) + ")");
    }
    t.num_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      ASTR_RETURN_IF_ERROR(Read(&ne, what + " (dims)"));
      // Cap each dim and the product so that byte sizes cannot overflow.
      if (ne > (uint64_t{1} << 40) ||
          (ne != 0 && static_cast<uint64_t>(t.num_elements) > (uint64_t{1} << 50) / ne)) {
        return Error(what + " has an absurd dimension " + std::to_string(ne));
      }
      t.ne.push_back(static_cast<int64_t>(ne));
      t.num_elements *= static_cast<int64_t>(ne);
    }
    t.shape.assign(t.ne.rbegin(), t.ne.rend());
    uint32_t ggml_type = 0;
    ASTR_RETURN_IF_ERROR(Read(&ggml_type, what + " (type)"));
    auto dtype = DTypeFromGgml(ggml_type);
    if (!dtype.ok())
      return Status(dtype.status().code(),
                    f_->path_ + ": " + what + ": " + dtype.status().message());
    t.dtype = *dtype;
    if (t.ne[0] % DTypeBlockElements(t.dtype) != 0) {
      return Error(what + ": row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                   std::string(DTypeName(t.dtype)) + " block size");
    }
    ASTR_ASSIGN_OR_RETURN(t.bytes, DTypeByteSize(t.dtype, t.num_elements));
    ASTR_RETURN_IF_ERROR(Read(&t.offset, what + " (offset)"));
    if (f_->tensor_index_.count(t.name)) return Error("duplicate tensor " + Quote(t.name));
    f_->tensor_index_[t.name] = f_->tensors_.size();
    f_->tensors_.push_back(std::move(t));
  }
  return OkStatus();
}

Status GgufParser::PlaceTensors() {
  const uint64_t align = f_->alignment_;
  f_->data_offset_ = (pos_ + align - 1) / align * align;
  if (f_->data_offset_ > size_ && !f_->tensors_.empty()) {
    return Error("truncated file: data section starts past end of file");
  }
  for (GgufTensor& t : f_->tensors_) {
    const std::string what = "tensor " + Quote(t.name);
    if (t.offset % align != 0) {
      return Error(what + " offset " + std::to_string(t.offset) + " is not aligned to " +
                   std::to_string(align));
    }
    const uint64_t avail = size_ - f_->data_offset_;
    if (t.offset > avail || t.bytes > avail - t.offset) {
      return DataLossError(f_->path_ + ": " + what + " data [" + std::to_string(t.offset) + ", +" +
                           std::to_string(t.bytes) + ") runs past end of file (data section has " +
                           std::to_string(avail) + " bytes; truncated file?)");
    }
    t.data = data_ + f_->data_offset_ + t.offset;
  }
  return OkStatus();
}

Status GgufParser::Parse() {
  uint32_t magic = 0;
  ASTR_RETURN_IF_ERROR(Read(&magic, "magic"));
  if (magic != kMagic) {
    return InvalidArgumentError(f_->path_ + ": not a GGUF file (bad magic)");
  }
  ASTR_RETURN_IF_ERROR(Read(&f_->version_, "version"));
  if (f_->version_ != 2 && f_->version_ != 3) {
    return UnimplementedError(f_->path_ + ": unsupported GGUF version " +
                              std::to_string(f_->version_) + " (supported: 2, 3)");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  ASTR_RETURN_IF_ERROR(Read(&n_tensors, "tensor count"));
  ASTR_RETURN_IF_ERROR(Read(&n_kv, "metadata count"));
  // A key takes at least 12 bytes, a tensor info at least 24.
  if (n_kv > size_ / 12) return Error("absurd metadata count " + std::to_string(n_kv));
  if (n_tensors > size_ / 24) return Error("absurd tensor count " + std::to_string(n_tensors));
  ASTR_RETURN_IF_ERROR(ParseMetadata(n_kv));
  if (const GgufValue* a = f_->Find("general.alignment")) {
    if (!a->IsInteger() || a->u == 0 || a->u > 65536 || (a->u & (a->u - 1)) != 0) {
      return Error("key 'general.alignment' must be a power of two up to 65536, got " +
                   a->ToString());
    }
    f_->alignment_ = a->u;
  }
  ASTR_RETURN_IF_ERROR(ParseTensorInfos(n_tensors));
  return PlaceTensors();
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  ASTR_ASSIGN_OR_RETURN(f->map_, MappedFile::Open(path));
  GgufParser parser(f.get());
  ASTR_RETURN_IF_ERROR(parser.Parse());
  return f;
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

StatusOr<int64_t> GgufFile::GetInt(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(path_ + ": missing key " + Quote(key));
  if (!v->IsInteger()) {
    return InvalidArgumentError(path_ + ": key " + Quote(key) + " is " + GgufTypeName(v->type) +
                                ", expected an integer");
  }
  if (v->type == GgufType::kU64 && v->u > static_cast<uint64_t>(INT64_MAX)) {
    return InvalidArgumentError(path_ + ": key " + Quote(key) + " value out of range");
  }
  return v->i;
}

StatusOr<double> GgufFile::GetFloat(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(path_ + ": missing key " + Quote(key));
  if (v->IsFloat()) return v->f;
  if (v->IsInteger()) return static_cast<double>(v->i);
  return InvalidArgumentError(path_ + ": key " + Quote(key) + " is " + GgufTypeName(v->type) +
                              ", expected a number");
}

StatusOr<std::string> GgufFile::GetString(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(path_ + ": missing key " + Quote(key));
  if (v->type != GgufType::kString) {
    return InvalidArgumentError(path_ + ": key " + Quote(key) + " is " + GgufTypeName(v->type) +
                                ", expected a string");
  }
  return v->s;
}

StatusOr<bool> GgufFile::GetBool(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(path_ + ": missing key " + Quote(key));
  if (v->type != GgufType::kBool) {
    return InvalidArgumentError(path_ + ": key " + Quote(key) + " is " + GgufTypeName(v->type) +
                                ", expected a bool");
  }
  return v->b;
}

StatusOr<int64_t> GgufFile::GetInt(const std::string& key, int64_t dflt) const {
  return Find(key) ? GetInt(key) : StatusOr<int64_t>(dflt);
}
StatusOr<double> GgufFile::GetFloat(const std::string& key, double dflt) const {
  return Find(key) ? GetFloat(key) : StatusOr<double>(dflt);
}
StatusOr<std::string> GgufFile::GetString(const std::string& key, const std::string& dflt) const {
  return Find(key) ? GetString(key) : StatusOr<std::string>(dflt);
}
StatusOr<bool> GgufFile::GetBool(const std::string& key, bool dflt) const {
  return Find(key) ? GetBool(key) : StatusOr<bool>(dflt);
}

const GgufTensor* GgufFile::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Status GgufFile::ReadF32(const GgufTensor& t, std::vector<float>* out) const {
  out->resize(static_cast<size_t>(t.num_elements));
  DequantizeToF32(t.dtype, t.data, t.num_elements, out->data());
  return OkStatus();
}

// ---------------------------------------------------------------------------------------------------
// Writer

GgufWriter::~GgufWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void GgufWriter::AddMetadata(const std::string& key, GgufValue value) {
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::AddTensor(const std::string& name, const std::vector<int64_t>& shape,
                           DType dtype) {
  tensors_.push_back(PendingTensor{name, shape, dtype, 0});
}

Status GgufWriter::Put(const void* data, uint64_t bytes) {
  if (bytes == 0) return OkStatus();
  if (std::fwrite(data, 1, bytes, file_) != bytes) {
    return InternalError(path_ + ": write failed (disk full?)");
  }
  written_ += bytes;
  return OkStatus();
}

Status GgufWriter::PutString(const std::string& s) {
  const uint64_t len = s.size();
  ASTR_RETURN_IF_ERROR(Put(&len, 8));
  return Put(s.data(), len);
}

Status GgufWriter::PutValue(const GgufValue& v, int depth) {
  switch (v.type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      // Little-endian host: the low bytes of the 64-bit value are the narrow value.
      return Put(&v.u, ScalarSize(v.type));
    case GgufType::kF32: {
      const float x = static_cast<float>(v.f);
      return Put(&x, 4);
    }
    case GgufType::kF64:
      return Put(&v.f, 8);
    case GgufType::kBool: {
      const uint8_t x = v.b ? 1 : 0;
      return Put(&x, 1);
    }
    case GgufType::kString:
      return PutString(v.s);
    case GgufType::kArray: {
      if (depth >= kMaxArrayDepth)
        return InvalidArgumentError(path_ + ": arrays nested too deeply");
      const uint32_t elem = static_cast<uint32_t>(v.elem_type);
      const uint64_t count = v.array.size();
      ASTR_RETURN_IF_ERROR(Put(&elem, 4));
      ASTR_RETURN_IF_ERROR(Put(&count, 8));
      for (const GgufValue& e : v.array) {
        if (e.type != v.elem_type) {
          return InvalidArgumentError(path_ + ": array of " + GgufTypeName(v.elem_type) +
                                      " holds a " + GgufTypeName(e.type));
        }
        ASTR_RETURN_IF_ERROR(PutValue(e, depth + 1));
      }
      return OkStatus();
    }
  }
  return InvalidArgumentError(path_ + ": invalid metadata type");
}

Status GgufWriter::PadTo(uint64_t alignment) {
  static const uint8_t kZeros[64 * 1024] = {};
  const uint64_t pad = (alignment - written_ % alignment) % alignment;
  return Put(kZeros, pad);
}

Status GgufWriter::Open(const std::string& path) {
  path_ = path;
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0 || alignment_ > 65536) {
    return InvalidArgumentError(path + ": alignment must be a power of two up to 65536");
  }
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) return InvalidArgumentError(path + ": cannot create file");
  std::vector<std::pair<std::string, GgufValue>> meta = metadata_;
  if (alignment_ != 32) meta.emplace_back("general.alignment", GgufValue::U32(alignment_));
  const uint32_t header[2] = {kMagic, 3};
  const uint64_t counts[2] = {tensors_.size(), meta.size()};
  ASTR_RETURN_IF_ERROR(Put(header, 8));
  ASTR_RETURN_IF_ERROR(Put(counts, 16));
  for (const auto& [key, value] : meta) {
    ASTR_RETURN_IF_ERROR(PutString(key));
    const uint32_t type = static_cast<uint32_t>(value.type);
    ASTR_RETURN_IF_ERROR(Put(&type, 4));
    ASTR_RETURN_IF_ERROR(PutValue(value, 0).WithContext("key '" + key + "'"));
  }
  uint64_t offset = 0;
  for (PendingTensor& t : tensors_) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (t.shape.empty() || t.shape.size() > kMaxDims ||
        t.shape.back() % DTypeBlockElements(t.dtype) != 0) {
      return InvalidArgumentError(path + ": tensor '" + t.name + "' has a shape that " +
                                  std::string(DTypeName(t.dtype)) + " cannot store");
    }
    ASTR_ASSIGN_OR_RETURN(t.bytes, DTypeByteSize(t.dtype, n));
    ASTR_RETURN_IF_ERROR(PutString(t.name));
    const uint32_t n_dims = static_cast<uint32_t>(t.shape.size());
    ASTR_RETURN_IF_ERROR(Put(&n_dims, 4));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) {
      const uint64_t ne = static_cast<uint64_t>(*it);
      ASTR_RETURN_IF_ERROR(Put(&ne, 8));
    }
    const uint32_t type = GgmlFromDType(t.dtype);
    ASTR_RETURN_IF_ERROR(Put(&type, 4));
    ASTR_RETURN_IF_ERROR(Put(&offset, 8));
    offset += (t.bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  ASTR_RETURN_IF_ERROR(PadTo(alignment_));
  current_ = 0;
  current_bytes_ = 0;
  return OkStatus();
}

Status GgufWriter::WriteTensorData(const void* data, uint64_t bytes) {
  if (file_ == nullptr) return FailedPreconditionError("GgufWriter: WriteTensorData before Open");
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    if (current_ >= tensors_.size()) {
      return InvalidArgumentError(path_ + ": more tensor data than declared tensors");
    }
    const PendingTensor& t = tensors_[current_];
    const uint64_t n = std::min(bytes, t.bytes - current_bytes_);
    ASTR_RETURN_IF_ERROR(Put(p, n));
    p += n;
    bytes -= n;
    current_bytes_ += n;
    if (current_bytes_ == t.bytes) {
      ASTR_RETURN_IF_ERROR(PadTo(alignment_));
      ++current_;
      current_bytes_ = 0;
    }
  }
  // Zero-sized tensors complete without data.
  while (current_ < tensors_.size() && tensors_[current_].bytes == 0) ++current_;
  return OkStatus();
}

Status GgufWriter::Close() {
  if (file_ == nullptr) return FailedPreconditionError("GgufWriter: Close before Open");
  while (current_ < tensors_.size() && tensors_[current_].bytes == 0) ++current_;
  Status status;
  if (current_ < tensors_.size()) {
    status = InvalidArgumentError(path_ + ": tensor '" + tensors_[current_].name +
                                  "' was not written in full");
  }
  if (std::fclose(file_) != 0 && status.ok()) status = InternalError(path_ + ": close failed");
  file_ = nullptr;
  return status;
}

Status WriteGgufFile(const std::string& path,
                     const std::vector<std::pair<std::string, GgufValue>>& metadata,
                     const std::vector<GgufTensorData>& tensors, uint32_t alignment) {
  GgufWriter w;
  w.SetAlignment(alignment);
  for (const auto& [k, v] : metadata) w.AddMetadata(k, v);
  for (const auto& t : tensors) w.AddTensor(t.name, t.shape, t.dtype);
  ASTR_RETURN_IF_ERROR(w.Open(path));
  for (const auto& t : tensors)
    ASTR_RETURN_IF_ERROR(w.WriteTensorData(t.bytes.data(), t.bytes.size()));
  return w.Close();
}

}  // namespace astr::model
