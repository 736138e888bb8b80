// GGUF (v2 / v3) reader and writer.
//
// Reader: the file is memory-mapped read-only; metadata is parsed into GgufValues, tensor data is
// read in place (GgufTensor::data points into the mapping). Every count, length and offset is
// bounds-checked, the metadata's arrays hold at most 2^23 elements in all (so that memory stays
// within a small multiple of what real vocabularies need), and each error names the file and the
// key or tensor it was reading.
//
// Writer: metadata and tensor infos are declared first, then tensor data is streamed in declaration
// order, so a multi-GB model never has to sit in memory.
//
// Shapes: GGUF stores `ne` with ne[0] innermost (the input dim of a projection). GgufTensor::shape
// is the reverse (torch order, outermost first); the writer takes torch order too.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/base/mapped_file.h"
#include "common/base/status.h"
#include "common/model/tensor_dtype.h"

namespace astr::model {

// gguf_type.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string GgufTypeName(GgufType type);
bool GgufTypeIsInteger(GgufType type);

// One metadata value. Integers are kept in `i` (signed) or `u` (unsigned 64-bit), floats in `f`.
struct GgufValue {
  GgufType type = GgufType::kU32;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0.0;
  bool b = false;
  std::string s;
  GgufType elem_type = GgufType::kU8;  // arrays only
  std::vector<GgufValue> array;        // arrays only

  static GgufValue U8(uint8_t v) { return Unsigned(GgufType::kU8, v); }
  static GgufValue I8(int8_t v) { return Signed(GgufType::kI8, v); }
  static GgufValue U16(uint16_t v) { return Unsigned(GgufType::kU16, v); }
  static GgufValue I16(int16_t v) { return Signed(GgufType::kI16, v); }
  static GgufValue U32(uint32_t v) { return Unsigned(GgufType::kU32, v); }
  static GgufValue I32(int32_t v) { return Signed(GgufType::kI32, v); }
  static GgufValue U64(uint64_t v) { return Unsigned(GgufType::kU64, v); }
  static GgufValue I64(int64_t v) { return Signed(GgufType::kI64, v); }
  static GgufValue F32(float v);
  static GgufValue F64(double v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string v);
  static GgufValue Array(GgufType elem_type, std::vector<GgufValue> elems);
  static GgufValue StringArray(const std::vector<std::string>& v);
  static GgufValue F32Array(const std::vector<float>& v);
  static GgufValue I32Array(const std::vector<int32_t>& v);

  bool IsInteger() const { return GgufTypeIsInteger(type); }
  bool IsFloat() const { return type == GgufType::kF32 || type == GgufType::kF64; }
  // Short human-readable rendering (arrays abbreviated).
  std::string ToString() const;
  bool operator==(const GgufValue& other) const;

 private:
  static GgufValue Unsigned(GgufType t, uint64_t v);
  static GgufValue Signed(GgufType t, int64_t v);
};

// Which ggml tensor types we can read. Others are named in errors by GgmlTypeName.
std::string GgmlTypeName(uint32_t ggml_type);
StatusOr<DType> DTypeFromGgml(uint32_t ggml_type);
uint32_t GgmlFromDType(DType dtype);

struct GgufTensor {
  std::string name;
  std::vector<int64_t> ne;     // ggml order: ne[0] innermost
  std::vector<int64_t> shape;  // torch order: reverse of ne
  DType dtype = DType::kF32;
  uint64_t offset = 0;  // from the start of the data section
  int64_t num_elements = 0;
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
};

class GgufFile {
 public:
  static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return map_->size(); }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* Find(const std::string& key) const;
  // Typed getters: NotFound if absent, InvalidArgument if the type does not fit; errors name file +
  // key.
  StatusOr<int64_t> GetInt(const std::string& key) const;
  StatusOr<double> GetFloat(const std::string& key) const;  // accepts integer values too
  StatusOr<std::string> GetString(const std::string& key) const;
  StatusOr<bool> GetBool(const std::string& key) const;
  // Same, with a default when the key is absent (a present key of the wrong type is still an
  // error).
  StatusOr<int64_t> GetInt(const std::string& key, int64_t default_value) const;
  StatusOr<double> GetFloat(const std::string& key, double default_value) const;
  StatusOr<std::string> GetString(const std::string& key, const std::string& default_value) const;
  StatusOr<bool> GetBool(const std::string& key, bool default_value) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(const std::string& name) const;
  // Dequantizes a tensor of any supported type to f32 (out is resized to num_elements).
  Status ReadF32(const GgufTensor& tensor, std::vector<float>* out) const;

 private:
  friend class GgufParser;
  GgufFile() = default;

  std::string path_;
  std::unique_ptr<MappedFile> map_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t> metadata_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Streaming GGUF v3 writer:
//   GgufWriter w;  w.AddMetadata("general.architecture", GgufValue::String("llama"));
//   w.AddTensor("token_embd.weight", {vocab, hidden}, DType::kF16);
//   ASTR_RETURN_IF_ERROR(w.Open(path));
//   ASTR_RETURN_IF_ERROR(w.WriteTensorData(bytes, n));  // once or in pieces, tensors in order
//   ASTR_RETURN_IF_ERROR(w.Close());
class GgufWriter {
 public:
  GgufWriter() = default;
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // general.alignment is written as a u32 key when it differs from the default 32.
  void SetAlignment(uint32_t alignment) { alignment_ = alignment; }
  void AddMetadata(const std::string& key, GgufValue value);
  // `shape` in torch order. Must come before Open().
  void AddTensor(const std::string& name, const std::vector<int64_t>& shape, DType dtype);

  // Creates the file and writes header, metadata and tensor infos.
  Status Open(const std::string& path);
  // Appends raw bytes of the current tensor; a tensor may be written in several pieces. Moving past
  // a tensor's byte size is an error naming the tensor.
  Status WriteTensorData(const void* data, uint64_t bytes);
  // Checks every tensor was written in full, then closes the file.
  Status Close();

 private:
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> shape;
    DType dtype;
    uint64_t bytes = 0;
  };
  Status Put(const void* data, uint64_t bytes);
  Status PutString(const std::string& s);
  Status PutValue(const GgufValue& v, int depth);
  Status PadTo(uint64_t alignment);

  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t written_ = 0;
  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<PendingTensor> tensors_;
  size_t current_ = 0;          // tensor being written
  uint64_t current_bytes_ = 0;  // bytes of it written so far
};

// Convenience for small files (tests): writes `tensors` (name, torch shape, dtype, raw bytes).
struct GgufTensorData {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
  std::vector<uint8_t> bytes;
};
Status WriteGgufFile(const std::string& path,
                     const std::vector<std::pair<std::string, GgufValue>>& metadata,
                     const std::vector<GgufTensorData>& tensors, uint32_t alignment = 32);

}  // namespace astr::model
