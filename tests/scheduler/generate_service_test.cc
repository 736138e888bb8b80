// scheduler/front/generate_service + grpc_service over real gRPC on loopback, with the real
// scheduler core and the core's checking fake worker (tests/scheduler/fake_worker.h). The fake
// worker's tokens are FakeToken(sample, position, seed), so every expected token is computed here
// without scheduler code, and expected text is the tokenizer's plain Decode of those tokens.
#include "scheduler/front/generate_service.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "astr/v1/generate.grpc.pb.h"
#include "common/text/unicode/unicode.h"
#include "scheduler/front/call_life.h"
#include "scheduler/front/grpc_service.h"
#include "scheduler/front/task_pool.h"
#include "tests/scheduler/fake_worker.h"
#include "tests/support/test_util.h"

namespace astr::front {
namespace {

using sched::testing::FakeConnection;
using sched::testing::FakePromptLogprob;
using sched::testing::FakeToken;
using sched::testing::FakeWorker;

constexpr int32_t kVocab = 512;  // stories260K
constexpr int32_t kContext = 256;
const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};  // "Once upon a time"

class GenerateServiceTest : public ::testing::Test {
 protected:
  // Tests that probe a limit lower it before SetUp.
  virtual FrontLimits FrontLimitsForTest() const { return FrontLimits{}; }

  void SetUp() override {
    ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
    auto tok = tok::Tokenizer::Load(path);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tokenizer_ = *tok;

    sched::testing::FakeWorkerConfig wc;
    wc.vocab_size = kVocab;
    wc.max_context_tokens = kContext;
    wc.num_pages = 512;
    wc.page_size = 4;
    worker_ = std::make_shared<FakeWorker>(wc);
    std::vector<std::unique_ptr<sched::WorkerConnection>> conns;
    conns.push_back(std::make_unique<FakeConnection>(worker_));
    auto scheduler = sched::Scheduler::Create(sched::SchedulerOptions{}, std::move(conns));
    ASSERT_TRUE(scheduler.ok()) << scheduler.status().ToString();
    scheduler_ = std::move(*scheduler);

    ServedModel model;
    model.tokenizer = tokenizer_;
    model.no_chat_template_reason = "none in stories260K.gguf";
    model.vocab_size = kVocab;
    model.max_context_tokens = kContext;
    model.eos_token_ids = {2};
    RequestLimits limits;
    limits.max_n = 4;
    service_ = std::make_unique<GenerateService>(scheduler_.get(), std::move(model), limits,
                                                 FrontLimitsForTest());
    grpc_service_ = std::make_unique<GenerateGrpcService>(service_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(grpc_service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    server_address_ = "127.0.0.1:" + std::to_string(port);
    channel_ = grpc::CreateChannel(server_address_, grpc::InsecureChannelCredentials());
    stub_ = v1::Generate::NewStub(channel_);
  }

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_.reset();
    grpc_service_.reset();
    service_.reset();
    scheduler_.reset();
  }

  // The fake worker's tokens for sample `index` of a greedy-or-not request with `seed`.
  std::vector<int32_t> Expected(int32_t index, uint64_t seed, int count,
                                const std::vector<int32_t>& prompt = kPrompt) const {
    std::vector<int32_t> out;
    out.reserve(count);
    for (int k = 0; k < count; ++k) {
      out.push_back(FakeToken(index, static_cast<int64_t>(prompt.size()) + k, seed, kVocab));
    }
    return out;
  }
  // Decode(prompt + ids) after Decode(prompt): the text of `ids` as a continuation.
  std::string TextOf(const std::vector<int32_t>& ids,
                     const std::vector<int32_t>& prompt = kPrompt) const {
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), ids.begin(), ids.end());
    const std::string head = tokenizer_->Decode(prompt);
    const std::string full = tokenizer_->Decode(all);
    EXPECT_EQ(full.compare(0, head.size(), head), 0);
    return full.substr(head.size());
  }

  static v1::GenerateRequest Request(int max_tokens, uint64_t seed, int n = 1) {
    v1::GenerateRequest r;
    r.mutable_token_ids()->mutable_ids()->Add(kPrompt.begin(), kPrompt.end());
    r.set_n(n);
    r.mutable_sampling()->set_max_tokens(max_tokens);
    r.mutable_sampling()->set_seed(seed);
    r.mutable_sampling()->set_ignore_eos(true);  // fake tokens may hit EOS id 2
    return r;
  }

