#include "worker/backends/cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/base/logging.h"
#include "common/model/model_file.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/paged_attention_generic.h"
#include "kernels/cuda/paged_decode.h"
#include "kernels/cuda/paged_prefill.h"
#include "worker/backends/cuda/cuda_ipc.h"
#include "worker/backends/cuda/cuda_weight_set.h"
#include "worker/backends/cuda/nccl_group.h"
#include "worker/rope.h"

namespace astr::cuda {
namespace {

#define ASTR_LAUNCH(expr, what) ASTR_CUDA_RETURN_IF_ERROR(expr, what)

// Loading and preparing weights log their progress for models this large.
bool LogsWeightProgress(const model::ModelConfig& c) { return c.ParameterCount() > 50'000'000; }

AttentionDims DimsOf(const model::ModelConfig& c) {
  AttentionDims d;
  d.num_heads = static_cast<int>(c.num_heads);
  d.num_kv_heads = static_cast<int>(c.num_kv_heads);
  d.head_dim = static_cast<int>(c.head_dim);
  d.sliding_window = static_cast<int>(c.sliding_window);  // EnqueueLayer sets each layer's
  d.sm_scale = c.AttnScale();
  d.softcap = static_cast<float>(c.attn_softcap);
  return d;
}

}  // namespace

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const model::ModelFile& file,
                                                           const BackendOptions& options) {
  const model::ModelConfig& c = file.config();
  ASTR_RETURN_IF_ERROR(c.Validate());
  if (options.max_batch_tokens < 1) return InvalidArgumentError("max_batch_tokens must be >= 1");
  if (options.max_sample_rows < 1) return InvalidArgumentError("max_sample_rows must be >= 1");
  if (options.page_size < 1) return InvalidArgumentError("page_size must be >= 1");
  const AttentionDims dims = DimsOf(c);
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  int device = 0;
  ASTR_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "selecting the CUDA device");
  int smem_optin = 0;
  ASTR_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
      "querying the shared memory limit");
  // Decode and prefill each take the tensor-core kernel where it covers the shape and fits the
  // device's shared memory (decode with the deepest pipeline that fits), else the generic kernel;
  // each on its own (e.g. GQA groups past 16 keep the tensor-core prefill).
  const size_t optin = static_cast<size_t>(smem_optin);
  // `why`: the Supports* reason, or null when the kernel covers the shape but not the device.
  const auto fallback = [&](const char* path, const char* why) -> Status {
    const std::string reason =
        why != nullptr ? std::string(why)
                       : std::string("paged ") + path + " needs more shared memory per block at " +
                             "head_dim " + std::to_string(c.head_dim) + " than this GPU allows (" +
                             std::to_string(smem_optin) + " bytes)";
    if (c.head_dim > kGenericAttentionMaxHeadDim) {
      return InvalidArgumentError("the CUDA attention kernels cannot run head_dim " +
                                  std::to_string(c.head_dim) + ": " + reason);
    }
    LOG(WARNING) << "CUDA backend: " << reason << "; " << path
                 << " uses the generic (slow) attention kernel";
    return OkStatus();
  };
  const char* why = nullptr;
  b->decode_stages_ = PagedDecodeStages(dims.head_dim, optin);
  if (!SupportsPagedDecode(dims, &why) || b->decode_stages_ == 0) {
    ASTR_RETURN_IF_ERROR(fallback("decode", why));
    b->generic_decode_ = true;
    b->decode_stages_ = 0;
  }
  why = nullptr;
  if (!SupportsPagedPrefill(dims, &why) || PagedPrefillSharedBytes(dims.head_dim) > optin) {
    ASTR_RETURN_IF_ERROR(fallback("prefill", why));
    b->generic_prefill_ = true;
  }
  b->config_ = c;
  b->layout_ = KvLayout::For(c);
  b->dims_ = dims;
  b->page_size_ = options.page_size;
  ASTR_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&b->num_sms_, cudaDevAttrMultiProcessorCount, device),
      "querying the SM count");
  ASTR_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking),
                            "creating the CUDA stream");
  b->num_pages_ = options.num_pages > 0
                      ? options.num_pages
                      : CudaPagesForBytes(c, options.page_size, options.kv_cache_bytes);
  // Page ids are int32 in the step batch and the kernels.
  b->num_pages_ = std::min<int64_t>(b->num_pages_, std::numeric_limits<int32_t>::max());
  if (b->num_pages_ < 1) {
    return InvalidArgumentError("kv cache of " + std::to_string(options.kv_cache_bytes) +
                                " bytes holds no page of " + std::to_string(options.page_size) +
                                " tokens");
  }
  const WorkspaceDims wd = WorkspaceDimsFor(c, options, b->num_pages_, b->num_sms_);
  if (wd.max_prefill_tiles > 65535) {
    return InvalidArgumentError("max_batch_tokens " + std::to_string(options.max_batch_tokens) +
                                " needs more prefill work items than one launch takes (65535)");
  }
  if (options.device_sampling && c.vocab_size > kMaxSamplingVocab) {
    return InvalidArgumentError("vocabulary of " + std::to_string(c.vocab_size) +
                                " tokens is larger than device sampling takes (" +
                                std::to_string(kMaxSamplingVocab) + "); use --cuda-sampling off");
  }
  // The weights and the KV pool live in releasable arenas where the driver allows
  // (ReleaseMemory); the weights' reservation is an upper bound (every value as f32), addresses
  // only.
  b->layer_kv_elems_ = b->num_pages_ * options.page_size * c.num_kv_heads * c.head_dim;
  const size_t kv_bytes =
      static_cast<size_t>(b->layout_.slots * 2 * b->layer_kv_elems_) * sizeof(bf16);
  {
    const int64_t qkv_rows = (c.num_heads + 2 * c.num_kv_heads + c.num_heads) * c.head_dim;
    const int64_t per_layer = qkv_rows * c.hidden_size + c.hidden_size * c.num_heads * c.head_dim +
                              3 * c.intermediate_size * c.hidden_size + 4 * c.hidden_size +
                              2 * c.head_dim + qkv_rows +
                              c.num_experts * (3 * c.moe_intermediate_size + 1) * c.hidden_size +
                              (3 * c.shared_expert_intermediate_size + 1) * c.hidden_size;
    const size_t reserve =
        static_cast<size_t>(4 * (2 * c.vocab_size * c.hidden_size + c.num_layers * per_layer +
                                 c.hidden_size + c.head_dim) +
                            (int64_t{256} << 20));
    auto weights = ReleasableArena::Create(reserve, "the weights");
    auto kv = weights.ok() ? ReleasableArena::Create(kv_bytes, "the KV pool") : weights.status();
    if (weights.ok() && kv.ok()) {
      b->weight_arena_ = std::move(*weights);
      b->kv_arena_ = std::move(*kv);
    } else {
      LOG(WARNING) << "CUDA backend: device memory cannot be released on this driver ("
                   << (weights.ok() ? kv.status() : weights.status()).message() << ")";
    }
  }
  ASTR_ASSIGN_OR_RETURN(b->weights_,
                        LoadCudaWeights(file, LogsWeightProgress(c), b->weight_arena_.get()));
  if (b->kv_arena_ != nullptr) {
    ASTR_ASSIGN_OR_RETURN(void* kv, b->kv_arena_->Take(kv_bytes));
    b->kv_ = DeviceMemory::View(kv, kv_bytes);
  } else {
    ASTR_ASSIGN_OR_RETURN(b->kv_, DeviceAllocator::Allocate(kv_bytes, "the KV pool"));
  }
  ASTR_ASSIGN_OR_RETURN(b->ws_, InferenceWorkspace::Create(wd));
  ASTR_ASSIGN_OR_RETURN(b->gemm_, LtGemm::Create(b->ws_->act().gemm_workspace,
                                                 static_cast<size_t>(wd.gemm_workspace_bytes)));
  {
    // Every GEMM's algorithms, for every m bucket a step can bring, chosen now rather than when a
    // new prefill length first arrives.
    const int64_t hidden = c.hidden_size, ffn = c.intermediate_size;
    const int64_t q_cols = c.num_heads * c.head_dim, qkv_rows = b->weights_.qkv_rows;
    const int64_t rows = std::max<int64_t>(wd.max_tokens, wd.max_batch);
    LtGemm& g = *b->gemm_;
    ASTR_RETURN_IF_ERROR(g.Prepare(hidden, qkv_rows, CUDA_R_16BF, rows, qkv_rows, hidden));
    ASTR_RETURN_IF_ERROR(g.Prepare(q_cols, hidden, CUDA_R_32F, rows, hidden, q_cols));
    ASTR_RETURN_IF_ERROR(g.Prepare(hidden, 2 * ffn, CUDA_R_16BF, rows, 2 * ffn, hidden));
    ASTR_RETURN_IF_ERROR(g.Prepare(ffn, hidden, CUDA_R_32F, rows, hidden, ffn));
    ASTR_RETURN_IF_ERROR(
        g.Prepare(hidden, c.vocab_size, CUDA_R_32F, wd.max_batch, c.vocab_size, hidden));
    if (c.num_experts > 0) {  // the MoE router
      ASTR_RETURN_IF_ERROR(
          g.Prepare(hidden, c.num_experts, CUDA_R_32F, rows, c.num_experts, hidden));
    }
    if (const int64_t sf = c.shared_expert_intermediate_size; sf > 0) {  // the shared expert
      ASTR_RETURN_IF_ERROR(g.Prepare(hidden, 2 * sf, CUDA_R_16BF, rows, 2 * sf, hidden));
      ASTR_RETURN_IF_ERROR(g.Prepare(sf, hidden, CUDA_R_32F, rows, hidden, sf));
    }
  }
  b->graphs_ = std::make_unique<CudaGraphContext>(GraphBuckets(static_cast<int>(wd.max_batch)),
                                                  options.cuda_graphs);
  b->device_sampling_ = options.device_sampling;
  if (b->device_sampling_) {
    ASTR_RETURN_IF_ERROR(b->sampler_.Reserve(wd.max_batch, c.vocab_size));
  }
  return b;
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    graphs_.reset();
    cudaStreamDestroy(stream_);
  }
}

