#include "worker/weight_overlay.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <utility>

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

namespace {

// `bytes` rounded up to whole pages (at least one).
uint64_t WholePages(uint64_t bytes) {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return std::max<uint64_t>(page, (bytes + page - 1) / page * page);
}

}  // namespace

ReceiveBuffer ReceiveBuffer::Map(uint64_t bytes) {
  const uint64_t mapped = WholePages(bytes);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ReceiveBuffer b;
  if (p == MAP_FAILED) return b;
  // Fewer faults for big tensors where transparent huge pages are on "madvise" (advice only).
  if (mapped >= (uint64_t{2} << 20)) madvise(p, mapped, MADV_HUGEPAGE);
  b.data_ = static_cast<uint8_t*>(p);
  b.mapped_ = mapped;
  return b;
}

ReceiveBuffer& ReceiveBuffer::operator=(ReceiveBuffer&& other) noexcept {
  if (this != &other) {
    Unmap();
    data_ = std::exchange(other.data_, nullptr);
    mapped_ = std::exchange(other.mapped_, 0);
    taken_from_ = std::exchange(other.taken_from_, nullptr);
  }
  return *this;
}

void ReceiveBuffer::Unmap() {
  if (taken_from_ != nullptr) taken_from_->Forget(mapped_);
  taken_from_ = nullptr;
  if (data_ != nullptr) munmap(data_, mapped_);
  data_ = nullptr;
  mapped_ = 0;
}

ReceiveBuffer ReceiveBuffers::Take(uint64_t bytes) {
  const uint64_t capacity = WholePages(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kept_.find(capacity);
    if (it != kept_.end()) {
      ReceiveBuffer buffer = std::move(it->second);
      kept_.erase(it);
      held_ -= capacity;
      taken_ += capacity;
      buffer.taken_from_ = this;
      return buffer;
    }
    // None fits: kept ones make room, so that kept and taken stay under the limit.
    while (!kept_.empty() && held_ + taken_ + capacity > limit_) EvictLargest();
    taken_ += capacity;
  }
  ReceiveBuffer fresh = ReceiveBuffer::Map(capacity);
  if (fresh) {
    fresh.taken_from_ = this;
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    taken_ -= capacity;
  }
  return fresh;
}

void ReceiveBuffers::Put(ReceiveBuffer buffer) {
  if (!buffer) return;
  const uint64_t capacity = buffer.capacity();
  std::lock_guard<std::mutex> lock(mu_);
  if (buffer.taken_from_ == this) taken_ -= capacity;
  buffer.taken_from_ = nullptr;  // from another pool, or mapped alone: kept here like the others
  if (held_ + capacity > limit_) return;  // unmapped here
  held_ += capacity;
  kept_.emplace(capacity, std::move(buffer));
}

void ReceiveBuffers::Forget(uint64_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  taken_ -= capacity;
}

void ReceiveBuffers::EvictLargest() {
  auto it = std::prev(kept_.end());
  held_ -= it->first;
  kept_.erase(it);
}

void ReceiveBuffers::set_limit(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_ = bytes;
  while (held_ > limit_ && !kept_.empty()) EvictLargest();  // the largest first
}

uint64_t ReceiveBuffers::limit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return limit_;
}

uint64_t ReceiveBuffers::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

uint64_t ReceiveBuffers::taken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return taken_;
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
  if (base_ != nullptr) {
    base_norm_shift_ =
        static_cast<float>(base_->config().norm_weight_offset - config_.norm_weight_offset);
  }
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
    if (base_norm_shift_ != 0.0f && model::IsNormTensor(canonical)) {
      for (float& x : *out) x += base_norm_shift_;
    }
    return OkStatus();
  }
  const UpdateTensor& t = *it->second;
  if (!t.data) {
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
  if (t.norm_shift != 0.0f) {
    for (float& x : *out) x += t.norm_shift;
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
    if (base_norm_shift_ != 0.0f && model::IsNormTensor(canonical)) {
      return FailedPreconditionError("checkpoint norm '" + canonical +
                                     "' needs the served norm offset");
    }
    return base_->Raw(canonical);
  }
  const UpdateTensor& t = *it->second;
  if (!t.data) {
    return InternalError("update tensor '" + t.hf_name + "': its bytes were not kept");
  }
  if (t.half_to_interleaved) {
    return FailedPreconditionError("update tensor '" + t.hf_name + "' needs its rows permuted");
  }
  if (t.norm_shift != 0.0f) {
    return FailedPreconditionError("update tensor '" + t.hf_name +
                                   "' needs the served norm offset");
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
