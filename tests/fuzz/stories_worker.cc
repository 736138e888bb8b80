#include "tests/fuzz/stories_worker.h"

#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/fuzz_support.h"
#include "worker/backend.h"
#include "worker/service/step_runner.h"

namespace astr::fuzz {
namespace {

StoriesWorker* Make() {
  auto* w = new StoriesWorker;
  w->path = SharedFileOrSkip("models/stories260K.gguf");
  auto file = model::ModelFile::Open(w->path);
  if (!file.ok()) {
    std::fprintf(stderr, "fuzz: %s\n", file.status().ToString().c_str());
    std::abort();
  }
  w->file = std::move(*file);
  BackendOptions o;
  o.weight_dtype = "f32";
  o.threads = 1;  // libFuzzer runs one input at a time; more threads only add noise
  o.page_size = 4;
  o.num_pages = 64;
  o.max_batch_tokens = 64;
  o.max_sample_rows = 4;
  auto backend = CreateCpuBackend(*w->file, o);
  if (!backend.ok()) {
    std::fprintf(stderr, "fuzz: %s\n", backend.status().ToString().c_str());
    std::abort();
  }
  w->executor = std::make_unique<WorkerExecutor>(MakeBackendRunner(std::move(*backend), "f32"));
  return w;
}

}  // namespace

StoriesWorker& FuzzStoriesWorker() {
  static StoriesWorker* worker = Make();
  return *worker;
}

}  // namespace astr::fuzz
