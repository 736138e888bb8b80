#include "common/model/model_file.h"

#include <cstring>
#include <filesystem>
#include <sstream>

#include "common/base/mapped_file.h"
#include "common/model/architecture.h"
#include "common/model/gguf.h"
#include "common/model/safetensors.h"

namespace astr::model {
namespace {

namespace fs = std::filesystem;

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

// Whether `name` (a file's tensor name, layers numbered after `prefix`) belongs to a
// multi-token-prediction layer the architecture's files hold past the served ones
// (Architecture::mtp_layers): such tensors are not served.
bool IsMtpLayerTensor(const Architecture* description, const ModelConfig& config,
                      const std::string& name, const char* prefix) {
  std::string layer, rest;
  return description != nullptr && description->mtp_layers &&
         SplitLayerName(name, prefix, &layer, &rest) && layer.size() < 10 &&
         std::stoll(layer) >= config.num_layers;
}

}  // namespace

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
  ASTR_ASSIGN_OR_RETURN(std::unique_ptr<ModelFile> m, OpenUnchecked(path));
  ASTR_RETURN_IF_ERROR(m->CheckConfig());
  return m;
}

StatusOr<std::unique_ptr<ModelFile>> ModelFile::OpenUnchecked(const std::string& path) {
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

void ModelFile::AddFused(const TensorView& view, const std::string& layer,
                         const FusedTensorNames& fused) {
  const std::string prefix = "layers." + layer + ".";
  int64_t total = 0;
  std::string names;
  for (const std::string& part : fused.parts) {
    total += CanonicalRows(config_, part);
    names += (names.empty() ? "" : " + ") + part;
  }
  const bool fits = view.shape.size() == 2 && view.shape[0] == total;
  int64_t row = 0;
  for (const std::string& part : fused.parts) {
    const std::string canonical = prefix + part;
    NoteLayer(canonical);
    const int64_t rows = CanonicalRows(config_, part);
    auto begin = DTypeByteSize(view.dtype, fits ? row * view.shape[1] : 0);
    auto bytes = DTypeByteSize(view.dtype, fits ? rows * view.shape[1] : 0);
    if (!fits || !begin.ok() || !bytes.ok()) {
      unreadable_[canonical] =
          InvalidArgumentError(path_ + ": tensor '" + view.source_name + "' has shape " +
                               ShapeToString(view.shape) + ", expected [" + names + " = " +
                               std::to_string(total) + ", cols] (it holds " + canonical + ")");
      continue;
    }
    TensorView part_view = view;
    part_view.name = canonical;
    part_view.source_name =
        view.source_name + "[" + std::to_string(row) + ":" + std::to_string(row + rows) + "]";
    part_view.shape = {rows, view.shape[1]};
    part_view.data = static_cast<const uint8_t*>(view.data) + *begin;
    part_view.bytes = *bytes;
    AddTensor(std::move(part_view));
    row += rows;
  }
}

void ModelFile::AddStackedExperts(const TensorView& view, const std::string& layer,
                                  const std::string& part) {
  const std::string prefix = "layers." + layer + ".experts.";
  const int64_t experts = config_.num_experts;
  const bool bias = part.ends_with("_bias");
  const bool to_hidden = part == "down_proj" || part == "down_bias";
  const int64_t rows = to_hidden ? config_.hidden_size : config_.moe_intermediate_size;
  const std::string a = GgufArchitecture() + ".";
  const std::string row_key = to_hidden ? a + "embedding_length" : a + "expert_feed_forward_length";
  const bool fits =
      view.shape.size() == (bias ? 2u : 3u) && view.shape[0] == experts && view.shape[1] == rows;
  const int64_t cols = fits && !bias ? view.shape[2] : 1;
  NoteLayer("layers." + layer + "." + part);
  for (int64_t e = 0; e < std::max<int64_t>(experts, 1); ++e) {
    const std::string canonical = prefix + std::to_string(e) + "." + part;
    auto bytes = DTypeByteSize(view.dtype, fits ? rows * cols : 0);
    if (!fits || !bytes.ok()) {
      unreadable_[canonical] = InvalidArgumentError(
          path_ + ": tensor '" + view.source_name + "' has shape " + ShapeToString(view.shape) +
          ", expected [" + a + "expert_count = " + std::to_string(experts) + ", " + row_key +
          " = " + std::to_string(rows) + (bias ? "" : ", cols") + "] (it holds " + canonical + ")");
      continue;
    }
    TensorView expert = view;
    expert.name = canonical;
    expert.source_name = view.source_name + "[" + std::to_string(e) + "]";
    expert.shape = bias ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, cols};
    expert.data = static_cast<const uint8_t*>(view.data) + e * *bytes;
    expert.bytes = *bytes;
    AddTensor(std::move(expert));
  }
}