  // Waits until every call has unregistered: a call does when it is destroyed, a moment after it
  // ends (gRPC reports it done, or the last reference to a CallLife's call goes).
  bool WaitNoOpenCalls(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (service_->open_calls() != 0 && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return service_->open_calls() == 0;
  }

  // Waits until the worker holds no sequence and the scheduler is idle.
  bool WaitReleased(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (scheduler_->Idle() && worker_->live_sequences() == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  std::shared_ptr<FakeWorker> worker_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  std::unique_ptr<GenerateService> service_;
  std::unique_ptr<GenerateGrpcService> grpc_service_;
  std::unique_ptr<grpc::Server> server_;
  std::string server_address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Generate::Stub> stub_;
};

TEST_F(GenerateServiceTest, UnaryReturnsEverySample) {
  v1::GenerateRequest req = Request(12, /*seed=*/5, /*n=*/2);
  req.set_return_prompt_ids(true);
  req.mutable_sampling()->set_return_logprobs(true);
  req.set_request_id("unary-1");
  v1::GenerateResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = stub_->Generate(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.request_id(), "unary-1");
  EXPECT_EQ(resp.seed(), 5u);
  EXPECT_EQ(std::vector<int32_t>(resp.prompt_ids().begin(), resp.prompt_ids().end()), kPrompt);
  ASSERT_EQ(resp.completions_size(), 2);
  for (int i = 0; i < 2; ++i) {
    const v1::Completion& c = resp.completions(i);
    const std::vector<int32_t> want = Expected(i, 5, 12);
    EXPECT_EQ(c.index(), i);
    EXPECT_EQ(std::vector<int32_t>(c.token_ids().begin(), c.token_ids().end()), want);
    EXPECT_EQ(c.text(), TextOf(want));
    EXPECT_EQ(c.finish_reason(), v1::FINISH_REASON_LENGTH);
    ASSERT_EQ(c.logprobs_size(), 12);
    EXPECT_EQ(c.logprobs(0), -0.5f);  // what the fake worker reports
    EXPECT_EQ(c.weight_version(), 7);
  }
  EXPECT_EQ(resp.usage().prompt_tokens(), 5);
  EXPECT_EQ(resp.usage().completion_tokens(), 24);
  EXPECT_GT(resp.timings().total_ns(), 0);
  EXPECT_TRUE(WaitReleased());
}

TEST_F(GenerateServiceTest, StreamTextEqualsUnaryText) {
  v1::GenerateRequest req = Request(30, /*seed=*/11, /*n=*/3);
  req.set_return_prompt_ids(true);
  v1::GenerateResponse unary;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Generate(&ctx, req, &unary).ok());
  }
  grpc::ClientContext ctx;
  auto reader = stub_->GenerateStream(&ctx, req);
  v1::GenerateStreamResponse m;
  std::map<int, std::string> text;
  std::map<int, std::vector<int32_t>> ids;
  std::map<int, int> finishes;
  std::vector<v1::GenerateStreamResponse> all;
  while (reader->Read(&m)) {
    EXPECT_TRUE(unicode::IsValidUtf8(m.text()));
    text[m.index()] += m.text();
    ids[m.index()].insert(ids[m.index()].end(), m.token_ids().begin(), m.token_ids().end());
    if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) ++finishes[m.index()];
    all.push_back(m);
  }
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_FALSE(all.empty());
  // The first message carries the seed and the prompt, the last one the totals.
  EXPECT_EQ(all.front().seed(), 11u);
  EXPECT_EQ(all.front().prompt_ids_size(), 5);
  EXPECT_TRUE(all.back().has_usage());
  EXPECT_EQ(all.back().usage().completion_tokens(), 90);
  for (size_t i = 0; i + 1 < all.size(); ++i) EXPECT_FALSE(all[i].has_usage());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(text[i], unary.completions(i).text()) << "sample " << i;
    EXPECT_EQ(ids[i], Expected(i, 11, 30));
    EXPECT_EQ(finishes[i], 1) << "sample " << i << " must finish exactly once";
  }
}

