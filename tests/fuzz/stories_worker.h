// The worker the worker-side targets (step_plan_fuzz, weight_manifest_fuzz) drive in-process, made
// once: stories260K.gguf on the CPU backend (f32, one thread) under a WorkerExecutor, with a small
// pool (64 pages of 4 tokens), at most 64 tokens and 4 sample rows a step.
#pragma once

#include <memory>
#include <string>

#include "common/model/model_file.h"
#include "worker/service/executor.h"

namespace astr::fuzz {

struct StoriesWorker {
  std::string path;
  std::unique_ptr<model::ModelFile> file;  // outlives the backend that read it
  std::unique_ptr<WorkerExecutor> executor;
};

// Exits with kSkipExitCode (fuzz_support.h) when the model is missing.
StoriesWorker& FuzzStoriesWorker();

}  // namespace astr::fuzz
