// WorkerService in-process over loopback gRPC, with a step runner that always fails, by a status
// or by throwing (an allocation failure): the failure ends the stream, and the worker is left
// ready for the next one: a new stream is accepted and starts idle, so Drain (SIGTERM) cancels it
// at once instead of waiting out its timeout (astr-worker: 60 s).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "astr/v1/worker.grpc.pb.h"
#include "worker/service/executor.h"
#include "worker/service/step_runner.h"
#include "worker/service/worker_service.h"

namespace astr {
namespace {

using Clock = std::chrono::steady_clock;
using StepStream = grpc::ClientReaderWriter<v1::StepPlan, v1::StepResult>;

// Fails every step that runs anything: with INTERNAL, as a backend whose forward pass failed, or
// by throwing std::bad_alloc.
class FailingRunner final : public StepRunner {
 public:
  explicit FailingRunner(bool throws) : throws_(throws) {
    config_.vocab_size = 8;
    config_.max_context_tokens = 64;
  }
  std::string name() const override { return "test"; }
  std::string dtype() const override { return "none"; }
  const model::ModelConfig& config() const override { return config_; }
  const RunnerLimits& limits() const override { return limits_; }
  Status Run(const StepBatch& /*batch*/, std::span<const SampleRequest> /*samples*/,
             std::span<const RowScore> /*scores*/, std::span<SampleResult> /*out*/,
             RunTimings* /*timings*/, const std::function<Status()>& /*before_draws*/,
             bool /*masks_coming*/) override {
    if (throws_) throw std::bad_alloc();
    return InternalError("the test runner fails");
  }

 private:
  const bool throws_;
  model::ModelConfig config_;
  RunnerLimits limits_{
      .num_pages = 8, .page_size = 4, .max_batch_tokens = 16, .max_sample_rows = 4};
};

// Starts sequence `live_id` with two prompt tokens on page 0 and samples its next token.
v1::StepPlan StartPlan(uint64_t step_id, uint64_t live_id) {
  v1::StepPlan plan;
  plan.set_step_id(step_id);
  v1::SequenceStart* s = plan.add_start();
  s->set_live_id(live_id);
  s->mutable_params()->set_temperature(0);
  s->mutable_params()->set_top_p(1);
  s->mutable_params()->set_repetition_penalty(1);
  s->add_tokens(1);
  s->add_tokens(2);
  s->set_num_prompt_tokens(2);
  s->add_pages(0);
  v1::StepEntry* e = plan.add_entries();
  e->set_live_id(live_id);
  e->set_num_tokens(2);
  e->set_sample(true);
  return plan;
}

class WorkerServiceFailureTest : public ::testing::Test {
 protected:
  void Start(bool runner_throws) {
    service_ = std::make_unique<WorkerService>(
        v1::InfoResponse(),
        std::make_unique<WorkerExecutor>(std::make_unique<FailingRunner>(runner_throws)));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Worker::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                    grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }

  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Worker::Stub> stub_;
};

TEST_F(WorkerServiceFailureTest, AfterARunnerFailureAnIdleStreamIsCancelledAtOnce) {
  ASSERT_NO_FATAL_FAILURE(Start(/*runner_throws=*/false));
  {
    grpc::ClientContext ctx;
    std::unique_ptr<StepStream> stream = stub_->Step(&ctx);
    ASSERT_TRUE(stream->Write(StartPlan(1, 7)));
    v1::StepResult none;
    EXPECT_FALSE(stream->Read(&none));
    const grpc::Status s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL) << s.error_message();
    EXPECT_NE(s.error_message().find("the test runner fails"), std::string::npos);
  }
  // The scheduler reconnects and its new stream waits for the first plan: the state a SIGTERM
  // finds on an idle worker.
  grpc::ClientContext ctx;
  // Bounds the read below should Drain leave the stream open.
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
  std::unique_ptr<StepStream> stream = stub_->Step(&ctx);
  // The stream's handler starts on a server thread and blocks in Read: give it time to get there
  // (if it has not, Drain ends it before it starts and the test passes without proving anything).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  const auto started = Clock::now();
  service_->Drain(std::chrono::seconds(10), std::chrono::seconds(10));
  const auto waited = Clock::now() - started;
  EXPECT_LT(waited, std::chrono::seconds(2)) << "Drain waited for the idle stream's next plan";
  v1::StepResult result;
  EXPECT_FALSE(stream->Read(&result));
  EXPECT_FALSE(stream->Finish().ok());
}

// An exception out of a step (gRPC answers UNKNOWN) must not leave the stream registered: the
// scheduler's reconnection would otherwise be refused with FAILED_PRECONDITION for good.
TEST_F(WorkerServiceFailureTest, AThrowingRunnerLeavesTheWorkerReadyForTheNextStream) {
  ASSERT_NO_FATAL_FAILURE(Start(/*runner_throws=*/true));
  for (int attempt = 0; attempt < 2; ++attempt) {
    SCOPED_TRACE("stream " + std::to_string(attempt));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
    std::unique_ptr<StepStream> stream = stub_->Step(&ctx);
    ASSERT_TRUE(stream->Write(StartPlan(1, 7)));
    v1::StepResult none;
    EXPECT_FALSE(stream->Read(&none));
    const grpc::Status s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNKNOWN) << s.error_message();
  }
  // The executor was reset too: a plan that only releases sequence 7 is refused as not live.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
  std::unique_ptr<StepStream> stream = stub_->Step(&ctx);
  v1::StepPlan release;
  release.set_step_id(1);
  release.add_release(7);
  ASSERT_TRUE(stream->Write(release));
  v1::StepResult result;
  ASSERT_TRUE(stream->Read(&result));
  EXPECT_EQ(result.error_code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_NE(result.error_message().find("is not live"), std::string::npos)
      << result.error_message();
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace astr
