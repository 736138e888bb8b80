#include "worker/backends/cuda/cuda_weights.h"

#include <chrono>
#include <cstring>
#include <iomanip>
#include <span>

#include "common/base/logging.h"
#include "common/model/model_file.h"
#include "kernels/cpu/ops.h"
#include "worker/rope.h"

namespace astr::cuda {
namespace {

StatusOr<DeviceMemory> UploadBytes(const void* data, size_t bytes, const std::string& what,
                                   ReleasableArena* arena) {
  DeviceMemory m;
  if (arena != nullptr) {
    ASTR_ASSIGN_OR_RETURN(void* p, arena->Take(bytes));
    m = DeviceMemory::View(p, bytes);
  } else {
    ASTR_ASSIGN_OR_RETURN(m, DeviceAllocator::Allocate(bytes, what));
  }
  ASTR_CUDA_RETURN_IF_ERROR(cudaMemcpy(m.get(), data, bytes, cudaMemcpyHostToDevice),
                            "uploading " + what);
  return m;
}

WeightSlot ModelSlot(DeviceMemory CudaWeights::*member) { return {member, -1, nullptr}; }
WeightSlot LayerSlot(int64_t layer, DeviceMemory CudaLayerWeights::*member) {
  return {nullptr, layer, member};
}

template <typename T>
std::span<const uint8_t> AsBytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

// Reads tensors from the source, converts them into one device buffer's layout on the host and
// hands the buffer on. The scratch vectors are reused from tensor to tensor.
class Converter {
 public:
  Converter(const model::TensorSource& source, const ConvertedBuffer& put, double norm_offset)
      : source_(source), put_(put), norm_offset_(static_cast<float>(norm_offset)) {}

  // A norm's f32 weight, plus the config's norm_weight_offset: the scale it applies.
  Status Norm(const WeightSlot& slot, const std::string& name, int64_t n) {
    ASTR_RETURN_IF_ERROR(Load(name, {n}));
    if (norm_offset_ != 0.0f) {
      for (float& x : one_) x += norm_offset_;
    }
    return put_(slot, name, AsBytes(one_));
  }

  // f32 vectors `parts` one after the other, then zeros up to `total` values.
  Status Concat(const WeightSlot& slot, const std::string& what,
                const std::vector<std::pair<std::string, int64_t>>& parts, int64_t total) {
    f32_.assign(static_cast<size_t>(total), 0.0f);
    int64_t off = 0;
    for (const auto& [name, n] : parts) {
      ASTR_RETURN_IF_ERROR(Load(name, {n}));
      std::memcpy(f32_.data() + off, one_.data(), n * sizeof(float));
      off += n;
    }
    return put_(slot, what, AsBytes(f32_));
  }

  // Tensors `parts` (each [rows_i, cols]) stacked along rows, as bf16.
  Status Stacked(const WeightSlot& slot, const std::vector<std::pair<std::string, int64_t>>& parts,
                 int64_t cols) {
    int64_t rows = 0;
    for (const auto& p : parts) rows += p.second;
    bf16_.resize(static_cast<size_t>(rows * cols));
    int64_t row = 0;
    for (const auto& [name, n] : parts) {
      ASTR_RETURN_IF_ERROR(Load(name, {n, cols}));
      cpu::F32ToBf16(one_.data(), bf16_.data() + row * cols, n * cols);
      row += n;
    }
    return put_(slot, parts[0].first, AsBytes(bf16_));
  }

 private:
  // The tensor as f32 in one_, checked to hold as many values as `shape` says (a source must
  // not make a buffer overrun, whatever it returns).
  Status Load(const std::string& name, const std::vector<int64_t>& shape) {
    ASTR_RETURN_IF_ERROR(source_.LoadF32(name, shape, &one_));
    int64_t want = 1;
    for (int64_t d : shape) want *= d;
    if (static_cast<int64_t>(one_.size()) != want) {
      return InvalidArgumentError("tensor '" + name + "' has " + std::to_string(one_.size()) +
                                  " values, expected " + std::to_string(want));
    }
    return OkStatus();
  }

