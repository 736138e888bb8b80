// The loop thread: commands in, one step per worker, tokens and finishes out.
#include "scheduler/scheduler_loop.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <span>

#include "common/base/clock.h"
#include "common/base/finish_rule.h"

namespace astr::sched {
namespace {

// The finish rule's reason on the wire.
v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return v1::FINISH_REASON_UNSPECIFIED;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kAbort:
      return v1::FINISH_REASON_ABORT;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

// Reconnecting workers and stuck plans are polled this often while nothing else wakes the loop.
constexpr auto kPollInterval = std::chrono::milliseconds(10);

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void SchedulerLoop::Run() {
  while (WaitForWork()) {
    const Clock::time_point now = Clock::now();
    ApplyCommands(now);
    ExpireDeadlines(now);
    PollWorkers(now);
    // Closes from cancels, deadlines and failed workers need not wait for the step's RPCs.
    output_->Post(&out_);
    progressed_ = StepWorkers(now) || !applying_.empty();
    applying_.clear();
    AdvanceDrains(Clock::now());
    output_->Post(&out_);
    BuryClosed();
    PublishStats();
    // After the stats: a Pause(kDrain) answered here must find them without its requests.
    if (admin_.Advance(now)) progressed_ = true;
    output_->Post(&out_);
  }
  // Shutting down: whatever is still open ends now, including requests submitted since the last
  // iteration (their channels must close too).
  {
    std::lock_guard<std::mutex> lock(mu_);
    applying_.swap(commands_);
  }
  const Clock::time_point now = Clock::now();
  ApplyCommands(now);
  std::vector<RequestState*> open;
  for (auto& [key, request] : requests_) open.push_back(request.get());
  for (RequestState* request : open) {
    CloseRequest(request, UnavailableError("the scheduler is shutting down"), now);
  }
  output_->Post(&out_);
  requests_.clear();
  graveyard_.clear();
  closed_.clear();
  PublishStats();
}

void SchedulerLoop::BuryClosed() {
  for (uint64_t key : closed_) {
    auto it = requests_.find(key);
    graveyard_.emplace_back(next_step_id_, std::move(it->second));
    requests_.erase(it);
  }
  closed_.clear();
  if (graveyard_.empty()) return;
  // The oldest step still in flight on any worker; tags up to it are safe to destroy.
  uint64_t oldest = next_step_id_;
  for (const auto& w : pool_.slots()) {
    if (w->in_flight() > 0) {
      oldest = std::min(oldest, w->outcomes[w->results_received % 2].step_id);
    }
  }
  std::erase_if(graveyard_, [oldest](const auto& entry) { return entry.first <= oldest; });
}

bool SchedulerLoop::WaitForWork() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ && commands_.empty()) {
    if (progressed_ && HasWork()) break;
    const Clock::time_point now = Clock::now();
    if (!deadlines_.empty() && deadlines_.front().first <= now) break;
    loop_sleeping_ = true;
    const std::cv_status woke = wake_.wait_until(lock, NextWake(now));
    loop_sleeping_ = false;
    // A timeout is a deadline or a poll: run one iteration to look at it.
    if (woke == std::cv_status::timeout) {
      progressed_ = true;
      break;
    }
  }
  if (stop_) return false;
  applying_.swap(commands_);
  return true;
}

bool SchedulerLoop::HasWork() const {
  const bool hold = admin_.HoldsSteps();
  for (const auto& w : pool_.slots()) {
    if (w->health != WorkerSlot::Health::kUp) continue;
    if (hold) {
      if (w->in_flight() > 0) return true;
      continue;  // nothing may be planned until Resume or the commit
    }
    if (!w->queues.running.empty() || !w->queues.waiting.empty() || !w->queues.release.empty() ||
        w->in_flight() > 0) {
      return true;
    }
  }
  return false;
}

Clock::time_point SchedulerLoop::NextWake(Clock::time_point now) const {
  Clock::time_point wake = Clock::time_point::max();
  if (!deadlines_.empty()) wake = deadlines_.front().first;
  bool poll = !progressed_ && HasWork();  // work that could not be planned: retry soon
  for (const auto& w : pool_.slots()) {
    // Broken workers, draining ones (their deadline), removed ones whose connection waits for
    // its reconnector to end.
    poll |= w->draining || (w->health == WorkerSlot::Health::kRemoved
                                ? w->conn != nullptr
                                : w->health != WorkerSlot::Health::kUp);
  }
  if (poll) wake = std::min(wake, now + kPollInterval);
  return std::min(wake, next_idle_check_);
}

