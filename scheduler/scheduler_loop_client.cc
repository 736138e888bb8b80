// The client-thread side: SchedulerLoop's construction and shutdown, and Scheduler's calls
// (scheduler.h) that other threads make (Submit, Cancel, FinishSample, Hold, StartDrain as
// commands; Stats and WorkerInfos from the published atomics).
#include <algorithm>
#include <string>

#include "scheduler/scheduler_loop.h"

namespace astr::sched {

SchedulerLoop::SchedulerLoop(SchedulerOptions options,
                             std::vector<std::unique_ptr<WorkerConnection>> workers)
    : options_(options),
      admission_(options),
      router_(options.cache_route_slack),
      capacity_(options_),
      pool_(options_, capacity_),
      admin_(this, workers.empty() ? 0 : workers[0]->info().weight_version()),
      max_in_flight_(options.overlap_steps ? 2 : 1) {
  if (!workers.empty()) {
    // Workers that come back or join must serve this model and version (PollWorkers, AddWorker).
    model_name_ = workers[0]->info().model_name();
    content_hash_ = workers[0]->info().content_hash();
    model_path_ = workers[0]->info().model_path();
  }
  std::vector<std::string> addresses;
  for (auto& conn : workers) {
    addresses.push_back(conn->address());
    WorkerSlot* w = pool_.AddInitial(std::move(conn));
    if (options_.fair_share) w->planner.set_fair_share(&fair_);
  }
  pool_.RecomputeLimits();
  metrics_ = std::make_unique<SchedulerMetrics>(&registry_, model_name_, addresses,
                                                pool_.max_context_tokens());
  for (size_t i = 0; i < pool_.slots().size(); ++i)
    pool_.slots()[i]->metrics = metrics_->workers[i];
  RegisterStatMetrics(model_name_);
  PublishStats();
  output_ = std::make_unique<OutputQueue>(&open_requests_);
  loop_thread_ = std::thread([this] { Run(); });
}

SchedulerLoop::~SchedulerLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  loop_thread_.join();  // closes every open request
  for (auto& waiter : worker_drain_waiters_) {
    waiter->status = UnavailableError("the scheduler is shutting down");
    waiter->Finish();
  }
  output_.reset();  // delivers the closes
}

StatusOr<std::shared_ptr<RequestChannel>> Scheduler::Submit(SchedRequest request) {
  if (request.prompt.empty()) return FieldError("prompt", ": must not be empty");
  if (request.n < 1) return FieldError("n", ": must be >= 1");
  if (request.max_tokens < 1) return FieldError("max_tokens", ": must be >= 1");
  if (request.logprob_start < 0 ||
      request.logprob_start > static_cast<int64_t>(request.prompt.size())) {
    return FieldError("logprob_start", ": " + std::to_string(request.logprob_start) +
                                           " outside [0, " + std::to_string(request.prompt.size()) +
                                           "] (0 = no prompt scoring)");
  }
  const int64_t footprint = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  const int64_t max_pool_tokens = loop_->pool_.max_pool_tokens();
  if (footprint > max_pool_tokens) {
    loop_->stat_refused_.fetch_add(1, std::memory_order_relaxed);
    return ResourceExhaustedError("prompt (" + std::to_string(request.prompt.size()) +
                                  " tokens) + max_tokens (" + std::to_string(request.max_tokens) +
                                  ") = " + std::to_string(footprint) +
                                  " tokens do not fit in the KV pool of any worker (largest: " +
                                  std::to_string(max_pool_tokens) + " tokens)")
        .WithKind(ErrorKind::kNeverFits);
  }
  // Built outside the lock: n sequences, one per sample.
  auto state = std::make_unique<RequestState>();
  state->samples.reserve(request.n);
  for (int32_t i = 0; i < request.n; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->request = state.get();
    seq->sample_index = i;
    seq->generated.reserve(std::min(request.max_tokens, 4096));
    if (request.constraint != nullptr) {
      seq->matcher = std::make_unique<ConstraintMatcher>(request.constraint);
    }
    state->samples.push_back(std::move(seq));
  }
  state->open_samples = request.n;
  state->req = std::move(request);
  std::shared_ptr<RequestChannel> channel;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(loop_->mu_);
    if (loop_->stop_) return UnavailableError("the scheduler is shutting down");
    QueueCounters queue = loop_->queue_;
    queue.draining = loop_->draining_.load();
    if (Status s = loop_->admission_.Admit(queue, state->req); !s.ok()) {
      loop_->stat_refused_.fetch_add(1, std::memory_order_relaxed);
      return s;
    }
    state->key = loop_->next_key_++;
    channel = std::make_shared<RequestChannel>(state->key);
    state->channel = channel;
    ++loop_->queue_.waiting_requests;
    loop_->queue_.waiting_tokens += state->queued_tokens();
    loop_->open_requests_.fetch_add(1, std::memory_order_acq_rel);
    loop_->commands_.push_back(SchedulerLoop::SubmitCommand{std::move(state)});
    wake = loop_->loop_sleeping_;
  }
  loop_->stat_admitted_.fetch_add(1, std::memory_order_relaxed);
  if (wake) loop_->wake_.notify_one();
  return channel;
}