// logprob_start: the prompt's scores (the fake worker's FakePromptLogprob for sample 0) once per
// request, in the unary response and on the stream's first message only.
TEST_F(GenerateServiceTest, PromptScoresInTheResponseAndTheFirstStreamMessage) {
  v1::GenerateRequest req = Request(6, /*seed=*/9, /*n=*/2);
  req.set_logprob_start(2);
  req.mutable_sampling()->set_top_logprobs(1);
  const std::vector<float> want = {FakePromptLogprob(0, 2, 9), FakePromptLogprob(0, 3, 9),
                                   FakePromptLogprob(0, 4, 9)};
  auto expect_scores = [&](const auto& m) {
    EXPECT_EQ(std::vector<float>(m.prompt_logprobs().begin(), m.prompt_logprobs().end()), want);
    ASSERT_EQ(m.prompt_top_logprobs_size(), 3);
    for (int k = 0; k < 3; ++k) {
      ASSERT_EQ(m.prompt_top_logprobs(k).entries_size(), 1);
      EXPECT_EQ(m.prompt_top_logprobs(k).entries(0).token_id(), 2 + k);  // the fake's choice
    }
    EXPECT_EQ(m.prompt_weight_version(), 7);
  };
  v1::GenerateResponse unary;
  {
    grpc::ClientContext ctx;
    grpc::Status st = stub_->Generate(&ctx, req, &unary);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  expect_scores(unary);
  ASSERT_EQ(unary.completions_size(), 2);
  for (int i = 0; i < 2; ++i) {
    const v1::Completion& c = unary.completions(i);
    EXPECT_EQ(std::vector<int32_t>(c.token_ids().begin(), c.token_ids().end()), Expected(i, 9, 6));
  }

  grpc::ClientContext ctx;
  auto reader = stub_->GenerateStream(&ctx, req);
  v1::GenerateStreamResponse m;
  std::vector<v1::GenerateStreamResponse> all;
  while (reader->Read(&m)) all.push_back(m);
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_FALSE(all.empty());
  expect_scores(all.front());
  std::map<int, std::vector<int32_t>> ids;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) EXPECT_EQ(all[i].prompt_logprobs_size(), 0) << "message " << i;
    ids[all[i].index()].insert(ids[all[i].index()].end(), all[i].token_ids().begin(),
                               all[i].token_ids().end());
  }
  EXPECT_EQ(ids[0], Expected(0, 9, 6));
  EXPECT_EQ(ids[1], Expected(1, 9, 6));

  // Without logprob_start: no scores; logprob_start = prompt size: an empty list.
  for (const int start : {0, 5}) {
    v1::GenerateRequest plain = Request(2, 9);
    if (start > 0) plain.set_logprob_start(start);
    v1::GenerateResponse r;
    grpc::ClientContext c;
    ASSERT_TRUE(stub_->Generate(&c, plain, &r).ok());
    EXPECT_EQ(r.prompt_logprobs_size(), 0);
    EXPECT_EQ(r.prompt_weight_version(), 0);
  }
  EXPECT_TRUE(WaitReleased());
  EXPECT_TRUE(worker_->violations().empty());
}

TEST_F(GenerateServiceTest, StopStringEndsTheSampleAndReleasesIt) {
  const std::vector<int32_t> want = Expected(0, 3, 40);
  const std::string full = TextOf(want);
  // A stop string from the middle of the text, on character boundaries.
  std::string stop;
  for (size_t at = full.size() / 2; at + 3 <= full.size() && stop.empty(); ++at) {
    const std::string s = full.substr(at, 3);
    if (unicode::IsValidUtf8(s) && full.find(s) >= full.size() / 4) stop = s;
  }
  ASSERT_FALSE(stop.empty()) << full;
  v1::GenerateRequest req = Request(40, 3);
  req.mutable_sampling()->add_stop(stop);
  v1::GenerateResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->Generate(&ctx, req, &resp).ok());
  const v1::Completion& c = resp.completions(0);
  EXPECT_EQ(c.text(), full.substr(0, full.find(stop)));
  EXPECT_EQ(c.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(c.stop_string(), stop);
  EXPECT_LT(c.token_ids_size(), 40);
  EXPECT_EQ(resp.usage().completion_tokens(), c.token_ids_size());
  EXPECT_TRUE(WaitReleased());
  EXPECT_TRUE(worker_->violations().empty());
}

// The output metrics count what the client got: a stop string completed by the sample's last
// token ends it as `stop` (the scheduler had ended it by length before the front saw the text),
// and the generated tokens equal the sum of usage.completion_tokens.
TEST_F(GenerateServiceTest, OutputMetricsCountWhatWasReturned) {
  constexpr int kTokens = 12;
  const std::string full = TextOf(Expected(0, 5, kTokens));
  std::string stop;  // the text's shortest valid UTF-8 suffix of 3+ bytes found nowhere earlier
  for (size_t len = 3; len <= full.size() && stop.empty(); ++len) {
    const std::string s = full.substr(full.size() - len);
    if (unicode::IsValidUtf8(s) && full.find(s) == full.size() - len) stop = s;
  }
  ASSERT_FALSE(stop.empty()) << full;
  int64_t returned = 0;
  auto generate = [&](const v1::GenerateRequest& req) {
    v1::GenerateResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->Generate(&ctx, req, &resp).ok());
    returned += resp.usage().completion_tokens();
    return resp;
  };
  v1::GenerateRequest at_end = Request(kTokens, 5);
  at_end.mutable_sampling()->add_stop(stop);
  const v1::GenerateResponse r1 = generate(at_end);
  ASSERT_EQ(r1.completions(0).finish_reason(), v1::FINISH_REASON_STOP);
  ASSERT_EQ(r1.completions(0).stop_string(), stop);
  // Runs to length: two samples.
  const v1::GenerateResponse r2 = generate(Request(6, 7, /*n=*/2));
  ASSERT_EQ(r2.completions(1).finish_reason(), v1::FINISH_REASON_LENGTH);
  // A stop token id: its second token.
  v1::GenerateRequest by_id = Request(20, 9);
  by_id.mutable_sampling()->add_stop_token_ids(Expected(0, 9, 2)[1]);
  const v1::GenerateResponse r3 = generate(by_id);
  ASSERT_EQ(r3.completions(0).finish_reason(), v1::FINISH_REASON_STOP);
  ASSERT_TRUE(WaitReleased());
  const auto m = ::astr::testing::MetricSamples(scheduler_->RenderMetrics());
  const std::string model = "model=\"fake\"";  // FakeWorker::Info's model_name
  auto value = [&](const std::string& key) {
    auto it = m.find(key);
    EXPECT_NE(it, m.end()) << "no sample " << key;
    return it == m.end() ? -1.0 : it->second;
  };
  auto finished = [&](const std::string& reason) {
    return value("astr:request_success_total{" + model + ",finished_reason=\"" + reason + "\"}");
  };
  EXPECT_EQ(finished("stop"), 2);
  EXPECT_EQ(finished("length"), 2);
  EXPECT_EQ(finished("abort"), 0);
  EXPECT_EQ(finished("eos"), 0);
  EXPECT_EQ(returned, kTokens + 2 * 6 + 2);
  EXPECT_EQ(value("astr:generation_tokens_total{" + model + "}"), returned);
  EXPECT_EQ(value("astr:request_generation_tokens_count{" + model + "}"), 3);
  EXPECT_EQ(value("astr:request_generation_tokens_sum{" + model + "}"), returned);
}

