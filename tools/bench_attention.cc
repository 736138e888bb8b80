// astr-bench-attention: paged decode attention throughput on the GPU, printed as JSON.
//
//   astr-bench-attention --batch-sizes 1,8,32,64 --contexts 1024,8192,32768 --kv-heads 8 --heads 32
//
// For each (batch, context): a pool holding batch sequences of `context` tokens on scattered pages,
// then LaunchPagedDecode (fused append + split-KV attention + combine) timed with CUDA events over
// --iters launches. GB/s counts the K and V bytes the launch must read (batch x context x kv_heads
// x head_dim x 2 bytes x 2); fraction_of_peak divides by the device's memory bandwidth (from its
// memory clock and bus width, or --peak-gbs).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "common/base/flags.h"
#include "common/base/logging.h"
#include "kernels/cuda/paged_decode.h"

namespace astr {
namespace {

std::vector<int> ParseList(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}

#define CHECK_CUDA(expr)                                     \
  do {                                                       \
    cudaError_t e_ = (expr);                                 \
    if (e_ != cudaSuccess) {                                 \
      LOG(ERROR) << #expr << ": " << cudaGetErrorString(e_); \
      return 1;                                              \
    }                                                        \
  } while (0)

double PeakGbs() {
  int clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  return 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;  // double data rate
}

int Main(int argc, const char* const* argv) {
  FlagSet fs("astr-bench-attention",
             "Time the paged decode attention kernel on the GPU and print JSON (GB/s of K/V "
             "read against the device's memory bandwidth).");
  std::string batch_sizes = "1,8,32,64", contexts = "1024,8192,32768";
  int64_t heads = 32, kv_heads = 8, head_dim = 128, page_size = 16, iters = 50;
  double peak_gbs = 0.0;
  fs.String("batch-sizes", &batch_sizes, "Comma-separated batch sizes.");
  fs.String("contexts", &contexts, "Comma-separated KV lengths (tokens per sequence).");
  fs.Int("heads", &heads, "Query heads.");
  fs.Int("kv-heads", &kv_heads, "KV heads.");
  fs.Int("head-dim", &head_dim, "Head dim (64 or 128).");
  fs.Int("page-size", &page_size, "Tokens per KV page.");
  fs.Int("iters", &iters, "Timed launches per point (after 5 warm-up launches).");
  fs.Double("peak-gbs", &peak_gbs, "Memory bandwidth in GB/s; 0 = from the device attributes.");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  (void)InitLogging(argv[0], LogOptions());
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    LOG(ERROR) << "no usable GPU";
    return 1;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  if (peak_gbs <= 0) peak_gbs = PeakGbs();
  cuda::AttentionDims dims;
  dims.num_heads = static_cast<int>(heads);
  dims.num_kv_heads = static_cast<int>(kv_heads);
  dims.head_dim = static_cast<int>(head_dim);
  dims.sm_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const char* why = nullptr;
  if (!cuda::SupportsPagedDecode(dims, &why)) {
    std::fprintf(stderr, "astr-bench-attention: unsupported shape: %s\n", why ? why : "?");
    return 2;
  }
  nlohmann::json results = nlohmann::json::array();
  std::mt19937 rng(1);
  for (int batch : ParseList(batch_sizes)) {
    for (int context : ParseList(contexts)) {
      const int pages_per_seq = (context + static_cast<int>(page_size) - 1) / page_size;
      const int num_pages = batch * pages_per_seq;
      const size_t slot = static_cast<size_t>(kv_heads * head_dim);
      const size_t pool_elems = static_cast<size_t>(num_pages) * page_size * slot;
      std::vector<int32_t> page_ids(num_pages);
      std::iota(page_ids.begin(), page_ids.end(), 0);
      std::shuffle(page_ids.begin(), page_ids.end(), rng);  // scattered pages, as in a real pool
      std::vector<int32_t> indptr(batch + 1), last(batch);
      std::vector<int64_t> slots(batch);
      for (int b = 0; b <= batch; ++b) indptr[b] = b * pages_per_seq;
      for (int b = 0; b < batch; ++b) {
        last[b] = context - (pages_per_seq - 1) * static_cast<int>(page_size);
        slots[b] = int64_t{page_ids[(b + 1) * pages_per_seq - 1]} * page_size + last[b] - 1;
      }
      const int splits =
          cuda::ChooseDecodeSplits(batch, dims.num_kv_heads, prop.multiProcessorCount);
      void *k, *v, *q, *out, *opart, *lse, *d_ids, *d_indptr, *d_last, *d_slots;
      CHECK_CUDA(cudaMalloc(&k, pool_elems * 2));
      CHECK_CUDA(cudaMalloc(&v, pool_elems * 2));
      CHECK_CUDA(cudaMemset(k, 0x3c, pool_elems * 2));  // bf16 0x3c3c ~ 0.0115: finite data
      CHECK_CUDA(cudaMemset(v, 0x3c, pool_elems * 2));
      CHECK_CUDA(cudaMalloc(&q, size_t(batch) * heads * head_dim * 2));
      CHECK_CUDA(cudaMemset(q, 0x3c, size_t(batch) * heads * head_dim * 2));
      CHECK_CUDA(cudaMalloc(&out, size_t(batch) * heads * head_dim * 2));
      CHECK_CUDA(cudaMalloc(&opart, cuda::DecodePartialOutFloats(batch, dims, splits) * 4));
      CHECK_CUDA(cudaMalloc(&lse, cuda::DecodePartialLseFloats(batch, dims, splits) * 4));
      CHECK_CUDA(cudaMalloc(&d_ids, page_ids.size() * 4));
      CHECK_CUDA(cudaMalloc(&d_indptr, indptr.size() * 4));
      CHECK_CUDA(cudaMalloc(&d_last, last.size() * 4));
      CHECK_CUDA(cudaMalloc(&d_slots, slots.size() * 8));
      CHECK_CUDA(cudaMemcpy(d_ids, page_ids.data(), page_ids.size() * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(d_indptr, indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(d_last, last.data(), last.size() * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(d_slots, slots.data(), slots.size() * 8, cudaMemcpyHostToDevice));
      cuda::PagedDecodeArgs a;
      a.dims = dims;
      a.kv = {static_cast<cuda::bf16*>(k), static_cast<cuda::bf16*>(v), num_pages,
              static_cast<int>(page_size)};
      a.index = {static_cast<int32_t*>(d_indptr), static_cast<int32_t*>(d_ids),
                 static_cast<int32_t*>(d_last)};
      a.batch = batch;
      a.q = static_cast<cuda::bf16*>(q);
      a.q_stride = heads * head_dim;
      a.k_new = a.q;  // appends the query's bits as K/V: only the traffic matters here
      a.v_new = a.q;
      a.kv_new_stride = heads * head_dim;
      a.out_slots = static_cast<int64_t*>(d_slots);
      a.num_splits = splits;
      a.o_partial = static_cast<float*>(opart);
      a.lse_partial = static_cast<float*>(lse);
      a.out = static_cast<cuda::bf16*>(out);
      a.out_stride = heads * head_dim;
      for (int i = 0; i < 5; ++i) CHECK_CUDA(cuda::LaunchPagedDecode(a, nullptr));
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      cudaEventRecord(e0);
      for (int i = 0; i < iters; ++i) CHECK_CUDA(cuda::LaunchPagedDecode(a, nullptr));
      cudaEventRecord(e1);
      CHECK_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      const double us = 1e3 * ms / iters;
      const double bytes = 2.0 * batch * context * slot * 2;  // K and V, bf16
      const double gbs = bytes / (us * 1e-6) / 1e9;
      results.push_back({{"batch", batch},
                         {"context", context},
                         {"splits", splits},
                         {"us_per_launch", us},
                         {"kv_gb_per_s", gbs},
                         {"fraction_of_peak", gbs / peak_gbs}});
      for (void* p : {k, v, q, out, opart, lse, d_ids, d_indptr, d_last, d_slots}) cudaFree(p);
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
    }
  }
  nlohmann::json report = {{"device", prop.name},  {"peak_gb_per_s", peak_gbs},
                           {"heads", heads},       {"kv_heads", kv_heads},
                           {"head_dim", head_dim}, {"page_size", page_size},
                           {"results", results}};
  std::cout << report.dump(2) << std::endl;
  return 0;
}

}  // namespace
}  // namespace astr

int main(int argc, char** argv) { return astr::Main(argc, argv); }
