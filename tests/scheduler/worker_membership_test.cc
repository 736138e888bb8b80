// Workers that join and leave a running Scheduler (AddWorker, DrainWorker, a worker's own drain,
// a weight commit it missed) and WorkerMembership's refreshes over a fake resolver, against
// in-process FakeWorkers. Expected tokens come from the fakes' formula FakeToken(sample_index,
// position, seed), never from the scheduler: a sequence that moves between workers must still
// produce them.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <thread>

#include "scheduler/scheduler.h"
#include "scheduler/worker_membership.h"
#include "tests/scheduler/fake_worker.h"

namespace astr::sched {
namespace {

using namespace std::chrono_literals;
using testing::FakeConnection;
using testing::FakeToken;
using testing::FakeWorker;
using testing::FakeWorkerConfig;
using testing::MustSubmit;
using testing::WaitUntil;
using testing::PlanRecord;

constexpr int32_t kVocab = 1000;
constexpr int kPrompt = 5;

SchedRequest MakeRequest(int max_tokens, uint64_t seed) {
  SchedRequest r;
  r.request_id = "r" + std::to_string(seed);
  // Each seed its own prompt, so that requests share no cached prefix unless a test means them
  // to (the fake's tokens depend on positions only).
  for (int i = 0; i < kPrompt; ++i) {
    r.prompt.push_back(static_cast<int32_t>((seed * 131 + uint64_t(i) * 7 + 10) % kVocab));
  }
  r.sampling.seed = seed;
  r.max_tokens = max_tokens;
  return r;
}

std::vector<int32_t> Expected(int max_tokens, uint64_t seed) {
  std::vector<int32_t> out;
  for (int k = 0; k < max_tokens; ++k) out.push_back(FakeToken(0, kPrompt + k, seed, kVocab));
  return out;
}

struct Outcome {
  std::vector<int32_t> tokens;
  Status status = UnavailableError("not closed");
  int32_t preemptions = 0;
};

Outcome Collect(RequestChannel* channel) {
  Outcome out;
  const auto give_up = Clock::now() + 30s;
  while (Clock::now() < give_up) {
    RequestChannel::Batch batch = channel->Wait(100ms);
    for (const SampleEvent& e : batch.events) {
      if (e.kind == SampleEvent::Kind::kToken) out.tokens.push_back(e.token_id);
    }
    if (batch.closed) {
      out.status = batch.status;
      out.preemptions = batch.timings.preemptions;
      break;
    }
  }
  return out;
}

std::shared_ptr<FakeWorker> Fake(const std::string& address, int64_t num_pages = 256,
                                 int32_t max_batch = 64, std::chrono::microseconds delay = 0us) {
  FakeWorkerConfig c;
  c.address = address;
  c.num_pages = num_pages;
  c.max_batch = max_batch;
  c.step_delay = delay;
  return std::make_shared<FakeWorker>(c);
}

int64_t Started(const FakeWorker& f) {
  int64_t n = 0;
  for (const PlanRecord& p : f.history()) n += static_cast<int64_t>(p.started.size());
  return n;
}

std::vector<std::string> Addresses(const Scheduler& s) {
  std::vector<std::string> out;
  for (const WorkerMember& m : s.Members()) out.push_back(m.address);
  return out;
}

class WorkerMembershipTest : public ::testing::TestWithParam<bool> {
 protected:
  std::unique_ptr<Scheduler> Make(const std::vector<std::shared_ptr<FakeWorker>>& fakes,
                                  SchedulerOptions options = {}) {
    options.overlap_steps = GetParam();
    options.worker_down_after_ms = 50;
    options.reconnect_attempt_ms = 5;
    std::vector<std::unique_ptr<WorkerConnection>> conns;
    for (const auto& f : fakes) conns.push_back(std::make_unique<FakeConnection>(f));
    auto created = Scheduler::Create(options, std::move(conns));
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? std::move(*created) : nullptr;
  }
};

// Every member's pool full again, the scheduler idle, and no fake saw a bad plan.
void ExpectAllFree(Scheduler* s, const std::vector<std::shared_ptr<FakeWorker>>& fakes) {
  EXPECT_TRUE(WaitUntil([&] {
    const v1::GetServerStatsResponse stats = s->Stats();
    for (const v1::WorkerStats& w : stats.workers()) {
      if (w.free_pages() != w.total_pages()) return false;
    }
    return s->Idle();
  })) << s->Stats().DebugString();
  for (const auto& f : fakes) {
    const auto v = f->violations();
    EXPECT_TRUE(v.empty()) << f->config().address << ": " << v.front();
  }
}

TEST_P(WorkerMembershipTest, AJoiningWorkerTakesNewSequencesAndOutputsAreUnchanged) {
  // Steps take 5 ms, so fake-0's four requests still run when the next four arrive.
  auto f0 = Fake("fake-0", 256, 64, 5000us);
  auto f1 = Fake("fake-1", 256, 64, 5000us);
  auto s = Make({f0});
  ASSERT_TRUE(s);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 4; ++i) channels.push_back(MustSubmit(s.get(), MakeRequest(30, 100 + i)));
  ASSERT_TRUE(s->AddWorker(std::make_unique<FakeConnection>(f1)).ok());
  EXPECT_EQ(Addresses(*s), (std::vector<std::string>{"fake-0", "fake-1"}));
  EXPECT_EQ(s->Stats().workers_size(), 2);
  // The joiner is the least loaded: new requests go to it (all four unless fake-0 finished some).
  for (int i = 4; i < 8; ++i) channels.push_back(MustSubmit(s.get(), MakeRequest(30, 100 + i)));
  for (int i = 0; i < 8; ++i) {
    Outcome out = Collect(channels[i].get());
    EXPECT_TRUE(out.status.ok()) << out.status.ToString();
    EXPECT_EQ(out.tokens, Expected(30, 100 + i)) << "request " << i;
  }
  EXPECT_GE(Started(*f1), 2);
  EXPECT_EQ(Started(*f0) + Started(*f1), 8);
  ExpectAllFree(s.get(), {f0, f1});
}

TEST_P(WorkerMembershipTest, AddWorkerRefusesAnotherModelVersionADrainingWorkerOrAMember) {
  auto f0 = Fake("fake-0");
  auto s = Make({f0});
  ASSERT_TRUE(s);
  FakeWorkerConfig other;
  other.address = "other-model";
  other.content_hash = "another-hash";
  Status st = s->AddWorker(std::make_unique<FakeConnection>(std::make_shared<FakeWorker>(other)));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("another-hash"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("fake-model"), std::string::npos) << st.message();

  FakeWorkerConfig stale;
  stale.address = "stale";
  stale.weight_version = 3;
  st = s->AddWorker(std::make_unique<FakeConnection>(std::make_shared<FakeWorker>(stale)));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("weight version 3"), std::string::npos) << st.message();