TEST_F(GenerateServiceTest, InvalidUtf8IsInvalidArgumentNamingTheField) {
  // The C++ stub sends invalid UTF-8 in a string field (protobuf only logs); the server must
  // answer INVALID_ARGUMENT naming the field rather than protobuf's INTERNAL.
  struct Case {
    v1::GenerateRequest req;
    std::string message;
  };
  std::vector<Case> cases(3);
  cases[0].req.set_text("Once \xff");
  cases[0].message = "text: invalid UTF-8";
  cases[1].req = Request(4, 1);
  cases[1].req.mutable_sampling()->add_stop("ok");
  cases[1].req.mutable_sampling()->add_stop("\xc3");
  cases[1].message = "sampling.stop[1]: invalid UTF-8";
  v1::ChatMessage* m = cases[2].req.mutable_chat()->add_messages();
  m->set_role("user");
  m = cases[2].req.mutable_chat()->add_messages();
  m->set_role("assistant");
  m->set_content("caf\xe9");
  cases[2].message = "chat.messages[1].content: invalid UTF-8";
  for (const Case& c : cases) {
    v1::GenerateResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = stub_->Generate(&ctx, c.req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.message;
    EXPECT_EQ(s.error_message(), c.message);
  }
  v1::TokenizeRequest tr;
  tr.set_text("\xfe");
  v1::TokenizeResponse tresp;
  grpc::ClientContext ctx;
  grpc::Status s = stub_->Tokenize(&ctx, tr, &tresp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "text: invalid UTF-8");
}

TEST_F(GenerateServiceTest, MalformedBytesAreInvalidArgument) {
  const std::string bytes =
      "\x12\x09"
      "ab";  // field 2 (text) claims 9 bytes, has 2
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  const grpc::internal::RpcMethod method("/astr.v1.Generate/Generate",
                                         grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel_.get(), method, &ctx, request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("not a valid astr.v1.GenerateRequest"), std::string::npos)
      << s.error_message();
}

TEST_F(GenerateServiceTest, ValidationErrorsReachTheClient) {
  v1::GenerateRequest req = Request(4, 1, /*n=*/5);
  v1::GenerateResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = stub_->Generate(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "n must be in [0, 4] (0 means 1), got 5");
  grpc::ClientContext sctx;
  auto reader = stub_->GenerateStream(&sctx, req);
  v1::GenerateStreamResponse m;
  EXPECT_FALSE(reader->Read(&m));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(GenerateServiceTest, TokenizeDetokenizeAndModelInfo) {
  v1::TokenizeRequest tr;
  tr.set_text("Once upon a time");
  v1::TokenizeResponse tresp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Tokenize(&ctx, tr, &tresp).ok());
  }
  EXPECT_EQ(std::vector<int32_t>(tresp.token_ids().begin(), tresp.token_ids().end()), kPrompt);
  EXPECT_EQ(std::vector<std::string>(tresp.tokens().begin(), tresp.tokens().end()),
            (std::vector<std::string>{"<s>", "▁Once", "▁upon", "▁a", "▁time"}));

  v1::DetokenizeRequest dr;
  dr.mutable_token_ids()->Add(kPrompt.begin(), kPrompt.end());
  v1::DetokenizeResponse dresp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Detokenize(&ctx, dr, &dresp).ok());
  }
  EXPECT_EQ(dresp.text(), "Once upon a time");
  dr.add_token_ids(kVocab);
  {
    grpc::ClientContext ctx;
    grpc::Status s = stub_->Detokenize(&ctx, dr, &dresp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s.error_message(), "token_ids[5] = 512 is outside the vocabulary [0, 512)");
  }

  v1::GetModelInfoResponse info;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  }
  EXPECT_EQ(info.vocab_size(), kVocab);
  EXPECT_EQ(info.max_context_tokens(), kContext);
  EXPECT_EQ(info.content_hash(), "fake-model");
  EXPECT_EQ(info.bos_token_id(), 1);
  ASSERT_EQ(info.eos_token_ids_size(), 1);
  EXPECT_EQ(info.eos_token_ids(0), 2);
  EXPECT_FALSE(info.has_chat_template());
  EXPECT_EQ(info.max_n(), 4);
  ASSERT_EQ(info.workers_size(), 1);
  EXPECT_EQ(info.workers(0).address(), "fake-worker");
  EXPECT_EQ(info.workers(0).num_pages(), 512);
}

