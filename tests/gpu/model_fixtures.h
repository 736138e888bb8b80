// What the whole-model GPU cases share: model specs (a shared file, or a random model that
// `astr make-model` writes), the backend options they run under, prompts, and a driver for
// hand-built steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/model_file.h"
#include "worker/backend.h"
#include "worker/step_batch.h"

namespace astr::gputest {

struct ModelSpec {
  std::string name;       // unique per process: random models are written under it
  std::string make_args;  // astr make-model flags; empty = a shared file
  std::string shared;     // file under the shared folder
};

// Opens the model, generating it first for random specs (once per process, under a name that
// holds the process id so concurrent runs do not collide).
StatusOr<std::unique_ptr<model::ModelFile>> OpenModel(const ModelSpec& spec);

// 512 pages of 16 tokens per page group (1 + window_tables: KvLayout, WindowTables), 1024 rows and
// 16 sample rows per step.
BackendOptions Options(bool graphs, bool device_sampling = true, int32_t window_tables = 0);
// The model's window page tables (KvLayout::For(config).window_tables).
int32_t WindowTables(const model::ModelFile& file);

// `len` token ids below `vocab`, different for each salt.
std::vector<int32_t> Prompt(int64_t len, int64_t vocab, int64_t salt);

// Hand-driven steps: sequence i owns 32 token pages from page i * 32 * (1 + window_tables) on, and
// after them their window ids (Backend::kv_window_tables per page, all held). Each step feeds some
// sequences a chunk of their not-yet-computed tokens; an entry samples when its chunk reaches the
// sequence's end.
struct Driver {
  int64_t page_size = 16;
  int32_t window_tables = 0;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int64_t> num_computed;
  struct Feed {
    size_t seq;
    int64_t chunk;  // tokens to feed (clipped to what is left)
  };
  void Add(std::vector<int32_t> prompt);
  // The step; *sampled gets the sequences of its sample rows, in row order.
  StepBatch Step(const std::vector<Feed>& feeds, std::vector<size_t>* sampled);
  // Every sequence with work, all of it.
  StepBatch Next(std::vector<size_t>* sampled);
  // The first n sequences, one token each (they must each have one pending).
  StepBatch Decode(size_t n, std::vector<size_t>* sampled);
  // Appends the argmax of each sample row's logits to its sequence.
  void Accept(const std::vector<size_t>& sampled, const std::vector<float>& logits, int64_t vocab);
};

}  // namespace astr::gputest