void SchedulerLoop::ApplyCommands(Clock::time_point now) {
  struct Apply {
    SchedulerLoop* loop;
    Clock::time_point now;
    void operator()(SubmitCommand& c) const { loop->AddRequest(std::move(c.request), now); }
    void operator()(std::shared_ptr<AdminOp>& op) const { op->Apply(loop->admin_, op, now); }
    void operator()(std::shared_ptr<AddWorkerOp>& op) const { loop->ApplyAddWorker(op.get(), now); }
    void operator()(std::shared_ptr<DrainWorkerOp>& op) const { loop->ApplyDrainWorker(op, now); }
    void operator()(CancelCommand& c) const {
      if (RequestState* r = loop->OpenRequest(c.key)) loop->CloseRequest(r, std::move(c.why), now);
    }
    void operator()(HoldCommand& c) const {
      if (RequestState* r = loop->OpenRequest(c.key)) loop->ApplyHold(r, c.hold);
    }
    void operator()(FinishSampleCommand& c) const {
      RequestState* r = loop->OpenRequest(c.key);
      if (r == nullptr || c.index < 0 || c.index >= static_cast<int32_t>(r->samples.size())) return;
      Sequence* seq = r->samples[c.index].get();
      if (seq->state == Sequence::State::kDone) return;
      // (The front matched a stop string.) Tokens sampled after the ones the front returned
      // (while its finish was on the way) were never delivered: they are not the sample's.
      if (c.kept_tokens >= 0 && c.kept_tokens < static_cast<int64_t>(seq->generated.size())) {
        seq->generated.resize(c.kept_tokens);
      }
      loop->EndSample(seq, now);
    }
  };
  for (Command& command : applying_) std::visit(Apply{this, now}, command);
}

RequestState* SchedulerLoop::OpenRequest(uint64_t key) {
  auto it = requests_.find(key);
  if (it == requests_.end() || it->second->closed) return nullptr;  // already ended
  return it->second.get();
}

void SchedulerLoop::AddRequest(std::unique_ptr<RequestState> request, Clock::time_point now) {
  RequestState* r = request.get();
  if (options_.fair_share) r->client = fair_.Join(r->req.client);
  requests_.emplace(r->key, std::move(request));
  ++num_waiting_requests_;
  if (r->req.deadline) {
    deadlines_.emplace_back(*r->req.deadline, r->key);
    std::push_heap(deadlines_.begin(), deadlines_.end(), std::greater<>());
  }
  for (auto& seq : r->samples) {
    if (!Place(seq.get())) {
      CloseRequest(r, UnavailableError("no worker is up to run the request"), now);
      return;
    }
  }
}

void SchedulerLoop::ExpireDeadlines(Clock::time_point now) {
  while (!deadlines_.empty() && deadlines_.front().first <= now) {
    const uint64_t key = deadlines_.front().second;
    std::pop_heap(deadlines_.begin(), deadlines_.end(), std::greater<>());
    deadlines_.pop_back();
    auto it = requests_.find(key);
    if (it == requests_.end() || it->second->closed) continue;
    RequestState* r = it->second.get();
    const int64_t ms = Nanos(*r->req.deadline - r->req.arrival) / 1000000;
    CloseRequest(r,
                 Status(StatusCode::kDeadlineExceeded,
                        "deadline exceeded (" + std::to_string(ms) + " ms after arrival)"),
                 now);
  }
}

// Plans and sends every worker's step, then reads results, so workers compute in parallel. With
// overlap a worker gets plan N+1 before result N is read, so it never waits for the loop: a
// result is read once two plans are in flight, or when there was nothing new to send.
bool SchedulerLoop::StepWorkers(Clock::time_point now) {
  bool any = false;
  const bool hold = admin_.HoldsSteps();
  for (auto& slot : pool_.slots()) {
    WorkerSlot* w = slot.get();
    if (w->health != WorkerSlot::Health::kUp) continue;
    const bool sent = !hold && w->in_flight() < max_in_flight_ && SendPlan(w, now);
    any |= sent;
    if (w->health == WorkerSlot::Health::kUp && w->in_flight() > 0 &&
        (w->in_flight() == max_in_flight_ || !sent)) {
      w->receive_due = true;
    }
  }
  for (auto& slot : pool_.slots()) {
    WorkerSlot* w = slot.get();
    if (!w->receive_due) continue;
    w->receive_due = false;
    ReceiveResult(w, now);
    any = true;
  }
  return any;
}

