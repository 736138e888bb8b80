#include "scheduler/worker_membership.h"

#include <netdb.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdlib>

#include "common/base/logging.h"

namespace astr::sched {
namespace {

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "nothing" : out;
}

// HOST:PORT or [IPV6]:PORT into its parts; false when malformed.
bool SplitHostPort(const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size()) return false;
  std::string h = text.substr(0, colon);
  if (h.front() == '[') {
    if (h.back() != ']' || h.size() < 3) return false;
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string::npos) {
    return false;  // an IPv6 address needs brackets
  }
  const std::string p = text.substr(colon + 1);
  if (p.empty() || p.size() > 5 || !std::all_of(p.begin(), p.end(), ::isdigit)) return false;
  const int value = std::atoi(p.c_str());
  if (value < 1 || value > 65535) return false;
  *host = h;
  *port = value;
  return true;
}

}  // namespace

StatusOr<std::vector<WorkerSpec>> ParseWorkerSpecs(const std::string& flag) {
  std::vector<WorkerSpec> specs;
  size_t begin = 0;
  while (begin <= flag.size()) {
    size_t end = flag.find(',', begin);
    if (end == std::string::npos) end = flag.size();
    std::string item = flag.substr(begin, end - begin);
    begin = end + 1;
    while (!item.empty() && item.back() == ' ') item.pop_back();
    while (!item.empty() && item.front() == ' ') item.erase(0, 1);
    if (item.empty()) continue;
    WorkerSpec spec;
    spec.text = item;
    std::string rest = item;
    if (rest.rfind("dns:///", 0) == 0) {
      spec.dns = true;
      rest = rest.substr(7);
    } else if (rest.rfind("dns:", 0) == 0) {
      spec.dns = true;
      rest = rest.substr(4);
    }
    if (!SplitHostPort(rest, &spec.host, &spec.port)) {
      return InvalidArgumentError("--workers: '" + item +
                                  "' is not HOST:PORT or dns:///NAME:PORT (port 1-65535)");
    }
    if (std::any_of(specs.begin(), specs.end(),
                    [&](const WorkerSpec& s) { return s.text == spec.text; })) {
      return InvalidArgumentError("--workers: '" + item + "' is listed twice");
    }
    specs.push_back(std::move(spec));
  }
  if (specs.empty()) return InvalidArgumentError("--workers: no address given");
  return specs;
}

StatusOr<std::vector<std::string>> ResolveHost(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc == EAI_NONAME
#ifdef EAI_NODATA
      || rc == EAI_NODATA
#endif
  ) {
    return NotFoundError(host + ": no address (" + gai_strerror(rc) + ")");
  }
  if (rc != 0) return UnavailableError(host + ": " + gai_strerror(rc));
  std::vector<std::string> out;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr, text,
                sizeof(text));
      out.push_back(std::string(text) + ":" + std::to_string(port));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr, text,
                sizeof(text));
      out.push_back("[" + std::string(text) + "]:" + std::to_string(port));
    }
  }
  freeaddrinfo(found);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) return NotFoundError(host + ": no IPv4 or IPv6 address");
  return out;
}

WorkerMembership::WorkerMembership(std::vector<WorkerSpec> specs, MembershipOptions options)
    : specs_(std::move(specs)), options_(std::move(options)) {
  for (const WorkerSpec& s : specs_) {
    if (!s.dns) fixed_.insert(s.text);
  }
}

WorkerMembership::~WorkerMembership() { Stop(); }