  auto leaving = Fake("leaving");
  leaving->set_draining(true);
  st = s->AddWorker(std::make_unique<FakeConnection>(leaving));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("shutting down"), std::string::npos) << st.message();

  st = s->AddWorker(std::make_unique<FakeConnection>(Fake("fake-0")));
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.message();
  EXPECT_EQ(Addresses(*s), std::vector<std::string>{"fake-0"});
  // The pool still serves.
  auto ch = MustSubmit(s.get(), MakeRequest(8, 7));
  EXPECT_EQ(Collect(ch.get()).tokens, Expected(8, 7));
  ExpectAllFree(s.get(), {f0});
}

// fake-0 runs two sequences (max batch 2) and holds a third waiting when the drain begins: the
// waiting one moves to fake-1 at once, the running ones finish on fake-0, then it leaves. Steps
// take 2 ms, so the 200-token requests run for 400 ms while the drain begins within a few.
TEST_P(WorkerMembershipTest, DrainLetsRunningSequencesFinishThereAndMovesWaitingOnes) {
  auto f0 = Fake("fake-0", 256, /*max_batch=*/2, 2000us);
  auto f1 = Fake("fake-1", 256, /*max_batch=*/2, 2000us);
  auto s = Make({f0, f1});
  ASSERT_TRUE(s);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 6; ++i) channels.push_back(MustSubmit(s.get(), MakeRequest(200, 300 + i)));
  // Both have started their two; the third of each waits (the router alternates).
  ASSERT_TRUE(WaitUntil([&] { return Started(*f0) == 2 && Started(*f1) == 2; }));
  auto drained = s->DrainWorker("fake-0", 20s, /*wait=*/true, Clock::now() + 30s,
                                /*exclude=*/true);
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  EXPECT_EQ(drained->address, "fake-0");
  EXPECT_EQ(drained->finished, 2);
  EXPECT_EQ(drained->moved, 1);
  EXPECT_EQ(Addresses(*s), std::vector<std::string>{"fake-1"});
  EXPECT_EQ(Started(*f0), 2);
  EXPECT_EQ(f0->streams_closed(), 1);  // its stream was closed: it holds nothing
  for (int i = 0; i < 6; ++i) {
    Outcome out = Collect(channels[i].get());
    EXPECT_TRUE(out.status.ok()) << out.status.ToString();
    EXPECT_EQ(out.tokens, Expected(200, 300 + i)) << "request " << i;
    EXPECT_EQ(out.preemptions, 0) << "request " << i;
  }
  // Drained on purpose: not added back until readmitted; then it reuses the slot.
  Status again = s->AddWorker(std::make_unique<FakeConnection>(f0));
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition) << again.message();
  EXPECT_TRUE(s->Excluded("fake-0"));
  s->Readmit("fake-0");
  ASSERT_TRUE(s->AddWorker(std::make_unique<FakeConnection>(f0)).ok());
  EXPECT_EQ(Addresses(*s), (std::vector<std::string>{"fake-0", "fake-1"}));
  auto ch = MustSubmit(s.get(), MakeRequest(10, 9));
  EXPECT_EQ(Collect(ch.get()).tokens, Expected(10, 9));
  ExpectAllFree(s.get(), {f0, f1});
}

