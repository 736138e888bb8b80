#include "worker/backends/cpu/cpu_weights.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/model_file.h"
#include "kernels/cpu/ops.h"

namespace astr {
namespace {

// Loads tensors `names` (each [rows_i, cols]) stacked along rows, then packs them.
Status LoadStacked(const ModelFile& file, const std::vector<std::pair<std::string, int64_t>>& parts,
                   int64_t cols, cpu::WeightType type, cpu::PackedMatrix* out) {
  int64_t rows = 0;
  for (const auto& p : parts) rows += p.second;
  std::vector<float> stacked;
  std::vector<float> one;
  if (parts.size() > 1) stacked.resize(static_cast<size_t>(rows * cols));
  int64_t row = 0;
  for (const auto& [name, n] : parts) {
    ASTR_RETURN_IF_ERROR(file.LoadF32(name, {n, cols}, &one));
    if (parts.size() == 1) {
      *out = cpu::PackedMatrix::FromF32(one.data(), n, cols, type);
      return OkStatus();
    }
    std::memcpy(stacked.data() + row * cols, one.data(), one.size() * sizeof(float));
    row += n;
  }
  *out = cpu::PackedMatrix::FromF32(stacked.data(), rows, cols, type);
  return OkStatus();
}

Status LoadVector(const ModelFile& file, const std::string& name, int64_t n,
                  std::vector<float>* out) {
  return file.LoadF32(name, {n}, out);
}

Status LoadLayer(const ModelFile& file, const ModelConfig& c, int64_t i, cpu::WeightType type,
                 CpuLayerWeights* w) {
  const std::string p = "layers." + std::to_string(i) + ".";
  const int64_t q_rows = c.num_heads * c.head_dim, kv_rows = c.num_kv_heads * c.head_dim;
  ASTR_RETURN_IF_ERROR(LoadVector(file, p + "attn_norm", c.hidden_size, &w->attn_norm));
  ASTR_RETURN_IF_ERROR(LoadVector(file, p + "mlp_norm", c.hidden_size, &w->mlp_norm));
  std::vector<std::pair<std::string, int64_t>> qkv = {
      {p + "q_proj", q_rows}, {p + "k_proj", kv_rows}, {p + "v_proj", kv_rows}};
  if (c.gated_attention) qkv.push_back({p + "attn_gate", q_rows});
  ASTR_RETURN_IF_ERROR(LoadStacked(file, qkv, c.hidden_size, type, &w->qkv));
  if (c.qkv_bias) {
    w->qkv_bias.assign(w->qkv.n(), 0.0f);
    std::vector<float> b;
    int64_t off = 0;
    for (const auto& [name, rows] : {std::pair<std::string, int64_t>{p + "q_bias", q_rows},
                                     {p + "k_bias", kv_rows},
                                     {p + "v_bias", kv_rows}}) {
      ASTR_RETURN_IF_ERROR(LoadVector(file, name, rows, &b));
      std::memcpy(w->qkv_bias.data() + off, b.data(), rows * sizeof(float));
      off += rows;
    }
  }
  if (c.qk_norm != QkNorm::kNone) {
    ASTR_RETURN_IF_ERROR(LoadVector(file, p + "q_norm", c.head_dim, &w->q_norm));
    ASTR_RETURN_IF_ERROR(LoadVector(file, p + "k_norm", c.head_dim, &w->k_norm));
  }
  ASTR_RETURN_IF_ERROR(LoadStacked(file, {{p + "o_proj", c.hidden_size}}, q_rows, type, &w->o));
  ASTR_RETURN_IF_ERROR(LoadStacked(
      file, {{p + "gate_proj", c.intermediate_size}, {p + "up_proj", c.intermediate_size}},
      c.hidden_size, type, &w->gate_up));
  return LoadStacked(file, {{p + "down_proj", c.hidden_size}}, c.intermediate_size, type, &w->down);
}

// On a terminal: one line rewritten per layer; in a log: a line at each quarter.
void ReportProgress(int64_t done, int64_t total, std::chrono::steady_clock::time_point start) {
  static const bool tty = isatty(fileno(stderr)) != 0;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (tty) {
    std::fprintf(stderr, "\rastr: loading weights: layer %lld/%lld (%.1f s)%s",
                 static_cast<long long>(done), static_cast<long long>(total), s,
                 done == total ? "\n" : "");
  } else if ((done * 4) / total != ((done - 1) * 4) / total) {
    std::fprintf(stderr, "astr: loading weights: layer %lld/%lld (%.1f s)\n",
                 static_cast<long long>(done), static_cast<long long>(total), s);
  }
}

}  // namespace

void CpuWeights::GatherEmbeddings(const int32_t* ids, int64_t n, int64_t hidden, float* out) const {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = ids[i];
    if (type == cpu::WeightType::kF32) {
      std::memcpy(out + i * hidden, embed_f32.data() + row * hidden, hidden * sizeof(float));
    } else {
      cpu::Bf16ToF32(embed_bf16.data() + row * hidden, out + i * hidden, hidden);
    }
  }
}

size_t CpuWeights::bytes() const {
  size_t total =
      embed_f32.size() * 4 + embed_bf16.size() * 2 + final_norm.size() * 4 + lm_head.bytes();
  for (const auto& l : layers) {
    total += (l.attn_norm.size() + l.mlp_norm.size() + l.q_norm.size() + l.k_norm.size() +
              l.qkv_bias.size()) *
             4;
    total += l.qkv.bytes() + l.o.bytes() + l.gate_up.bytes() + l.down.bytes();
  }
  return total;
}

StatusOr<CpuWeights> LoadCpuWeights(const ModelFile& file, cpu::WeightType type, bool progress) {
  const ModelConfig& c = file.config();
  CpuWeights w;
  w.type = type;
  const auto start = std::chrono::steady_clock::now();
  std::vector<float> embed;
  ASTR_RETURN_IF_ERROR(file.LoadF32("embed", {c.vocab_size, c.hidden_size}, &embed));
  if (c.tie_word_embeddings) {
    w.lm_head = cpu::PackedMatrix::FromF32(embed.data(), c.vocab_size, c.hidden_size, type);
  } else {
    ASTR_RETURN_IF_ERROR(
        LoadStacked(file, {{"lm_head", c.vocab_size}}, c.hidden_size, type, &w.lm_head));
  }
  if (type == cpu::WeightType::kF32) {
    w.embed_f32 = std::move(embed);
  } else {
    w.embed_bf16.resize(embed.size());
    cpu::F32ToBf16(embed.data(), w.embed_bf16.data(), static_cast<int64_t>(embed.size()));
    std::vector<float>().swap(embed);
  }
  ASTR_RETURN_IF_ERROR(LoadVector(file, "final_norm", c.hidden_size, &w.final_norm));
  w.layers.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    ASTR_RETURN_IF_ERROR(LoadLayer(file, c, i, type, &w.layers[i]));
    if (progress) ReportProgress(i + 1, c.num_layers, start);
  }
  return w;
}

}  // namespace astr
