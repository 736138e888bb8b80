// Whole-model cases: the CUDA backend against the CPU backend (greedy ids, logits), CUDA graph
// replay against eager launches (bit-exact at every bucket), and no device allocation in decode.
// Models: stories260K (real; head_dim 8, so the generic attention kernel) and random models made
// by `astr make-model` with head_dim 64 and 128 (the tensor-core kernels).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/model_file.h"
#include "tests/gpu/op_test.h"
#include "worker/backends/cuda/cuda_backend.h"
#include "worker/engine.h"

namespace astr::gputest {
namespace {

struct ModelSpec {
  std::string name;
  std::string make_args;  // astr make-model flags; empty = a shared file
  std::string shared;     // file under the shared folder
};

const std::vector<ModelSpec>& Models() {
  static const std::vector<ModelSpec> models = {
      {"stories260K", "", "models/stories260K.gguf"},
      {"random-llama-d64",
       "--arch llama --hidden 256 --layers 2 --heads 4 --kv-heads 1 --ffn 512 "
       "--vocab 1000 --seed 11",
       ""},
      {"random-qwen2-d128",
       "--arch qwen2 --hidden 512 --layers 2 --heads 4 --kv-heads 2 --ffn 768 "
       "--vocab 1500 --seed 12",
       ""},
      {"random-qwen3-d128",
       "--arch qwen3 --hidden 256 --layers 2 --heads 4 --kv-heads 2 "
       "--head-dim 128 --ffn 512 --vocab 1200 --seed 13",
       ""},
  };
  return models;
}

// Opens the model, generating it first for random specs (once per process).
StatusOr<std::unique_ptr<ModelFile>> OpenModel(const ModelSpec& spec) {
  if (spec.make_args.empty()) return ModelFile::Open(SharedPath(spec.shared));
  const char* tmp = std::getenv("TMPDIR");
  const std::string path =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/astr-gpu-" + spec.name + ".gguf";
  const std::string cmd = std::string(ASTR_BIN_DIR) + "/astr make-model " + spec.make_args +
                          " --dtype bf16 --out " + path + " > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return InternalError("failed: " + cmd);
  return ModelFile::Open(path);
}

BackendOptions Options(bool graphs, bool device_sampling = true) {
  BackendOptions o;
  o.weight_dtype = "bf16";
  o.page_size = 16;
  o.num_pages = 512;
  o.max_batch_tokens = 1024;
  o.max_sample_rows = 16;
  o.cuda_graphs = graphs;
  o.device_sampling = device_sampling;
  o.threads = 2;
  return o;
}

std::vector<int32_t> Prompt(int64_t len, int64_t vocab, int64_t salt) {
  std::vector<int32_t> p(len);
  for (int64_t i = 0; i < len; ++i) p[i] = static_cast<int32_t>((i * 37 + salt * 101 + 1) % vocab);
  return p;
}

// Greedy generation on both backends (the CUDA one drawing on the GPU or on the host, with its
// logprobs in both cases); ids must agree up to the first position where the CPU's top
// two logprobs are closer than `margin` (a near tie that bf16 rounding may flip).
CaseResult GreedyMatches(const ModelSpec& spec, bool device_sampling) {
  auto file = OpenModel(spec);
  if (!file.ok()) return Fail(file.status().ToString());
  auto cpu = CreateCpuBackend(**file, Options(false));
  auto gpu = cuda::CudaBackend::Create(**file, Options(true, device_sampling));
  if (!cpu.ok() || !gpu.ok()) return Fail((cpu.ok() ? gpu.status() : cpu.status()).ToString());
  const int64_t vocab = (*file)->config().vocab_size;
  Engine cpu_engine(std::move(*cpu), EngineOptions{});
  Engine gpu_engine(std::unique_ptr<Backend>(gpu->release()), EngineOptions{});
  const std::vector<int64_t> lens = {1, 5, 17, 40, 123};
  for (int64_t i = 0; i < static_cast<int64_t>(lens.size()); ++i) {
    GenerationRequest r;
    r.prompt = Prompt(lens[i], vocab, i);
    r.params.temperature = 0.0f;
    r.params.max_tokens = 40;
    r.params.ignore_eos = true;
    r.params.logprobs = 2;
    for (Engine* e : {&cpu_engine, &gpu_engine}) {
      if (auto id = e->Submit(r); !id.ok()) return Fail(id.status().ToString());
    }
  }
  auto want = cpu_engine.RunToCompletion();
  auto got = gpu_engine.RunToCompletion();
  if (!want.ok() || !got.ok()) return Fail((want.ok() ? got.status() : want.status()).ToString());
  constexpr double kMargin = 0.05;  // logprob gap below which bf16 rounding may flip the argmax
  int compared = 0, ties = 0;
  for (size_t s = 0; s < want->size(); ++s) {
    const auto& w = (*want)[s];
    const auto& g = (*got)[s];
    for (size_t t = 0; t < w.tokens.size() && t < g.tokens.size(); ++t) {
      const double gap = w.top[t].size() >= 2 ? w.top[t][0].logprob - w.top[t][1].logprob : 1e9;
      if (w.tokens[t] != g.tokens[t]) {
        if (gap < kMargin) {
          ++ties;
          break;  // the sequences diverge legitimately from here on
        }
        return Fail("sequence " + std::to_string(s) + " token " + std::to_string(t) + ": cpu " +
                    std::to_string(w.tokens[t]) + " cuda " + std::to_string(g.tokens[t]) +
                    " (cpu top-2 gap " + std::to_string(gap) + ")");
      }
      ++compared;
    }
  }
  CaseResult r = Pass(0.0, 0.0);
  r.detail = std::to_string(compared) + " tokens identical" +
             (ties > 0 ? ", " + std::to_string(ties) + " sequence(s) stopped at a near tie" : "");
  return r;
}

// One StepBatch builder for hand-driven steps: sequence i owns pages [i * 32, i * 32 + 32).
struct Driver {
  int64_t page_size = 16;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int64_t> computed;
  std::vector<int32_t> Pages(size_t i) const {
    std::vector<int32_t> p(32);
    for (int j = 0; j < 32; ++j) p[j] = static_cast<int32_t>(i * 32 + j);
    return p;
  }
  // Everything not yet computed, every sequence sampling its last row.
  StepBatch Next() {
    StepBatch b;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const auto pages = Pages(i);
      b.Append(tokens[i].data() + computed[i], tokens[i].size() - computed[i], computed[i],
               pages.data(), page_size, true);
      computed[i] = static_cast<int64_t>(tokens[i].size());
    }
    return b;
  }
};

// Graph replay equals eager launches bit for bit at every bucket (both backends see the same
// steps).
CaseResult GraphReplayBitExact(const ModelSpec& spec) {
  auto file = OpenModel(spec);
  if (!file.ok()) return Fail(file.status().ToString());
  const int64_t vocab = (*file)->config().vocab_size;
  for (int bucket : cuda::GraphBuckets(16)) {
    auto eager = cuda::CudaBackend::Create(**file, Options(false));
    auto graph = cuda::CudaBackend::Create(**file, Options(true));
    if (!eager.ok() || !graph.ok()) {
      return Fail((eager.ok() ? graph.status() : eager.status()).ToString());
    }
    Driver d;
    for (int i = 0; i < bucket; ++i) {
      d.tokens.push_back(Prompt(3 + 11 * i, vocab, i));
      d.computed.push_back(0);
    }
    std::vector<float> a(bucket * vocab), b(bucket * vocab);
    for (int step = 0; step < 4; ++step) {  // prefill, live decode + capture, then replays
      const StepBatch batch = d.Next();
      if (Status s = (*eager)->Forward(batch, a.data()); !s.ok()) return Fail(s.ToString());
      if (Status s = (*graph)->Forward(batch, b.data()); !s.ok()) return Fail(s.ToString());
      if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) {
        return Fail("bucket " + std::to_string(bucket) + " step " + std::to_string(step) +
                    ": graph logits differ from eager");
      }
      for (int i = 0; i < bucket; ++i) {
        const float* row = a.data() + int64_t{i} * vocab;
        d.tokens[i].push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
      }
    }
    if ((*graph)->graphs().replays() < 2) {
      return Fail("bucket " + std::to_string(bucket) + ": the graph was not replayed");
    }
  }
  return Pass(0.0, 0.0);
}

