// PlannedStep -> worker.proto's StepPlan (the one place the plan meets the wire format).
#include "astr/v1/worker.pb.h"
#include "common/grpc/sampling_proto.h"
#include "scheduler/step_plan.h"

namespace astr::sched {

void ToProto(const PlannedStep& step, v1::StepPlan* out) {
  out->Clear();
  out->set_step_id(step.step_id);
  out->set_masks_for_step(step.masks_for_step);
  out->mutable_release()->Add(step.release.begin(), step.release.end());
  for (const PlannedStart& s : step.starts()) {
    v1::SequenceStart* start = out->add_start();
    start->set_live_id(s.live_id);
    if (s.params != nullptr) rpc::ToWorkerProto(*s.params, start->mutable_params());
    start->set_sample_index(s.sample_index);
    start->mutable_tokens()->Add(s.tokens.begin(), s.tokens.end());
    start->set_num_prompt_tokens(s.num_prompt_tokens);
    start->set_num_cached_tokens(s.num_cached_tokens);
    start->mutable_pages()->Add(s.pages.begin(), s.pages.end());
    start->set_window_first_page(s.window_first);
    start->mutable_window_pages()->Add(s.window_pages.begin(), s.window_pages.end());
    start->set_score_from(s.score_from);
  }
  for (const PlannedEntry& e : step.entries()) {
    v1::StepEntry* entry = out->add_entries();
    entry->set_live_id(e.live_id);
    entry->set_start_position(e.start_position);
    entry->set_num_tokens(e.num_tokens);
    entry->mutable_new_pages()->Add(e.new_pages.begin(), e.new_pages.end());
    entry->mutable_new_window_pages()->Add(e.new_window_pages.begin(), e.new_window_pages.end());
    entry->set_sample(e.sample);
    entry->set_mask_follows(e.mask_follows);
    if (!e.allowed_tokens.empty()) entry->set_allowed_tokens(e.allowed_tokens);
  }
}

}  // namespace astr::sched
