// `astr admin <verb>` (the built binary) against an in-process fake astr.v1.Admin service that
// records every call: the bearer token, what each verb sends (the streamed manifest and buckets of
// update-weights --from-safetensors checked against a safetensors checkpoint written here byte by
// byte, with XXH64 computed here), what it prints, and its errors and exit codes.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "astr/v1/admin.grpc.pb.h"
#include "tests/support/test_util.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace astr {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr char kToken[] = "s3cret-token";
constexpr int64_t kMiB = 1 << 20;

// One call the fake received.
struct Call {
  std::string method;
  std::string authorization;  // the metadata value, "" when absent
};

class FakeAdmin final : public v1::Admin::Service {
 public:
  grpc::Status UpdateWeights(grpc::ServerContext* ctx,
                             grpc::ServerReader<v1::UpdateWeightsRequest>* reader,
                             v1::UpdateWeightsResponse* response) override {
    if (auto refused = Accept(ctx, "UpdateWeights")) return *refused;
    std::vector<v1::UpdateWeightsRequest> messages;
    v1::UpdateWeightsRequest m;
    int64_t bytes = 0;
    while (reader->Read(&m)) {
      for (const auto& c : m.chunks()) bytes += static_cast<int64_t>(c.data().size());
      messages.push_back(m);
    }
    response->set_version(7);
    response->set_label(messages.empty() ? "" : messages[0].manifest().label());
    response->set_tensors(messages.empty() ? 0 : messages[0].manifest().tensors_size());
    response->set_bytes(bytes);
    response->set_stage_ns(12'500'000);
    response->set_commit_ns(3'000'000);
    response->set_workers(2);
    std::lock_guard<std::mutex> lock(mu_);
    update_messages_ = std::move(messages);
    return grpc::Status::OK;
  }

  grpc::Status UpdateWeightsFromDisk(grpc::ServerContext* ctx,
                                     const v1::UpdateWeightsFromDiskRequest* request,
                                     v1::UpdateWeightsResponse* response) override {
    if (auto refused = Accept(ctx, "UpdateWeightsFromDisk")) return *refused;
    std::lock_guard<std::mutex> lock(mu_);
    from_disk_ = *request;
    response->set_version(3);
    response->set_label(request->label());
    response->set_tensors(11);
    return grpc::Status::OK;
  }

  grpc::Status GetWeightVersion(grpc::ServerContext* ctx, const v1::GetWeightVersionRequest*,
                                v1::GetWeightVersionResponse* response) override {
    if (auto refused = Accept(ctx, "GetWeightVersion")) return *refused;
    response->set_version(5);
    response->set_label("step-40");
    response->set_committed_unix_ns(1764600000'123'000'000);  // 2025-12-01 14:40:00.123 UTC
    response->set_paused(v1::PAUSE_MODE_DRAIN);
    return grpc::Status::OK;
  }

  grpc::Status GetWeightsChecksum(grpc::ServerContext* ctx,
                                  const v1::GetWeightsChecksumRequest* request,
                                  v1::GetWeightsChecksumResponse* response) override {
    if (auto refused = Accept(ctx, "GetWeightsChecksum")) return *refused;
    {
      std::lock_guard<std::mutex> lock(mu_);
      checksum_request_ = *request;
    }
    response->set_version(5);
    v1::TensorChecksum* a = response->add_tensors();
    a->set_name("model.norm.weight");
    a->set_source("pushed");
    a->set_dtype("bf16");
    a->add_shape(512);
    a->set_xxh64(0x0123456789abcdefULL);
    a->set_consistent(true);
    v1::TensorChecksum* b = response->add_tensors();
    b->set_name("lm_head.weight");
    b->set_source("file");
    b->set_dtype("f32");
    b->add_shape(3);
    b->add_shape(5);
    b->set_xxh64(0xfedcba9876543210ULL);
    b->set_consistent(false);
    b->add_per_worker(0xfedcba9876543210ULL);
    b->add_per_worker(0x00000000000000ffULL);
    return grpc::Status::OK;
  }

  grpc::Status Pause(grpc::ServerContext* ctx, const v1::PauseRequest* request,
                     v1::PauseResponse* response) override {
    if (auto refused = Accept(ctx, "Pause")) return *refused;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pause_modes_.push_back(request->mode());
    }
    response->set_mode(request->mode());
    response->set_frozen(2);
    response->set_queued(4);
    response->add_request_ids("req-a");
    response->add_request_ids("req-b");
    return grpc::Status::OK;
  }

