#include "worker/backends/cuda/nccl_group.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "common/base/logging.h"
#include "worker/backends/cuda/device_memory.h"
#include "worker/backends/cuda/nccl_api.h"

namespace astr::cuda {
namespace {

using Clock = std::chrono::steady_clock;

struct NcclLibrary {
  std::string path;
  std::string describe;
  nccl::GetVersionFn get_version = nullptr;
  nccl::CommInitRankFn init_rank = nullptr;
  nccl::BroadcastFn broadcast = nullptr;
  nccl::AllReduceFn all_reduce = nullptr;  // loaded; needed only for warmup_all_reduce
  nccl::CommAbortFn abort = nullptr;
  nccl::CommDestroyFn destroy = nullptr;
  nccl::CommGetAsyncErrorFn async_error = nullptr;
  nccl::GetErrorStringFn error_string = nullptr;
  nccl::GetLastErrorFn last_error = nullptr;  // optional (NCCL >= 2.13)

  std::string Error(int result, nccl::Comm comm) const {
    std::string out = error_string != nullptr ? error_string(result) : "error";
    out += " (" + std::to_string(result) + ")";
    if (last_error != nullptr) {
      const char* last = last_error(comm);
      if (last != nullptr && *last != '\0') out += ": " + std::string(last);
    }
    return out;
  }
};

// Where this plugin's file lies, for the emulated NCCL beside the emulated plugin.
std::string PluginDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&JoinNcclWeightGroup), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

std::string DefaultPath() {
  if (const char* env = std::getenv("ASTR_NCCL_LIBRARY"); env != nullptr && *env != '\0') {
    return env;
  }
#if defined(ASTR_CUDA_EMU)
  return PluginDir() + "libastr_nccl_emu.so";
#else
  return "libnccl.so.2";
#endif
}

// Loaded once per process, on the first group.
StatusOr<const NcclLibrary*> Load() {
  static std::mutex mu;
  static std::unique_ptr<NcclLibrary> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded != nullptr) return loaded.get();
  auto lib = std::make_unique<NcclLibrary>();
  lib->path = DefaultPath();
  void* handle = dlopen(lib->path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return FailedPreconditionError("cannot load NCCL from " + lib->path + " (" +
                                   (why != nullptr ? why : "dlopen failed") +
                                   "); set ASTR_NCCL_LIBRARY to libnccl.so.2's path");
  }
  const auto need = [&](const char* name, auto* fn) -> Status {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(handle, name));
    if (*fn == nullptr) return FailedPreconditionError(lib->path + " has no " + name);
    return OkStatus();
  };
  ASTR_RETURN_IF_ERROR(need("ncclGetVersion", &lib->get_version));
  ASTR_RETURN_IF_ERROR(need("ncclCommInitRank", &lib->init_rank));
  ASTR_RETURN_IF_ERROR(need("ncclBroadcast", &lib->broadcast));
  ASTR_RETURN_IF_ERROR(need("ncclCommAbort", &lib->abort));
  ASTR_RETURN_IF_ERROR(need("ncclCommDestroy", &lib->destroy));
  ASTR_RETURN_IF_ERROR(need("ncclCommGetAsyncError", &lib->async_error));
  ASTR_RETURN_IF_ERROR(need("ncclGetErrorString", &lib->error_string));
  lib->last_error = reinterpret_cast<nccl::GetLastErrorFn>(dlsym(handle, "ncclGetLastError"));
  lib->all_reduce = reinterpret_cast<nccl::AllReduceFn>(dlsym(handle, "ncclAllReduce"));
  int version = 0;
  lib->get_version(&version);
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9.
  const std::string v = std::to_string(version / 10000) + "." +
                        std::to_string(version / 100 % 100) + "." + std::to_string(version % 100);
  const bool emulated = dlsym(handle, "astr_nccl_emulated") != nullptr;
  lib->describe = (emulated ? "emulated NCCL (" : "NCCL " + v + " (") + lib->path + ")";
  LOG(INFO) << "weights: loaded " << lib->describe;
  loaded = std::move(lib);
  return loaded.get();
}

