// The CPU backend: the decoder layer of ModelConfig (model_config.h) over a ragged step batch with
// a paged KV pool.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "common/model/model_file.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/backend.h"
#include "worker/backends/cpu/cpu_attention.h"
#include "worker/backends/cpu/cpu_weight_builder.h"
#include "worker/backends/cpu/cpu_weights.h"
#include "worker/kv_pool.h"
#include "worker/rope.h"

namespace astr {
namespace {

// A step buffer that is not zero-filled: its pages become resident only when a step writes them,
// so the workspace, sized for the largest step, costs memory for the steps actually run.
template <typename T>
class StepBuffer {
 public:
  void resize(size_t n) {
    data_.reset(new T[n]);  // default-initialized: untouched pages stay unmapped
    size_ = n;
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  std::unique_ptr<T[]> data_;
  size_t size_ = 0;
};

// Every per-step buffer, sized once for the largest step (max_batch_tokens rows).
struct Workspace {
  StepBuffer<float> x;             // [T, hidden] residual stream
  StepBuffer<float> xn;            // [T, hidden] normed input of the next block
  StepBuffer<float> qkv;           // [T, qkv_rows]
  StepBuffer<float> attn;          // [T, heads*hd]
  StepBuffer<float> proj;          // [T, hidden] output of o_proj / down_proj
  StepBuffer<float> gate_up;       // [T, 2*ffn]
  StepBuffer<float> act;           // [T, ffn]
  // MoE layers: router logits [T, experts], each row's experts and weights [T, top-k], an
  // expert's gathered input rows and output rows [T, hidden].
  StepBuffer<float> router;
  StepBuffer<int32_t> topk_expert;
  StepBuffer<float> topk_weight;
  StepBuffer<float> expert_in;
  StepBuffer<float> expert_out;
  StepBuffer<int32_t> expert_rows;      // [T] rows routed to the expert at hand
  StepBuffer<float> expert_row_weight;  // [T] their weights
  StepBuffer<float> sampled;       // [S, hidden] final-normed sample rows
  StepBuffer<float> attn_scratch;  // [threads, AttentionScratchFloats]
  StepBuffer<int32_t> row_entry;   // [T]
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(model::ModelConfig config, CpuWeights weights, std::unique_ptr<KvPool> kv, int threads,
             const BackendOptions& options)
      : config_(std::move(config)),
        weights_(std::make_shared<CpuWeights>(std::move(weights))),
        spare_enabled_(options.spare_weights),
        kv_(std::move(kv)),
        pool_(threads),
        max_tokens_(options.max_batch_tokens),
        max_samples_(options.max_sample_rows),
        inv_freq_(RopeInvFreq(config_)),
        inv_freq_local_(RopeInvFreq(config_, /*local=*/true)),
        inv_freq_long_(RopeInvFreqLong(config_)),
        layout_(KvLayout::For(config_)) {
    const model::ModelConfig& c = config_;
    const int64_t t = max_tokens_;
    qkv_rows_ = weights_->layers.empty() ? 0 : weights_->layers[0].qkv.n();
    ws_.x.resize(t * c.hidden_size);
    ws_.xn.resize(t * c.hidden_size);
    ws_.qkv.resize(t * qkv_rows_);
    ws_.attn.resize(t * c.num_heads * c.head_dim);
    ws_.proj.resize(t * c.hidden_size);
    const int64_t ffn = std::max(c.intermediate_size, c.moe_intermediate_size);
    ws_.gate_up.resize(t * 2 * ffn);
    ws_.act.resize(t * ffn);
    if (c.num_experts > 0) {
      ws_.router.resize(t * c.num_experts);
      ws_.topk_expert.resize(t * c.num_experts_per_tok);
      ws_.topk_weight.resize(t * c.num_experts_per_tok);
      ws_.expert_in.resize(t * c.hidden_size);
      ws_.expert_out.resize(t * c.hidden_size);
      ws_.expert_rows.resize(t);
      ws_.expert_row_weight.resize(t);
    }
    ws_.sampled.resize(max_samples_ * c.hidden_size);
    shape_ = {c.num_heads,
              c.num_kv_heads,
              c.head_dim,
              kv_->page_size(),
              c.sliding_window,
              c.AttnScale(),
              static_cast<float>(c.attn_softcap)};
    ws_.attn_scratch.resize(pool_.size() * AttentionScratchFloats(shape_));
    ws_.row_entry.resize(t);
  }