// The plan still in flight after a result was applied: its constrained entries whose masks
// follow (PlanOutcome::late_masks) get them now, from matchers that have accepted the tokens of
// that result. A sample that ended or moved meanwhile gets no mask (every token): its token is
// dropped when it comes.
Status SchedulerLoop::SendLateMasks(WorkerSlot* w) {
  if (w->in_flight() == 0) return OkStatus();
  PlanOutcome& out = w->outcomes[w->results_received % 2];
  if (out.late_masks.empty() || out.late_masks_sent) return OkStatus();
  out.late_masks_sent = true;
  PlannedStep& m = w->masks_message;
  m.Clear();
  m.masks_for_step = out.step_id;
  for (size_t i = 0; i < out.late_masks.size(); ++i) {
    Sequence* seq = out.late_masks[i];
    PlannedEntry& e = m.AddEntry();
    e.live_id = out.late_mask_live_ids[i];
    if (seq->live_id == out.late_mask_live_ids[i] && seq->state == Sequence::State::kRunning &&
        seq->matcher != nullptr && !seq->matcher->Terminated()) {
      FillConstraintMask(*seq->matcher, &mask_words_, &e.allowed_tokens);
    }
  }
  return w->conn->SendStep(m);
}

// Plans the worker's next step and sends it; false when there was nothing to send or the stream
// broke.
bool SchedulerLoop::SendPlan(WorkerSlot* w, Clock::time_point now) {
  WorkerQueues& q = w->queues;
  if (q.running.empty() && q.waiting.empty() && q.release.empty()) return false;
  PlanOutcome& out = w->outcomes[w->plans_sent % 2];
  w->planner.Plan(&q, next_step_id_++, now, &w->plan, &out);
  RecordOutcome(w, out);
  if (w->plan.entries().empty() && w->plan.release.empty()) return false;
  if (Status s = w->conn->SendStep(w->plan); !s.ok()) {
    OnWorkerBroken(w, s, now);
    return false;
  }
  ++w->plans_sent;
  w->metrics.batch_size->Observe(static_cast<double>(w->plan.entries().size()));
  w->metrics.iteration_tokens->Observe(static_cast<double>(out.num_tokens));
  return true;
}

void SchedulerLoop::ReceiveResult(WorkerSlot* w, Clock::time_point started) {
  const PlanOutcome& out = w->outcomes[w->results_received % 2];
  Status s = w->conn->Receive(&w->result);
  const Clock::time_point done = Clock::now();
  if (s.ok()) s = ApplyResult(w, out, done);
  if (!s.ok()) {
    OnWorkerBroken(w, s, done);
    return;
  }
  ++w->results_received;
  if (Status m = SendLateMasks(w); !m.ok()) {
    OnWorkerBroken(w, m, done);
    return;
  }
  w->cost.Observe(out.num_tokens, w->result.step_ns());
  stat_steps_.fetch_add(1, std::memory_order_relaxed);
  RecordStepTime(w, Nanos(Clock::now() - started));
}

void SchedulerLoop::RecordOutcome(WorkerSlot* w, const PlanOutcome& out) {
  if (out.cache_query_tokens > 0) {
    w->stat_cache_query_tokens.fetch_add(out.cache_query_tokens, std::memory_order_relaxed);
    w->stat_cache_hit_tokens.fetch_add(out.cache_hit_tokens, std::memory_order_relaxed);
    stat_cache_queries_.fetch_add(out.cache_query_tokens, std::memory_order_relaxed);
    stat_cache_hits_.fetch_add(out.cache_hit_tokens, std::memory_order_relaxed);
  }
  if (out.requests_started > 0) LeaveQueue(out.requests_started, out.queued_tokens_started);
  if (out.num_preempted > 0) {
    stat_preemptions_.fetch_add(out.num_preempted, std::memory_order_relaxed);
  }
}

