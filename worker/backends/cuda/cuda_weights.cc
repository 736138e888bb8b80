#include "worker/backends/cuda/cuda_weights.h"

#include <chrono>
#include <cstring>
#include <iomanip>

#include "common/base/logging.h"
#include "common/model/model_file.h"
#include "kernels/cpu/ops.h"
#include "worker/rope.h"

namespace astr::cuda {
namespace {

StatusOr<DeviceMemory> UploadBytes(const void* data, size_t bytes, const std::string& what) {
  ASTR_ASSIGN_OR_RETURN(DeviceMemory m, DeviceAllocator::Allocate(bytes, what));
  ASTR_CUDA_RETURN_IF_ERROR(cudaMemcpy(m.get(), data, bytes, cudaMemcpyHostToDevice),
                            "uploading " + what);
  return m;
}

class Uploader {
 public:
  explicit Uploader(const model::TensorSource& file) : file_(file) {}

  // f32 vector on the host.
  Status Host(const std::string& name, int64_t n, std::vector<float>* out) {
    return file_.LoadF32(name, {n}, out);
  }

  // f32 vector as is.
  StatusOr<DeviceMemory> Vector(const std::string& name, int64_t n) {
    ASTR_RETURN_IF_ERROR(file_.LoadF32(name, {n}, &one_));
    return UploadBytes(one_.data(), one_.size() * sizeof(float), name);
  }

  // Tensors `parts` (each [rows_i, cols]) stacked along rows, as bf16.
  StatusOr<DeviceMemory> Stacked(const std::vector<std::pair<std::string, int64_t>>& parts,
                                 int64_t cols) {
    int64_t rows = 0;
    for (const auto& p : parts) rows += p.second;
    bf16_.resize(static_cast<size_t>(rows * cols));
    int64_t row = 0;
    for (const auto& [name, n] : parts) {
      ASTR_RETURN_IF_ERROR(file_.LoadF32(name, {n, cols}, &one_));
      cpu::F32ToBf16(one_.data(), bf16_.data() + row * cols, n * cols);
      row += n;
    }
    return UploadBytes(bf16_.data(), bf16_.size() * sizeof(uint16_t), parts[0].first);
  }

 private:
  const model::TensorSource& file_;
  std::vector<float> one_;
  std::vector<uint16_t> bf16_;
};

Status LoadLayer(Uploader& up, const model::ModelConfig& c, int64_t i, CudaLayerWeights* w) {
  const std::string p = "layers." + std::to_string(i) + ".";
  const int64_t q_rows = c.num_heads * c.head_dim, kv_rows = c.num_kv_heads * c.head_dim;
  ASTR_ASSIGN_OR_RETURN(w->attn_norm, up.Vector(p + "attn_norm", c.hidden_size));
  ASTR_ASSIGN_OR_RETURN(w->mlp_norm, up.Vector(p + "mlp_norm", c.hidden_size));
  std::vector<std::pair<std::string, int64_t>> qkv = {
      {p + "q_proj", q_rows}, {p + "k_proj", kv_rows}, {p + "v_proj", kv_rows}};
  if (c.gated_attention) qkv.push_back({p + "attn_gate", q_rows});
  ASTR_ASSIGN_OR_RETURN(w->qkv, up.Stacked(qkv, c.hidden_size));
  if (c.qkv_bias) {
    // The gate rows (gated attention) get no bias: zeros there, as on the CPU.
    const int64_t total = q_rows + 2 * kv_rows + (c.gated_attention ? q_rows : 0);
    std::vector<float> bias(static_cast<size_t>(total), 0.0f), b;
    int64_t off = 0;
    for (const auto& [name, rows] : {std::pair<std::string, int64_t>{p + "q_bias", q_rows},
                                     {p + "k_bias", kv_rows},
                                     {p + "v_bias", kv_rows}}) {
      ASTR_RETURN_IF_ERROR(up.Host(name, rows, &b));
      std::memcpy(bias.data() + off, b.data(), rows * sizeof(float));
      off += rows;
    }
    ASTR_ASSIGN_OR_RETURN(w->qkv_bias,
                          UploadBytes(bias.data(), bias.size() * sizeof(float), p + "qkv_bias"));
  }
  if (c.qk_norm != model::QkNorm::kNone) {
    ASTR_ASSIGN_OR_RETURN(w->q_norm, up.Vector(p + "q_norm", c.head_dim));
    ASTR_ASSIGN_OR_RETURN(w->k_norm, up.Vector(p + "k_norm", c.head_dim));
  }
  ASTR_ASSIGN_OR_RETURN(w->o, up.Stacked({{p + "o_proj", c.hidden_size}}, q_rows));
  ASTR_ASSIGN_OR_RETURN(w->gate_up, up.Stacked({{p + "gate_proj", c.intermediate_size},
                                                {p + "up_proj", c.intermediate_size}},
                                               c.hidden_size));
  ASTR_ASSIGN_OR_RETURN(w->down,
                        up.Stacked({{p + "down_proj", c.hidden_size}}, c.intermediate_size));
  return OkStatus();
}

}  // namespace

size_t CudaWeights::bytes() const {
  size_t total = embed.bytes() + lm_head.bytes() + final_norm.bytes() + inv_freq.bytes();
  for (const auto& l : layers) {
    total += l.attn_norm.bytes() + l.mlp_norm.bytes() + l.q_norm.bytes() + l.k_norm.bytes() +
             l.qkv_bias.bytes() + l.qkv.bytes() + l.o.bytes() + l.gate_up.bytes() + l.down.bytes();
  }
  return total;
}

StatusOr<CudaWeights> LoadCudaWeights(const model::TensorSource& file, bool progress) {
  const model::ModelConfig& c = file.config();
  Uploader up(file);
  CudaWeights w;
  const auto start = std::chrono::steady_clock::now();
  ASTR_ASSIGN_OR_RETURN(w.embed, up.Stacked({{"embed", c.vocab_size}}, c.hidden_size));
  if (!c.tie_word_embeddings) {
    ASTR_ASSIGN_OR_RETURN(w.lm_head, up.Stacked({{"lm_head", c.vocab_size}}, c.hidden_size));
  }
  ASTR_ASSIGN_OR_RETURN(w.final_norm, up.Vector("final_norm", c.hidden_size));
  const std::vector<float> inv_freq = RopeInvFreq(c);
  ASTR_ASSIGN_OR_RETURN(
      w.inv_freq, UploadBytes(inv_freq.data(), inv_freq.size() * sizeof(float), "rope inv_freq"));
  w.qkv_rows =
      (c.num_heads + 2 * c.num_kv_heads + (c.gated_attention ? c.num_heads : 0)) * c.head_dim;
  w.layers.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    ASTR_RETURN_IF_ERROR(LoadLayer(up, c, i, &w.layers[i]));
    if (progress) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      LOG(INFO) << "loading weights to the GPU: layer " << i + 1 << "/" << c.num_layers << " ("
                << std::fixed << std::setprecision(1) << s << " s)";
    }
  }
  return w;
}

}  // namespace astr::cuda
