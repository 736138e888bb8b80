// The real astr-worker binary on loopback with stories260K: Info, the step stream (golden ids, a
// refused plan that leaves the stream usable, one stream at a time, a closed stream drops its
// sequences), the instant backend, and SIGTERM -> exit 0.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "astr/v1/worker.grpc.pb.h"
#include "tests/support/test_util.h"

namespace astr {
namespace {

using Clock = std::chrono::steady_clock;
using StepStream = grpc::ClientReaderWriter<v1::StepPlan, v1::StepResult>;

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};
// llama.cpp's greedy continuation of kPrompt (/work/shared/models/README.md).
const std::vector<int32_t> kGolden = {432, 383, 286, 261, 376};
// XXH64 of stories260K.gguf (sha256 270cba1b...), computed with the system's libxxhash 0.8.1.
constexpr char kStoriesXxh64[] = "04834e547abf7481";

v1::InfoResponse GetInfo(v1::Worker::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::InfoResponse info;
  const grpc::Status s = stub.Info(&ctx, v1::InfoRequest(), &info);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return info;
}

// Plan `step_id`: start `live_id` with kPrompt on `pages` and prefill it, sampling greedily.
v1::StepPlan StartPlan(uint64_t step_id, uint64_t live_id, const std::vector<int32_t>& pages) {
  v1::StepPlan plan;
  plan.set_step_id(step_id);
  v1::SequenceStart* s = plan.add_start();
  s->set_live_id(live_id);
  s->mutable_params()->set_temperature(0);
  s->mutable_params()->set_top_p(1);
  s->mutable_params()->set_repetition_penalty(1);
  for (int32_t t : kPrompt) s->add_tokens(t);
  s->set_num_prompt_tokens(static_cast<int32_t>(kPrompt.size()));
  for (int32_t p : pages) s->add_pages(p);
  v1::StepEntry* e = plan.add_entries();
  e->set_live_id(live_id);
  e->set_start_position(0);
  e->set_num_tokens(static_cast<int32_t>(kPrompt.size()));
  e->set_sample(true);
  return plan;
}

v1::StepPlan DecodePlan(uint64_t step_id, uint64_t live_id, int32_t position) {
  v1::StepPlan plan;
  plan.set_step_id(step_id);
  v1::StepEntry* e = plan.add_entries();
  e->set_live_id(live_id);
  e->set_start_position(position);
  e->set_num_tokens(1);
  e->set_sample(true);
  return plan;
}

v1::StepResult Exchange(StepStream* stream, const v1::StepPlan& plan) {
  v1::StepResult result;
  EXPECT_TRUE(stream->Write(plan));
  EXPECT_TRUE(stream->Read(&result));
  EXPECT_EQ(result.step_id(), plan.step_id());
  return result;
}

class WorkerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
    model_ = path;
  }
  // Starts astr-worker with `flags` on 127.0.0.1:0; fails the test if it does not listen.
  void Start(const std::vector<std::string>& flags) {
    std::vector<std::string> args = {"--model", model_, "--listen", "127.0.0.1:0"};
    args.insert(args.end(), flags.begin(), flags.end());
    StatusOr<std::string> address = worker_.Start("astr-worker", args, "worker_service");
    ASSERT_TRUE(address.ok()) << address.status().ToString();
  }
  // Small pool and limits so that Info's numbers come from the flags, not defaults.
  void StartCpu() {
    Start({"--threads", "1", "--page-size", "4", "--num-pages", "64", "--max-batch", "8",
           "--max-batch-tokens", "128"});
  }
  std::unique_ptr<v1::Worker::Stub> Stub() const {
    return v1::Worker::NewStub(
        grpc::CreateChannel(worker_.address(), grpc::InsecureChannelCredentials()));
  }
  std::string model_;
  testing::ServerProcess worker_;
};

