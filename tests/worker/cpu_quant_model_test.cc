// The CPU backend on block-quantized GGUF files (astr make-model writes each type; the K-quants and
// Q5 types as random blocks): the weights stay quantized, the logits stay within a stated tolerance
// of the dequantized-f32 reference (--dtype f32), a llama.cpp-style mix of types in one stacked
// projection works, and logits are batch-independent.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/model/model_file.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/support/model_driver.h"
#include "tests/support/test_util.h"
#include "worker/backend.h"
#include "worker/backends/cpu/cpu_weights.h"

namespace astr {
namespace {

using testing::DriveGreedy;
using testing::DrivenSequence;

constexpr int64_t kVocab = 512;

// hidden 256 and ffn 512 are whole K-quant super-blocks.
std::string MakeModel(const std::string& dtype, const std::string& dtype_of = "",
                      bool tie = false) {
  const std::string dir = testing::TempDir("quant_model");
  const std::string out = dir + "/model-" + dtype + (tie ? "-tied" : "") + ".gguf";
  const std::string cmd = testing::BinDir() + "/astr make-model --format gguf --dtype " + dtype +
                          (dtype_of.empty() ? "" : " --dtype-of " + dtype_of) +
                          (tie ? " --tie" : "") + " --out " + out +
                          " --hidden 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --vocab " +
                          std::to_string(kVocab) + " --seed 7 --init-std 0.05 2>&1";
  const testing::CommandResult r = testing::RunCommand(cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.out;
  return out;
}

std::unique_ptr<Backend> MakeBackend(const model::ModelFile& file, const std::string& dtype) {
  BackendOptions o;
  o.weight_dtype = dtype;
  o.threads = 2;
  o.page_size = 16;
  o.num_pages = 256;
  o.max_batch_tokens = 256;
  o.max_sample_rows = 16;
  auto b = CreateCpuBackend(file, o);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(*b) : nullptr;
}

std::vector<int32_t> RandomTokens(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(3 + rng() % (kVocab - 3));
  return t;
}

// Logits of the first generated token after each of 6 prompts, for one weight dtype.
std::vector<std::vector<float>> PromptLogits(Backend& backend) {
  std::vector<std::vector<float>> out;
  for (uint32_t p = 0; p < 6; ++p) {
    std::vector<DrivenSequence> seqs(1);
    seqs[0].prompt = RandomTokens(9 + 7 * p, 100 + p);
    seqs[0].max_new = 1;
    EXPECT_TRUE(DriveGreedy(backend, seqs).ok());
    out.push_back(seqs[0].logits.at(0));
  }
  return out;
}

double Std(const std::vector<float>& v) {
  double s = 0, q = 0;
  for (float x : v) s += x, q += static_cast<double>(x) * x;
  return std::sqrt(q / v.size() - (s / v.size()) * (s / v.size()));
}

// The quantized path differs from the f32 reference only by the int8 activations (and the f16
// rounding of the K-quants' scale products): on these 2-layer models the logits' error is at
// most 5% of their spread (standard deviation) in RMS and 20% at worst. Measured on 6 prompts:
// RMS 1.3-1.9% and worst 5.8-6.9% for Q8_0 / Q4_x / Q5_x (32-element activation blocks), 2.3-3.2%
// and 7.3-11.2% for the K-quants (256-element Q8_K blocks, as llama.cpp).
void ExpectNearReference(const std::string& path) {
  auto file = model::ModelFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto quant = MakeBackend(**file, "bf16");
  auto ref = MakeBackend(**file, "f32");
  ASSERT_NE(quant, nullptr);
  ASSERT_NE(ref, nullptr);
  const auto q = PromptLogits(*quant), r = PromptLogits(*ref);
  int same_top = 0;
  for (size_t p = 0; p < q.size(); ++p) {
    const double spread = Std(r[p]);
    ASSERT_GT(spread, 1e-3);
    double worst = 0, sq = 0;
    for (size_t i = 0; i < q[p].size(); ++i) {
      const double d = (q[p][i] - r[p][i]) / spread;
      worst = std::max(worst, std::fabs(d));
      sq += d * d;
    }
    const double rms = std::sqrt(sq / q[p].size());
    EXPECT_LE(rms, 0.05) << "prompt " << p;
    EXPECT_LE(worst, 0.2) << "prompt " << p;
    const auto top = [](const std::vector<float>& v) {
      return std::max_element(v.begin(), v.end()) - v.begin();
    };
    same_top += top(q[p]) == top(r[p]);
  }
  EXPECT_GE(same_top, 5);
}

class CpuQuantModelTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CpuQuantModelTest, StaysQuantizedAndNearTheF32Reference) {
  const std::string path = MakeModel(GetParam());
  auto file = model::ModelFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  // Every projection is held in the kernels' quantized form, in about the file's bytes.
  cpu::ThreadPool pool(2);
  auto w = LoadCpuWeights(**file, cpu::WeightType::kBF16, &pool, false);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (const CpuLayerWeights& l : w->layers) {
    for (const CpuLinear* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      ASSERT_EQ(lin->parts.size(), 1u);
      EXPECT_EQ(lin->parts[0].type(), cpu::WeightType::kQuant);
    }
  }
  EXPECT_EQ(w->lm_head.parts.at(0).type(), cpu::WeightType::kQuant);
  EXPECT_FALSE(w->embed_quant.empty());
  EXPECT_TRUE(w->embed_bf16.empty());
  auto f32 = LoadCpuWeights(**file, cpu::WeightType::kF32, &pool, false);
  ASSERT_TRUE(f32.ok());
  EXPECT_LT(w->bytes() * 3, f32->bytes());  // at most 10 bits per weight against 32
  ExpectNearReference(path);
}

// A tied model of `dtype`, its weights loaded as bf16 (quantized types kept), and the file's
// embedding table in f32.
struct TiedModel {
  std::unique_ptr<model::ModelFile> file;
  CpuWeights weights;
  std::vector<float> table;  // [kVocab, hidden]
  int64_t hidden = 0;
};
void LoadTied(const std::string& dtype, TiedModel* t) {
  auto file = model::ModelFile::Open(MakeModel(dtype, "", /*tie=*/true));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  t->file = std::move(*file);
  t->hidden = t->file->config().hidden_size;
  ASSERT_TRUE(t->file->LoadF32("embed", {kVocab, t->hidden}, &t->table).ok());
  cpu::ThreadPool pool(2);
  auto w = LoadCpuWeights(*t->file, cpu::WeightType::kBF16, &pool, false);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  t->weights = std::move(*w);
  // Held once: no copy of the table beside the output projection.
  EXPECT_TRUE(t->weights.embed_from_head);
  EXPECT_TRUE(t->weights.embed_quant.empty());
  EXPECT_TRUE(t->weights.embed_bf16.empty());
}

// A tied table is held once, as the output projection: every embedding row gathered from it is the
// file's row exactly (the dequantization of its blocks).
TEST_P(CpuQuantModelTest, TiedEmbeddingIsGatheredFromTheOutputProjection) {
  TiedModel t;
  ASSERT_NO_FATAL_FAILURE(LoadTied(GetParam(), &t));
  std::vector<int32_t> ids(kVocab);
  for (int32_t i = 0; i < kVocab; ++i) ids[i] = i;
  std::vector<float> got(t.table.size());
  t.weights.GatherEmbeddings(ids.data(), kVocab, t.hidden, got.data());
  int64_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != t.table[i];
  EXPECT_EQ(differ, 0) << "of " << got.size() << " values; first " << got[0] << " vs "
                       << t.table[0];
  // The untied model of the same type keeps the file's blocks for the gather.
  auto untied = model::ModelFile::Open(MakeModel(GetParam()));
  ASSERT_TRUE(untied.ok());
  cpu::ThreadPool pool(2);
  auto u = LoadCpuWeights(**untied, cpu::WeightType::kBF16, &pool, false);
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->embed_from_head);
}

INSTANTIATE_TEST_SUITE_P(EveryBlockType, CpuQuantModelTest,
                         ::testing::Values("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k",
                                           "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param);
                         });

// A float table (F16 here) tied: held once as the bf16 output projection, gathered as the file's
// values rounded to bf16, as the separate bf16 table held them.
TEST(CpuQuantModelMixTest, TiedFloatEmbeddingIsGatheredFromTheOutputProjection) {
  TiedModel t;
  ASSERT_NO_FATAL_FAILURE(LoadTied("f16", &t));
  const int64_t hidden = t.hidden;
  std::vector<int32_t> ids = {0, 1, 17, kVocab - 1};
  std::vector<float> got(ids.size() * hidden);
  t.weights.GatherEmbeddings(ids.data(), static_cast<int64_t>(ids.size()), hidden, got.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<uint16_t> bits(hidden);
    std::vector<float> rounded(hidden);
    cpu::F32ToBf16(t.table.data() + ids[i] * hidden, bits.data(), hidden);
    cpu::Bf16ToF32(bits.data(), rounded.data(), hidden);
    for (int64_t j = 0; j < hidden; ++j) {
      ASSERT_EQ(got[i * hidden + j], rounded[j]) << "row " << ids[i] << " col " << j;
    }
  }
}

// llama-quantize's Q4_K_M keeps v_proj, down_proj and the output in Q6_K: the stacked q/k/v
// projection then holds two matrices (Q4_K q and k, Q6_K v).
TEST(CpuQuantModelMixTest, MixedTypesInOneProjection) {
  const std::string path = MakeModel("q4_k", "v_proj=q6_k,down_proj=q6_k,lm_head=q6_k");
  auto file = model::ModelFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->Raw("layers.0.v_proj")->dtype, model::DType::kQ6_K);
  EXPECT_EQ((*file)->Raw("layers.0.q_proj")->dtype, model::DType::kQ4_K);
  cpu::ThreadPool pool(2);
  auto w = LoadCpuWeights(**file, cpu::WeightType::kBF16, &pool, false);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->layers[0].qkv.parts.size(), 2u);
  EXPECT_EQ(w->layers[0].qkv.parts[0].n(), 256 + 128);  // q [4 x 64] and k [2 x 64]
  EXPECT_EQ(w->layers[0].qkv.parts[1].n(), 128);        // v
  EXPECT_EQ(w->layers[0].qkv.n(), 512);
  ExpectNearReference(path);
}