TEST_F(GenerateServiceTest, TokenizeCanTreatSpecialTokenTextAsPlainText) {
  // "<s>" typed in the text is the BOS control token unless parse_special_tokens is false.
  v1::TokenizeRequest tr;
  tr.set_text("<s>Once");
  tr.set_add_special_tokens(false);
  v1::TokenizeResponse parsed, plain;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Tokenize(&ctx, tr, &parsed).ok());
  }
  tr.set_parse_special_tokens(false);
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Tokenize(&ctx, tr, &plain).ok());
  }
  EXPECT_EQ(parsed.token_ids(0), 1);
  tok::EncodeOptions options;
  options.add_special_tokens = false;
  options.parse_special = false;
  EXPECT_EQ(std::vector<int32_t>(plain.token_ids().begin(), plain.token_ids().end()),
            tokenizer_->Encode("<s>Once", options));
  for (int32_t id : plain.token_ids()) EXPECT_NE(id, 1);
}

TEST_F(GenerateServiceTest, DeadlineAbortsAndReleases) {
  worker_->SetGated(true);  // no step result comes back until the test allows it
  v1::GenerateRequest req = Request(50, 1);
  v1::GenerateResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  grpc::Status s = stub_->Generate(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  worker_->SetGated(false);
  EXPECT_TRUE(WaitReleased());
  EXPECT_TRUE(worker_->violations().empty());
}

TEST_F(GenerateServiceTest, ClientCancelMidStreamReleases) {
  worker_->SetGated(true);
  worker_->AllowPlans(3);
  v1::GenerateRequest req = Request(200, 1);
  grpc::ClientContext ctx;
  auto reader = stub_->GenerateStream(&ctx, req);
  v1::GenerateStreamResponse m;
  ASSERT_TRUE(reader->Read(&m));  // output has started
  ctx.TryCancel();
  while (reader->Read(&m)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  worker_->SetGated(false);
  EXPECT_TRUE(WaitReleased());
  // The client sees CANCELLED as soon as it cancels; the call unregisters when gRPC reports it
  // done, a moment later.
  EXPECT_TRUE(WaitNoOpenCalls());
}

TEST_F(GenerateServiceTest, DrainRefusesNewRequests) {
  scheduler_->StartDrain();
  v1::GenerateResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = stub_->Generate(&ctx, Request(4, 1), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("draining"), std::string::npos);
}

// The front's protections, with limits low enough to reach in a test.
class GenerateServiceLimitsTest : public GenerateServiceTest {
 protected:
  FrontLimits FrontLimitsForTest() const override {
    FrontLimits l;
    l.max_calls_per_peer = 3;
    l.stream_stall_timeout = std::chrono::milliseconds(300);
    return l;
  }
  // A new client connection (a distinct channel argument keeps gRPC from sharing one).
  std::unique_ptr<v1::Generate::Stub> NewClient(int id, int window_bytes = 0) {
    grpc::ChannelArguments args;
    args.SetInt("astr.test.client", id);
    if (window_bytes > 0) {
      // A client that reads nothing lets the server write only this much before it blocks.
      args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, window_bytes);
      args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    }
    return v1::Generate::NewStub(
        grpc::CreateCustomChannel(server_address_, grpc::InsecureChannelCredentials(), args));
  }
  v1::GetServerStatsResponse Stats() {
    v1::GetServerStatsResponse stats;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->GetServerStats(&ctx, v1::GetServerStatsRequest(), &stats).ok());
    return stats;
  }
};