StatusOr<std::unique_ptr<WeightSet>> CudaBackend::PrepareWeights(
    const model::TensorSource& source) {
  if (weight_arena_ != nullptr && weight_arena_->released()) {
    return FailedPreconditionError(
        "the GPU memory of the weights is released: ResumeMemory before updating them");
  }
  // The served config's shapes: a source of another shape fails here, not in the swap.
  ASTR_ASSIGN_OR_RETURN(
      std::unique_ptr<CudaWeightSet> set,
      CudaWeightSet::Prepare(source, config_, weights_, LogsWeightProgress(config_)));
  return std::unique_ptr<WeightSet>(std::move(set));
}

Status CudaBackend::MemoryBlocked() const {
  std::string released;
  if (weight_arena_ != nullptr && weight_arena_->released()) released = "the weights";
  if (kv_arena_ != nullptr && kv_arena_->released()) {
    released += released.empty() ? "the KV pool" : " and the KV pool";
  }
  if (!released.empty()) {
    return FailedPreconditionError("the GPU memory of " + released +
                                   " is released (ResumeMemory first)");
  }
  if (weights_discarded_) {
    return FailedPreconditionError(
        "the weights were released without a copy: update them (UpdateWeights, "
        "UpdateWeightsFromDisk, NCCL) before serving");
  }
  return OkStatus();
}

