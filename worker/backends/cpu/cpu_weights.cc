#include "worker/backends/cpu/cpu_weights.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <optional>

#include "common/base/logging.h"
#include "common/model/model_file.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/backends/cpu/quant_format.h"

namespace astr {
namespace {

// Reads tensors and packs them on the thread pool. Block-quantized tensors keep their form (with
// WeightType::kBF16); everything else is read as f32 into buffers reused from tensor to tensor (no
// page faults per tensor) and packed as bf16 or f32.
class WeightLoader {
 public:
  WeightLoader(const model::TensorSource& file, cpu::WeightType type, cpu::ThreadPool* pool)
      : file_(file), type_(type), pool_(pool) {}

  // The tensor as f32 in `out`. The common checkpoint dtypes (F16, BF16, F32) take the SIMD
  // conversion on the pool; everything else, and every error message, goes through LoadF32.
  Status Read(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>* out) {
    auto raw = file_.Raw(name);
    const bool fast = raw.ok() && raw->shape == shape &&
                      (raw->dtype == model::DType::kF16 || raw->dtype == model::DType::kBF16 ||
                       raw->dtype == model::DType::kF32);
    if (!fast) {
      ASTR_RETURN_IF_ERROR(file_.LoadF32(name, shape, out));
      if (raw.ok()) file_.ReleaseResident(*raw);
      return OkStatus();
    }
    const int64_t n = raw->num_elements();
    out->resize(static_cast<size_t>(n));
    float* dst = out->data();
    cpu::ParallelFor(pool_, n, int64_t{1} << 16,
                     [&](int64_t b, int64_t e) { ConvertElements(*raw, b, e - b, dst + b); });
    file_.ReleaseResident(*raw);
    return OkStatus();
  }

  // The stored view of `name` when it stays block-quantized: kBF16 weights, a block type, the
  // expected shape and rows that are whole sub-blocks.
  std::optional<model::TensorView> QuantView(const std::string& name, int64_t rows, int64_t cols) {
    if (type_ != cpu::WeightType::kBF16) return std::nullopt;
    auto raw = file_.Raw(name);
    if (!raw.ok() || raw->shape != std::vector<int64_t>{rows, cols}) return std::nullopt;
    const auto layout = model::QuantLayoutOf(raw->dtype);
    if (!layout || cols % model::DTypeBlockElements(raw->dtype) != 0) return std::nullopt;
    return *raw;
  }

  // Loads tensors `parts` (each [rows_i, cols]) stacked along rows. Runs of consecutive tensors
  // that pack alike (float, or block types of one layout) share a matrix.
  // Float parts are packed into the storage of a matching part of `reuse` (may be null).
  Status Stacked(const std::vector<std::pair<std::string, int64_t>>& parts, int64_t cols,
                 CpuLinear* out, CpuLinear* reuse = nullptr) {
    struct Part {
      std::string name;
      int64_t rows;
      std::optional<model::TensorView> quant;
    };
    std::vector<Part> all;
    for (const auto& [name, rows] : parts) all.push_back({name, rows, QuantView(name, rows, cols)});
    auto same_kind = [](const Part& a, const Part& b) {
      if (a.quant.has_value() != b.quant.has_value()) return false;
      if (!a.quant) return true;
      return QuantKernelFormat(a.quant->dtype) == QuantKernelFormat(b.quant->dtype);
    };
    out->parts.clear();
    for (size_t begin = 0; begin < all.size();) {
      size_t end = begin + 1;
      while (end < all.size() && same_kind(all[begin], all[end])) ++end;
      const std::vector<Part> group(all.begin() + begin, all.begin() + end);
      if (group[0].quant) {
        StackedViews views;
        for (const Part& p : group) views.push_back({*p.quant, p.rows});
        out->parts.push_back(PackQuant(views, cols));
        for (const Part& p : group) file_.ReleaseResident(*p.quant);
      } else {
        std::vector<std::pair<std::string, int64_t>> names;
        for (const Part& p : group) names.push_back({p.name, p.rows});
        cpu::PackedMatrix m;
        ASTR_RETURN_IF_ERROR(PackFloat(names, cols, &m, reuse));
        out->parts.push_back(std::move(m));
      }
      begin = end;
    }
    return OkStatus();
  }

  Status Vector(const std::string& name, int64_t n, std::vector<float>* out) {
    return file_.LoadF32(name, {n}, out);
  }

