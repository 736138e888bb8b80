#include "worker/service/worker_loader.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "common/base/logging.h"
#include "common/base/token_ids.h"
#include "common/model/content_hash.h"
#include "common/model/gguf.h"
#include "common/model/model_file.h"
#include "common/text/tokenizer/tokenizer.h"
#include "worker/backend_loader.h"
#include "worker/kv_pool.h"
#include "worker/rope.h"

namespace astr {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string Format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, a);
  return buf;
}

// The model's tokenizer (GGUF vocabulary or tokenizer.json), or null when it has none.
std::shared_ptr<const tok::Tokenizer> LoadTokenizer(const model::ModelFile& file) {
  auto t = file.vocab() != nullptr ? tok::Tokenizer::FromGgufVocab(*file.vocab(), file.path())
                                   : tok::Tokenizer::Load(file.path());
  if (t.ok()) return *t;
  LOG(WARNING) << "no tokenizer (" << t.status().message()
               << "): EOS ids from the model config only";
  return nullptr;
}

// EOS ids as `astr run` finds them: the config's, then the tokenizer's (generation_config.json,
// GGUF EOS / EOT / EOM).
std::vector<int32_t> EosIds(const model::ModelConfig& config, const tok::Tokenizer* tokenizer) {
  std::vector<int32_t> ids;
  MergeTokenIds(&ids, config.eos_token_ids);
  if (tokenizer != nullptr) MergeTokenIds(&ids, tokenizer->eos_ids());
  return ids;
}

std::string ModelName(const model::ModelFile& file) {
  if (file.gguf() != nullptr) {
    auto name = file.gguf()->GetString("general.name", "");
    if (name.ok() && !name->empty()) return *name;
  }
  std::filesystem::path p(file.path());
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "folder/" -> "folder"
  return p.filename().string();
}

// Token ids the instant runner may return: not special, not a byte-fallback piece, not BOS or EOS.
std::vector<int32_t> OrdinaryIds(const model::ModelConfig& config, const tok::Tokenizer* tokenizer,
                                 const std::vector<int32_t>& eos) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < config.vocab_size; ++id) {
    if (id == config.bos_token_id || std::find(eos.begin(), eos.end(), id) != eos.end()) continue;
    if (tokenizer != nullptr && (id >= tokenizer->vocab_size() || tokenizer->IsSpecial(id) ||
                                 tokenizer->IsByteFallbackToken(id) || id == tokenizer->bos_id())) {
      continue;
    }
    ids.push_back(id);
  }
  return ids;
}

// The limits a CPU backend would have with these options, without allocating its pool.
StatusOr<RunnerLimits> InstantLimits(const model::ModelConfig& c, const BackendOptions& o) {
  if (o.page_size < 1) return InvalidArgumentError("--page-size must be >= 1");
  if (o.max_batch_tokens < 1) return InvalidArgumentError("--max-batch-tokens must be >= 1");
  if (o.max_sample_rows < 1) return InvalidArgumentError("--max-batch must be >= 1");
  int64_t pages = o.num_pages;
  if (pages <= 0) {
    pages = KvPool::PagesForBytes(o.kv_cache_bytes, c.num_layers, o.page_size, c.num_kv_heads,
                                  c.head_dim);
    if (pages < 1) {
      return InvalidArgumentError("kv cache of " + std::to_string(o.kv_cache_bytes) +
                                  " bytes holds no page of " + std::to_string(o.page_size) +
                                  " tokens");
    }
  }
  return RunnerLimits{.num_pages = pages,
                      .page_size = o.page_size,
                      .max_batch_tokens = o.max_batch_tokens,
                      .max_sample_rows = o.max_sample_rows};
}