Status SchedulerLoop::ApplyResult(WorkerSlot* w, const PlanOutcome& out, Clock::time_point now) {
  const v1::StepResult& result = w->result;
  if (result.error_code() != 0) {
    return UnavailableError(
        "refused step " + std::to_string(out.step_id) + " (" +
        std::string(StatusCodeName(static_cast<StatusCode>(result.error_code()))) +
        "): " + result.error_message());
  }
  const std::vector<Sequence*>& sampling = out.sampling;
  bool consistent =
      result.step_id() == out.step_id && result.samples_size() == static_cast<int>(sampling.size());
  for (size_t i = 0; consistent && i < sampling.size(); ++i) {
    consistent = result.samples(static_cast<int>(i)).live_id() == out.sampling_live_ids[i];
  }
  if (!consistent) {
    return UnavailableError("answered step " + std::to_string(out.step_id) + " with step " +
                            std::to_string(result.step_id()) + " and " +
                            std::to_string(result.samples_size()) + " samples for " +
                            std::to_string(sampling.size()) + " sampling entries");
  }
  // Before the tokens: sample 0's first token comes after its prompt's scores.
  ASTR_RETURN_IF_ERROR(ApplyPromptScores(result, out));
  if (result.draining() && !w->draining) {
    StartDraining(w, "the worker is shutting down",
                  std::chrono::milliseconds(options_.worker_drain_timeout_ms), now);
  }
  for (size_t i = 0; i < sampling.size(); ++i) {
    Sequence* seq = sampling[i];
    // A sequence finished, cancelled or preempted since this plan went out: its token is dropped
    // (a restart recomputes it, with the same RNG counter).
    if (seq->live_id != out.sampling_live_ids[i] || seq->state != Sequence::State::kRunning)
      continue;
    --seq->in_flight;
    AcceptToken(seq, result.samples(static_cast<int>(i)), result.weight_version(), now);
  }
  metrics_->inter_token_latency.Flush();
  return OkStatus();
}

void SchedulerLoop::AcceptToken(Sequence* seq, const v1::SampledToken& token,
                                int64_t weight_version, Clock::time_point now) {
  RequestState* r = seq->request;
  const int32_t id = token.token_id();
  if (!seq->generated.empty()) {
    metrics_->inter_token_latency.Observe(Seconds(now - seq->last_token_at));
  }
  if (seq->matcher != nullptr && !seq->matcher->Accept(id)) {
    // The worker drew outside the mask it was sent: a broken worker, not the client's fault.
    CloseRequest(
        r, InternalError("token " + std::to_string(id) + " breaks the request's constraint"), now);
    return;
  }
  seq->generated.push_back(id);
  seq->last_token_at = now;
  if (!r->has_first_token) {
    r->has_first_token = true;
    r->first_token = now;
    metrics_->time_to_first_token_seconds->Observe(Seconds(now - r->req.arrival));
    metrics_->prompt_tokens->Increment(static_cast<int64_t>(r->req.prompt.size()));
  }
  OutputEvent& out = out_.events.emplace_back();
  out.channel = r->channel.get();
  SampleEvent& e = out.event;
  e.kind = SampleEvent::Kind::kToken;
  e.index = seq->sample_index;
  e.token_id = id;
  e.logprob = token.logprob();
  e.weight_version = weight_version;
  e.top.clear();
  for (const v1::TokenLogprob& t : token.top()) e.top.push_back({t.token_id(), t.logprob()});
  e.mask.count = token.sampling_mask().count();
  e.mask.ids.assign(token.sampling_mask().token_ids().begin(),
                    token.sampling_mask().token_ids().end());

  // The finish rule the worker's sampler masking and the offline engine share (min_tokens).
  const SamplingParams& p = r->req.sampling;
  const StopConditions stop{.eos_token_ids = p.eos_token_ids,
                            .stop_token_ids = p.stop_token_ids,
                            .ignore_eos = p.ignore_eos,
                            .min_tokens = p.min_tokens,
                            .max_tokens = r->req.max_tokens,
                            .max_context_tokens = pool_.max_context_tokens()};
  const FinishDecision d =
      DecideFinish(stop, id, static_cast<int64_t>(seq->generated.size()), seq->num_tokens());
  if (d.reason != FinishReason::kNone) {
    FinishSequence(seq, ToProto(d.reason), d.stop_token_id, now);
  } else if (seq->matcher != nullptr && seq->matcher->Terminated()) {
    // The constraint ended with a stop token that does not end this sample (ignore_eos).
    FinishSequence(seq, v1::FINISH_REASON_STOP, id, now);
  }
}

void SchedulerLoop::FinishSequence(Sequence* seq, v1::FinishReason reason, int32_t stop_token_id,
                                   Clock::time_point now) {
  OutputEvent& out = out_.events.emplace_back();
  out.channel = seq->request->channel.get();
  out.event.kind = SampleEvent::Kind::kFinished;
  out.event.index = seq->sample_index;
  out.event.finish = reason;
  out.event.stop_token_id = stop_token_id;
  out.event.top.clear();
  EndSample(seq, now);
}