  grpc::Status Resume(grpc::ServerContext* ctx, const v1::ResumeRequest*,
                      v1::ResumeResponse* response) override {
    if (auto refused = Accept(ctx, "Resume")) return *refused;
    response->set_was_paused(true);
    response->set_paused_ns(1'500'000'000);
    return grpc::Status::OK;
  }

  grpc::Status FlushCache(grpc::ServerContext* ctx, const v1::FlushCacheRequest*,
                          v1::FlushCacheResponse* response) override {
    if (auto refused = Accept(ctx, "FlushCache")) return *refused;
    response->set_pages_freed(321);
    return grpc::Status::OK;
  }

  // Every later call answers `status` (after being recorded).
  void FailWith(grpc::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_with_ = std::move(status);
  }

  std::vector<Call> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::vector<v1::UpdateWeightsRequest> update_messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return update_messages_;
  }
  v1::UpdateWeightsFromDiskRequest from_disk() {
    std::lock_guard<std::mutex> lock(mu_);
    return from_disk_;
  }
  v1::GetWeightsChecksumRequest checksum_request() {
    std::lock_guard<std::mutex> lock(mu_);
    return checksum_request_;
  }
  std::vector<v1::PauseMode> pause_modes() {
    std::lock_guard<std::mutex> lock(mu_);
    return pause_modes_;
  }

 private:
  // Records the call; refuses it as admin.proto documents (UNAUTHENTICATED without the metadata,
  // PERMISSION_DENIED with another token), or with the status given to FailWith.
  std::optional<grpc::Status> Accept(grpc::ServerContext* ctx, const char* method) {
    std::string authorization;
    const auto& metadata = ctx->client_metadata();
    if (auto it = metadata.find("authorization"); it != metadata.end()) {
      authorization.assign(it->second.data(), it->second.size());
    }
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back({method, authorization});
    if (authorization.empty()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing admin token");
    }
    if (authorization != std::string("Bearer ") + kToken) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "wrong admin token");
    }
    return fail_with_;
  }

  std::mutex mu_;
  std::vector<Call> calls_;
  std::optional<grpc::Status> fail_with_;
  std::vector<v1::UpdateWeightsRequest> update_messages_;
  v1::UpdateWeightsFromDiskRequest from_disk_;
  v1::GetWeightsChecksumRequest checksum_request_;
  std::vector<v1::PauseMode> pause_modes_;
};

struct FakeServer {
  FakeServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.SetMaxReceiveMessageSize(64 << 20);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~FakeServer() { server->Shutdown(std::chrono::system_clock::now() + 1s); }

