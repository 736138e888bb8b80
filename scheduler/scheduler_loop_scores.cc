// SchedulerLoop, prompt scoring: the scores a step's result carries (StepResult.prompt_scores)
// become kPromptLogprob events of their requests. Sample 0 of a request with logprob_start scores
// its prompt during its prefill; a restart (preemption, another worker) scores only what was not
// delivered (Sequence::PromptScoreFrom), and scores for a live id that is no longer the
// sequence's are dropped like its tokens, so each position is delivered exactly once, in order.
#include <string>

#include "scheduler/scheduler_loop.h"

namespace astr::sched {

Status SchedulerLoop::ApplyPromptScores(const v1::StepResult& result, const PlanOutcome& out) {
  int expected = 0;
  for (const PlanOutcome::ScoredRun& run : out.scoring) expected += run.count;
  bool consistent = result.prompt_scores_size() == expected;
  for (int k = 0, r = 0; consistent && r < static_cast<int>(out.scoring.size()); ++r) {
    const PlanOutcome::ScoredRun& run = out.scoring[r];
    for (int32_t j = 0; consistent && j < run.count; ++j, ++k) {
      const v1::PromptTokenScore& score = result.prompt_scores(k);
      consistent = score.live_id() == run.live_id && score.position() == run.first_position + j;
    }
  }
  if (!consistent) {
    return UnavailableError("answered step " + std::to_string(out.step_id) + " with " +
                            std::to_string(result.prompt_scores_size()) +
                            " prompt scores, not the " + std::to_string(expected) +
                            " positions its entries score");
  }
  int k = 0;
  for (const PlanOutcome::ScoredRun& run : out.scoring) {
    Sequence* seq = run.seq;
    RequestState* r = seq->request;
    // Preempted, moved, finished or cancelled since the plan: a restart scores these again.
    const bool current = seq->live_id == run.live_id && seq->state == Sequence::State::kRunning;
    for (int32_t j = 0; j < run.count; ++j, ++k) {
      const v1::PromptTokenScore& score = result.prompt_scores(k);
      if (!current || score.position() != r->req.logprob_start + r->prompt_scores_sent) continue;
      OutputEvent& event = out_.events.emplace_back();
      event.channel = r->channel.get();
      SampleEvent& e = event.event;
      e.kind = SampleEvent::Kind::kPromptLogprob;
      e.index = seq->sample_index;
      e.position = score.position();
      e.token_id = r->req.prompt[score.position()];
      e.logprob = score.logprob();
      e.weight_version = result.weight_version();
      e.top.clear();
      for (const v1::TokenLogprob& t : score.top()) e.top.push_back({t.token_id(), t.logprob()});
      ++r->prompt_scores_sent;
    }
  }
  return OkStatus();
}

}  // namespace astr::sched
