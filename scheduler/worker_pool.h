// The scheduler's workers: their slots (connection, queues, planner, counters), membership (a
// join checked by the one compatibility rule of worker_fit.h, exclusion after a deliberate drain,
// removal), each broken worker's reconnector thread, the pool-wide limits, and the per-worker
// metrics children. The loop thread owns the slots and their loop-side state; the calls marked
// thread-safe serve client threads (Stats, Members, Submit's fit check).
//
// A removed slot stays in the vector (sequences name workers by index), marked kRemoved with its
// connection closed, until a joining worker reuses it; the pool's mutex guards the vector and the
// slots' replacement, so that client threads read them safely.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics/registry.h"
#include "scheduler/batch_planner.h"
#include "scheduler/policies.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_metrics.h"
#include "scheduler/worker_fit.h"

namespace astr::sched {

// One worker: its connection, its queues and planner (loop-owned), and the counters Stats() reads.
struct WorkerSlot {
  enum class Health { kUp, kReconnecting, kDown, kRemoved };

  // With `prefix_cache`, its queues keep a prefix cache (of K/V computed under the version the
  // worker serves).
  WorkerSlot(std::unique_ptr<WorkerConnection> connection, const StepCapacity& capacity,
             const SchedulerOptions& options);

  std::unique_ptr<WorkerConnection> conn;  // null once removed (and its reconnector ended)
  const std::string address;               // conn->address(), kept after the connection goes
  v1::InfoResponse info;                   // as read when it joined
  WorkerQueues queues;
  StepCostModel cost;  // fitted from this worker's step timings; bounds the planner's steps
  BatchPlanner planner;
  PlannedStep plan;            // reused every step
  v1::StepResult result;       // reused every step
  PlannedStep masks_message;   // SendLateMasks'; reused
  // Outcomes of the plans sent and not answered yet: plan k uses outcomes[k % 2] (at most two in
  // flight: with overlap, plan N+1 goes out before result N is read).
  std::array<PlanOutcome, 2> outcomes;
  uint64_t plans_sent = 0;
  uint64_t results_received = 0;
  int in_flight() const { return static_cast<int>(plans_sent - results_received); }
  bool receive_due = false;   // this iteration reads a result
  int64_t placed_tokens = 0;  // routing load: prompt + max_tokens of its sequences

  Health health = Health::kUp;
  Clock::time_point broken_since{};
  Status last_error;
  std::thread reconnector;
  std::atomic<bool> reconnected{false};       // set by the reconnector when it succeeded
  std::atomic<bool> stop_reconnect{false};    // the slot was removed: give up
  std::atomic<bool> reconnector_done{true};   // the reconnector thread has returned
  std::atomic<bool> refused_draining{false};  // a redial found the worker shutting down

  // Draining (loop-owned): no new sequence is placed here; once it holds none, it is removed.
  bool draining = false;
  Clock::time_point drain_started{};
  Clock::time_point drain_deadline{};  // running sequences restart elsewhere after it
  std::string drain_reason;
  int32_t drain_finished = 0;  // sequences that ended here during the drain
  int32_t drain_moved = 0;     // sequences moved to other workers
  bool Placeable() const { return health == Health::kUp && !draining; }

  SchedulerMetrics::Worker metrics;  // its children of the per-worker histograms

  // Loop wall time of this worker's last steps (ring), for mean_step_ns.
  std::array<int64_t, 256> step_ns{};
  size_t step_ns_next = 0;
  size_t step_ns_count = 0;
  int64_t step_ns_sum = 0;

  // Published for Stats() (relaxed; written by the loop only).
  std::atomic<bool> stat_up{true};
  std::atomic<bool> stat_draining{false};
  std::atomic<bool> stat_removed{false};
  std::atomic<int64_t> stat_free_pages{0};
  std::atomic<int32_t> stat_running{0};
  std::atomic<int64_t> stat_steps{0};
  std::atomic<int64_t> stat_assigned{0};
  std::atomic<int64_t> stat_mean_step_ns{0};
  std::atomic<int64_t> stat_cached_pages{0};
  std::atomic<int64_t> stat_cache_query_tokens{0};  // totals since it joined
  std::atomic<int64_t> stat_cache_hit_tokens{0};
};

class WorkerPool {
 public:
  WorkerPool(const SchedulerOptions& options, const StepCapacity& capacity);
  // Stops the reconnectors and joins them.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // --- Loop thread (and the loop's constructor). ---