  const model::TensorSource& source_;
  const ConvertedBuffer& put_;
  const float norm_offset_;
  std::vector<float> one_;
  std::vector<float> f32_;
  std::vector<uint16_t> bf16_;
};

Status ConvertLayer(Converter& cv, const model::ModelConfig& c, int64_t i) {
  using L = CudaLayerWeights;
  const std::string p = "layers." + std::to_string(i) + ".";
  const int64_t q_rows = c.num_heads * c.head_dim, kv_rows = c.num_kv_heads * c.head_dim;
  ASTR_RETURN_IF_ERROR(cv.Norm(LayerSlot(i, &L::attn_norm), p + "attn_norm", c.hidden_size));
  ASTR_RETURN_IF_ERROR(cv.Norm(LayerSlot(i, &L::mlp_norm), p + "mlp_norm", c.hidden_size));
  std::vector<std::pair<std::string, int64_t>> qkv = {
      {p + "q_proj", q_rows}, {p + "k_proj", kv_rows}, {p + "v_proj", kv_rows}};
  if (c.gated_attention) qkv.push_back({p + "attn_gate", q_rows});
  ASTR_RETURN_IF_ERROR(cv.Stacked(LayerSlot(i, &L::qkv), qkv, c.hidden_size));
  if (c.qkv_bias) {
    // The gate rows (gated attention) get no bias: zeros there, as on the CPU.
    const int64_t total = q_rows + 2 * kv_rows + (c.gated_attention ? q_rows : 0);
    ASTR_RETURN_IF_ERROR(cv.Concat(
        LayerSlot(i, &L::qkv_bias), p + "qkv_bias",
        {{p + "q_bias", q_rows}, {p + "k_bias", kv_rows}, {p + "v_bias", kv_rows}}, total));
  }
  if (c.qk_norm != model::QkNorm::kNone) {
    ASTR_RETURN_IF_ERROR(cv.Norm(LayerSlot(i, &L::q_norm), p + "q_norm", c.head_dim));
    ASTR_RETURN_IF_ERROR(cv.Norm(LayerSlot(i, &L::k_norm), p + "k_norm", c.head_dim));
  }
  ASTR_RETURN_IF_ERROR(cv.Stacked(LayerSlot(i, &L::o), {{p + "o_proj", c.hidden_size}}, q_rows));
  if (c.o_bias) {
    ASTR_RETURN_IF_ERROR(cv.Concat(LayerSlot(i, &L::o_bias), p + "o_bias",
                                   {{p + "o_bias", c.hidden_size}}, c.hidden_size));
  }
  if (c.attn_sinks) {
    ASTR_RETURN_IF_ERROR(cv.Concat(LayerSlot(i, &L::attn_sinks), p + "attn_sinks",
                                   {{p + "attn_sinks", c.num_heads}}, c.num_heads));
  }
  if (c.sandwich_norms) {
    ASTR_RETURN_IF_ERROR(
        cv.Norm(LayerSlot(i, &L::post_attn_norm), p + "post_attn_norm", c.hidden_size));
    ASTR_RETURN_IF_ERROR(
        cv.Norm(LayerSlot(i, &L::post_mlp_norm), p + "post_mlp_norm", c.hidden_size));
  }
  if (c.LayerIsMoe(i)) {
    ASTR_RETURN_IF_ERROR(
        cv.Stacked(LayerSlot(i, &L::router), {{p + "router", c.num_experts}}, c.hidden_size));
    std::vector<std::pair<std::string, int64_t>> gate_up, down;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const std::string x = p + "experts." + std::to_string(e) + ".";
      gate_up.push_back({x + "gate_proj", c.moe_intermediate_size});
      gate_up.push_back({x + "up_proj", c.moe_intermediate_size});
      down.push_back({x + "down_proj", c.hidden_size});
    }
    ASTR_RETURN_IF_ERROR(cv.Stacked(LayerSlot(i, &L::experts_gate_up), gate_up, c.hidden_size));
    ASTR_RETURN_IF_ERROR(cv.Stacked(LayerSlot(i, &L::experts_down), down, c.moe_intermediate_size));
    if (c.router_bias) {
      ASTR_RETURN_IF_ERROR(cv.Concat(LayerSlot(i, &L::router_bias), p + "router_bias",
                                     {{p + "router_bias", c.num_experts}}, c.num_experts));
    }
    if (c.router_choice_bias) {
      ASTR_RETURN_IF_ERROR(cv.Concat(LayerSlot(i, &L::router_choice_bias), p + "router_choice_bias",
                                     {{p + "router_choice_bias", c.num_experts}}, c.num_experts));
    }
    if (c.expert_bias) {
      const int64_t f = c.moe_intermediate_size, h = c.hidden_size;
      std::vector<std::pair<std::string, int64_t>> gate_up_bias, down_bias;
      for (int64_t e = 0; e < c.num_experts; ++e) {
        const std::string x = p + "experts." + std::to_string(e) + ".";
        gate_up_bias.push_back({x + "gate_bias", f});
        gate_up_bias.push_back({x + "up_bias", f});
        down_bias.push_back({x + "down_bias", h});
      }
      ASTR_RETURN_IF_ERROR(cv.Concat(LayerSlot(i, &L::experts_gate_up_bias),
                                     p + "experts.gate_up_bias", gate_up_bias,
                                     c.num_experts * 2 * f));
      ASTR_RETURN_IF_ERROR(cv.Concat(LayerSlot(i, &L::experts_down_bias), p + "experts.down_bias",
                                     down_bias, c.num_experts * h));
    }
    if (const int64_t sf = c.shared_expert_intermediate_size; sf > 0) {
      ASTR_RETURN_IF_ERROR(cv.Stacked(
          LayerSlot(i, &L::shared_gate_up),
          {{p + "shared_expert.gate_proj", sf}, {p + "shared_expert.up_proj", sf}}, c.hidden_size));
      ASTR_RETURN_IF_ERROR(cv.Stacked(LayerSlot(i, &L::shared_down),
                                      {{p + "shared_expert.down_proj", c.hidden_size}}, sf));
      if (c.shared_expert_gated) {
        ASTR_RETURN_IF_ERROR(cv.Stacked(LayerSlot(i, &L::shared_gate),
                                        {{p + "shared_expert_gate", 1}}, c.hidden_size));
      }
    }
    return OkStatus();
  }
  ASTR_RETURN_IF_ERROR(
      cv.Stacked(LayerSlot(i, &L::gate_up),
                 {{p + "gate_proj", c.intermediate_size}, {p + "up_proj", c.intermediate_size}},
                 c.hidden_size));
  return cv.Stacked(LayerSlot(i, &L::down), {{p + "down_proj", c.hidden_size}},
                    c.intermediate_size);
}

}  // namespace

