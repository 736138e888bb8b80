#include "worker/weight_overlay.h"

#include <iterator>
#include <new>

namespace astr {

namespace {

// The tensors whose rows RoPE's layout orders.
bool IsQkProjection(const std::string& canonical) {
  return canonical.ends_with(".q_proj") || canonical.ends_with(".k_proj");
}

}  // namespace

ReceiveBuffers& ReceiveBuffers::Global() {
  static ReceiveBuffers* buffers = new ReceiveBuffers();
  return *buffers;
}

std::unique_ptr<uint8_t[]> ReceiveBuffers::Take(uint64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kept_.find(bytes);
    if (it != kept_.end()) {
      std::unique_ptr<uint8_t[]> buffer = std::move(it->second);
      kept_.erase(it);
      held_ -= bytes;
      return buffer;
    }
  }
  return std::unique_ptr<uint8_t[]>(new (std::nothrow) uint8_t[bytes]);
}

void ReceiveBuffers::Put(std::unique_ptr<uint8_t[]> buffer, uint64_t bytes) {
  if (buffer == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (held_ + bytes > limit_) return;  // freed here
  held_ += bytes;
  kept_.emplace(bytes, std::move(buffer));
}

void ReceiveBuffers::set_limit(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_ = bytes;
  while (held_ > limit_ && !kept_.empty()) {
    auto it = std::prev(kept_.end());  // the largest first
    held_ -= it->first;
    kept_.erase(it);
  }
}

uint64_t ReceiveBuffers::limit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return limit_;
}

uint64_t ReceiveBuffers::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

bool NeedsHalfToInterleaved(const model::ModelConfig& config, const std::string& canonical) {
  // autoregressive_lm checkpoints are interleaved in Hugging Face form too.
  if (config.rope_layout != model::RopeLayout::kInterleaved) return false;
  if (config.architecture == "autoregressive_lm") return false;
  return IsQkProjection(canonical);
}

WeightOverlay::WeightOverlay(const model::ModelConfig& config,
                             std::shared_ptr<const model::ModelFile> base, UpdateTensors tensors)
    : config_(config), base_(std::move(base)), tensors_(std::move(tensors)) {
  permute_base_qk_ = base_ != nullptr && base_->config().rope_layout != config_.rope_layout;
}

bool WeightOverlay::PermutesBase(const std::string& canonical) const {
  return permute_base_qk_ && IsQkProjection(canonical);
}

Status WeightOverlay::LoadF32(const std::string& canonical,
                              const std::vector<int64_t>& expected_shape,
                              std::vector<float>* out) const {
  auto it = tensors_.find(canonical);
  if (it == tensors_.end()) {
    if (base_ == nullptr) {
      return InternalError("tensor '" + canonical + "' is in no update and no checkpoint is open");
    }
    ASTR_RETURN_IF_ERROR(base_->LoadF32(canonical, expected_shape, out));
    if (PermutesBase(canonical) && expected_shape.size() == 2) {
      const int64_t rows = expected_shape[0], cols = expected_shape[1];
      *out = config_.rope_layout == model::RopeLayout::kInterleaved
                 ? model::HalfToInterleavedRows(*out, rows, cols, config_.head_dim)
                 : model::InterleavedToHalfRows(*out, rows, cols, config_.head_dim);
    }
    return OkStatus();
  }
  const UpdateTensor& t = *it->second;
  if (t.data == nullptr) {
    return InternalError("update tensor '" + t.hf_name + "': its bytes were not kept");
  }
  if (t.shape != expected_shape) {
    return InvalidArgumentError("update tensor '" + t.hf_name + "' has shape " +
                                model::ShapeToString(t.shape) + ", expected " +
                                model::ShapeToString(expected_shape));
  }
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  out->resize(static_cast<size_t>(n));
  model::DequantizeToF32(t.dtype, t.data.get(), n, out->data());
  if (t.half_to_interleaved && t.shape.size() == 2) {
    *out = model::HalfToInterleavedRows(*out, t.shape[0], t.shape[1], config_.head_dim);
  }
  return OkStatus();
}

void WeightOverlay::ReleaseResident(const model::TensorView& view) const {
  if (base_ != nullptr && tensors_.count(view.name) == 0) base_->ReleaseResident(view);
}

StatusOr<model::TensorView> WeightOverlay::Raw(const std::string& canonical) const {
  auto it = tensors_.find(canonical);
  if (it == tensors_.end()) {
    if (base_ == nullptr) {
      return InternalError("tensor '" + canonical + "' is in no update and no checkpoint is open");
    }
    if (PermutesBase(canonical)) {
      return FailedPreconditionError("checkpoint tensor '" + canonical +
                                     "' needs its rows permuted for the served RoPE layout");
    }
    return base_->Raw(canonical);
  }
  const UpdateTensor& t = *it->second;
  if (t.data == nullptr) {
    return InternalError("update tensor '" + t.hf_name + "': its bytes were not kept");
  }
  if (t.half_to_interleaved) {
    return FailedPreconditionError("update tensor '" + t.hf_name + "' needs its rows permuted");
  }
  model::TensorView v;
  v.name = canonical;
  v.source_name = t.hf_name;
  v.dtype = t.dtype;
  v.shape = t.shape;
  v.data = t.data.get();
  v.bytes = t.bytes;
  return v;
}

}  // namespace astr
