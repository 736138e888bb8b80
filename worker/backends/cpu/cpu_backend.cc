// The CPU backend: the decoder layer of ModelConfig (model_config.h) over a ragged step batch with
// a paged KV pool.
#include <algorithm>
#include <atomic>
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

// act[r] = act(gate) * up for `rows` rows of gate_up ([gate f | up f] each; the activation is
// c.mlp_activation), the rows on `pool`
// (may be null; each row's call is the same whichever thread makes it).
void GatedActivation(const model::ModelConfig& c, const float* gate_up, int64_t rows, int64_t f,
                     float* act, cpu::ThreadPool* pool) {
  const model::MlpActivation kind = c.mlp_activation;
  cpu::ParallelFor(pool, rows, 1, [&](int64_t r0, int64_t r1) {
    if (kind == model::MlpActivation::kSwigluClamped) {
      cpu::SwigluClampedMul(gate_up + r0 * 2 * f, r1 - r0, f, static_cast<float>(c.swiglu_alpha),
                            static_cast<float>(c.swiglu_limit), act + r0 * f, f);
    } else if (kind == model::MlpActivation::kGeluTanh) {
      cpu::GeluTanhMul(gate_up + r0 * 2 * f, r1 - r0, f, act + r0 * f, f);
    } else {
      cpu::SiluMul(gate_up + r0 * 2 * f, r1 - r0, f, act + r0 * f, f);
    }
  });
}

// rows [0, n) of x ([n, cols], dense) += bias [cols].
void AddRowBias(float* x, int64_t n, int64_t cols, const std::vector<float>& bias) {
  for (int64_t r = 0; r < n; ++r) cpu::AddInPlace(x + r * cols, bias.data(), cols);
}