  // The stored view of `name` when it is a float tensor of the expected shape (read in place).
  std::optional<model::TensorView> FloatView(const std::string& name, int64_t rows, int64_t cols) {
    auto raw = file_.Raw(name);
    if (!raw.ok() || raw->shape != std::vector<int64_t>{rows, cols}) return std::nullopt;
    if (raw->dtype != model::DType::kF16 && raw->dtype != model::DType::kBF16 &&
        raw->dtype != model::DType::kF32) {
      return std::nullopt;
    }
    return *raw;
  }

  // Elements [first, first + count) of a float view (FloatView) as f32.
  static void ConvertElements(const model::TensorView& view, int64_t first, int64_t count,
                              float* dst) {
    if (view.dtype == model::DType::kF16) {
      cpu::F16ToF32(static_cast<const uint16_t*>(view.data) + first, dst, count);
    } else if (view.dtype == model::DType::kBF16) {
      cpu::Bf16ToF32(static_cast<const uint16_t*>(view.data) + first, dst, count);
    } else {
      std::memcpy(dst, static_cast<const float*>(view.data) + first, count * sizeof(float));
    }
  }

 private:
  // Stacked tensors, each with its rows: which one holds stacked row `row`, and its row there.
  using StackedViews = std::vector<std::pair<model::TensorView, int64_t>>;
  static std::pair<const model::TensorView*, int64_t> Locate(const StackedViews& views,
                                                             int64_t row) {
    for (const auto& [view, n] : views) {
      if (row < n) return {&view, row};
      row -= n;
    }
    return {nullptr, 0};  // past the end: the callers ask only for rows < the total
  }

  cpu::PackedMatrix PackQuant(const StackedViews& views, int64_t cols) {
    int64_t rows = 0;
    for (const auto& v : views) rows += v.second;
    return cpu::PackedMatrix::FromQuantRows(
        rows, cols, QuantKernelFormat(views[0].first.dtype),
        [&](int64_t row, const cpu::QuantRowOut& out) {
          const auto [view, local] = Locate(views, row);
          // Whole blocks per row: QuantView checked.
          const uint64_t row_bytes = *model::DTypeByteSize(view->dtype, cols);
          const auto* bytes = static_cast<const uint8_t*>(view->data) + local * row_bytes;
          const model::SuperScales super{out.d, out.dmin, out.sc, out.m};
          model::DecodeQuant(view->dtype, bytes, cols, out.q, out.scale, out.min,
                             out.d != nullptr ? &super : nullptr);
        },
        pool_);
  }

  // A part of `reuse` with this layout (its storage is taken by the packing), or null.
  static cpu::PackedMatrix* Reusable(CpuLinear* reuse, int64_t n, int64_t k, cpu::WeightType type) {
    if (reuse == nullptr) return nullptr;
    for (cpu::PackedMatrix& m : reuse->parts) {
      if (m.n() == n && m.k() == k && m.type() == type && m.bytes() != 0) return &m;
    }
    return nullptr;
  }

