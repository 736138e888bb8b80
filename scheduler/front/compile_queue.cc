#include "scheduler/front/compile_queue.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <utility>

namespace astr::front {

struct CompileQueue::Ticket::Job {
  std::string key;
  std::string client;
  std::string field;
  sched::ConstraintSpec spec;
  struct Waiter {
    std::shared_ptr<Ticket> ticket;
    Done done;
    Post post;
  };
  // Every request waiting for this compile; cleared when it ends.
  std::vector<Waiter> waiters;
  int64_t bytes = 0;                   // the constraint's text (the waiting queue's charge)
  std::atomic<bool> cancelled{false};  // every waiter cancelled, or the queue stops
  bool running = false;                // a thread took it
  uint64_t seq = 0;                    // arrival order
};

void CompileQueue::DropLocked(const std::shared_ptr<Ticket::Job>& job) {
  if (auto it = by_key_.find(job->key); it != by_key_.end() && it->second == job) {
    by_key_.erase(it);
  }
  auto c = clients_.find(job->client);
  if (c == clients_.end()) return;
  auto& q = c->second.queued;
  if (auto it = std::find(q.begin(), q.end(), job); it != q.end()) {
    q.erase(it);
    --queued_;
    queued_bytes_ -= job->bytes;
  }
  if (q.empty() && c->second.running == 0) clients_.erase(c);
}

void CompileQueue::Ticket::Cancel() {
  Done done;
  std::string field;
  {
    std::lock_guard<std::mutex> lock(queue_->mu_);
    if (job_ == nullptr) return;  // done ran already, or is about to run
    field = job_->field;
    auto& waiters = job_->waiters;
    for (auto it = waiters.begin(); it != waiters.end(); ++it) {
      if (it->ticket.get() == this) {
        done = std::move(it->done);
        waiters.erase(it);
        break;
      }
    }
    if (waiters.empty()) {
      // Nobody waits for it: a running compile is killed, a queued one is dropped.
      job_->cancelled.store(true, std::memory_order_release);
      if (!job_->running) queue_->DropLocked(job_);
    }
    job_.reset();
  }
  if (done) done(Status(StatusCode::kCancelled, field + ": cancelled"));
}

CompileQueue::CompileQueue(std::shared_ptr<const sched::ConstraintCompiler> compiler,
                           Options options)
    : compiler_(std::move(compiler)), options_(options) {
  const int n = std::max(1, options_.workers);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Run(); });
}

CompileQueue::~CompileQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& [key, job] : by_key_) job->cancelled.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::shared_ptr<CompileQueue::Ticket> CompileQueue::Submit(const std::string& client,
                                                           const sched::ConstraintSpec& spec,
                                                           const std::string& field, Done done,
                                                           Post post) {
  if (Status s = compiler_->Check(spec, field); !s.ok()) {
    done(s);
    return nullptr;
  }
  if (auto hit = compiler_->Lookup(spec)) {
    done(std::move(hit));
    return nullptr;
  }
  auto ticket = std::make_shared<Ticket>();
  ticket->queue_ = this;
  std::string key = sched::ConstraintKey(spec);
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) {
    lock.unlock();
    done(UnavailableError("the server is shutting down"));
    return nullptr;
  }
  if (auto it = by_key_.find(key); it != by_key_.end() && !it->second->cancelled.load()) {
    ticket->job_ = it->second;  // the same constraint is compiling or queued: share it
    it->second->waiters.push_back({ticket, std::move(done), std::move(post)});
    return ticket;
  }
  // A client new to the queue (or back after it had nothing queued or running) ranks as never
  // served: before every client served since.
  Client& c = clients_[client];
  auto refuse = [&](const std::string& why) {
    compiler_->CountBusy();
    if (c.queued.empty() && c.running == 0) clients_.erase(client);
    lock.unlock();
    done(ResourceExhaustedError(field + ": " + why + "; retry later"));
    return nullptr;
  };
  if (static_cast<int>(c.queued.size()) >= options_.max_queued_per_client) {
    return refuse("this client already has " + std::to_string(options_.max_queued_per_client) +
                  " constraint compiles waiting (--grammar-max-queued-per-client)");
  }
  int64_t bytes = static_cast<int64_t>(spec.text.size());
  for (const std::string& choice : spec.choices) bytes += static_cast<int64_t>(choice.size());
  if (queued_bytes_ + bytes > options_.max_queued_bytes && queued_ > 0) {
    const int64_t limit = options_.max_queued_bytes;
    return refuse("the constraints waiting to compile would pass " +
                  (limit % (1 << 20) == 0 ? std::to_string(limit >> 20) + " MiB"
                                          : std::to_string(limit) + " bytes") +
                  " of text (--grammar-max-queued-mb)");
  }
  auto job = std::make_shared<Ticket::Job>();
  job->key = key;
  job->client = client;
  job->field = field;
  job->spec = spec;
  job->waiters.push_back({ticket, std::move(done), std::move(post)});
  job->seq = ++submit_tick_;
  job->bytes = bytes;
  ticket->job_ = job;
  by_key_[key] = job;  // replaces a cancelled one, which still ends on its own
  c.queued.push_back(std::move(job));
  ++queued_;
  queued_bytes_ += bytes;
  lock.unlock();
  cv_.notify_one();
  return ticket;
}

