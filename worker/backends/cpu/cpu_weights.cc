#include "worker/backends/cpu/cpu_weights.h"

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
  Status Stacked(const std::vector<std::pair<std::string, int64_t>>& parts, int64_t cols,
                 CpuLinear* out) {
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
        ASTR_RETURN_IF_ERROR(PackFloat(names, cols, &m));
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

  Status PackFloat(const std::vector<std::pair<std::string, int64_t>>& parts, int64_t cols,
                   cpu::PackedMatrix* out) {
    const cpu::WeightType type =
        type_ == cpu::WeightType::kF32 ? cpu::WeightType::kF32 : cpu::WeightType::kBF16;
    int64_t rows = 0;
    for (const auto& p : parts) rows += p.second;
    // Float tensors in the file: packed panel by panel straight from the mapping.
    StackedViews views;
    for (const auto& [name, n] : parts) {
      if (auto v = FloatView(name, n, cols)) views.push_back({*v, n});
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
          pool_);
      for (const auto& v : views) file_.ReleaseResident(v.first);
      return OkStatus();
    }
    if (parts.size() == 1) {
      ASTR_RETURN_IF_ERROR(Read(parts[0].first, {rows, cols}, &one_));
      *out = cpu::PackedMatrix::FromF32(one_.data(), rows, cols, type, pool_);
      return OkStatus();
    }
    stacked_.resize(static_cast<size_t>(rows * cols));
    int64_t row = 0;
    for (const auto& [name, n] : parts) {
      ASTR_RETURN_IF_ERROR(Read(name, {n, cols}, &one_));
      std::memcpy(stacked_.data() + row * cols, one_.data(), one_.size() * sizeof(float));
      row += n;
    }
    *out = cpu::PackedMatrix::FromF32(stacked_.data(), rows, cols, type, pool_);
    return OkStatus();
  }

  const model::TensorSource& file_;
  cpu::WeightType type_;
  cpu::ThreadPool* pool_;
  std::vector<float> one_;
  std::vector<float> stacked_;
};

Status LoadLayer(WeightLoader& loader, const model::ModelConfig& c, int64_t i, CpuLayerWeights* w) {
  const std::string p = "layers." + std::to_string(i) + ".";
  const int64_t q_rows = c.num_heads * c.head_dim, kv_rows = c.num_kv_heads * c.head_dim;
  ASTR_RETURN_IF_ERROR(loader.Vector(p + "attn_norm", c.hidden_size, &w->attn_norm));
  ASTR_RETURN_IF_ERROR(loader.Vector(p + "mlp_norm", c.hidden_size, &w->mlp_norm));
  std::vector<std::pair<std::string, int64_t>> qkv = {
      {p + "q_proj", q_rows}, {p + "k_proj", kv_rows}, {p + "v_proj", kv_rows}};
  if (c.gated_attention) qkv.push_back({p + "attn_gate", q_rows});
  ASTR_RETURN_IF_ERROR(loader.Stacked(qkv, c.hidden_size, &w->qkv));
  if (c.qkv_bias) {
    w->qkv_bias.assign(w->qkv.n(), 0.0f);
    std::vector<float> b;
    int64_t off = 0;
    for (const auto& [name, rows] : {std::pair<std::string, int64_t>{p + "q_bias", q_rows},
                                     {p + "k_bias", kv_rows},
                                     {p + "v_bias", kv_rows}}) {
      ASTR_RETURN_IF_ERROR(loader.Vector(name, rows, &b));
      std::memcpy(w->qkv_bias.data() + off, b.data(), rows * sizeof(float));
      off += rows;
    }
  }
  if (c.qk_norm != model::QkNorm::kNone) {
    ASTR_RETURN_IF_ERROR(loader.Vector(p + "q_norm", c.head_dim, &w->q_norm));
    ASTR_RETURN_IF_ERROR(loader.Vector(p + "k_norm", c.head_dim, &w->k_norm));
  }
  ASTR_RETURN_IF_ERROR(loader.Stacked({{p + "o_proj", c.hidden_size}}, q_rows, &w->o));
  ASTR_RETURN_IF_ERROR(
      loader.Stacked({{p + "gate_proj", c.intermediate_size}, {p + "up_proj", c.intermediate_size}},
                     c.hidden_size, &w->gate_up));
  return loader.Stacked({{p + "down_proj", c.hidden_size}}, c.intermediate_size, &w->down);
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
    if (!embed_quant.empty()) {
      model::DequantizeToF32(embed_quant_dtype, embed_quant.data() + row * quant_row_bytes, hidden,
                             out + i * hidden);
    } else if (type == cpu::WeightType::kF32) {
      std::memcpy(out + i * hidden, embed_f32.data() + row * hidden, hidden * sizeof(float));
    } else {
      cpu::Bf16ToF32(embed_bf16.data() + row * hidden, out + i * hidden, hidden);
    }
  }
}

