#include "scheduler/worker_pool.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <utility>

namespace astr::sched {

WorkerSlot::WorkerSlot(std::unique_ptr<WorkerConnection> connection, const StepCapacity& capacity,
                       const SchedulerOptions& options)
    : conn(std::move(connection)),
      address(conn->address()),
      info(conn->info()),
      queues(info.num_pages(), info.page_size(),
             {.tokens = info.kv_window_tokens(),
              .tables = info.kv_window_tables(),
              .max_step_tokens = info.max_batch_tokens()}),  // the chunk: below
      cost(options.max_step_ms),
      planner(capacity.For(info.max_batch_tokens(), info.max_batch(), info.max_context_tokens())) {
  queues.pool.set_max_step_tokens(planner.limits().prefill_chunk);
  queues.longrope_original = info.longrope_original_context();
  if (options.prefix_cache) queues.EnableCache();
  planner.set_cost_model(&cost);
  queues.cache_version = info.weight_version();
}

WorkerPool::WorkerPool(const SchedulerOptions& options, const StepCapacity& capacity)
    : options_(options), capacity_(capacity) {}

WorkerPool::~WorkerPool() {
  stop_reconnecting_.store(true, std::memory_order_release);
  for (auto& w : slots_) {
    if (w->reconnector.joinable()) w->reconnector.join();
  }
}

WorkerSlot* WorkerPool::Find(const std::string& address) {
  for (const auto& slot : slots_) {
    if (slot->health != WorkerSlot::Health::kRemoved && slot->address == address) {
      return slot.get();
    }
  }
  return nullptr;
}

WorkerSlot* WorkerPool::AddInitial(std::unique_ptr<WorkerConnection> conn) {
  std::lock_guard<std::mutex> lock(mu_);
  slots_.push_back(std::make_unique<WorkerSlot>(std::move(conn), capacity_, options_));
  return slots_.back().get();
}

StatusOr<WorkerSlot*> WorkerPool::Join(std::unique_ptr<WorkerConnection> conn,
                                       const PoolIdentity& pool) {
  const v1::InfoResponse& info = conn->info();
  const std::string address = conn->address();
  if (Excluded(address)) {
    return FailedPreconditionError(
        "worker " + address +
        " was drained on purpose (DrainWorker) and is not added back while its address stays "
        "listed");
  }
  if (Find(address) != nullptr) {
    return Status(StatusCode::kAlreadyExists, "worker " + address + " is a member");
  }
  if (info.draining()) {
    return FailedPreconditionError("worker " + address + " is shutting down (draining)");
  }
  ASTR_RETURN_IF_ERROR(CheckWorkerFits(address, info, pool));
  auto slot = std::make_unique<WorkerSlot>(std::move(conn), capacity_, options_);
  WorkerSlot* w = slot.get();
  {
    // A removed slot whose connection is gone holds nothing: reuse its index.
    std::lock_guard<std::mutex> lock(mu_);
    auto reusable = std::find_if(slots_.begin(), slots_.end(), [](const auto& s) {
      return s->health == WorkerSlot::Health::kRemoved && s->conn == nullptr;
    });
    if (reusable != slots_.end()) {
      *reusable = std::move(slot);
    } else {
      slots_.push_back(std::move(slot));
    }
  }
  if (kv_pages_used_ != nullptr) AddMetrics(w);
  RecomputeLimits();
  return w;
}

Status WorkerPool::CheckRejoin(const WorkerSlot& w, int64_t version) const {
  const PoolIdentity pool{w.info.content_hash(), w.info.model_path(), version, &w.info};
  return CheckWorkerFits(w.conn->address(), w.conn->info(), pool);
}

void WorkerPool::StartReconnect(WorkerSlot* w) {
  if (w->reconnector.joinable()) w->reconnector.join();
  w->reconnected.store(false, std::memory_order_relaxed);
  w->refused_draining.store(false, std::memory_order_relaxed);
  w->reconnector_done.store(false, std::memory_order_relaxed);
  const auto attempt = std::chrono::milliseconds(options_.reconnect_attempt_ms);
  w->reconnector = std::thread([this, w, attempt] {
    while (!stop_reconnecting_.load(std::memory_order_acquire) &&
           !w->stop_reconnect.load(std::memory_order_acquire)) {
      const Status s = w->conn->Reconnect(attempt);
      if (s.ok()) {
        w->reconnected.store(true, std::memory_order_release);
        break;
      }
      // The worker answers but is shutting down: its sequences need not wait for it.
      if (s.code() == StatusCode::kFailedPrecondition) {
        w->refused_draining.store(true, std::memory_order_release);
      }
      // Reconnect itself waits up to `attempt` for the channel; a refused connection returns at
      // once, so pace the retries.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    w->reconnector_done.store(true, std::memory_order_release);
  });
}

void WorkerPool::Remove(WorkerSlot* w) {
  w->health = WorkerSlot::Health::kRemoved;
  w->draining = false;
  w->stop_reconnect.store(true, std::memory_order_release);
  w->results_received = w->plans_sent;
  w->receive_due = false;
  if (kv_pages_used_ != nullptr) RemoveMetrics(w->address);
  w->stat_up.store(false, std::memory_order_relaxed);
  w->stat_draining.store(false, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    w->stat_removed.store(true, std::memory_order_relaxed);
  }
  // Closing the connection ends the step stream: the worker drops whatever is live there.
  CloseRemovedConnection(w);
  RecomputeLimits();
}

void WorkerPool::CloseRemovedConnection(WorkerSlot* w) {
  if (w->conn == nullptr || !w->reconnector_done.load(std::memory_order_acquire)) return;
  if (w->reconnector.joinable()) w->reconnector.join();
  std::lock_guard<std::mutex> lock(mu_);  // Members() reads slots under it
  w->conn.reset();
}

void WorkerPool::RecomputeLimits() {
  int64_t pool = 0;
  int32_t context = 0;
  int64_t members = 0;
  for (const auto& w : slots_) {
    if (w->health == WorkerSlot::Health::kRemoved) continue;
    ++members;
    pool = std::max(pool, w->queues.pool.capacity_tokens());
    const int32_t c = w->info.max_context_tokens();
    if (c > 0 && (context == 0 || c < context)) context = c;
  }
  // With no member left, the last limits stay: Submit then refuses with "no worker is up".
  members_.store(members, std::memory_order_relaxed);
  if (members == 0) return;
  max_pool_tokens_.store(pool, std::memory_order_relaxed);
  max_context_tokens_ = context;
}

std::vector<WorkerMember> WorkerPool::Members() const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  std::vector<WorkerMember> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& w : slots_) {
    if (w->stat_removed.load(kRelaxed)) continue;
    out.push_back(WorkerMember{.address = w->address,
                               .info = w->info,
                               .up = w->stat_up.load(kRelaxed),
                               .draining = w->stat_draining.load(kRelaxed)});
  }
  return out;
}

