// One worker step as the planner decides it (DESIGN.md "The step contract"), in plain C++: the
// planner fills it, and the worker connection serializes it into worker.proto's StepPlan (ToProto),
// so that what is planned does not depend on how it travels. Its fields mirror StepPlan's.
//
// Reused across steps: Clear keeps every element and its buffers, and AddStart / AddEntry hand
// out the kept ones first, so a steady state allocates nothing. A reference they return is valid
// until the next call of the same one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/base/sampling_params.h"

namespace astr::v1 {
class StepPlan;
}  // namespace astr::v1

namespace astr::sched {

// A sequence that becomes live (SequenceStart).
struct PlannedStart {
  uint64_t live_id = 0;
  // The request's sampling parameters; it outlives the plan's serialization.
  const SamplingParams* params = nullptr;
  uint64_t sample_index = 0;
  std::vector<int32_t> tokens;  // prompt + generated so far
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;  // the reused prefix
  std::vector<int32_t> pages;
  // Window page ids (PagePool::window) of pages [window_first, pages.size()), page-major.
  int32_t window_first = 0;
  std::vector<int32_t> window_pages;
  int32_t score_from = 0;  // 0 = no prompt scoring
};

// Work for one live sequence (StepEntry).
struct PlannedEntry {
  uint64_t live_id = 0;
  int32_t start_position = 0;
  int32_t num_tokens = 0;
  std::vector<int32_t> new_pages;
  std::vector<int32_t> new_window_pages;  // the window ids of new_pages, page-major
  bool sample = false;
  bool mask_follows = false;
  std::string allowed_tokens;  // the constraint's mask bytes; empty: every token
};

class PlannedStep {
 public:
  void Clear();
  PlannedStart& AddStart();
  PlannedEntry& AddEntry();

  uint64_t step_id = 0;
  std::vector<uint64_t> release;  // live ids that end
  // Non-zero: not a step but the late masks of step `masks_for_step` (StepPlan.masks_for_step).
  uint64_t masks_for_step = 0;

  std::span<const PlannedStart> starts() const { return {starts_.data(), num_starts_}; }
  std::span<const PlannedEntry> entries() const { return {entries_.data(), num_entries_}; }

 private:
  std::vector<PlannedStart> starts_;  // [0, num_starts_) in use; the rest kept for reuse
  std::vector<PlannedEntry> entries_;
  size_t num_starts_ = 0;
  size_t num_entries_ = 0;
};

// The wire form (worker.proto), into a reused message (step_plan_proto.cc: not part of the
// protobuf-free planner core).
void ToProto(const PlannedStep& step, v1::StepPlan* out);

}  // namespace astr::sched
