// astr-bench: prefill and decode throughput of the in-process engine on one model, printed as JSON.
//
//   astr-bench --model model.gguf --threads 2 --batch-sizes 1,4,16,64 --prompt-len 128
//
// Prefill: one sequence of --prompt-len random tokens in a single step (after a warm-up step).
// Decode: B sequences with --decode-context tokens of prompt each; once all are decoding, the mean
// time of --decode-steps steps (greedy sampling included) gives ms/step and aggregate tok/s.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "common/base/flags.h"
#include "common/base/logging.h"
#include "common/model/model_file.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/backend_loader.h"
#include "worker/engine.h"
#include "worker/engine_flags.h"

namespace astr {
namespace {

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<int32_t> RandomPrompt(int64_t len, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(3, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> p(len);
  for (auto& t : p) t = dist(rng);
  return p;
}

GenerationRequest Request(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = static_cast<int32_t>(max_tokens);
  r.params.ignore_eos = true;
  return r;
}

StatusOr<nlohmann::json> BenchPrefill(Engine& engine, int64_t prompt_len, int reps) {
  const int64_t vocab = engine.backend().config().vocab_size;
  std::vector<double> times;
  for (int rep = 0; rep < reps + 1; ++rep) {  // first run is warm-up
    ASTR_RETURN_IF_ERROR(
        engine.Submit(Request(RandomPrompt(prompt_len, vocab, 100 + rep), 1)).status());
    std::vector<GenerationResult> done;
    const double t0 = NowMs();
    ASTR_RETURN_IF_ERROR(engine.Step(&done));
    const double ms = NowMs() - t0;
    if (!engine.Idle())
      return InternalError("prefill did not finish in one step; raise --max-batch-tokens");
    if (rep > 0) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  const double ms = times[times.size() / 2];
  return nlohmann::json{
      {"tokens", prompt_len}, {"ms", ms}, {"tok_per_s", prompt_len * 1000.0 / ms}};
}

StatusOr<nlohmann::json> BenchDecode(Engine& engine, int64_t batch, int64_t context,
                                     int64_t steps) {
  const int64_t vocab = engine.backend().config().vocab_size;
  for (int64_t b = 0; b < batch; ++b) {
    ASTR_RETURN_IF_ERROR(
        engine.Submit(Request(RandomPrompt(context, vocab, 7 + b), steps + 4)).status());
  }
  std::vector<GenerationResult> done;
  // Prefill everything, until a step is pure decode of all `batch` sequences (the warm-up step).
  do {
    ASTR_RETURN_IF_ERROR(engine.Step(&done));
    if (engine.Idle()) return InternalError("sequences finished before decoding was measured");
  } while (engine.last_step().sampled != batch || engine.last_step().tokens != batch);
  std::vector<double> times;
  double overhead = 0;  // step time outside the backend's forward pass and sampling
  for (int64_t s = 0; s < steps; ++s) {
    const double t0 = NowMs();
    ASTR_RETURN_IF_ERROR(engine.Step(&done));
    times.push_back(NowMs() - t0);
    overhead += times.back() - engine.last_step().forward_ms;
  }
  while (!engine.Idle()) ASTR_RETURN_IF_ERROR(engine.Step(&done));
  double total = 0;
  for (double t : times) total += t;
  const double ms = total / steps;
  std::sort(times.begin(), times.end());
  return nlohmann::json{{"batch", batch},
                        {"context", context},
                        {"steps", steps},
                        {"ms_per_step", ms},
                        {"ms_per_step_median", times[times.size() / 2]},
                        // Planning (the scheduler's planner) and batch assembly, per step.
                        {"engine_overhead_ms_per_step", overhead / steps},
                        {"tok_per_s", batch * 1000.0 / ms}};
}

// GB/s of `threads` threads each summing its share of a `mb` MiB buffer (touched first), best of 5.
double ReadBandwidth(int64_t mb, int64_t threads) {
  const size_t n = static_cast<size_t>(mb) << 17;  // uint64 words
  // On transparent huge pages where the kernel allows them, as the packed weights are (gemm.cc).
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (n * sizeof(uint64_t) + kHuge - 1) / kHuge * kHuge;
  std::unique_ptr<uint64_t, decltype(&std::free)> mem(
      static_cast<uint64_t*>(std::aligned_alloc(kHuge, bytes)), &std::free);
  madvise(mem.get(), bytes, MADV_HUGEPAGE);  // advice only
  uint64_t* const buf = mem.get();
  std::fill(buf, buf + n, uint64_t{1});
  cpu::ThreadPool pool(threads > 0
                           ? static_cast<int>(threads)
                           : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  std::vector<uint64_t> sums(pool.size());
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = NowMs();
    pool.Run([&](int t, int nt) {
      const size_t b = n * t / nt, e = n * (t + 1) / nt;
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (size_t i = b; i + 4 <= e; i += 4)
        s0 += buf[i], s1 += buf[i + 1], s2 += buf[i + 2], s3 += buf[i + 3];
      sums[t] = s0 + s1 + s2 + s3;
    });
    best = std::max(best, n * 8.0 / ((NowMs() - t0) * 1e6));
  }
  uint64_t total = 0;
  for (uint64_t s : sums) total += s;
  if (total == 0) LOG(WARNING) << "read bandwidth probe summed nothing";
  return best;
}

int Main(int argc, const char* const* argv) {
  FlagSet fs("astr-bench",
             "Prefill tok/s and decode ms/step per batch size of the in-process CPU engine; "
             "prints one JSON object.");
  std::string model, batch_sizes = "1,4,16,64";
  int64_t prompt_len = 128, decode_context = 32, decode_steps = 16, reps = 3, read_mb = 0;
  fs.String("model", &model, "Model file or folder.", /*required=*/true);
  fs.String("batch-sizes", &batch_sizes, "Comma-separated decode batch sizes.");
  fs.Int("prompt-len", &prompt_len, "Prefill benchmark prompt length.");
  fs.Int("prefill-reps", &reps, "Timed prefill repetitions (median reported).");
  fs.Int("decode-context", &decode_context, "Prompt tokens of each decoding sequence.");
  fs.Int("decode-steps", &decode_steps, "Timed decode steps per batch size.");
  fs.Int("read-bandwidth-mb", &read_mb,
         "Also measure the machine's read bandwidth: --threads threads streaming this many MiB "
         "(best of 5, before and after the model runs); 0 = skip.");
  EngineFlags ef;
  ef.Register(&fs);
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  (void)InitLogging(argv[0], LogOptions());
  auto fail = [](const Status& s) {
    LOG(ERROR) << s.ToString();
    return 1;
  };
  auto sizes = ParseIntList(batch_sizes, "batch-sizes");
  if (!sizes.ok()) return fail(sizes.status());
  for (int64_t b : *sizes) {
    if (b < 1) return fail(InvalidArgumentError("--batch-sizes: each size must be >= 1"));
  }
  if (prompt_len < 1 || reps < 1 || decode_context < 1 || decode_steps < 1) {
    return fail(InvalidArgumentError(
        "--prompt-len, --prefill-reps, --decode-context and --decode-steps must be >= 1"));
  }
  auto file = model::ModelFile::Open(model);
  if (!file.ok()) return fail(file.status());
  ef.max_running =
      std::max<int64_t>(ef.max_running, *std::max_element(sizes->begin(), sizes->end()));
  ef.max_batch_tokens = std::max(ef.max_batch_tokens, prompt_len);
  ef.prefill_chunk = std::max(ef.prefill_chunk, prompt_len);
  const double t0 = NowMs();
  auto backend = ef.CreateBackend(**file);
  if (!backend.ok()) return fail(backend.status());
  const double load_ms = NowMs() - t0;
  Engine engine(std::move(*backend), ef.EngineOpts());

  nlohmann::json out;
  out["model"] = model;
  out["describe"] = (*file)->Describe();
  out["threads"] = ef.threads;
  out["weight_dtype"] = ef.dtype;
  out["backend"] = engine.backend().name();
  // Which GPU the figures come from (an emulated device's are no GPU figures).
  if (out["backend"] == "cuda") out["device"] = CudaDeviceName();
  out["cuda_graphs"] = ef.cuda_graphs;
  out["isa"] = cpu::IsaName(cpu::ActiveIsa());
  out["load_ms"] = load_ms;
  const size_t weight_bytes = engine.backend().weight_bytes();
  out["weight_bytes"] = weight_bytes;
  // A batch-1 step reads every weight but the rows it gathers of an untied embedding table (one
  // row of it) and, in MoE layers, num_experts_per_tok of num_experts experts; a larger batch
  // reads as many experts as its tokens pick (not counted).
  const model::ModelConfig& mc = engine.backend().config();
  const size_t expert_bytes = engine.backend().expert_weight_bytes();
  const size_t gathered_bytes = engine.backend().gathered_weight_bytes();
  const bool moe = mc.num_experts > 0 && expert_bytes > 0;
  double b1_read_bytes = static_cast<double>(weight_bytes - expert_bytes - gathered_bytes);
  if (gathered_bytes > 0 && mc.vocab_size > 0) {
    b1_read_bytes += static_cast<double>(gathered_bytes) / static_cast<double>(mc.vocab_size);
  }
  b1_read_bytes += moe ? static_cast<double>(expert_bytes) *
                             static_cast<double>(mc.num_experts_per_tok) /
                             static_cast<double>(mc.num_experts)
                       : static_cast<double>(expert_bytes);
  if (moe) out["expert_weight_bytes"] = expert_bytes;
  out["gathered_weight_bytes"] = gathered_bytes;
  out["batch1_read_bytes"] = b1_read_bytes;
  if (read_mb > 0) out["read_gb_per_s_before"] = ReadBandwidth(read_mb, ef.threads);
  auto prefill = BenchPrefill(engine, prompt_len, static_cast<int>(reps));
  if (!prefill.ok()) return fail(prefill.status());
  out["prefill"] = *prefill;
  nlohmann::json decode = nlohmann::json::array();
  for (int64_t b : *sizes) {
    auto r = BenchDecode(engine, b, decode_context, decode_steps);
    if (!r.ok()) return fail(r.status());
    if (weight_bytes > 0 && (!moe || b == 1)) {  // each step reads those weights once
      (*r)["weight_gb_per_s"] = b1_read_bytes / ((*r)["ms_per_step"].get<double>() * 1e6);
    }
    decode.push_back(*r);
    LOG(INFO) << "batch " << b << ": " << std::fixed << std::setprecision(2)
              << (*r)["ms_per_step"].get<double>() << " ms/step";
  }
  out["decode"] = decode;
  if (read_mb > 0) out["read_gb_per_s_after"] = ReadBandwidth(read_mb, ef.threads);
  out["free_pages_after"] = engine.free_pages();
  out["total_pages"] = engine.total_pages();
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace astr

int main(int argc, char** argv) { return astr::Main(argc, argv); }
