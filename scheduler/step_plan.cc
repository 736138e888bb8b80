#include "scheduler/step_plan.h"

#include "astr/v1/worker.pb.h"

namespace astr::sched {

void PlannedStep::Clear() {
  step_id = 0;
  release.clear();
  masks_for_step = 0;
  num_starts_ = 0;
  num_entries_ = 0;
}

PlannedStart& PlannedStep::AddStart() {
  if (num_starts_ == starts_.size()) starts_.emplace_back();
  PlannedStart& s = starts_[num_starts_++];
  s.live_id = 0;
  s.params = nullptr;
  s.sample_index = 0;
  s.tokens.clear();
  s.num_prompt_tokens = 0;
  s.num_cached_tokens = 0;
  s.pages.clear();
  s.score_from = 0;
  return s;
}

PlannedEntry& PlannedStep::AddEntry() {
  if (num_entries_ == entries_.size()) entries_.emplace_back();
  PlannedEntry& e = entries_[num_entries_++];
  e.live_id = 0;
  e.start_position = 0;
  e.num_tokens = 0;
  e.new_pages.clear();
  e.sample = false;
  e.mask_follows = false;
  e.allowed_tokens.clear();
  return e;
}

void ToProto(const PlannedStep& step, v1::StepPlan* out) {
  out->Clear();
  out->set_step_id(step.step_id);
  out->set_masks_for_step(step.masks_for_step);
  out->mutable_release()->Add(step.release.begin(), step.release.end());
  for (const PlannedStart& s : step.starts()) {
    v1::SequenceStart* start = out->add_start();
    start->set_live_id(s.live_id);
    if (s.params != nullptr) *start->mutable_params() = *s.params;
    start->set_sample_index(s.sample_index);
    start->mutable_tokens()->Add(s.tokens.begin(), s.tokens.end());
    start->set_num_prompt_tokens(s.num_prompt_tokens);
    start->set_num_cached_tokens(s.num_cached_tokens);
    start->mutable_pages()->Add(s.pages.begin(), s.pages.end());
    start->set_score_from(s.score_from);
  }
  for (const PlannedEntry& e : step.entries()) {
    v1::StepEntry* entry = out->add_entries();
    entry->set_live_id(e.live_id);
    entry->set_start_position(e.start_position);
    entry->set_num_tokens(e.num_tokens);
    entry->mutable_new_pages()->Add(e.new_pages.begin(), e.new_pages.end());
    entry->set_sample(e.sample);
    entry->set_mask_follows(e.mask_follows);
    if (!e.allowed_tokens.empty()) entry->set_allowed_tokens(e.allowed_tokens);
  }
}

}  // namespace astr::sched
