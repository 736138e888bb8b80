#include "common/model_file.h"

#include <filesystem>
#include <sstream>

#include "common/gguf.h"
#include "common/safetensors.h"

namespace astr {
namespace {

namespace fs = std::filesystem;

// Per-layer names: canonical suffix, GGUF suffix (after "blk.N."), HF suffix (after
// "model.layers.N.").
struct LayerName {
  const char* canonical;
  const char* gguf;
  const char* hf;
};
constexpr LayerName kLayerNames[] = {
    {"attn_norm", "attn_norm.weight", "input_layernorm.weight"},
    {"q_proj", "attn_q.weight", "self_attn.q_proj.weight"},
    {"k_proj", "attn_k.weight", "self_attn.k_proj.weight"},
    {"v_proj", "attn_v.weight", "self_attn.v_proj.weight"},
    {"q_bias", "attn_q.bias", "self_attn.q_proj.bias"},
    {"k_bias", "attn_k.bias", "self_attn.k_proj.bias"},
    {"v_bias", "attn_v.bias", "self_attn.v_proj.bias"},
    {"o_proj", "attn_output.weight", "self_attn.o_proj.weight"},
    {"q_norm", "attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"k_norm", "attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"attn_gate", "attn_gate.weight", "self_attn.gate_proj.weight"},
    {"mlp_norm", "ffn_norm.weight", "post_attention_layernorm.weight"},
    {"gate_proj", "ffn_gate.weight", "mlp.gate_proj.weight"},
    {"up_proj", "ffn_up.weight", "mlp.up_proj.weight"},
    {"down_proj", "ffn_down.weight", "mlp.down_proj.weight"},
};
struct GlobalName {
  const char* canonical;
  const char* gguf;
  const char* hf;
};
constexpr GlobalName kGlobalNames[] = {
    {"embed", "token_embd.weight", "model.embed_tokens.weight"},
    {"final_norm", "output_norm.weight", "model.norm.weight"},
    {"lm_head", "output.weight", "lm_head.weight"},
};

// Splits "<prefix><digits>.<rest>"; returns false if `name` does not have that form.
bool SplitLayer(const std::string& name, const std::string& prefix, std::string* layer,
                std::string* rest) {
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return false;
  *layer = name.substr(prefix.size(), dot - prefix.size());
  if (layer->find_first_not_of("0123456789") != std::string::npos) return false;
  *rest = name.substr(dot + 1);
  return true;
}

enum class Side { kCanonical, kGguf, kHf };
const char* Pick(const LayerName& n, Side s) {
  return s == Side::kCanonical ? n.canonical : s == Side::kGguf ? n.gguf : n.hf;
}
const char* Pick(const GlobalName& n, Side s) {
  return s == Side::kCanonical ? n.canonical : s == Side::kGguf ? n.gguf : n.hf;
}
const char* LayerPrefix(Side s) {
  return s == Side::kCanonical ? "layers." : s == Side::kGguf ? "blk." : "model.layers.";
}

std::string MapName(const std::string& name, Side from, Side to) {
  for (const GlobalName& g : kGlobalNames) {
    if (name == Pick(g, from)) return Pick(g, to);
  }
  std::string layer, rest;
  if (!SplitLayer(name, LayerPrefix(from), &layer, &rest)) return "";
  for (const LayerName& l : kLayerNames) {
    if (rest == Pick(l, from)) return LayerPrefix(to) + layer + "." + Pick(l, to);
  }
  return "";
}

std::vector<float> PermuteRows(const std::vector<float>& w, int64_t rows, int64_t cols,
                               int64_t head_dim, bool to_half) {
  std::vector<float> out(w.size());
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = r / head_dim, j = r % head_dim;
    // Interleaved row j = 2i + s  <->  half row s * half + i.
    const int64_t half_row = h * head_dim + (j % 2) * half + j / 2;
    const int64_t src = to_half ? r : half_row;
    const int64_t dst = to_half ? half_row : r;
    std::copy(w.begin() + src * cols, w.begin() + (src + 1) * cols, out.begin() + dst * cols);
  }
  return out;
}

}  // namespace

std::string CanonicalFromGgufName(const std::string& n) {
  return MapName(n, Side::kGguf, Side::kCanonical);
}
std::string CanonicalFromHfName(const std::string& n) {
  return MapName(n, Side::kHf, Side::kCanonical);
}
std::string GgufNameFromCanonical(const std::string& n) {
  return MapName(n, Side::kCanonical, Side::kGguf);
}
std::string HfNameFromCanonical(const std::string& n) {
  return MapName(n, Side::kCanonical, Side::kHf);
}