TEST_F(WorkerServiceTest, InfoDescribesModelPoolAndLimits) {
  ASSERT_NO_FATAL_FAILURE(StartCpu());
  auto stub = Stub();
  const v1::InfoResponse info = GetInfo(*stub);
  EXPECT_EQ(info.model_path(), model_);
  EXPECT_EQ(info.model_name(), "llama");  // general.name of the file
  EXPECT_EQ(info.architecture(), "llama");
  EXPECT_EQ(info.content_hash(), kStoriesXxh64);
  EXPECT_EQ(info.vocab_size(), 512);
  EXPECT_EQ(info.hidden_size(), 64);
  EXPECT_EQ(info.num_layers(), 5);
  EXPECT_EQ(info.num_heads(), 8);
  EXPECT_EQ(info.num_kv_heads(), 4);
  EXPECT_EQ(info.head_dim(), 8);
  EXPECT_EQ(info.max_context_tokens(), 2048);
  EXPECT_EQ(info.dtype(), "bf16");
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_EQ(info.num_pages(), 64);
  EXPECT_EQ(info.page_size(), 4);
  EXPECT_EQ(info.max_batch(), 8);
  EXPECT_EQ(info.max_batch_tokens(), 128);
  EXPECT_EQ(info.weight_version(), 0);
  EXPECT_EQ(info.live_sequences(), 0);
  EXPECT_EQ(info.pages_in_use(), 0);
  EXPECT_EQ(info.steps(), 0);
  EXPECT_EQ(std::vector<int32_t>(info.eos_token_ids().begin(), info.eos_token_ids().end()),
            std::vector<int32_t>{2});  // </s>
  EXPECT_EQ(worker_.Terminate(), 0) << worker_.log();
}

