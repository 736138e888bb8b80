// The backend interface: one step's forward pass. A backend owns the weights, the KV pool and the
// per-step workspace; the caller (executor / offline engine) owns sequences and page assignment.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/base/status.h"
#include "common/model/model_config.h"
#include "worker/sampler.h"
#include "worker/step_batch.h"

namespace astr {

namespace model {
class ModelFile;
class TensorSource;
}  // namespace model

struct UpdateTensor;  // worker/weight_overlay.h

// A complete set of weights a backend can serve, built beside the served one by PrepareWeights
// (weight updates, DESIGN.md "Weights and versions").
class WeightSet {
 public:
  virtual ~WeightSet() = default;
  // Memory it holds (host or device).
  virtual size_t bytes() const = 0;
};

// Builds a weight set tensor by tensor while an update streams in (Backend::BeginWeights): each
// part of the model is packed as soon as its tensors have arrived, beside the transfer, and their
// received bytes are let go at once instead of being held until the last byte.
class WeightBuilder {
 public:
  virtual ~WeightBuilder() = default;
  // One complete, checked tensor of the update (manifest order or any other). The builder keeps
  // it until what it is built with has arrived and is built (perhaps on another thread), then
  // hands its bytes back (ReceiveBuffers::Put). A build error comes back here or from Finish.
  virtual Status Add(std::shared_ptr<UpdateTensor> tensor) = 0;
  // Called before a tensor of `bytes` is received: a builder still packing what it was given
  // may hold the receiver back here until that is done, so that the bytes received and not yet
  // built stay bounded (the next tensor's receive buffer often reuses what the packing frees).
  virtual void AwaitRoom(uint64_t bytes) { (void)bytes; }
  // The set: every tensor not added as the served set held it when the build began. `base`
  // opens the served checkpoint, for tensors the served set holds only in a form it cannot give
  // back exactly (block-quantized ones), and is called at most once.
  using BaseOpener = std::function<StatusOr<std::shared_ptr<const model::ModelFile>>()>;
  virtual StatusOr<std::unique_ptr<WeightSet>> Finish(const BaseOpener& base) = 0;
};

// Joining a trainer's NCCL weight-update group (docs/rl.md "NCCL broadcast"): the trainer is rank
// 0 and made `unique_id` (ncclGetUniqueId, 128 bytes); this backend is `rank` of `world_size`.
struct WeightGroupSpec {
  std::string name;
  std::string unique_id;
  int rank = 0;
  int world_size = 0;
  // Most time joining, and each broadcast, may take; past it the communicator is aborted.
  std::chrono::milliseconds timeout{300000};
  // After joining: one ncclAllReduce (sum) of one float32 with every rank (vLLM's PyNccl warmup).
  bool warmup_all_reduce = false;
};

// The element type of one broadcast (what ncclBroadcast is told; the bytes are the same).
enum class BroadcastType { kBytes, kF32, kF16, kBF16 };

// A backend's membership of a weight-update group. Destroying it leaves the group.
class WeightReceiver {
 public:
  virtual ~WeightReceiver() = default;
  // Receives one broadcast of `out.size()` bytes (elements of `type`) from rank 0 into `out`
  // (host memory), through a device buffer kept for the next call. A failure or the spec's
  // timeout aborts the communicator: every later call fails, and the group must be made again.
  virtual Status Receive(std::span<uint8_t> out, BroadcastType type) = 0;
  // Frees the device buffer (the end of an update: an update's only device memory).
  virtual void ReleaseBuffer() = 0;
  // False once the communicator was aborted.
  virtual bool usable() const = 0;
  // Which NCCL: "NCCL 2.28.9 (libnccl.so.2)", "emulated NCCL (...)".
  virtual std::string describe() const = 0;
};

// A trainer's device buffer opened by CUDA IPC (docs/rl.md "CUDA IPC"); destroying it closes the
// handle.
class IpcBuffer {
 public:
  virtual ~IpcBuffer() = default;
  // Copies bytes [offset, offset + out.size()) of the buffer to `out` (host memory).
  virtual Status Read(uint64_t offset, std::span<uint8_t> out) = 0;
};

// Device memory a backend can give back while it does not serve (ReleaseMemory / ResumeMemory,
// docs/rl.md "Releasing GPU memory"), by tag.
struct MemoryTags {
  bool weights = false;
  bool kv_cache = false;
};
struct MemoryChange {
  int64_t bytes = 0;              // released (or taken back)
  int64_t device_free_bytes = 0;  // the device's free memory afterwards (cudaMemGetInfo)
};

struct BackendOptions {
  std::string weight_dtype = "bf16";  // "bf16" or "f32": how projection weights are held
  int threads = 0;                    // 0 = all hardware threads
  int64_t page_size = 16;
  int64_t num_pages = 0;  // 0 = from kv_cache_bytes
  int64_t kv_cache_bytes = int64_t{1} << 30;
  int64_t max_batch_tokens = 2048;  // most rows (T) one step may carry
  int64_t max_sample_rows = 256;    // most sample rows (S) one step may carry
  bool cuda_graphs = true;          // CUDA backend: capture and replay decode steps as CUDA graphs
  bool device_sampling = true;  // CUDA backend: draw tokens on the GPU (else logits to the host)
  // CPU backend: keep the weight set an update replaced, to build the next update into (no fresh
  // pages to fault in; twice the weights' memory between updates).
  bool spare_weights = true;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual const model::ModelConfig& config() const = 0;
  virtual int64_t num_pages() const = 0;
  virtual int64_t page_size() const = 0;
  // Window page tables each step batch carries (KvLayout::window_tables): > 0 when the pool keeps
  // the sliding-window layers in page groups of their own, whose pages behind the window are
  // given back (the scheduler's PagePool::Window). 0 = one page table.
  virtual int32_t kv_window_tables() const { return 0; }
  // The window those page groups serve (tokens; 0 without them).
  int64_t kv_window_tokens() const { return kv_window_tables() > 0 ? config().sliding_window : 0; }
  virtual int64_t max_batch_tokens() const = 0;
  virtual int64_t max_sample_rows() const = 0;
  // Bytes the served weights take in memory (0 when the backend does not say).
  virtual size_t weight_bytes() const { return 0; }
  // Of those, the bytes of MoE layers' experts (a token reads num_experts_per_tok of num_experts).
  virtual size_t expert_weight_bytes() const { return 0; }
  // Of those, the bytes of tables a step gathers rows of (an untied embedding table: a token reads
  // one row, not the table).
  virtual size_t gathered_weight_bytes() const { return 0; }
  // Host threads the backend owns and leaves idle between steps (the CPU backend's pool): 1 when
  // none. RunOnHostThreads(fn) runs fn(thread, host_threads()) on each of them, the caller being
  // thread 0, and returns when all are done; only from the thread that calls Forward, between
  // steps (the host path's draws use them).
  virtual int host_threads() const { return 1; }
  virtual void RunOnHostThreads(const std::function<void(int thread, int threads)>& fn) {
    fn(0, 1);
  }
  // Runs the step: writes the K/V of every row into its out slot and fills
  // logits [batch.sample_rows.size(), vocab] (row-major) for the sample rows. Validates the batch
  // first.
  virtual Status Forward(const StepBatch& batch, float* logits) = 0;

