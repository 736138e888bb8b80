#include "worker/backends/cuda/workspace.h"

#include "kernels/cuda/moe.h"

namespace astr::cuda {

void* BumpAllocator::TakeBytes(size_t bytes, const char* name) {
  const size_t offset = (used_ + kAlign - 1) / kAlign * kAlign;
  used_ = offset + bytes;
  if (base_ != nullptr && used_ > capacity_) overflowed_ = true;
  regions_.push_back({name, offset, bytes});
  // In counting mode the "pointer" is the offset; nothing dereferences it.
  return base_ != nullptr ? static_cast<void*>(base_ + offset)
                          : reinterpret_cast<void*>(static_cast<uintptr_t>(offset));
}

StepMetadata CarveMetadata(BumpAllocator& a, const WorkspaceDims& d) {
  StepMetadata m{};
  m.token_ids = a.Take<int32_t>(d.max_tokens, "token_ids");
  m.positions = a.Take<int32_t>(d.max_tokens, "positions");
  m.rope_long = a.Take<int32_t>(d.max_tokens, "rope_long");
  m.qo_indptr = a.Take<int32_t>(d.max_batch + 1, "qo_indptr");
  m.kv_indptr = a.Take<int32_t>(d.max_batch + 1, "kv_indptr");
  m.kv_last_page_len = a.Take<int32_t>(d.max_batch, "kv_last_page_len");
  m.sample_rows = a.Take<int32_t>(d.max_batch, "sample_rows");
  m.tile_entry = a.Take<int32_t>(d.max_prefill_tiles, "tile_entry");
  m.tile_row_begin = a.Take<int32_t>(d.max_prefill_tiles, "tile_row_begin");
  m.out_slots = a.Take<int64_t>(d.kv_tables * d.max_tokens, "out_slots");
  m.sampling_params = a.Take<DeviceSamplingParams>(d.max_batch, "sampling_params");
  // Last, so that a step uploads only the page ids it uses (see UploadMetadata).
  m.kv_page_indices = a.Take<int32_t>(d.kv_tables * d.max_kv_pages, "kv_page_indices");
  return m;
}

Activations CarveActivations(BumpAllocator& a, const WorkspaceDims& d) {
  Activations x{};
  const int64_t t = d.max_tokens, b = d.max_batch;
  x.x = a.Take<float>(t * d.hidden, "x");
  x.xn = a.Take<bf16>(t * d.hidden, "xn");
  x.qkv = a.Take<bf16>(t * d.qkv_rows, "qkv");
  x.attn = a.Take<bf16>(t * d.q_cols, "attn");
  x.proj = a.Take<float>(t * d.hidden, "proj");
  x.gate_up = a.Take<bf16>(t * 2 * d.ffn, "gate_up");
  x.act = a.Take<bf16>(t * d.ffn, "act");
  const int64_t pairs = t * d.experts_per_tok;
  x.moe_logits = a.Take<float>(t * d.num_experts, "moe_logits");
  x.moe_experts = a.Take<int32_t>(pairs, "moe_experts");
  x.moe_weights = a.Take<float>(pairs, "moe_weights");
  x.moe_pair_row = a.Take<int32_t>(pairs, "moe_pair_row");
  x.moe_slot = a.Take<int32_t>(pairs, "moe_slot");
  x.moe_tiles = a.Take<int32_t>(3 * MoeMaxTiles(pairs, d.num_experts), "moe_tiles");
  x.moe_in = a.Take<bf16>(pairs * d.hidden, "moe_in");
  x.moe_gate_up = a.Take<bf16>(pairs * 2 * d.moe_ffn, "moe_gate_up");
  x.moe_act = a.Take<bf16>(pairs * d.moe_ffn, "moe_act");
  x.moe_out = a.Take<float>(pairs * d.hidden, "moe_out");
  x.sampled = a.Take<bf16>(b * d.hidden, "sampled");
  x.logits = a.Take<float>(b * d.vocab, "logits");
  x.raw_logits = a.Take<float>(b * d.vocab, "raw_logits");
  x.o_partial = a.Take<float>(d.max_partial_rows * d.num_heads * d.head_dim, "o_partial");
  x.lse_partial = a.Take<float>(d.max_partial_rows * d.num_heads, "lse_partial");
  x.sample_results = a.Take<DeviceSampleResult>(b, "sample_results");
  x.gemm_workspace = a.TakeBytes(static_cast<size_t>(d.gemm_workspace_bytes), "gemm_workspace");
  return x;
}

size_t InferenceWorkspace::HostBytes(const WorkspaceDims& d) {
  BumpAllocator count(nullptr, 0);
  CarveMetadata(count, d);
  return count.used();
}

size_t InferenceWorkspace::DeviceBytes(const WorkspaceDims& d) {
  BumpAllocator count(nullptr, 0);
  CarveMetadata(count, d);
  CarveActivations(count, d);
  return count.used();
}

StatusOr<std::unique_ptr<InferenceWorkspace>> InferenceWorkspace::Create(const WorkspaceDims& d) {
  std::unique_ptr<InferenceWorkspace> ws(new InferenceWorkspace());
  ws->dims_ = d;
  ws->metadata_bytes_ = HostBytes(d);
  const size_t device_bytes = DeviceBytes(d);
  ASTR_ASSIGN_OR_RETURN(ws->device_memory_,
                        DeviceAllocator::Allocate(device_bytes, "the inference workspace"));
  ASTR_ASSIGN_OR_RETURN(ws->pinned_,
                        PinnedMemory::Allocate(ws->metadata_bytes_, "the step metadata"));
  BumpAllocator host(ws->pinned_.as<char>(), ws->metadata_bytes_);
  ws->host_ = CarveMetadata(host, d);
  // The device block starts with the metadata mirror at the same offsets, so one copy of
  // metadata_bytes_ moves every array.
  BumpAllocator device(ws->device_memory_.as<char>(), device_bytes);
  ws->device_ = CarveMetadata(device, d);
  ws->act_ = CarveActivations(device, d);
  if (host.overflowed() || device.overflowed()) {
    return InternalError("inference workspace layout exceeds its counted size");
  }
  return ws;
}

cudaError_t InferenceWorkspace::UploadMetadata(int64_t num_page_ids, cudaStream_t stream) const {
  const size_t pages_offset =
      static_cast<size_t>(reinterpret_cast<char*>(host_.kv_page_indices) - pinned_.as<char>());
  const size_t bytes = pages_offset + static_cast<size_t>(num_page_ids) * sizeof(int32_t);
  cudaError_t err =
      cudaMemcpyAsync(device_memory_.get(), pinned_.get(), bytes, cudaMemcpyHostToDevice, stream);
  for (int64_t t = 1; t < dims_.kv_tables && err == cudaSuccess && num_page_ids > 0; ++t) {
    const size_t offset =
        pages_offset + static_cast<size_t>(t * dims_.max_kv_pages) * sizeof(int32_t);
    err = cudaMemcpyAsync(device_memory_.as<char>() + offset, pinned_.as<char>() + offset,
                          static_cast<size_t>(num_page_ids) * sizeof(int32_t),
                          cudaMemcpyHostToDevice, stream);
  }
  return err;
}

}  // namespace astr::cuda