  Status PackFloat(const std::vector<std::pair<std::string, int64_t>>& parts, int64_t cols,
                   cpu::PackedMatrix* out, CpuLinear* reuse) {
    const cpu::WeightType type =
        type_ == cpu::WeightType::kF32 ? cpu::WeightType::kF32 : cpu::WeightType::kBF16;
    int64_t rows = 0;
    for (const auto& p : parts) rows += p.second;
    cpu::PackedMatrix* storage = Reusable(reuse, rows, cols, type);
    // Float tensors in the file: packed panel by panel straight from the mapping.
    StackedViews views;
    for (const auto& [name, n] : parts) {
      if (auto v = FloatView(name, n, cols)) views.push_back({*v, n});
    }
    const bool all_bf16 = std::all_of(views.begin(), views.end(), [](const auto& v) {
      return v.first.dtype == model::DType::kBF16;
    });
    if (views.size() == parts.size() && all_bf16 && type == cpu::WeightType::kBF16) {
      // bf16 into bf16: the bits as they are.
      *out = cpu::PackedMatrix::FromBf16Rows(
          rows, cols,
          [&](int64_t r) {
            const auto [view, local] = Locate(views, r);
            return static_cast<const uint16_t*>(view->data) + local * cols;
          },
          pool_, storage);
      for (const auto& v : views) file_.ReleaseResident(v.first);
      return OkStatus();
    }
    if (views.size() == parts.size()) {
      *out = cpu::PackedMatrix::FromF32Rows(
          rows, cols, type,
          [&](int64_t row, int64_t count, float* dst) {
            for (int64_t r = row; r < row + count; ++r, dst += cols) {
              const auto [view, local] = Locate(views, r);
              ConvertElements(*view, local * cols, cols, dst);
            }
          },
          pool_, storage);
      for (const auto& v : views) file_.ReleaseResident(v.first);
      return OkStatus();
    }
    const auto from_f32 = [&](const float* w) {
      return cpu::PackedMatrix::FromF32Rows(
          rows, cols, type,
          [w, cols](int64_t row, int64_t count, float* dst) {
            std::memcpy(dst, w + row * cols, static_cast<size_t>(count * cols) * sizeof(float));
          },
          pool_, storage);
    };
    if (parts.size() == 1) {
      ASTR_RETURN_IF_ERROR(Read(parts[0].first, {rows, cols}, &one_));
      *out = from_f32(one_.data());
      return OkStatus();
    }
    stacked_.resize(static_cast<size_t>(rows * cols));
    int64_t row = 0;
    for (const auto& [name, n] : parts) {
      ASTR_RETURN_IF_ERROR(Read(name, {n, cols}, &one_));
      std::memcpy(stacked_.data() + row * cols, one_.data(), one_.size() * sizeof(float));
      row += n;
    }
    *out = from_f32(stacked_.data());
    return OkStatus();
  }

