// A model's weights and config, opened from a GGUF file or a Hugging Face folder (config.json +
// model.safetensors or a sharded model.safetensors.index.json). Tensors are memory-mapped and
// exposed under canonical names (see ExpectedWeights in model_config.h) whatever file they came
// from.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/architecture.h"
#include "common/model/model_config.h"
#include "common/model/tensor_dtype.h"
#include "common/model/vocab.h"

namespace astr::model {

class GgufFile;
class SafetensorsFile;
struct SafetensorsTensor;

struct TensorView {
  std::string name;         // canonical name (the file's own name for tensors we do not map)
  std::string source_name;  // name in the file
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // torch order, outermost first
  const void* data = nullptr;  // into the mapping; valid while the ModelFile lives
  uint64_t bytes = 0;
  // The data is the model file's own copy (a tensor the file holds transposed), not the mapping's.
  bool owned = false;
  int64_t num_elements() const;
};

// Undoes llama.cpp's q/k permutation: within each head of `head_dim` rows, row 2i goes to i and row
// 2i+1 to i + head_dim/2 (interleaved RoPE order -> HF rotate_half order). `w` is [rows, cols].
std::vector<float> InterleavedToHalfRows(const std::vector<float>& w, int64_t rows, int64_t cols,
                                         int64_t head_dim);
// The inverse (HF order -> interleaved), as llama.cpp's converter does.
std::vector<float> HalfToInterleavedRows(const std::vector<float>& w, int64_t rows, int64_t cols,
                                         int64_t head_dim);

// Where a backend reads its weights from: a model file, or a weight update over one
// (worker/weight_overlay.h). Canonical names; shapes in torch order.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual const ModelConfig& config() const = 0;
  // The tensor converted to f32, in the model's layout. A missing tensor or a shape other than
  // `expected_shape` is an error naming the tensor and both shapes.
  virtual Status LoadF32(const std::string& canonical, const std::vector<int64_t>& expected_shape,
                         std::vector<float>* out) const = 0;
  // The stored bytes, when they are in the model's layout (readers may take a fast path on them);
  // an error otherwise, and then LoadF32 is the way.
  virtual StatusOr<TensorView> Raw(const std::string& canonical) const = 0;
  // Hands the resident pages under a view from Raw back to the system once the reader has copied
  // what it needs (a mapped file's pages are read again from disk if touched later). Sources whose
  // tensors are not file mappings do nothing.
  virtual void ReleaseResident(const TensorView& view) const { (void)view; }
};

class ModelFile final : public TensorSource {
 public:
  enum class Format { kGguf, kHf };

  // `path`: a .gguf file or a folder with config.json and safetensors weights. The config is
  // checked against the tensors (CheckConfig) before Open returns, so that nothing is ever sized
  // from a value that the weights do not confirm.
  static StatusOr<std::unique_ptr<ModelFile>> Open(const std::string& path);
  // The same without CheckConfig, for tools that show what a broken file holds (astr inspect):
  // config() may then hold any value the file declares, so nothing may be sized or looped over
  // from it (ExpectedWeights, ParameterCount, Describe) until CheckConfig() has passed.
  static StatusOr<std::unique_ptr<ModelFile>> OpenUnchecked(const std::string& path);
  ~ModelFile();

  const std::string& path() const { return path_; }
  Format format() const { return format_; }
  const ModelConfig& config() const override { return config_; }
  // Non-null for GGUF files with tokenizer.ggml.* keys.
  const Vocab* vocab() const { return vocab_.get(); }
  // The underlying GGUF file (null for HF folders), for metadata the config does not carry.
  const GgufFile* gguf() const { return gguf_.get(); }