bool ModelFile::AddTransposedExperts(const TensorView& view, const std::string& layer,
                                     const std::string& rest) {
  std::vector<int64_t> shape;
  std::vector<TransposedExpertPart> parts;
  if (!MatchTransposedExperts(config_, rest, &shape, &parts)) return false;
  const std::string prefix = "layers." + layer + ".experts.";
  NoteLayer("layers." + layer + "." + parts[0].part);
  auto elem = DTypeByteSize(view.dtype, 1);
  const bool fits = view.shape == shape && elem.ok() && DTypeBlockElements(view.dtype) == 1;
  for (size_t k = 0; k < parts.size(); ++k) {
    for (int64_t e = 0; e < std::max<int64_t>(config_.num_experts, 1); ++e) {
      const std::string canonical = prefix + std::to_string(e) + "." + parts[k].part;
      if (!fits) {
        unreadable_[canonical] = InvalidArgumentError(
            path_ + ": tensor '" + view.source_name + "' has shape " + ShapeToString(view.shape) +
            " and dtype " + std::string(DTypeName(view.dtype)) + ", expected " +
            ShapeToString(shape) + " of f32, f16 or bf16 (it holds " + canonical + ")");
        continue;
      }
      int64_t n = 1;
      for (int64_t d : parts[k].shape) n *= d;
      auto data = std::make_unique<uint8_t[]>(static_cast<size_t>(n * *elem));
      CopyTransposedExpert(config_, rest, k, e, view.data, *elem, data.get());
      TensorView t = view;
      t.name = canonical;
      t.source_name = view.source_name + "[" + std::to_string(e) + "] (" + parts[k].part + ")";
      t.shape = parts[k].shape;
      t.data = data.get();
      t.bytes = static_cast<uint64_t>(n) * *elem;
      t.owned = true;
      owned_.push_back(std::move(data));
      AddTensor(std::move(t));
    }
  }
  ReleaseMappedPages(view.data, view.bytes);
  return true;
}

void ModelFile::NoteLayer(const std::string& canonical) {
  std::string layer, rest;
  if (!SplitLayerName(canonical, "layers.", &layer, &rest)) return;
  // "blk.07.*" maps to "layers.07.*", which no loader asks for: only the plain spelling counts.
  if (layer.size() > 18 || (layer.size() > 1 && layer[0] == '0')) return;
  layers_.insert(std::stoll(layer));
}

