// The CUDA backend's NCCL weight-group receiver (worker/backends/cuda/nccl_group.h) on the emulated
// device, against the emulated NCCL (lib/libastr_nccl_emu.so): a trainer thread is rank 0 (the
// library called directly, as the Python SDK does), receivers are the plugin's own code.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "worker/backends/cuda/nccl_api.h"
#include "worker/backends/cuda/nccl_group.h"

namespace astr::cuda {
namespace {

const std::string kLibrary = std::string(ASTR_BIN_DIR) + "/../lib/libastr_nccl_emu.so";

// Rank 0 through the library itself.
struct Trainer {
  void* handle = nullptr;
  nccl::GetUniqueIdFn get_unique_id = nullptr;
  nccl::CommInitRankFn init_rank = nullptr;
  nccl::BroadcastFn broadcast = nullptr;
  nccl::AllReduceFn all_reduce = nullptr;
  nccl::CommDestroyFn destroy = nullptr;

  Trainer() {
    handle = dlopen(kLibrary.c_str(), RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(handle, nullptr) << dlerror();
    get_unique_id = reinterpret_cast<nccl::GetUniqueIdFn>(dlsym(handle, "ncclGetUniqueId"));
    init_rank = reinterpret_cast<nccl::CommInitRankFn>(dlsym(handle, "ncclCommInitRank"));
    broadcast = reinterpret_cast<nccl::BroadcastFn>(dlsym(handle, "ncclBroadcast"));
    all_reduce = reinterpret_cast<nccl::AllReduceFn>(dlsym(handle, "ncclAllReduce"));
    destroy = reinterpret_cast<nccl::CommDestroyFn>(dlsym(handle, "ncclCommDestroy"));
  }
  std::string UniqueId() {
    nccl::UniqueId id;
    EXPECT_EQ(get_unique_id(&id), nccl::kSuccess);
    return std::string(id.internal, sizeof(id.internal));
  }
};

WeightGroupSpec Spec(const std::string& id, int rank, int world, int timeout_ms = 20000) {
  WeightGroupSpec spec;
  spec.name = "test";
  spec.unique_id = id;
  spec.rank = rank;
  spec.world_size = world;
  spec.timeout = std::chrono::milliseconds(timeout_ms);
  return spec;
}

class NcclGroupTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("ASTR_NCCL_LIBRARY", kLibrary.c_str(), 1); }
};

TEST_F(NcclGroupTest, WorkersReceiveWhatRankZeroBroadcasts) {
  Trainer trainer;
  const std::string id = trainer.UniqueId();
  std::vector<uint8_t> bucket(100000);
  std::iota(bucket.begin(), bucket.end(), 0);
  std::vector<float> tensor = {1.5f, -2.0f, 3.25f};
  std::thread rank0([&] {
    nccl::UniqueId uid;
    std::memcpy(uid.internal, id.data(), sizeof(uid.internal));
    nccl::Comm comm = nullptr;
    ASSERT_EQ(trainer.init_rank(&comm, 3, uid, 0), nccl::kSuccess);
    ASSERT_EQ(trainer.broadcast(bucket.data(), bucket.data(), bucket.size(), nccl::kUint8, 0, comm,
                                nullptr),
              nccl::kSuccess);
    ASSERT_EQ(trainer.broadcast(tensor.data(), tensor.data(), tensor.size(), nccl::kFloat32, 0,
                                comm, nullptr),
              nccl::kSuccess);
    trainer.destroy(comm);
  });
  std::vector<std::thread> workers;
  std::vector<std::vector<uint8_t>> got(2, std::vector<uint8_t>(bucket.size()));
  std::vector<std::vector<float>> got_f(2, std::vector<float>(3));
  std::vector<std::string> described(2);
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      auto receiver = JoinNcclWeightGroup(Spec(id, w + 1, 3));
      ASSERT_TRUE(receiver.ok()) << receiver.status().message();
      described[static_cast<size_t>(w)] = (*receiver)->describe();
      ASSERT_TRUE((*receiver)->Receive(got[static_cast<size_t>(w)], BroadcastType::kBytes).ok());
      auto* f = reinterpret_cast<uint8_t*>(got_f[static_cast<size_t>(w)].data());
      Status s = (*receiver)->Receive(std::span<uint8_t>(f, 12), BroadcastType::kF32);
      ASSERT_TRUE(s.ok()) << s.message();
      (*receiver)->ReleaseBuffer();
      EXPECT_TRUE((*receiver)->usable());
    });
  }
  for (auto& t : workers) t.join();
  rank0.join();
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(got[static_cast<size_t>(w)], bucket);
    EXPECT_EQ(got_f[static_cast<size_t>(w)], tensor);
    EXPECT_NE(described[static_cast<size_t>(w)].find("emulated NCCL"), std::string::npos);
  }
}