void WorkerPool::Exclude(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  excluded_.insert(address);
}

void WorkerPool::Readmit(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  excluded_.erase(address);
}

bool WorkerPool::Excluded(const std::string& address) const {
  std::lock_guard<std::mutex> lock(mu_);
  return excluded_.count(address) > 0;
}

void WorkerPool::RegisterMetrics(metrics::Registry* registry, const std::string& model) {
  model_ = model;
  metrics::Registry& r = *registry;
  kv_pages_used_ = &r.AddCallbackGauge("astr:kv_pages_used",
                                       "KV pages of a worker held by the scheduler's sequences.",
                                       {"model", "worker"});
  kv_pages_total_ = &r.AddCallbackGauge("astr:kv_pages_total", "KV pages of a worker's pool.",
                                        {"model", "worker"});
  worker_up_ = &r.AddCallbackGauge(
      "astr:worker_up", "1 while a worker's step stream is up, else 0 (reconnecting or down).",
      {"model", "worker"});
  worker_draining_ = &r.AddCallbackGauge(
      "astr:worker_draining",
      "1 while a worker is being drained (no new sequences; it leaves the pool once its "
      "sequences are done), else 0.",
      {"model", "worker"});
  worker_steps_ =
      &r.AddCallbackCounter("astr:steps_total", "Steps a worker answered.", {"model", "worker"});
  cached_pages_ = &r.AddCallbackGauge(
      "astr:prefix_cache_pages",
      "KV pages of a worker that its prefix cache keeps (shared by running sequences, or "
      "evictable: astr:kv_pages_used does not count those).",
      {"model", "worker"});
  r.AddCallbackGauge("astr:num_workers",
                     "Workers in the pool (up, reconnecting, down or draining).", {"model"})
      .Add({model},
           [this] { return static_cast<double>(members_.load(std::memory_order_relaxed)); });
  for (const auto& slot : slots_) {
    if (slot->health != WorkerSlot::Health::kRemoved) AddMetrics(slot.get());
  }
}

void WorkerPool::AddMetrics(const WorkerSlot* w) {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  const std::string& address = w->address;
  const int64_t pages = w->info.num_pages();
  kv_pages_used_->Add({model_, address}, [w, pages] {
    return static_cast<double>(pages - w->stat_free_pages.load(kRelaxed));
  });
  kv_pages_total_->Add({model_, address}, [pages] { return static_cast<double>(pages); });
  worker_up_->Add({model_, address}, [w] { return w->stat_up.load(kRelaxed) ? 1.0 : 0.0; });
  worker_draining_->Add({model_, address},
                        [w] { return w->stat_draining.load(kRelaxed) ? 1.0 : 0.0; });
  worker_steps_->Add({model_, address},
                     [w] { return static_cast<double>(w->stat_steps.load(kRelaxed)); });
  cached_pages_->Add({model_, address},
                     [w] { return static_cast<double>(w->stat_cached_pages.load(kRelaxed)); });
}

void WorkerPool::RemoveMetrics(const std::string& address) {
  kv_pages_used_->Remove({model_, address});
  kv_pages_total_->Remove({model_, address});
  worker_up_->Remove({model_, address});
  worker_draining_->Remove({model_, address});
  worker_steps_->Remove({model_, address});
  cached_pages_->Remove({model_, address});
}

}  // namespace astr::sched
