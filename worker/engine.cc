#include "worker/engine.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "worker/rope.h"

namespace astr {
namespace {

sched::StepLimits LimitsOf(const Backend& backend, const EngineOptions& options) {
  sched::StepLimits limits;
  limits.max_tokens = backend.max_batch_tokens();
  limits.max_sequences = std::clamp<int64_t>(options.max_running, 1, backend.max_sample_rows());
  limits.prefill_chunk = std::clamp<int64_t>(options.prefill_chunk, 1, limits.max_tokens);
  limits.max_context_tokens = static_cast<int32_t>(backend.config().max_context_tokens);
  limits.max_logits_rows = backend.max_sample_rows();
  return limits;
}

}  // namespace

Engine::Engine(std::unique_ptr<Backend> backend, EngineOptions options)
    : backend_(std::move(backend)),
      options_(options),
      queues_(backend_->num_pages(), static_cast<int32_t>(backend_->page_size()),
              {.tokens = backend_->kv_window_tokens(),
               .tables = backend_->kv_window_tables(),
               .max_step_tokens = LimitsOf(*backend_, options).prefill_chunk}),
      planner_(LimitsOf(*backend_, options)),
      sampling_(*backend_) {
  if (options_.prefix_cache) queues_.EnableCache();
  queues_.longrope_original = LongRopeOriginalContext(backend_->config());
  batch_.set_window_tables(backend_->kv_window_tables());
}

StatusOr<int64_t> Engine::Submit(GenerationRequest request) {
  const model::ModelConfig& c = backend_->config();
  if (request.prompt.empty()) return InvalidArgumentError("prompt: must hold at least one token");
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= c.vocab_size) {
      return InvalidArgumentError("prompt[" + std::to_string(i) + "]: token id " +
                                  std::to_string(request.prompt[i]) +
                                  " outside the vocabulary of " + std::to_string(c.vocab_size));
    }
  }
  ASTR_RETURN_IF_ERROR(ValidateSamplingParams(request.params, c.vocab_size));
  if (request.logprob_start < 0 ||
      request.logprob_start > static_cast<int64_t>(request.prompt.size())) {
    return InvalidArgumentError("logprob_start: " + std::to_string(request.logprob_start) +
                                " outside [0, " + std::to_string(request.prompt.size()) +
                                "] (0 = no prompt scoring; token 0 has no logits before it)");
  }
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.params.max_tokens;
  if (c.max_context_tokens > 0 && total > c.max_context_tokens) {
    return InvalidArgumentError("max_tokens: prompt (" + std::to_string(request.prompt.size()) +
                                ") + max_tokens (" + std::to_string(request.params.max_tokens) +
                                ") exceeds the model's context of " +
                                std::to_string(c.max_context_tokens));
  }
  const int64_t capacity = queues_.pool.capacity_tokens();
  if (total > capacity) {
    return InvalidArgumentError("max_tokens: prompt + max_tokens = " + std::to_string(total) +
                                " tokens exceeds the KV pool's " + std::to_string(capacity));
  }
  const int64_t id = next_id_++;
  auto r = std::make_unique<Request>();
  sched::RequestState& state = r->state;
  state.key = static_cast<uint64_t>(id);
  state.req.request_id = std::to_string(id);
  state.req.prompt = request.prompt;
  state.req.sampling = std::move(request.params);
  state.req.max_tokens = state.req.sampling.max_tokens;
  state.req.logprob_start = request.logprob_start;
  state.req.n = 1;
  state.open_samples = 1;
  auto seq = std::make_unique<sched::Sequence>();
  seq->request = &state;
  // The sample index keys the RNG stream (SequenceSampler), as on a worker.
  seq->sample_index = static_cast<int32_t>(request.sample_index);
  state.samples.push_back(std::move(seq));
  r->result.id = id;
  r->result.prompt = std::move(request.prompt);
  r->stop_check = std::move(request.stop_check);
  queues_.Enqueue(state.samples[0].get());
  requests_.emplace(id, std::move(r));
  return id;
}

void Engine::Execute() {
  for (uint64_t id : plan_.release) live_.erase(id);
  for (const sched::PlannedStart& start : plan_.starts()) {
    Live& l = live_[start.live_id];
    l.context = start.tokens;
    l.pages = start.pages;
    l.window_pages = start.window_pages;
    l.window_first = start.window_first;
    const int32_t original = queues_.longrope_original;
    l.rope_long = original > 0 && static_cast<int64_t>(start.tokens.size()) > original;
    const std::span<const int32_t> prompt(l.context.data(), start.num_prompt_tokens);
    l.sampler = std::make_unique<SequenceSampler>(*start.params, start.sample_index, prompt);
    // A restart (after a preemption) continues its RNG counter and penalty counts.
    for (size_t i = start.num_prompt_tokens; i < l.context.size(); ++i) {
      l.sampler->Append(l.context[i]);
    }
    l.scorer.reset();
    if (start.score_from > 0) {
      l.scorer = std::make_unique<PromptScorer>(
          *start.params, start.sample_index,
          std::span<const int32_t>(l.context.data(), static_cast<size_t>(start.score_from)));
    }
  }
  batch_.Clear();
  step_samplers_.clear();
  step_live_.clear();
  step_scores_.clear();
  const int64_t page_size = queues_.pool.page_size();
  for (const sched::PlannedEntry& e : plan_.entries()) {
    Live& l = live_.at(e.live_id);
    l.pages.insert(l.pages.end(), e.new_pages.begin(), e.new_pages.end());
    l.window_pages.insert(l.window_pages.end(), e.new_window_pages.begin(),
                          e.new_window_pages.end());
    // Window pages behind this entry's queries went back to the pool (the planner's
    // DropBehindWindow): they are not read again.
    if (const int64_t first = queues_.pool.FirstWindowPage(e.start_position);
        first > l.window_first) {
      const int64_t drop = (first - l.window_first) * batch_.num_window_tables();
      l.window_pages.erase(l.window_pages.begin(), l.window_pages.begin() + drop);
      l.window_first = first;
    }
    l.first_row = batch_.num_tokens();
    l.start_position = e.start_position;
    batch_.Append(l.context.data() + e.start_position, e.num_tokens, e.start_position,
                  l.pages.data(), page_size, e.sample, l.window_pages.data(), l.window_first,
                  l.rope_long);
    if (e.sample) {
      step_samplers_.push_back(l.sampler.get());
      step_live_.push_back(&l);
    }
  }
  // The scored rows follow every sample row (StepSampling's order): the token at position p is
  // scored from the row of position p - 1.
  for (const sched::PlanOutcome::ScoredRun& run : outcome_.scoring) {
    Live& l = live_.at(run.live_id);
    for (int32_t p = run.first_position; p < run.first_position + run.count; ++p) {
      batch_.sample_rows.push_back(static_cast<int32_t>(l.first_row + (p - 1 - l.start_position)));
      step_scores_.push_back({.scorer = l.scorer.get(), .token = l.context[p]});
    }
  }
}