std::vector<float> InterleavedToHalfRows(const std::vector<float>& w, int64_t rows, int64_t cols,
                                         int64_t head_dim) {
  return PermuteRows(w, rows, cols, head_dim, /*to_half=*/true);
}
std::vector<float> HalfToInterleavedRows(const std::vector<float>& w, int64_t rows, int64_t cols,
                                         int64_t head_dim) {
  return PermuteRows(w, rows, cols, head_dim, /*to_half=*/false);
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

ModelFile::~ModelFile() = default;

StatusOr<std::unique_ptr<ModelFile>> ModelFile::Open(const std::string& path) {
  std::unique_ptr<ModelFile> m(new ModelFile());
  m->path_ = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    m->format_ = Format::kHf;
    ASTR_RETURN_IF_ERROR(m->OpenHf());
  } else if (fs::exists(path, ec)) {
    m->format_ = Format::kGguf;
    ASTR_RETURN_IF_ERROR(m->OpenGguf());
  } else {
    return NotFoundError(path + ": no such model file or folder");
  }
  return m;
}

void ModelFile::AddTensor(TensorView view) {
  order_.push_back(view.name);
  tensors_[view.name] = std::move(view);
}

Status ModelFile::OpenGguf() {
  ASTR_ASSIGN_OR_RETURN(gguf_, GgufFile::Open(path_));
  ASTR_ASSIGN_OR_RETURN(config_, ConfigFromGguf(*gguf_));
  for (const GgufTensor& t : gguf_->tensors()) {
    std::string canonical = CanonicalFromGgufName(t.name);
    AddTensor(TensorView{canonical.empty() ? t.name : canonical, t.name, t.dtype, t.shape, t.data,
                         t.bytes});
  }
  return ReadGgufVocab();
}

Status ModelFile::OpenHf() {
  const std::string config_path = (fs::path(path_) / "config.json").string();
  if (!fs::exists(config_path))
    return NotFoundError(path_ + ": no config.json in the model folder");
  ASTR_ASSIGN_OR_RETURN(config_, ConfigFromHfJson(config_path));
  ASTR_ASSIGN_OR_RETURN(safetensors_, SafetensorsFile::Open(path_));
  for (const auto& [name, t] : safetensors_->tensors()) {
    std::string canonical = CanonicalFromHfName(name);
    const std::string key = canonical.empty() ? name : canonical;
    auto dtype = safetensors_->ReadableDType(t);
    if (!dtype.ok()) {
      if (!canonical.empty()) unreadable_[key] = dtype.status();
      continue;  // unmapped extras of other dtypes (e.g. rotary inv_freq buffers) are ignored
    }
    AddTensor(TensorView{key, name, *dtype, t.shape, t.data, t.bytes});
  }
  return OkStatus();
}

Status ModelFile::ReadGgufVocab() {
  ASTR_ASSIGN_OR_RETURN(vocab_, ReadVocab(*gguf_));
  return OkStatus();
}

bool ModelFile::Has(const std::string& canonical) const {
  return tensors_.count(canonical) > 0 || unreadable_.count(canonical) > 0;
}

StatusOr<TensorView> ModelFile::Raw(const std::string& canonical) const {
  if (auto it = unreadable_.find(canonical); it != unreadable_.end()) return it->second;
  auto it = tensors_.find(canonical);
  if (it == tensors_.end()) {
    const std::string file_name = format_ == Format::kGguf ? GgufNameFromCanonical(canonical)
                                                           : HfNameFromCanonical(canonical);
    return NotFoundError(path_ + ": missing tensor '" + canonical + "'" +
                         (file_name.empty() ? "" : " (" + file_name + ")"));
  }
  return it->second;
}

Status ModelFile::LoadF32(const std::string& canonical, const std::vector<int64_t>& expected_shape,
                          std::vector<float>* out) const {
  ASTR_ASSIGN_OR_RETURN(TensorView t, Raw(canonical));
  if (t.shape != expected_shape) {
    return InvalidArgumentError(path_ + ": tensor '" + canonical + "' (" + t.source_name +
                                ") has shape " + ShapeToString(t.shape) + ", expected " +
                                ShapeToString(expected_shape));
  }
  out->resize(static_cast<size_t>(t.num_elements()));
  DequantizeToF32(t.dtype, t.data, t.num_elements(), out->data());
  return OkStatus();
}

std::vector<std::string> ModelFile::TensorNames() const { return order_; }

Status ModelFile::ValidateWeights() const {
  for (const WeightSpec& w : ExpectedWeights(config_)) {
    ASTR_ASSIGN_OR_RETURN(TensorView t, Raw(w.name));
    if (t.shape != w.shape) {
      return InvalidArgumentError(path_ + ": tensor '" + w.name + "' (" + t.source_name +
                                  ") has shape " + ShapeToString(t.shape) + ", expected " +
                                  ShapeToString(w.shape));
    }
  }
  return OkStatus();
}

std::string ModelFile::Describe() const {
  const ModelConfig& c = config_;
  std::ostringstream os;
  os << (format_ == Format::kGguf ? "GGUF " : "HF ") << c.architecture << ": " << c.num_layers
     << " layers, hidden " << c.hidden_size << ", " << c.num_heads << " heads (" << c.num_kv_heads
     << " kv) x " << c.head_dim << ", ffn " << c.intermediate_size << ", vocab " << c.vocab_size
     << ", " << c.ParameterCount() << " params, " << tensors_.size() << " tensors";
  return os.str();
}

}  // namespace astr
