#include "common/grpc/sampling_proto.h"

#include <algorithm>

namespace astr::rpc {

LogprobsMode LogprobsModeFromProto(int mode) {
  switch (mode) {
    case v1::LOGPROBS_MODE_UNSPECIFIED:
    case v1::LOGPROBS_MODE_RAW:
      return LogprobsMode::kRaw;
    case v1::LOGPROBS_MODE_PROCESSED:
      return LogprobsMode::kProcessed;
    default:
      // Neither 0 nor 1 here (those are UNSPECIFIED and RAW), so never a known LogprobsMode.
      return static_cast<LogprobsMode>(mode);
  }
}

SamplingParams FromWorkerProto(const v1::WorkerSamplingParams& p) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p();
  s.min_p = p.min_p();
  s.repetition_penalty = p.repetition_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.presence_penalty = p.presence_penalty();
  s.penalty_window = p.penalty_window();
  for (const auto& [id, bias] : p.logit_bias()) s.logit_bias[id] = bias;
  s.seed = p.seed();
  s.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  s.eos_token_ids.assign(p.eos_token_ids().begin(), p.eos_token_ids().end());
  s.ignore_eos = p.ignore_eos();
  s.min_tokens = p.min_tokens();
  s.max_tokens = std::max<int32_t>(1, p.min_tokens());
  s.return_logprob = p.return_logprob();
  s.logprobs = p.top_logprobs();
  s.logprobs_mode = LogprobsModeFromProto(p.logprobs_mode());
  s.return_sampling_mask = p.return_sampling_mask();
  return s;
}

void ToWorkerProto(const SamplingParams& s, v1::WorkerSamplingParams* out) {
  out->set_temperature(s.temperature);
  out->set_top_k(s.top_k);
  out->set_top_p(s.top_p);
  out->set_min_p(s.min_p);
  out->set_repetition_penalty(s.repetition_penalty);
  out->set_frequency_penalty(s.frequency_penalty);
  out->set_presence_penalty(s.presence_penalty);
  out->set_penalty_window(s.penalty_window);
  for (const auto& [id, bias] : s.logit_bias) (*out->mutable_logit_bias())[id] = bias;
  out->set_seed(s.seed);
  for (int32_t id : s.stop_token_ids) out->add_stop_token_ids(id);
  for (int32_t id : s.eos_token_ids) out->add_eos_token_ids(id);
  out->set_ignore_eos(s.ignore_eos);
  out->set_min_tokens(s.min_tokens);
  out->set_return_logprob(s.return_logprob);
  out->set_top_logprobs(s.logprobs);
  out->set_logprobs_mode(s.logprobs_mode == LogprobsMode::kProcessed ? v1::LOGPROBS_MODE_PROCESSED
                                                                     : v1::LOGPROBS_MODE_RAW);
  out->set_return_sampling_mask(s.return_sampling_mask);
}

}  // namespace astr::rpc