  const model::TensorSource& file_;
  cpu::WeightType type_;
  cpu::ThreadPool* pool_;
  std::vector<float> one_;
  std::vector<float> stacked_;
};

using Kind = CpuWeightGroup::Kind;

std::string LayerPrefix(int64_t i) { return "layers." + std::to_string(i) + "."; }

// The linear layer of group `g` in `w` (null for vectors and the embedding); const with a const
// `w`.
template <typename Weights>
auto LinearOf(const CpuWeightGroup& g, Weights* w) -> decltype(&w->lm_head) {
  switch (g.kind) {
    case Kind::kLmHead:
      return &w->lm_head;
    case Kind::kQkv:
      return &w->layers[g.layer].qkv;
    case Kind::kO:
      return &w->layers[g.layer].o;
    case Kind::kGateUp:
      return &w->layers[g.layer].gate_up;
    case Kind::kDown:
      return &w->layers[g.layer].down;
    case Kind::kRouter:
      return &w->layers[g.layer].router;
    case Kind::kExpertGateUp:
      return &w->layers[g.layer].expert_gate_up[g.expert];
    case Kind::kExpertDown:
      return &w->layers[g.layer].expert_down[g.expert];
    case Kind::kSharedGateUp:
      return &w->layers[g.layer].shared_gate_up;
    case Kind::kSharedDown:
      return &w->layers[g.layer].shared_down;
    default:
      return nullptr;
  }
}

// The f32 vector of group `g` in `w` (null for the others); const with a const `w`.
template <typename Weights>
auto VectorOf(const CpuWeightGroup& g, Weights* w) -> decltype(&w->final_norm) {
  switch (g.kind) {
    case Kind::kFinalNorm:
      return &w->final_norm;
    case Kind::kAttnNorm:
      return &w->layers[g.layer].attn_norm;
    case Kind::kMlpNorm:
      return &w->layers[g.layer].mlp_norm;
    case Kind::kPostAttnNorm:
      return &w->layers[g.layer].post_attn_norm;
    case Kind::kPostMlpNorm:
      return &w->layers[g.layer].post_mlp_norm;
    case Kind::kQNorm:
      return &w->layers[g.layer].q_norm;
    case Kind::kKNorm:
      return &w->layers[g.layer].k_norm;
    case Kind::kQkvBias:
      return &w->layers[g.layer].qkv_bias;
    case Kind::kSharedGate:
      return &w->layers[g.layer].shared_gate;
    case Kind::kOBias:
      return &w->layers[g.layer].o_bias;
    case Kind::kSinks:
      return &w->layers[g.layer].attn_sinks;
    case Kind::kRouterBias:
      return &w->layers[g.layer].router_bias;
    case Kind::kRouterChoiceBias:
      return &w->layers[g.layer].router_choice_bias;
    case Kind::kExpertGateUpBias:
      return &w->layers[g.layer].expert_gate_up_bias[g.expert];
    case Kind::kExpertDownBias:
      return &w->layers[g.layer].expert_down_bias[g.expert];
    default:
      return nullptr;
  }
}

bool IsNorm(Kind k) {
  return k == Kind::kFinalNorm || k == Kind::kAttnNorm || k == Kind::kMlpNorm ||
         k == Kind::kPostAttnNorm || k == Kind::kPostMlpNorm || k == Kind::kQNorm ||
         k == Kind::kKNorm;
}

// Rows of each tensor of a linear group, and the columns they share.
std::vector<std::pair<std::string, int64_t>> LinearParts(const model::ModelConfig& c,
                                                         const CpuWeightGroup& g, int64_t* cols) {
  const int64_t q_rows = c.num_heads * c.head_dim, kv_rows = c.num_kv_heads * c.head_dim;
  std::vector<std::pair<std::string, int64_t>> parts;
  for (const std::string& name : g.tensors) {
    int64_t rows = 0;
    if (g.kind == Kind::kLmHead || g.kind == Kind::kEmbed) {
      rows = c.vocab_size, *cols = c.hidden_size;
    } else if (g.kind == Kind::kQkv) {
      rows = name.ends_with(".k_proj") || name.ends_with(".v_proj") ? kv_rows : q_rows;
      *cols = c.hidden_size;
    } else if (g.kind == Kind::kO) {
      rows = c.hidden_size, *cols = q_rows;
    } else if (g.kind == Kind::kGateUp) {
      rows = c.intermediate_size, *cols = c.hidden_size;
    } else if (g.kind == Kind::kDown) {
      rows = c.hidden_size, *cols = c.intermediate_size;
    } else if (g.kind == Kind::kRouter) {
      rows = c.num_experts, *cols = c.hidden_size;
    } else if (g.kind == Kind::kExpertGateUp) {
      rows = c.moe_intermediate_size, *cols = c.hidden_size;
    } else if (g.kind == Kind::kExpertDown) {
      rows = c.hidden_size, *cols = c.moe_intermediate_size;
    } else if (g.kind == Kind::kSharedGateUp) {
      rows = c.shared_expert_intermediate_size, *cols = c.hidden_size;
    } else {  // kSharedDown
      rows = c.hidden_size, *cols = c.shared_expert_intermediate_size;
    }
    parts.push_back({name, rows});
  }
  return parts;
}

// Elements of each tensor of a vector group.
int64_t VectorElements(const model::ModelConfig& c, const CpuWeightGroup& g,
                       const std::string& name) {
  if (g.kind == Kind::kQNorm || g.kind == Kind::kKNorm) return c.head_dim;
  if (g.kind == Kind::kQkvBias) {
    return name.ends_with(".q_bias") ? c.num_heads * c.head_dim : c.num_kv_heads * c.head_dim;
  }
  if (g.kind == Kind::kSinks) return c.num_heads;
  if (g.kind == Kind::kRouterBias || g.kind == Kind::kRouterChoiceBias) return c.num_experts;
  if (g.kind == Kind::kExpertGateUpBias) return c.moe_intermediate_size;
  return c.hidden_size;
}

Status LoadEmbed(WeightLoader& loader, const model::TensorSource& file, const model::ModelConfig& c,
                 cpu::WeightType type, cpu::ThreadPool* pool, CpuWeights* w, CpuWeights* reuse) {
  CpuLinear* reuse_head = reuse != nullptr ? &reuse->lm_head : nullptr;
  w->embed_from_head = false;
  w->embed_quant.clear();
  w->embed_bf16.clear();
  // A tied table packed as one matrix serves the gather too (PackedMatrix::UnpackRows).
  auto head_holds_table = [&] {
    return w->lm_head.parts.size() == 1 && w->lm_head.parts[0].n() == c.vocab_size &&
           w->lm_head.parts[0].k() == c.hidden_size;
  };
  if (auto quant = loader.QuantView("embed", c.vocab_size, c.hidden_size)) {
    if (c.tie_word_embeddings) {
      ASTR_RETURN_IF_ERROR(
          loader.Stacked({{"embed", c.vocab_size}}, c.hidden_size, &w->lm_head, reuse_head));
      w->embed_from_head = head_holds_table();
    }
    if (!w->embed_from_head) {
      // Gathered a row at a time from the file's own blocks.
      const auto* bytes = static_cast<const uint8_t*>(quant->data);
      w->embed_quant.assign(bytes, bytes + quant->bytes);
      w->embed_quant_dtype = quant->dtype;
    }
    file.ReleaseResident(*quant);
  } else if (auto fv = loader.FloatView("embed", c.vocab_size, c.hidden_size);
             fv && type == cpu::WeightType::kBF16) {
    if (c.tie_word_embeddings) {
      ASTR_RETURN_IF_ERROR(
          loader.Stacked({{"embed", c.vocab_size}}, c.hidden_size, &w->lm_head, reuse_head));
      w->embed_from_head =
          head_holds_table() && w->lm_head.parts[0].type() == cpu::WeightType::kBF16;
    }
    if (!w->embed_from_head) {
      // Converted a chunk of rows at a time: no f32 copy of the whole table.
      const size_t n = static_cast<size_t>(c.vocab_size * c.hidden_size);
      if (reuse != nullptr && reuse->embed_bf16.size() == n)
        w->embed_bf16 = std::move(reuse->embed_bf16);
      w->embed_bf16.resize(n);
      cpu::ParallelFor(pool, c.vocab_size, 64, [&](int64_t r0, int64_t r1) {
        std::vector<float> row(c.hidden_size);
        for (int64_t r = r0; r < r1; ++r) {
          WeightLoader::ConvertElements(*fv, r * c.hidden_size, c.hidden_size, row.data());
          cpu::F32ToBf16(row.data(), w->embed_bf16.data() + r * c.hidden_size, c.hidden_size);
        }
      });
    }
    file.ReleaseResident(*fv);
  } else {
    std::vector<float> embed;
    ASTR_RETURN_IF_ERROR(loader.Read("embed", {c.vocab_size, c.hidden_size}, &embed));
    if (c.tie_word_embeddings) {
      w->lm_head.parts.clear();
      w->lm_head.parts.push_back(
          cpu::PackedMatrix::FromF32(embed.data(), c.vocab_size, c.hidden_size, type, pool));
    }
    if (type == cpu::WeightType::kF32) {
      w->embed_f32 = std::move(embed);
    } else {
      w->embed_bf16.resize(embed.size());
      cpu::F32ToBf16(embed.data(), w->embed_bf16.data(), static_cast<int64_t>(embed.size()));
    }
  }
  return OkStatus();
}

// A line at each quarter.
void ReportProgress(int64_t done, int64_t total, std::chrono::steady_clock::time_point start) {
  if ((done * 4) / total == ((done - 1) * 4) / total) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  LOG(INFO) << "loading weights: layer " << done << "/" << total << " (" << std::fixed
            << std::setprecision(1) << s << " s)";
}

}  // namespace

int64_t CpuLinear::n() const {
  int64_t n = 0;
  for (const auto& p : parts) n += p.n();
  return n;
}

size_t CpuLinear::bytes() const {
  size_t b = 0;
  for (const auto& p : parts) b += p.bytes();
  return b;
}

void CpuLinear::Apply(const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy,
                      cpu::ThreadPool* pool) const {
  int64_t col = 0;
  for (const auto& p : parts) {
    cpu::Gemm(x, ldx, m, p, y + col, ldy, false, pool);
    col += p.n();
  }
}

void CpuWeights::GatherEmbeddings(const int32_t* ids, int64_t n, int64_t hidden, float* out) const {
  // Whole blocks: LoadCpuWeights kept the table quantized only then.
  const uint64_t quant_row_bytes =
      embed_quant.empty() ? 0 : *model::DTypeByteSize(embed_quant_dtype, hidden);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = ids[i];
    if (embed_from_head) {
      lm_head.parts[0].UnpackRows(row, 1, out + i * hidden);
    } else if (!embed_quant.empty()) {
      model::DequantizeToF32(embed_quant_dtype, embed_quant.data() + row * quant_row_bytes, hidden,
                             out + i * hidden);
    } else if (type == cpu::WeightType::kF32) {
      std::memcpy(out + i * hidden, embed_f32.data() + row * hidden, hidden * sizeof(float));
    } else {
      cpu::Bf16ToF32(embed_bf16.data() + row * hidden, out + i * hidden, hidden);
    }
  }
}