TEST_F(GenerateServiceLimitsTest, OneConnectionCannotTakeEverySlot) {
  worker_->SetGated(true);  // every stream stays open
  auto greedy = NewClient(1);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::GenerateStreamResponse>>> readers;
  for (int i = 0; i < 3; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(greedy->GenerateStream(contexts.back().get(), Request(8, 1)));
  }
  // Until the three are open on the server, a fourth might race them; wait for them.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (service_->open_calls() < 3 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(service_->open_calls(), 3);
  {
    v1::GenerateResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = greedy->Generate(&ctx, Request(4, 1), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(s.error_message().find("--max-calls-per-peer 3"), std::string::npos)
        << s.error_message();
    v1::TokenizeRequest tr;
    tr.set_text("Once");
    v1::TokenizeResponse tresp;
    grpc::ClientContext tctx;
    EXPECT_EQ(greedy->Tokenize(&tctx, tr, &tresp).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  // Stats and model info still answer on the full connection; another client is admitted.
  const v1::GetServerStatsResponse stats = Stats();
  EXPECT_EQ(stats.requests_refused_peer_limit(), 2);
  EXPECT_EQ(stats.requests_refused(), 2);
  EXPECT_EQ(stats.open_calls(), 3);
  v1::GenerateResponse other;
  {
    worker_->SetGated(false);
    grpc::ClientContext ctx;
    grpc::Status s = NewClient(2)->Generate(&ctx, Request(6, 2), &other);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(std::vector<int32_t>(other.completions(0).token_ids().begin(),
                                 other.completions(0).token_ids().end()),
            Expected(0, 2, 6));
  for (auto& reader : readers) {
    v1::GenerateStreamResponse m;
    while (reader->Read(&m)) {
    }
    EXPECT_TRUE(reader->Finish().ok());
  }
  EXPECT_TRUE(WaitReleased());
}

TEST_F(GenerateServiceLimitsTest, StreamWhoseClientStopsReadingIsCancelled) {
  // A client with a 256-byte window that never reads: the server's writes block after a few
  // messages, and the stream is cancelled once no write completed for the stall timeout.
  auto slow = NewClient(3, /*window_bytes=*/256);
  v1::GenerateRequest req = Request(200, 4);
  req.mutable_sampling()->set_return_logprobs(true);
  req.mutable_sampling()->set_top_logprobs(5);
  grpc::ClientContext ctx;
  auto reader = slow->GenerateStream(&ctx, req);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Stats().streams_stalled() == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Stats().streams_stalled(), 1);
  EXPECT_TRUE(WaitReleased());  // the request was aborted in the scheduler: pages freed
  v1::GenerateStreamResponse m;
  int read = 0;
  while (reader->Read(&m)) ++read;
  EXPECT_LT(read, 200);  // it never got the whole output
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The server goes on serving.
  v1::GenerateResponse resp;
  grpc::ClientContext uctx;
  EXPECT_TRUE(stub_->Generate(&uctx, Request(4, 1), &resp).ok());
}

TEST_F(GenerateServiceTest, StatsCountInvalidRequests) {
  v1::GenerateResponse resp;
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->Generate(&ctx, Request(4, 1, /*n=*/9), &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  v1::GetServerStatsResponse stats;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->GetServerStats(&ctx, v1::GetServerStatsRequest(), &stats).ok());
  EXPECT_EQ(stats.requests_invalid(), 2);
  EXPECT_EQ(stats.requests_refused(), 0);
  EXPECT_TRUE(stats.accepting_requests());
  EXPECT_EQ(stats.not_accepting_reason(), "");
  scheduler_->StartDrain();
  grpc::ClientContext dctx;
  EXPECT_EQ(stub_->Generate(&dctx, Request(4, 1), &resp).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  grpc::ClientContext sctx;
  ASSERT_TRUE(stub_->GetServerStats(&sctx, v1::GetServerStatsRequest(), &stats).ok());
  EXPECT_EQ(stats.requests_refused(), 1);
  EXPECT_FALSE(stats.accepting_requests());
  EXPECT_EQ(stats.not_accepting_reason(), "draining");
}

// The call life cycle both fronts share (call_life.h), driven by a transport that records what
// it is told: admission of several prompts, cancel before and after admission, a refused prompt,
// a step that throws, the connection's call slot, and the stall rule.
class RecordingLife final : public CallLife {
 public:
  RecordingLife(GenerateService* service, TaskPool* pool, std::string peer,
                std::vector<v1::GenerateRequest> prompts)
      : CallLife(service, pool, std::move(peer)), prompts_(std::move(prompts)) {}

  bool throw_in_decode = false;
  bool throw_in_emit = false;

  // Waits until `prompts` prompts are admitted.
  bool WaitAdmitted(int prompts, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return admitted_prompts_ >= prompts; });
  }
  // Waits until the call ended (by output, failure or cancel).
  bool WaitEnded(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return finished_; });
  }
  std::optional<Status> failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }
  std::optional<Status> cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }
  int admitted_prompts() {
    std::lock_guard<std::mutex> lock(mu_);
    return admitted_prompts_;
  }
  std::vector<int32_t> tokens(size_t prompt) {
    std::lock_guard<std::mutex> lock(mu_);
    return prompt < tokens_.size() ? tokens_[prompt] : std::vector<int32_t>();
  }
  // The stall rule as the transport applies it while output waits on the client.
  std::optional<Status> BlockedFor(std::chrono::milliseconds waited) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = sched::Clock::now();
    OutputBlockedLocked(now - waited);
    return CheckStallLocked(now);
  }
  void Taken() {
    std::lock_guard<std::mutex> lock(mu_);
    OutputTakenLocked();
  }
  void End() {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    CloseLocked();
    cv_.notify_all();
  }

 private:
  std::optional<Admission> Decode() override {
    if (throw_in_decode) throw std::runtime_error("decode broke");
    Admission a;
    a.prompts = prompts_;
    return a;
  }
  void AdmittedLocked() override {
    admitted_prompts_ = static_cast<int>(calls_.size());
    tokens_.assign(calls_.size(), {});
    cv_.notify_all();
  }
  void EmitLocked() override {
    if (throw_in_emit) throw std::runtime_error("emit broke");
    bool all = true;
    for (size_t p = 0; p < calls_.size(); ++p) {
      calls_[p]->TakeDeltas(&update_);
      for (const auto& [index, delta] : update_.deltas) {
        tokens_[p].insert(tokens_[p].end(), delta.token_ids.begin(), delta.token_ids.end());
      }
      all = all && closed_[p];
    }
    if (!all) return;
    finished_ = true;
    CloseLocked();
    cv_.notify_all();
  }
  void FailLocked(const Status& why) override {
    failed_ = why;
    finished_ = true;
    CloseLocked();
    cv_.notify_all();
  }
  void CancelledLocked(const Status& why) override {
    cancelled_ = why;
    finished_ = true;
    CloseLocked();
    cv_.notify_all();
  }

  const std::vector<v1::GenerateRequest> prompts_;
  std::condition_variable cv_;
  std::optional<Status> failed_;              // mu_
  std::optional<Status> cancelled_;           // mu_
  int admitted_prompts_ = -1;                 // mu_
  std::vector<std::vector<int32_t>> tokens_;  // mu_: per prompt, sample 0's tokens
  CallUpdate update_;                         // mu_
};

