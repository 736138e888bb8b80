// The worker's executor: the live sequence table and one step at a time (see DESIGN.md "The step
// contract" and worker.proto). The scheduler plans and owns page placement; the executor validates
// every plan against its state, then applies it: release -> start -> entries, one ragged batch,
// one StepRunner::Run, and one sampled token per sampling entry appended to its sequence.
//
// Not thread-safe: one thread (the one Step stream) drives Execute / Reset. counters() may be read
// from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "astr/v1/worker.pb.h"
#include "common/base/scored_rows.h"
#include "common/base/status.h"
#include "worker/sampler.h"
#include "worker/service/step_runner.h"
#include "worker/step_batch.h"

namespace astr {

// Converts the wire parameters to the sampler's and validates them against `vocab_size`; the error
// names the field without a prefix (e.g. "top_p must be in (0, 1], got 0").
StatusOr<SamplingParams> SamplingParamsFromProto(const v1::WorkerSamplingParams& p,
                                                 int64_t vocab_size);

class WorkerExecutor {
 public:
  struct Counters {
    int64_t live_sequences = 0;
    int64_t pages_in_use = 0;  // distinct pages referenced by live sequences
    int64_t steps = 0;         // plans executed (refused ones do not count)
  };

  explicit WorkerExecutor(std::unique_ptr<StepRunner> runner);

  // Executes one plan. INVALID_ARGUMENT: the plan was refused and nothing of it was applied (the
  // message names the field and index, e.g. "entries[3].new_pages[0]: page 9999 out of range
  // [0, 512)"). Any other error comes from the runner: the state no longer matches the KV pool and
  // the caller must Reset(). On success `result` holds one SampledToken per sampling entry, in
  // entry order, the prompt tokens scored in this step, and the timings.
  //
  // A plan with entries whose mask follows (StepEntry.mask_follows) reads the masks message with
  // `read_next` after its forward pass: the next message of the step stream. A masks message
  // that does not match (step id, entries) or a stream that ends first is an error of the second
  // kind.
  using ReadNext = std::function<bool(v1::StepPlan*)>;
  Status Execute(const v1::StepPlan& plan, v1::StepResult* result, const ReadNext& read_next = {});
  // Drops every live sequence (a step stream ended).
  void Reset();

  Counters counters() const;
  const StepRunner& runner() const { return *runner_; }
  StepRunner& mutable_runner() { return *runner_; }
  // The weight version results report (StepResult.weight_version); set between steps by the
  // weight-update path. Readable from any thread.
  int64_t weight_version() const { return weight_version_.load(std::memory_order_relaxed); }
  void set_weight_version(int64_t version) {
    weight_version_.store(version, std::memory_order_relaxed);
  }
  // Most positions one sequence may use: the model's context, else what the pool holds.
  int64_t max_context_tokens() const { return max_context_tokens_; }

 private:
  struct Sequence {
    std::vector<int32_t> context;  // prompt + generated, every token known
    int64_t num_prompt_tokens = 0;
    int64_t num_computed = 0;    // leading tokens whose K/V are in the pool
    std::vector<int32_t> pages;  // in sequence order
    // Window page ids (RunnerLimits::kv_window_tables per page) of pages [window_first, ...):
    // those behind its next query's window are let go at each plan, as the scheduler lets them go.
    std::vector<int32_t> window_pages;
    int64_t window_first = 0;
    bool rope_long = false;  // LongRoPE: started holding more than the original context
    std::unique_ptr<SequenceSampler> sampler;
    // Prompt scoring: tokens [score_from, num_prompt_tokens) are scored as their rows are
    // computed (0 = none); the scorer's context is every token before the next one scored, and
    // it is dropped once the last one is.
    int64_t score_from = 0;
    std::unique_ptr<PromptScorer> scorer;
    uint64_t listed_in_plan = 0;  // validation scratch: serial of the last plan listing it
  };
  // What validation needs to know of a sequence an entry refers to, live or started in the plan.
  struct SeqView {
    int64_t known_tokens = 0;
    int64_t num_computed = 0;
    int64_t num_pages = 0;
    int64_t num_prompt_tokens = 0;
    int64_t score_from = 0;
  };
  // A prompt token scored in this step.
  struct ScoredToken {
    uint64_t live_id = 0;
    Sequence* seq = nullptr;
    int64_t position = 0;
  };

