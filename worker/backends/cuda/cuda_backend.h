// The CUDA backend: the LLaMA-family forward pass on one GPU. bf16 weights and KV pool, f32
// residual stream, cuBLASLt GEMMs, the paged attention kernels of kernels/cuda, an
// InferenceWorkspace that holds every per-step buffer, and CUDA graphs for decode steps (one per
// batch-size bucket).
//
// A step is a decode step when every batch entry feeds exactly one token and the batch fits the
// largest graph bucket: it is padded to its bucket (padding entries have no pages and no out slot)
// and replayed from a graph. Any other step (prefill chunks, mixed batches) runs eagerly: K/V
// appended, then the prefill attention over pages.
//
// Weight updates happen in place (cuda_weight_set.h): PrepareWeights converts the new weights on
// the host beside the served ones; SwapWeights exchanges the contents of every device buffer, whose
// addresses stay as they are, so the captured graphs replay the new weights without re-capture.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "common/model/model_config.h"
#include "worker/backend.h"
#include "worker/backends/cuda/cuda_graphs.h"
#include "worker/backends/cuda/cuda_weights.h"
#include "worker/backends/cuda/device_sampler.h"
#include "worker/backends/cuda/gemm_lt.h"
#include "worker/backends/cuda/releasable_memory.h"
#include "worker/backends/cuda/workspace.h"
#include "worker/kv_pool.h"

namespace astr::cuda {

class CudaBackend final : public Backend {
 public:
  static StatusOr<std::unique_ptr<CudaBackend>> Create(const model::ModelFile& file,
                                                       const BackendOptions& options);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  const model::ModelConfig& config() const override { return config_; }
  int64_t num_pages() const override { return num_pages_; }
  int32_t kv_window_tables() const override { return layout_.window_tables; }
  int64_t page_size() const override { return page_size_; }
  int64_t max_batch_tokens() const override { return ws_->dims().max_tokens; }
  int64_t max_sample_rows() const override { return ws_->dims().max_batch; }
  Status Forward(const StepBatch& batch, float* logits) override;
  bool samples_on_device() const override { return device_sampling_; }
  Status ForwardSample(const StepBatch& batch, std::span<const SequenceSampler* const> samplers,
                       std::span<SampleResult> results, std::span<const uint32_t* const> masks,
                       const std::function<Status()>& before_draws) override;
  StatusOr<std::unique_ptr<WeightSet>> PrepareWeights(const model::TensorSource& source) override;
  std::unique_ptr<WeightSet> SwapWeights(std::unique_ptr<WeightSet> set) override;
  StatusOr<MemoryChange> ReleaseMemory(MemoryTags tags, bool keep_weights) override;
  StatusOr<MemoryChange> ResumeMemory(MemoryTags tags) override;
  // Whether the weights and the KV pool live in releasable arenas (the driver has virtual memory
  // management; else they were cudaMalloc'ed and cannot be released).
  bool releasable() const { return weight_arena_ != nullptr && kv_arena_ != nullptr; }
  // NCCL weight-update groups (nccl_group.h).
  StatusOr<std::unique_ptr<WeightReceiver>> JoinWeightGroup(const WeightGroupSpec& spec) override;
  StatusOr<std::unique_ptr<IpcBuffer>> OpenIpcBuffer(const std::string& handle,
                                                     uint64_t bytes) override;

  // For tests and benchmarks.
  const CudaGraphContext& graphs() const { return *graphs_; }
  const InferenceWorkspace& workspace() const { return *ws_; }
  int decode_splits(int bucket) const;
  // Which attention kernels serve this model on this device: the generic kernel (decode steps,
  // other steps) and the decode pipeline's depth (0 with the generic kernel).
  bool generic_decode() const { return generic_decode_; }
  bool generic_prefill() const { return generic_prefill_; }
  int decode_stages() const { return decode_stages_; }
  const LtGemm& gemm() const { return *gemm_; }
  // The pool's bf16 contents of one layer (tests).
  const bf16* k_pool(int64_t layer) const;
  const bf16* v_pool(int64_t layer) const;
  cudaStream_t stream() const { return stream_; }

 private:
  CudaBackend() = default;
  // Fills the host metadata for the step (padded to `rows` entries on the decode path).
  // Validates, stages and uploads the step, and enqueues its forward pass (logits left in the
  // workspace: every padded row on the decode path, the sample rows in order otherwise).
  Status RunForward(const StepBatch& batch, bool* decode);
  // Synchronizes the stream whatever `status` is; returns `status`, else the stream's error.
  Status Finish(Status status);
  int64_t StageMetadata(const StepBatch& batch, bool decode, int rows);
  Status EnqueueForward(int rows, int entries, int samples, bool decode, int num_tiles,
                        cudaStream_t s);
  Status EnqueueLayer(int64_t l, int rows, int entries, bool decode, int num_tiles,
                      const float* next_norm, cudaStream_t s);
  // The MLP pieces of EnqueueLayer: the gated MLP (gate_up, down; intermediate size ffn) of rows
  // of a.xn into out (f32 [rows, hidden]), act(gate) * up of `rows` gate/up rows, and a MoE
  // layer's MLP (rows of a.xn into a.proj).
  Status EnqueueMlp(const bf16* gate_up, const bf16* down, int64_t ffn, int rows, float* out,
                    cudaStream_t s);
  Status EnqueueGatedActivation(const bf16* gate_up, int rows, int ffn, bf16* act, cudaStream_t s);
  Status EnqueueMoe(const CudaLayerWeights& w, int rows, cudaStream_t s);
  Status CopyLogits(const StepBatch& batch, bool decode, float* logits);

  model::ModelConfig config_;
  AttentionDims dims_;  // the attention shape every layer's kernels get
  int64_t num_pages_ = 0, page_size_ = 0;
  int num_sms_ = 1;
  bool generic_decode_ = false;
  bool generic_prefill_ = false;
  int decode_stages_ = 0;
  bool device_sampling_ = true;
  DeviceSampler sampler_;  // head_dim outside the tensor-core kernels' dispatch set
  cudaStream_t stream_ = nullptr;
  CudaWeights weights_;
  // Not OK once a swap failed halfway (a CUDA error): the device holds parts of two weight sets,
  // and every later step fails with this.
  Status weights_broken_;
  // Releasable arenas (releasable_memory.h) holding the weights and the KV pool; null when the
  // driver has no virtual memory management.
  std::unique_ptr<ReleasableArena> weight_arena_, kv_arena_;
  // ReleaseMemory's state: the host copy of the weight arena (keep_weights), and why steps are
  // refused now (OK when nothing is released and the weights are valid).
  std::vector<uint8_t> weights_on_host_;
  bool weights_discarded_ = false;
  Status MemoryBlocked() const;
  DeviceMemory kv_;  // [layers][2][pages, page_size, kv_heads, head_dim] bf16
  int64_t layer_kv_elems_ = 0;  // per K or V array; the pool holds layout_.slots of each
  KvLayout layout_;             // which K/V array and page table each layer uses
  std::unique_ptr<InferenceWorkspace> ws_;
  std::unique_ptr<LtGemm> gemm_;
  std::unique_ptr<CudaGraphContext> graphs_;
};

// Options checked and sizes derived the same way Create does; for host-side tests.
WorkspaceDims WorkspaceDimsFor(const model::ModelConfig& c, const BackendOptions& options,
                               int64_t num_pages, int num_sms);
// KV pages that fit in `bytes` of bf16 K and V for this model and page size.
int64_t CudaPagesForBytes(const model::ModelConfig& c, int64_t page_size, int64_t bytes);

}  // namespace astr::cuda