size_t CpuWeights::embed_table_bytes() const {
  return embed_f32.size() * 4 + embed_bf16.size() * 2 + embed_quant.size();
}

size_t CpuWeights::bytes() const {
  size_t total = embed_table_bytes() + final_norm.size() * 4 + lm_head.bytes();
  for (const auto& l : layers) {
    total +=
        (l.attn_norm.size() + l.mlp_norm.size() + l.post_attn_norm.size() + l.post_mlp_norm.size() +
         l.q_norm.size() + l.k_norm.size() + l.qkv_bias.size() + l.o_bias.size() +
         l.attn_sinks.size() + l.router_bias.size() + l.router_choice_bias.size()) *
        4;
    total += l.qkv.bytes() + l.o.bytes() + l.gate_up.bytes() + l.down.bytes() + l.router.bytes() +
             l.shared_gate_up.bytes() + l.shared_down.bytes() + l.shared_gate.size() * 4;
  }
  return total + expert_bytes();
}

size_t CpuWeights::expert_bytes() const {
  size_t total = 0;
  for (const auto& l : layers) {
    for (const CpuLinear& e : l.expert_gate_up) total += e.bytes();
    for (const CpuLinear& e : l.expert_down) total += e.bytes();
    for (const auto& b : l.expert_gate_up_bias) total += b.size() * 4;
    for (const auto& b : l.expert_down_bias) total += b.size() * 4;
  }
  return total;
}