  std::string name() const override { return "cpu"; }
  const model::ModelConfig& config() const override { return config_; }
  int64_t num_pages() const override { return kv_->num_pages(); }
  int32_t kv_window_tables() const override { return layout_.window_tables; }
  int64_t page_size() const override { return kv_->page_size(); }
  int64_t max_batch_tokens() const override { return max_tokens_; }
  int64_t max_sample_rows() const override { return max_samples_; }
  size_t weight_bytes() const override { return weights_->bytes(); }
  size_t expert_weight_bytes() const override { return weights_->expert_bytes(); }

  Status Forward(const StepBatch& batch, float* logits) override;
  StatusOr<std::unique_ptr<WeightSet>> PrepareWeights(const model::TensorSource& source) override;
  std::unique_ptr<WeightSet> SwapWeights(std::unique_ptr<WeightSet> set) override;
  StatusOr<std::unique_ptr<WeightBuilder>> BeginWeights() override;
  void RecycleWeights(std::unique_ptr<WeightSet> set) override;

 private:
  // The spare set (null when none is kept).
  std::unique_ptr<CpuWeights> TakeSpare();
  void KeepSpare(std::unique_ptr<CpuWeights> spare);

  void Layer(int64_t l, const StepBatch& batch, const float* next_norm);
  void QkNormRows(float* base, int64_t t, int64_t heads, const std::vector<float>& w);
  // proj = the MLP of rows [0, t) of xn: the dense one, or (MoE layers) the experts'.
  void DenseMlp(const CpuLayerWeights& w, int64_t t);
  // act[r] = act(gate) * up of gate_up's rows [0, t) ([gate f | up f] each).
  void GatedActivationRows(int64_t t, int64_t f);
  void MoeMlp(const CpuLayerWeights& w, int64_t t);
  // proj = RmsNorm(proj) * norm, for rows [0, t) (sandwich norms).
  void NormProjRows(const std::vector<float>& norm, int64_t t);
  // x += proj, then xn = RmsNorm(x) * norm, for rows [0, t), the rows on the pool.
  void AddRmsNormRows(const float* norm, int64_t t);

