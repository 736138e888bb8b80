// The CPU backend's forward pass on real model files: the golden greedy output of stories260K,
// batch independence, chunked prefill and page-size invariance, and converted / HF-format models.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "common/model/model_file.h"
#include "tests/support/model_driver.h"
#include "tests/support/test_util.h"
#include "worker/backend.h"
#include "worker/engine.h"

namespace astr {
namespace {

using testing::DriveGreedy;
using testing::DrivenSequence;
using testing::MaxAbsDiff;

// llama.cpp's greedy continuation of "Once upon a time" (BOS added); see
// ../shared/models/README.md.
const std::vector<int32_t> kGoldenPrompt = {1, 403, 407, 261, 378};
const std::vector<int32_t> kGoldenIds = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426,
                                         338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322,
                                         265, 282, 295, 433, 426, 385, 328, 432, 358, 394};

std::unique_ptr<model::ModelFile> OpenOrDie(const std::string& path) {
  auto f = model::ModelFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? std::move(*f) : nullptr;
}

std::unique_ptr<Backend> MakeBackend(const model::ModelFile& file, const std::string& dtype,
                                     int64_t page_size, int threads = 2) {
  BackendOptions o;
  o.weight_dtype = dtype;
  o.threads = threads;
  o.page_size = page_size;
  o.num_pages = 4096 / page_size;
  o.max_batch_tokens = 512;
  o.max_sample_rows = 16;
  auto b = CreateCpuBackend(file, o);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(*b) : nullptr;
}

std::vector<int32_t> GreedyIds(Backend& backend, const std::vector<int32_t>& prompt, int n) {
  std::vector<DrivenSequence> seqs(1);
  seqs[0].prompt = prompt;
  seqs[0].max_new = n;
  Status s = DriveGreedy(backend, seqs);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return seqs[0].generated;
}

TEST(CpuModelTest, Stories260kGoldenGreedyF32) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  auto file = OpenOrDie(path);
  ASSERT_NE(file, nullptr);
  auto backend = MakeBackend(*file, "f32", 16);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(GreedyIds(*backend, kGoldenPrompt, 32), kGoldenIds);
}

TEST(CpuModelTest, Stories260kGoldenGreedyBf16ThroughEngine) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  auto file = OpenOrDie(path);
  ASSERT_NE(file, nullptr);
  auto backend = MakeBackend(*file, "bf16", 16);
  ASSERT_NE(backend, nullptr);
  Engine engine(std::move(backend), EngineOptions{});
  GenerationRequest req;
  req.prompt = kGoldenPrompt;
  req.params.temperature = 0;
  req.params.max_tokens = 32;
  ASSERT_TRUE(engine.Submit(req).ok());
  auto results = engine.RunToCompletion();
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  EXPECT_EQ((*results)[0].tokens, kGoldenIds);
  EXPECT_EQ(engine.free_pages(), engine.total_pages());
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(3 + rng() % (vocab - 3));
  return t;
}

// 8 prompts of different lengths, some joining mid-way, decoded together == each alone.
TEST(CpuModelTest, BatchIndependence) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  auto file = OpenOrDie(path);
  ASSERT_NE(file, nullptr);
  for (const char* dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(dtype);
    auto backend = MakeBackend(*file, dtype, 16);
    ASSERT_NE(backend, nullptr);
    const int64_t lengths[8] = {1, 5, 17, 33, 64, 9, 100, 2};
    const int64_t joins[8] = {0, 0, 0, 3, 3, 5, 7, 11};
    std::vector<DrivenSequence> together(8);
    for (int i = 0; i < 8; ++i) {
      together[i].prompt = RandomTokens(lengths[i], 512, 10 + i);
      together[i].join_step = joins[i];
      together[i].max_new = 12;
    }
    ASSERT_TRUE(DriveGreedy(*backend, together).ok());
    for (int i = 0; i < 8; ++i) {
      std::vector<DrivenSequence> alone(1);
      alone[0].prompt = together[i].prompt;
      alone[0].max_new = 12;
      ASSERT_TRUE(DriveGreedy(*backend, alone, /*page_seed=*/99 + i).ok());
      EXPECT_EQ(alone[0].generated, together[i].generated) << "prompt " << i;
      ASSERT_EQ(alone[0].logits.size(), together[i].logits.size());
      for (size_t s = 0; s < alone[0].logits.size(); ++s) {
        EXPECT_LE(MaxAbsDiff(alone[0].logits[s], together[i].logits[s]), 1e-4f)
            << "prompt " << i << " step " << s;
      }
    }
  }
}