std::vector<CpuWeightGroup> CpuWeightGroups(const model::ModelConfig& c) {
  std::vector<CpuWeightGroup> groups;
  groups.push_back({Kind::kEmbed, -1, {"embed"}, c.tie_word_embeddings});
  if (!c.tie_word_embeddings) groups.push_back({Kind::kLmHead, -1, {"lm_head"}});
  groups.push_back({Kind::kFinalNorm, -1, {"final_norm"}});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = LayerPrefix(i);
    groups.push_back({Kind::kAttnNorm, i, {p + "attn_norm"}});
    groups.push_back({Kind::kMlpNorm, i, {p + "mlp_norm"}});
    CpuWeightGroup qkv{Kind::kQkv, i, {p + "q_proj", p + "k_proj", p + "v_proj"}};
    if (c.gated_attention) qkv.tensors.push_back(p + "attn_gate");
    groups.push_back(std::move(qkv));
    if (c.qkv_bias)
      groups.push_back({Kind::kQkvBias, i, {p + "q_bias", p + "k_bias", p + "v_bias"}});
    if (c.qk_norm != model::QkNorm::kNone) {
      groups.push_back({Kind::kQNorm, i, {p + "q_norm"}});
      groups.push_back({Kind::kKNorm, i, {p + "k_norm"}});
    }
    groups.push_back({Kind::kO, i, {p + "o_proj"}});
    if (c.o_bias) groups.push_back({Kind::kOBias, i, {p + "o_bias"}});
    if (c.attn_sinks) groups.push_back({Kind::kSinks, i, {p + "attn_sinks"}});
    if (c.sandwich_norms) groups.push_back({Kind::kPostAttnNorm, i, {p + "post_attn_norm"}});
    if (c.sandwich_norms) groups.push_back({Kind::kPostMlpNorm, i, {p + "post_mlp_norm"}});
    if (!c.LayerIsMoe(i)) {
      groups.push_back({Kind::kGateUp, i, {p + "gate_proj", p + "up_proj"}});
      groups.push_back({Kind::kDown, i, {p + "down_proj"}});
      continue;
    }
    groups.push_back({Kind::kRouter, i, {p + "router"}});
    if (c.router_bias) groups.push_back({Kind::kRouterBias, i, {p + "router_bias"}});
    if (c.router_choice_bias) {
      groups.push_back({Kind::kRouterChoiceBias, i, {p + "router_choice_bias"}});
    }
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const std::string x = p + "experts." + std::to_string(e) + ".";
      groups.push_back({Kind::kExpertGateUp, i, {x + "gate_proj", x + "up_proj"}, false, e});
      groups.push_back({Kind::kExpertDown, i, {x + "down_proj"}, false, e});
      if (c.expert_bias) {
        groups.push_back({Kind::kExpertGateUpBias, i, {x + "gate_bias", x + "up_bias"}, false, e});
        groups.push_back({Kind::kExpertDownBias, i, {x + "down_bias"}, false, e});
      }
    }
    if (c.shared_expert_intermediate_size > 0) {
      groups.push_back(
          {Kind::kSharedGateUp, i, {p + "shared_expert.gate_proj", p + "shared_expert.up_proj"}});
      groups.push_back({Kind::kSharedDown, i, {p + "shared_expert.down_proj"}});
      if (c.shared_expert_gated)
        groups.push_back({Kind::kSharedGate, i, {p + "shared_expert_gate"}});
    }
  }
  return groups;
}

