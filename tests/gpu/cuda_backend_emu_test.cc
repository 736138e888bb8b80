// The CUDA backend's host-side defences, on the emulated device (kernels/cuda/emu), where faults
// can be injected and the profile chosen: a failed graph upload leaves no exec behind; device
// sampling never allocates in a step, also when a step's edits overflow the reserved buffer (the
// rows are drawn in chunks, with the tokens a CPU draw gives); a step that asks for a sampling mask
// draws on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/emu/emu.h"
#include "tests/gpu/model_fixtures.h"
#include "tests/gpu/op_test.h"
#include "worker/backends/cuda/cuda_backend.h"
#include "worker/backends/cuda/device_memory.h"
#include "worker/backends/cuda/device_sampler.h"
#include "worker/backends/cuda/gemm_lt.h"
#include "worker/sampler.h"
#include "worker/step_sampling.h"

namespace astr::gputest {
namespace {

ModelSpec Stories() { return {"stories260K", "", "models/stories260K.gguf"}; }

TEST(CudaBackendEmu, AFailedGraphUploadLeavesNoExecAndTheBucketRunsEagerly) {
  auto file = OpenModel(Stories());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto eager = cuda::CudaBackend::Create(**file, Options(false));
  auto graphs = cuda::CudaBackend::Create(**file, Options(true));
  ASSERT_TRUE(eager.ok() && graphs.ok());
  const int64_t vocab = (*file)->config().vocab_size;
  Driver d;
  for (int i = 0; i < 4; ++i) d.Add(Prompt(3 + i, vocab, i));
  std::vector<float> a(4 * vocab), b(4 * vocab);
  std::vector<size_t> sampled;
  auto step = [&](const StepBatch& batch) {
    ASSERT_TRUE((*eager)->Forward(batch, a.data()).ok());
    ASSERT_TRUE((*graphs)->Forward(batch, b.data()).ok());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), sampled.size() * vocab * sizeof(float)));
    d.Accept(sampled, a, vocab);
  };
  step(d.Next(&sampled));
  emu::InjectFailure("cudaGraphUpload", 1, cudaErrorMemoryAllocation);
  step(d.Decode(4, &sampled));  // bucket 4: captured, the upload fails
  EXPECT_EQ((*graphs)->graphs().captured(), 0);
  for (int i = 0; i < 3; ++i) step(d.Decode(4, &sampled));  // eager from now on, still exact
  EXPECT_EQ((*graphs)->graphs().captured(), 0);
  EXPECT_EQ((*graphs)->graphs().replays(), 0);
  step(d.Decode(2, &sampled));  // another bucket still gets its graph
  step(d.Decode(2, &sampled));
  EXPECT_EQ((*graphs)->graphs().captured(), 1);
  EXPECT_EQ((*graphs)->graphs().replays(), 1);
}

// Out of device memory while the backend is created: RESOURCE_EXHAUSTED naming what did not fit,
// and every byte allocated before it given back.
TEST(CudaBackendEmu, OutOfMemoryAtCreationNamesTheBufferAndLeaksNothing) {
  auto file = OpenModel(Stories());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const int64_t before = cuda::DeviceAllocator::bytes_in_use();
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  // Each device allocation fails in turn: the weights' and the KV pool's physical memory (their
  // releasable arenas, cuMemCreate), then the workspace and the sampling buffers (cudaMalloc).
  const std::pair<const char*, int> failures[] = {
      {"cuMemCreate", 0}, {"cuMemCreate", 1}, {"cudaMalloc", 0}, {"cudaMalloc", 1}};
  for (const auto& [api, skip] : failures) {
    emu::InjectFailure(api, 1, cudaErrorMemoryAllocation, skip);
    auto backend = cuda::CudaBackend::Create(**file, Options(true));
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), StatusCode::kResourceExhausted)
        << backend.status().ToString();
    EXPECT_NE(backend.status().message().find("allocating"), std::string::npos)
        << backend.status().ToString();
    (void)cudaGetLastError();
    EXPECT_EQ(cuda::DeviceAllocator::bytes_in_use(), before);
    size_t free_after = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
    EXPECT_EQ(free_after, free_before);
  }
}