TEST_P(WorkerMembershipTest, DrainTimeoutRestartsRunningSequencesElsewhereWithIdenticalOutputs) {
  // fake-1's pool holds all four (4 x 305 tokens), so no preemption adds to the restarts.
  auto f0 = Fake("fake-0", 512, 64, 2000us);
  auto f1 = Fake("fake-1", 512, 64, 0us);
  auto s = Make({f0, f1});
  ASSERT_TRUE(s);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 4; ++i) channels.push_back(MustSubmit(s.get(), MakeRequest(300, 400 + i)));
  ASSERT_TRUE(WaitUntil([&] { return Started(*f0) == 2; }));
  auto drained = s->DrainWorker("fake-0", 50ms, /*wait=*/true, Clock::now() + 30s,
                                /*exclude=*/false);
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  EXPECT_EQ(drained->finished, 0);
  EXPECT_EQ(drained->moved, 2);
  int32_t preemptions = 0;
  for (int i = 0; i < 4; ++i) {
    Outcome out = Collect(channels[i].get());
    EXPECT_TRUE(out.status.ok()) << out.status.ToString();
    EXPECT_EQ(out.tokens, Expected(300, 400 + i)) << "request " << i;
    preemptions += out.preemptions;
  }
  EXPECT_EQ(preemptions, 2);  // the two restarted on fake-1
  EXPECT_EQ(Started(*f1), 4);
  EXPECT_FALSE(s->Excluded("fake-0"));
  ExpectAllFree(s.get(), {f0, f1});
}

