// The worker's side of a weight update (DESIGN.md "Weights and versions", docs/rl.md): receiving
// and checking the tensors of an update (WeightStager), building the new weights beside the
// served ones, and switching between them when the scheduler says so (WeightUpdates).
//
// A worker holds at most three weight sets: the served one, a staged one (checked and built, not
// yet served) and, between APPLY and FINISH, the previous one (for a rollback); a backend may keep
// a finished one as its spare (StepRunner::RecycleWeights). Tensors that an update does not carry
// keep their values. A backend that builds as the tensors arrive (the CPU backend's
// WeightBuilder) copies them from the served set, and keeps no received bytes after the build;
// the others keep the received tensors and re-read the rest from the checkpoint the worker serves
// (--model, or the last UpdateWeightsFromDisk path) when a later update needs them, so that no
// mapping of it stays open between updates.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "astr/v1/admin.pb.h"
#include "astr/v1/worker.pb.h"
#include "common/base/status.h"
#include "common/model/architecture.h"
#include "common/model/content_hash.h"
#include "common/model/model_config.h"
#include "worker/backend.h"
#include "worker/weight_overlay.h"

namespace astr {

class StepRunner;
class WorkerExecutor;

// Receives one update's manifest and chunks and checks them against the served model: every name
// maps to one of its tensors, with its shape, in f32 / f16 / bf16; each tensor's chunks arrive in
// order and fill it exactly; checksums match. Errors name the manifest entry or the tensor.
class WeightStager {
 public:
  // With a `builder`, each tensor goes to it as soon as it is complete and checked (Finish's
  // tensors then carry no bytes, only what they were: names, dtypes, shapes, checksums). Received
  // bytes land in ReceiveBuffers.
  explicit WeightStager(const model::ModelConfig& config, WeightBuilder* builder = nullptr);
  ~WeightStager();

  Status Begin(const v1::WeightManifest& manifest);
  Status Add(const v1::WeightChunk& chunk);
  // The same for bytes [offset, offset + size) of tensors[tensor] received another way (NCCL).
  Status Add(int tensor, int64_t offset, const uint8_t* data, size_t size);
  // After Begin: the manifest's tensors, their bytes and dtypes, in manifest order.
  size_t tensor_count() const { return pending_.size(); }
  uint64_t tensor_bytes(size_t i) const { return pending_[i].tensor->bytes; }
  model::DType tensor_dtype(size_t i) const { return pending_[i].tensor->dtype; }
  // Every tensor complete and its checksum (when given) equal: the tensors, keyed canonically.
  StatusOr<UpdateTensors> Finish();

  int64_t bytes_received() const { return bytes_received_; }
  const std::string& label() const { return label_; }

 private:
  struct Pending {
    std::shared_ptr<UpdateTensor> tensor;
    // A fused tensor (Phi-3's qkv_proj, gate_up_proj): its parts' canonical names and rows, and,
    // once complete, the parts it was split into (tensor then holds no bytes).
    std::vector<std::string> parts;
    std::vector<int64_t> part_rows;
    // gpt-oss-style stacked experts (model::MatchTransposedExperts): the tensor's name after
    // "model.layers.N." and its parts' shapes; parts[i] is expert i / parts-per-expert's.
    std::string transposed;
    std::vector<model::TransposedExpertPart> transposed_parts;
    std::vector<std::shared_ptr<UpdateTensor>> split;
    uint64_t received = 0;
    bool has_checksum = false;
    uint64_t checksum = 0;
    model::ContentHasher64 hasher;
  };

  // Tensor `p` is complete: its checksum, then (split into its parts when fused) the builder.
  Status Complete(Pending& p);
  // Hands `t` to the builder (keeping what it was) or keeps it whole.
  Status Deliver(std::shared_ptr<UpdateTensor>& t);