// Chunks of 1, 7 and 64 tokens and page sizes 1 and 16 give the one-shot logits.
TEST(CpuModelTest, ChunkedPrefillAndPageSizes) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  auto file = OpenOrDie(path);
  ASSERT_NE(file, nullptr);
  const std::vector<int32_t> prompt = RandomTokens(150, 512, 5);
  std::vector<std::vector<float>> reference;
  std::vector<int32_t> reference_ids;
  for (int64_t page_size : {16, 1}) {
    auto backend = MakeBackend(*file, "f32", page_size);
    ASSERT_NE(backend, nullptr);
    for (int64_t chunk : {int64_t{1} << 30, int64_t{1}, int64_t{7}, int64_t{64}}) {
      SCOPED_TRACE("page_size " + std::to_string(page_size) + " chunk " + std::to_string(chunk));
      std::vector<DrivenSequence> seqs(1);
      seqs[0].prompt = prompt;
      seqs[0].chunk = chunk;
      seqs[0].max_new = 6;
      ASSERT_TRUE(DriveGreedy(*backend, seqs).ok());
      if (reference.empty()) {
        reference = seqs[0].logits;
        reference_ids = seqs[0].generated;
        continue;
      }
      EXPECT_EQ(seqs[0].generated, reference_ids);
      for (size_t s = 0; s < reference.size(); ++s) {
        EXPECT_LE(MaxAbsDiff(seqs[0].logits[s], reference[s]), 1e-4f) << "step " << s;
      }
    }
  }
}

// `astr convert` output (HF folder, half-rotation RoPE) gives the GGUF's logits.
TEST(CpuModelTest, ConvertedModelMatchesGguf) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  const std::string out = testing::TempDir("convert_logits");
  const std::string cmd = testing::BinDir() + "/astr convert " + path + " " + out + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto gguf = OpenOrDie(path);
  auto hf = OpenOrDie(out);
  ASSERT_NE(gguf, nullptr);
  ASSERT_NE(hf, nullptr);
  EXPECT_EQ(hf->config().rope_layout, model::RopeLayout::kHalf);
  auto a = MakeBackend(*gguf, "f32", 16);
  auto b = MakeBackend(*hf, "f32", 16);
  std::vector<DrivenSequence> sa(1), sb(1);
  sa[0].prompt = sb[0].prompt = kGoldenPrompt;
  sa[0].max_new = sb[0].max_new = 16;
  ASSERT_TRUE(DriveGreedy(*a, sa).ok());
  ASSERT_TRUE(DriveGreedy(*b, sb).ok());
  EXPECT_EQ(sa[0].generated, sb[0].generated);
  for (size_t s = 0; s < sa[0].logits.size(); ++s) {
    EXPECT_LE(MaxAbsDiff(sa[0].logits[s], sb[0].logits[s]), 1e-4f) << "step " << s;
  }
}

// F16 weights load through the SIMD conversion; the same weights converted to f32 safetensors load
// through ModelFile::LoadF32. Both must give identical logits.
TEST(CpuModelTest, F16FastLoadMatchesGenericLoad) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/llama-2-tiny-random.gguf");
  const std::string out = testing::TempDir("convert_f16");
  const std::string cmd =
      testing::BinDir() + "/astr convert " + path + " " + out + " --dtype f32 > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto gguf = OpenOrDie(path);
  auto hf = OpenOrDie(out);
  ASSERT_NE(gguf, nullptr);
  ASSERT_NE(hf, nullptr);
  auto a = MakeBackend(*gguf, "f32", 16);
  auto b = MakeBackend(*hf, "f32", 16);
  std::vector<DrivenSequence> sa(1), sb(1);
  sa[0].prompt = sb[0].prompt = {1, 15043, 3186, 29892};
  sa[0].max_new = sb[0].max_new = 8;
  ASSERT_TRUE(DriveGreedy(*a, sa).ok());
  ASSERT_TRUE(DriveGreedy(*b, sb).ok());
  EXPECT_EQ(sa[0].generated, sb[0].generated);
  for (size_t s = 0; s < sa[0].logits.size(); ++s) {
    EXPECT_LE(MaxAbsDiff(sa[0].logits[s], sb[0].logits[s]), 1e-5f) << "step " << s;
  }
}