  model::ModelConfig config_;
  // The served set. Replaced only by SwapWeights, between steps; a build holds the one it began
  // beside until it ends.
  std::shared_ptr<CpuWeights> weights_;
  const bool spare_enabled_;
  std::mutex weights_mu_;  // guards the pointer weights_ against a build beginning meanwhile
  std::mutex spare_mu_;
  std::unique_ptr<CpuWeights> spare_;  // a set no longer served, to build the next one into
  std::unique_ptr<KvPool> kv_;
  cpu::ThreadPool pool_;
  int64_t max_tokens_;
  int64_t max_samples_;
  int64_t qkv_rows_ = 0;
  std::vector<float> inv_freq_;
  std::vector<float> inv_freq_local_;  // the sliding-window layers' (LayerUsesLocalRope)
  std::vector<float> inv_freq_long_;   // LongRoPE's long factors (empty without)
  std::vector<uint8_t> rope_long_;     // [T] this step's rows that take them (RopeLongRows)
  bool any_rope_long_ = false;
  KvLayout layout_;         // which K/V array and page table each layer uses
  AttentionShape shape_{};  // sliding_window and table set per layer
  Workspace ws_;
};

StatusOr<std::unique_ptr<WeightSet>> CpuBackend::PrepareWeights(const model::TensorSource& source) {
  // Its own threads: Forward may be running on pool_ meanwhile.
  cpu::ThreadPool pool(static_cast<int>(pool_.size()));
  const bool progress = config_.ParameterCount() > 50'000'000;
  std::unique_ptr<CpuWeights> spare = TakeSpare();
  auto loaded = LoadCpuWeights(source, weights_->type, &pool, progress, spare.get());
  if (!loaded.ok()) {
    KeepSpare(std::move(spare));
    return loaded.status();
  }
  auto set = std::make_unique<CpuWeightSet>();
  set->weights = std::make_shared<CpuWeights>(std::move(*loaded));
  return std::unique_ptr<WeightSet>(std::move(set));
}

std::unique_ptr<WeightSet> CpuBackend::SwapWeights(std::unique_ptr<WeightSet> set) {
  // PrepareWeights or a builder made it from this config, with this weight type: every shape
  // matches.
  std::lock_guard<std::mutex> lock(weights_mu_);
  std::swap(weights_, static_cast<CpuWeightSet&>(*set).weights);
  return set;
}

StatusOr<std::unique_ptr<WeightBuilder>> CpuBackend::BeginWeights() {
  std::shared_ptr<const CpuWeights> served;
  {
    std::lock_guard<std::mutex> lock(weights_mu_);
    served = weights_;
  }
  const cpu::WeightType type = served->type;
  return MakeCpuWeightBuilder(config_, type, static_cast<int>(pool_.size()), std::move(served),
                              TakeSpare(),
                              [this](std::unique_ptr<CpuWeights> w) { KeepSpare(std::move(w)); });
}

void CpuBackend::RecycleWeights(std::unique_ptr<WeightSet> set) {
  auto* cpu_set = static_cast<CpuWeightSet*>(set.get());
  // A build that began beside it still reads it: then it is freed when that build ends.
  if (cpu_set == nullptr || cpu_set->weights == nullptr || cpu_set->weights.use_count() != 1)
    return;
  KeepSpare(std::make_unique<CpuWeights>(std::move(*cpu_set->weights)));
}

std::unique_ptr<CpuWeights> CpuBackend::TakeSpare() {
  std::lock_guard<std::mutex> lock(spare_mu_);
  return std::move(spare_);
}

void CpuBackend::KeepSpare(std::unique_ptr<CpuWeights> spare) {
  if (!spare_enabled_ || spare == nullptr) return;  // freed here
  std::lock_guard<std::mutex> lock(spare_mu_);
  spare_ = std::move(spare);
}

void CpuBackend::QkNormRows(float* base, int64_t t, int64_t heads, const std::vector<float>& w) {
  const int64_t hd = config_.head_dim;
  for (int64_t r = 0; r < t; ++r) {
    float* row = base + r * qkv_rows_;
    cpu::RmsNorm(row, hd, w.data(), static_cast<float>(config_.rms_norm_eps), heads, hd, row, hd);
  }
}

void CpuBackend::Layer(int64_t l, const StepBatch& batch, const float* next_norm) {
  const model::ModelConfig& c = config_;
  const CpuLayerWeights& w = weights_->layers[l];
  const int64_t t = batch.num_tokens();
  const int64_t hd = c.head_dim;
  const int64_t q_cols = c.num_heads * hd, kv_cols = c.num_kv_heads * hd;
  float* qkv = ws_.qkv.data();

  w.qkv.Apply(ws_.xn.data(), c.hidden_size, t, qkv, qkv_rows_, &pool_);
  if (!w.qkv_bias.empty()) {
    for (int64_t r = 0; r < t; ++r)
      cpu::AddInPlace(qkv + r * qkv_rows_, w.qkv_bias.data(), qkv_rows_);
  }
  float* q = qkv;
  float* k = qkv + q_cols;
  float* v = k + kv_cols;
  const bool interleaved = c.rope_layout == model::RopeLayout::kInterleaved;
  if (c.qk_norm == model::QkNorm::kBeforeRope) {
    QkNormRows(q, t, c.num_heads, w.q_norm);
    QkNormRows(k, t, c.num_kv_heads, w.k_norm);
  }
  const bool local = c.LayerUsesLocalRope(l);
  const float* inv_freq = local ? inv_freq_local_.data() : inv_freq_.data();
  cpu::RopeMore more;
  more.scale = RopeCosSinScale(c, local);
  if (any_rope_long_ && !local) {
    more.inv_freq_long = inv_freq_long_.data();
    more.use_long = rope_long_.data();
  }
  cpu::Rope(q, qkv_rows_, t, c.num_heads, hd, c.rope_dim, batch.positions.data(), inv_freq,
            interleaved, more);
  cpu::Rope(k, qkv_rows_, t, c.num_kv_heads, hd, c.rope_dim, batch.positions.data(), inv_freq,
            interleaved, more);
  if (c.qk_norm == model::QkNorm::kAfterRope) {
    QkNormRows(q, t, c.num_heads, w.q_norm);
    QkNormRows(k, t, c.num_kv_heads, w.k_norm);
  }
  // Append this step's K/V to the pool before attention reads it.
  const int32_t table = layout_.layer_table[l];
  float* k_pool = kv_->k(layout_.layer_slot[l]);
  float* v_pool = kv_->v(layout_.layer_slot[l]);
  const int64_t* out_slots = batch.slots(table).data();
  for (int64_t r = 0; r < t; ++r) {
    const int64_t slot = out_slots[r];
    std::memcpy(k_pool + slot * kv_cols, k + r * qkv_rows_, kv_cols * sizeof(float));
    std::memcpy(v_pool + slot * kv_cols, v + r * qkv_rows_, kv_cols * sizeof(float));
  }
  AttentionShape shape = shape_;
  shape.sliding_window = c.LayerWindow(l);
  shape.table = table;
  PagedAttention(q, qkv_rows_, k_pool, v_pool, batch, ws_.row_entry.data(), shape,
                 ws_.attn_scratch.data(), ws_.attn.data(), q_cols, &pool_);
  if (c.gated_attention) {
    const float* gate = v + kv_cols;
    for (int64_t r = 0; r < t; ++r) {
      float* a = ws_.attn.data() + r * q_cols;
      const float* g = gate + r * qkv_rows_;
      for (int64_t i = 0; i < q_cols; ++i) a[i] *= 1.0f / (1.0f + std::exp(-g[i]));
    }
  }
  w.o.Apply(ws_.attn.data(), q_cols, t, ws_.proj.data(), c.hidden_size, &pool_);
  if (c.sandwich_norms) NormProjRows(w.post_attn_norm, t);
  AddRmsNormRows(w.mlp_norm.data(), t);
  if (c.LayerIsMoe(l)) {
    MoeMlp(w, t);
  } else {
    DenseMlp(w, t);
  }
  if (c.sandwich_norms) NormProjRows(w.post_mlp_norm, t);
  AddRmsNormRows(next_norm, t);
}

void CpuBackend::DenseMlp(const CpuLayerWeights& w, int64_t t) {
  const int64_t f = config_.intermediate_size;
  w.gate_up.Apply(ws_.xn.data(), config_.hidden_size, t, ws_.gate_up.data(), 2 * f, &pool_);
  GatedActivationRows(t, f);
  w.down.Apply(ws_.act.data(), f, t, ws_.proj.data(), config_.hidden_size, &pool_);
}

void CpuBackend::GatedActivationRows(int64_t t, int64_t f) {
  // Rows on the pool (each row's call is the same whichever thread makes it).
  const bool gelu = config_.mlp_activation == model::MlpActivation::kGeluTanh;
  cpu::ParallelFor(&pool_, t, 1, [&](int64_t r0, int64_t r1) {
    const float* gate_up = ws_.gate_up.data() + r0 * 2 * f;
    float* act = ws_.act.data() + r0 * f;
    if (gelu) {
      cpu::GeluTanhMul(gate_up, r1 - r0, f, act, f);
    } else {
      cpu::SiluMul(gate_up, r1 - r0, f, act, f);
    }
  });
}

void CpuBackend::MoeMlp(const CpuLayerWeights& w, int64_t t) {
  const model::ModelConfig& c = config_;
  const int64_t h = c.hidden_size, f = c.moe_intermediate_size;
  const int64_t n_exp = c.num_experts, k = c.num_experts_per_tok;
  float* logits = ws_.router.data();
  w.router.Apply(ws_.xn.data(), h, t, logits, n_exp, &pool_);
  int32_t* chosen = ws_.topk_expert.data();
  float* weight = ws_.topk_weight.data();
  cpu::ParallelFor(&pool_, t, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      cpu::RouteTopK(logits + r * n_exp, n_exp, k, c.norm_topk_prob, chosen + r * k,
                     weight + r * k);
    }
  });
  // Expert by expert, in expert order (as transformers sums them): its rows gathered, its MLP, and
  // each row's output times the row's weight added to the row.
  float* proj = ws_.proj.data();
  std::memset(proj, 0, static_cast<size_t>(t * h) * sizeof(float));
  int32_t* rows = ws_.expert_rows.data();
  float* row_weight = ws_.expert_row_weight.data();
  for (int64_t e = 0; e < n_exp; ++e) {
    int64_t n = 0;
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t j = 0; j < k; ++j) {
        if (chosen[r * k + j] != e) continue;
        rows[n] = static_cast<int32_t>(r);
        row_weight[n++] = weight[r * k + j];
      }
    }
    if (n == 0) continue;
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(ws_.expert_in.data() + i * h, ws_.xn.data() + rows[i] * h, h * sizeof(float));
    }
    w.expert_gate_up[e].Apply(ws_.expert_in.data(), h, n, ws_.gate_up.data(), 2 * f, &pool_);
    GatedActivationRows(n, f);
    w.expert_down[e].Apply(ws_.act.data(), f, n, ws_.expert_out.data(), h, &pool_);
    for (int64_t i = 0; i < n; ++i) {
      cpu::Axpy(row_weight[i], ws_.expert_out.data() + i * h, proj + rows[i] * h, h);
    }
  }
}