// A worker that says it shuts down (its answers carry `draining`) gets no new sequence, finishes
// its running ones and leaves the pool.
TEST_P(WorkerMembershipTest, AWorkerThatSaysItDrainsFinishesItsSequencesAndLeaves) {
  auto f0 = Fake("fake-0", 256, 64, 500us);
  auto f1 = Fake("fake-1", 256, 64, 500us);
  auto s = Make({f0, f1});
  ASSERT_TRUE(s);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 4; ++i) channels.push_back(MustSubmit(s.get(), MakeRequest(100, 500 + i)));
  ASSERT_TRUE(WaitUntil([&] { return Started(*f0) == 2; }));
  f0->set_draining(true);
  // Draining, or already gone (its two sequences may finish quickly).
  ASSERT_TRUE(WaitUntil([&] {
    for (const WorkerMember& m : s->Members()) {
      if (m.address == "fake-0") return m.draining;
    }
    return true;
  }));
  for (int i = 4; i < 8; ++i) channels.push_back(MustSubmit(s.get(), MakeRequest(20, 500 + i)));
  for (int i = 0; i < 8; ++i) {
    const int max_tokens = i < 4 ? 100 : 20;
    Outcome out = Collect(channels[i].get());
    EXPECT_TRUE(out.status.ok()) << out.status.ToString();
    EXPECT_EQ(out.tokens, Expected(max_tokens, 500 + i)) << "request " << i;
    EXPECT_EQ(out.preemptions, 0) << "request " << i;  // finished where they started
  }
  EXPECT_EQ(Started(*f0), 2);  // nothing new after it said it drains
  EXPECT_TRUE(WaitUntil([&] { return Addresses(*s) == std::vector<std::string>{"fake-1"}; }));
  EXPECT_EQ(f0->streams_closed(), 1);
  ExpectAllFree(s.get(), {f0, f1});
}

TEST_P(WorkerMembershipTest, DrainingADownWorkerRemovesItAtOnceAndUnknownIsNotFound) {
  auto f0 = Fake("fake-0");
  auto f1 = Fake("fake-1");
  f0->FailAtPlan(2);
  f0->SetReconnectable(false);
  auto s = Make({f0, f1});
  ASSERT_TRUE(s);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 4; ++i) channels.push_back(MustSubmit(s.get(), MakeRequest(40, 600 + i)));
  for (int i = 0; i < 4; ++i) {
    Outcome out = Collect(channels[i].get());
    EXPECT_EQ(out.tokens, Expected(40, 600 + i)) << "request " << i;
  }
  ASSERT_TRUE(WaitUntil([&] { return !s->Stats().workers(0).up(); }));
  auto drained = s->DrainWorker("fake-0", 0ms, true, Clock::now() + 10s, false);
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  EXPECT_EQ(Addresses(*s), std::vector<std::string>{"fake-1"});
  auto unknown = s->DrainWorker("nobody:1", 0ms, true, Clock::now() + 10s, false);
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  ExpectAllFree(s.get(), {f1});
}

TEST_P(WorkerMembershipTest, ACommitDropsAMemberTheUpdateDidNotReach) {
  auto f0 = Fake("fake-0");
  auto f1 = Fake("fake-1");
  auto s = Make({f0, f1});
  ASSERT_TRUE(s);
  auto committed =
      s->CommitWeights([](int64_t) { return OkStatus(); }, "step-1", {std::string("fake-0")});
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  EXPECT_EQ(committed->version, 1);
  EXPECT_TRUE(WaitUntil([&] { return Addresses(*s) == std::vector<std::string>{"fake-0"}; }));
  // A worker still on version 0 may not join version 1.
  Status st = s->AddWorker(std::make_unique<FakeConnection>(Fake("fake-2")));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  auto ch = MustSubmit(s.get(), MakeRequest(10, 11));
  EXPECT_EQ(Collect(ch.get()).tokens, Expected(10, 11));
  ExpectAllFree(s.get(), {f0});
}