class NcclReceiver final : public WeightReceiver {
 public:
  NcclReceiver(const NcclLibrary* lib, WeightGroupSpec spec) : lib_(lib), spec_(std::move(spec)) {}
  ~NcclReceiver() override {
    if (comm_ != nullptr) lib_->destroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init() {
    ASTR_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                              "creating the weight-group stream");
    // ncclCommInitRank blocks until every rank joined and cannot be interrupted: it runs on its
    // own thread, and past the timeout the join fails here while that thread, once the call
    // returns, destroys what it made.
    struct Join {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false, abandoned = false;
      int result = nccl::kInternalError;
      nccl::Comm comm = nullptr;
      std::string error;
    };
    auto join = std::make_shared<Join>();
    const NcclLibrary* lib = lib_;
    nccl::UniqueId id;
    std::memcpy(id.internal, spec_.unique_id.data(), sizeof(id.internal));
    const int world = spec_.world_size, rank = spec_.rank;
    std::thread([join, lib, id, world, rank] {
      nccl::Comm comm = nullptr;
      const int r = lib->init_rank(&comm, world, id, rank);
      const std::string error = r == nccl::kSuccess ? "" : lib->Error(r, nullptr);
      std::lock_guard<std::mutex> lock(join->mu);
      if (join->abandoned) {
        if (comm != nullptr) lib->destroy(comm);
        return;
      }
      join->done = true;
      join->result = r;
      join->comm = comm;
      join->error = error;
      join->cv.notify_all();
    }).detach();
    std::unique_lock<std::mutex> lock(join->mu);
    const std::string what = "joining NCCL group '" + spec_.name + "' as rank " +
                             std::to_string(rank) + " of " + std::to_string(world) + ": ";
    if (!join->cv.wait_for(lock, spec_.timeout, [&] { return join->done; })) {
      join->abandoned = true;
      return UnavailableError(what + "not every rank joined within " +
                              std::to_string(spec_.timeout.count()) + " ms");
    }
    if (join->result != nccl::kSuccess) return UnavailableError(what + join->error);
    comm_ = join->comm;
    if (spec_.warmup_all_reduce) {
      Status warm = Warmup();
      if (!warm.ok()) {
        if (comm_ != nullptr) lib_->abort(comm_);
        comm_ = nullptr;
        return warm;
      }
    }
    return OkStatus();
  }