// After one decode step per bucket (capture), further decode steps allocate no device memory.
CaseResult NoAllocationInDecode(const ModelSpec& spec) {
  auto file = OpenModel(spec);
  if (!file.ok()) return Fail(file.status().ToString());
  auto backend = cuda::CudaBackend::Create(**file, Options(true));
  if (!backend.ok()) return Fail(backend.status().ToString());
  const int64_t vocab = (*file)->config().vocab_size;
  std::vector<float> logits(16 * vocab);
  Driver d;
  for (int i = 0; i < 16; ++i) {
    d.tokens.push_back(Prompt(2 + i, vocab, i));
    d.computed.push_back(0);
  }
  auto run = [&](int n) -> Status {
    Driver sub;
    sub.tokens.assign(d.tokens.begin(), d.tokens.begin() + n);
    sub.computed.assign(d.computed.begin(), d.computed.begin() + n);
    const StepBatch batch = sub.Next();
    ASTR_RETURN_IF_ERROR((*backend)->Forward(batch, logits.data()));
    for (int i = 0; i < n; ++i) {
      d.computed[i] = sub.computed[i];
      d.tokens[i].push_back(static_cast<int32_t>((d.tokens[i].size() * 7) % vocab));
    }
    return OkStatus();
  };
  if (Status s = run(16); !s.ok()) return Fail(s.ToString());  // prefill all
  for (int n : {1, 2, 3, 4, 7, 8, 9, 16}) {  // first decode at every bucket: capture
    if (Status s = run(n); !s.ok()) return Fail(s.ToString());
  }
  cudaDeviceSynchronize();
  size_t free_before = 0, total = 0;
  cudaMemGetInfo(&free_before, &total);
  const int64_t allocations = cuda::DeviceAllocator::allocations();
  for (int step = 0; step < 24; ++step) {
    if (Status s = run(1 + (step * 5) % 16); !s.ok()) return Fail(s.ToString());
  }
  cudaDeviceSynchronize();
  size_t free_after = 0;
  cudaMemGetInfo(&free_after, &total);
  if (cuda::DeviceAllocator::allocations() != allocations) {
    return Fail("the backend allocated device memory during decode");
  }
  if (free_after != free_before) {
    return Fail("free device memory moved during decode: " + std::to_string(free_before) + " -> " +
                std::to_string(free_after));
  }
  return Pass(0.0, 0.0);
}

