// The loop's worker pool: routing sequences to workers, and what happens when a worker's step
// stream breaks (reconnect, or mark down and move its sequences elsewhere).
#include <limits>
#include <string>

#include "common/base/logging.h"
#include "scheduler/scheduler_loop.h"

namespace astr::sched {

bool SchedulerLoop::Place(Sequence* seq) {
  const int64_t footprint = seq->footprint();
  // Up workers first; a worker that is reconnecting only when no worker is up (its sequences
  // move on if it is declared down). Never one that is draining.
  int chosen = -1;
  for (WorkerSlot::Health accept : {WorkerSlot::Health::kUp, WorkerSlot::Health::kReconnecting}) {
    loads_.clear();
    for (const auto& w : pool_.slots()) {
      const bool accepting = w->health == accept && !w->draining;
      loads_.push_back(WorkerLoad{accepting, w->queues.num_sequences(), w->placed_tokens,
                                  w->queues.pool.capacity_tokens(),
                                  accepting ? CachedPrefixTokens(w.get(), seq) : 0});
    }
    chosen = router_.Pick(loads_, footprint);
    if (chosen >= 0) break;
  }
  if (chosen < 0) return false;
  WorkerSlot* w = pool_.slots()[chosen].get();
  seq->worker = chosen;
  w->placed_tokens += footprint;
  w->queues.Enqueue(seq);
  w->stat_assigned.fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t SchedulerLoop::CachedPrefixTokens(WorkerSlot* w, const Sequence* seq) {
  WorkerQueues& q = w->queues;
  if (q.cache == nullptr || q.cache->cached_pages() == 0 || pool_.slots().size() < 2) return 0;
  const uint64_t ns = q.CacheNamespace(seq, seq->num_tokens());
  route_pages_.clear();
  const PrefixCache::MatchResult m =
      q.MatchCachedPrefix(seq, ns, seq->num_tokens() - 1, std::numeric_limits<uint64_t>::max(),
                          /*touch=*/false, &route_pages_);
  return m.pages * q.pool.page_size();
}

void SchedulerLoop::Unplace(Sequence* seq) {
  if (seq->worker < 0) return;
  WorkerSlot* w = pool_.slots()[seq->worker].get();
  if (w->draining) ++w->drain_finished;  // it ended here (finished, cancelled, failed)
  w->queues.Remove(seq);
  w->placed_tokens -= seq->footprint();
  seq->worker = -1;
}

void SchedulerLoop::OnWorkerBroken(WorkerSlot* w, const Status& why, Clock::time_point now) {
  const int64_t running = static_cast<int64_t>(w->queues.running.size());
  LOG(WARNING) << "worker " << w->conn->address() << ": " << why.message() << "; reconnecting ("
               << running << " running sequences restart)";
  w->receive_due = false;
  w->results_received = w->plans_sent;  // whatever was in flight is lost
  // Count the break once for every request that was running here; those past the limit end.
  ++worker_breaks_;
  failing_.clear();
  for (Sequence* seq : w->queues.running) {
    RequestState* r = seq->request;
    if (r->closed || r->last_failure_break == worker_breaks_) continue;
    r->last_failure_break = worker_breaks_;
    if (++r->worker_failures > options_.max_worker_failures) failing_.push_back(r);
  }
  // The new stream starts with no live sequences: every running one restarts from prompt +
  // generated tokens (same RNG counters), here or on another worker.
  w->queues.ResetStream();
  stat_preemptions_.fetch_add(running, std::memory_order_relaxed);
  w->health = WorkerSlot::Health::kReconnecting;
  w->broken_since = now;
  w->last_error = why;
  for (RequestState* r : failing_) {
    CloseRequest(r,
                 UnavailableError("aborted after " + std::to_string(r->worker_failures) +
                                  " worker failures while running it (--max-worker-failures " +
                                  std::to_string(options_.max_worker_failures) +
                                  "); last: worker " + w->conn->address() + ": " + why.message()),
                 now);
  }
  pool_.StartReconnect(w);
}

void SchedulerLoop::PollWorkers(Clock::time_point now) {
  if (now >= next_idle_check_) {
    next_idle_check_ = now + kIdleCheckInterval;
    for (auto& slot : pool_.slots()) {
      WorkerSlot* w = slot.get();
      if (w->health == WorkerSlot::Health::kUp && w->in_flight() == 0 && !w->conn->Alive()) {
        OnWorkerBroken(w, UnavailableError("the connection under the idle step stream was lost"),
                       now);
      }
    }
  }
  for (auto& slot : pool_.slots()) {
    WorkerSlot* w = slot.get();
    if (w->health == WorkerSlot::Health::kUp || w->health == WorkerSlot::Health::kRemoved) {
      continue;
    }
    if (w->reconnected.load(std::memory_order_acquire)) {
      w->reconnector.join();
      // Another model or pool answers at that address, or it missed a weight update (restarted,
      // or down while one was committed): serving it would mix them. Never route to it again.
      if (Status fits = pool_.CheckRejoin(*w, admin_.version()); !fits.ok()) {
        LOG(ERROR) << fits.message() << "; keeping it down";
        w->reconnected.store(false, std::memory_order_relaxed);
        if (w->health == WorkerSlot::Health::kReconnecting) {
          MoveWaiting(w, /*keep_unplaceable=*/false, now);
        }
        w->health = WorkerSlot::Health::kDown;
        w->broken_since = Clock::time_point::max();  // no further attempts
        continue;
      }
      LOG(INFO) << "worker " << w->conn->address() << ": step stream reconnected";
      w->health = WorkerSlot::Health::kUp;
      continue;
    }
    if (w->health == WorkerSlot::Health::kReconnecting &&
        w->refused_draining.load(std::memory_order_acquire)) {
      LOG(WARNING) << "worker " << w->address
                   << ": shutting down (it answers as draining), marked down";
      w->health = WorkerSlot::Health::kDown;  // the reconnector keeps trying: it may restart
      MoveWaiting(w, /*keep_unplaceable=*/false, now);
      continue;
    }
    if (w->health == WorkerSlot::Health::kReconnecting &&
        now - w->broken_since >= std::chrono::milliseconds(options_.worker_down_after_ms)) {
      LOG(WARNING) << "worker " << w->conn->address() << ": unreachable for "
                   << options_.worker_down_after_ms << " ms, marked down";
      w->health = WorkerSlot::Health::kDown;  // the reconnector keeps trying
      MoveWaiting(w, /*keep_unplaceable=*/false, now);
    }
  }
}

int32_t SchedulerLoop::MoveWaiting(WorkerSlot* w, bool keep_unplaceable, Clock::time_point now) {
  if (w->queues.waiting.empty()) return 0;
  std::vector<Sequence*> moving;
  moving.swap(w->queues.waiting);
  const int home = moving.front()->worker;
  for (Sequence* seq : moving) {
    w->placed_tokens -= seq->footprint();
    seq->worker = -1;
    seq->state = Sequence::State::kWaiting;
  }
  int32_t moved = 0;
  for (Sequence* seq : moving) {
    RequestState* r = seq->request;
    // A request closed below (another of its samples found no worker) has ended this one too.
    if (r->closed || seq->state == Sequence::State::kDone) continue;
    if (Place(seq)) {
      ++moved;
    } else if (keep_unplaceable) {
      seq->worker = home;
      w->placed_tokens += seq->footprint();
      w->queues.Enqueue(seq);
    } else {
      CloseRequest(r,
                   UnavailableError("worker " + w->address + " is down (" +
                                    w->last_error.message() + ") and no other worker is up"),
                   now);
    }
  }
  return moved;
}

void SchedulerLoop::RecordStepTime(WorkerSlot* w, int64_t ns) {
  w->step_ns_sum += ns - w->step_ns[w->step_ns_next];
  w->step_ns[w->step_ns_next] = ns;
  w->step_ns_next = (w->step_ns_next + 1) % w->step_ns.size();
  if (w->step_ns_count < w->step_ns.size()) ++w->step_ns_count;
  w->stat_steps.fetch_add(1, std::memory_order_relaxed);
  w->metrics.step_time_seconds->Observe(static_cast<double>(ns) * 1e-9);
  w->stat_mean_step_ns.store(w->step_ns_sum / static_cast<int64_t>(w->step_ns_count),
                             std::memory_order_relaxed);
}

}  // namespace astr::sched