// Every per-step buffer, sized once for the largest step (max_batch_tokens rows).
struct Workspace {
  StepBuffer<float> x;             // [T, hidden] residual stream
  StepBuffer<float> xn;            // [T, hidden] normed input of the next block
  StepBuffer<float> qkv;           // [T, qkv_rows]
  StepBuffer<float> attn;          // [T, heads*hd]
  StepBuffer<float> proj;          // [T, hidden] output of o_proj / down_proj
  StepBuffer<float> gate_up;       // [T, 2*ffn]
  StepBuffer<float> act;           // [T, ffn]
  // MoE layers: router logits [T, experts], each row's experts and weights [T, top-k].
  StepBuffer<float> router;
  StepBuffer<int32_t> topk_expert;
  StepBuffer<float> topk_weight;
  // The (row, choice) pairs sorted by expert [T * top-k]: each pair's row, gathered input, gate/up,
  // activation and output, and where each row's choices went.
  StepBuffer<int32_t> expert_rows;
  StepBuffer<float> expert_in;
  StepBuffer<float> expert_gate_up;
  StepBuffer<float> expert_act;
  StepBuffer<float> expert_out;
  StepBuffer<int32_t> expert_slot;
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
    // The dense MLP's and (MoE) the shared expert's.
    const int64_t ffn = std::max(c.intermediate_size, c.shared_expert_intermediate_size);
    ws_.gate_up.resize(t * 2 * ffn);
    ws_.act.resize(t * ffn);
    if (c.num_experts > 0) {
      ws_.router.resize(t * c.num_experts);
      ws_.topk_expert.resize(t * c.num_experts_per_tok);
      ws_.topk_weight.resize(t * c.num_experts_per_tok);
      const int64_t pairs = t * c.num_experts_per_tok;
      ws_.expert_rows.resize(pairs);
      ws_.expert_in.resize(pairs * c.hidden_size);
      ws_.expert_gate_up.resize(pairs * 2 * c.moe_intermediate_size);
      ws_.expert_act.resize(pairs * c.moe_intermediate_size);
      ws_.expert_out.resize(pairs * c.hidden_size);
      ws_.expert_slot.resize(pairs);
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
  size_t gathered_weight_bytes() const override { return weights_->embed_table_bytes(); }
  int host_threads() const override { return pool_.size(); }
  void RunOnHostThreads(const std::function<void(int, int)>& fn) override { pool_.Run(fn); }

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
  // out = the gated MLP (gate_up, down; intermediate size f) of rows [0, t) of xn.
  void Mlp(const CpuLinear& gate_up, const CpuLinear& down, int64_t f, int64_t t, float* out);
  // proj = a MoE layer's MLP of rows [0, t) of xn.
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
  // MoE routing scratch (MoeMlp): each expert's first pair, the next free pair, the active experts.
  std::vector<int64_t> moe_begin_, moe_fill_, moe_active_;
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
  shape.sinks = w.attn_sinks.empty() ? nullptr : w.attn_sinks.data();
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
  if (!w.o_bias.empty()) AddRowBias(ws_.proj.data(), t, c.hidden_size, w.o_bias);
  if (c.sandwich_norms) NormProjRows(w.post_attn_norm, t);
  AddRmsNormRows(w.mlp_norm.data(), t);
  if (c.LayerIsMoe(l)) {
    MoeMlp(w, t);
  } else {
    Mlp(w.gate_up, w.down, c.intermediate_size, t, ws_.proj.data());
  }
  if (c.sandwich_norms) NormProjRows(w.post_mlp_norm, t);
  AddRmsNormRows(next_norm, t);
}

void CpuBackend::Mlp(const CpuLinear& gate_up, const CpuLinear& down, int64_t f, int64_t t,
                     float* out) {
  gate_up.Apply(ws_.xn.data(), config_.hidden_size, t, ws_.gate_up.data(), 2 * f, &pool_);
  GatedActivation(config_, ws_.gate_up.data(), t, f, ws_.act.data(), &pool_);
  down.Apply(ws_.act.data(), f, t, out, config_.hidden_size, &pool_);
}

void CpuBackend::MoeMlp(const CpuLayerWeights& w, int64_t t) {
  const model::ModelConfig& c = config_;
  const int64_t h = c.hidden_size, f = c.moe_intermediate_size;
  const int64_t n_exp = c.num_experts, k = c.num_experts_per_tok, pairs = t * k;
  float* logits = ws_.router.data();
  w.router.Apply(ws_.xn.data(), h, t, logits, n_exp, &pool_);
  if (!w.router_bias.empty()) AddRowBias(logits, t, n_exp, w.router_bias);
  int32_t* chosen = ws_.topk_expert.data();
  float* weight = ws_.topk_weight.data();
  moe::RouteParams route;
  route.num_experts = static_cast<int>(n_exp);
  route.top_k = static_cast<int>(k);
  route.sigmoid = c.router_sigmoid;
  route.normalize = c.norm_topk_prob;
  route.scale = static_cast<float>(c.routed_scaling_factor);
  route.choice_bias = w.router_choice_bias.empty() ? nullptr : w.router_choice_bias.data();
  route.groups = static_cast<int>(c.router_groups);
  route.topk_groups = static_cast<int>(c.router_topk_groups);
  cpu::ParallelFor(&pool_, t, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      cpu::RouteTopK(logits + r * n_exp, route, chosen + r * k, weight + r * k);
    }
  });
  // The (row, choice) pairs sorted by expert, rows ascending within one: expert e's rows are
  // pairs [begin[e], begin[e + 1]) of expert_in / expert_out; slot[r * k + j] is where row r's
  // choice j went.
  std::vector<int64_t>& begin = moe_begin_;
  begin.assign(static_cast<size_t>(n_exp + 1), 0);
  for (int64_t i = 0; i < pairs; ++i) ++begin[chosen[i] + 1];
  for (int64_t e = 0; e < n_exp; ++e) begin[e + 1] += begin[e];
  moe_fill_.assign(begin.begin(), begin.end() - 1);
  int32_t* pair_row = ws_.expert_rows.data();
  int32_t* slot = ws_.expert_slot.data();
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t p = moe_fill_[chosen[r * k + j]]++;
      pair_row[p] = static_cast<int32_t>(r);
      slot[r * k + j] = static_cast<int32_t>(p);
    }
  }
  float* in = ws_.expert_in.data();
  float* out = ws_.expert_out.data();
  cpu::ParallelFor(&pool_, pairs, 8, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      std::memcpy(in + p * h, ws_.xn.data() + pair_row[p] * h, h * sizeof(float));
    }
  });
  // Each active expert's MLP on its rows. With at least two active experts per thread (decode
  // reads 8 of 128), the threads take whole experts (one region for all of them, each expert's
  // GEMMs on one thread); otherwise each expert's GEMMs are split across the threads. Either way
  // every value is computed the same way.
  auto run_expert = [&](int64_t e, cpu::ThreadPool* pool) {
    const int64_t p0 = begin[e], n = begin[e + 1] - p0;
    float* gate_up = ws_.expert_gate_up.data() + p0 * 2 * f;
    float* act = ws_.expert_act.data() + p0 * f;
    w.expert_gate_up[e].Apply(in + p0 * h, h, n, gate_up, 2 * f, pool);
    if (!w.expert_gate_up_bias.empty()) AddRowBias(gate_up, n, 2 * f, w.expert_gate_up_bias[e]);
    GatedActivation(c, gate_up, n, f, act, pool);
    w.expert_down[e].Apply(act, f, n, out + p0 * h, h, pool);
    if (!w.expert_down_bias.empty()) AddRowBias(out + p0 * h, n, h, w.expert_down_bias[e]);
  };
  moe_active_.clear();
  for (int64_t e = 0; e < n_exp; ++e) {
    if (begin[e + 1] > begin[e]) moe_active_.push_back(e);
  }
  if (static_cast<int64_t>(moe_active_.size()) >= 2 * pool_.size()) {
    std::atomic<size_t> next{0};
    pool_.Run([&](int, int) {
      for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < moe_active_.size();) {
        run_expert(moe_active_[i], nullptr);
      }
    });
  } else {
    for (int64_t e : moe_active_) run_expert(e, &pool_);
  }
  // Each row: its experts' outputs times their weights, added in expert order (as transformers
  // sums them).
  float* proj = ws_.proj.data();
  cpu::ParallelFor(&pool_, t, 1, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> order(static_cast<size_t>(k));
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < k; ++j) order[j] = j;
      std::sort(order.begin(), order.end(),
                [&](int64_t a, int64_t b) { return chosen[r * k + a] < chosen[r * k + b]; });
      float* row = proj + r * h;
      std::memset(row, 0, static_cast<size_t>(h) * sizeof(float));
      for (int64_t j : order) cpu::Axpy(weight[r * k + j], out + slot[r * k + j] * h, row, h);
    }
  });
  // The shared expert on every row (Qwen2-MoE's scaled by sigmoid(xn . shared_gate)), added last.
  if (const int64_t sf = c.shared_expert_intermediate_size; sf > 0) {
    float* shared = in;  // the gathered rows are no longer needed
    Mlp(w.shared_gate_up, w.shared_down, sf, t, shared);
    cpu::ParallelFor(&pool_, t, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float scale = 1.0f;  // GLM-4.5's shared experts are ungated
        if (c.shared_expert_gated) {
          const float g = cpu::Dot(ws_.xn.data() + r * h, w.shared_gate.data(), h);
          scale = 1.0f / (1.0f + std::exp(-g));
        }
        cpu::Axpy(scale, shared + r * h, proj + r * h, h);
      }
    });
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