FinishReason Engine::Accept(sched::Sequence* seq, const SampleResult& r) {
  Request& req = *requests_.at(static_cast<int64_t>(seq->request->key));
  --seq->in_flight;
  seq->generated.push_back(r.token);
  const SamplingParams& p = req.state.req.sampling;
  if (p.return_logprob || p.logprobs > 0) req.result.logprobs.push_back(r.logprob);
  if (p.logprobs > 0) req.result.top.emplace_back(r.top.begin(), r.top.begin() + r.num_top);
  // The shared rule (EOS, stop ids past min_tokens, length, context); a stop string ends it
  // before the length does.
  FinishReason reason =
      DecideFinish(StopConditionsOf(p, backend_->config().max_context_tokens), r.token,
                   static_cast<int64_t>(seq->generated.size()), seq->num_tokens())
          .reason;
  if ((reason == FinishReason::kNone || reason == FinishReason::kLength) && req.stop_check &&
      req.stop_check(seq->generated)) {
    reason = FinishReason::kStop;
  }
  return reason;
}

void Engine::Finish(sched::Sequence* seq, FinishReason reason,
                    std::vector<GenerationResult>* finished) {
  const int64_t id = static_cast<int64_t>(seq->request->key);
  auto it = requests_.find(id);
  Request& req = *it->second;
  queues_.Remove(seq);  // its pages are free now; its live id goes with the next plan
  seq->state = sched::Sequence::State::kDone;
  req.result.finish = reason;
  req.result.tokens = std::move(seq->generated);
  req.result.preemptions = req.state.preemptions;
  finished->push_back(std::move(req.result));
  requests_.erase(it);
}

Status Engine::Step(std::vector<GenerationResult>* finished) {
  last_step_ = {};
  if (Idle()) return OkStatus();
  planner_.Plan(&queues_, next_step_id_++, sched::Clock::now(), &plan_, &outcome_);
  cache_hit_tokens_ += outcome_.cache_hit_tokens;
  Execute();
  if (plan_.entries().empty()) {
    // Submit refuses what the pool cannot hold, so the planner always finds work; a plan that
    // only releases can happen once, not twice in a row.
    if (++empty_plans_ >= 2) return ResourceExhaustedError("KV pool too small for one sequence");
    return OkStatus();
  }
  empty_plans_ = 0;
  step_results_.resize(step_samplers_.size() + step_scores_.size());
  const auto start = std::chrono::steady_clock::now();
  ASTR_RETURN_IF_ERROR(
      sampling_.Run(*backend_, batch_, step_samplers_, step_scores_, step_results_));
  last_step_.forward_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  last_step_.tokens = batch_.num_tokens();
  last_step_.entries = static_cast<int64_t>(plan_.entries().size());
  last_step_.sampled = static_cast<int64_t>(batch_.sample_rows.size());

  // The prompt scores, before the tokens: a sequence may finish in this step.
  size_t k = step_samplers_.size();
  for (const sched::PlanOutcome::ScoredRun& run : outcome_.scoring) {
    sched::RequestState* state = run.seq->request;
    GenerationResult& result = requests_.at(static_cast<int64_t>(state->key))->result;
    for (int32_t j = 0; j < run.count; ++j, ++k) {
      const SampleResult& r = step_results_[k];
      result.prompt_logprobs.push_back(r.logprob);
      if (state->req.sampling.logprobs > 0) {
        result.prompt_top.emplace_back(r.top.begin(), r.top.begin() + r.num_top);
      }
      ++state->prompt_scores_sent;
    }
  }
  // outcome_.sampling lists the sampling entries in entry order, as step_live_ does.
  for (size_t i = 0; i < outcome_.sampling.size(); ++i) {
    const SampleResult& r = step_results_[i];
    step_live_[i]->sampler->Append(r.token);
    step_live_[i]->context.push_back(r.token);
    sched::Sequence* seq = outcome_.sampling[i];
    if (const FinishReason reason = Accept(seq, r); reason != FinishReason::kNone) {
      Finish(seq, reason, finished);
    }
  }
  return OkStatus();
}

StatusOr<std::vector<GenerationResult>> Engine::RunToCompletion() {
  std::vector<GenerationResult> all;
  while (!Idle()) ASTR_RETURN_IF_ERROR(Step(&all));
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return all;
}

}  // namespace astr