  bool Has(const std::string& canonical) const;
  // Dequantizes / converts the tensor to f32. A missing tensor or a shape other than
  // `expected_shape` (torch order) is an error naming the file, the tensor and both shapes.
  Status LoadF32(const std::string& canonical, const std::vector<int64_t>& expected_shape,
                 std::vector<float>* out) const override;
  // The stored bytes as they are (for inspect / convert).
  StatusOr<TensorView> Raw(const std::string& canonical) const override;
  void ReleaseResident(const TensorView& view) const override;
  // Canonical names of all tensors (file names for unmapped ones), in file order for GGUF and
  // sorted by file name for HF.
  std::vector<std::string> TensorNames() const;
  // The config's sizes agree with the tensors that exist: num_layers with the layer tensors
  // (layers 0 .. num_layers-1 present, none beyond), vocab_size and hidden_size with embed's shape,
  // num_heads x head_dim with layers.0.q_proj's rows, num_kv_heads x head_dim with
  // layers.0.k_proj's, intermediate_size with layers.0.gate_proj's. The error names the file, its
  // key, the value and the tensor it disagrees with. Cheap: it reads no tensor data.
  Status CheckConfig() const;
  // CheckConfig, then: every tensor of ExpectedWeights(config()) exists with the right shape and a
  // readable dtype; the error names the first one that does not.
  Status ValidateWeights() const;
  // One line: format, architecture, dims, parameter count.
  std::string Describe() const;

 private:
  ModelFile() = default;
  Status OpenGguf();
  Status OpenHf();
  Status ReadGgufVocab();
  void AddTensor(TensorView view);
  // Adds the parts of fused file tensor `view` (architecture().fused_names) as views of its rows,
  // or, when its shape is not the parts' rows stacked, an error for each part.
  void AddFused(const TensorView& view, const std::string& layer, const FusedTensorNames& fused);
  // Adds each expert's tensor of GGUF tensor `view` that stacks canonical `part` of every expert
  // of a MoE layer ([experts, rows, cols]) as a view of its slice, or an error for each.
  // Stacked biases ([experts, rows], `part` gate_bias / up_bias / down_bias) likewise.
  void AddStackedExperts(const TensorView& view, const std::string& layer, const std::string& part);
  // Adds each expert's canonical tensors from HF tensor `view`, one of the four in which
  // gpt-oss-style checkpoints stack a MoE layer's experts (Architecture::hf_experts_transposed;
  // `rest` is its name after "model.layers.N."), as owned copies; false when `rest` is none of
  // them.
  bool AddTransposedExperts(const TensorView& view, const std::string& layer,
                            const std::string& rest);
  // gpt-oss's released MXFP4 experts: `base` (gate_up_proj or down_proj) of layer `layer` as HF
  // stores it, {base}_blocks [experts, rows, cols / 32, 16] (two FP4 values a byte, element 2j in
  // byte j's low nibble) and {base}_scales [experts, rows, cols / 32] (E8M0), rows in the x W^T
  // sense (gate_up's interleaved: row 2j gate j, 2j + 1 up j). Each expert's canonical tensors
  // become owned MXFP4 copies in ggml's block layout (block_mxfp4); a shape or dtype they do not
  // have makes them unreadable, with the reason.
  // A missing tensor is null.
  void AddMxfp4Experts(const std::string& layer, const std::string& base,
                       const SafetensorsTensor* blocks, const SafetensorsTensor* scales);
  // general.architecture of a GGUF file (the prefix of its keys).
  std::string GgufArchitecture() const;
  // Records the layer index of a mapped tensor's canonical name ("layers.N.*").
  void NoteLayer(const std::string& canonical);
  Status CheckLayerCount() const;
  // Where the config came from, for errors: the .gguf file or the folder's config.json.
  std::string ConfigSource() const;

  std::string path_;
  Format format_ = Format::kGguf;
  ModelConfig config_;
  std::unique_ptr<Vocab> vocab_;
  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<SafetensorsFile> safetensors_;
  std::map<std::string, TensorView> tensors_;
  std::vector<std::string> order_;
  // Tensors we map but cannot read (e.g. an I32 safetensors tensor), with the reason.
  std::map<std::string, Status> unreadable_;
  // Layer indices that mapped tensors (readable or not) belong to.
  std::set<int64_t> layers_;
  // The data of owned tensors (TensorView::owned).
  std::vector<std::unique_ptr<uint8_t[]>> owned_;
};

std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace astr::model
