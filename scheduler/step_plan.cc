#include "scheduler/step_plan.h"

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
  s.window_first = 0;
  s.window_pages.clear();
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
  e.new_window_pages.clear();
  e.sample = false;
  e.mask_follows = false;
  e.allowed_tokens.clear();
  return e;
}

}  // namespace astr::sched