std::shared_ptr<CompileQueue::Ticket::Job> CompileQueue::NextLocked() {
  if (queued_ == 0) return nullptr;
  Client* best = nullptr;
  for (auto& [name, c] : clients_) {
    if (c.queued.empty()) continue;
    const Ticket::Job& front = *c.queued.front();
    // A cancelled job costs nothing: it ends at once, whatever the client's share.
    if (c.running >= options_.per_client && !front.cancelled.load(std::memory_order_acquire)) {
      continue;
    }
    if (best == nullptr || c.last_served < best->last_served ||
        (c.last_served == best->last_served && front.seq < best->queued.front()->seq)) {
      best = &c;
    }
  }
  if (best == nullptr) return nullptr;
  std::shared_ptr<Ticket::Job> job = std::move(best->queued.front());
  best->queued.pop_front();
  --queued_;
  queued_bytes_ -= job->bytes;
  job->running = true;
  ++best->running;
  best->last_served = ++serve_tick_;
  return job;
}

void CompileQueue::Run() {
  // The compiles (and the threads XGrammar starts for them) run below the serving threads.
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    std::shared_ptr<Ticket::Job> job;
    cv_.wait(lock, [&] { return (job = NextLocked()) != nullptr || (stopping_ && queued_ == 0); });
    if (job == nullptr) return;
    lock.unlock();
    Result result = job->cancelled.load(std::memory_order_acquire)
                        ? Result(Status(StatusCode::kCancelled, job->field + ": cancelled"))
                        : compiler_->Compile(job->spec, job->field, &job->cancelled);
    lock.lock();
    if (auto it = by_key_.find(job->key); it != by_key_.end() && it->second == job) {
      by_key_.erase(it);
    }
    Client& c = clients_[job->client];
    --c.running;
    if (c.running == 0 && c.queued.empty()) clients_.erase(job->client);
    std::vector<Ticket::Job::Waiter> waiters = std::move(job->waiters);
    job->waiters.clear();
    for (auto& w : waiters) w.ticket->job_.reset();
    lock.unlock();
    cv_.notify_all();  // the client's share is free again
    for (auto& w : waiters) {
      if (w.post == nullptr) {
        w.done(result);
      } else {
        w.post([done = std::move(w.done), result] { done(result); });
      }
    }
    lock.lock();
  }
}

int64_t CompileQueue::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_;
}

int64_t CompileQueue::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [name, c] : clients_) n += c.running;
  return n;
}

}  // namespace astr::front