// First-step logits (a prefill of 3 prompts) close to the CPU backend's.
CaseResult LogitsClose(const ModelSpec& spec) {
  auto file = OpenModel(spec);
  if (!file.ok()) return Fail(file.status().ToString());
  auto cpu = CreateCpuBackend(**file, Options(false));
  auto gpu = cuda::CudaBackend::Create(**file, Options(false));
  if (!cpu.ok() || !gpu.ok()) return Fail((cpu.ok() ? gpu.status() : cpu.status()).ToString());
  const int64_t vocab = (*file)->config().vocab_size;
  Driver d;
  for (int i = 0; i < 3; ++i) {
    d.tokens.push_back(Prompt(1 + 40 * i, vocab, i));
    d.computed.push_back(0);
  }
  const StepBatch batch = d.Next();
  std::vector<float> want(3 * vocab), got(3 * vocab);
  if (Status s = (*cpu)->Forward(batch, want.data()); !s.ok()) return Fail(s.ToString());
  if (Status s = (*gpu)->Forward(batch, got.data()); !s.ok()) return Fail(s.ToString());
  // bf16 activations on the GPU (the CPU keeps f32): allow 3% of the logits' range.
  double range = 0.0;
  for (float x : want) range = std::max(range, std::fabs(static_cast<double>(x)));
  return Compare(got, want, 0.03 * std::max(1.0, range));
}

void RegisterModelCases() {
  for (const ModelSpec& m : Models()) {
    RegisterCase({"model_logits", m.name, [m] { return LogitsClose(m); }});
    RegisterCase({"model_greedy", m.name, [m] { return GreedyMatches(m, true); }});
    RegisterCase({"model_greedy_host_sampling", m.name, [m] { return GreedyMatches(m, false); }});
    RegisterCase({"graph_replay", m.name, [m] { return GraphReplayBitExact(m); }});
  }
  RegisterCase(
      {"decode_no_alloc", "random-llama-d64", [] { return NoAllocationInDecode(Models()[1]); }});
  RegisterCase(
      {"decode_no_alloc", "stories260K", [] { return NoAllocationInDecode(Models()[0]); }});
}

}  // namespace

ASTR_GPU_CASES(RegisterModelCases);

}  // namespace astr::gputest