StatusOr<MemoryChange> CudaBackend::ReleaseMemory(MemoryTags tags, bool keep_weights) {
  if (!releasable()) {
    return FailedPreconditionError(
        "this CUDA driver has no virtual memory management: the weights and the KV pool were "
        "allocated with cudaMalloc and cannot be released");
  }
  MemoryChange change;
  if (tags.weights && !weight_arena_->released()) {
    if (keep_weights) {
      // The arena as the device holds it, so that resuming restores exactly these bytes.
      weights_on_host_.resize(weight_arena_->used_bytes());
      ASTR_CUDA_RETURN_IF_ERROR(cudaMemcpy(weights_on_host_.data(), weight_arena_->base(),
                                           weights_on_host_.size(), cudaMemcpyDeviceToHost),
                                "copying the weights to the host");
    }
    ASTR_ASSIGN_OR_RETURN(size_t freed, weight_arena_->Release());
    change.bytes += static_cast<int64_t>(freed);
    weights_discarded_ = !keep_weights;
  }
  if (tags.kv_cache && !kv_arena_->released()) {
    ASTR_ASSIGN_OR_RETURN(size_t freed, kv_arena_->Release());
    change.bytes += static_cast<int64_t>(freed);
  }
  size_t free_bytes = 0, total = 0;
  ASTR_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  change.device_free_bytes = static_cast<int64_t>(free_bytes);
  LOG(INFO) << "CUDA backend: released " << change.bytes << " bytes of device memory ("
            << (tags.weights ? (keep_weights ? "weights kept on the host" : "weights discarded")
                             : "weights kept")
            << (tags.kv_cache ? ", KV pool" : "") << "); " << free_bytes << " bytes free";
  return change;
}

StatusOr<MemoryChange> CudaBackend::ResumeMemory(MemoryTags tags) {
  if (!releasable()) {
    return FailedPreconditionError(
        "this CUDA driver has no virtual memory management: nothing was released");
  }
  MemoryChange change;
  if (tags.kv_cache && kv_arena_->released()) {
    ASTR_ASSIGN_OR_RETURN(size_t mapped, kv_arena_->Restore());
    change.bytes += static_cast<int64_t>(mapped);
  }
  if (tags.weights && weight_arena_->released()) {
    ASTR_ASSIGN_OR_RETURN(size_t mapped, weight_arena_->Restore());
    change.bytes += static_cast<int64_t>(mapped);
    if (!weights_on_host_.empty()) {
      ASTR_CUDA_RETURN_IF_ERROR(cudaMemcpy(weight_arena_->base(), weights_on_host_.data(),
                                           weights_on_host_.size(), cudaMemcpyHostToDevice),
                                "restoring the weights");
      weights_on_host_ = {};
    }
  }
  size_t free_bytes = 0, total = 0;
  ASTR_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  change.device_free_bytes = static_cast<int64_t>(free_bytes);
  LOG(INFO) << "CUDA backend: took back " << change.bytes << " bytes of device memory; "
            << free_bytes << " bytes free";
  return change;
}

StatusOr<std::unique_ptr<WeightReceiver>> CudaBackend::JoinWeightGroup(
    const WeightGroupSpec& spec) {
  return JoinNcclWeightGroup(spec);
}

StatusOr<std::unique_ptr<IpcBuffer>> CudaBackend::OpenIpcBuffer(const std::string& handle,
                                                                uint64_t bytes) {
  return OpenCudaIpcBuffer(handle, bytes);
}