// cuBLASLt's heuristic runs when the backend is created, for every m bucket; steps with prefill
// lengths never seen before reuse their bucket's algorithm.
TEST(CudaBackendEmu, NewPrefillLengthsRunNoGemmHeuristic) {
  auto file = OpenModel({"random-llama-d64",
                         "--arch llama --hidden 256 --layers 2 --heads 4 --kv-heads 1 --ffn 512 "
                         "--vocab 1000 --seed 11",
                         ""});
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto backend = cuda::CudaBackend::Create(**file, Options(true));
  ASSERT_TRUE(backend.ok());
  const int64_t at_start = (*backend)->gemm().heuristic_calls();
  // 5 GEMM shapes; m buckets 1..1024 for the layers (11), 1..16 for the LM head (5).
  EXPECT_EQ(at_start, 4 * 11 + 5);
  const int64_t vocab = (*file)->config().vocab_size;
  Driver d;
  for (int len : {37, 101, 500, 3, 200}) d.Add(Prompt(len, vocab, len));  // <= 512 per sequence
  std::vector<float> logits(16 * vocab);
  std::vector<size_t> sampled;
  for (size_t i = 0; i < 5; ++i) {
    const Status s = (*backend)->Forward(d.Step({{i, 1000}}, &sampled), logits.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    d.Accept(sampled, logits, vocab);
  }
  for (int i = 0; i < 3; ++i) {
    const Status s = (*backend)->Forward(d.Decode(5, &sampled), logits.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    d.Accept(sampled, logits, vocab);
  }
  EXPECT_EQ((*backend)->gemm().heuristic_calls(), at_start);
  EXPECT_EQ(cuda::LtGemm::BucketOf(37), 64);
  EXPECT_EQ(cuda::LtGemm::BucketOf(64), 64);
  EXPECT_EQ(cuda::LtGemm::BucketOf(1), 1);
}

// Rows with a bias on every id and penalties on many: far more edits than a small buffer holds.
TEST(CudaBackendEmu, SamplingEditsBeyondTheBufferAreDrawnInChunksWithoutAllocating) {
  constexpr int64_t kVocab = 3000;
  constexpr int kRows = 12;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> logits(kRows * kVocab);
  for (float& x : logits) x = nd(rng);
  std::vector<std::unique_ptr<SequenceSampler>> samplers;
  std::vector<const SequenceSampler*> ptrs;
  for (int r = 0; r < kRows; ++r) {
    SamplingParams p;
    p.temperature = r % 3 == 0 ? 0.0f : 0.8f;
    p.seed = 100 + r;
    p.frequency_penalty = 0.4f;
    p.presence_penalty = 0.2f;
    p.return_logprob = true;
    for (int32_t t = 0; t < kVocab; t += 1 + r % 2)
      p.logit_bias[t] = 0.01f * ((t * 7 + r) % 200 - 100);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 400; ++i) prompt.push_back((i * 37 + r) % kVocab);
    auto s = std::make_unique<SequenceSampler>(p, r, prompt);
    for (int i = 0; i < 300; ++i) s->Append((i * 53 + 3 * r) % kVocab);
    ptrs.push_back(s.get());
    samplers.push_back(std::move(s));
  }
  // CPU draws.
  std::vector<SampleResult> want(kRows);
  SamplerScratch scratch;
  for (int r = 0; r < kRows; ++r) {
    std::vector<float> row(logits.begin() + r * kVocab, logits.begin() + (r + 1) * kVocab);
    want[r] = Sample(row.data(), kVocab, *samplers[r], scratch);
  }
  // Device draws through a sampler whose edit buffer holds about two rows.
  cuda::DeviceSampler ds;
  ASSERT_TRUE(ds.Reserve(kRows, kVocab, 0).ok());
  DeviceBuffer<float> dlogits, draw;
  ASSERT_EQ(dlogits.Upload(logits), cudaSuccess);
  ASSERT_EQ(draw.Resize(logits.size()), cudaSuccess);
  DeviceBuffer<cuda::DeviceSamplingParams> dparams(kRows);
  DeviceBuffer<cuda::DeviceSampleResult> dresults(kRows);
  std::vector<cuda::DeviceSamplingParams> params(kRows);
  ds.Pack(ptrs, kVocab, params.data());
  ASSERT_EQ(
      cudaMemcpy(dparams.get(), params.data(), kRows * sizeof(params[0]), cudaMemcpyHostToDevice),
      cudaSuccess);
  const int64_t allocations = cuda::DeviceAllocator::allocations();
  std::vector<SampleResult> got(kRows);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const Status s =
      ds.Launch(dlogits.get(), draw.get(), dparams.get(), dresults.get(), kVocab, stream, got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  cudaStreamDestroy(stream);
  EXPECT_EQ(cuda::DeviceAllocator::allocations(), allocations);
  EXPECT_GT(ds.launches(), 3) << "expected the rows in several chunks";
  for (int r = 0; r < kRows; ++r) {
    EXPECT_EQ(got[r].token, want[r].token) << "row " << r;
    EXPECT_NEAR(got[r].logprob, want[r].logprob, 1e-3) << "row " << r;
  }
}

// A step in which a row asks for its sampling mask draws on the host even though the backend
// samples on its device (the device sampler returns no mask): the masked row gets the mask of the
// host sampler over the backend's own logits (here top-5: the 5 highest logits, found by sorting
// the row), and both rows get the host sampler's tokens.
TEST(CudaBackendEmu, ASamplingMaskStepDrawsOnTheHost) {
  auto file = OpenModel(Stories());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto device = cuda::CudaBackend::Create(**file, Options(false, /*device_sampling=*/true));
  auto host = cuda::CudaBackend::Create(**file, Options(false, /*device_sampling=*/false));
  ASSERT_TRUE(device.ok() && host.ok());
  ASSERT_TRUE((*device)->samples_on_device());
  const int64_t vocab = (*file)->config().vocab_size;
  Driver d;
  d.Add(Prompt(6, vocab, 1));
  d.Add(Prompt(9, vocab, 2));
  std::vector<size_t> sampled;
  const StepBatch batch = d.Next(&sampled);
  ASSERT_EQ(sampled.size(), 2u);

  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 5;
  p.seed = 17;
  SamplingParams with_mask = p;
  with_mask.return_sampling_mask = true;
  SequenceSampler masked(with_mask, 0, {}), plain(p, 1, {});
  const std::vector<const SequenceSampler*> rows = {&masked, &plain};
  StepSampling sampling(**device);
  std::vector<SampleResult> got(2);
  const Status s = sampling.Run(**device, batch, rows, {}, got);
  ASSERT_TRUE(s.ok()) << s.ToString();

  // The reference: the same step's logits on the host, drawn by the host sampler.
  std::vector<float> logits(2 * vocab);
  ASSERT_TRUE((*host)->Forward(batch, logits.data()).ok());
  SamplerScratch scratch;
  for (size_t r = 0; r < 2; ++r) {
    std::vector<float> row(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    std::vector<int32_t> top5(order.begin(), order.begin() + 5);
    std::sort(top5.begin(), top5.end());
    const SampleResult want = Sample(row.data(), vocab, *rows[r], scratch);
    EXPECT_EQ(got[r].token, want.token) << "row " << r;
    EXPECT_TRUE(std::binary_search(top5.begin(), top5.end(), got[r].token)) << "row " << r;
    if (r == 0) {
      EXPECT_EQ(got[r].mask.count, 5);
      EXPECT_EQ(got[r].mask.ids, top5);
    } else {
      EXPECT_EQ(got[r].mask.count, 0) << "a mask nobody asked for";
    }
  }
}

// A single row with more edits than the reserved buffer holds (here: reserved for a 100-token
// vocabulary, drawn over 3000) is refused naming the row; nothing is launched.
TEST(CudaBackendEmu, ARowWhoseEditsExceedTheBufferIsRefused) {
  constexpr int64_t kVocab = 3000;
  SamplingParams p;
  p.temperature = 0.0f;
  for (int32_t t = 0; t < kVocab; ++t) p.logit_bias[t] = 1.0f;
  SequenceSampler s(p, 0, std::vector<int32_t>{1, 2, 3});
  std::vector<const SequenceSampler*> ptrs = {&s};
  cuda::DeviceSampler ds;
  ASSERT_TRUE(ds.Reserve(1, 100, 0).ok());
  std::vector<cuda::DeviceSamplingParams> params(1);
  ds.Pack(ptrs, kVocab, params.data());
  DeviceBuffer<float> logits(kVocab), raw(kVocab);
  DeviceBuffer<cuda::DeviceSamplingParams> dparams(1);
  DeviceBuffer<cuda::DeviceSampleResult> dresults(1);
  std::vector<SampleResult> got(1);
  const Status st =
      ds.Launch(logits.get(), raw.get(), dparams.get(), dresults.get(), kVocab, nullptr, got);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("row 0 has more edits than the sampling buffer holds"),
            std::string::npos)
      << st.ToString();
  EXPECT_EQ(ds.launches(), 0);
}

}  // namespace
}  // namespace astr::gputest