  FakeAdmin service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A tensor as the test writes it.
struct TestTensor {
  std::string name;
  std::string file_dtype;  // as safetensors stores it: "F32", "BF16", ...
  std::string spec_dtype;  // what the manifest must say
  std::vector<int64_t> shape;
  std::string bytes;
};

int64_t ElementBytes(const std::string& file_dtype) {
  if (file_dtype == "F32" || file_dtype == "I32") return 4;
  if (file_dtype == "I64") return 8;
  return 2;  // F16, BF16
}

TestTensor MakeTensor(const std::string& name, const std::string& file_dtype,
                      const std::string& spec_dtype, std::vector<int64_t> shape, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  TestTensor t{name, file_dtype, spec_dtype, std::move(shape), std::string()};
  t.bytes.resize(static_cast<size_t>(n * ElementBytes(file_dtype)));
  uint32_t x = seed;
  for (char& c : t.bytes) {
    x = x * 1664525u + 1013904223u;  // any byte pattern will do: the bytes are only compared
    c = static_cast<char>(x >> 24);
  }
  return t;
}

// The safetensors layout (u64 LE header size, JSON header, data), written by hand so that the
// expected values come from the format, not from astr's reader or writer.
void WriteSafetensors(const std::string& path, const std::vector<TestTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const TestTensor& t : tensors) {
    header[t.name] = {{"dtype", t.file_dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  const uint64_t size = text.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>(size >> (8 * i));
  WriteFile(path, file + text + data);
}

// A sharded checkpoint: two shards and model.safetensors.index.json.
void WriteShardedCheckpoint(const std::string& dir, const std::vector<TestTensor>& shard1,
                            const std::vector<TestTensor>& shard2) {
  WriteSafetensors(dir + "/model-00001-of-00002.safetensors", shard1);
  WriteSafetensors(dir + "/model-00002-of-00002.safetensors", shard2);
  nlohmann::json index = {{"metadata", nlohmann::json::object()},
                          {"weight_map", nlohmann::json::object()}};
  for (const auto& t : shard1) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : shard2) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  WriteFile(dir + "/model.safetensors.index.json", index.dump());
}

std::string Astr() {
  const std::string path = testing::BinDir() + "/astr";
  return fs::exists(path) ? path : "";
}

#define REQUIRE_ASTR_BINARY()      \
  const std::string astr = Astr(); \
  if (astr.empty()) GTEST_SKIP() << "astr binary not built in " << testing::BinDir()

struct Output {
  int exit_code = -1;
  std::string out, err;
};

// Runs `astr admin <args>` with stdout and stderr kept apart.
Output Admin(const std::string& astr, const std::string& args) {
  const std::string err_path = testing::TempDir("admin_cli_stderr") + "/stderr";
  auto r = testing::RunCommand(astr + " admin " + args + " 2>" + err_path);
  std::ifstream in(err_path);
  std::string err((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return {r.exit_code, r.out, err};
}

class AdminCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir("admin_cli");
    token_file_ = dir_ + "/token";
    WriteFile(token_file_, std::string("  ") + kToken + "\n");  // whitespace is ignored
  }
  // --server and --token-file of the fake.
  std::string Common() const {
    return "--server " + fake_.address + " --token-file " + token_file_;
  }

  FakeServer fake_;
  std::string dir_;
  std::string token_file_;
};

TEST_F(AdminCliTest, VersionSendsTheBearerTokenAndPrintsTheVersion) {
  REQUIRE_ASTR_BINARY();
  auto r = Admin(astr, "version " + Common());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto calls = fake_.service.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].method, "GetWeightVersion");
  EXPECT_EQ(calls[0].authorization, "Bearer s3cret-token");
  EXPECT_NE(r.out.find("5 (\"step-40\")"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2025-12-01 14:40:00.123 UTC"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("drain"), std::string::npos) << r.out;

  auto json = Admin(astr, "version --json " + Common());
  ASSERT_EQ(json.exit_code, 0) << json.err;
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["version"], "5");  // proto3 JSON writes int64 as a string
  EXPECT_EQ(j["label"], "step-40");
  EXPECT_EQ(j["paused"], "PAUSE_MODE_DRAIN");
}

TEST_F(AdminCliTest, WrongTokenIsThePermissionErrorOfTheServer) {
  REQUIRE_ASTR_BINARY();
  const std::string wrong = dir_ + "/wrong";
  WriteFile(wrong, "not-the-token");
  auto r = Admin(astr, "version --server " + fake_.address + " --token-file " + wrong);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "astr admin version: PERMISSION_DENIED: wrong admin token\n");
  ASSERT_EQ(fake_.service.calls().size(), 1u);
  EXPECT_EQ(fake_.service.calls()[0].authorization, "Bearer not-the-token");
}

TEST_F(AdminCliTest, MissingOrUnusableTokenFileIsAnErrorWithoutACall) {
  REQUIRE_ASTR_BINARY();
  // No --token-file at all: a usage error.
  auto none = Admin(astr, "version --server " + fake_.address);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("--token-file"), std::string::npos) << none.err;
  // A file that is not there.
  const std::string missing = dir_ + "/no-such-file";
  auto absent = Admin(astr, "version --server " + fake_.address + " --token-file " + missing);
  EXPECT_EQ(absent.exit_code, 1);
  EXPECT_NE(absent.err.find("--token-file " + missing), std::string::npos) << absent.err;
  // A file with only whitespace, and one whose token gRPC metadata cannot carry.
  const std::string blank = dir_ + "/blank";
  WriteFile(blank, " \n\t\n");
  auto empty = Admin(astr, "resume --server " + fake_.address + " --token-file " + blank);
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_NE(empty.err.find("--token-file " + blank), std::string::npos) << empty.err;
  const std::string spaced = dir_ + "/spaced";
  WriteFile(spaced, "two words\n");
  auto bad = Admin(astr, "resume --server " + fake_.address + " --token-file " + spaced);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--token-file " + spaced), std::string::npos) << bad.err;
  EXPECT_TRUE(fake_.service.calls().empty());
}