  const model::ModelConfig& config_;
  WeightBuilder* const builder_;
  std::vector<Pending> pending_;
  std::string label_;
  int64_t bytes_received_ = 0;
  bool begun_ = false;
};

// The config fields that decide what a checkpoint computes; the first that differs between the
// served model and `other` is a FAILED_PRECONDITION naming it and both values. The RoPE layout of
// the q/k rows is not one of them: it is how a format stores the same weights (WeightOverlay
// permutes them), so a trainer's Hugging Face checkpoint updates a llama served from GGUF.
Status CheckSameModel(const model::ModelConfig& served, const model::ModelConfig& other,
                      const std::string& other_path);

class WeightUpdates {
 public:
  // `model_path`: the checkpoint the worker loaded (--model); `config`: its config.
  WeightUpdates(std::string model_path, model::ModelConfig config);
  ~WeightUpdates();

  const model::ModelConfig& config() const { return config_; }

  // One staging at a time. Waits up to `wait` for one under way to end (a cancelled push's stream
  // is torn down on the worker a moment after the scheduler gave up on it, and a build that was
  // running finishes first); false when it is still under way then (the caller refuses the call).
  bool BeginStaging(std::chrono::milliseconds wait);
  void EndStaging();

  // Builds the weights of a received update (tensors over the served ones) with `runner`, or
  // finishes the build of `builder` (StepRunner::BeginWeights) that the stager fed; replaces an
  // unapplied staged update. Runs beside the steps.
  StatusOr<v1::StageWeightsResponse> StageTensors(UpdateTensors tensors, int64_t bytes,
                                                  StepRunner& runner,
                                                  std::unique_ptr<WeightBuilder> builder = nullptr);
  // Builds the weights of the checkpoint at `path` (same model, CheckSameModel).
  StatusOr<v1::StageWeightsResponse> StageFromDisk(const std::string& path, StepRunner& runner);

  // APPLY / ROLLBACK / FINISH / DISCARD (worker.proto). The caller holds the step lock (no step
  // runs) for APPLY and ROLLBACK. Returns the version served afterwards. Weights dropped by FINISH
  // or DISCARD are handed to `dropped` so the caller recycles them (StepRunner::RecycleWeights)
  // outside its lock.
  StatusOr<int64_t> Control(const v1::ControlWeightsRequest& request, StepRunner& runner,
                            WorkerExecutor& executor, std::vector<std::unique_ptr<WeightSet>>* dropped);

  // XXH64 of the named tensors (Hugging Face names; all of the model's when empty).
  Status Checksums(const v1::GetWeightsChecksumRequest& request,
                   v1::GetWeightsChecksumResponse* response) const;

  int64_t version() const;
  // Which weight sets beside the served one are held now (a staged one; the previous one between
  // APPLY and FINISH): both false once an update is finished or discarded.
  struct Holding {
    bool staged = false;
    bool previous = false;
  };
  Holding holding() const;

 private:
  // What the served (or a staged, or the previous) weights were made of.
  struct Source {
    std::string base_path;  // checkpoint under the update tensors
    UpdateTensors tensors;
    int64_t version = 0;
  };
  struct Staged {
    uint64_t id = 0;
    Source source;
    std::unique_ptr<WeightSet> weights;
  };
  // Builds `source` with runner.PrepareWeights (the update's tensors over the checkpoint).
  StatusOr<std::unique_ptr<WeightSet>> BuildFromSource(const Source& source,
                                                       StepRunner& runner) const;

  const model::ModelConfig config_;
  mutable std::mutex mu_;  // guards everything below (never held across a build)
  Source served_;
  std::unique_ptr<Staged> staged_;
  std::unique_ptr<Staged> previous_;  // after APPLY, until FINISH or ROLLBACK
  uint64_t next_staged_id_ = 1;
  bool staging_ = false;
  std::condition_variable staging_ended_;
};

// Ends a staging slot taken with BeginStaging however the call ends, and gives the memory of a
// refused or finished stage back to the system (malloc_trim).
struct StagingLease {
  WeightUpdates* updates;
  ~StagingLease();
};

}  // namespace astr
