// astr::client::Client and the `astr` client subcommands against an in-process fake
// astr.v1.Generate service (the generated gRPC code, no model): unary and streaming calls,
// cancelling from the stream callback, deadlines, error passthrough, grpc.health.v1, concurrent
// use, and how `astr generate / chat / info / health` map flags to requests and print results.
#include "astr/client.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "tests/support/test_util.h"

namespace astr::client {
namespace {

using namespace std::chrono_literals;

// What the fake streams for a normal prompt, per sample: (text, token id) chunks. The last chunk
// ends the sample with EOS. Unary answers join them.
struct Chunk {
  const char* text;
  int32_t token_id;
};
constexpr Chunk kChunks[] = {{"Hel", 11}, {"lo", 12}, {" world", 13}};
constexpr char kFullText[] = "Hello world";
constexpr char kInvalidMessage[] = "sampling.top_p must be in (0, 1], got 0";

// Prompts that make the fake misbehave on purpose.
constexpr char kHangPrompt[] = "hang";        // waits until the call is cancelled
constexpr char kFailPrompt[] = "fail";        // INVALID_ARGUMENT with kInvalidMessage
constexpr char kEndlessPrompt[] = "endless";  // streams one chunk per ms until cancelled

class FakeGenerate final : public v1::Generate::Service {
 public:
  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        v1::GenerateResponse* resp) override {
    Record(*req);
    if (req->text() == kFailPrompt) return {grpc::StatusCode::INVALID_ARGUMENT, kInvalidMessage};
    if (req->text() == kHangPrompt) return Hang(ctx);
    resp->set_request_id(req->request_id());
    const int n = std::max(req->n(), 1);
    for (int i = 0; i < n; ++i) {
      v1::Completion* c = resp->add_completions();
      c->set_index(i);
      c->set_text(kFullText);
      for (const Chunk& chunk : kChunks) c->add_token_ids(chunk.token_id);
      c->set_finish_reason(v1::FINISH_REASON_EOS);
    }
    resp->mutable_usage()->set_prompt_tokens(static_cast<int>(req->text().size()));
    resp->mutable_usage()->set_completion_tokens(n * 3);
    resp->set_seed(req->sampling().has_seed() ? req->sampling().seed() : 4242);
    return grpc::Status::OK;
  }

  grpc::Status GenerateStream(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                              grpc::ServerWriter<v1::GenerateStreamResponse>* writer) override {
    Record(*req);
    if (req->text() == kFailPrompt) return {grpc::StatusCode::INVALID_ARGUMENT, kInvalidMessage};
    if (req->text() == kHangPrompt) return Hang(ctx);
    if (req->text() == kEndlessPrompt) return Endless(ctx, writer);
    const int n = std::max(req->n(), 1);
    // Samples interleave chunk by chunk, as a batching server sends them.
    for (size_t k = 0; k < std::size(kChunks); ++k) {
      for (int i = 0; i < n; ++i) {
        v1::GenerateStreamResponse m;
        m.set_request_id(req->request_id());
        m.set_index(i);
        m.set_text(kChunks[k].text);
        m.add_token_ids(kChunks[k].token_id);
        if (k + 1 == std::size(kChunks)) m.set_finish_reason(v1::FINISH_REASON_EOS);
        if (k + 1 == std::size(kChunks) && i + 1 == n) {
          m.mutable_usage()->set_prompt_tokens(static_cast<int>(req->text().size()));
          m.mutable_usage()->set_completion_tokens(n * 3);
        }
        if (!writer->Write(m)) return grpc::Status::CANCELLED;
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status Tokenize(grpc::ServerContext*, const v1::TokenizeRequest* req,
                        v1::TokenizeResponse* resp) override {
    for (char c : req->text()) resp->add_token_ids(static_cast<unsigned char>(c));
    return grpc::Status::OK;
  }

  grpc::Status Detokenize(grpc::ServerContext*, const v1::DetokenizeRequest* req,
                          v1::DetokenizeResponse* resp) override {
    std::string text;
    for (int id : req->token_ids()) text += static_cast<char>(id);
    resp->set_text(text);
    return grpc::Status::OK;
  }

  grpc::Status GetModelInfo(grpc::ServerContext*, const v1::GetModelInfoRequest*,
                            v1::GetModelInfoResponse* resp) override {
    resp->set_model_name("fake-model");
    resp->set_vocab_size(256);
    resp->add_eos_token_ids(2);
    return grpc::Status::OK;
  }

  grpc::Status GetServerStats(grpc::ServerContext*, const v1::GetServerStatsRequest*,
                              v1::GetServerStatsResponse* resp) override {
    resp->set_steps(77);
    resp->add_workers()->set_free_pages(5);
    if (fail_stats) return {grpc::StatusCode::RESOURCE_EXHAUSTED, "stats are out of stock"};
    return grpc::Status::OK;
  }

  // Makes GetServerStats fail (error passthrough on a second method).
  std::atomic<bool> fail_stats{false};

  std::vector<v1::GenerateRequest> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  // Waits until a hanging or endless call has returned; true if it saw the cancellation.
  std::optional<bool> WaitForCancelSeen(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return cancel_seen_.has_value(); })) return {};
    return cancel_seen_;
  }
  int64_t endless_written() const { return endless_written_; }

