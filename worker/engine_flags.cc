#include "worker/engine_flags.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "common/base/logging.h"
#include "common/base/token_ids.h"
#include "worker/backend_loader.h"

namespace astr {

void SamplingFlags::Register(FlagSet* fs) {
  fs->Int("max-tokens", &max_tokens, "Most tokens to generate.");
  fs->Double("temperature", &temperature, "Sampling temperature; 0 = greedy.");
  fs->Int("top-k", &top_k, "Keep the k most likely tokens; 0 = off.");
  fs->Double("top-p", &top_p, "Nucleus sampling mass in (0, 1]; 1 = off.");
  fs->Double("min-p", &min_p, "Drop tokens below min_p * p(most likely); 0 = off.");
  fs->Double("repetition-penalty", &repetition_penalty,
             "HF repetition penalty over prompt + output (> 0; 1 = off).");
  fs->Double("frequency-penalty", &frequency_penalty, "OpenAI frequency penalty over the output.");
  fs->Double("presence-penalty", &presence_penalty, "OpenAI presence penalty over the output.");
  fs->Int("penalty-window", &penalty_window, "Penalties see only the last N tokens; 0 = all.");
  fs->Int("seed", &seed, "Seed of the counter-based RNG (same seed -> same tokens).");
  fs->String("stop-token-ids", &stop_token_ids, "Comma-separated token ids that end generation.");
  fs->String("logit-bias", &logit_bias, "Additive biases as id:bias pairs, e.g. 13:-100,42:2.5.");
  fs->Bool("ignore-eos", &ignore_eos, "Keep generating after EOS.");
  fs->Int("min-tokens", &min_tokens, "EOS and stop ids are masked until this many tokens.");
  fs->Int("logprobs", &logprobs, "Top-n alternatives per token to return (0..20).");
  fs->String("logprobs-mode", &logprobs_mode,
             "raw: log-softmax of the model's logits; processed: after bias, penalties and "
             "temperature.");
}

namespace {

// Flags are parsed as int64; the sampler's fields are int32. Out of range is an error, not a wrap.
Status CheckInt32(const char* flag, int64_t v) {
  if (v < INT32_MIN || v > INT32_MAX) {
    return InvalidArgumentError(std::string("--") + flag + ": " + std::to_string(v) +
                                " is out of range");
  }
  return OkStatus();
}

}  // namespace

StatusOr<SamplingParams> SamplingFlags::ToParams(const model::ModelFile& file) const {
  const model::ModelConfig& c = file.config();
  ASTR_ASSIGN_OR_RETURN(SamplingParams p, ToParamsWithoutModel());
  MergeTokenIds(&p.eos_token_ids, c.eos_token_ids);
  ASTR_RETURN_IF_ERROR(ValidateSamplingParams(p, c.vocab_size));
  return p;
}

StatusOr<SamplingParams> SamplingFlags::ToParamsWithoutModel() const {
  for (const auto& [flag, v] : {std::pair<const char*, int64_t>{"max-tokens", max_tokens},
                                {"top-k", top_k},
                                {"penalty-window", penalty_window},
                                {"min-tokens", min_tokens},
                                {"logprobs", logprobs}}) {
    ASTR_RETURN_IF_ERROR(CheckInt32(flag, v));
  }
  SamplingParams p;
  p.max_tokens = static_cast<int32_t>(max_tokens);
  p.temperature = static_cast<float>(temperature);
  p.top_k = static_cast<int32_t>(top_k);
  p.top_p = static_cast<float>(top_p);
  p.min_p = static_cast<float>(min_p);
  p.repetition_penalty = static_cast<float>(repetition_penalty);
  p.frequency_penalty = static_cast<float>(frequency_penalty);
  p.presence_penalty = static_cast<float>(presence_penalty);
  p.penalty_window = static_cast<int32_t>(penalty_window);
  p.seed = static_cast<uint64_t>(seed);
  p.ignore_eos = ignore_eos;
  p.min_tokens = static_cast<int32_t>(min_tokens);
  p.logprobs = static_cast<int32_t>(logprobs);
  if (logprobs_mode == "raw") {
    p.logprobs_mode = LogprobsMode::kRaw;
  } else if (logprobs_mode == "processed") {
    p.logprobs_mode = LogprobsMode::kProcessed;
  } else {
    return InvalidArgumentError("--logprobs-mode: expected raw or processed, got '" +
                                logprobs_mode + "'");
  }
  if (!stop_token_ids.empty()) {
    ASTR_ASSIGN_OR_RETURN(auto ids, ParseIntList(stop_token_ids, "stop-token-ids"));
    for (int64_t id : ids) {
      ASTR_RETURN_IF_ERROR(CheckInt32("stop-token-ids", id));
      p.stop_token_ids.push_back(static_cast<int32_t>(id));
    }
  }
  if (!logit_bias.empty()) {
    std::stringstream ss(logit_bias);
    std::string item;
    while (std::getline(ss, item, ',')) {
      const auto colon = item.find(':');
      char* end = nullptr;
      const long long id = colon == std::string::npos ? 0 : std::strtoll(item.c_str(), &end, 10);
      bool ok = colon != std::string::npos && colon > 0 && end == item.c_str() + colon;
      const char* bias_text = ok ? item.c_str() + colon + 1 : "";
      char* bias_end = nullptr;
      const float bias = std::strtof(bias_text, &bias_end);
      ok = ok && *bias_text != '\0' && *bias_end == '\0' && CheckInt32("logit-bias", id).ok();
      if (!ok) return InvalidArgumentError("--logit-bias: expected id:bias, got '" + item + "'");
      p.logit_bias[static_cast<int32_t>(id)] = bias;
    }
  }
  return p;
}

void EngineFlags::RegisterBackend(FlagSet* fs) {
  fs->Int("threads", &threads, "CPU threads; 0 = all cores.");
  fs->String("dtype", &dtype,
             "Weight dtype on the CPU backend: bf16 (float tensors held as bf16; a GGUF file's "
             "block-quantized tensors stay quantized) or f32 (every tensor dequantized to f32).");
  fs->Int("page-size", &page_size, "Tokens per KV page.");
  fs->Int("num-pages", &num_pages, "KV pages; 0 = as many as --kv-cache-mb holds.");
  fs->Int("kv-cache-mb", &kv_cache_mb, "KV cache size in MiB (when --num-pages is 0).");
  fs->Int("max-batch-tokens", &max_batch_tokens, "Most tokens one step may carry.");
  fs->String("cuda-graphs", &cuda_graphs,
             "CUDA backend: on = capture each decode batch-size bucket (1, 2, 4, ... up to the "
             "max batch) as a CUDA graph and replay it; off = launch every kernel eagerly.");
  fs->String("cuda-sampling", &cuda_sampling,
             "CUDA backend: on = draw tokens on the GPU (only token ids and logprobs come back); "
             "off = copy the logits to the host and draw there.");
}

void EngineFlags::Register(FlagSet* fs) {
  fs->String("backend", &backend,
             "auto (CUDA where a usable GPU and the CUDA plugin exist, else cpu), cpu, or cuda "
             "(an error if it cannot run). Default: $ASTR_BACKEND if set, else auto.");
  RegisterBackend(fs);
  fs->Int("max-running", &max_running, "Most sequences in one step.");
  fs->Int("prefill-chunk", &prefill_chunk, "Most prompt tokens of one sequence per step.");
  fs->Bool("prefix-cache", &prefix_cache,
           "Reuse the K/V of prompt prefixes computed before (the scheduler's radix prefix cache), "
           "e.g. across the --n samples of one prompt. Off by default, so that benchmarks compute "
           "every prefill they report.");
}

Status EngineFlags::Validate() const {
  if (threads < 0) return InvalidArgumentError("--threads must be >= 0");
  if (page_size < 1) return InvalidArgumentError("--page-size must be >= 1");
  if (num_pages < 0) return InvalidArgumentError("--num-pages must be >= 0");
  if (kv_cache_mb < 1 || kv_cache_mb > (int64_t{1} << 30)) {
    return InvalidArgumentError("--kv-cache-mb must be in [1, 2^30]");
  }
  if (max_batch_tokens < 1) return InvalidArgumentError("--max-batch-tokens must be >= 1");
  if (max_running < 1) return InvalidArgumentError("--max-running must be >= 1");
  if (prefill_chunk < 1) return InvalidArgumentError("--prefill-chunk must be >= 1");
  if (cuda_graphs != "on" && cuda_graphs != "off") {
    return InvalidArgumentError("--cuda-graphs must be on or off, got '" + cuda_graphs + "'");
  }
  if (cuda_sampling != "on" && cuda_sampling != "off") {
    return InvalidArgumentError("--cuda-sampling must be on or off, got '" + cuda_sampling + "'");
  }
  return OkStatus();
}

BackendOptions EngineFlags::BackendOpts() const {
  BackendOptions o;
  o.weight_dtype = dtype;
  o.threads = static_cast<int>(threads);
  o.page_size = page_size;
  o.num_pages = num_pages;
  o.kv_cache_bytes = kv_cache_mb << 20;
  o.max_batch_tokens = max_batch_tokens;
  o.max_sample_rows = std::max<int64_t>(1, max_running);
  o.cuda_graphs = cuda_graphs == "on";
  o.device_sampling = cuda_sampling == "on";
  return o;
}

EngineOptions EngineFlags::EngineOpts() const {
  EngineOptions o;
  o.max_running = max_running;
  o.prefill_chunk = prefill_chunk;
  o.prefix_cache = prefix_cache;
  return o;
}

StatusOr<std::unique_ptr<Backend>> EngineFlags::CreateBackend(const model::ModelFile& file) const {
  ASTR_RETURN_IF_ERROR(Validate());
  std::string source;
  const std::string value = RequestedBackend(backend, !backend.empty(), &source);
  ASTR_ASSIGN_OR_RETURN(BackendKind kind, ParseBackendKind(value, source));
  std::string note;
  auto created = astr::CreateBackend(file, BackendOpts(), kind, &note);
  // On a machine with no NVIDIA driver the CPU is the expected choice: say nothing. With a driver,
  // or a plugin named by ASTR_CUDA_PLUGIN, not using it is worth a line.
  const char* plugin = std::getenv("ASTR_CUDA_PLUGIN");
  if (created.ok() && !note.empty() &&
      (NvidiaDriverPresent() || (plugin != nullptr && *plugin != '\0'))) {
    LOG(WARNING) << "not using CUDA: " << note << "; running on the CPU backend";
  }
  return created;
}

}  // namespace astr
