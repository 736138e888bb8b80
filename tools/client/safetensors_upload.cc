#include "tools/client/safetensors_upload.h"

#include <algorithm>
#include <tuple>

#include "common/model/content_hash.h"

namespace astr::cli {
namespace {

// TensorSpec.dtype's short names.
const char* SpecDType(model::DType dtype) {
  switch (dtype) {
    case model::DType::kF32:
      return "f32";
    case model::DType::kF16:
      return "f16";
    case model::DType::kBF16:
      return "bf16";
    default:
      return nullptr;
  }
}

}  // namespace

StatusOr<SafetensorsUpload> ReadSafetensorsUpload(const std::string& path,
                                                  const std::string& label) {
  SafetensorsUpload upload;
  ASTR_ASSIGN_OR_RETURN(upload.file, model::SafetensorsFile::Open(path));
  std::vector<const model::SafetensorsTensor*> order;
  for (const auto& [name, tensor] : upload.file->tensors()) order.push_back(&tensor);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return std::tie(a->file, a->data) < std::tie(b->file, b->data);
  });
  upload.manifest.set_label(label);
  for (const model::SafetensorsTensor* t : order) {
    ASTR_ASSIGN_OR_RETURN(const model::DType dtype, upload.file->ReadableDType(*t));
    const char* dtype_name = SpecDType(dtype);
    if (dtype_name == nullptr) {
      return UnimplementedError(t->file + ": tensor '" + t->name + "' has dtype " + t->dtype_name +
                                ", which a weight update cannot carry");
    }
    v1::TensorSpec* spec = upload.manifest.add_tensors();
    spec->set_name(t->name);
    spec->set_dtype(dtype_name);
    for (int64_t d : t->shape) spec->add_shape(d);
    spec->set_xxh64(model::ContentHash64(t->data, t->bytes));
    upload.data.emplace_back(t->data, t->bytes);
    upload.total_bytes += static_cast<int64_t>(t->bytes);
  }
  return upload;
}

}  // namespace astr::cli
