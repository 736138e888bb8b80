// Host-side logic of the CUDA backend, on the CPU: graph buckets, workspace layout and sizing,
// KV pool sizing. Expected values are worked out by hand in the comments.
#include <gtest/gtest.h>

#include <vector>

#include "common/model/model_config.h"
#include "kernels/cuda/paged_decode.h"
#include "kernels/cuda/paged_prefill.h"
#include "worker/backends/cuda/cuda_backend.h"
#include "worker/backends/cuda/cuda_graphs.h"
#include "worker/backends/cuda/workspace.h"

namespace astr::cuda {
namespace {

TEST(GraphBuckets, PowersOfTwoThenTheMax) {
  EXPECT_EQ(GraphBuckets(1), (std::vector<int>{1}));
  EXPECT_EQ(GraphBuckets(2), (std::vector<int>{1, 2}));
  EXPECT_EQ(GraphBuckets(8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(GraphBuckets(48), (std::vector<int>{1, 2, 4, 8, 16, 32, 48}));
  EXPECT_EQ(GraphBuckets(256), (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256}));
  EXPECT_TRUE(GraphBuckets(0).empty());
}

TEST(GraphBuckets, BatchGoesToTheSmallestBucketThatHoldsIt) {
  const std::vector<int> b = GraphBuckets(48);
  EXPECT_EQ(BucketFor(1, b), 1);
  EXPECT_EQ(BucketFor(3, b), 4);
  EXPECT_EQ(BucketFor(4, b), 4);
  EXPECT_EQ(BucketFor(17, b), 32);
  EXPECT_EQ(BucketFor(33, b), 48);
  EXPECT_EQ(BucketFor(48, b), 48);
  EXPECT_EQ(BucketFor(49, b), -1);
  EXPECT_EQ(BucketFor(0, b), -1);
}

TEST(BumpAllocator, AlignsEveryRegionTo256Bytes) {
  BumpAllocator count(nullptr, 0);
  count.Take<float>(3, "a");    // [0, 12)
  count.Take<int64_t>(1, "b");  // [256, 264)
  count.TakeBytes(1, "c");      // [512, 513)
  ASSERT_EQ(count.regions().size(), 3u);
  EXPECT_EQ(count.regions()[0].offset, 0u);
  EXPECT_EQ(count.regions()[1].offset, 256u);
  EXPECT_EQ(count.regions()[2].offset, 512u);
  EXPECT_EQ(count.used(), 513u);
  EXPECT_FALSE(count.overflowed());
}

WorkspaceDims SmallDims() {
  WorkspaceDims d;
  d.max_tokens = 100;
  d.max_batch = 7;
  d.max_kv_pages = 50;
  d.hidden = 64;
  d.qkv_rows = 128;
  d.q_cols = 64;
  d.ffn = 172;
  d.vocab = 512;
  d.num_heads = 8;
  d.head_dim = 8;
  d.max_partial_rows = 33;
  d.max_prefill_tiles = 9;
  d.gemm_workspace_bytes = 1000;
  return d;
}

// The counted size is exactly what the real carve needs: it fits, and one byte less does not.
TEST(InferenceWorkspace, CountedSizeIsExact) {
  const WorkspaceDims d = SmallDims();
  const size_t bytes = InferenceWorkspace::DeviceBytes(d);
  std::vector<char> memory(bytes + BumpAllocator::kAlign);
  char* base = memory.data();
  base += (BumpAllocator::kAlign - reinterpret_cast<uintptr_t>(base) % BumpAllocator::kAlign) %
          BumpAllocator::kAlign;
  BumpAllocator exact(base, bytes);
  CarveMetadata(exact, d);
  CarveActivations(exact, d);
  EXPECT_FALSE(exact.overflowed());
  EXPECT_EQ(exact.used(), bytes);
  BumpAllocator short_by_one(base, bytes - 1);
  CarveMetadata(short_by_one, d);
  CarveActivations(short_by_one, d);
  EXPECT_TRUE(short_by_one.overflowed());
}

TEST(InferenceWorkspace, RegionsHoldTheirArraysWithoutOverlap) {
  const WorkspaceDims d = SmallDims();
  BumpAllocator count(nullptr, 0);
  CarveMetadata(count, d);
  CarveActivations(count, d);
  const auto& r = count.regions();
  for (size_t i = 1; i < r.size(); ++i) {
    EXPECT_GE(r[i].offset, r[i - 1].offset + r[i - 1].bytes) << r[i].name;
  }
  // Sizes worked out from the shapes: token_ids 100 ints, kv_page_indices 50 ints, logits 7 x 512
  // floats, o_partial 33 rows x 8 heads x 8 dims floats, gate_up 100 x 344 bf16.
  auto bytes_of = [&](const std::string& name) {
    for (const auto& x : r) {
      if (x.name == name) return x.bytes;
    }
    return size_t{0};
  };
  EXPECT_EQ(bytes_of("token_ids"), 400u);
  EXPECT_EQ(bytes_of("qo_indptr"), 32u);
  EXPECT_EQ(bytes_of("kv_page_indices"), 200u);
  EXPECT_EQ(bytes_of("logits"), 7u * 512 * 4);
  EXPECT_EQ(bytes_of("o_partial"), 33u * 8 * 8 * 4);
  EXPECT_EQ(bytes_of("gate_up"), 100u * 344 * 2);
  EXPECT_EQ(bytes_of("gemm_workspace"), 1000u);
  EXPECT_EQ(bytes_of("rope_long"), 400u);
  // The page ids come last in the metadata block, so a step uploads only the ids it uses.
  size_t last = 0;
  while (last < r.size() && r[last].name != "kv_page_indices") ++last;
  ASSERT_LT(last, r.size());
  EXPECT_EQ(r[last + 1].name, "x");  // the first activation: nothing of the metadata after them
  EXPECT_EQ(InferenceWorkspace::HostBytes(d), r[last].offset + r[last].bytes);
}

model::ModelConfig Llama8B() {
  model::ModelConfig c;
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.rope_dim = 128;
  c.max_context_tokens = 8192;
  return c;
}

TEST(CudaBackendSizing, KvPagesForBytes) {
  // One page of 16 tokens: 32 layers x 2 (K, V) x 16 x 8 kv heads x 128 dims x 2 bytes = 2 MiB.
  const model::ModelConfig c = Llama8B();
  EXPECT_EQ(CudaPagesForBytes(c, 16, int64_t{2} << 20), 1);
  EXPECT_EQ(CudaPagesForBytes(c, 16, (int64_t{2} << 20) - 1), 0);
  EXPECT_EQ(CudaPagesForBytes(c, 16, int64_t{10} << 30), 5120);
}

TEST(CudaBackendSizing, WorkspaceDimsFromTheModelAndOptions) {
  const model::ModelConfig c = Llama8B();
  BackendOptions o;
  o.page_size = 16;
  o.max_batch_tokens = 2048;
  o.max_sample_rows = 64;
  const WorkspaceDims d = WorkspaceDimsFor(c, o, /*num_pages=*/5120, /*num_sms=*/132);
  EXPECT_EQ(d.max_tokens, 2048);
  EXPECT_EQ(d.max_batch, 64);
  // 8192 / 16 = 512 pages per sequence (fewer than the pool's 5120), times 64 entries.
  EXPECT_EQ(d.max_kv_pages, 64 * 512);
  EXPECT_EQ(d.qkv_rows, 4096 + 2 * 1024);
  // Buckets 1..64; splits = ceil(264 / (bucket * 8)): bucket 1 -> 33, 2 -> 17 (34 rows),
  // 4 -> 9 (36), 8 -> 5 (40), 16 -> 3 (48), 32 -> 2 (64), 64 -> 1 (64). Max rows: 64.
  EXPECT_EQ(d.max_partial_rows, 64);
  // A batch may not have more entries than rows.
  o.max_batch_tokens = 16;
  EXPECT_EQ(WorkspaceDimsFor(c, o, 5120, 132).max_batch, 16);
}

// Every supported head_dim fits the per-block shared memory an A100 allows (166912 bytes opt-in;
// H100 / H200 allow 232448), so the tensor-core kernels run on sm_80 and sm_90 parts; unsupported
// head dims report 0.
TEST(AttentionKernels, SharedMemoryFitsAnA100) {
  for (int hd : {32, 64, 128, 256}) {
    EXPECT_GT(PagedDecodeStages(hd, 166912), 0) << hd;
    EXPECT_LE(PagedDecodeSharedBytes(hd, PagedDecodeStages(hd, 166912)), 166912u) << hd;
    EXPECT_GT(PagedPrefillSharedBytes(hd), 0u) << hd;
    EXPECT_LE(PagedPrefillSharedBytes(hd), 166912u) << hd;
  }
  EXPECT_LT(PagedDecodeSharedBytes(64, 3), PagedDecodeSharedBytes(128, 3));
  EXPECT_LT(PagedDecodeSharedBytes(128, 2), PagedDecodeSharedBytes(128, 3));
  EXPECT_EQ(PagedDecodeSharedBytes(8, 3), 0u);
  EXPECT_EQ(PagedDecodeSharedBytes(128, 4), 0u);
  EXPECT_EQ(PagedPrefillSharedBytes(96), 0u);
}

// The 99 KB parts (sm_86 / sm_89: 101376 bytes opt-in). Decode at head_dim 128 needs 108,800 bytes
// with three stages, so it runs two; prefill at 128 fits as it is; head_dim 256 decode does not fit
// at all (the generic kernel takes it) while its prefill fits exactly.
TEST(AttentionKernels, NinetyNineKilobyteParts) {
  constexpr size_t k99 = 101376;
  EXPECT_EQ(PagedDecodeSharedBytes(128, 3), 108800u);
  EXPECT_EQ(PagedDecodeStages(128, k99), 2);
  EXPECT_EQ(PagedDecodeStages(64, k99), 3);
  EXPECT_EQ(PagedDecodeStages(256, k99), 0);
  EXPECT_LE(PagedPrefillSharedBytes(128), k99);
  EXPECT_LE(PagedPrefillSharedBytes(256), k99);
  // Hopper's 227 KB take three stages even at head_dim 256.
  EXPECT_EQ(PagedDecodeStages(256, 232448), 3);
  EXPECT_EQ(PagedDecodeStages(256, 166912), 2);
}

}  // namespace
}  // namespace astr::cuda
