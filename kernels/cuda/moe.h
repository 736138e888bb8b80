// The mixture-of-experts ops of the decoder layer (model_config.h: a MoE layer's MLP) on the GPU.
// Every shape a step can bring is known on the host (num_tokens rows, each routed to exactly
// top_k experts: pairs = num_tokens * top_k), so the launches are the same at each step and CUDA
// graphs capture them; which expert a pair goes to lives on the device only:
//
//   LaunchMoeRoute    router logits -> each row's top_k experts and weights (cpu::RouteTopK)
//   LaunchMoeSort     the pairs sorted by expert (rows ascending within one), where each row's
//                     choices went, and the tile table of the grouped GEMMs
//   LaunchGatherRows  (ops.h) the rows of each pair, in pair order
//   LaunchGroupedMatmul  y[p] = x[p] . W[expert of p]^T, one tile of rows of one expert per block
//   LaunchSiluMul / LaunchGeluTanhMul (ops.h) on the pairs' gate/up rows
//   LaunchMoeCombine  out[r] = sum over r's experts, in expert order, of weight * y[pair]
//
// Each function enqueues on `stream`, allocates nothing and returns the launch error
// (cudaErrorInvalidValue for arguments it cannot handle; num_tokens == 0 launches nothing).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/moe_route.h"
#include "kernels/cuda/kv_layout.h"

namespace astr::cuda {

// Most experts a layer may have (ModelConfig::Validate's bound) and experts a row may pick.
inline constexpr int kMaxMoeExperts = 4096;
inline constexpr int kMaxMoeTopK = 32;
// Rows of one expert per grouped-GEMM tile.
inline constexpr int kMoeTileRows = 16;

// Tiles the grouped GEMMs may need for `pairs` pairs over `num_experts` experts: each expert's
// pairs in tiles of kMoeTileRows, at most one partial tile per expert.
inline int64_t MoeMaxTiles(int64_t pairs, int64_t num_experts) {
  return (pairs + kMoeTileRows - 1) / kMoeTileRows + (num_experts < pairs ? num_experts : pairs);
}

// For each row t < num_tokens of logits [T, num_experts] f32: p = softmax(row) in f32, the top_k
// largest p in decreasing order (ties: the lower expert) into experts[t, :top_k], their p into
// weights[t, :top_k], divided by their sum when `normalize`. The arithmetic of cpu::RouteTopK
// (CUDA's expf: <= 2 ulp from the CPU's).
cudaError_t LaunchMoeRoute(const float* logits, int num_tokens, int num_experts, int top_k,
                           bool normalize, int32_t* experts, float* weights, cudaStream_t stream);
// The general form (kernels/common/moe_route.h: softmax or sigmoid scoring, a choice bias on the
// device, expert groups, a scale), cpu::RouteTopK's arithmetic likewise. Groups must divide the
// experts into groups of at least two, at most 64 of them.
cudaError_t LaunchMoeRoute(const float* logits, int num_tokens, const moe::RouteParams& p,
                           int32_t* experts, float* weights, cudaStream_t stream);

// The pairs p = t * top_k + j (row t's j-th choice, experts [pairs]) sorted by expert, rows
// ascending within an expert (counting sort, deterministic): pair_row[i] is the row of the i-th
// sorted pair and slot[p] the sorted index of pair p. tiles [max_tiles][3] = {expert, first, end}
// sorted indices of each tile of at most kMoeTileRows pairs of one expert, in expert order; unused
// entries hold expert -1. One block; max_tiles >= MoeMaxTiles(pairs, num_experts).
cudaError_t LaunchMoeSort(const int32_t* experts, int pairs, int top_k, int num_experts,
                          int32_t* pair_row, int32_t* slot, int32_t* tiles, int max_tiles,
                          cudaStream_t stream);

// For each used tile {e, first, end}: y[i, :n] = x[i, :k] . w[e]^T for i in [first, end), with
// x [*, k] bf16 (row stride ldx), w [num_experts][n, k] bf16 (expert e at w + e * n * k), f32
// accumulation, y row stride ldy of bf16 (out_f32 false) or f32. With `bias` ([num_experts][n]
// f32, gpt-oss), bias[e] is added to the f32 sums before any rounding. Blocks past the used tiles
// exit.
cudaError_t LaunchGroupedMatmul(const bf16* x, int64_t ldx, const bf16* w, const int32_t* tiles,
                                int max_tiles, int n, int k, void* y, int64_t ldy, bool out_f32,
                                cudaStream_t stream, const float* bias = nullptr);

// out[t, :] = sum over j of weights[t, j] * y[slot[t * top_k + j], :], the terms added in
// increasing expert order from 0 (f32, one fma each, as the CPU backend's Axpy), for t <
// num_tokens; y [pairs, cols] f32 (row stride ldy), out [T, cols] f32.
cudaError_t LaunchMoeCombine(const float* y, int64_t ldy, const int32_t* experts,
                             const float* weights, const int32_t* slot, int num_tokens, int top_k,
                             int cols, float* out, cudaStream_t stream);

// Qwen2-MoE's shared expert, added to the experts' sum: for t < num_tokens, s = sigmoid(dot(x[t],
// gate)) (x [T, cols] bf16 row stride ldx, gate [cols] bf16, the dot in f32) and out[t, c] =
// fma(s, y[t, c], out[t, c]) (y, out [T, cols] f32). A null gate (GLM-4.5's ungated shared
// experts): s = 1, x unread.
cudaError_t LaunchAddSharedExpert(const bf16* x, int64_t ldx, const bf16* gate, const float* y,
                                  int num_tokens, int cols, float* out, cudaStream_t stream);

}  // namespace astr::cuda