void SchedulerLoop::PushCommand(Command command) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands_.push_back(std::move(command));
    wake = loop_sleeping_;
  }
  if (wake) wake_.notify_one();
}

void Scheduler::Cancel(uint64_t key, Status why) {
  loop_->PushCommand(SchedulerLoop::CancelCommand{key, std::move(why)});
}

void Scheduler::Hold(uint64_t key, bool hold) {
  loop_->PushCommand(SchedulerLoop::HoldCommand{key, hold});
}

void Scheduler::CountSampleOutput(v1::FinishReason reason, int64_t tokens) const {
  loop_->metrics_->generation_tokens->Increment(tokens);
  loop_->metrics_->finished(reason).Increment();
}

void Scheduler::ObserveRequestOutput(int64_t tokens) const {
  loop_->metrics_->request_generation_tokens->Observe(static_cast<double>(tokens));
}

void Scheduler::FinishSample(uint64_t key, int32_t index, int32_t kept_tokens) {
  loop_->PushCommand(SchedulerLoop::FinishSampleCommand{key, index, kept_tokens});
}

void Scheduler::StartDrain() {
  // Under loop_->mu_, so that a Submit that takes the lock after this returns is refused.
  std::lock_guard<std::mutex> lock(loop_->mu_);
  loop_->draining_.store(true);
}

