// The weights a worker serves after updates: the checkpoint it loaded (opened only while it is
// read) with the tensors of every update applied since laid over it. A backend builds its weight
// set from this source (Backend::PrepareWeights) exactly as it does from a ModelFile.
//
// The source speaks the served model's config. A checkpoint whose q/k rows are in the other RoPE
// layout (a Hugging Face folder under a llama served from GGUF, which stores them interleaved, or
// the reverse) has its q_proj / k_proj rows permuted on load, as pushed Hugging Face tensors do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/model_file.h"

namespace astr {

// A weight update's receive buffer: an anonymous mapping of its own. What an update frees goes
// back to the system at once, not into the allocator's free lists of the thread that received it,
// where the next update (received on another gRPC thread, with another arena) could not reuse it:
// on a 1.7 GB push those lists held ~500 MiB, a third of the peak's excess over two weight sets.
class ReceiveBuffers;

class ReceiveBuffer {
 public:
  ReceiveBuffer() = default;
  // `bytes` of fresh memory, a whole number of pages (empty when the system has none left).
  static ReceiveBuffer Map(uint64_t bytes);
  ReceiveBuffer(ReceiveBuffer&& other) noexcept { *this = std::move(other); }
  ReceiveBuffer& operator=(ReceiveBuffer&& other) noexcept;
  ReceiveBuffer(const ReceiveBuffer&) = delete;
  ReceiveBuffer& operator=(const ReceiveBuffer&) = delete;
  ~ReceiveBuffer() { Unmap(); }

  uint8_t* get() const { return data_; }
  // Bytes mapped (>= what was asked for).
  uint64_t capacity() const { return mapped_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  friend class ReceiveBuffers;
  void Unmap();
  uint8_t* data_ = nullptr;
  uint64_t mapped_ = 0;
  ReceiveBuffers* taken_from_ = nullptr;  // counted in its taken() until put back or unmapped
};

// One tensor of a weight update, as it was received: Hugging Face name, dtype and layout.
struct UpdateTensor {
  std::string hf_name;
  std::string canonical;
  model::DType dtype = model::DType::kF32;  // kF32, kF16 or kBF16
  std::vector<int64_t> shape;               // torch order
  ReceiveBuffer data;
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;  // of the bytes, as received
  // Hugging Face q/k rows come in rotate-half order; a model that computes in interleaved order
  // (llama from GGUF) takes them permuted (HalfToInterleavedRows).
  bool half_to_interleaved = false;
  // Added to a norm's values: Hugging Face Gemma norms hold w of a 1 + w scale, a model served
  // from GGUF (llama.cpp's converter) holds 1 + w (model::HfNormShift).
  float norm_shift = 0.0f;
};

// The receive buffers of updates, kept from one update to the next (up to a limit): a push of
// the same model asks for the same sizes again, and memory fresh from the system costs a page
// fault per 4 KiB (on the development VM, clearing fresh pages was two thirds of a push's time).
// Kept and taken buffers together stay under the limit where they can: a size that none kept
// fits makes room by unmapping kept ones first.
class ReceiveBuffers {
 public:
  static ReceiveBuffers& Global();
  // A buffer of at least `bytes`: a kept one of that capacity, else a new one (empty when none
  // can be had).
  ReceiveBuffer Take(uint64_t bytes);
  // Gives a buffer back: kept while the buffers kept stay under limit(), else unmapped.
  void Put(ReceiveBuffer buffer);
  // Most bytes kept (the worker's --receive-buffers-mb; 0 keeps none). Lowering it unmaps what
  // is over.
  void set_limit(uint64_t bytes);
  uint64_t limit() const;
  // Bytes kept (capacities), and taken and not yet given back.
  uint64_t held() const;
  uint64_t taken() const;

 private:
  friend class ReceiveBuffer;
  void EvictLargest();             // mu_ held, kept_ not empty
  void Forget(uint64_t capacity);  // a taken buffer was unmapped

  mutable std::mutex mu_;
  std::multimap<uint64_t, ReceiveBuffer> kept_;  // by capacity
  uint64_t held_ = 0;
  uint64_t taken_ = 0;
  uint64_t limit_ = uint64_t{64} << 20;
};

// Canonical name -> tensor. Shared between successive overlays: a partial update copies the map,
// not the bytes.
using UpdateTensors = std::map<std::string, std::shared_ptr<const UpdateTensor>>;

// Whether a Hugging Face tensor `canonical` must be permuted for a model with `config`.
bool NeedsHalfToInterleaved(const model::ModelConfig& config, const std::string& canonical);

class WeightOverlay final : public model::TensorSource {
 public:
  // `base` may be null when `tensors` covers every tensor the backend reads.
  WeightOverlay(const model::ModelConfig& config, std::shared_ptr<const model::ModelFile> base,
                UpdateTensors tensors);

  const model::ModelConfig& config() const override { return config_; }
  Status LoadF32(const std::string& canonical, const std::vector<int64_t>& expected_shape,
                 std::vector<float>* out) const override;
  // The received bytes, unless they need permuting or shifting (then an error: LoadF32 does it).
  StatusOr<model::TensorView> Raw(const std::string& canonical) const override;
  // The base file's tensors hand their pages back to it; received tensors are not mapped.
  void ReleaseResident(const model::TensorView& view) const override;

 private:
  // Whether base tensor `canonical` is read with its rows permuted (permute_base_qk_).
  bool PermutesBase(const std::string& canonical) const;

  const model::ModelConfig& config_;
  std::shared_ptr<const model::ModelFile> base_;
  UpdateTensors tensors_;
  bool permute_base_qk_ = false;  // the base's RoPE layout is not the served one
  float base_norm_shift_ = 0.0f;  // added to the base's norms (its norm offset is not the served)
};

}  // namespace astr