class CallLifeTest : public GenerateServiceTest {
 protected:
  FrontLimits FrontLimitsForTest() const override {
    FrontLimits l;
    l.max_calls_per_peer = 1;
    l.stream_pause_after = std::chrono::milliseconds(50);
    l.stream_stall_timeout = std::chrono::milliseconds(200);
    return l;
  }
  std::shared_ptr<RecordingLife> NewLife(std::vector<v1::GenerateRequest> prompts,
                                         const std::string& peer = "ipv4:127.0.0.1:1") {
    return std::make_shared<RecordingLife>(service_.get(), &pool_, peer, std::move(prompts));
  }
  TaskPool pool_{2};
};

TEST_F(CallLifeTest, EveryPromptIsAdmittedPumpedAndReleased) {
  auto life = NewLife({Request(5, 11), Request(7, 12)});
  ASSERT_TRUE(life->Open(nullptr).ok());
  life->Begin();
  ASSERT_TRUE(life->WaitEnded());
  EXPECT_FALSE(life->failed());
  EXPECT_EQ(life->admitted_prompts(), 2);
  EXPECT_EQ(life->tokens(0), Expected(0, 11, 5));
  EXPECT_EQ(life->tokens(1), Expected(0, 12, 7));
  EXPECT_TRUE(WaitReleased());
  EXPECT_TRUE(WaitNoOpenCalls());
  // The connection's one slot came back with Close.
  auto again = NewLife({Request(3, 13)});
  EXPECT_TRUE(again->Open(nullptr).ok());
  again->End();
}

TEST_F(CallLifeTest, TheConnectionsCallSlotIsHeldUntilClose) {
  auto first = NewLife({Request(3, 1)});
  ASSERT_TRUE(first->Open(nullptr).ok());
  auto second = NewLife({Request(3, 2)});
  const Status refused = second->Open(nullptr);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("--max-calls-per-peer 1"), std::string::npos)
      << refused.message();
  EXPECT_EQ(service_->Stats().requests_refused_peer_limit(), 1);
  // Another connection is not limited by this one.
  auto other = NewLife({Request(3, 3)}, "ipv4:127.0.0.1:2");
  EXPECT_TRUE(other->Open(nullptr).ok());
  first->End();
  other->End();
  EXPECT_TRUE(second->Open(nullptr).ok());
  second->End();
}