 private:
  void Record(const v1::GenerateRequest& req) {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(req);
  }
  void SetCancelSeen(bool seen) {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_seen_ = seen;
    cv_.notify_all();
  }
  grpc::Status Hang(grpc::ServerContext* ctx) {
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (!ctx->IsCancelled() && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(2ms);
    }
    SetCancelSeen(ctx->IsCancelled());
    return grpc::Status::CANCELLED;
  }
  grpc::Status Endless(grpc::ServerContext* ctx,
                       grpc::ServerWriter<v1::GenerateStreamResponse>* writer) {
    const auto end = std::chrono::steady_clock::now() + 10s;
    v1::GenerateStreamResponse m;
    m.set_text("x");
    while (!ctx->IsCancelled() && std::chrono::steady_clock::now() < end) {
      if (!writer->Write(m)) break;
      ++endless_written_;
      std::this_thread::sleep_for(1ms);
    }
    SetCancelSeen(ctx->IsCancelled());
    return grpc::Status::CANCELLED;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::GenerateRequest> requests_;
  std::optional<bool> cancel_seen_;
  std::atomic<int64_t> endless_written_{0};
};

// A fake server on a free loopback port, with or without grpc.health.v1.
struct FakeServer {
  explicit FakeServer(bool with_health = true) {
    grpc::EnableDefaultHealthCheckService(with_health);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~FakeServer() { server->Shutdown(std::chrono::system_clock::now() + 1s); }

  FakeGenerate service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

std::unique_ptr<Client> ConnectTo(const FakeServer& fake) {
  auto client = Client::Connect(fake.address, 5s);
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return client.ok() ? std::move(*client) : nullptr;
}

v1::GenerateRequest TextRequest(const std::string& text, int n = 1) {
  v1::GenerateRequest req;
  req.set_text(text);
  req.set_n(n);
  return req;
}

TEST(ClientTest, ConnectToNothingIsUnavailableNamingTheAddress) {
  // Port 1 on loopback: nothing listens there (and binding it needs privileges).
  auto client = Client::Connect("127.0.0.1:1", 300ms);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(client.status().message().find("127.0.0.1:1"), std::string::npos);
}

TEST(ClientTest, UnaryGenerateReturnsTheResponseAndSendsTheRequest) {
  FakeServer fake;
  auto client = ConnectTo(fake);
  ASSERT_NE(client, nullptr);
  v1::GenerateRequest req = TextRequest("Once", 2);
  req.set_request_id("req-1");
  req.mutable_sampling()->set_max_tokens(7);
  auto resp = client->Generate(req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->request_id(), "req-1");
  ASSERT_EQ(resp->completions_size(), 2);
  EXPECT_EQ(resp->completions(1).text(), "Hello world");
  EXPECT_EQ(std::vector<int32_t>(resp->completions(0).token_ids().begin(),
                                 resp->completions(0).token_ids().end()),
            (std::vector<int32_t>{11, 12, 13}));
  EXPECT_EQ(resp->usage().prompt_tokens(), 4);  // "Once"
  const auto seen = fake.service.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].sampling().max_tokens(), 7);
  EXPECT_EQ(seen[0].n(), 2);
}

TEST(ClientTest, StreamDeliversEveryMessageInOrder) {
  FakeServer fake;
  auto client = ConnectTo(fake);
  ASSERT_NE(client, nullptr);
  std::vector<std::string> texts;
  std::vector<v1::FinishReason> finishes;
  v1::Usage usage;
  Status s = client->GenerateStream(TextRequest("Hi"), [&](const v1::GenerateStreamResponse& m) {
    texts.push_back(m.text());
    finishes.push_back(m.finish_reason());
    if (m.has_usage()) usage = m.usage();
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(texts, (std::vector<std::string>{"Hel", "lo", " world"}));
  EXPECT_EQ(finishes,
            (std::vector<v1::FinishReason>{v1::FINISH_REASON_UNSPECIFIED,
                                           v1::FINISH_REASON_UNSPECIFIED, v1::FINISH_REASON_EOS}));
  EXPECT_EQ(usage.completion_tokens(), 3);
}

TEST(ClientTest, ReturningFalseFromTheCallbackCancelsTheStream) {
  FakeServer fake;
  auto client = ConnectTo(fake);
  ASSERT_NE(client, nullptr);
  int calls = 0;
  Status s = client->GenerateStream(TextRequest(kEndlessPrompt),
                                    [&](const v1::GenerateStreamResponse&) { return ++calls < 3; });
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  EXPECT_EQ(calls, 3);  // no message is delivered after the callback said stop
  // The server learns of it: its handler sees the cancellation and stops writing.
  auto seen = fake.service.WaitForCancelSeen(5s);
  ASSERT_TRUE(seen.has_value()) << "the server never noticed the cancellation";
  EXPECT_TRUE(*seen);
  const int64_t written = fake.service.endless_written();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(fake.service.endless_written(), written);
}

TEST(ClientTest, PassedDeadlineIsDeadlineExceededAndCancelsTheServerCall) {
  FakeServer fake;
  auto client = ConnectTo(fake);
  ASSERT_NE(client, nullptr);
  const auto start = std::chrono::steady_clock::now();
  auto resp = client->Generate(TextRequest(kHangPrompt), CallOptions::Timeout(150ms));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(elapsed, 140ms);
  EXPECT_LT(elapsed, 5s);
  auto seen = fake.service.WaitForCancelSeen(5s);
  ASSERT_TRUE(seen.has_value());
  EXPECT_TRUE(*seen);
}

TEST(ClientTest, StreamDeadlineIsDeadlineExceeded) {
  FakeServer fake;
  auto client = ConnectTo(fake);
  ASSERT_NE(client, nullptr);
  int calls = 0;
  Status s = client->GenerateStream(
      TextRequest(kEndlessPrompt),
      [&](const v1::GenerateStreamResponse&) {
        ++calls;
        return true;
      },
      CallOptions::Timeout(150ms));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_GT(calls, 0);
}

TEST(ClientTest, ServerErrorsKeepTheirCodeAndMessage) {
  FakeServer fake;
  auto client = ConnectTo(fake);
  ASSERT_NE(client, nullptr);
  auto unary = client->Generate(TextRequest(kFailPrompt));
  ASSERT_FALSE(unary.ok());
  EXPECT_EQ(unary.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(unary.status().message(), kInvalidMessage);
  int calls = 0;
  Status s = client->GenerateStream(TextRequest(kFailPrompt),
                                    [&](const v1::GenerateStreamResponse&) { return ++calls > 0; });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), kInvalidMessage);
  EXPECT_EQ(calls, 0);
  fake.service.fail_stats = true;
  auto stats = client->GetServerStats();
  EXPECT_EQ(stats.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(stats.status().message(), "stats are out of stock");
}

TEST(ClientTest, TokenizeDetokenizeAndModelInfo) {
  FakeServer fake;
  auto client = ConnectTo(fake);
  ASSERT_NE(client, nullptr);
  v1::TokenizeRequest treq;
  treq.set_text("AB");
  auto tokens = client->Tokenize(treq);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  EXPECT_EQ(std::vector<int32_t>(tokens->token_ids().begin(), tokens->token_ids().end()),
            (std::vector<int32_t>{65, 66}));  // the fake's ids are the bytes
  v1::DetokenizeRequest dreq;
  dreq.add_token_ids(104);
  dreq.add_token_ids(105);
  auto text = client->Detokenize(dreq);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->text(), "hi");
  auto info = client->GetModelInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->model_name(), "fake-model");
  EXPECT_EQ(info->vocab_size(), 256);
  auto stats = client->GetServerStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->steps(), 77);
}

TEST(ClientTest, HealthOfTheDefaultHealthService) {
  FakeServer fake;
  auto client = ConnectTo(fake);
  ASSERT_NE(client, nullptr);
  auto overall = client->Health();
  ASSERT_TRUE(overall.ok()) << overall.status().ToString();
  EXPECT_EQ(*overall, ServingStatus::kServing);
  fake.server->GetHealthCheckService()->SetServingStatus("astr.v1.Generate", false);
  auto generate = client->Health("astr.v1.Generate");
  ASSERT_TRUE(generate.ok()) << generate.status().ToString();
  EXPECT_EQ(*generate, ServingStatus::kNotServing);
  fake.server->GetHealthCheckService()->SetServingStatus("astr.v1.Generate", true);
  EXPECT_EQ(*client->Health("astr.v1.Generate"), ServingStatus::kServing);
  auto unknown = client->Health("no.such.Service");
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_STREQ(ServingStatusName(ServingStatus::kNotServing), "NOT_SERVING");
}

TEST(ClientTest, HealthWithoutTheHealthServiceIsUnimplemented) {
  FakeServer fake(/*with_health=*/false);
  auto client = ConnectTo(fake);
  ASSERT_NE(client, nullptr);
  auto status = client->Health();
  EXPECT_EQ(status.status().code(), StatusCode::kUnimplemented);
}

TEST(ClientTest, OneClientServesManyThreadsAtOnce) {
  FakeServer fake;
  auto client = ConnectTo(fake);
  ASSERT_NE(client, nullptr);
  constexpr int kThreads = 8, kCallsPerThread = 20;
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        if ((t + i) % 2 == 0) {
          auto r = client->Generate(TextRequest("abc"));
          if (r.ok() && r->completions_size() == 1 && r->completions(0).text() == kFullText) ++good;
        } else {
          std::string text;
          Status s = client->GenerateStream(TextRequest("abc"), [&](const auto& m) {
            text += m.text();
            return true;
          });
          if (s.ok() && text == kFullText) ++good;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(good.load(), kThreads * kCallsPerThread);
}

// ---- the `astr` client subcommands against the fake ----

std::string Astr() {
  const std::string path = testing::BinDir() + "/astr";
  return std::filesystem::exists(path) ? path : "";
}

#define REQUIRE_ASTR_BINARY(var)  \
  const std::string var = Astr(); \
  if (var.empty()) GTEST_SKIP() << "astr binary not built in " << testing::BinDir()

TEST(ClientCliTest, GenerateStreamsTheTextAndSummarizesOnStderr) {
  REQUIRE_ASTR_BINARY(astr);
  FakeServer fake;
  auto out = testing::RunCommand(astr + " generate --server " + fake.address + " --prompt Hi");
  EXPECT_EQ(out.exit_code, 0);
  EXPECT_EQ(out.out, "Hello world\n");
  auto both =
      testing::RunCommand(astr + " generate --server " + fake.address + " --prompt Hi 2>&1");
  EXPECT_NE(both.out.find("finish: eos; 2 prompt + 3 completion tokens"), std::string::npos)
      << both.out;
}

TEST(ClientCliTest, GenerateLabelsInterleavedSamples) {
  REQUIRE_ASTR_BINARY(astr);
  FakeServer fake;
  const std::string expected =
      "--- sample 0 ---\nHello world\n--- sample 1 ---\nHello world\n--- sample 2 ---\nHello "
      "world\n";
  for (const char* mode : {"", " --no-stream"}) {
    auto out = testing::RunCommand(astr + " generate --server " + fake.address +
                                   " --prompt Hi --n 3" + mode);
    EXPECT_EQ(out.exit_code, 0) << mode;
    EXPECT_EQ(out.out, expected) << mode;
  }
}

TEST(ClientCliTest, GenerateSendsTheSamplingFlags) {
  REQUIRE_ASTR_BINARY(astr);
  FakeServer fake;
  auto out = testing::RunCommand(
      astr + " generate --server " + fake.address +
      " --prompt-ids 1,5,9 --max-tokens 9 --temperature 0.5 --top-k 7 --top-p 0.9 --min-p 0.05"
      " --seed 3 --stop END --stop '##' --stop-token-ids 4,6 --logit-bias 13:-100 --n 2"
      " --logprobs 3 --ignore-eos --min-tokens 2 --priority 5 --request-id r7 --no-stream");
  ASSERT_EQ(out.exit_code, 0);
  const auto seen = fake.service.requests();
  ASSERT_EQ(seen.size(), 1u);
  const v1::GenerateRequest& r = seen[0];
  EXPECT_EQ(std::vector<int32_t>(r.token_ids().ids().begin(), r.token_ids().ids().end()),
            (std::vector<int32_t>{1, 5, 9}));
  const v1::SamplingParameters& s = r.sampling();
  EXPECT_EQ(s.max_tokens(), 9);
  EXPECT_FLOAT_EQ(s.temperature(), 0.5f);
  EXPECT_EQ(s.top_k(), 7);
  EXPECT_FLOAT_EQ(s.top_p(), 0.9f);
  EXPECT_FLOAT_EQ(s.min_p(), 0.05f);
  ASSERT_TRUE(s.has_seed());
  EXPECT_EQ(s.seed(), 3u);
  EXPECT_EQ(std::vector<std::string>(s.stop().begin(), s.stop().end()),
            (std::vector<std::string>{"END", "##"}));
  EXPECT_EQ(std::vector<int32_t>(s.stop_token_ids().begin(), s.stop_token_ids().end()),
            (std::vector<int32_t>{4, 6}));
  ASSERT_EQ(s.logit_bias().count(13), 1u);
  EXPECT_FLOAT_EQ(s.logit_bias().at(13), -100.0f);
  EXPECT_TRUE(s.return_logprobs());
  EXPECT_EQ(s.top_logprobs(), 3);
  EXPECT_TRUE(s.ignore_eos());
  EXPECT_EQ(s.min_tokens(), 2);
  EXPECT_EQ(r.n(), 2);
  EXPECT_EQ(r.priority(), 5);
  EXPECT_EQ(r.request_id(), "r7");
}

TEST(ClientCliTest, GenerateWithoutSeedLetsTheServerChoose) {
  REQUIRE_ASTR_BINARY(astr);
  FakeServer fake;
  auto out = testing::RunCommand(astr + " generate --server " + fake.address +
                                 " --chat 'Say hi' --system 'Be brief' --no-stream 2>&1");
  ASSERT_EQ(out.exit_code, 0) << out.out;
  EXPECT_NE(out.out.find("seed 4242"), std::string::npos) << out.out;  // the fake's own seed
  const auto seen = fake.service.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_FALSE(seen[0].sampling().has_seed());
  ASSERT_EQ(seen[0].chat().messages_size(), 2);
  EXPECT_EQ(seen[0].chat().messages(0).role(), "system");
  EXPECT_EQ(seen[0].chat().messages(0).content(), "Be brief");
  EXPECT_EQ(seen[0].chat().messages(1).role(), "user");
  EXPECT_EQ(seen[0].chat().messages(1).content(), "Say hi");
}

TEST(ClientCliTest, PlainSpecialTokensAsksTheServerNotToParseThem) {
  REQUIRE_ASTR_BINARY(astr);
  FakeServer fake;
  auto out = testing::RunCommand(astr + " generate --server " + fake.address +
                                 " --prompt '<s>Hi' --plain-special-tokens --no-stream");
  ASSERT_EQ(out.exit_code, 0) << out.out;
  out = testing::RunCommand(astr + " generate --server " + fake.address +
                            " --prompt '<s>Hi' --no-stream");
  ASSERT_EQ(out.exit_code, 0) << out.out;
  const auto seen = fake.service.requests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].text(), "<s>Hi");
  EXPECT_TRUE(seen[0].has_parse_special_tokens());
  EXPECT_FALSE(seen[0].parse_special_tokens());
  EXPECT_FALSE(seen[1].has_parse_special_tokens());  // the server's default: parse them
  auto usage = testing::RunCommand(astr + " generate --server " + fake.address +
                                   " --chat Hi --plain-special-tokens 2>&1");
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.out.find("--plain-special-tokens needs --prompt"), std::string::npos)
      << usage.out;
}

