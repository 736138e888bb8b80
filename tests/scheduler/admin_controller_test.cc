// scheduler/admin_controller on its own, against a recording AdminHost and a real WorkerPool of
// fake connections: what each pause mode does to the started and queued requests, when a drain
// pause is answered, that a commit waits for a step boundary of every worker, runs `apply` with
// the next version and restarts only the sequences that did not ask to keep their KV, that a
// failed apply changes nothing, and that a worker the update did not reach is dropped.
#include "scheduler/admin_controller.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/scheduler/fake_worker.h"

namespace astr::sched {
namespace {

using testing::FakeConnection;
using testing::FakeWorker;
using testing::FakeWorkerConfig;

class RecordingHost : public AdminHost {
 public:
  RecordingHost(const SchedulerOptions& options, const StepCapacity& capacity)
      : pool(options, capacity) {}
  std::vector<RequestState*> StartedRequests() const override { return started; }
  int32_t QueuedRequests() const override { return queued; }
  std::vector<RequestState*> OpenRequests() const override {
    std::vector<RequestState*> open = started;
    open.insert(open.end(), waiting.begin(), waiting.end());
    return open;
  }
  void AbortRequest(RequestState* request, Clock::time_point) override {
    aborted.push_back(request->req.request_id);
  }
  void DropWorker(WorkerSlot* w, const std::string& reason, Clock::time_point) override {
    dropped.push_back(w->address + ": " + reason);
  }
  WorkerPool& workers() override { return pool; }

  WorkerPool pool;
  std::vector<RequestState*> started;
  std::vector<RequestState*> waiting;  // open, not started (OpenRequests)
  int32_t queued = 0;
  std::vector<std::string> aborted;
  std::vector<std::string> dropped;
};

class AdminControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* address : {"a:1", "b:1"}) {
      FakeWorkerConfig c;
      c.address = address;
      auto worker = std::make_shared<FakeWorker>(c);
      workers_.push_back(worker);
      host_.pool.AddInitial(std::make_unique<FakeConnection>(worker));
    }
    host_.pool.RecomputeLimits();
  }
  // A started request with one running sequence on worker `w`.
  RequestState* Started(const std::string& id, int w, bool reuse_kv = false) {
    auto r = std::make_unique<RequestState>();
    r->req.request_id = id;
    r->req.reuse_kv_on_weight_update = reuse_kv;
    r->scheduled = true;
    auto seq = std::make_unique<Sequence>();
    seq->request = r.get();
    seq->worker = w;
    host_.pool.slots()[w]->queues.running.push_back(seq.get());
    r->samples.push_back(std::move(seq));
    requests_.push_back(std::move(r));
    host_.started.push_back(requests_.back().get());
    return requests_.back().get();
  }
  void TearDown() override {
    for (auto& slot : host_.pool.slots()) {
      slot->queues.running.clear();
      slot->queues.waiting.clear();
    }
  }

  SchedulerOptions options_;
  StepCapacity capacity_{options_};
  RecordingHost host_{options_, capacity_};
  AdminController admin_{&host_, 3};
  std::vector<std::shared_ptr<FakeWorker>> workers_;
  std::vector<std::unique_ptr<RequestState>> requests_;
};

TEST_F(AdminControllerTest, PauseModesAndResume) {
  Started("r1", 0);
  Started("r2", 1);
  host_.queued = 4;
  const auto now = Clock::now();

  auto keep = std::make_shared<PauseOp>();
  keep->mode = PauseMode::kKeep;
  admin_.Pause(keep, now);
  EXPECT_TRUE(keep->finished);
  EXPECT_EQ(keep->result.frozen, 2);
  EXPECT_EQ(keep->result.queued, 4);
  EXPECT_EQ(keep->result.request_ids, (std::vector<std::string>{"r1", "r2"}));
  EXPECT_TRUE(admin_.HoldsSteps());
  EXPECT_EQ(admin_.Info().paused, PauseMode::kKeep);
  EXPECT_TRUE(host_.aborted.empty());

  auto abort = std::make_shared<PauseOp>();  // a Pause while paused switches the mode
  abort->mode = PauseMode::kAbort;
  admin_.Pause(abort, now);
  EXPECT_EQ(abort->result.aborted, 2);
  EXPECT_EQ(host_.aborted, (std::vector<std::string>{"r1", "r2"}));

  ResumeOp resume;
  admin_.Resume(&resume, now + std::chrono::milliseconds(5));
  EXPECT_TRUE(resume.result.was_paused);
  EXPECT_EQ(resume.result.paused_ns, 5'000'000);  // since the first Pause
  EXPECT_FALSE(admin_.HoldsSteps());
  EXPECT_EQ(admin_.Info().paused, PauseMode::kNone);
}