INSTANTIATE_TEST_SUITE_P(Overlap, WorkerMembershipTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "overlap" : "no_overlap"; });

// ---- WorkerMembership over a fake resolver.

TEST(WorkerSpecTest, ParsesFixedAndDnsEntriesAndNamesABadOne) {
  auto specs = ParseWorkerSpecs("127.0.0.1:50061, dns:///astr-worker.astr.svc:50052,[::1]:7,"
                                "dns:pool:9");
  ASSERT_TRUE(specs.ok()) << specs.status().ToString();
  ASSERT_EQ(specs->size(), 4u);
  EXPECT_FALSE((*specs)[0].dns);
  EXPECT_EQ((*specs)[0].host, "127.0.0.1");
  EXPECT_EQ((*specs)[0].port, 50061);
  EXPECT_TRUE((*specs)[1].dns);
  EXPECT_EQ((*specs)[1].host, "astr-worker.astr.svc");
  EXPECT_EQ((*specs)[1].port, 50052);
  EXPECT_EQ((*specs)[2].host, "::1");
  EXPECT_TRUE((*specs)[3].dns);
  EXPECT_EQ((*specs)[3].host, "pool");
  for (const char* bad : {"", "nohost", "host:", "host:0", "host:70000", "dns:///name",
                          "::1:5", "a:1,a:1"}) {
    auto parsed = ParseWorkerSpecs(bad);
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(parsed.status().message().find("--workers"), std::string::npos) << bad;
  }
}

TEST(WorkerSpecTest, ResolveHostReturnsSortedAddressesAndNotFoundForNoName) {
  auto local = ResolveHost("127.0.0.1", 5);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_EQ(*local, std::vector<std::string>{"127.0.0.1:5"});
  auto v6 = ResolveHost("::1", 6);
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(*v6, std::vector<std::string>{"[::1]:6"});
  auto none = ResolveHost("no-such-host.invalid", 5);
  EXPECT_FALSE(none.ok());
}

// A pool named "dns:///pool:1" whose addresses the test sets; dialling an address connects the
// fake of that address.
class MembershipRefreshTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* a : {"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"}) fakes_[a] = Fake(a);
    FakeWorkerConfig other;
    other.address = "10.0.0.9:1";
    other.content_hash = "another-hash";
    fakes_[other.address] = std::make_shared<FakeWorker>(other);
    SetListed(std::vector<std::string>{"10.0.0.1:1"});
    SchedulerOptions options;
    options.worker_drain_timeout_ms = 5000;
    std::vector<std::unique_ptr<WorkerConnection>> conns;
    conns.push_back(std::make_unique<FakeConnection>(fakes_["10.0.0.1:1"]));
    auto created = Scheduler::Create(options, std::move(conns));
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    scheduler_ = std::move(created).value();
    MembershipOptions m;
    m.refresh = std::chrono::hours(1);  // the test refreshes by hand
    m.resolve = [this](const std::string& host, int port) -> StatusOr<std::vector<std::string>> {
      EXPECT_EQ(host, "pool");
      EXPECT_EQ(port, 1);
      std::lock_guard<std::mutex> lock(mu_);
      return listed_;
    };
    m.connect = [this](const std::string& address, std::chrono::milliseconds)
        -> StatusOr<std::unique_ptr<WorkerConnection>> {
      auto it = fakes_.find(address);
      if (it == fakes_.end()) return UnavailableError("connection refused");
      return std::unique_ptr<WorkerConnection>(std::make_unique<FakeConnection>(it->second));
    };
    membership_ = std::make_unique<WorkerMembership>(*ParseWorkerSpecs("dns:///pool:1"), m);
    membership_->Start(scheduler_.get());
  }
  void TearDown() override {
    membership_->Stop();
    scheduler_.reset();
  }
  void SetListed(StatusOr<std::vector<std::string>> listed) {
    std::lock_guard<std::mutex> lock(mu_);
    listed_ = std::move(listed);
  }
  // Refreshes until the members are `want` (in any order: new addresses are dialled at once).
  bool MembersAre(std::vector<std::string> want) {
    std::sort(want.begin(), want.end());
    return WaitUntil([&] {
      membership_->RefreshOnce();
      std::vector<std::string> now = Addresses(*scheduler_);
      std::sort(now.begin(), now.end());
      return now == want;
    });
  }

  std::map<std::string, std::shared_ptr<FakeWorker>> fakes_;
  std::mutex mu_;
  StatusOr<std::vector<std::string>> listed_ = std::vector<std::string>{};
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<WorkerMembership> membership_;
};