CpuWeights EmptyCpuWeights(const model::ModelConfig& c, cpu::WeightType type) {
  CpuWeights w;
  w.type = type;
  w.layers.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (!c.LayerIsMoe(i)) continue;
    w.layers[i].expert_gate_up.resize(c.num_experts);
    w.layers[i].expert_down.resize(c.num_experts);
    if (c.expert_bias) {
      w.layers[i].expert_gate_up_bias.resize(c.num_experts);
      w.layers[i].expert_down_bias.resize(c.num_experts);
    }
  }
  return w;
}

namespace {

// LoadCpuWeightGroup with `loader`'s scratch buffers (kept from group to group).
Status LoadGroupWith(WeightLoader& loader, const model::TensorSource& source,
                     const CpuWeightGroup& g, cpu::WeightType type, cpu::ThreadPool* pool,
                     CpuWeights* w, CpuWeights* reuse) {
  const model::ModelConfig& c = source.config();
  if (g.kind == Kind::kEmbed) return LoadEmbed(loader, source, c, type, pool, w, reuse);
  if (CpuLinear* out = LinearOf(g, w)) {
    int64_t cols = 0;
    const auto parts = LinearParts(c, g, &cols);
    CpuLinear* reused = reuse != nullptr ? LinearOf(g, reuse) : nullptr;
    if (g.kind == Kind::kRouter && type != cpu::WeightType::kF32) {
      WeightLoader f32(source, cpu::WeightType::kF32, pool);
      return f32.Stacked(parts, cols, out, reused);
    }
    return loader.Stacked(parts, cols, out, reused);
  }
  std::vector<float>* out = VectorOf(g, w);
  if (g.kind == Kind::kSharedGate) return source.LoadF32(g.tensors[0], {1, c.hidden_size}, out);
  if (g.tensors.size() == 1) {
    ASTR_RETURN_IF_ERROR(loader.Vector(g.tensors[0], VectorElements(c, g, g.tensors[0]), out));
    if (IsNorm(g.kind) && c.norm_weight_offset != 0.0) {
      for (float& x : *out) x += static_cast<float>(c.norm_weight_offset);
    }
    return OkStatus();
  }
  // Stacked vectors: the qkv biases (zero over the gate rows with gated attention), an expert's
  // gate and up biases.
  int64_t rows = 0;
  for (const std::string& name : g.tensors) rows += VectorElements(c, g, name);
  if (g.kind == Kind::kQkvBias && c.gated_attention) rows += c.num_heads * c.head_dim;
  out->assign(static_cast<size_t>(rows), 0.0f);
  std::vector<float> b;
  int64_t off = 0;
  for (const std::string& name : g.tensors) {
    const int64_t n = VectorElements(c, g, name);
    ASTR_RETURN_IF_ERROR(loader.Vector(name, n, &b));
    std::memcpy(out->data() + off, b.data(), n * sizeof(float));
    off += n;
  }
  return OkStatus();
}

}  // namespace

Status LoadCpuWeightGroup(const model::TensorSource& source, const CpuWeightGroup& g,
                          cpu::WeightType type, cpu::ThreadPool* pool, CpuWeights* w,
                          CpuWeights* reuse) {
  WeightLoader loader(source, type, pool);
  return LoadGroupWith(loader, source, g, type, pool, w, reuse);
}

