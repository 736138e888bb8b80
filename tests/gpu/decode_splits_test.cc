// Host-side logic of the paged decode kernels (runs on the CPU): the split count, the workspace
// sizes and the shape / argument checks, which reject before any CUDA call.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/cuda/paged_decode.h"

namespace astr::cuda {
namespace {

TEST(ChooseDecodeSplits, HandComputed) {
  // splits = ceil(2 * num_sms / (batch * num_kv_heads)), clamped to [1, 64].
  EXPECT_EQ(ChooseDecodeSplits(1, 8, 132), 33);  // ceil(264 / 8)
  EXPECT_EQ(ChooseDecodeSplits(3, 8, 132), 11);  // ceil(264 / 24)
  EXPECT_EQ(ChooseDecodeSplits(2, 8, 132), 17);  // ceil(264 / 16) = 16.5 -> 17
  EXPECT_EQ(ChooseDecodeSplits(33, 2, 132), 4);  // ceil(264 / 66)
  EXPECT_EQ(ChooseDecodeSplits(7, 3, 108), 11);  // ceil(216 / 21) = 10.3 -> 11
  EXPECT_EQ(ChooseDecodeSplits(33, 8, 132), 1);  // 264 CTAs already
  EXPECT_EQ(ChooseDecodeSplits(256, 8, 132), 1);
  EXPECT_EQ(ChooseDecodeSplits(4096, 32, 132), 1);
}

TEST(ChooseDecodeSplits, ClampsAtMax) {
  EXPECT_EQ(ChooseDecodeSplits(1, 1, 132), kMaxDecodeSplits);  // 264 -> 64
  EXPECT_EQ(ChooseDecodeSplits(1, 4, 132), kMaxDecodeSplits);  // 66 -> 64
  EXPECT_EQ(ChooseDecodeSplits(1, 5, 132), 53);                // ceil(264 / 5) = 52.8 -> 53
}

TEST(ChooseDecodeSplits, ZeroAndOddInputs) {
  // Zero / negative counts are treated as 1 (batch 0 x heads -> 1 CTA; num_sms < 1 -> 1 SM).
  EXPECT_EQ(ChooseDecodeSplits(0, 8, 132), kMaxDecodeSplits);
  EXPECT_EQ(ChooseDecodeSplits(1, 0, 132), kMaxDecodeSplits);
  EXPECT_EQ(ChooseDecodeSplits(1, 1, 0), 2);  // target 2 CTAs
  EXPECT_EQ(ChooseDecodeSplits(1, 1, -5), 2);
  EXPECT_EQ(ChooseDecodeSplits(3, 1, 1), 1);  // ceil(2 / 3)
  EXPECT_EQ(ChooseDecodeSplits(1, 1, 1), 2);
}

TEST(ChooseDecodeSplits, AlwaysInRange) {
  for (int batch : {0, 1, 2, 3, 5, 8, 33, 64, 1000}) {
    for (int heads : {0, 1, 2, 4, 8, 32}) {
      for (int sms : {-1, 0, 1, 108, 132}) {
        const int s = ChooseDecodeSplits(batch, heads, sms);
        EXPECT_GE(s, 1) << batch << " " << heads << " " << sms;
        EXPECT_LE(s, kMaxDecodeSplits) << batch << " " << heads << " " << sms;
      }
    }
  }
}

TEST(DecodePartialFloats, HandComputed) {
  AttentionDims d;
  d.num_heads = 32;
  d.num_kv_heads = 8;
  d.head_dim = 128;
  EXPECT_EQ(DecodePartialOutFloats(3, d, 11), 135168);  // 3 * 32 * 11 * 128
  EXPECT_EQ(DecodePartialLseFloats(3, d, 11), 1056);    // 3 * 32 * 11
  EXPECT_EQ(DecodePartialOutFloats(1, d, 1), 4096);
  EXPECT_EQ(DecodePartialLseFloats(0, d, 5), 0);
  // Past 2^31: 4096 * 64 * 64 * 256 = 2^32.
  d.num_heads = 64;
  d.head_dim = 256;
  EXPECT_EQ(DecodePartialOutFloats(4096, d, 64), int64_t{1} << 32);
}

AttentionDims Dims(int heads, int kv_heads, int head_dim, int window = 0) {
  AttentionDims d;
  d.num_heads = heads;
  d.num_kv_heads = kv_heads;
  d.head_dim = head_dim;
  d.sliding_window = window;
  d.sm_scale = 0.125f;
  return d;
}

TEST(SupportsPagedDecode, Shapes) {
  const char* why = nullptr;
  for (int hd : {32, 64, 128, 256}) {
    for (int group : {1, 2, 3, 4, 7, 8, 16}) {
      EXPECT_TRUE(SupportsPagedDecode(Dims(2 * group, 2, hd), &why)) << hd << " " << group;
    }
  }
  EXPECT_TRUE(SupportsPagedDecode(Dims(32, 8, 128, 4096), &why));

  why = nullptr;
  EXPECT_FALSE(SupportsPagedDecode(Dims(32, 8, 96), &why));
  ASSERT_NE(why, nullptr);
  EXPECT_NE(std::strstr(why, "head_dim"), nullptr) << why;

  why = nullptr;
  EXPECT_FALSE(SupportsPagedDecode(Dims(34, 2, 128), &why));  // group 17
  ASSERT_NE(why, nullptr);
  EXPECT_NE(std::strstr(why, "group"), nullptr) << why;

  why = nullptr;
  EXPECT_FALSE(SupportsPagedDecode(Dims(30, 8, 128), &why));  // not a multiple
  ASSERT_NE(why, nullptr);
  EXPECT_NE(std::strstr(why, "num_kv_heads"), nullptr) << why;

  why = nullptr;
  EXPECT_FALSE(SupportsPagedDecode(Dims(8, 0, 128), &why));
  EXPECT_NE(why, nullptr);

  why = nullptr;
  EXPECT_FALSE(SupportsPagedDecode(Dims(8, 8, 128, -1), &why));
  ASSERT_NE(why, nullptr);
  EXPECT_NE(std::strstr(why, "sliding_window"), nullptr) << why;
}

// Fake but aligned, non-null device pointers: the launcher must reject these arguments on the host
// before it touches them or the CUDA runtime.
template <typename T>
T* FakePtr() {
  return reinterpret_cast<T*>(uintptr_t{1} << 20);
}

PagedDecodeArgs ValidLookingArgs() {
  PagedDecodeArgs a;
  a.dims = Dims(32, 8, 128);
  a.kv.k = FakePtr<bf16>();
  a.kv.v = FakePtr<bf16>();
  a.kv.num_pages = 16;
  a.kv.page_size = 16;
  a.index.kv_indptr = FakePtr<int32_t>();
  a.index.kv_page_indices = FakePtr<int32_t>();
  a.index.kv_last_page_len = FakePtr<int32_t>();
  a.batch = 2;
  a.q = FakePtr<bf16>();
  a.q_stride = 48 * 128;
  a.k_new = FakePtr<bf16>();
  a.v_new = FakePtr<bf16>();
  a.kv_new_stride = 48 * 128;
  a.out_slots = FakePtr<int64_t>();
  a.num_splits = 4;
  a.o_partial = FakePtr<float>();
  a.lse_partial = FakePtr<float>();
  a.out = FakePtr<bf16>();
  a.out_stride = 32 * 128;
  return a;
}

TEST(LaunchPagedDecode, RejectsOnTheHost) {
  auto expect_invalid = [](PagedDecodeArgs a, const char* what) {
    EXPECT_EQ(LaunchPagedDecode(a, nullptr), cudaErrorInvalidValue) << what;
  };
  PagedDecodeArgs a = ValidLookingArgs();
  a.dims.head_dim = 96;
  expect_invalid(a, "head_dim 96");
  a = ValidLookingArgs();
  a.dims.num_heads = 8 * 17;
  expect_invalid(a, "group 17");
  a = ValidLookingArgs();
  a.num_splits = 0;
  expect_invalid(a, "num_splits 0");
  a.num_splits = kMaxDecodeSplits + 1;
  expect_invalid(a, "num_splits 65");
  a = ValidLookingArgs();
  a.batch = -1;
  expect_invalid(a, "batch -1");
  a = ValidLookingArgs();
  a.dims.sm_scale = 0.0f;
  expect_invalid(a, "sm_scale 0");
  a = ValidLookingArgs();
  a.kv.page_size = 0;
  expect_invalid(a, "page_size 0");
  a = ValidLookingArgs();
  a.q_stride = 48 * 128 + 4;
  expect_invalid(a, "q_stride not a multiple of 8");
  a = ValidLookingArgs();
  a.q = a.q + 4;
  expect_invalid(a, "q not 16-byte aligned");
  a = ValidLookingArgs();
  a.k_new = nullptr;
  expect_invalid(a, "out_slots without k_new");
  a = ValidLookingArgs();
  a.out_stride = 31 * 128;
  expect_invalid(a, "out_stride below num_heads * head_dim");
  a = ValidLookingArgs();
  a.lse_partial = nullptr;
  expect_invalid(a, "no lse_partial");
}

TEST(LaunchPagedDecode, EmptyBatchEnqueuesNothing) {
  PagedDecodeArgs a = ValidLookingArgs();
  a.batch = 0;
  EXPECT_EQ(LaunchPagedDecode(a, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace astr::cuda