void CpuBackend::NormProjRows(const std::vector<float>& norm, int64_t t) {
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  cpu::ParallelFor(&pool_, t, 1, [&](int64_t r0, int64_t r1) {
    float* rows = ws_.proj.data() + r0 * h;
    cpu::RmsNorm(rows, h, norm.data(), eps, r1 - r0, h, rows, h);
  });
}

void CpuBackend::AddRmsNormRows(const float* norm, int64_t t) {
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  cpu::ParallelFor(&pool_, t, 1, [&](int64_t r0, int64_t r1) {
    cpu::AddRmsNorm(ws_.x.data() + r0 * h, h, ws_.proj.data() + r0 * h, h, norm, eps, r1 - r0, h,
                    ws_.xn.data() + r0 * h, h);
  });
}

Status CpuBackend::Forward(const StepBatch& batch, float* logits) {
  const model::ModelConfig& c = config_;
  ASTR_RETURN_IF_ERROR(
      ValidateStepBatch(batch, kv_->num_pages(), kv_->page_size(), c.vocab_size, max_tokens_));
  if (batch.num_window_tables() != layout_.window_tables) {
    return InvalidArgumentError("invalid step batch: " + std::to_string(batch.num_window_tables()) +
                                " window page tables, the pool has " +
                                std::to_string(layout_.window_tables));
  }
  const int64_t s = static_cast<int64_t>(batch.sample_rows.size());
  if (s > max_samples_) {
    return InvalidArgumentError("invalid step batch: " + std::to_string(s) +
                                " sample rows, more than the workspace's " +
                                std::to_string(max_samples_));
  }
  const int64_t t = batch.num_tokens();
  for (int64_t e = 0; e < batch.batch_size(); ++e) {
    for (int32_t r = batch.qo_indptr[e]; r < batch.qo_indptr[e + 1]; ++r)
      ws_.row_entry.data()[r] = e;
  }
  weights_->GatherEmbeddings(batch.token_ids.data(), t, c.hidden_size, ws_.x.data());
  if (c.embed_scale != 1.0) {
    const float scale = static_cast<float>(c.embed_scale);
    float* x = ws_.x.data();
    for (int64_t i = 0; i < t * c.hidden_size; ++i) x[i] *= scale;
  }
  if (!inv_freq_long_.empty()) {
    rope_long_.resize(t);
    any_rope_long_ =
        RopeLongRows(c, batch.positions, batch.qo_indptr, batch.rope_long, rope_long_.data());
  }
  const float eps = static_cast<float>(c.rms_norm_eps);
  cpu::RmsNorm(ws_.x.data(), c.hidden_size, weights_->layers[0].attn_norm.data(), eps, t,
               c.hidden_size, ws_.xn.data(), c.hidden_size);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const float* next_norm = l + 1 < c.num_layers ? weights_->layers[l + 1].attn_norm.data()
                                                  : weights_->final_norm.data();
    Layer(l, batch, next_norm);
  }
  if (s == 0) return OkStatus();
  for (int64_t i = 0; i < s; ++i) {
    std::memcpy(ws_.sampled.data() + i * c.hidden_size,
                ws_.xn.data() + static_cast<int64_t>(batch.sample_rows[i]) * c.hidden_size,
                c.hidden_size * sizeof(float));
  }
  weights_->lm_head.Apply(ws_.sampled.data(), c.hidden_size, s, logits, c.vocab_size, &pool_);
  if (c.final_softcap > 0.0) {  // rows on the pool: s x vocab tanh is not free
    const float cap = static_cast<float>(c.final_softcap);
    const int64_t v = c.vocab_size;
    cpu::ParallelFor(&pool_, s, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0 * v; i < r1 * v; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
    });
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const model::ModelFile& file,
                                                    const BackendOptions& options) {
  const model::ModelConfig& c = file.config();
  ASTR_RETURN_IF_ERROR(c.Validate());
  cpu::WeightType type;
  if (options.weight_dtype == "bf16") {
    type = cpu::WeightType::kBF16;
  } else if (options.weight_dtype == "f32") {
    type = cpu::WeightType::kF32;
  } else {
    return InvalidArgumentError("weight dtype '" + options.weight_dtype +
                                "': expected bf16 or f32");
  }
  if (options.max_batch_tokens < 1) return InvalidArgumentError("max_batch_tokens must be >= 1");
  if (options.max_sample_rows < 1) return InvalidArgumentError("max_sample_rows must be >= 1");
  int threads = options.threads > 0
                    ? options.threads
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t slots = KvLayout::For(c).slots;  // layers per page id
  int64_t pages = options.num_pages;
  if (pages <= 0) {
    pages = KvPool::PagesForBytes(options.kv_cache_bytes, slots, options.page_size, c.num_kv_heads,
                                  c.head_dim);
    if (pages < 1) {
      return InvalidArgumentError("kv cache of " + std::to_string(options.kv_cache_bytes) +
                                  " bytes holds no page of " + std::to_string(options.page_size) +
                                  " tokens");
    }
  }
  ASTR_ASSIGN_OR_RETURN(
      auto kv, KvPool::Create(slots, pages, options.page_size, c.num_kv_heads, c.head_dim));
  const bool progress = c.ParameterCount() > 50'000'000;
  cpu::ThreadPool load_pool(threads);
  ASTR_ASSIGN_OR_RETURN(CpuWeights weights, LoadCpuWeights(file, type, &load_pool, progress));
  return std::unique_ptr<Backend>(
      new CpuBackend(c, std::move(weights), std::move(kv), threads, options));
}

}  // namespace astr