  // Optional: sampling where the logits are. A backend that returns true from samples_on_device()
  // implements ForwardSample: the step's forward pass, then one draw per sample row i with
  // samplers[i] (the host sampler's semantics, worker/sampler.h) into results[i], without copying
  // the logits out. Callers go through StepSampling (worker/step_sampling.h), which uses this or
  // Forward + Sample(). `masks` (structured outputs): empty, or row i's constraint mask (Sample's
  // `allowed`; null: none), read after `before_draws` (when set) has run, after the forward pass.
  // The device draw returns no sampling mask (SampleResult.mask stays empty): StepSampling draws
  // a step whose rows ask for one on the host.
  virtual bool samples_on_device() const { return false; }
  virtual Status ForwardSample(const StepBatch& batch,
                               std::span<const SequenceSampler* const> samplers,
                               std::span<SampleResult> results,
                               std::span<const uint32_t* const> masks = {},
                               const std::function<Status()>& before_draws = {}) {
    return UnimplementedError("the " + name() + " backend does not sample on its device");
  }

  // Weight updates. PrepareWeights builds a full weight set from `source` (same config as the
  // served model) without touching the served weights; it may run on another thread while Forward
  // runs, and all its checks happen here, so that a swap cannot fail. SwapWeights, called between
  // steps, serves `set` from the next step on and returns the weights served until now (a second
  // swap with them is a rollback). Backends that cannot update weights say so in PrepareWeights.
  virtual StatusOr<std::unique_ptr<WeightSet>> PrepareWeights(const model::TensorSource& source) {
    return UnimplementedError("the " + name() + " backend cannot update its weights");
  }
  virtual std::unique_ptr<WeightSet> SwapWeights(std::unique_ptr<WeightSet> set) { return set; }
  // The streamed form of PrepareWeights (WeightBuilder); UNIMPLEMENTED where a backend builds only
  // from a whole source.
  virtual StatusOr<std::unique_ptr<WeightBuilder>> BeginWeights() {
    return UnimplementedError("the " + name() + " backend builds weights only from a whole source");
  }
  // A set that is neither served nor staged any more (replaced by an update, rolled back from,
  // discarded): a backend may keep it to build the next set into; the default frees it.
  virtual void RecycleWeights(std::unique_ptr<WeightSet> set) { set.reset(); }
  // Gives back the device memory of `tags` while nothing runs (the caller guarantees no step
  // runs and, for the KV cache, that no sequence holds pages: the pool's contents are lost).
  // Weights are copied to the host first when `keep_weights` (vLLM's sleep level 1), else
  // discarded (level 2, SGLang): then every step fails until a weight update replaces them. Steps
  // fail while anything is released. Addresses stay, so captured CUDA graphs stay valid.
  virtual StatusOr<MemoryChange> ReleaseMemory(MemoryTags tags, bool keep_weights) {
    return FailedPreconditionError("the " + name() +
                                   " backend has no device memory to release (it needs the cuda "
                                   "backend)");
  }
  // Takes back what ReleaseMemory gave (weights restored from the host copy if one was kept).
  virtual StatusOr<MemoryChange> ResumeMemory(MemoryTags tags) {
    return FailedPreconditionError("the " + name() +
                                   " backend has no device memory to resume (it needs the cuda "
                                   "backend)");
  }
  // Joins a trainer's NCCL group (blocks until every rank has joined). Only backends whose weights
  // live on a device with NCCL can; the others say so.
  virtual StatusOr<std::unique_ptr<WeightReceiver>> JoinWeightGroup(const WeightGroupSpec& spec) {
    return FailedPreconditionError("the " + name() +
                                   " backend cannot join an NCCL weight-update group (it needs "
                                   "the cuda backend; use UpdateWeights or UpdateWeightsFromDisk)");
  }
  // Opens `bytes` of a trainer's device buffer from its cudaIpcMemHandle_t (64 bytes). Only
  // backends whose weights live on a CUDA device can; the others say so.
  virtual StatusOr<std::unique_ptr<IpcBuffer>> OpenIpcBuffer(const std::string& handle,
                                                             uint64_t bytes) {
    (void)handle;
    (void)bytes;
    return FailedPreconditionError("the " + name() +
                                   " backend cannot open CUDA IPC buffers (it needs the cuda "
                                   "backend; use UpdateWeights or UpdateWeightsFromDisk)");
  }
};

// Creates the CPU backend from an opened model file.
StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const model::ModelFile& file,
                                                    const BackendOptions& options);

}  // namespace astr