// Sequences that join a running batch get the logits they get alone, bit for bit.
TEST(CpuQuantModelMixTest, BatchIndependent) {
  const std::string path = MakeModel("q4_k", "v_proj=q6_k,down_proj=q6_k");
  auto file = model::ModelFile::Open(path);
  ASSERT_TRUE(file.ok());
  auto backend = MakeBackend(**file, "bf16");
  ASSERT_NE(backend, nullptr);
  const int64_t lengths[5] = {1, 5, 17, 40, 3};
  const int64_t joins[5] = {0, 0, 2, 3, 6};
  std::vector<DrivenSequence> together(5);
  for (int i = 0; i < 5; ++i) {
    together[i].prompt = RandomTokens(lengths[i], 10 + i);
    together[i].join_step = joins[i];
    together[i].max_new = 8;
  }
  ASSERT_TRUE(DriveGreedy(*backend, together).ok());
  for (int i = 0; i < 5; ++i) {
    std::vector<DrivenSequence> alone(1);
    alone[0].prompt = together[i].prompt;
    alone[0].max_new = 8;
    ASSERT_TRUE(DriveGreedy(*backend, alone, /*page_seed=*/50 + i).ok());
    EXPECT_EQ(alone[0].generated, together[i].generated) << "prompt " << i;
    ASSERT_EQ(alone[0].logits.size(), together[i].logits.size());
    for (size_t s = 0; s < alone[0].logits.size(); ++s) {
      EXPECT_EQ(alone[0].logits[s], together[i].logits[s]) << "prompt " << i << " step " << s;
    }
  }
}

}  // namespace
}  // namespace astr

namespace astr {
namespace {

// A bad --dtype-of names the item and why, and writes nothing.
TEST(CpuQuantModelMixTest, MakeModelRefusesBadDtypeOf) {
  const std::string dir = testing::TempDir("quant_model_bad");
  struct Case {
    const char* flags;
    const char* message;
  };
  const Case cases[] = {
      {"--dtype-of v_proj", "--dtype-of: 'v_proj' is not NAME=TYPE"},
      {"--dtype-of =q6_k", "--dtype-of: '=q6_k' is not NAME=TYPE"},
      {"--dtype-of v_proj=q7_k", "unknown dtype 'q7_k'"},
      {"--format hf --dtype-of v_proj=q6_k", "--dtype-of needs --format gguf"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    const std::string out = dir + "/bad.gguf";
    const testing::CommandResult r = testing::RunCommand(
        testing::BinDir() + "/astr make-model " +
        (std::string(c.flags).find("--format") == std::string::npos ? "--format gguf " : "") +
        c.flags + " --out " + out + " 2>&1");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.out.find(c.message), std::string::npos) << r.out;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

}  // namespace
}  // namespace astr
