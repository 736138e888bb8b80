#include "scheduler/front/output_processor.h"

#include <algorithm>
#include <utility>

namespace astr::front {

void AppendVersionSpan(std::vector<VersionSpan>* spans, const VersionSpan& span) {
  if (!spans->empty() && spans->back().version == span.version &&
      spans->back().start + spans->back().count == span.start) {
    spans->back().count += span.count;
  } else {
    spans->push_back(span);
  }
}

SampleOutput::SampleOutput(const tok::Tokenizer& tokenizer, const OutputOptions& options,
                           std::span<const int32_t> prompt)
    : options_(options),
      decoder_(tokenizer, options.skip_special_tokens, prompt),
      matcher_(options.stop) {}

bool SampleOutput::AddToken(const sched::SampleEvent& event) {
  if (done_) return false;
  ++num_tokens_;
  pending_.token_ids.push_back(event.token_id);
  if (options_.return_logprobs) pending_.logprobs.push_back(event.logprob);
  if (options_.top_logprobs > 0) pending_.top.push_back(event.top);
  if (options_.return_sampling_mask) pending_.masks.push_back(event.mask);
  pending_.weight_version = event.weight_version;
  const int32_t index = num_tokens_ - 1;
  AppendVersionSpan(&pending_.versions, {event.weight_version, index, 1});
  // Stop strings count from the min_tokens-th token on (the worker masks EOS and stop ids the
  // same way).
  const bool may_stop = num_tokens_ >= options_.min_tokens;
  auto match =
      matcher_.Append(decoder_.Push(event.token_id), may_stop, options_.include_stop_str_in_output);
  if (match) {
    EndOnStop(*match);
    return true;
  }
  pending_.text += matcher_.TakeSafe();
  return false;
}

void SampleOutput::EndOnStop(const StopMatcher::Match& match) {
  pending_.text += match.text;
  pending_.finished = true;
  pending_.finish_reason = v1::FINISH_REASON_STOP;
  pending_.stop_string = options_.stop[match.stop_index];
  pending_.stop_token_id.reset();
  done_ = true;
  finish_reason_ = v1::FINISH_REASON_STOP;
}

void SampleOutput::Finish(v1::FinishReason reason, int32_t stop_token_id) {
  if (done_) return;
  // The decoder's held bytes (an unfinished character at the very end) belong to the last token.
  auto match = matcher_.Append(decoder_.Finish(), num_tokens_ >= options_.min_tokens,
                               options_.include_stop_str_in_output);
  if (match) {
    EndOnStop(*match);
    return;
  }
  pending_.text += matcher_.TakeAll();
  pending_.finished = true;
  pending_.finish_reason = reason;
  if (reason == v1::FINISH_REASON_STOP && stop_token_id >= 0)
    pending_.stop_token_id = stop_token_id;
  done_ = true;
  finish_reason_ = reason;
}

void SampleOutput::Abort() { Finish(v1::FINISH_REASON_ABORT, -1); }

SampleDelta SampleOutput::TakeDelta() {
  SampleDelta out = std::move(pending_);
  pending_ = SampleDelta();
  pending_.weight_version = out.weight_version;
  return out;
}

OutputProcessor::OutputProcessor(const tok::Tokenizer& tokenizer, const OutputOptions& options,
                                 std::span<const int32_t> prompt, int32_t n)
    : options_(options) {
  if (options.logprob_start > 0) {
    num_prompt_scores_ = static_cast<int64_t>(prompt.size()) - options.logprob_start;
    prompt_scores_.logprobs.reserve(static_cast<size_t>(std::max<int64_t>(num_prompt_scores_, 0)));
  }
  samples_.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    samples_.push_back(std::make_unique<SampleOutput>(tokenizer, options, prompt));
  }
}

void OutputProcessor::Apply(const std::vector<sched::SampleEvent>& events,
                            std::vector<int32_t>* stopped) {
  for (const sched::SampleEvent& e : events) {
    if (e.index < 0 || e.index >= num_samples()) continue;  // not ours: nothing to attach it to
    if (e.kind == sched::SampleEvent::Kind::kPromptLogprob) {
      AddPromptScore(e);
      continue;
    }
    SampleOutput& s = *samples_[e.index];
    if (e.kind == sched::SampleEvent::Kind::kToken) {
      if (s.AddToken(e)) stopped->push_back(e.index);
    } else {
      s.Finish(e.finish, e.stop_token_id);
    }
  }
}

void OutputProcessor::AddPromptScore(const sched::SampleEvent& e) {
  // The scheduler sends each position once, in order; anything else is not ours to show.
  const int64_t next =
      options_.logprob_start + static_cast<int64_t>(prompt_scores_.logprobs.size());
  if (options_.logprob_start <= 0 || e.position != next || prompt_scored()) return;
  prompt_scores_.logprobs.push_back(e.logprob);
  if (options_.top_logprobs > 0) prompt_scores_.top.push_back(e.top);
  prompt_scores_.weight_version = e.weight_version;
}

void OutputProcessor::AbortUnfinished() {
  for (auto& s : samples_) s->Abort();
}

bool OutputProcessor::all_done() const {
  for (const auto& s : samples_) {
    if (!s->done()) return false;
  }
  return true;
}

int32_t OutputProcessor::completion_tokens() const {
  int32_t total = 0;
  for (const auto& s : samples_) total += s->num_tokens();
  return total;
}

}  // namespace astr::front