TEST_F(AdminCliTest, PauseMapsEachModeToItsEnum) {
  REQUIRE_ASTR_BINARY();
  for (const char* mode : {"abort", "drain", "keep"}) {
    auto r = Admin(astr, std::string("pause --mode ") + mode + " " + Common());
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_EQ(fake_.service.pause_modes(),
            (std::vector<v1::PauseMode>{v1::PAUSE_MODE_ABORT, v1::PAUSE_MODE_DRAIN,
                                        v1::PAUSE_MODE_KEEP}));
  auto r = Admin(astr, "pause --mode keep " + Common());
  EXPECT_NE(r.out.find("2 running requests frozen"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4 queued"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("req-a, req-b"), std::string::npos) << r.out;
}

TEST_F(AdminCliTest, BadOrMissingPauseModeIsAUsageErrorNamingTheFlag) {
  REQUIRE_ASTR_BINARY();
  auto bad = Admin(astr, "pause --mode sleep " + Common());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--mode"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("sleep"), std::string::npos) << bad.err;
  auto missing = Admin(astr, "pause " + Common());
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("--mode"), std::string::npos) << missing.err;
  EXPECT_TRUE(fake_.service.calls().empty());
}

TEST_F(AdminCliTest, ResumeAndFlushCachePrintTheResponse) {
  REQUIRE_ASTR_BINARY();
  auto resume = Admin(astr, "resume " + Common());
  EXPECT_EQ(resume.exit_code, 0) << resume.err;
  EXPECT_NE(resume.out.find("1500.0 ms"), std::string::npos) << resume.out;
  auto flush = Admin(astr, "flush-cache " + Common());
  EXPECT_EQ(flush.exit_code, 0) << flush.err;
  EXPECT_NE(flush.out.find("321 pages"), std::string::npos) << flush.out;
  const auto calls = fake_.service.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].method, "Resume");
  EXPECT_EQ(calls[1].method, "FlushCache");
}

TEST_F(AdminCliTest, ServerErrorIsPrintedWithItsCodeAndExitsOne) {
  REQUIRE_ASTR_BINARY();
  fake_.service.FailWith(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                      "requests are running; pause generation first"));
  auto r = Admin(astr, "flush-cache " + Common());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "astr admin flush-cache: FAILED_PRECONDITION: requests are running; pause "
            "generation first\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(AdminCliTest, ChecksumSendsTheNamesAndFlagsInconsistentWorkers) {
  REQUIRE_ASTR_BINARY();
  auto r = Admin(astr, "checksum --names model.norm.weight,lm_head.weight " + Common());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto request = fake_.service.checksum_request();
  ASSERT_EQ(request.names_size(), 2);
  EXPECT_EQ(request.names(0), "model.norm.weight");
  EXPECT_EQ(request.names(1), "lm_head.weight");
  // One line per tensor with its source, dtype, shape and hash.
  std::vector<std::string> lines;
  for (size_t begin = 0, end; begin < r.out.size(); begin = end + 1) {
    end = r.out.find('\n', begin);
    if (end == std::string::npos) end = r.out.size();
    lines.push_back(r.out.substr(begin, end - begin));
  }
  auto line_of = [&](const std::string& name) -> std::string {
    for (const auto& l : lines) {
      if (l.rfind(name + " ", 0) == 0) return l;
    }
    return "";
  };
  const std::string norm = line_of("model.norm.weight"), head = line_of("lm_head.weight");
  for (const char* part : {"pushed", "bf16", "[512]", "0123456789abcdef"}) {
    EXPECT_NE(norm.find(part), std::string::npos) << part << " in: " << norm;
  }
  EXPECT_EQ(norm.find("INCONSISTENT"), std::string::npos) << norm;
  for (const char* part :
       {"file", "f32", "[3, 5]", "fedcba9876543210", "INCONSISTENT", "00000000000000ff"}) {
    EXPECT_NE(head.find(part), std::string::npos) << part << " in: " << head;
  }
  EXPECT_NE(r.err.find("1 of 2 tensors"), std::string::npos) << r.err;

  // Without --names: every tensor (an empty list).
  ASSERT_EQ(Admin(astr, "checksum " + Common()).exit_code, 0);
  EXPECT_EQ(fake_.service.checksum_request().names_size(), 0);
}