// Random HF-named Qwen2 (qkv bias), Qwen3 (q/k norm) and AstrAI models load from safetensors and
// run: finite logits and batch-invariant greedy output.
TEST(CpuModelTest, RandomHfModelsLoadAndRun) {
  for (const char* arch : {"qwen2", "qwen3", "llama", "mistral", "autoregressive_lm"}) {
    SCOPED_TRACE(arch);
    const std::string dir = testing::TempDir(std::string("hf_") + arch);
    const std::string cmd = testing::BinDir() + "/astr make-model --arch " + arch +
                            " --format hf --dtype bf16 --out " + dir +
                            " --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --ffn 96"
                            " --vocab 300 --seed 3 > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto file = OpenOrDie(dir);
    ASSERT_NE(file, nullptr);
    auto backend = MakeBackend(*file, "f32", 4);
    ASSERT_NE(backend, nullptr);
    std::vector<DrivenSequence> seqs(3);
    for (int i = 0; i < 3; ++i) {
      seqs[i].prompt = RandomTokens(5 + 7 * i, 300, i);
      seqs[i].max_new = 5;
      seqs[i].join_step = i;
    }
    ASSERT_TRUE(DriveGreedy(*backend, seqs).ok());
    for (const auto& s : seqs) {
      for (const auto& row : s.logits) {
        for (float v : row) ASSERT_TRUE(std::isfinite(v));
      }
    }
    std::vector<DrivenSequence> alone(1);
    alone[0].prompt = seqs[2].prompt;
    alone[0].max_new = 5;
    ASSERT_TRUE(DriveGreedy(*backend, alone).ok());
    EXPECT_EQ(alone[0].generated, seqs[2].generated);
  }
}

TEST(CpuModelTest, InvalidBatchIsAnErrorNotACrash) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  auto file = OpenOrDie(path);
  ASSERT_NE(file, nullptr);
  auto backend = MakeBackend(*file, "f32", 16);
  ASSERT_NE(backend, nullptr);
  std::vector<float> logits(16 * 512);
  StepBatch b;
  b.Clear();
  const int32_t tok = 600;  // outside the 512-token vocabulary
  const int32_t page = 0;
  b.Append(&tok, 1, 0, &page, 16, true);
  Status s = backend->Forward(b, logits.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token_ids[0]"), std::string::npos) << s.message();
  b.Clear();
  const int32_t ok_tok = 5, bad_page = 100000;
  b.Append(&ok_tok, 1, 0, &bad_page, 16, true);
  s = backend->Forward(b, logits.data());
  EXPECT_NE(s.message().find("kv_page_indices"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace astr

namespace astr {
namespace {

// A model whose sliding-window layers have page groups of their own (KvLayout) takes step batches
// that carry its window page tables; one without them is refused, naming them.
TEST(CpuModelTest, WindowPageTablesMustMatchThePool) {
  const std::string dir = testing::TempDir("hf_gemma3_window");
  const std::string cmd = testing::BinDir() +
                          "/astr make-model --arch gemma3 --format hf --dtype bf16 --out " + dir +
                          " --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --ffn 96"
                          " --vocab 300 --seed 3 --sliding-window 4 --sliding-window-pattern 2"
                          " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto file = OpenOrDie(dir);
  ASSERT_NE(file, nullptr);
  auto backend = MakeBackend(*file, "f32", 4);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->kv_window_tables(), 1);  // layer 0 slides, layer 1 is global
  std::vector<float> logits(300);
  const int32_t tokens[2] = {5, 6};
  const int32_t page = 0, window_page = 1;
  StepBatch b;
  b.Clear();
  b.Append(tokens, 2, 0, &page, 4, true);
  const Status s = backend->Forward(b, logits.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("0 window page tables, the pool has 1"), std::string::npos)
      << s.message();
  b.set_window_tables(1);
  b.Clear();
  b.Append(tokens, 2, 0, &page, 4, true, &window_page, 0);
  EXPECT_TRUE(backend->Forward(b, logits.data()).ok());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace astr