std::unique_ptr<WeightSet> CudaBackend::SwapWeights(std::unique_ptr<WeightSet> set) {
  auto& next = static_cast<CudaWeightSet&>(*set);
  CHECK(next.prepared_for(weights_)) << "SwapWeights: a weight set this backend did not prepare";
  // No step is in flight (the caller's contract, and every step synchronizes the stream before it
  // returns), so the exchange has the stream to itself.
  if (weight_arena_ != nullptr && weight_arena_->released()) {
    // PrepareWeights refused this; a release between prepare and swap is the caller's error.
    weights_broken_ =
        FailedPreconditionError("a weight swap arrived while the weights' GPU memory was released");
    LOG(ERROR) << weights_broken_.message();
    return set;
  }
  const auto start = std::chrono::steady_clock::now();
  if (Status s = next.Exchange(stream_); !s.ok()) {
    weights_broken_ =
        InternalError("the CUDA weights are partly swapped after an error: " + s.message());
    LOG(ERROR) << weights_broken_.message();
    return set;
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  weights_discarded_ = false;  // a full set replaced whatever the device held
  LOG(INFO) << "CUDA weights swapped in place: " << next.weight_bytes() << " bytes each way in "
            << static_cast<int64_t>(ms) << " ms";
  return set;
}

int CudaBackend::decode_splits(int bucket) const {
  return ChooseDecodeSplits(bucket, static_cast<int>(config_.num_kv_heads), num_sms_);
}

const bf16* CudaBackend::k_pool(int64_t layer) const {
  return kv_.as<bf16>() + (2 * layout_.layer_slot[layer]) * layer_kv_elems_;
}
const bf16* CudaBackend::v_pool(int64_t layer) const {
  return kv_.as<bf16>() + (2 * layout_.layer_slot[layer] + 1) * layer_kv_elems_;
}

int64_t CudaBackend::StageMetadata(const StepBatch& batch, bool decode, int rows) {
  StepMetadata& m = ws_->host();
  const int64_t t = batch.num_tokens(), b = batch.batch_size();
  std::copy(batch.token_ids.begin(), batch.token_ids.end(), m.token_ids);
  std::copy(batch.positions.begin(), batch.positions.end(), m.positions);
  if (RopeUsesLongFactors(config_))
    RopeLongRows(config_, batch.positions, batch.qo_indptr, batch.rope_long, m.rope_long);
  const WorkspaceDims& d = ws_->dims();
  for (int32_t table = 0; table <= batch.num_window_tables(); ++table) {
    const std::vector<int64_t>& slots = batch.slots(table);
    std::copy(slots.begin(), slots.end(), m.out_slots + table * d.max_tokens);
    const std::vector<int32_t>& pages = batch.page_indices(table);
    std::copy(pages.begin(), pages.end(), m.kv_page_indices + table * d.max_kv_pages);
  }
  std::copy(batch.qo_indptr.begin(), batch.qo_indptr.end(), m.qo_indptr);
  std::copy(batch.kv_indptr.begin(), batch.kv_indptr.end(), m.kv_indptr);
  std::copy(batch.kv_last_page_len.begin(), batch.kv_last_page_len.end(), m.kv_last_page_len);
  if (decode) {
    // Padding rows: token 0 at position 0, no pages, no out slot. The kernels skip them and the
    // logits of their rows are never copied out.
    for (int64_t r = t; r < rows; ++r) {
      m.token_ids[r] = 0;
      m.positions[r] = 0;
      m.rope_long[r] = 0;
      for (int64_t table = 0; table < d.kv_tables; ++table)
        m.out_slots[table * d.max_tokens + r] = -1;
      m.qo_indptr[r + 1] = static_cast<int32_t>(r + 1);
      m.kv_indptr[r + 1] = m.kv_indptr[b];
      m.kv_last_page_len[r] = 0;
    }
  } else {
    std::copy(batch.sample_rows.begin(), batch.sample_rows.end(), m.sample_rows);
    const PrefillPlan plan = BuildPrefillPlan(batch.qo_indptr.data(), static_cast<int>(b),
                                              static_cast<int>(config_.head_dim));
    std::copy(plan.tile_entry.begin(), plan.tile_entry.end(), m.tile_entry);
    std::copy(plan.tile_row_begin.begin(), plan.tile_row_begin.end(), m.tile_row_begin);
    return plan.num_tiles();
  }
  return 0;
}

Status CudaBackend::RunForward(const StepBatch& batch, bool* decode_out) {
  // An error handled earlier (e.g. a failed allocation) must not surface in this step's launches.
  (void)cudaGetLastError();
  if (!weights_broken_.ok()) return weights_broken_;
  ASTR_RETURN_IF_ERROR(MemoryBlocked());
  const WorkspaceDims& d = ws_->dims();
  ASTR_RETURN_IF_ERROR(
      ValidateStepBatch(batch, num_pages_, page_size_, config_.vocab_size, d.max_tokens));
  const int64_t t = batch.num_tokens(), b = batch.batch_size();
  const int64_t s = static_cast<int64_t>(batch.sample_rows.size());
  if (batch.num_window_tables() != layout_.window_tables) {
    return InvalidArgumentError("invalid step batch: " + std::to_string(batch.num_window_tables()) +
                                " window page tables, the pool has " +
                                std::to_string(layout_.window_tables));
  }
  if (b > d.max_batch || s > d.max_batch) {
    return InvalidArgumentError("invalid step batch: " + std::to_string(b) + " entries and " +
                                std::to_string(s) + " sample rows; the CUDA workspace holds " +
                                std::to_string(d.max_batch));
  }
  if (static_cast<int64_t>(batch.kv_page_indices.size()) > d.max_kv_pages) {
    return InvalidArgumentError(
        "invalid step batch: " + std::to_string(batch.kv_page_indices.size()) +
        " page ids, more than the workspace's " + std::to_string(d.max_kv_pages));
  }
  // A decode step: every entry feeds exactly one row.
  bool decode = b > 0;
  for (int64_t e = 0; e < b && decode; ++e) {
    decode = batch.qo_indptr[e + 1] - batch.qo_indptr[e] == 1;
  }
  *decode_out = decode;
  const int rows =
      decode ? BucketFor(static_cast<int>(b), graphs_->buckets()) : static_cast<int>(t);
  const int num_tiles = static_cast<int>(StageMetadata(batch, decode, rows));
  ASTR_CUDA_RETURN_IF_ERROR(
      ws_->UploadMetadata(static_cast<int64_t>(batch.kv_page_indices.size()), stream_),
      "uploading the step metadata");
  if (decode) {
    return graphs_->Run(rows, stream_, [&](cudaStream_t st) {
      return EnqueueForward(rows, rows, rows, true, 0, st);
    });
  }
  return EnqueueForward(static_cast<int>(t), static_cast<int>(b), static_cast<int>(s), false,
                        num_tiles, stream_);
}

Status CudaBackend::Finish(Status status) {
  // Always wait for the stream, also on errors: work already enqueued may still read the pinned
  // metadata that the next step rewrites.
  const cudaError_t err = cudaStreamSynchronize(stream_);
  if (!status.ok()) return status;
  if (err != cudaSuccess) return CudaStatus(err, "running the step");
  return OkStatus();
}

Status CudaBackend::Forward(const StepBatch& batch, float* logits) {
  bool decode = false;
  Status status = RunForward(batch, &decode);
  if (status.ok()) status = CopyLogits(batch, decode, logits);
  return Finish(std::move(status));
}

Status CudaBackend::ForwardSample(const StepBatch& batch,
                                  std::span<const SequenceSampler* const> samplers,
                                  std::span<SampleResult> results,
                                  std::span<const uint32_t* const> masks,
                                  const std::function<Status()>& before_draws) {
  const int64_t s = static_cast<int64_t>(batch.sample_rows.size());
  if (static_cast<int64_t>(samplers.size()) != s || results.size() < samplers.size()) {
    return InvalidArgumentError("ForwardSample: " + std::to_string(samplers.size()) +
                                " samplers for " + std::to_string(s) + " sample rows");
  }
  if (s > ws_->dims().max_batch) {
    return InvalidArgumentError("invalid step batch: " + std::to_string(s) +
                                " sample rows; the CUDA workspace holds " +
                                std::to_string(ws_->dims().max_batch));
  }
  // The parameters ride in the step metadata block (one upload).
  sampler_.Pack(samplers, config_.vocab_size, ws_->host().sampling_params);
  bool decode = false;
  Status status = RunForward(batch, &decode);
  if (!status.ok() || s == 0) return Finish(std::move(status));
  const Activations& a = ws_->act();
  const int64_t vocab = config_.vocab_size;
  float* logits = a.logits;
  float* scratch = a.raw_logits;
  bool identity = true;
  for (int64_t i = 0; i < s && identity; ++i) identity = batch.sample_rows[i] == i;
  if (decode && !identity) {
    // The decode path computed logits for every row: gather the sample rows (any order, repeats
    // allowed) into the scratch buffer, which becomes the logits; the old logits become scratch.
    for (int64_t i = 0; i < s && status.ok(); ++i) {
      const cudaError_t err =
          cudaMemcpyAsync(scratch + i * vocab, logits + int64_t{batch.sample_rows[i]} * vocab,
                          vocab * sizeof(float), cudaMemcpyDeviceToDevice, stream_);
      if (err != cudaSuccess) status = CudaStatus(err, "gathering the sample rows");
    }
    std::swap(logits, scratch);
  }
  // Masks that follow the plan come now, while the forward pass runs on the stream.
  if (status.ok() && before_draws) status = before_draws();
  if (status.ok()) {
    status = sampler_.Launch(logits, scratch, ws_->device().sampling_params, a.sample_results,
                             vocab, stream_, results, masks);
  }
  return Finish(std::move(status));
}

Status CudaBackend::CopyLogits(const StepBatch& batch, bool decode, float* logits) {
  const int64_t vocab = config_.vocab_size;
  const float* dev = ws_->act().logits;
  const int64_t s = static_cast<int64_t>(batch.sample_rows.size());
  if (s == 0) return OkStatus();
  if (!decode) {
    // The prefill path computed exactly the sample rows, in order.
    ASTR_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(logits, dev, s * vocab * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        "copying logits");
    return OkStatus();
  }
  // The decode path computed logits for every row: copy the sample rows, merging consecutive runs.
  for (int64_t i = 0; i < s;) {
    int64_t j = i + 1;
    while (j < s && batch.sample_rows[j] == batch.sample_rows[j - 1] + 1) ++j;
    ASTR_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(logits + i * vocab, dev + int64_t{batch.sample_rows[i]} * vocab,
                        (j - i) * vocab * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        "copying logits");
    i = j;
  }
  return OkStatus();
}

Status CudaBackend::EnqueueForward(int rows, int entries, int samples, bool decode, int num_tiles,
                                   cudaStream_t s) {
  const model::ModelConfig& c = config_;
  const StepMetadata& m = ws_->device();
  const Activations& a = ws_->act();
  const int hidden = static_cast<int>(c.hidden_size);
  const float eps = static_cast<float>(c.rms_norm_eps);
  ASTR_LAUNCH(LaunchEmbeddingGather(weights_.embed.as<bf16>(), m.token_ids, rows, hidden,
                                    static_cast<float>(c.embed_scale), a.x, s),
              "embedding gather");
  ASTR_LAUNCH(LaunchAddRmsNorm(a.x, nullptr, weights_.layers[0].attn_norm.as<float>(), eps, rows,
                               hidden, a.xn, s),
              "rms norm");
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const float* next_norm = l + 1 < c.num_layers ? weights_.layers[l + 1].attn_norm.as<float>()
                                                  : weights_.final_norm.as<float>();
    ASTR_RETURN_IF_ERROR(EnqueueLayer(l, rows, entries, decode, num_tiles, next_norm, s));
  }
  const bf16* head_in = a.xn;
  if (!decode) {
    ASTR_LAUNCH(
        LaunchGatherRows(a.xn, hidden, m.sample_rows, samples, hidden, a.sampled, hidden, s),
        "gathering sample rows");
    head_in = a.sampled;
  }
  ASTR_RETURN_IF_ERROR(gemm_->Matmul(head_in, hidden, weights_.lm_head_ptr(), a.logits,
                                     c.vocab_size, CUDA_R_32F, samples, c.vocab_size, hidden, s));
  if (c.final_softcap > 0.0) {
    ASTR_LAUNCH(LaunchSoftcap(a.logits, int64_t{samples} * c.vocab_size,
                              static_cast<float>(c.final_softcap), s),
                "final logit soft-capping");
  }
  return OkStatus();
}