std::vector<std::string> WorkerMembership::Resolve() {
  std::vector<std::string> out;
  for (const WorkerSpec& spec : specs_) {
    if (!spec.dns) {
      out.push_back(spec.text);
      continue;
    }
    StatusOr<std::vector<std::string>> resolved = options_.resolve(spec.host, spec.port);
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, fresh] = last_.try_emplace(spec.text);
    if (resolved.ok() || resolved.status().code() == StatusCode::kNotFound) {
      std::vector<std::string> now = resolved.ok() ? *resolved : std::vector<std::string>{};
      if (fresh || now != it->second) {
        LOG(INFO) << "workers: " << spec.text << " resolves to " << Join(now)
                  << (fresh ? "" : " (was " + Join(it->second) + ")");
      }
      it->second = std::move(now);
    } else {
      // No answer: keep what it resolved to last, so a DNS outage drains nothing.
      LOG(WARNING) << "workers: cannot resolve " << spec.text << ": "
                   << resolved.status().message() << "; keeping " << Join(it->second);
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void WorkerMembership::Start(Scheduler* scheduler) {
  scheduler_ = scheduler;
  thread_ = std::thread([this] { Run(); });
}

void WorkerMembership::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::map<std::string, std::unique_ptr<Dial>> dials;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dials.swap(dials_);
  }
  for (auto& [address, dial] : dials) {
    if (dial->thread.joinable()) dial->thread.join();
  }
}

void WorkerMembership::Sleep(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, d, [this] { return stop_; });
}

void WorkerMembership::Run() {
  for (;;) {
    RefreshOnce();
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, options_.refresh, [this] { return stop_; })) return;
  }
}

bool WorkerMembership::Wanted(const std::string& address) { return wanted_.count(address) > 0; }

void WorkerMembership::RefreshOnce() {
  const std::vector<std::string> listed = Resolve();
  const std::set<std::string> listed_set(listed.begin(), listed.end());
  const std::vector<WorkerMember> members = scheduler_->Members();
  std::set<std::string> gone;  // listed at the previous refresh, not now
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    for (const std::string& a : wanted_) {
      if (listed_set.count(a) == 0) gone.insert(a);
    }
    wanted_ = listed_set;
    // Dials that ended are joined here.
    for (auto it = dials_.begin(); it != dials_.end();) {
      if (it->second->done) {
        it->second->thread.join();
        it = dials_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // A worker drained on purpose may come back once its address has left the name.
  for (const std::string& a : gone) scheduler_->Readmit(a);
  std::set<std::string> member_addresses;
  for (const WorkerMember& m : members) {
    member_addresses.insert(m.address);
    if (m.draining || listed_set.count(m.address) > 0) continue;
    LOG(INFO) << "workers: " << m.address << " is no longer listed: draining it";
    auto drained = scheduler_->DrainWorker(m.address, std::chrono::milliseconds(0),
                                           /*wait=*/false, Clock::time_point::max(),
                                           /*exclude=*/false);
    if (!drained.ok() && drained.status().code() != StatusCode::kNotFound) {
      LOG(WARNING) << "workers: drain of " << m.address << ": " << drained.status().message();
    }
  }
  for (const std::string& address : listed) {
    if (member_addresses.count(address) > 0 || scheduler_->Excluded(address)) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || dials_.count(address) > 0) continue;
    auto dial = std::make_unique<Dial>();
    Dial* d = dial.get();
    dials_.emplace(address, std::move(dial));
    d->thread = std::thread([this, address] { DialLoop(address); });
  }
}

void WorkerMembership::DialLoop(std::string address) {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ || !Wanted(address)) break;
    }
    StatusOr<std::unique_ptr<WorkerConnection>> conn =
        options_.connect(address, options_.dial_attempt);
    Status status = conn.ok() ? scheduler_->AddWorker(std::move(*conn)) : conn.status();
    if (status.ok() || status.code() == StatusCode::kAlreadyExists) {
      std::lock_guard<std::mutex> lock(mu_);
      refusals_.erase(address);
      break;
    }
    // Unreachable: still starting (loading its model), or gone; retried while it stays listed.
    // Refused: another model, version, or shutting down; logged once per reason.
    const bool unreachable = status.code() == StatusCode::kUnavailable ||
                             status.code() == StatusCode::kDeadlineExceeded;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::string& last = refusals_[address];
      const std::string message(status.message());
      if (last != message) {
        last = message;
        if (unreachable) {
          LOG(INFO) << "workers: " << address << " not reachable yet (" << message
                    << "); retrying while it is listed";
        } else {
          LOG(WARNING) << "workers: " << address << " refused: " << message;
        }
      }
    }
    Sleep(unreachable ? std::chrono::milliseconds(200) : options_.refresh);
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = dials_.find(address);
  if (it != dials_.end()) it->second->done = true;
}

}  // namespace astr::sched