StatusOr<std::unique_ptr<StepRunner>> MakeRunner(const WorkerConfig& config,
                                                 const model::ModelFile& file,
                                                 const tok::Tokenizer* tokenizer,
                                                 const std::vector<int32_t>& eos) {
  const model::ModelConfig& c = file.config();
  if (config.backend == "instant") {
    ASTR_RETURN_IF_ERROR(c.Validate());
    ASTR_ASSIGN_OR_RETURN(RunnerLimits limits, InstantLimits(c, config.backend_options));
    LOG(INFO) << "instant backend: no weights loaded, no KV pool allocated (benchmarks only)";
    return MakeInstantRunner(c, limits, OrdinaryIds(c, tokenizer, eos));
  }
  const auto start = std::chrono::steady_clock::now();
  ASTR_ASSIGN_OR_RETURN(BackendKind kind, ParseBackendKind(config.backend, "--backend"));
  std::string note;
  LOG(INFO) << "loading weights (" << BackendKindName(kind) << " backend)";
  ASTR_ASSIGN_OR_RETURN(auto backend, CreateBackend(file, config.backend_options, kind, &note));
  if (!note.empty()) LOG(INFO) << "not using CUDA: " << note << "; running on the CPU backend";
  LOG(INFO) << Format("weights loaded in %.2f s", SecondsSince(start)) << " (" << backend->name()
            << " backend)";
  // The CUDA backend holds bf16 weights whatever --dtype says (--dtype is the CPU backend's).
  const std::string dtype = backend->name() == "cpu" ? config.backend_options.weight_dtype : "bf16";
  return MakeBackendRunner(std::move(backend), dtype);
}

void FillModelInfo(const model::ModelFile& file, const std::string& hash, v1::InfoResponse* info) {
  const model::ModelConfig& c = file.config();
  info->set_model_path(file.path());
  info->set_model_name(ModelName(file));
  info->set_architecture(c.architecture);
  info->set_content_hash(hash);
  info->set_vocab_size(static_cast<int32_t>(c.vocab_size));
  info->set_hidden_size(static_cast<int32_t>(c.hidden_size));
  info->set_num_layers(static_cast<int32_t>(c.num_layers));
  info->set_num_heads(static_cast<int32_t>(c.num_heads));
  info->set_num_kv_heads(static_cast<int32_t>(c.num_kv_heads));
  info->set_head_dim(static_cast<int32_t>(c.head_dim));
}

void FillPoolInfo(const WorkerExecutor& executor, v1::InfoResponse* info) {
  const StepRunner& runner = executor.runner();
  const RunnerLimits& l = runner.limits();
  info->set_max_context_tokens(static_cast<int32_t>(executor.max_context_tokens()));
  info->set_dtype(runner.dtype());
  info->set_backend(runner.name());
  info->set_num_pages(l.num_pages);
  info->set_page_size(static_cast<int32_t>(l.page_size));
  info->set_kv_window_tables(static_cast<int32_t>(l.kv_window_tables));
  info->set_kv_window_tokens(l.kv_window_tokens);
  info->set_longrope_original_context(LongRopeOriginalContext(runner.config()));
  info->set_max_batch(static_cast<int32_t>(l.max_sample_rows));
  info->set_max_batch_tokens(static_cast<int32_t>(l.max_batch_tokens));
  info->set_weight_version(0);
}

}  // namespace

Status CheckWorkerBackend(const std::string& value, const std::string& source) {
  if (value == "instant" || ParseBackendKind(value, source).ok()) return OkStatus();
  return InvalidArgumentError(source + ": '" + value + "' is not one of " + kWorkerBackends);
}

StatusOr<LoadedWorker> LoadWorker(const WorkerConfig& config) {
  ASTR_RETURN_IF_ERROR(CheckWorkerBackend(config.backend, "--backend"));
  ASTR_ASSIGN_OR_RETURN(auto file, model::ModelFile::Open(config.model_path));
  LOG(INFO) << "model: " << file->Describe();
  const auto hash_start = std::chrono::steady_clock::now();
  ASTR_ASSIGN_OR_RETURN(std::string hash, model::ModelContentHash(config.model_path));
  LOG(INFO) << "content hash " << hash << Format(" (%.2f s)", SecondsSince(hash_start));
  const auto tokenizer = LoadTokenizer(*file);
  const std::vector<int32_t> eos = EosIds(file->config(), tokenizer.get());
  ASTR_ASSIGN_OR_RETURN(auto runner, MakeRunner(config, *file, tokenizer.get(), eos));

  LoadedWorker worker;
  worker.executor = std::make_unique<WorkerExecutor>(std::move(runner));
  worker.updates = std::make_unique<WeightUpdates>(config.model_path, file->config());
  FillModelInfo(*file, hash, &worker.info);
  FillPoolInfo(*worker.executor, &worker.info);
  for (int32_t id : eos) worker.info.add_eos_token_ids(id);
  const RunnerLimits& l = worker.executor->runner().limits();
  LOG(INFO) << "KV pool: " << l.num_pages << " pages of " << l.page_size << " tokens ("
            << l.num_pages * l.page_size << " token slots); max batch " << l.max_sample_rows
            << " sequences / " << l.max_batch_tokens << " tokens";
  return worker;
}

}  // namespace astr