TEST_F(AdminCliTest, UpdateWeightsFromDiskSendsThePathAndLabel) {
  REQUIRE_ASTR_BINARY();
  auto r = Admin(astr, "update-weights --from-disk /models/next --label step-9 " + Common());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(fake_.service.from_disk().path(), "/models/next");
  EXPECT_EQ(fake_.service.from_disk().label(), "step-9");
  EXPECT_NE(r.out.find("3 (\"step-9\")"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("11"), std::string::npos) << r.out;
}

TEST_F(AdminCliTest, UpdateWeightsNeedsExactlyOneSource) {
  REQUIRE_ASTR_BINARY();
  EXPECT_EQ(Admin(astr, "update-weights " + Common()).exit_code, 2);
  EXPECT_EQ(Admin(astr, "update-weights --from-disk a --from-safetensors b " + Common()).exit_code,
            2);
  auto bucket = Admin(astr, "update-weights --from-disk a --bucket-mb 0 " + Common());
  EXPECT_EQ(bucket.exit_code, 2);
  EXPECT_NE(bucket.err.find("--bucket-mb"), std::string::npos) << bucket.err;
  auto direct = Admin(astr, "update-weights --from-disk a --direct " + Common());
  EXPECT_EQ(direct.exit_code, 2);
  EXPECT_NE(direct.err.find("--direct needs --from-safetensors"), std::string::npos) << direct.err;
  EXPECT_TRUE(fake_.service.calls().empty());
}

TEST_F(AdminCliTest, UpdateWeightsStreamsTheCheckpointInBuckets) {
  REQUIRE_ASTR_BINARY();
  // 2.6 MiB in two shards, in 1 MiB buckets: tensors straddle buckets and share them.
  const std::vector<TestTensor> shard1 = {
      MakeTensor("model.embed_tokens.weight", "F32", "f32", {700, 512}, 1),
      MakeTensor("model.norm.weight", "BF16", "bf16", {512}, 2)};
  const std::vector<TestTensor> shard2 = {
      MakeTensor("model.layers.0.mlp.down_proj.weight", "F16", "f16", {512, 1100}, 3),
      MakeTensor("lm_head.weight", "F32", "f32", {3, 5}, 4)};
  const std::string ckpt = dir_ + "/ckpt";
  fs::create_directories(ckpt);
  WriteShardedCheckpoint(ckpt, shard1, shard2);
  std::map<std::string, TestTensor> expected;
  int64_t total = 0;
  for (const auto* shard : {&shard1, &shard2}) {
    for (const auto& t : *shard) {
      expected[t.name] = t;
      total += static_cast<int64_t>(t.bytes.size());
    }
  }

  auto r = Admin(astr, "update-weights --from-safetensors " + ckpt +
                           " --label step-3 --bucket-mb 1 " + Common());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("7 (\"step-3\")"), std::string::npos) << r.out;
  const auto messages = fake_.service.update_messages();
  ASSERT_GE(messages.size(), 2u);

  // The manifest: every tensor of the file, once, as stored, with the XXH64 of its bytes.
  const v1::WeightManifest& manifest = messages[0].manifest();
  EXPECT_TRUE(messages[0].has_manifest());
  EXPECT_EQ(messages[0].chunks_size(), 0);
  EXPECT_EQ(manifest.label(), "step-3");
  ASSERT_EQ(manifest.tensors_size(), static_cast<int>(expected.size()));
  std::map<std::string, int> index_of;
  for (int i = 0; i < manifest.tensors_size(); ++i) {
    const v1::TensorSpec& spec = manifest.tensors(i);
    ASSERT_TRUE(expected.count(spec.name())) << spec.name();
    EXPECT_TRUE(index_of.emplace(spec.name(), i).second) << spec.name() << " listed twice";
    const TestTensor& t = expected[spec.name()];
    EXPECT_EQ(spec.dtype(), t.spec_dtype) << spec.name();
    EXPECT_EQ(std::vector<int64_t>(spec.shape().begin(), spec.shape().end()), t.shape)
        << spec.name();
    ASSERT_TRUE(spec.has_xxh64()) << spec.name();
    EXPECT_EQ(spec.xxh64(), XXH64(t.bytes.data(), t.bytes.size(), 0)) << spec.name();
  }

  // The buckets: each at most 1 MiB of data (+ the chunks' few header bytes), all but the last
  // full; each tensor's chunks in order and adding up to exactly its bytes.
  constexpr size_t kChunkHeaderBytes = 32;
  std::vector<std::string> received(manifest.tensors_size());
  for (size_t m = 1; m < messages.size(); ++m) {
    EXPECT_FALSE(messages[m].has_manifest()) << "message " << m;
    int64_t data_bytes = 0;
    for (const v1::WeightChunk& c : messages[m].chunks()) {
      ASSERT_GE(c.tensor(), 0);
      ASSERT_LT(c.tensor(), manifest.tensors_size());
      EXPECT_EQ(c.offset(), static_cast<int64_t>(received[c.tensor()].size()))
          << manifest.tensors(c.tensor()).name() << " in message " << m;
      received[c.tensor()] += c.data();
      data_bytes += static_cast<int64_t>(c.data().size());
    }
    EXPECT_LE(data_bytes, kMiB) << "message " << m;
    EXPECT_LE(messages[m].ByteSizeLong(), kMiB + kChunkHeaderBytes * messages[m].chunks_size());
  }
  EXPECT_EQ(static_cast<int64_t>(messages.size()) - 1, (total + kMiB - 1) / kMiB);
  for (const auto& [name, i] : index_of) {
    EXPECT_TRUE(received[i] == expected[name].bytes)
        << name << ": got " << received[i].size() << " bytes, want " << expected[name].bytes.size();
  }

  auto json = Admin(astr, "update-weights --json --from-safetensors " + ckpt + " " + Common());
  ASSERT_EQ(json.exit_code, 0) << json.err;
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["version"], "7");
  EXPECT_EQ(j["tensors"], 4);
  EXPECT_EQ(j["bytes"], std::to_string(total));
}