Status CudaBackend::EnqueueLayer(int64_t l, int rows, int entries, bool decode, int num_tiles,
                                 const float* next_norm, cudaStream_t s) {
  const model::ModelConfig& c = config_;
  const CudaLayerWeights& w = weights_.layers[l];
  const StepMetadata& m = ws_->device();
  const Activations& a = ws_->act();
  const int hidden = static_cast<int>(c.hidden_size), hd = static_cast<int>(c.head_dim);
  const int heads = static_cast<int>(c.num_heads), kv_heads = static_cast<int>(c.num_kv_heads);
  const int64_t qkv_rows = weights_.qkv_rows, q_cols = int64_t{heads} * hd;
  const int64_t kv_cols = int64_t{kv_heads} * hd, ffn = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);

  ASTR_RETURN_IF_ERROR(gemm_->Matmul(a.xn, hidden, w.qkv.as<bf16>(), a.qkv, qkv_rows, CUDA_R_16BF,
                                     rows, qkv_rows, hidden, s));
  if (c.qkv_bias) {
    ASTR_LAUNCH(
        LaunchAddBias(a.qkv, qkv_rows, rows, static_cast<int>(qkv_rows), w.qkv_bias.as<float>(), s),
        "qkv bias");
  }
  bf16* q = a.qkv;
  bf16* k = a.qkv + q_cols;
  bf16* v = k + kv_cols;
  auto qk_norm = [&]() -> Status {
    ASTR_LAUNCH(LaunchHeadRmsNorm(q, qkv_rows, rows, heads, hd, w.q_norm.as<float>(), eps, s),
                "q norm");
    ASTR_LAUNCH(LaunchHeadRmsNorm(k, qkv_rows, rows, kv_heads, hd, w.k_norm.as<float>(), eps, s),
                "k norm");
    return OkStatus();
  };
  if (c.qk_norm == model::QkNorm::kBeforeRope) ASTR_RETURN_IF_ERROR(qk_norm());
  const bool interleaved = c.rope_layout == model::RopeLayout::kInterleaved;
  const int rope_dim = static_cast<int>(c.rope_dim);
  const bool local = c.LayerUsesLocalRope(l);
  const float* inv_freq =
      local ? weights_.inv_freq_local.as<float>() : weights_.inv_freq.as<float>();
  RopeMore more;
  more.scale = RopeCosSinScale(c, local);
  if (!local && weights_.inv_freq_long.bytes() > 0) {
    more.inv_freq_long = weights_.inv_freq_long.as<float>();
    more.use_long = m.rope_long;
  }
  ASTR_LAUNCH(LaunchRope(q, qkv_rows, rows, heads, hd, rope_dim, m.positions, inv_freq, interleaved,
                         s, more),
              "rope q");
  ASTR_LAUNCH(LaunchRope(k, qkv_rows, rows, kv_heads, hd, rope_dim, m.positions, inv_freq,
                         interleaved, s, more),
              "rope k");
  AttentionDims dims = dims_;
  dims.sliding_window = static_cast<int>(c.LayerWindow(l));
  dims.sinks = c.attn_sinks ? w.attn_sinks.as<float>() : nullptr;
  if (c.qk_norm == model::QkNorm::kAfterRope) ASTR_RETURN_IF_ERROR(qk_norm());

  PagedKv kv;
  const int64_t slot = layout_.layer_slot[l], table = layout_.layer_table[l];
  kv.k = kv_.as<bf16>() + (2 * slot) * layer_kv_elems_;
  kv.v = kv_.as<bf16>() + (2 * slot + 1) * layer_kv_elems_;
  kv.num_pages = static_cast<int>(num_pages_);
  kv.page_size = static_cast<int>(page_size_);
  const WorkspaceDims& wd = ws_->dims();
  int64_t* out_slots = m.out_slots + table * wd.max_tokens;
  KvIndex index{m.kv_indptr, m.kv_page_indices + table * wd.max_kv_pages, m.kv_last_page_len};
  if (decode ? generic_decode_ : generic_prefill_) {
    ASTR_LAUNCH(LaunchAppendKv(k, v, qkv_rows, out_slots, rows, kv_heads, hd, kv, s), "kv append");
    GenericAttentionArgs g;
    g.dims = dims;
    g.kv = kv;
    g.index = index;
    g.qo_indptr = m.qo_indptr;
    g.batch = entries;
    g.num_rows = rows;
    g.q = q;
    g.q_stride = qkv_rows;
    g.out = a.attn;
    g.out_stride = q_cols;
    ASTR_LAUNCH(LaunchGenericPagedAttention(g, s), "generic paged attention");
  } else if (decode) {
    PagedDecodeArgs d;
    d.dims = dims;
    d.kv = kv;
    d.index = index;
    d.batch = rows;
    d.q = q;
    d.q_stride = qkv_rows;
    d.k_new = k;
    d.v_new = v;
    d.kv_new_stride = qkv_rows;
    d.out_slots = out_slots;
    d.num_splits = decode_splits(rows);
    d.stages = decode_stages_;
    d.o_partial = a.o_partial;
    d.lse_partial = a.lse_partial;
    d.out = a.attn;
    d.out_stride = q_cols;
    ASTR_LAUNCH(LaunchPagedDecode(d, s), "paged decode attention");
  } else {
    ASTR_LAUNCH(LaunchAppendKv(k, v, qkv_rows, out_slots, rows, kv_heads, hd, kv, s), "kv append");
    PagedPrefillArgs p;
    p.dims = dims;
    p.kv = kv;
    p.index = index;
    p.qo_indptr = m.qo_indptr;
    p.batch = entries;
    p.q = q;
    p.q_stride = qkv_rows;
    p.out = a.attn;
    p.out_stride = q_cols;
    p.tile_entry = m.tile_entry;
    p.tile_row_begin = m.tile_row_begin;
    p.num_tiles = num_tiles;
    ASTR_LAUNCH(LaunchPagedPrefill(p, s), "paged prefill attention");
  }
  if (c.gated_attention) {
    ASTR_LAUNCH(
        LaunchSigmoidGate(a.attn, q_cols, v + kv_cols, qkv_rows, rows, static_cast<int>(q_cols), s),
        "attention gate");
  }
  ASTR_RETURN_IF_ERROR(gemm_->Matmul(a.attn, q_cols, w.o.as<bf16>(), a.proj, hidden, CUDA_R_32F,
                                     rows, hidden, q_cols, s));
  if (c.o_bias) {
    ASTR_LAUNCH(LaunchAddBiasF32(a.proj, hidden, rows, hidden, w.o_bias.as<float>(), s), "o bias");
  }
  if (c.sandwich_norms) {
    ASTR_LAUNCH(LaunchRmsNormRows(a.proj, w.post_attn_norm.as<float>(), eps, rows, hidden, s),
                "post-attention norm");
  }
  ASTR_LAUNCH(LaunchAddRmsNorm(a.x, a.proj, w.mlp_norm.as<float>(), eps, rows, hidden, a.xn, s),
              "add + rms norm");
  if (c.LayerIsMoe(l)) {
    ASTR_RETURN_IF_ERROR(EnqueueMoe(w, rows, s));
  } else {
    ASTR_RETURN_IF_ERROR(EnqueueMlp(w.gate_up.as<bf16>(), w.down.as<bf16>(), ffn, rows, a.proj, s));
  }
  if (c.sandwich_norms) {
    ASTR_LAUNCH(LaunchRmsNormRows(a.proj, w.post_mlp_norm.as<float>(), eps, rows, hidden, s),
                "post-MLP norm");
  }
  ASTR_LAUNCH(LaunchAddRmsNorm(a.x, a.proj, next_norm, eps, rows, hidden, a.xn, s),
              "add + rms norm");
  return OkStatus();
}