// vLLM's trainer (PyNcclCommunicator) all-reduces one float32 right after ncclCommInitRank: the
// workers take part when the group asks for it, adding their zero, then receive as usual.
TEST_F(NcclGroupTest, WorkersTakePartInTheWarmupAllReduce) {
  Trainer trainer;
  ASSERT_NE(trainer.all_reduce, nullptr);
  const std::string id = trainer.UniqueId();
  float warm[2] = {2.5f, -1.0f};  // the emulation sums what rank 0 gives with the workers' zeros
  std::vector<uint8_t> bucket = {1, 2, 3, 4, 5};
  std::thread rank0([&] {
    nccl::UniqueId uid;
    std::memcpy(uid.internal, id.data(), sizeof(uid.internal));
    nccl::Comm comm = nullptr;
    ASSERT_EQ(trainer.init_rank(&comm, 3, uid, 0), nccl::kSuccess);
    ASSERT_EQ(trainer.all_reduce(warm, warm, 1, nccl::kFloat32, nccl::kSum, comm, nullptr),
              nccl::kSuccess);
    ASSERT_EQ(trainer.broadcast(bucket.data(), bucket.data(), bucket.size(), nccl::kUint8, 0, comm,
                                nullptr),
              nccl::kSuccess);
    trainer.destroy(comm);
  });
  std::vector<std::thread> workers;
  std::vector<std::vector<uint8_t>> got(2, std::vector<uint8_t>(bucket.size()));
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      WeightGroupSpec spec = Spec(id, w + 1, 3);
      spec.warmup_all_reduce = true;
      auto receiver = JoinNcclWeightGroup(spec);
      ASSERT_TRUE(receiver.ok()) << receiver.status().message();
      Status s = (*receiver)->Receive(got[static_cast<size_t>(w)], BroadcastType::kBytes);
      ASSERT_TRUE(s.ok()) << s.message();
    });
  }
  for (auto& t : workers) t.join();
  rank0.join();
  EXPECT_EQ(warm[0], 2.5f);
  EXPECT_EQ(warm[1], -1.0f);  // one element was reduced, the next left alone
  for (const auto& g : got) EXPECT_EQ(g, bucket);
}

// A trainer that joins but never makes the warmup all-reduce: the join fails at the timeout.
TEST_F(NcclGroupTest, AMissingWarmupFailsTheJoinAtTheTimeout) {
  Trainer trainer;
  const std::string id = trainer.UniqueId();
  nccl::Comm comm = nullptr;
  std::thread rank0([&] {
    nccl::UniqueId uid;
    std::memcpy(uid.internal, id.data(), sizeof(uid.internal));
    ASSERT_EQ(trainer.init_rank(&comm, 2, uid, 0), nccl::kSuccess);
  });
  WeightGroupSpec spec = Spec(id, 1, 2, 300);
  spec.warmup_all_reduce = true;
  auto receiver = JoinNcclWeightGroup(spec);
  rank0.join();
  ASSERT_FALSE(receiver.ok());
  EXPECT_EQ(receiver.status().code(), StatusCode::kDeadlineExceeded) << receiver.status().message();
  EXPECT_NE(std::string(receiver.status().message()).find("warmup all-reduce"), std::string::npos)
      << receiver.status().message();
  trainer.destroy(comm);
}