// SGLang's /abort_request: one request by its id, started or queued, or every open one; nothing
// is paused by it.
TEST_F(AdminControllerTest, AbortRequestsByIdOrAll) {
  Started("r1", 0);
  Started("r2", 1);
  auto queued = std::make_unique<RequestState>();
  queued->req.request_id = "q1";
  host_.waiting.push_back(queued.get());
  requests_.push_back(std::move(queued));
  const auto now = Clock::now();

  AbortRequestsOp one;
  one.request_id = "r2";
  admin_.AbortRequests(&one, now);
  EXPECT_TRUE(one.finished);
  EXPECT_EQ(one.aborted, 1);
  EXPECT_EQ(host_.aborted, (std::vector<std::string>{"r2"}));

  AbortRequestsOp waiting;
  waiting.request_id = "q1";
  admin_.AbortRequests(&waiting, now);
  EXPECT_EQ(waiting.aborted, 1);

  AbortRequestsOp unknown;
  unknown.request_id = "nope";
  admin_.AbortRequests(&unknown, now);
  EXPECT_TRUE(unknown.finished);
  EXPECT_EQ(unknown.aborted, 0);

  host_.aborted.clear();
  AbortRequestsOp all;
  all.all = true;
  admin_.AbortRequests(&all, now);
  EXPECT_EQ(all.aborted, 3);  // the recording host keeps every request open
  EXPECT_EQ(host_.aborted, (std::vector<std::string>{"r1", "r2", "q1"}));
  EXPECT_FALSE(admin_.HoldsSteps());
  EXPECT_EQ(admin_.Info().paused, PauseMode::kNone);
}

TEST_F(AdminControllerTest, ADrainPauseIsAnsweredOnceTheStartedRequestsFinished) {
  Started("r1", 0);
  auto drain = std::make_shared<PauseOp>();
  drain->mode = PauseMode::kDrain;
  admin_.Pause(drain, Clock::now());
  EXPECT_FALSE(drain->finished);
  EXPECT_FALSE(admin_.HoldsSteps());         // started requests go on
  EXPECT_TRUE(admin_.holds_new_requests());  // new ones wait
  EXPECT_TRUE(host_.pool.slots()[0]->planner.hold_new_requests());
  admin_.Advance(Clock::now());
  EXPECT_FALSE(drain->finished);
  host_.started.clear();  // r1 finished
  admin_.Advance(Clock::now());
  EXPECT_TRUE(drain->finished);
  EXPECT_TRUE(drain->status.ok());
  EXPECT_EQ(drain->result.drained, 1);

  // A drain that Resume cuts short is answered ABORTED.
  Started("r2", 1);
  auto cut = std::make_shared<PauseOp>();
  cut->mode = PauseMode::kDrain;
  admin_.Pause(cut, Clock::now());
  ResumeOp resume;
  admin_.Resume(&resume, Clock::now());
  EXPECT_TRUE(cut->finished);
  EXPECT_EQ(cut->status.code(), StatusCode::kAborted);
  EXPECT_FALSE(host_.pool.slots()[0]->planner.hold_new_requests());
}

TEST_F(AdminControllerTest, ACommitWaitsForTheStepBoundaryAndRestartsWhatMustRecompute) {
  Started("recompute", 0);
  Started("keeps-kv", 1, /*reuse_kv=*/true);
  host_.pool.slots()[1]->plans_sent = 1;  // a plan in flight on b:1
  int64_t applied = -1;
  auto commit = std::make_shared<CommitOp>();
  commit->apply = [&](int64_t version) {
    applied = version;
    return OkStatus();
  };
  commit->label = "step-7";
  commit->updated_workers = std::vector<std::string>{"a:1"};  // b:1 was not reached
  admin_.Commit(commit);
  EXPECT_TRUE(admin_.HoldsSteps());
  EXPECT_FALSE(admin_.Advance(Clock::now()));  // b:1 has not answered
  EXPECT_EQ(applied, -1);

  auto second = std::make_shared<CommitOp>();
  admin_.Commit(second);
  EXPECT_TRUE(second->finished);
  EXPECT_EQ(second->status.code(), StatusCode::kAborted);

  host_.pool.slots()[1]->results_received = 1;  // the boundary
  EXPECT_TRUE(admin_.Advance(Clock::now()));
  EXPECT_TRUE(commit->finished);
  ASSERT_TRUE(commit->status.ok()) << commit->status.ToString();
  EXPECT_EQ(applied, 4);  // served 3, so 4
  EXPECT_EQ(commit->result.version, 4);
  EXPECT_EQ(commit->result.recomputed, 1);
  EXPECT_EQ(commit->result.reused, 1);
  EXPECT_TRUE(host_.pool.slots()[0]->queues.running.empty());  // requeued
  EXPECT_EQ(host_.pool.slots()[0]->queues.waiting.size(), 1u);
  EXPECT_EQ(host_.pool.slots()[1]->queues.running.size(), 1u);
  EXPECT_EQ(host_.pool.slots()[0]->queues.cache_version, 4);
  EXPECT_EQ(admin_.version(), 4);
  EXPECT_EQ(admin_.Info().label, "step-7");
  EXPECT_GT(admin_.Info().committed_unix_ns, 0);
  ASSERT_EQ(host_.dropped.size(), 1u);
  EXPECT_EQ(host_.dropped[0], "b:1: it missed the update to version 4");
  EXPECT_FALSE(admin_.HoldsSteps());
}

TEST_F(AdminControllerTest, AFailedApplyChangesNothing) {
  Started("r1", 0);
  auto commit = std::make_shared<CommitOp>();
  commit->apply = [](int64_t) { return UnavailableError("worker b:1 refused the switch"); };
  commit->label = "bad";
  admin_.Commit(commit);
  EXPECT_TRUE(admin_.Advance(Clock::now()));
  EXPECT_EQ(commit->status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(admin_.version(), 3);
  EXPECT_EQ(admin_.Info().label, "");
  EXPECT_EQ(host_.pool.slots()[0]->queues.running.size(), 1u);  // still running
  EXPECT_TRUE(host_.dropped.empty());
  EXPECT_FALSE(admin_.HoldsSteps());
}

}  // namespace
}  // namespace astr::sched