TEST_F(MembershipRefreshTest, NewAddressesJoinVanishedOnesDrainAndADnsOutageKeepsThePool) {
  SetListed(std::vector<std::string>{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.9:1"});
  // The other model's worker is refused; the two others join.
  EXPECT_TRUE(MembersAre({"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"}))
      << ::testing::PrintToString(Addresses(*scheduler_));
  // A request runs on the pool while its membership changes.
  auto ch = MustSubmit(scheduler_.get(), MakeRequest(50, 21));
  SetListed(std::vector<std::string>{"10.0.0.2:1", "10.0.0.3:1"});
  EXPECT_TRUE(MembersAre({"10.0.0.2:1", "10.0.0.3:1"}))
      << ::testing::PrintToString(Addresses(*scheduler_));
  // No answer from the resolver: nothing is drained.
  SetListed(UnavailableError("Temporary failure in name resolution"));
  membership_->RefreshOnce();
  std::vector<std::string> kept = Addresses(*scheduler_);
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{"10.0.0.2:1", "10.0.0.3:1"}));
  // The name is gone (NXDOMAIN): its workers drain.
  SetListed(NotFoundError("pool: no address"));
  EXPECT_TRUE(MembersAre({})) << ::testing::PrintToString(Addresses(*scheduler_));
  EXPECT_EQ(Collect(ch.get()).tokens, Expected(50, 21));
  // And come back with the name.
  SetListed(std::vector<std::string>{"10.0.0.1:1"});
  EXPECT_TRUE(MembersAre({"10.0.0.1:1"})) << ::testing::PrintToString(Addresses(*scheduler_));
  auto again = MustSubmit(scheduler_.get(), MakeRequest(10, 22));
  EXPECT_EQ(Collect(again.get()).tokens, Expected(10, 22));
  for (const auto& [address, fake] : fakes_) {
    EXPECT_TRUE(fake->violations().empty()) << address;
  }
  EXPECT_EQ(Started(*fakes_["10.0.0.9:1"]), 0);
}

TEST_F(MembershipRefreshTest, AWorkerDrainedOnPurposeStaysOutWhileListedAndReturnsAfterLeaving) {
  SetListed(std::vector<std::string>{"10.0.0.1:1", "10.0.0.2:1"});
  ASSERT_TRUE(MembersAre({"10.0.0.1:1", "10.0.0.2:1"}));
  auto drained = scheduler_->DrainWorker("10.0.0.2:1", 0ms, true, Clock::now() + 10s, true);
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  for (int i = 0; i < 3; ++i) membership_->RefreshOnce();
  EXPECT_EQ(Addresses(*scheduler_), std::vector<std::string>{"10.0.0.1:1"});
  // Its pod is deleted (the address leaves the name), then a new one comes at that address.
  SetListed(std::vector<std::string>{"10.0.0.1:1"});
  membership_->RefreshOnce();
  SetListed(std::vector<std::string>{"10.0.0.1:1", "10.0.0.2:1"});
  EXPECT_TRUE(MembersAre({"10.0.0.1:1", "10.0.0.2:1"}));
}

}  // namespace
}  // namespace astr::sched