void CopyCpuWeightGroup(const CpuWeightGroup& g, const CpuWeights& from, CpuWeights* w,
                        CpuWeights* reuse) {
  if (g.kind == Kind::kEmbed) {
    if (reuse != nullptr && reuse->embed_bf16.size() == from.embed_bf16.size()) {
      w->embed_bf16 = std::move(reuse->embed_bf16);
    }
    w->embed_bf16.assign(from.embed_bf16.begin(), from.embed_bf16.end());
    w->embed_f32 = from.embed_f32;
    w->embed_quant = from.embed_quant;
    w->embed_quant_dtype = from.embed_quant_dtype;
    w->embed_from_head = from.embed_from_head;
    if (g.tied_head) {  // the output projection is the table's
      CpuWeightGroup head{Kind::kLmHead, -1, {}};
      CopyCpuWeightGroup(head, from, w, reuse);
    }
    return;
  }
  if (const CpuLinear* in = LinearOf(g, &from)) {
    CpuLinear* out = LinearOf(g, w);
    CpuLinear* r = reuse != nullptr ? LinearOf(g, reuse) : nullptr;
    out->parts.clear();
    for (const cpu::PackedMatrix& m : in->parts) {
      cpu::PackedMatrix* storage = nullptr;
      if (r != nullptr) {
        for (cpu::PackedMatrix& cand : r->parts) {
          if (cand.bytes() != 0 && cand.SameLayout(m)) {
            storage = &cand;
            break;
          }
        }
      }
      out->parts.push_back(m.Clone(storage));
    }
    return;
  }
  *VectorOf(g, w) = *VectorOf(g, &from);
}

bool UnpackCpuTensor(const model::ModelConfig& c, const CpuWeights& w, const CpuWeightGroup& g,
                     const std::string& canonical, std::vector<float>* out) {
  if (g.kind == Kind::kEmbed) {
    const int64_t n = c.vocab_size * c.hidden_size;
    if (!w.embed_f32.empty()) {
      *out = w.embed_f32;
    } else if (w.embed_from_head && w.lm_head.parts.at(0).type() != cpu::WeightType::kQuant) {
      out->resize(static_cast<size_t>(n));
      w.lm_head.parts[0].UnpackRows(0, c.vocab_size, out->data());
    } else if (!w.embed_bf16.empty()) {
      out->resize(static_cast<size_t>(n));
      cpu::Bf16ToF32(w.embed_bf16.data(), out->data(), n);
    } else {
      return false;
    }
    return true;
  }
  if (const CpuLinear* linear = LinearOf(g, &w)) {
    int64_t cols = 0;
    int64_t row = 0, rows = 0;
    for (const auto& [name, n] : LinearParts(c, g, &cols)) {
      if (name == canonical) {
        rows = n;
        break;
      }
      row += n;
    }
    // The part holding [row, row + rows): parts hold whole tensors.
    int64_t first = 0;
    for (const cpu::PackedMatrix& m : linear->parts) {
      if (row < first + m.n()) {
        if (m.type() == cpu::WeightType::kQuant) return false;
        out->resize(static_cast<size_t>(rows * cols));
        m.UnpackRows(row - first, rows, out->data());
        return true;
      }
      first += m.n();
    }
    return false;
  }
  const std::vector<float>& v = *VectorOf(g, &w);
  int64_t off = 0;
  for (const std::string& name : g.tensors) {
    const int64_t n = VectorElements(c, g, name);
    if (name == canonical) {
      out->assign(v.begin() + off, v.begin() + off + n);
      if (IsNorm(g.kind) && c.norm_weight_offset != 0.0) {
        for (float& x : *out) x -= static_cast<float>(c.norm_weight_offset);
      }
      return true;
    }
    off += n;
  }
  return false;
}

StatusOr<CpuWeights> LoadCpuWeights(const model::TensorSource& file, cpu::WeightType type,
                                    cpu::ThreadPool* pool, bool progress, CpuWeights* reuse) {
  const model::ModelConfig& c = file.config();
  CpuWeights w = EmptyCpuWeights(c, type);
  if (reuse != nullptr && (reuse->type != type || reuse->layers.size() != w.layers.size())) {
    reuse = nullptr;
  }
  const auto start = std::chrono::steady_clock::now();
  int64_t layers_done = 0;
  WeightLoader loader(file, type, pool);
  const std::vector<CpuWeightGroup> groups = CpuWeightGroups(c);
  for (size_t i = 0; i < groups.size(); ++i) {
    const CpuWeightGroup& g = groups[i];
    ASTR_RETURN_IF_ERROR(LoadGroupWith(loader, file, g, type, pool, &w, reuse));
    // A layer is done with its last group.
    const bool layer_done =
        g.layer >= 0 && (i + 1 == groups.size() || groups[i + 1].layer != g.layer);
    if (layer_done && progress) ReportProgress(++layers_done, c.num_layers, start);
  }
  return w;
}

}  // namespace astr