TEST_F(CallLifeTest, CancelBeforeAdmissionEndsTheCallWithoutSubmitting) {
  auto life = NewLife({Request(5, 1)});
  ASSERT_TRUE(life->Open(nullptr).ok());
  life->Cancel(Status(StatusCode::kCancelled, "the client left early"));
  life->Begin();
  ASSERT_TRUE(life->WaitEnded());
  ASSERT_TRUE(life->failed());
  EXPECT_EQ(life->failed()->code(), StatusCode::kCancelled);
  EXPECT_EQ(life->failed()->message(), "the client left early");
  EXPECT_EQ(life->admitted_prompts(), -1);
  EXPECT_EQ(worker_->plans(), 0);  // nothing reached the scheduler's worker
  EXPECT_TRUE(WaitNoOpenCalls());
}

TEST_F(CallLifeTest, CancelAfterAdmissionAbortsEveryPrompt) {
  worker_->SetGated(true);  // the requests stay open
  auto life = NewLife({Request(50, 1), Request(50, 2)});
  ASSERT_TRUE(life->Open(nullptr).ok());
  life->Begin();
  ASSERT_TRUE(life->WaitAdmitted(2));
  life->Cancel(Status(StatusCode::kCancelled, "the client disconnected"));
  ASSERT_TRUE(life->WaitEnded());
  ASSERT_TRUE(life->cancelled());
  EXPECT_EQ(life->cancelled()->message(), "the client disconnected");
  worker_->SetGated(false);
  EXPECT_TRUE(WaitReleased());
  EXPECT_TRUE(WaitNoOpenCalls());
}

TEST_F(CallLifeTest, ARefusedPromptFailsTheCallAndCancelsTheOthers) {
  worker_->SetGated(true);
  v1::GenerateRequest bad = Request(4, 2, /*n=*/9);  // n above the limit of 4
  auto life = NewLife({Request(50, 1), bad});
  ASSERT_TRUE(life->Open(nullptr).ok());
  life->Begin();
  ASSERT_TRUE(life->WaitEnded());
  ASSERT_TRUE(life->failed());
  EXPECT_EQ(life->failed()->code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(life->failed()->field(), "n") << life->failed()->ToString();
  EXPECT_EQ(life->admitted_prompts(), -1);
  worker_->SetGated(false);
  EXPECT_TRUE(WaitReleased());  // the first prompt's request was aborted
  EXPECT_TRUE(WaitNoOpenCalls());
}

TEST_F(CallLifeTest, AStepThatThrowsFailsOnlyThisCall) {
  auto broken = NewLife({Request(4, 1)});
  broken->throw_in_decode = true;
  ASSERT_TRUE(broken->Open(nullptr).ok());
  broken->Begin();
  ASSERT_TRUE(broken->WaitEnded());
  ASSERT_TRUE(broken->failed());
  EXPECT_EQ(broken->failed()->code(), StatusCode::kInternal);
  EXPECT_NE(broken->failed()->message().find("decode broke"), std::string::npos);

  auto emit_broken = NewLife({Request(4, 2)}, "ipv4:127.0.0.1:3");
  emit_broken->throw_in_emit = true;
  ASSERT_TRUE(emit_broken->Open(nullptr).ok());
  emit_broken->Begin();
  ASSERT_TRUE(emit_broken->WaitEnded());
  ASSERT_TRUE(emit_broken->failed());
  EXPECT_EQ(emit_broken->failed()->code(), StatusCode::kInternal);
  EXPECT_TRUE(WaitReleased());

  // The service goes on serving, and the broken calls' slots came back.
  auto ok = NewLife({Request(4, 3)});
  ASSERT_TRUE(ok->Open(nullptr).ok());
  ok->Begin();
  ASSERT_TRUE(ok->WaitEnded());
  EXPECT_FALSE(ok->failed());
  EXPECT_EQ(ok->tokens(0), Expected(0, 3, 4));
}

TEST_F(CallLifeTest, BlockedOutputIsPausedThenEndsTheCall) {
  worker_->SetGated(true);
  auto life = NewLife({Request(50, 1), Request(50, 2)});
  ASSERT_TRUE(life->Open(nullptr).ok());
  life->Begin();
  ASSERT_TRUE(life->WaitAdmitted(2));
  // Past the pause: both prompts are held (counted once each), the call goes on.
  EXPECT_FALSE(life->BlockedFor(std::chrono::milliseconds(100)));
  EXPECT_EQ(service_->Stats().streams_paused(), 2);
  life->Taken();  // the client read: released
  // Past the stall timeout: the reason the call must end.
  const std::optional<Status> why = life->BlockedFor(std::chrono::milliseconds(500));
  ASSERT_TRUE(why);
  EXPECT_EQ(why->code(), StatusCode::kCancelled) << why->ToString();
  EXPECT_NE(why->message().find("--stream-stall-timeout-s"), std::string::npos);
  EXPECT_EQ(service_->Stats().streams_stalled(), 1);  // one call, one stall
  life->End();
  worker_->SetGated(false);
  EXPECT_TRUE(WaitReleased());  // every prompt's request aborted
}

}  // namespace
}  // namespace astr::front