TEST(ClientCliTest, GenerateJsonPrintsOneLinePerMessage) {
  REQUIRE_ASTR_BINARY(astr);
  FakeServer fake;
  auto out =
      testing::RunCommand(astr + " generate --server " + fake.address + " --prompt Hi --json");
  ASSERT_EQ(out.exit_code, 0);
  EXPECT_EQ(std::count(out.out.begin(), out.out.end(), '\n'), 3);
  EXPECT_NE(out.out.find("\"text\":\"Hel\""), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("\"finish_reason\":\"FINISH_REASON_EOS\""), std::string::npos);
}

TEST(ClientCliTest, ErrorsPrintTheCodeAndExitNonZero) {
  REQUIRE_ASTR_BINARY(astr);
  FakeServer fake;
  auto out =
      testing::RunCommand(astr + " generate --server " + fake.address + " --prompt fail 2>&1");
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_NE(out.out.find(std::string("INVALID_ARGUMENT: ") + kInvalidMessage), std::string::npos)
      << out.out;
  auto usage = testing::RunCommand(astr + " generate --server " + fake.address + " 2>&1");
  EXPECT_EQ(usage.exit_code, 2);
}

TEST(ClientCliTest, ChatSendsTheWholeConversationEachTurn) {
  REQUIRE_ASTR_BINARY(astr);
  FakeServer fake;
  auto out = testing::RunCommand("printf 'first\\n\\nsecond\\n/exit\\nthird\\n' | " + astr +
                                 " chat --server " + fake.address + " --system S");
  ASSERT_EQ(out.exit_code, 0);
  EXPECT_EQ(out.out, "Hello world\nHello world\n");
  const auto seen = fake.service.requests();
  ASSERT_EQ(seen.size(), 2u);  // the empty line is skipped, /exit ends before "third"
  const auto& msgs = seen[1].chat().messages();
  ASSERT_EQ(msgs.size(), 4);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"system", "S"}, {"user", "first"}, {"assistant", "Hello world"}, {"user", "second"}};
  for (int i = 0; i < msgs.size(); ++i) {
    EXPECT_EQ(msgs[i].role(), expected[i].first) << i;
    EXPECT_EQ(msgs[i].content(), expected[i].second) << i;
  }
}

