#include "scheduler/front/call_life.h"

#include <exception>
#include <functional>
#include <utility>

#include "common/base/logging.h"

namespace astr::front {

CallLife::CallLife(GenerateService* service, TaskPool* pool, std::string peer)
    : service_(service), pool_(pool), peer_(std::move(peer)) {}

CallLife::~CallLife() = default;

Status CallLife::Open(const std::string* authorization) {
  auto admitted = service_->api_keys().Admit(authorization, /*generation=*/true);
  if (!admitted.ok()) return admitted.status();
  lease_ = std::move(*admitted);
  client_ = lease_.ClientName(peer_);
  if (Status s = service_->peer_limiter().Acquire(peer_); !s.ok()) {
    service_->CountPeerLimitRefusal();
    lease_.Release();
    return s;
  }
  holds_slot_ = true;
  return OkStatus();
}

void CallLife::Begin() {
  pool_->Post([self = shared_from_this()] { self->Guarded([&] { self->Admit(); }); });
}

template <typename Step>
void CallLife::Guarded(Step&& step) {
  try {
    step();
  } catch (const std::exception& e) {  // a bug: this call fails, the server keeps serving
    LOG(ERROR) << "internal error answering a call from " << peer_ << ": " << e.what();
    const Status s(StatusCode::kInternal, std::string("internal error: ") + e.what());
    std::lock_guard<std::mutex> lock(mu_);
    CancelOpenLocked(s);
    if (!finished_) FailLocked(s);
  }
}

void CallLife::Admit() {
  std::optional<Admission> decoded = Decode();
  if (!decoded) {
    service_->CountInvalid();
    return;
  }
  auto admission = std::make_shared<Admission>(std::move(*decoded));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    if (cancel_why_) return FailLocked(*cancel_why_);
  }
  auto ticket = service_->PrepareConstraint(
      admission->prompts.at(0), client_,
      [self = shared_from_this(), admission](CompileQueue::Result compiled) {
        self->Guarded([&] { self->AdmitPrompts(*admission, std::move(compiled)); });
      },
      [pool = pool_](std::function<void()> task) { pool->Post(std::move(task)); });
  {
    std::lock_guard<std::mutex> lock(mu_);
    compile_ = ticket;
    if (!cancel_why_) return;
  }
  if (ticket != nullptr) ticket->Cancel();  // cancelled meanwhile: its answer ends the call
}

void CallLife::AdmitPrompts(const Admission& admission, CompileQueue::Result compiled) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    compile_.reset();
    if (finished_) return;
    if (cancel_why_) return FailLocked(*cancel_why_);
    if (!compiled.ok()) return FailLocked(compiled.status());
  }
  std::vector<std::unique_ptr<GenerateService::Call>> calls;
  Status refused;
  for (const v1::GenerateRequest& prompt : admission.prompts) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancel_why_ || finished_) break;
    }
    auto call = service_->Admit(prompt, admission.deadline, *compiled, client_);
    if (!call.ok()) {
      refused = call.status();
      break;
    }
    calls.push_back(std::move(*call));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!refused.ok() || cancel_why_ || finished_) {
    const Status why = !refused.ok()
                           ? refused
                           : cancel_why_.value_or(Status(StatusCode::kCancelled, "the call ended"));
    const Status other(StatusCode::kCancelled,
                       refused.ok() ? why.message() : "another prompt of the call was refused");
    for (auto& c : calls) c->Cancel(other);
    if (!finished_) FailLocked(why);
    return;
  }
  calls_ = std::move(calls);
  closed_.assign(calls_.size(), false);
  admitted_ = true;
  AdmittedLocked();
  if (finished_) return;
  std::weak_ptr<CallLife> weak = shared_from_this();
  for (auto& c : calls_) {
    c->SetListener([weak] {
      if (auto self = weak.lock()) self->SchedulePump();
    });
  }
}

void CallLife::SchedulePump() {
  if (pump_scheduled_.exchange(true, std::memory_order_acq_rel)) return;
  pool_->Post([self = shared_from_this()] { self->Guarded([&] { self->Pump(); }); });
}

void CallLife::Pump() {
  pump_scheduled_.store(false, std::memory_order_release);
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_ || calls_.empty()) return;
  for (size_t p = 0; p < calls_.size(); ++p) {
    if (!closed_[p]) closed_[p] = calls_[p]->Absorb();
  }
  EmitLocked();
}

void CallLife::Cancel(Status why) {
  std::shared_ptr<CompileQueue::Ticket> compile;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || closed_call_) return;
    if (admitted_) {
      CancelOpenLocked(why);
      CancelledLocked(why);
      return;
    }
    if (!cancel_why_) cancel_why_ = std::move(why);  // the admission ends the call
    compile = compile_;  // a compile it waits for stops (its answer takes mu_)
  }
  if (compile != nullptr) compile->Cancel();
}

void CallLife::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  CloseLocked();
}

void CallLife::CloseLocked() {
  if (closed_call_) return;
  closed_call_ = true;
  CancelOpenLocked(Status(StatusCode::kCancelled, "the call ended"));
  calls_.clear();  // detaches the listeners: no pump is scheduled from now on
  if (holds_slot_) service_->peer_limiter().Release(peer_);
  holds_slot_ = false;
  lease_.Release();
}

void CallLife::CancelOpenLocked(const Status& why) {
  for (size_t p = 0; p < calls_.size(); ++p) {
    if (!closed_[p]) calls_[p]->Cancel(why);
  }
}

void CallLife::OutputBlockedLocked(sched::Clock::time_point since) {
  for (auto& c : calls_) c->OutputBlocked(since);
}

void CallLife::OutputTakenLocked() {
  for (auto& c : calls_) c->OutputTaken();
}

std::optional<Status> CallLife::CheckStallLocked(sched::Clock::time_point now) {
  for (auto& c : calls_) {
    std::optional<Status> why = c->CheckStall(now);
    if (!why) continue;
    // One stall (counted once) ends the whole call: the other prompts' requests go too.
    CancelOpenLocked(*why);
    LOG(WARNING) << "request " << RequestIdLocked() << " from " << peer_ << ": " << why->message();
    return why;
  }
  return std::nullopt;
}

std::string CallLife::RequestIdLocked() const {
  return calls_.empty() ? std::string("?") : calls_[0]->request_id();
}

}  // namespace astr::front