Status CudaBackend::EnqueueMlp(const bf16* gate_up, const bf16* down, int64_t ffn, int rows,
                               float* out, cudaStream_t s) {
  const Activations& a = ws_->act();
  const int64_t hidden = config_.hidden_size;
  ASTR_RETURN_IF_ERROR(gemm_->Matmul(a.xn, hidden, gate_up, a.gate_up, 2 * ffn, CUDA_R_16BF, rows,
                                     2 * ffn, hidden, s));
  ASTR_RETURN_IF_ERROR(EnqueueGatedActivation(a.gate_up, rows, static_cast<int>(ffn), a.act, s));
  return gemm_->Matmul(a.act, ffn, down, out, hidden, CUDA_R_32F, rows, hidden, ffn, s);
}

Status CudaBackend::EnqueueGatedActivation(const bf16* gate_up, int rows, int ffn, bf16* act,
                                           cudaStream_t s) {
  const model::ModelConfig& c = config_;
  if (c.mlp_activation == model::MlpActivation::kSwigluClamped) {
    ASTR_LAUNCH(LaunchSwigluClampedMul(gate_up, rows, ffn, static_cast<float>(c.swiglu_alpha),
                                       static_cast<float>(c.swiglu_limit), act, s),
                "clamped swiglu");
  } else if (c.mlp_activation == model::MlpActivation::kGeluTanh) {
    ASTR_LAUNCH(LaunchGeluTanhMul(gate_up, rows, ffn, act, s), "gelu_tanh * mul");
  } else {
    ASTR_LAUNCH(LaunchSiluMul(gate_up, rows, ffn, act, s), "silu * mul");
  }
  return OkStatus();
}

