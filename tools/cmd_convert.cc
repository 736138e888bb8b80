// `astr convert GGUF OUT_DIR`: rewrites a GGUF model as a Hugging Face folder (config.json,
// generation_config.json, model.safetensors). GGUF llama q/k rows are stored permuted for
// interleaved RoPE; they are permuted back so that the folder is a standard HF llama (rotate_half)
// of the same model.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/base/flags.h"
#include "common/model/model_file.h"
#include "common/model/safetensors.h"
#include "tools/command.h"

namespace astr {
namespace {

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return InternalError(path + ": write failed");
  return OkStatus();
}

bool IsQkProj(const std::string& canonical) {
  const auto ends = [&](const std::string& s) {
    return canonical.size() > s.size() &&
           canonical.compare(canonical.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".q_proj") || ends(".k_proj");
}

Status Convert(const std::string& src, const std::string& out_dir, const std::string& dtype_flag) {
  ASTR_ASSIGN_OR_RETURN(auto model, model::ModelFile::Open(src));
  if (model->format() != model::ModelFile::Format::kGguf)
    return InvalidArgumentError(src + ": not a GGUF file");
  ASTR_RETURN_IF_ERROR(model->ValidateWeights());
  const std::vector<model::WeightSpec> specs = model::ExpectedWeights(model->config());
  bool all_f32 = true;
  for (const model::WeightSpec& w : specs) {
    ASTR_ASSIGN_OR_RETURN(model::TensorView t, model->Raw(w.name));
    all_f32 = all_f32 && t.dtype == model::DType::kF32;
  }
  ASTR_ASSIGN_OR_RETURN(
      model::DType dtype,
      model::ParseDType(dtype_flag.empty() ? (all_f32 ? "f32" : "bf16") : dtype_flag));
  if (dtype != model::DType::kF32 && dtype != model::DType::kF16 && dtype != model::DType::kBF16) {
    return InvalidArgumentError("--dtype must be f32, f16 or bf16");
  }
  model::ModelConfig config = model->config();
  const model::Architecture* arch = model::FindArchitecture(config.architecture);
  if (arch != nullptr && !arch->fused_names.empty()) {
    return UnimplementedError("converting " + config.architecture +
                              " (fused tensors in HF form) is not supported");
  }
  const bool unpermute = config.rope_layout == model::RopeLayout::kInterleaved;
  config.rope_layout = model::RopeLayout::kHalf;
  // Norm weights as HF holds them: the same scale, HF's offset (Gemma: GGUF 1 + w -> HF w).
  if (arch != nullptr) config.norm_weight_offset = arch->hf_norm_weight_offset;
  ASTR_ASSIGN_OR_RETURN(std::string config_json, model::ConfigToHfJson(config));

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return InvalidArgumentError(out_dir + ": cannot create folder: " + ec.message());
  ASTR_RETURN_IF_ERROR(WriteText(out_dir + "/config.json", config_json));
  ASTR_RETURN_IF_ERROR(
      WriteText(out_dir + "/generation_config.json", model::GenerationConfigJson(config)));

  model::SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  for (const model::WeightSpec& s : specs)
    w.AddTensor(model::HfNameFromCanonical(config.architecture, s.name), s.shape, dtype);
  ASTR_RETURN_IF_ERROR(w.Open(out_dir + "/model.safetensors"));
  // One tensor in memory at a time.
  std::vector<float> f32;
  std::vector<uint8_t> bytes;
  for (const model::WeightSpec& s : specs) {
    ASTR_RETURN_IF_ERROR(model->LoadF32(s.name, s.shape, &f32));
    if (unpermute && IsQkProj(s.name)) {
      f32 = model::InterleavedToHalfRows(f32, s.shape[0], s.shape[1], config.head_dim);
    }
    if (const float shift = model::HfNormShift(model->config(), s.name); shift != 0.0f) {
      for (float& x : f32) x -= shift;
    }
    ASTR_ASSIGN_OR_RETURN(uint64_t n,
                          model::DTypeByteSize(dtype, static_cast<int64_t>(f32.size())));
    bytes.resize(n);
    model::QuantizeFromF32(dtype, f32.data(), static_cast<int64_t>(f32.size()), bytes.data());
    ASTR_RETURN_IF_ERROR(w.WriteTensorData(bytes.data(), n));
  }
  ASTR_RETURN_IF_ERROR(w.Close());
  for (const std::string& name : model->TensorNames()) {
    if (model::GgufNameFromCanonical(config.architecture, name).empty()) {
      std::fprintf(stderr, "astr convert: note: tensor '%s' has no HF counterpart; skipped\n",
                   name.c_str());
    }
  }
  std::printf("wrote %s (%s, %zu tensors, %s)\n", out_dir.c_str(), config.architecture.c_str(),
              specs.size(), std::string(model::DTypeName(dtype)).c_str());
  return OkStatus();
}

int RunConvert(int argc, const char* const* argv) {
  std::string src, out_dir, dtype;
  FlagSet fs(argv[0], "Convert a GGUF model to a Hugging Face folder (safetensors).");
  fs.Positional("gguf", &src, "Source .gguf file.");
  fs.Positional("out_dir", &out_dir, "Output folder (created).");
  fs.String("dtype", &dtype,
            "f32 | f16 | bf16 (default: f32 if the source is all F32, else bf16).");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  Status s = Convert(src, out_dir, dtype);
  if (!s.ok()) {
    std::fprintf(stderr, "astr convert: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

ASTR_REGISTER_COMMAND("convert", "Convert a GGUF model to a Hugging Face folder.", RunConvert);

}  // namespace astr
