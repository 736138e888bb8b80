// The output side of one request, off the scheduler loop: per sample, SampleEvents become text
// through the incremental detokenizer, stop strings are matched across token boundaries, and the
// new output since the last message is handed out as a SampleDelta.
//
// A sample ends in one of three ways: the scheduler finishes it (EOS, stop token id, length), a
// stop string matches here (the caller must then tell the scheduler with FinishSample; later
// tokens of that sample are ignored), or the request is aborted. Text handed out never splits a
// UTF-8 character and never contains (part of) a stop string unless include_stop_str_in_output.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/text/tokenizer/stream_decoder.h"
#include "common/text/tokenizer/tokenizer.h"
#include "scheduler/front/request_builder.h"
#include "scheduler/front/stop_matcher.h"
#include "scheduler/scheduler.h"

namespace astr::front {

// Generated tokens [start, start + count) of a sample were computed by weight version `version`.
struct VersionSpan {
  int64_t version = 0;
  int32_t start = 0;
  int32_t count = 0;
};

// Appends `span` to `spans`, joining it to the last one when it continues it with the same version:
// the one rule by which the output processor, the gRPC and the HTTP fronts merge spans.
void AppendVersionSpan(std::vector<VersionSpan>* spans, const VersionSpan& span);

// One sample's output since the previous delta.
struct SampleDelta {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;                 // when requested, one per token
  std::vector<std::vector<TokenLogprob>> top;  // when top_logprobs > 0, one per token
  std::vector<SamplingMask> masks;             // when return_sampling_mask, one per token
  int64_t weight_version = 0;                  // of the last token in this delta
  std::vector<VersionSpan> versions;           // of token_ids (start counts from the sample's
                                               // first token)
  // Set on the sample's last delta.
  bool finished = false;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  std::optional<std::string> stop_string;  // when a stop string ended the sample
  std::optional<int32_t> stop_token_id;    // when a stop token id ended it

  bool empty() const { return text.empty() && token_ids.empty() && !finished; }
};

class SampleOutput {
 public:
  SampleOutput(const tok::Tokenizer& tokenizer, const OutputOptions& options,
               std::span<const int32_t> prompt);

  // An accepted token (ignored once the sample is done). Returns true when a stop string ended
  // the sample with this token.
  bool AddToken(const sched::SampleEvent& event);
  // The scheduler ended the sample; flushes held text (a stop string may still match in it).
  void Finish(v1::FinishReason reason, int32_t stop_token_id);
  // The request ended before this sample did: held text is flushed as by Finish, the reason is
  // ABORT.
  void Abort();

  bool done() const { return done_; }
  // How it ended (once done()): what its last delta says.
  v1::FinishReason finish_reason() const { return finish_reason_; }
  int32_t num_tokens() const { return num_tokens_; }
  // Moves out the output since the previous call.
  SampleDelta TakeDelta();

 private:
  // Ends the sample on a stop string match.
  void EndOnStop(const StopMatcher::Match& match);

  const OutputOptions& options_;
  tok::StreamDecoder decoder_;
  StopMatcher matcher_;
  SampleDelta pending_;
  int32_t num_tokens_ = 0;
  bool done_ = false;
  v1::FinishReason finish_reason_ = v1::FINISH_REASON_UNSPECIFIED;
};

// The scores of a request's prompt (OutputOptions.logprob_start), in position order.
struct PromptScores {
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;  // when top_logprobs > 0, one per position
  int64_t weight_version = 0;                  // of the step that scored the last position
};

// Every sample of one request.
class OutputProcessor {
 public:
  // `options` and `tokenizer` must outlive the processor.
  OutputProcessor(const tok::Tokenizer& tokenizer, const OutputOptions& options,
                  std::span<const int32_t> prompt, int32_t n);

  // Applies the events in order. Appends to `stopped` the index of every sample a stop string
  // ended (for Scheduler::FinishSample).
  void Apply(const std::vector<sched::SampleEvent>& events, std::vector<int32_t>* stopped);
  // The prompt's scores so far, and whether all of them are in (true when none were asked for).
  const PromptScores& prompt_scores() const { return prompt_scores_; }
  bool prompt_scored() const {
    return static_cast<int64_t>(prompt_scores_.logprobs.size()) >= num_prompt_scores_;
  }
  // Ends every sample still running with ABORT.
  void AbortUnfinished();

  int32_t num_samples() const { return static_cast<int32_t>(samples_.size()); }
  bool all_done() const;
  SampleOutput& sample(int32_t index) { return *samples_[index]; }
  // Tokens returned so far, every sample together.
  int32_t completion_tokens() const;

 private:
  void AddPromptScore(const sched::SampleEvent& event);

  const OutputOptions& options_;
  std::vector<std::unique_ptr<SampleOutput>> samples_;
  int64_t num_prompt_scores_ = 0;  // prompt size - logprob_start, 0 when not scoring
  PromptScores prompt_scores_;
};

}  // namespace astr::front
