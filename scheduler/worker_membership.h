// Which workers the scheduler drives, kept current while it runs (docs/deploy.md "Scaling
// workers"). `--workers` lists entries; each is a fixed address (HOST:PORT) or a DNS name
// (dns:///NAME:PORT, e.g. a Kubernetes headless Service) whose addresses are re-resolved every
// --worker-refresh-s. Every refresh:
//   - an address that a name newly resolves to is dialled (in the background, retrying while it
//     stays listed: a pod may still be loading its model) and handed to Scheduler::AddWorker,
//     which refuses another model or weight version (logged once per reason, naming both hashes);
//   - a member that its name no longer resolves to is drained (Scheduler::DrainWorker): it takes
//     no new sequences and leaves once its running ones are done or restarted elsewhere;
//   - a fixed address that has left the pool (its worker shut down) is dialled again, so that a
//     restarted worker rejoins.
// A resolver failure (no answer, EAI_AGAIN) keeps the last addresses of that name: a DNS outage
// drains nothing. A name that resolves to nothing (NXDOMAIN: a Service scaled to zero) drains
// its workers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/base/status.h"
#include "scheduler/scheduler.h"
#include "scheduler/worker_connection.h"

namespace astr::sched {

// One entry of --workers.
struct WorkerSpec {
  std::string text;  // as written
  std::string host;  // host or name
  int port = 0;
  bool dns = false;  // dns:///NAME:PORT (re-resolved); else a fixed HOST:PORT
};

// Parses --workers: entries separated by commas, each HOST:PORT, [IPV6]:PORT, dns:///NAME:PORT or
// dns:NAME:PORT. INVALID_ARGUMENT names the entry.
StatusOr<std::vector<WorkerSpec>> ParseWorkerSpecs(const std::string& flag);

// Resolves a name to "IP:PORT" addresses ("[IPV6]:PORT"), sorted, without duplicates.
// NOT_FOUND when the name has no address (NXDOMAIN, no data); UNAVAILABLE when the resolver gave
// no answer. Uses getaddrinfo: /etc/hosts and DNS as nsswitch.conf says.
using Resolver =
    std::function<StatusOr<std::vector<std::string>>(const std::string& host, int port)>;
StatusOr<std::vector<std::string>> ResolveHost(const std::string& host, int port);

// Dials one worker (ConnectWorker in astr-scheduler; fakes in tests).
using Connector = std::function<StatusOr<std::unique_ptr<WorkerConnection>>(
    const std::string& address, std::chrono::milliseconds timeout)>;

struct MembershipOptions {
  std::chrono::milliseconds refresh{5000};       // --worker-refresh-s
  std::chrono::milliseconds dial_attempt{2000};  // one dial of a new address
  Resolver resolve = ResolveHost;
  Connector connect;
};

class WorkerMembership {
 public:
  WorkerMembership(std::vector<WorkerSpec> specs, MembershipOptions options);
  ~WorkerMembership();  // Stop()

  // Every address the entries name now (fixed ones as written, names resolved; a name whose
  // resolution fails contributes its last addresses). Thread-safe.
  std::vector<std::string> Resolve();
  // Starts the refresh thread over `scheduler` (which must outlive Stop).
  void Start(Scheduler* scheduler);
  // Stops the refresh and every dial; returns when their threads have ended.
  void Stop();
  // Runs one refresh now (tests; the thread does the same every `refresh`).
  void RefreshOnce();

 private:
  struct Dial {
    std::thread thread;
    bool done = false;  // under mu_
  };
  void Run();
  void DialLoop(std::string address);
  bool Wanted(const std::string& address);  // under mu_
  void Sleep(std::chrono::milliseconds d);  // returns early on Stop

  const std::vector<WorkerSpec> specs_;
  const MembershipOptions options_;
  Scheduler* scheduler_ = nullptr;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<std::string, std::vector<std::string>> last_;  // name entry -> its last addresses
  std::set<std::string> wanted_;                          // addresses listed at the last refresh
  std::set<std::string> fixed_;                           // addresses of fixed entries
  std::map<std::string, std::unique_ptr<Dial>> dials_;   // in progress (or done, to join)
  std::map<std::string, std::string> refusals_;          // address -> last logged refusal
  std::thread thread_;
};

}  // namespace astr::sched