TEST(ClientCliTest, HealthExitCodes) {
  REQUIRE_ASTR_BINARY(astr);
  FakeServer fake;
  auto up = testing::RunCommand(astr + " health --server " + fake.address);
  EXPECT_EQ(up.exit_code, 0);
  EXPECT_EQ(up.out, "SERVING\n");
  fake.server->GetHealthCheckService()->SetServingStatus("astr.v1.Generate", false);
  auto down = testing::RunCommand(astr + " health --server " + fake.address +
                                  " --service astr.v1.Generate");
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_EQ(down.out, "NOT_SERVING\n");
  // A port with nothing behind it: --wait-s retries, then gives up with exit 1.
  const auto start = std::chrono::steady_clock::now();
  auto none = testing::RunCommand(astr + " health --server 127.0.0.1:1 --wait-s 0.5 2>/dev/null");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(ClientCliTest, InfoPrintsModelAndStatsOrTheError) {
  REQUIRE_ASTR_BINARY(astr);
  FakeServer fake;
  auto text = testing::RunCommand(astr + " info --server " + fake.address);
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("fake-model"), std::string::npos) << text.out;
  auto json = testing::RunCommand(astr + " info --server " + fake.address + " --json");
  EXPECT_EQ(json.exit_code, 0);
  EXPECT_NE(json.out.find("\"model_name\":\"fake-model\""), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"steps\":\"77\""), std::string::npos) << json.out;  // int64: string
  fake.service.fail_stats = true;
  auto failed = testing::RunCommand(astr + " info --server " + fake.address + " 2>&1");
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_NE(failed.out.find("RESOURCE_EXHAUSTED: stats are out of stock"), std::string::npos)
      << failed.out;
}

}  // namespace
}  // namespace astr::client