// A sample ends (finished, or FinishSample): its pages are free now and its live id is released
// with the worker's next plan. The request closes with its last sample.
void SchedulerLoop::EndSample(Sequence* seq, Clock::time_point now) {
  Unplace(seq);
  seq->state = Sequence::State::kDone;
  RequestState* r = seq->request;
  if (--r->open_samples == 0) CloseRequest(r, OkStatus(), now);
}

void SchedulerLoop::CloseRequest(RequestState* r, Status status, Clock::time_point now) {
  if (r->closed) return;
  r->closed = true;
  if (r->client >= 0) fair_.Leave(r->client);
  if (r->held) stat_held_.fetch_sub(1, std::memory_order_relaxed);
  for (auto& seq : r->samples) {
    if (seq->state == Sequence::State::kDone) continue;
    Unplace(seq.get());
    seq->state = Sequence::State::kDone;
  }
  if (!r->scheduled) LeaveQueue(1, r->queued_tokens());
  ObserveClosedRequest(*r, now);
  RequestTimings timings;
  timings.queue_ns = Nanos((r->scheduled ? r->first_scheduled : now) - r->req.arrival);
  timings.time_to_first_token_ns = r->has_first_token ? Nanos(r->first_token - r->req.arrival) : 0;
  timings.total_ns = Nanos(now - r->req.arrival);
  timings.preemptions = r->preemptions;
  timings.cached_tokens = r->cached_tokens;
  out_.closes.push_back(OutputClose{std::move(r->channel), std::move(status), timings});
  closed_.push_back(r->key);
  stat_finished_.fetch_add(1, std::memory_order_relaxed);
}

void SchedulerLoop::ApplyHold(RequestState* r, bool hold) {
  if (r->held == hold) return;
  r->held = hold;
  stat_held_.fetch_add(hold ? 1 : -1, std::memory_order_relaxed);
  if (!hold) return;  // its waiting sequences are planned again from the next step
  // Its running sequences give their pages back now; they restart from their tokens (the same
  // output: the sampler's stream is keyed by position) once released. A token in flight for one
  // comes back under a released live id and is dropped.
  for (auto& seq : r->samples) {
    if (seq->state != Sequence::State::kRunning || seq->worker < 0) continue;
    std::vector<Sequence*>& running = pool_.slots()[seq->worker]->queues.running;
    auto it = std::find(running.begin(), running.end(), seq.get());
    if (it == running.end()) continue;
    pool_.slots()[seq->worker]->queues.Requeue(static_cast<size_t>(it - running.begin()));
    stat_preemptions_.fetch_add(1, std::memory_order_relaxed);
  }
}

// Once per request that started: it has a queue time, and prefill and decode times once a token
// came back.
void SchedulerLoop::ObserveClosedRequest(const RequestState& r, Clock::time_point now) {
  if (!r.scheduled) return;
  const SchedulerMetrics& m = *metrics_;
  m.e2e_request_latency_seconds->Observe(Seconds(now - r.req.arrival));
  m.request_queue_time_seconds->Observe(Seconds(r.first_scheduled - r.req.arrival));
  if (r.has_first_token) {
    m.request_prefill_time_seconds->Observe(Seconds(r.first_token - r.first_scheduled));
    m.request_decode_time_seconds->Observe(Seconds(now - r.first_token));
  }
  m.request_prompt_tokens->Observe(static_cast<double>(r.req.prompt.size()));
}

// Requests stop counting against admission once scheduled (or ended). One lock per plan that
// started requests, not per token.
void SchedulerLoop::LeaveQueue(int64_t requests, int64_t tokens) {
  num_waiting_requests_ -= requests;
  std::lock_guard<std::mutex> lock(mu_);
  queue_.waiting_requests -= requests;
  queue_.waiting_tokens -= tokens;
}

void SchedulerLoop::PublishStats() {
  const int64_t open = static_cast<int64_t>(requests_.size());
  stat_waiting_.store(num_waiting_requests_, std::memory_order_relaxed);
  stat_running_.store(open - num_waiting_requests_, std::memory_order_relaxed);
  for (auto& w : pool_.slots()) {
    w->stat_up.store(w->health == WorkerSlot::Health::kUp, std::memory_order_relaxed);
    w->stat_free_pages.store(w->queues.pool.num_free(), std::memory_order_relaxed);
    w->stat_running.store(static_cast<int32_t>(w->queues.running.size()),
                          std::memory_order_relaxed);
    w->stat_cached_pages.store(w->queues.cache ? w->queues.cache->cached_pages() : 0,
                               std::memory_order_relaxed);
  }
}

}  // namespace astr::sched