  // Every slot, removed ones included; Sequence::worker indexes it.
  std::vector<std::unique_ptr<WorkerSlot>>& slots() { return slots_; }
  const std::vector<std::unique_ptr<WorkerSlot>>& slots() const { return slots_; }
  // The member at `address` (not removed), or null.
  WorkerSlot* Find(const std::string& address);
  // Adds a worker the loop starts with (checked by Scheduler::Create).
  WorkerSlot* AddInitial(std::unique_ptr<WorkerConnection> conn);
  // Admits a joining worker: not excluded, not already a member, not shutting down, and fitting
  // `pool` (CheckWorkerFits). Reuses a removed slot's index when its connection is gone.
  StatusOr<WorkerSlot*> Join(std::unique_ptr<WorkerConnection> conn, const PoolIdentity& pool);
  // Whether a worker whose reconnector succeeded may serve again: it must still fit the pool it
  // joined (same model and KV pool) at weight `version`.
  Status CheckRejoin(const WorkerSlot& w, int64_t version) const;
  // Starts (or restarts) `w`'s reconnector thread; WorkerSlot::reconnected says when it is back.
  void StartReconnect(WorkerSlot* w);
  // Marks `w` removed (it leaves the members; its reconnector stops; its metrics go) and closes
  // its connection once its reconnector has returned.
  void Remove(WorkerSlot* w);
  // A removed slot's connection closes once its reconnector (which uses it) has returned.
  void CloseRemovedConnection(WorkerSlot* w);
  // The pool-wide limits Submit and the finish rule use, after a member joined or left.
  void RecomputeLimits();
  int32_t max_context_tokens() const { return max_context_tokens_; }  // 0 = unknown

  // The per-worker metric families and the members gauge (callback families in `registry`),
  // with a child for every member now and for every one that joins.
  void RegisterMetrics(metrics::Registry* registry, const std::string& model);

  // --- Thread-safe. ---

  // Largest KV pool over the members, in tokens (Submit's fit check).
  int64_t max_pool_tokens() const { return max_pool_tokens_.load(std::memory_order_relaxed); }
  // The members now, in pool order.
  std::vector<WorkerMember> Members() const;
  // Runs `read(slots)` with the slots guarded against the loop's replacing them (read only
  // their published atomics and const fields).
  template <typename Read>
  void ReadSlots(Read&& read) const {
    std::lock_guard<std::mutex> lock(mu_);
    read(slots_);
  }
  // Addresses Join refuses (a deliberate drain), until Readmit.
  void Exclude(const std::string& address);
  void Readmit(const std::string& address);
  bool Excluded(const std::string& address) const;

 private:
  void AddMetrics(const WorkerSlot* w);
  void RemoveMetrics(const std::string& address);

  const SchedulerOptions& options_;
  const StepCapacity& capacity_;
  mutable std::mutex mu_;  // the vector, slot replacement, stat_removed, excluded_
  std::vector<std::unique_ptr<WorkerSlot>> slots_;
  std::set<std::string> excluded_;  // mu_
  std::atomic<bool> stop_reconnecting_{false};
  std::atomic<int64_t> max_pool_tokens_{0};
  std::atomic<int64_t> members_{0};
  int32_t max_context_tokens_ = 0;
  // The per-worker callback families (children added and removed with the members).
  std::string model_;
  metrics::CallbackFamily* kv_pages_used_ = nullptr;
  metrics::CallbackFamily* kv_pages_total_ = nullptr;
  metrics::CallbackFamily* worker_up_ = nullptr;
  metrics::CallbackFamily* worker_steps_ = nullptr;
  metrics::CallbackFamily* worker_draining_ = nullptr;
  metrics::CallbackFamily* cached_pages_ = nullptr;
};

}  // namespace astr::sched