size_t CpuWeights::bytes() const {
  size_t total = embed_f32.size() * 4 + embed_bf16.size() * 2 + embed_quant.size() +
                 final_norm.size() * 4 + lm_head.bytes();
  for (const auto& l : layers) {
    total += (l.attn_norm.size() + l.mlp_norm.size() + l.q_norm.size() + l.k_norm.size() +
              l.qkv_bias.size()) *
             4;
    total += l.qkv.bytes() + l.o.bytes() + l.gate_up.bytes() + l.down.bytes();
  }
  return total;
}

StatusOr<CpuWeights> LoadCpuWeights(const model::TensorSource& file, cpu::WeightType type,
                                    cpu::ThreadPool* pool, bool progress) {
  const model::ModelConfig& c = file.config();
  WeightLoader loader(file, type, pool);
  CpuWeights w;
  w.type = type;
  const auto start = std::chrono::steady_clock::now();
  if (auto quant = loader.QuantView("embed", c.vocab_size, c.hidden_size)) {
    // Gathered a row at a time from the file's own blocks.
    const auto* bytes = static_cast<const uint8_t*>(quant->data);
    w.embed_quant.assign(bytes, bytes + quant->bytes);
    w.embed_quant_dtype = quant->dtype;
    if (c.tie_word_embeddings) {
      ASTR_RETURN_IF_ERROR(loader.Stacked({{"embed", c.vocab_size}}, c.hidden_size, &w.lm_head));
    }
    file.ReleaseResident(*quant);
  } else if (auto fv = loader.FloatView("embed", c.vocab_size, c.hidden_size);
             fv && type == cpu::WeightType::kBF16) {
    // Converted a chunk of rows at a time: no f32 copy of the whole table.
    w.embed_bf16.resize(static_cast<size_t>(c.vocab_size * c.hidden_size));
    cpu::ParallelFor(pool, c.vocab_size, 64, [&](int64_t r0, int64_t r1) {
      std::vector<float> row(c.hidden_size);
      for (int64_t r = r0; r < r1; ++r) {
        WeightLoader::ConvertElements(*fv, r * c.hidden_size, c.hidden_size, row.data());
        cpu::F32ToBf16(row.data(), w.embed_bf16.data() + r * c.hidden_size, c.hidden_size);
      }
    });
    if (c.tie_word_embeddings) {
      ASTR_RETURN_IF_ERROR(loader.Stacked({{"embed", c.vocab_size}}, c.hidden_size, &w.lm_head));
    }
    file.ReleaseResident(*fv);
  } else {
    std::vector<float> embed;
    ASTR_RETURN_IF_ERROR(loader.Read("embed", {c.vocab_size, c.hidden_size}, &embed));
    if (c.tie_word_embeddings) {
      w.lm_head.parts.push_back(
          cpu::PackedMatrix::FromF32(embed.data(), c.vocab_size, c.hidden_size, type, pool));
    }
    if (type == cpu::WeightType::kF32) {
      w.embed_f32 = std::move(embed);
    } else {
      w.embed_bf16.resize(embed.size());
      cpu::F32ToBf16(embed.data(), w.embed_bf16.data(), static_cast<int64_t>(embed.size()));
    }
  }
  if (!c.tie_word_embeddings) {
    ASTR_RETURN_IF_ERROR(loader.Stacked({{"lm_head", c.vocab_size}}, c.hidden_size, &w.lm_head));
  }
  ASTR_RETURN_IF_ERROR(loader.Vector("final_norm", c.hidden_size, &w.final_norm));
  w.layers.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    ASTR_RETURN_IF_ERROR(LoadLayer(loader, c, i, &w.layers[i]));
    if (progress) ReportProgress(i + 1, c.num_layers, start);
  }
  return w;
}

}  // namespace astr
