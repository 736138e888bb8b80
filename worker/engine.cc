#include "worker/engine.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace astr {

Engine::Engine(std::unique_ptr<Backend> backend, EngineOptions options)
    : backend_(std::move(backend)),
      options_(options),
      pages_(backend_->num_pages()),
      sampling_(*backend_) {
  options_.max_running = std::clamp<int64_t>(options_.max_running, 1, backend_->max_sample_rows());
  options_.prefill_chunk = std::max<int64_t>(1, options_.prefill_chunk);
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
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.params.max_tokens;
  if (c.max_context_tokens > 0 && total > c.max_context_tokens) {
    return InvalidArgumentError("max_tokens: prompt (" + std::to_string(request.prompt.size()) +
                                ") + max_tokens (" + std::to_string(request.params.max_tokens) +
                                ") exceeds the model's context of " +
                                std::to_string(c.max_context_tokens));
  }
  const int64_t capacity = backend_->num_pages() * backend_->page_size();
  if (total > capacity) {
    return InvalidArgumentError("max_tokens: prompt + max_tokens = " + std::to_string(total) +
                                " tokens exceeds the KV pool's " + std::to_string(capacity));
  }
  auto seq = std::make_unique<Sequence>();
  seq->id = next_id_++;
  seq->tokens = request.prompt;
  seq->sampler = std::make_unique<SequenceSampler>(request.params, request.sample_index,
                                                   std::span<const int32_t>(request.prompt));
  seq->pages = pages_.NewList();
  seq->result.id = seq->id;
  seq->result.prompt = request.prompt;
  seq->request = std::move(request);
  const int64_t id = seq->id;
  waiting_.push_back(std::move(seq));
  return id;
}

bool Engine::PreemptNewest(const Sequence* keep) {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    Sequence* victim = it->get();
    if (victim == keep || victim->planned) continue;
    victim->pages.Release();
    victim->num_computed = 0;
    victim->result.preemptions++;
    victim->preempted = true;
    waiting_.push_front(std::move(*it));
    running_.erase(std::next(it).base());
    return true;
  }
  return false;
}

std::vector<Engine::Sequence*> Engine::Plan() {
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_running) {
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  batch_.Clear();
  std::vector<Sequence*> entries;
  std::vector<Sequence*> order;  // snapshot: preemption reorders running_ while we plan
  for (auto& s : running_) {
    s->planned = false;
    s->preempted = false;
    order.push_back(s.get());
  }
  int64_t budget = backend_->max_batch_tokens();
  const int64_t page_size = backend_->page_size();
  // Two passes: decode rows first (one token each, latency-bound), then prefill chunks.
  for (int pass = 0; pass < 2 && budget > 0; ++pass) {
    for (size_t i = 0; i < order.size() && budget > 0; ++i) {
      Sequence* seq = order[i];
      if (seq->preempted) continue;
      const int64_t pending = static_cast<int64_t>(seq->tokens.size()) - seq->num_computed;
      if ((pass == 0) != (pending == 1)) continue;
      const int64_t n = std::min({pending, budget, options_.prefill_chunk});
      const int64_t need_pages = (seq->num_computed + n + page_size - 1) / page_size;
      bool no_pages = false;
      while (!seq->pages.GrowTo(need_pages)) {
        if (!PreemptNewest(seq)) {
          no_pages = true;
          break;
        }
      }
      if (no_pages) break;  // nothing else can be freed this step
      batch_.Append(seq->tokens.data() + seq->num_computed, n, seq->num_computed,
                    seq->pages.pages().data(), page_size,
                    seq->num_computed + n == static_cast<int64_t>(seq->tokens.size()));
      seq->planned = true;
      entries.push_back(seq);
      budget -= n;
    }
  }
  return entries;
}

void Engine::Finish(Sequence* seq, FinishReason reason, std::vector<GenerationResult>* finished) {
  seq->result.finish = reason;
  seq->result.tokens.assign(seq->tokens.begin() + seq->result.prompt.size(), seq->tokens.end());
  seq->pages.Release();
  finished->push_back(std::move(seq->result));
}

Status Engine::Step(std::vector<GenerationResult>* finished) {
  std::vector<Sequence*> entries = Plan();
  last_step_ = {};
  if (entries.empty()) {
    if (!running_.empty()) return ResourceExhaustedError("KV pool too small for one sequence");
    return OkStatus();
  }
  // The entries that feed their last uncomputed token sample, in batch order (= sample row order).
  step_samplers_.clear();
  for (size_t e = 0; e < entries.size(); ++e) {
    const int64_t n = batch_.qo_indptr[e + 1] - batch_.qo_indptr[e];
    if (entries[e]->num_computed + n == static_cast<int64_t>(entries[e]->tokens.size())) {
      step_samplers_.push_back(entries[e]->sampler.get());
    }
  }
  step_results_.resize(step_samplers_.size());
  const auto start = std::chrono::steady_clock::now();
  ASTR_RETURN_IF_ERROR(sampling_.Run(*backend_, batch_, step_samplers_, {}, step_results_));
  last_step_.forward_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  last_step_.tokens = batch_.num_tokens();
  last_step_.entries = static_cast<int64_t>(entries.size());
  last_step_.sampled = static_cast<int64_t>(batch_.sample_rows.size());

  size_t sample_index = 0;
  std::vector<Sequence*> done;
  for (size_t e = 0; e < entries.size(); ++e) {
    Sequence* seq = entries[e];
    const int64_t n = batch_.qo_indptr[e + 1] - batch_.qo_indptr[e];
    seq->num_computed += n;
    if (seq->num_computed != static_cast<int64_t>(seq->tokens.size()))
      continue;  // mid-prompt chunk
    const SampleResult& r = step_results_[sample_index++];
    seq->sampler->Append(r.token);
    seq->tokens.push_back(r.token);
    const SamplingParams& p = seq->sampler->params();
    if (p.return_logprob || p.logprobs > 0) seq->result.logprobs.push_back(r.logprob);
    if (p.logprobs > 0) seq->result.top.emplace_back(r.top.begin(), r.top.begin() + r.num_top);
    // The shared rule (EOS, stop ids past min_tokens, length); a stop string ends it before
    // the length does.
    const int64_t generated = seq->sampler->num_generated();
    FinishReason reason = DecideFinish(StopConditionsOf(p), r.token, generated,
                                       static_cast<int64_t>(seq->tokens.size()))
                              .reason;
    if ((reason == FinishReason::kNone || reason == FinishReason::kLength) &&
        seq->request.stop_check &&
        seq->request.stop_check(std::vector<int32_t>(
            seq->tokens.begin() + seq->result.prompt.size(), seq->tokens.end()))) {
      reason = FinishReason::kStop;
    }
    if (reason != FinishReason::kNone) {
      seq->result.finish = reason;
      done.push_back(seq);
    }
  }
  for (Sequence* seq : done) {
    auto it = std::find_if(running_.begin(), running_.end(),
                           [seq](const auto& s) { return s.get() == seq; });
    Finish(seq, seq->result.finish, finished);
    running_.erase(it);
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