v1::GetServerStatsResponse Scheduler::Stats() const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  v1::GetServerStatsResponse stats;
  stats.set_waiting_requests(static_cast<int32_t>(loop_->stat_waiting_.load(kRelaxed)));
  stats.set_running_requests(static_cast<int32_t>(loop_->stat_running_.load(kRelaxed)));
  stats.set_steps(loop_->stat_steps_.load(kRelaxed));
  stats.set_requests_admitted(loop_->stat_admitted_.load(kRelaxed));
  stats.set_requests_refused(loop_->stat_refused_.load(kRelaxed));
  stats.set_requests_finished(loop_->stat_finished_.load(kRelaxed));
  stats.set_preemptions(loop_->stat_preemptions_.load(kRelaxed));
  stats.set_requests_held(static_cast<int32_t>(loop_->stat_held_.load(kRelaxed)));
  stats.set_draining(loop_->draining_.load(kRelaxed));
  const SchedulerOptions& options = loop_->options_;
  loop_->pool_.ReadSlots([&](const std::vector<std::unique_ptr<WorkerSlot>>& slots) {
    bool any_up = false;
    for (const auto& w : slots) {
      any_up = any_up || (w->stat_up.load(kRelaxed) && !w->stat_draining.load(kRelaxed) &&
                          !w->stat_removed.load(kRelaxed));
    }
    std::string refusing;
    if (stats.draining()) {
      refusing = "draining";
    } else if (!any_up) {
      refusing = "no worker is up";
    } else if (stats.waiting_requests() >= options.max_queued_requests) {
      refusing = "the queue is full (--max-queued-requests " +
                 std::to_string(options.max_queued_requests) + ")";
    }
    stats.set_accepting_requests(refusing.empty());
    stats.set_not_accepting_reason(refusing);
    for (const auto& w : slots) {
      if (w->stat_removed.load(kRelaxed)) continue;
      v1::WorkerStats* ws = stats.add_workers();
      ws->set_address(w->address);
      ws->set_up(w->stat_up.load(kRelaxed));
      ws->set_draining(w->stat_draining.load(kRelaxed));
      ws->set_total_pages(w->info.num_pages());
      ws->set_free_pages(w->stat_free_pages.load(kRelaxed));
      ws->set_running_sequences(w->stat_running.load(kRelaxed));
      ws->set_steps(w->stat_steps.load(kRelaxed));
      ws->set_sequences_assigned(w->stat_assigned.load(kRelaxed));
      ws->set_mean_step_ns(w->stat_mean_step_ns.load(kRelaxed));
      ws->set_cached_pages(w->stat_cached_pages.load(kRelaxed));
      ws->set_cache_query_tokens(w->stat_cache_query_tokens.load(kRelaxed));
      ws->set_cache_hit_tokens(w->stat_cache_hit_tokens.load(kRelaxed));
    }
  });
  const int64_t queries = loop_->stat_cache_queries_.load(kRelaxed);
  stats.set_prefix_cache_hit_rate(
      queries > 0 ? static_cast<double>(loop_->stat_cache_hits_.load(kRelaxed)) / queries : 0.0);
  return stats;
}

std::vector<v1::InfoResponse> Scheduler::WorkerInfos() const {
  std::vector<v1::InfoResponse> out;
  for (WorkerMember& m : Members()) out.push_back(std::move(m.info));
  return out;
}

// The same atomics as Stats(), read when the registry renders.
void SchedulerLoop::RegisterStatMetrics(const std::string& model) {
  auto read = [](const auto& atomic) {
    return [&atomic] { return static_cast<double>(atomic.load(std::memory_order_relaxed)); };
  };
  metrics::Registry& r = registry_;
  r.AddCallbackGauge("astr:num_requests_running",
                     "Requests started on a worker and not ended (their sequences may be "
                     "preempted or waiting for a worker meanwhile).",
                     {"model"})
      .Add({model}, read(stat_running_));
  r.AddCallbackGauge("astr:num_requests_waiting",
                     "Requests admitted and not started on any worker yet.", {"model"})
      .Add({model}, read(stat_waiting_));
  r.AddCallbackGauge("astr:weight_version",
                     "Weight version served (0: the weights loaded at "
                     "start).",
                     {"model"})
      .Add({model}, [this] { return static_cast<double>(admin_.version()); });
  r.AddCallbackCounter("astr:requests_admitted_total", "Requests admitted into the queue.",
                       {"model"})
      .Add({model}, read(stat_admitted_));
  r.AddCallbackCounter("astr:requests_refused_total",
                       "Requests refused by admission: queue full, draining, or too long for "
                       "every worker's KV pool.",
                       {"model"})
      .Add({model}, read(stat_refused_));
  r.AddCallbackCounter("astr:num_preemptions_total",
                       "Running sequences stopped to be recomputed later: pages ran out, or "
                       "their worker's step stream broke.",
                       {"model"})
      .Add({model}, read(stat_preemptions_));
  r.AddCallbackCounter("astr:prefix_cache_queries_total",
                       "Tokens of the sequences started (prompt + tokens generated before a "
                       "restart), looked up in the prefix cache.",
                       {"model"})
      .Add({model}, read(stat_cache_queries_));
  r.AddCallbackCounter("astr:prefix_cache_hits_total",
                       "Of astr:prefix_cache_queries_total, the tokens whose K/V came from the "
                       "prefix cache.",
                       {"model"})
      .Add({model}, read(stat_cache_hits_));
  pool_.RegisterMetrics(&registry_, model);
}

}  // namespace astr::sched