  // Checks the whole plan against the current state without changing it
  // (executor_plan_validation.cc).
  Status Validate(const v1::StepPlan& plan);
  Status ValidateStart(const v1::SequenceStart& start, int index);
  Status ValidateEntry(const v1::StepEntry& entry, int index, const SeqView& seq);
  // Every page of `pages` is in the pool; the error names parent[index].field[j].
  Status ValidatePages(const google::protobuf::RepeatedField<int32_t>& pages, const char* parent,
                       int index, const char* field) const;

  void Release(uint64_t live_id);
  void Start(const v1::SequenceStart& start);
  // Queues the scored rows of the entry just appended to batch_ (its rows from `first_row` on,
  // positions [begin, end)).
  void AddScoredRows(uint64_t live_id, Sequence* seq, int64_t begin, int64_t end,
                     int64_t first_row);
  // The step's scores (out[i] for scored_[i]) into `result`; drops scorers that are done.
  void EmitPromptScores(std::span<const SampleResult> out, v1::StepResult* result);
  void AddPage(Sequence* seq, int32_t page);
  void AddWindowPage(Sequence* seq, int32_t page);
  void Unref(int32_t page);
  // Lets go of seq's window pages that no query from `position` on reads.
  void DropBehindWindow(Sequence* seq, int64_t position);
  // A validated StepEntry.allowed_tokens as host words in mask_storage_ (null when empty).
  const uint32_t* CopyMask(const std::string& bytes);
  // What is wrong with a mask (size, no token allowed); "" when nothing.
  std::string MaskProblem(const std::string& mask) const;
  // The masks message of `plan` (read with read_next) into samples_[late_masks_[k]].allowed.
  Status ReadLateMasks(const v1::StepPlan& plan, const ReadNext& read_next);
  void PublishCounters();

  std::unique_ptr<StepRunner> runner_;
  RunnerLimits limits_;
  int64_t vocab_size_ = 0;
  int64_t max_context_tokens_ = 0;
  int64_t longrope_original_ = 0;  // LongRopeOriginalContext of the model (0 = not LongRoPE)
  std::unordered_map<uint64_t, Sequence> live_;
  std::vector<uint32_t> page_refs_;  // [num_pages] live sequences holding each page
  int64_t pages_in_use_ = 0;
  int64_t steps_ = 0;

  // Per-step scratch, reused so that a step allocates little once warm.
  std::unordered_set<uint64_t> plan_released_;
  std::unordered_map<uint64_t, int> plan_started_;  // live_id -> index in plan.start
  uint64_t plan_serial_ = 0;                        // counts Validate calls
  std::vector<uint8_t> start_listed_;               // per plan.start: already listed in entries
  StepBatch batch_;
  std::vector<SampleRequest> samples_;
  std::vector<Sequence*> sample_seqs_;
  std::vector<int32_t> score_rows_;  // batch rows of scores_, appended to sample_rows last
  std::vector<RowScore> scores_;
  std::vector<ScoredToken> scored_;  // per scores_ entry
  std::vector<SampleResult> sample_out_;
  std::vector<uint32_t> mask_storage_;  // [max_sample_rows][mask words], sized at the first mask
  size_t masks_used_ = 0;               // rows of mask_storage_ this step
  std::vector<size_t> late_masks_;      // samples_ whose mask follows the plan, in entry order

  std::atomic<int64_t> live_counter_{0};
  std::atomic<int64_t> pages_counter_{0};
  std::atomic<int64_t> steps_counter_{0};
  std::atomic<int64_t> weight_version_{0};
};

}  // namespace astr