TEST_F(AdminCliTest, UpdateWeightsRefusedByTheServerPrintsItsStatus) {
  REQUIRE_ASTR_BINARY();
  const std::string ckpt = dir_ + "/refused";
  fs::create_directories(ckpt);
  // Several buckets, so that the refusal comes while the client still has messages to write.
  WriteSafetensors(ckpt + "/model.safetensors",
                   {MakeTensor("model.embed_tokens.weight", "F32", "f32", {1024, 1024}, 5)});
  fake_.service.FailWith(
      grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "shape mismatch for lm_head.weight"));
  auto r = Admin(astr, "update-weights --from-safetensors " + ckpt + " --bucket-mb 1 " + Common());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("astr admin update-weights: FAILED_PRECONDITION: shape mismatch for "
                       "lm_head.weight\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(AdminCliTest, UpdateWeightsRefusesOtherDtypesNamingTheTensor) {
  REQUIRE_ASTR_BINARY();
  const std::string ckpt = dir_ + "/ints";
  fs::create_directories(ckpt);
  WriteSafetensors(ckpt + "/model.safetensors",
                   {MakeTensor("model.norm.weight", "F32", "f32", {4}, 1),
                    MakeTensor("model.position_ids", "I64", "", {8}, 2)});
  auto r = Admin(astr, "update-weights --from-safetensors " + ckpt + " " + Common());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model.position_ids"), std::string::npos) << r.err;
  EXPECT_TRUE(fake_.service.calls().empty());
}

TEST(AdminCliHelpTest, EveryVerbHasHelp) {
  REQUIRE_ASTR_BINARY();
  auto top = Admin(astr, "--help");
  EXPECT_EQ(top.exit_code, 0);
  for (const char* verb :
       {"update-weights", "pause", "resume", "version", "checksum", "flush-cache"}) {
    EXPECT_NE(top.out.find(std::string("  ") + verb + " "), std::string::npos) << verb;
    auto help = Admin(astr, std::string(verb) + " --help");
    EXPECT_EQ(help.exit_code, 0) << verb;
    EXPECT_NE(help.out.find("--token-file"), std::string::npos) << verb;
    EXPECT_NE(help.out.find("--timeout-s"), std::string::npos) << verb;
  }
  EXPECT_EQ(Admin(astr, "").exit_code, 2);
  EXPECT_EQ(Admin(astr, "reload").exit_code, 2);
}

}  // namespace
}  // namespace astr