// A MoE layer's MLP into a.proj (moe.h): route, sort the (row, choice) pairs by expert, gather
// their rows, the experts' gate/up and down as grouped GEMMs over tiles of one expert each, and
// each row's outputs weighted and added in expert order. Every launch's shape follows from `rows`,
// so a captured graph replays it whatever the routing.
Status CudaBackend::EnqueueMoe(const CudaLayerWeights& w, int rows, cudaStream_t s) {
  const model::ModelConfig& c = config_;
  const Activations& a = ws_->act();
  const int hidden = static_cast<int>(c.hidden_size), experts = static_cast<int>(c.num_experts);
  const int top_k = static_cast<int>(c.num_experts_per_tok);
  const int f = static_cast<int>(c.moe_intermediate_size), pairs = rows * top_k;
  const int max_tiles = static_cast<int>(MoeMaxTiles(pairs, experts));
  ASTR_RETURN_IF_ERROR(gemm_->Matmul(a.xn, hidden, w.router.as<bf16>(), a.moe_logits, experts,
                                     CUDA_R_32F, rows, experts, hidden, s));
  if (c.router_bias) {
    ASTR_LAUNCH(
        LaunchAddBiasF32(a.moe_logits, experts, rows, experts, w.router_bias.as<float>(), s),
        "router bias");
  }
  moe::RouteParams route;
  route.num_experts = experts;
  route.top_k = top_k;
  route.sigmoid = c.router_sigmoid;
  route.normalize = c.norm_topk_prob;
  route.scale = static_cast<float>(c.routed_scaling_factor);
  route.choice_bias = c.router_choice_bias ? w.router_choice_bias.as<float>() : nullptr;
  route.groups = static_cast<int>(c.router_groups);
  route.topk_groups = static_cast<int>(c.router_topk_groups);
  ASTR_LAUNCH(LaunchMoeRoute(a.moe_logits, rows, route, a.moe_experts, a.moe_weights, s),
              "moe routing");
  ASTR_LAUNCH(LaunchMoeSort(a.moe_experts, pairs, top_k, experts, a.moe_pair_row, a.moe_slot,
                            a.moe_tiles, max_tiles, s),
              "moe sort");
  ASTR_LAUNCH(LaunchGatherRows(a.xn, hidden, a.moe_pair_row, pairs, hidden, a.moe_in, hidden, s),
              "moe gather");
  ASTR_LAUNCH(LaunchGroupedMatmul(a.moe_in, hidden, w.experts_gate_up.as<bf16>(), a.moe_tiles,
                                  max_tiles, 2 * f, hidden, a.moe_gate_up, 2 * f, false, s,
                                  c.expert_bias ? w.experts_gate_up_bias.as<float>() : nullptr),
              "moe gate/up");
  ASTR_RETURN_IF_ERROR(EnqueueGatedActivation(a.moe_gate_up, pairs, f, a.moe_act, s));
  ASTR_LAUNCH(LaunchGroupedMatmul(a.moe_act, f, w.experts_down.as<bf16>(), a.moe_tiles, max_tiles,
                                  hidden, f, a.moe_out, hidden, true, s,
                                  c.expert_bias ? w.experts_down_bias.as<float>() : nullptr),
              "moe down");
  ASTR_LAUNCH(LaunchMoeCombine(a.moe_out, hidden, a.moe_experts, a.moe_weights, a.moe_slot, rows,
                               top_k, hidden, a.proj, s),
              "moe combine");
  if (const int64_t sf = c.shared_expert_intermediate_size; sf > 0) {
    // Qwen2-MoE's shared expert on every row (dense GEMMs; its output in moe_out, free again).
    ASTR_RETURN_IF_ERROR(
        EnqueueMlp(w.shared_gate_up.as<bf16>(), w.shared_down.as<bf16>(), sf, rows, a.moe_out, s));
    ASTR_LAUNCH(LaunchAddSharedExpert(a.xn, hidden,
                                      c.shared_expert_gated ? w.shared_gate.as<bf16>() : nullptr,
                                      a.moe_out, rows, hidden, a.proj, s),
                "shared expert");
  }
  return OkStatus();
}

}  // namespace astr::cuda
