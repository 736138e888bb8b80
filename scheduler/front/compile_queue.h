// The fronts' structured-output compiles, off the front threads and fair between clients
// (docs/structured.md "Limits"). A request whose constraint is not cached waits here, holding no
// thread, while a few compile threads work through the queue:
// - one client (its API key, else its connection) runs at most `per_client` compiles at once and
//   has at most `max_queued_per_client` waiting; beyond that its request is RESOURCE_EXHAUSTED
//   (HTTP 429), so a client that floods the server with schemas delays only itself; and the
//   constraints waiting hold at most `max_queued_bytes` of text, all clients together (a flood
//   from many connections is refused the same way instead of holding memory);
// - a free thread takes the next compile of the client served least recently, so a client's
//   first compile waits for the compiles running and at most one of each other client waiting,
//   each bounded by the compile budget;
// - requests for the same constraint share one compile (a fan-out of one new schema compiles
//   once);
// - a request that is cancelled (its client disconnected) stops waiting, and a compile nobody
//   waits for any more is stopped (its compiler process killed).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/base/status.h"
#include "scheduler/constraint.h"

namespace astr::front {

class CompileQueue {
 public:
  struct Options {
    int workers = 2;                 // compiles at once, all clients together
    int per_client = 1;              // compiles of one client at once
    int max_queued_per_client = 16;  // compiles of one client waiting for a thread
    int64_t max_queued_bytes = int64_t{64} << 20;  // text of the waiting constraints, all clients
  };
  using Result = StatusOr<std::shared_ptr<const sched::CompiledConstraint>>;
  using Done = std::function<void(Result)>;
  // Runs a task elsewhere (a front's TaskPool::Post).
  using Post = std::function<void(std::function<void()>)>;

  // One request's wait.
  class Ticket {
   public:
    // Ends the wait: its done runs with CANCELLED on this thread, before Cancel returns (so call
    // it holding no lock done takes), unless it ran already. A compile nobody waits for any more
    // is dropped from the queue, or killed.
    void Cancel();

   private:
    friend class CompileQueue;
    struct Job;
    CompileQueue* queue_ = nullptr;
    std::shared_ptr<Job> job_;  // guarded by the queue's mu_; null once done ran or runs
  };

  // `compiler` must not be null.
  CompileQueue(std::shared_ptr<const sched::ConstraintCompiler> compiler, Options options);
  // Stops every compile (their requests get CANCELLED) and joins the threads.
  ~CompileQueue();
  CompileQueue(const CompileQueue&) = delete;
  CompileQueue& operator=(const CompileQueue&) = delete;

  // Compiles `spec` for `client`. `done` runs exactly once: on this thread before Submit returns
  // when nothing needs compiling (a cached constraint, a size limit, a full queue) — Submit then
  // returns null — or later, through `post` (on the compile thread when it is null), so that a
  // compile thread only compiles.
  std::shared_ptr<Ticket> Submit(const std::string& client, const sched::ConstraintSpec& spec,
                                 const std::string& field, Done done, Post post = nullptr);

  // Compiles waiting and running now. (Refusals are counted by the compiler: CountBusy.)
  int64_t queued() const;
  int64_t running() const;

 private:
  struct Client {
    std::deque<std::shared_ptr<Ticket::Job>> queued;
    int running = 0;
    uint64_t last_served = 0;  // serve_tick_ when a job of it last started; 0: never
  };
  void Run();
  // The next job a thread may start, or null. Under mu_.
  std::shared_ptr<Ticket::Job> NextLocked();
  // Takes a queued job out of the queue. Under mu_.
  void DropLocked(const std::shared_ptr<Ticket::Job>& job);

  const std::shared_ptr<const sched::ConstraintCompiler> compiler_;
  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                                                 // mu_
  std::unordered_map<std::string, std::shared_ptr<Ticket::Job>> by_key_;  // mu_: queued or running
  std::unordered_map<std::string, Client> clients_;  // mu_: with jobs queued or running
  uint64_t serve_tick_ = 0;                          // mu_
  uint64_t submit_tick_ = 0;                         // mu_
  int64_t queued_ = 0;                               // mu_: jobs in every client's queue
  int64_t queued_bytes_ = 0;                         // mu_: their constraints' text
  std::vector<std::thread> threads_;
};

}  // namespace astr::front