TEST_F(NcclGroupTest, AStalledTrainerTimesOutAndTheGroupIsAborted) {
  Trainer trainer;
  const std::string id = trainer.UniqueId();
  nccl::Comm comm = nullptr;
  std::thread rank0([&] {
    nccl::UniqueId uid;
    std::memcpy(uid.internal, id.data(), sizeof(uid.internal));
    ASSERT_EQ(trainer.init_rank(&comm, 2, uid, 0), nccl::kSuccess);
  });
  auto receiver = JoinNcclWeightGroup(Spec(id, 1, 2, 300));
  rank0.join();
  ASSERT_TRUE(receiver.ok()) << receiver.status().message();
  std::vector<uint8_t> out(64);
  const auto start = std::chrono::steady_clock::now();
  Status s = (*receiver)->Receive(out, BroadcastType::kBytes);  // rank 0 never sends
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_FALSE((*receiver)->usable());
  EXPECT_EQ((*receiver)->Receive(out, BroadcastType::kBytes).code(),
            StatusCode::kFailedPrecondition);
  trainer.destroy(comm);
}

TEST_F(NcclGroupTest, ASizeRankZeroDoesNotSendFailsInsteadOfHanging) {
  Trainer trainer;
  const std::string id = trainer.UniqueId();
  std::vector<uint8_t> sent(100, 7);
  std::thread rank0([&] {
    nccl::UniqueId uid;
    std::memcpy(uid.internal, id.data(), sizeof(uid.internal));
    nccl::Comm comm = nullptr;
    ASSERT_EQ(trainer.init_rank(&comm, 2, uid, 0), nccl::kSuccess);
    trainer.broadcast(sent.data(), sent.data(), sent.size(), nccl::kUint8, 0, comm, nullptr);
    trainer.destroy(comm);
  });
  auto receiver = JoinNcclWeightGroup(Spec(id, 1, 2));
  ASSERT_TRUE(receiver.ok()) << receiver.status().message();
  std::vector<uint8_t> out(200);
  Status s = (*receiver)->Receive(out, BroadcastType::kBytes);
  rank0.join();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("of 100 bytes, this rank expects 200"), std::string::npos)
      << s.message();
  EXPECT_FALSE((*receiver)->usable());
}

TEST_F(NcclGroupTest, AJoinNobodyAnswersFailsAfterTheTimeout) {
  Trainer trainer;
  const std::string id = trainer.UniqueId();  // rank 0 never initializes
  const auto start = std::chrono::steady_clock::now();
  auto receiver = JoinNcclWeightGroup(Spec(id, 1, 2, 500));
  EXPECT_EQ(receiver.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(receiver.status().message().find("not every rank joined within 500 ms"),
            std::string::npos)
      << receiver.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST_F(NcclGroupTest, BadSpecsAreRefusedBeforeLoadingAnything) {
  EXPECT_EQ(JoinNcclWeightGroup(Spec("short", 1, 2)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(JoinNcclWeightGroup(Spec(std::string(128, 'x'), 0, 2)).status().code(),
            StatusCode::kInvalidArgument);
}

// Separate process per test (gtest_discover_tests): the library is not loaded yet here.
TEST(NcclGroupLoadTest, AMissingLibraryIsAFailedPreconditionNamingIt) {
  setenv("ASTR_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  auto receiver = JoinNcclWeightGroup(Spec(std::string(128, 'x'), 1, 2));
  EXPECT_EQ(receiver.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(receiver.status().message().find("/nonexistent/libnccl.so.2"), std::string::npos);
  EXPECT_NE(receiver.status().message().find("ASTR_NCCL_LIBRARY"), std::string::npos);
}

}  // namespace
}  // namespace astr::cuda