size_t CudaWeights::bytes() const {
  size_t total = embed.bytes() + lm_head.bytes() + final_norm.bytes() + inv_freq.bytes() +
                 inv_freq_local.bytes() + inv_freq_long.bytes();
  for (const auto& l : layers) {
    total += l.attn_norm.bytes() + l.mlp_norm.bytes() + l.post_attn_norm.bytes() +
             l.post_mlp_norm.bytes() + l.q_norm.bytes() + l.k_norm.bytes() + l.qkv_bias.bytes() +
             l.qkv.bytes() + l.o.bytes() + l.gate_up.bytes() + l.down.bytes() + l.router.bytes() +
             l.experts_gate_up.bytes() + l.experts_down.bytes() + l.shared_gate_up.bytes() +
             l.shared_down.bytes() + l.shared_gate.bytes() + l.o_bias.bytes() +
             l.attn_sinks.bytes() + l.router_bias.bytes() + l.router_choice_bias.bytes() +
             l.experts_gate_up_bias.bytes() + l.experts_down_bias.bytes();
  }
  return total;
}

DeviceMemory& CudaWeights::at(const WeightSlot& slot) {
  return slot.model != nullptr ? this->*slot.model : layers[slot.layer].*slot.field;
}
const DeviceMemory& CudaWeights::at(const WeightSlot& slot) const {
  return slot.model != nullptr ? this->*slot.model : layers[slot.layer].*slot.field;
}

Status ConvertCudaWeights(const model::TensorSource& source, const model::ModelConfig& c,
                          const std::string& progress, const ConvertedBuffer& put) {
  Converter cv(source, put, c.norm_weight_offset);
  const auto start = std::chrono::steady_clock::now();
  ASTR_RETURN_IF_ERROR(
      cv.Stacked(ModelSlot(&CudaWeights::embed), {{"embed", c.vocab_size}}, c.hidden_size));
  if (!c.tie_word_embeddings) {
    ASTR_RETURN_IF_ERROR(
        cv.Stacked(ModelSlot(&CudaWeights::lm_head), {{"lm_head", c.vocab_size}}, c.hidden_size));
  }
  ASTR_RETURN_IF_ERROR(cv.Norm(ModelSlot(&CudaWeights::final_norm), "final_norm", c.hidden_size));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    ASTR_RETURN_IF_ERROR(ConvertLayer(cv, c, i));
    if (!progress.empty()) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      LOG(INFO) << progress << ": layer " << i + 1 << "/" << c.num_layers << " (" << std::fixed
                << std::setprecision(1) << s << " s)";
    }
  }
  return OkStatus();
}

StatusOr<CudaWeights> LoadCudaWeights(const model::TensorSource& file, bool progress,
                                      ReleasableArena* arena) {
  const model::ModelConfig& c = file.config();
  CudaWeights w;
  w.layers.resize(c.num_layers);
  w.qkv_rows =
      (c.num_heads + 2 * c.num_kv_heads + (c.gated_attention ? c.num_heads : 0)) * c.head_dim;
  ASTR_RETURN_IF_ERROR(ConvertCudaWeights(
      file, c, progress ? "loading weights to the GPU" : "",
      [&w, arena](const WeightSlot& slot, const std::string& what, std::span<const uint8_t> host) {
        ASTR_ASSIGN_OR_RETURN(w.at(slot), UploadBytes(host.data(), host.size(), what, arena));
        return OkStatus();
      }));
  const std::vector<float> inv_freq = RopeInvFreq(c);
  // Derived from the config, not a weight: no update brings it back, so never released.
  ASTR_ASSIGN_OR_RETURN(w.inv_freq, UploadBytes(inv_freq.data(), inv_freq.size() * sizeof(float),
                                                "rope inv_freq", nullptr));
  if (c.rope_local_theta > 0.0) {
    const std::vector<float> local = RopeInvFreq(c, /*local=*/true);
    ASTR_ASSIGN_OR_RETURN(w.inv_freq_local, UploadBytes(local.data(), local.size() * sizeof(float),
                                                        "local rope inv_freq", nullptr));
  }
  if (const std::vector<float> lng = RopeInvFreqLong(c); !lng.empty()) {
    ASTR_ASSIGN_OR_RETURN(w.inv_freq_long, UploadBytes(lng.data(), lng.size() * sizeof(float),
                                                       "long rope inv_freq", nullptr));
  }
  return w;
}

}  // namespace astr::cuda