TEST_F(WorkerServiceTest, StepStreamRefusesABadPlanAndGoesOn) {
  ASSERT_NO_FATAL_FAILURE(StartCpu());
  auto stub = Stub();
  grpc::ClientContext ctx;
  std::unique_ptr<StepStream> stream = stub->Step(&ctx);

  v1::StepResult r = Exchange(stream.get(), StartPlan(1, 7, {0, 1}));
  ASSERT_EQ(r.error_code(), 0) << r.error_message();
  ASSERT_EQ(r.samples_size(), 1);
  EXPECT_EQ(r.samples(0).live_id(), 7u);
  EXPECT_EQ(r.samples(0).token_id(), kGolden[0]);
  EXPECT_GT(r.step_ns(), 0);
  EXPECT_GT(r.forward_ns(), 0);

  v1::StepPlan bad = DecodePlan(2, 7, 5);
  bad.mutable_entries(0)->add_new_pages(9999);
  r = Exchange(stream.get(), bad);
  EXPECT_EQ(r.error_code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_NE(r.error_message().find("entries[0].new_pages[0]: page 9999 out of range [0, 64)"),
            std::string::npos)
      << r.error_message();
  EXPECT_EQ(r.samples_size(), 0);

  for (int i = 1; i < 4; ++i) {  // positions 5, 6, 7 fit in pages 0 and 1
    r = Exchange(stream.get(), DecodePlan(2 + i, 7, 4 + i));
    ASSERT_EQ(r.error_code(), 0) << r.error_message();
    ASSERT_EQ(r.samples_size(), 1);
    EXPECT_EQ(r.samples(0).token_id(), kGolden[i]);
  }
  v1::InfoResponse info = GetInfo(*stub);
  EXPECT_EQ(info.live_sequences(), 1);
  EXPECT_EQ(info.pages_in_use(), 2);
  EXPECT_EQ(info.steps(), 4);  // the refused plan does not count

  v1::StepPlan release;
  release.set_step_id(9);
  release.add_release(7);
  r = Exchange(stream.get(), release);
  EXPECT_EQ(r.error_code(), 0) << r.error_message();
  info = GetInfo(*stub);
  EXPECT_EQ(info.live_sequences(), 0);
  EXPECT_EQ(info.pages_in_use(), 0);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(worker_.Terminate(), 0) << worker_.log();
}

TEST_F(WorkerServiceTest, OneStreamAtATimeAndAClosedStreamDropsItsSequences) {
  ASSERT_NO_FATAL_FAILURE(StartCpu());
  auto stub = Stub();
  auto first_ctx = std::make_unique<grpc::ClientContext>();
  std::unique_ptr<StepStream> first = stub->Step(first_ctx.get());
  v1::StepResult r = Exchange(first.get(), StartPlan(1, 7, {0, 1}));
  ASSERT_EQ(r.error_code(), 0) << r.error_message();

  {
    grpc::ClientContext ctx;
    std::unique_ptr<StepStream> second = stub->Step(&ctx);
    second->Write(StartPlan(1, 8, {2, 3}));
    v1::StepResult none;
    EXPECT_FALSE(second->Read(&none));
    const grpc::Status s = second->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  }
  EXPECT_EQ(GetInfo(*stub).live_sequences(), 1);  // the first stream's state is untouched

  first->WritesDone();
  EXPECT_TRUE(first->Finish().ok());
  // The server drops the stream's sequences when its handler returns, right after Finish.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (GetInfo(*stub).live_sequences() != 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const v1::InfoResponse info = GetInfo(*stub);
  EXPECT_EQ(info.live_sequences(), 0);
  EXPECT_EQ(info.pages_in_use(), 0);

  // A new stream starts clean: the same id and pages are free again.
  grpc::ClientContext ctx;
  std::unique_ptr<StepStream> again = stub->Step(&ctx);
  r = Exchange(again.get(), StartPlan(1, 7, {0, 1}));
  ASSERT_EQ(r.error_code(), 0) << r.error_message();
  ASSERT_EQ(r.samples_size(), 1);
  EXPECT_EQ(r.samples(0).token_id(), kGolden[0]);
  again->WritesDone();
  EXPECT_TRUE(again->Finish().ok());
}

// SIGTERM while a scheduler holds a stream open with a live sequence and never closes it: after
// --drain-timeout-s the stream is cut and the worker still exits 0.
TEST_F(WorkerServiceTest, SigtermWithAnOpenStreamExitsZero) {
  ASSERT_NO_FATAL_FAILURE(Start({"--threads", "1", "--page-size", "4", "--num-pages", "64",
                                 "--drain-timeout-s", "1"}));
  auto stub = Stub();
  grpc::ClientContext ctx;
  std::unique_ptr<StepStream> stream = stub->Step(&ctx);
  v1::StepResult r = Exchange(stream.get(), StartPlan(1, 7, {0, 1}));
  ASSERT_EQ(r.error_code(), 0) << r.error_message();
  EXPECT_FALSE(r.draining());
  EXPECT_EQ(worker_.Terminate(), 0) << worker_.log();
  v1::StepResult none;
  EXPECT_FALSE(stream->Read(&none));  // the server ended the stream
  EXPECT_FALSE(stream->Finish().ok());
}

// SIGTERM drains: Info and every step answer say `draining`, the running sequence keeps being
// stepped (same greedy tokens), a new stream is refused, and once the scheduler closes its stream
// the worker exits 0 at once, without waiting out --drain-timeout-s.
TEST_F(WorkerServiceTest, SigtermLetsTheRunningSequenceFinishThenExitsWhenTheStreamCloses) {
  ASSERT_NO_FATAL_FAILURE(Start({"--threads", "1", "--page-size", "4", "--num-pages", "64",
                                 "--drain-timeout-s", "60"}));
  auto stub = Stub();
  auto ctx = std::make_unique<grpc::ClientContext>();
  std::unique_ptr<StepStream> stream = stub->Step(ctx.get());
  v1::StepResult r = Exchange(stream.get(), StartPlan(1, 7, {0, 1}));
  ASSERT_EQ(r.error_code(), 0) << r.error_message();
  ASSERT_EQ(r.samples_size(), 1);
  EXPECT_EQ(r.samples(0).token_id(), kGolden[0]);
  EXPECT_FALSE(r.draining());
  EXPECT_FALSE(GetInfo(*stub).draining());

  ASSERT_EQ(kill(worker_.pid(), SIGTERM), 0);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!GetInfo(*stub).draining() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(GetInfo(*stub).draining());
  EXPECT_EQ(GetInfo(*stub).live_sequences(), 1);

  // The sequence goes on: the next greedy tokens, each answer marked draining.
  for (int i = 1; i < 3; ++i) {
    r = Exchange(stream.get(), DecodePlan(1 + i, 7, static_cast<int32_t>(kPrompt.size()) + i - 1));
    ASSERT_EQ(r.error_code(), 0) << r.error_message();
    ASSERT_EQ(r.samples_size(), 1);
    EXPECT_EQ(r.samples(0).token_id(), kGolden[i]);
    EXPECT_TRUE(r.draining());
  }
  {
    grpc::ClientContext other;
    std::unique_ptr<StepStream> refused = stub->Step(&other);
    refused->Write(StartPlan(1, 8, {2, 3}));
    v1::StepResult none;
    EXPECT_FALSE(refused->Read(&none));
    const grpc::Status s = refused->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  }
  // The scheduler is done with it: closing the stream ends the drain.
  const auto closed = Clock::now();
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(worker_.Terminate(), 0) << worker_.log();
  EXPECT_LT(Clock::now() - closed, std::chrono::seconds(10)) << "waited out the drain timeout";
}

TEST_F(WorkerServiceTest, InstantBackendAnswersWithOrdinaryTokens) {
  ASSERT_NO_FATAL_FAILURE(
      Start({"--backend", "instant", "--page-size", "4", "--num-pages", "64", "--max-batch", "8"}));
  auto stub = Stub();
  const v1::InfoResponse info = GetInfo(*stub);
  EXPECT_EQ(info.backend(), "instant");
  EXPECT_EQ(info.dtype(), "none");
  EXPECT_EQ(info.num_pages(), 64);
  EXPECT_EQ(info.content_hash(), kStoriesXxh64);

  grpc::ClientContext ctx;
  std::unique_ptr<StepStream> stream = stub->Step(&ctx);
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    v1::StepResult r = Exchange(
        stream.get(),
        StartPlan(seq, seq, {static_cast<int32_t>(2 * seq), static_cast<int32_t>(2 * seq + 1)}));
    ASSERT_EQ(r.error_code(), 0) << r.error_message();
    ASSERT_EQ(r.samples_size(), 1);
    // stories260K: 0..2 are <unk>, <s>, </s>; 3..258 are byte tokens. The rest are ordinary.
    EXPECT_GE(r.samples(0).token_id(), 259);
    EXPECT_LT(r.samples(0).token_id(), 512);
    EXPECT_EQ(r.samples(0).logprob(), 0.0f);
  }
  v1::StepPlan bad = StartPlan(9, 9, {0, 9999});
  v1::StepResult r = Exchange(stream.get(), bad);
  EXPECT_EQ(r.error_code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_NE(r.error_message().find("start[0].pages[1]"), std::string::npos) << r.error_message();
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(worker_.Terminate(), 0) << worker_.log();
}

TEST_F(WorkerServiceTest, BadFlagsAreUsageErrorsNamingTheFlag) {
  const std::string bin = testing::BinDir() + "/astr-worker";
  auto r = testing::RunCommand(bin + " --model " + model_ + " --backend gpu 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--backend"), std::string::npos) << r.out;
  r = testing::RunCommand("ASTR_BACKEND=bogus " + bin + " --model " + model_ + " 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("ASTR_BACKEND"), std::string::npos) << r.out;
  r = testing::RunCommand(bin + " --model " + model_ + " --max-batch 0 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--max-batch"), std::string::npos) << r.out;
  r = testing::RunCommand(bin + " --model " + model_ + " --drain-timeout-s -1 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--drain-timeout-s"), std::string::npos) << r.out;
  r = testing::RunCommand(bin + " --model " + model_ + " --receive-buffers-mb -1 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--receive-buffers-mb"), std::string::npos) << r.out;
  r = testing::RunCommand(bin + " --model " + model_ + " --spare-weights=maybe 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("spare-weights"), std::string::npos) << r.out;
  r = testing::RunCommand(bin + " --model " + model_ +
                          " --listen 127.0.0.1:0 --metrics-listen no-port 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("--metrics-listen"), std::string::npos) << r.out;
  r = testing::RunCommand(bin + " --model /nonexistent.gguf --listen 127.0.0.1:0 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("/nonexistent.gguf"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace astr