  Status Receive(std::span<uint8_t> out, BroadcastType type) override {
    if (comm_ == nullptr) {
      return FailedPreconditionError("NCCL group '" + spec_.name +
                                     "' was aborted by an earlier failure: destroy and make it "
                                     "again");
    }
    if (out.empty()) return OkStatus();
    if (buffer_.bytes() < out.size()) {
      buffer_ = DeviceMemory();
      ASTR_ASSIGN_OR_RETURN(buffer_, DeviceAllocator::Allocate(out.size(), "the broadcast buffer"));
    }
    Status status = Broadcast(out, type);
    if (!status.ok()) {
      // comm_ is null when the watchdog aborted it already.
      if (comm_ != nullptr) lib_->abort(comm_);
      comm_ = nullptr;
      return status;
    }
    ASTR_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(out.data(), buffer_.get(), out.size(), cudaMemcpyDeviceToHost),
        "copying a broadcast to the host");
    return OkStatus();
  }

  void ReleaseBuffer() override { buffer_ = DeviceMemory(); }
  bool usable() const override { return comm_ != nullptr; }
  std::string describe() const override { return lib_->describe; }

 private:
  // vLLM's PyNcclCommunicator makes one all-reduce (sum) of one float32 right after joining; a
  // trainer that made its side with it waits for every rank to take part.
  Status Warmup() {
    const std::string what = "NCCL group '" + spec_.name + "': the warmup all-reduce: ";
    if (lib_->all_reduce == nullptr) {
      return FailedPreconditionError(what + lib_->path + " has no ncclAllReduce");
    }
    ASTR_ASSIGN_OR_RETURN(DeviceMemory one, DeviceAllocator::Allocate(sizeof(float), "the warmup"));
    ASTR_CUDA_RETURN_IF_ERROR(cudaMemset(one.get(), 0, sizeof(float)), "zeroing the warmup");
    ASTR_RETURN_IF_ERROR(Collective(what, [&] {
      return lib_->all_reduce(one.get(), one.get(), 1, nccl::kFloat32, nccl::kSum, comm_, stream_);
    }));
    return OkStatus();
  }

  // Enqueues the broadcast and waits for the stream.
  Status Broadcast(std::span<uint8_t> out, BroadcastType type) {
    const std::string what =
        "NCCL group '" + spec_.name + "': broadcast of " + std::to_string(out.size()) + " bytes: ";
    int datatype = nccl::kUint8;
    size_t item = 1;
    switch (type) {
      case BroadcastType::kBytes:
        break;
      case BroadcastType::kF32:
        datatype = nccl::kFloat32;
        item = 4;
        break;
      case BroadcastType::kF16:
        datatype = nccl::kFloat16;
        item = 2;
        break;
      case BroadcastType::kBF16:
        datatype = nccl::kBfloat16;
        item = 2;
        break;
    }
    if (out.size() % item != 0) {
      return InvalidArgumentError(what + "not a whole number of elements");
    }
    return Collective(what, [&] {
      return lib_->broadcast(buffer_.get(), buffer_.get(), out.size() / item, datatype, 0, comm_,
                             stream_);
    });
  }

  // Runs one collective `call` on the group's stream and waits for it (polling, so that an
  // asynchronous NCCL error ends the wait). The call itself may block (the emulated NCCL runs it
  // when called): a watchdog aborts the communicator if it outlives the deadline, which makes it
  // return. Once the watchdog fired, the communicator is gone and this thread must not touch it.
  template <typename Call>
  Status Collective(const std::string& what, const Call& call) {
    const auto deadline = Clock::now() + spec_.timeout;
    const auto timed_out = [&] {
      return DeadlineExceededError(what + "took over " + std::to_string(spec_.timeout.count()) +
                                   " ms (a trainer that died or stalls); the group was aborted");
    };
    int r = nccl::kSuccess;
    {
      std::mutex mu;
      std::condition_variable cv;
      bool returned = false, fired = false;
      std::thread watchdog([&] {
        std::unique_lock<std::mutex> lock(mu);
        if (!cv.wait_until(lock, deadline, [&] { return returned; })) {
          fired = true;
          lock.unlock();
          lib_->abort(comm_);
        }
      });
      r = call();
      {
        std::lock_guard<std::mutex> lock(mu);
        returned = true;
      }
      cv.notify_all();
      watchdog.join();
      if (fired) {
        comm_ = nullptr;
        return timed_out();
      }
    }
    if (r != nccl::kSuccess) return UnavailableError(what + lib_->Error(r, comm_));
    // libnccl enqueues and returns: wait for the stream here, polling so that an asynchronous
    // NCCL error or the deadline ends the wait (the caller then aborts the communicator).
    while (true) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return OkStatus();
      if (e != cudaErrorNotReady) return CudaStatus(e, what + "the stream failed");
      int async = nccl::kSuccess;
      lib_->async_error(comm_, &async);
      if (async != nccl::kSuccess && async != nccl::kInProgress) {
        return UnavailableError(what + lib_->Error(async, comm_));
      }
      if (Clock::now() >= deadline) return timed_out();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  const NcclLibrary* const lib_;
  const WeightGroupSpec spec_;
  nccl::Comm comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceMemory buffer_;
};

}  // namespace

StatusOr<std::unique_ptr<WeightReceiver>> JoinNcclWeightGroup(const WeightGroupSpec& spec) {
  if (spec.unique_id.size() != nccl::kUniqueIdBytes) {
    return InvalidArgumentError("nccl_unique_id: " + std::to_string(spec.unique_id.size()) +
                                " bytes, expected " + std::to_string(nccl::kUniqueIdBytes));
  }
  if (spec.world_size < 2 || spec.rank < 1 || spec.rank >= spec.world_size) {
    return InvalidArgumentError("rank " + std::to_string(spec.rank) + " of world size " +
                                std::to_string(spec.world_size) +
                                ": a worker's rank is 1 .. world_size - 1");
  }
  ASTR_ASSIGN_OR_RETURN(const NcclLibrary* lib, Load());
  auto receiver = std::make_unique<NcclReceiver>(lib, spec);
  ASTR_RETURN_IF_ERROR(receiver->Init());
  return std::unique_ptr<WeightReceiver>(std::move(receiver));
}

}  // namespace astr::cuda