Status ModelFile::OpenGguf() {
  ASTR_ASSIGN_OR_RETURN(gguf_, GgufFile::Open(path_));
  ASTR_ASSIGN_OR_RETURN(config_, ConfigFromGguf(*gguf_));
  const Architecture* description = FindArchitecture(config_.architecture);
  for (const GgufTensor& t : gguf_->tensors()) {
    if (IsMtpLayerTensor(description, config_, t.name, "blk.")) continue;
    std::string layer;
    const FusedTensorNames* fused = nullptr;
    if (MatchFusedTensor(config_.architecture, t.name, /*gguf=*/true, &layer, &fused)) {
      AddFused(TensorView{t.name, t.name, t.dtype, t.shape, t.data, t.bytes}, layer, *fused);
      continue;
    }
    if (std::string part; MatchStackedExperts(config_.architecture, t.name, &layer, &part)) {
      AddStackedExperts(TensorView{t.name, t.name, t.dtype, t.shape, t.data, t.bytes}, layer, part);
      continue;
    }
    std::string canonical = CanonicalFromGgufName(config_.architecture, t.name);
    NoteLayer(canonical);
    std::vector<int64_t> shape = t.shape;
    // llama.cpp stores the shared expert's gate (HF's Linear(hidden, 1)) as one row, 1-D.
    if (canonical.ends_with(".shared_expert_gate") && shape.size() == 1) shape = {1, shape[0]};
    AddTensor(TensorView{canonical.empty() ? t.name : canonical, t.name, t.dtype, shape, t.data,
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
  // gpt-oss's MXFP4 experts: (layer, gate_up_proj / down_proj) -> their blocks and scales.
  std::map<std::pair<std::string, std::string>,
           std::pair<const SafetensorsTensor*, const SafetensorsTensor*>>
      mxfp4;
  const Architecture* description = FindArchitecture(config_.architecture);
  for (const auto& [name, t] : safetensors_->tensors()) {
    if (IsMtpLayerTensor(description, config_, name, "model.layers.")) continue;
    std::string layer;
    const FusedTensorNames* fused = nullptr;
    if (MatchFusedTensor(config_.architecture, name, /*gguf=*/false, &layer, &fused)) {
      auto fused_dtype = safetensors_->ReadableDType(t);
      if (fused_dtype.ok()) {
        AddFused(TensorView{name, name, *fused_dtype, t.shape, t.data, t.bytes}, layer, *fused);
      } else {
        for (const std::string& part : fused->parts) {
          NoteLayer("layers." + layer + "." + part);
          unreadable_["layers." + layer + "." + part] = fused_dtype.status();
        }
      }
      continue;
    }
    std::string rest;
    if (description != nullptr && description->hf_experts_transposed &&
        SplitLayerName(name, "model.layers.", &layer, &rest) && rest.starts_with("mlp.experts.")) {
      auto dtype = safetensors_->ReadableDType(t);
      const TensorView view{name,    name,   dtype.ok() ? *dtype : DType::kF32,
                            t.shape, t.data, t.bytes};
      if (dtype.ok() && AddTransposedExperts(view, layer, rest)) continue;
      for (const char* base : {"gate_up_proj", "down_proj"}) {
        for (const char* what : {"_blocks", "_scales"}) {
          if (rest == std::string("mlp.experts.") + base + what) {
            (what[1] == 'b' ? mxfp4[{layer, base}].first : mxfp4[{layer, base}].second) = &t;
          }
        }
      }
      if (rest.ends_with("_blocks") || rest.ends_with("_scales")) continue;
      if (!dtype.ok()) {
        NoteLayer("layers." + layer + ".router");
        for (int64_t e = 0; e < config_.num_experts; ++e) {
          for (const char* part : {"gate_proj", "up_proj", "down_proj"}) {
            const std::string c = "layers." + layer + ".experts." + std::to_string(e) + "." + part;
            if (tensors_.count(c) == 0) unreadable_[c] = dtype.status();
          }
        }
        continue;
      }
    }
    std::string canonical = CanonicalFromHfName(config_.architecture, name);
    NoteLayer(canonical);
    const std::string key = canonical.empty() ? name : canonical;
    auto dtype = safetensors_->ReadableDType(t);
    if (!dtype.ok()) {
      if (!canonical.empty()) unreadable_[key] = dtype.status();
      continue;  // unmapped extras of other dtypes (e.g. rotary inv_freq buffers) are ignored
    }
    AddTensor(TensorView{key, name, *dtype, t.shape, t.data, t.bytes});
  }
  for (const auto& [where, parts] : mxfp4)
    AddMxfp4Experts(where.first, where.second, parts.first, parts.second);
  return OkStatus();
}

void ModelFile::AddMxfp4Experts(const std::string& layer, const std::string& base,
                                const SafetensorsTensor* blocks_t,
                                const SafetensorsTensor* scales_t) {
  const int64_t n_exp = config_.num_experts, f = config_.moe_intermediate_size,
                h = config_.hidden_size;
  const bool gate_up = base == "gate_up_proj";
  const int64_t rows = gate_up ? 2 * f : h, cols = gate_up ? h : f, groups = cols / 32;
  const std::vector<std::string> parts = gate_up ? std::vector<std::string>{"gate_proj", "up_proj"}
                                                 : std::vector<std::string>{"down_proj"};
  const std::string prefix = "layers." + layer + ".experts.";
  NoteLayer("layers." + layer + ".router");
  std::string why;
  if (blocks_t == nullptr || scales_t == nullptr) {
    why = "has no " + std::string(blocks_t == nullptr ? "_blocks" : "_scales") + " tensor";
  } else if (blocks_t->dtype_name != "U8" || scales_t->dtype_name != "U8") {
    why = "must be U8";
  } else if (cols % 32 != 0 || blocks_t->shape != std::vector<int64_t>{n_exp, rows, groups, 16} ||
             scales_t->shape != std::vector<int64_t>{n_exp, rows, groups}) {
    why = "has shapes " + ShapeToString(blocks_t->shape) + " / " + ShapeToString(scales_t->shape) +
          ", expected " + ShapeToString({n_exp, rows, groups, 16}) + " / " +
          ShapeToString({n_exp, rows, groups});
  }
  for (int64_t e = 0; e < std::max<int64_t>(n_exp, 1); ++e) {
    for (size_t p = 0; p < parts.size(); ++p) {
      const std::string canonical = prefix + std::to_string(e) + "." + parts[p];
      if (!why.empty()) {
        unreadable_[canonical] = InvalidArgumentError(path_ + ": MXFP4 experts 'model.layers." +
                                                      layer + ".mlp.experts." + base + "' " + why +
                                                      " (they hold " + canonical + ")");
        continue;
      }
      const int64_t out_rows = rows / static_cast<int64_t>(parts.size());
      const uint64_t bytes = static_cast<uint64_t>(out_rows * groups * 17);
      auto data = std::make_unique<uint8_t[]>(bytes);
      const uint8_t* b = blocks_t->data;
      const uint8_t* sc = scales_t->data;
      for (int64_t r = 0; r < out_rows; ++r) {
        // gate_up's rows interleave gate and up: canonical row r of part p is stored row 2r + p.
        const int64_t src = parts.size() == 2 ? 2 * r + static_cast<int64_t>(p) : r;
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t at = (e * rows + src) * groups + g;
          uint8_t* out = data.get() + (r * groups + g) * 17;
          uint8_t nib[32];
          for (int j = 0; j < 16; ++j) {
            nib[2 * j] = b[at * 16 + j] & 0x0F;
            nib[2 * j + 1] = b[at * 16 + j] >> 4;
          }
          out[0] = sc[at];
          for (int j = 0; j < 16; ++j)
            out[1 + j] = static_cast<uint8_t>(nib[j] | (nib[j + 16] << 4));
        }
      }
      TensorView t;
      t.name = canonical;
      t.source_name = "model.layers." + layer + ".mlp.experts." + base + "_blocks[" +
                      std::to_string(e) + "] (" + parts[p] + ")";
      t.dtype = DType::kMXFP4;
      t.shape = {out_rows, cols};
      t.data = data.get();
      t.bytes = bytes;
      t.owned = true;
      owned_.push_back(std::move(data));
      AddTensor(std::move(t));
    }
  }
  if (why.empty()) {
    ReleaseMappedPages(blocks_t->data, blocks_t->bytes);
    ReleaseMappedPages(scales_t->data, scales_t->bytes);
  }
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
    const std::string file_name = format_ == Format::kGguf
                                      ? GgufNameFromCanonical(config_.architecture, canonical)
                                      : HfNameFromCanonical(config_.architecture, canonical);
    return NotFoundError(path_ + ": missing tensor '" + canonical + "'" +
                         (file_name.empty() ? "" : " (" + file_name + ")"));
  }
  return it->second;
}

void ModelFile::ReleaseResident(const TensorView& view) const {
  if (view.owned) return;  // not a mapping: its pages hold the only copy
  // Rounding out to whole pages may take a neighbour tensor's edge with it; it is read again from
  // the file when needed.
  ReleaseMappedPages(view.data, view.bytes);
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

std::string ModelFile::ConfigSource() const {
  return format_ == Format::kGguf ? path_ : (fs::path(path_) / "config.json").string();
}

Status ModelFile::CheckLayerCount() const {
  const bool gguf = format_ == Format::kGguf;
  const std::string prefix = gguf ? "blk." : "model.layers.";
  const int64_t n = config_.num_layers;
  const std::string what =
      ConfigSource() + ": " +
      (gguf ? GgufConfigKey(*gguf_, GgufArchitecture(), "block_count") : "num_hidden_layers") +
      " = " + std::to_string(n) + " but ";
  const int64_t held = static_cast<int64_t>(layers_.size());
  if (held == 0) return InvalidArgumentError(what + "the weights hold no layer (" + prefix + "*)");
  const int64_t last = *layers_.rbegin();
  if (last == held - 1) {  // layers 0 .. held-1, all there
    if (held == n) return OkStatus();
    return InvalidArgumentError(what + "the weights hold " + std::to_string(held) + " layers (" +
                                prefix + "0 .. " + prefix + std::to_string(last) + ")");
  }
  int64_t missing = 0;
  for (int64_t i : layers_) {
    if (i != missing) break;
    ++missing;
  }
  if (missing < n) {
    return InvalidArgumentError(what + "there is no tensor " + prefix + std::to_string(missing) +
                                ".* (the weights hold " + std::to_string(held) + " layers, up to " +
                                prefix + std::to_string(last) + ")");
  }
  return InvalidArgumentError(what + "the weights also hold layer " + prefix +
                              std::to_string(last) + ".*");
}

std::string ModelFile::GgufArchitecture() const {
  auto a = gguf_->GetString("general.architecture");
  return a.ok() ? *a : config_.architecture;
}

Status ModelFile::CheckConfig() const {
  ASTR_RETURN_IF_ERROR(CheckLayerCount());
  const ModelConfig& c = config_;
  const bool gguf = format_ == Format::kGguf;
  // "key = value" as the file spells the key.
  auto field = [&](const char* hf_key, const char* gguf_rest, int64_t value) {
    return (gguf ? GgufConfigKey(*gguf_, GgufArchitecture(), gguf_rest) : std::string(hf_key)) +
           " = " + std::to_string(value);
  };
  auto disagree = [&](const std::string& what, const TensorView& t, const std::string& part) {
    return InvalidArgumentError(ConfigSource() + ": " + what + " but " + t.source_name +
                                " has shape " + ShapeToString(t.shape) + " (" + part + ")");
  };
  auto matrix = [&](const std::string& canonical) -> StatusOr<TensorView> {
    ASTR_ASSIGN_OR_RETURN(TensorView t, Raw(canonical));
    if (t.shape.size() != 2) {
      return InvalidArgumentError(path_ + ": tensor '" + canonical + "' (" + t.source_name +
                                  ") has shape " + ShapeToString(t.shape) + ", expected 2-D");
    }
    return t;
  };
  ASTR_ASSIGN_OR_RETURN(TensorView embed, matrix("embed"));
  if (embed.shape[0] != c.vocab_size) {  // never for GGUF, which takes vocab_size from these rows
    return disagree("vocab_size = " + std::to_string(c.vocab_size), embed,
                    std::to_string(embed.shape[0]) + " token rows");
  }
  if (embed.shape[1] != c.hidden_size) {
    return disagree(field("hidden_size", "embedding_length", c.hidden_size), embed,
                    std::to_string(embed.shape[1]) + " columns");
  }
  // Heads and head_dim show only as their product, the rows of the q and k projections.
  std::string head_dim = field("head_dim", "attention.key_length", c.head_dim);
  if (c.head_dim == c.hidden_size / c.num_heads) head_dim += " (= hidden size / heads)";
  struct Heads {
    const char* tensor;
    int64_t count;
    std::string field;
  };
  const Heads heads[] = {{"layers.0.q_proj", c.num_heads,
                          field("num_attention_heads", "attention.head_count", c.num_heads)},
                         {"layers.0.k_proj", c.num_kv_heads,
                          field("num_key_value_heads", "attention.head_count_kv", c.num_kv_heads)}};
  for (const Heads& h : heads) {
    ASTR_ASSIGN_OR_RETURN(TensorView t, matrix(h.tensor));
    int64_t rows = 0;
    if (__builtin_mul_overflow(h.count, c.head_dim, &rows) || rows != t.shape[0]) {
      return disagree(h.field + " x " + head_dim, t, std::to_string(t.shape[0]) + " rows");
    }
  }
  // The first dense layer's gate projection, and the first MoE layer's router and expert 0.
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.LayerIsMoe(l)) continue;
    ASTR_ASSIGN_OR_RETURN(TensorView gate, matrix("layers." + std::to_string(l) + ".gate_proj"));
    if (gate.shape[0] != c.intermediate_size) {
      return disagree(field("intermediate_size", "feed_forward_length", c.intermediate_size), gate,
                      std::to_string(gate.shape[0]) + " rows");
    }
    break;
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.LayerIsMoe(l)) continue;
    const std::string p = "layers." + std::to_string(l) + ".";
    ASTR_ASSIGN_OR_RETURN(TensorView router, matrix(p + "router"));
    if (router.shape[0] != c.num_experts) {
      return disagree(field("num_experts", "expert_count", c.num_experts), router,
                      std::to_string(router.shape[0]) + " rows");
    }
    ASTR_ASSIGN_OR_RETURN(TensorView gate, matrix(p + "experts.0.gate_proj"));
    if (gate.shape[0] != c.moe_intermediate_size) {
      return disagree(
          field("moe_intermediate_size", "expert_feed_forward_length", c.moe_intermediate_size),
          gate, std::to_string(gate.shape[0]) + " rows");
    }
    if (c.shared_expert_intermediate_size > 0) {
      ASTR_ASSIGN_OR_RETURN(TensorView shared, matrix(p + "shared_expert.gate_proj"));
      if (shared.shape[0] != c.shared_expert_intermediate_size) {
        return disagree(
            field("shared_expert_intermediate_size", "expert_shared_feed_forward_length",
                  c.shared_expert_intermediate_size),
            shared, std::to_string(shared.shape[0]) + " rows");
      }
    }
    break;
  }
  return OkStatus();
}

Status ModelFile::ValidateWeights() const {
  ASTR_RETURN_IF_ERROR(CheckConfig());
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

}  // namespace astr::model
