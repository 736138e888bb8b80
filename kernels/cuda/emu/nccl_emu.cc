// The emulated NCCL (docs/cuda.md "The emulated NCCL"): the subset of libnccl that astr's weight
// sync uses, over loopback TCP, so that a trainer process and emulated CUDA workers make a real
// group in CI. Built as lib/libastr_nccl_emu.so; the CUDA plugin and the Python SDK load it through
// ASTR_NCCL_LIBRARY exactly as they load libnccl.so.2.
//
// The subset: ncclGetVersion, ncclGetUniqueId, ncclCommInitRank, ncclBroadcast (root 0, any
// datatype), ncclAllReduce (sum of float32 / float64 / int32 / int64), ncclGroupStart/End,
// ncclCommAbort, ncclCommDestroy, ncclCommGetAsyncError, ncclCommCount, ncclCommUserRank,
// ncclGetErrorString, ncclGetLastError.
//
// How: the unique id names a TCP listener on 127.0.0.1 that ncclGetUniqueId opens (magic, port,
// a random nonce); rank 0 must init in that process. The other ranks connect and say their rank;
// ncclCommInitRank returns once every rank is there (rank 0 acknowledges each), like NCCL's. A
// broadcast is rank 0 sending each peer a header (sequence number, bytes) and the bytes; a peer
// whose own call disagrees on the size fails with ncclInvalidUsage instead of hanging. An
// all-reduce is every peer sending rank 0 its values, rank 0 summing and sending the sum back.
// Pointers are host memory (the emulated device's memory is), and a call runs when made, not in
// stream order: astr receives into a buffer no other stream work touches and synchronizes after.
// Every wait is bounded by ASTR_NCCL_EMU_TIMEOUT_S (default 300 s) and ends at once when another
// thread calls ncclCommAbort, which is how astr's watchdog stops a broadcast.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "worker/backends/cuda/nccl_api.h"

namespace {

using astr::nccl::Result;
using astr::nccl::UniqueId;
using Clock = std::chrono::steady_clock;

constexpr char kMagic[16] = "astr-nccl-emu-1";
constexpr int kVersionCode = 22809;  // reports itself as NCCL 2.28.9

struct IdLayout {
  char magic[16];
  uint16_t port;  // network order
  uint64_t nonce;
};
static_assert(sizeof(IdLayout) <= sizeof(UniqueId));

struct Hello {
  uint64_t nonce;
  int32_t rank;
  int32_t nranks;
};

struct Header {
  uint64_t seq;
  uint64_t bytes;
};

struct Comm {
  int rank = 0;
  int nranks = 0;
  std::vector<int> peers;  // rank 0: fd per rank (-1 for itself); others: [0] = fd to rank 0
  std::atomic<bool> aborted{false};
  std::atomic<int> async_error{astr::nccl::kSuccess};
  std::mutex op_mu;  // held by an operation; Abort / Destroy take it after shutting sockets
  uint64_t seq = 0;
  std::string last_error;
};

std::mutex g_mu;
std::map<uint64_t, int> g_listeners;  // nonce -> listening fd made by ncclGetUniqueId
thread_local std::string g_last_error;

std::chrono::milliseconds Timeout() {
  const char* env = std::getenv("ASTR_NCCL_EMU_TIMEOUT_S");
  const double s = env != nullptr ? std::atof(env) : 300.0;
  return std::chrono::milliseconds(static_cast<int64_t>((s > 0 ? s : 300.0) * 1000));
}

Result Fail(Comm* comm, Result r, std::string why) {
  why = "emulated NCCL: " + why;
  g_last_error = why;
  if (comm != nullptr) {
    comm->last_error = why;
    int expected = astr::nccl::kSuccess;
    comm->async_error.compare_exchange_strong(expected, r);
  }
  return r;
}

// Waits until `fd` is ready for `events`; false on timeout, abort or error (`why` says which).
bool WaitFd(int fd, short events, Clock::time_point deadline, const std::atomic<bool>* aborted,
            std::string* why) {
  while (true) {
    if (aborted != nullptr && aborted->load()) {
      *why = "the communicator was aborted";
      return false;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      *why = "timed out (ASTR_NCCL_EMU_TIMEOUT_S)";
      return false;
    }
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
    if (n < 0 && errno != EINTR) {
      *why = std::string("poll: ") + std::strerror(errno);
      return false;
    }
    if (n > 0) return true;  // readable/writable, or an error the next call reports
  }
}

// Moves all `size` bytes through `fd`, sending (`out` set) or receiving (`in` set), waiting for
// the socket without blocking so that the deadline and an abort end the wait.
bool MoveAll(int fd, const char* out, char* in, size_t size, Clock::time_point deadline,
             const std::atomic<bool>* aborted, std::string* why) {
  const bool sending = out != nullptr;
  while (size > 0) {
    if (!WaitFd(fd, sending ? POLLOUT : POLLIN, deadline, aborted, why)) return false;
    const ssize_t n = sending ? send(fd, out, size, MSG_NOSIGNAL | MSG_DONTWAIT)
                              : recv(fd, in, size, MSG_DONTWAIT);
    if (n == 0 && !sending) {
      *why = "the peer closed the connection (its process ended or aborted)";
      return false;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      *why = std::string(sending ? "send: " : "recv: ") + std::strerror(errno);
      return false;
    }
    if (sending) {
      out += n;
    } else {
      in += n;
    }
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool SendAll(int fd, const void* data, size_t size, Clock::time_point deadline,
             const std::atomic<bool>* aborted, std::string* why) {
  return MoveAll(fd, static_cast<const char*>(data), nullptr, size, deadline, aborted, why);
}

bool RecvAll(int fd, void* data, size_t size, Clock::time_point deadline,
             const std::atomic<bool>* aborted, std::string* why) {
  return MoveAll(fd, nullptr, static_cast<char*>(data), size, deadline, aborted, why);
}

size_t TypeSize(int datatype) {
  switch (datatype) {
    case 0:   // int8
    case 1:   // uint8
    case 10:  // fp8 e4m3
    case 11:  // fp8 e5m2
      return 1;
    case 6:  // float16
    case 9:  // bfloat16
      return 2;
    case 2:  // int32
    case 3:  // uint32
    case 7:  // float32
      return 4;
    case 4:  // int64
    case 5:  // uint64
    case 8:  // float64
      return 8;
    default:
      return 0;
  }
}

void CloseAll(Comm* comm) {
  for (int& fd : comm->peers) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

void ShutdownAll(Comm* comm) {
  for (int fd : comm->peers) {
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
  }
}

int Tune(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

namespace {

template <typename T>
void AddInto(void* acc, const void* more, size_t count) {
  T* a = static_cast<T*>(acc);
  const T* b = static_cast<const T*>(more);
  for (size_t i = 0; i < count; ++i) a[i] += b[i];
}

bool Summable(int datatype) {
  return datatype == 2 || datatype == 4 || datatype == 7 || datatype == 8;
}

// An operation may run on `comm` (its lock held): kSuccess, or why not.
int Usable(Comm* comm) {
  if (comm->aborted.load()) {
    return Fail(comm, astr::nccl::kInvalidUsage, "the communicator was aborted");
  }
  return comm->async_error.load();
}

// acc += more elementwise (a Summable datatype); false for another.
bool Accumulate(int datatype, void* acc, const void* more, size_t count) {
  switch (datatype) {
    case 2:
      AddInto<int32_t>(acc, more, count);
      return true;
    case 4:
      AddInto<int64_t>(acc, more, count);
      return true;
    case 7:
      AddInto<float>(acc, more, count);
      return true;
    case 8:
      AddInto<double>(acc, more, count);
      return true;
    default:
      return false;
  }
}

}  // namespace

extern "C" {

// Lets astr tell the emulator from libnccl in its logs.
__attribute__((visibility("default"))) int astr_nccl_emulated() { return 1; }

__attribute__((visibility("default"))) int ncclGetVersion(int* version) {
  if (version == nullptr) return Fail(nullptr, astr::nccl::kInvalidArgument, "version is null");
  *version = kVersionCode;
  return astr::nccl::kSuccess;
}

__attribute__((visibility("default"))) const char* ncclGetErrorString(int result) {
  switch (result) {
    case astr::nccl::kSuccess:
      return "no error";
    case astr::nccl::kUnhandledCudaError:
      return "unhandled cuda error";
    case astr::nccl::kSystemError:
      return "unhandled system error (emulated NCCL: a socket failed or timed out)";
    case astr::nccl::kInternalError:
      return "internal error";
    case astr::nccl::kInvalidArgument:
      return "invalid argument";
    case astr::nccl::kInvalidUsage:
      return "invalid usage";
    case astr::nccl::kRemoteError:
      return "remote process exited or there was a network error";
    case astr::nccl::kInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

__attribute__((visibility("default"))) const char* ncclGetLastError(void* comm) {
  if (comm != nullptr) return static_cast<Comm*>(comm)->last_error.c_str();
  return g_last_error.c_str();
}

__attribute__((visibility("default"))) int ncclGetUniqueId(UniqueId* id) {
  if (id == nullptr) return Fail(nullptr, astr::nccl::kInvalidArgument, "id is null");
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Fail(nullptr, astr::nccl::kSystemError, std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return Fail(nullptr, astr::nccl::kSystemError, "listen on 127.0.0.1: " + why);
  }
  IdLayout layout{};
  std::memcpy(layout.magic, kMagic, sizeof(kMagic));
  layout.port = addr.sin_port;
  std::random_device rd;
  layout.nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id->internal, &layout, sizeof(layout));
  std::lock_guard<std::mutex> lock(g_mu);
  g_listeners[layout.nonce] = fd;
  return astr::nccl::kSuccess;
}

__attribute__((visibility("default"))) int ncclCommInitRank(void** out, int nranks, UniqueId id,
                                                            int rank) {
  if (out == nullptr) return Fail(nullptr, astr::nccl::kInvalidArgument, "comm is null");
  *out = nullptr;
  IdLayout layout;
  std::memcpy(&layout, id.internal, sizeof(layout));
  if (std::memcmp(layout.magic, kMagic, sizeof(kMagic)) != 0) {
    return Fail(nullptr, astr::nccl::kInvalidArgument,
                "the unique id was not made by the emulated NCCL's ncclGetUniqueId");
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return Fail(nullptr, astr::nccl::kInvalidArgument,
                "rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  }
  const auto deadline = Clock::now() + Timeout();
  auto comm = std::make_unique<Comm>();
  comm->rank = rank;
  comm->nranks = nranks;
  std::string why;
  if (rank == 0) {
    int listener = -1;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      auto it = g_listeners.find(layout.nonce);
      if (it != g_listeners.end()) {
        listener = it->second;
        g_listeners.erase(it);
      }
    }
    if (listener < 0) {
      return Fail(nullptr, astr::nccl::kInvalidUsage,
                  "rank 0 must initialize in the process that called ncclGetUniqueId, once");
    }
    comm->peers.assign(static_cast<size_t>(nranks), -1);
    int joined = 1;
    while (joined < nranks) {
      if (!WaitFd(listener, POLLIN, deadline, nullptr, &why)) break;
      const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      Tune(fd);
      Hello hello{};
      std::string bad;
      if (!RecvAll(fd, &hello, sizeof(hello), deadline, nullptr, &bad) ||
          hello.nonce != layout.nonce || hello.nranks != nranks || hello.rank < 1 ||
          hello.rank >= nranks || comm->peers[static_cast<size_t>(hello.rank)] >= 0) {
        // A stranger or a rank that disagrees: refused; the group keeps waiting for the right one.
        close(fd);
        continue;
      }
      comm->peers[static_cast<size_t>(hello.rank)] = fd;
      ++joined;
    }
    close(listener);
    if (joined < nranks) {
      CloseAll(comm.get());
      return Fail(nullptr, astr::nccl::kSystemError,
                  "rank 0: " + std::to_string(joined) + " of " + std::to_string(nranks) +
                      " ranks joined: " + why);
    }
    const char ack = 1;
    for (int r = 1; r < nranks; ++r) {
      if (!SendAll(comm->peers[static_cast<size_t>(r)], &ack, 1, deadline, nullptr, &why)) {
        CloseAll(comm.get());
        return Fail(nullptr, astr::nccl::kSystemError, "rank 0: acknowledging: " + why);
      }
    }
  } else {
    int fd = -1;
    while (true) {
      fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return Fail(nullptr, astr::nccl::kSystemError, std::strerror(errno));
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = layout.port;
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
      const std::string err = std::strerror(errno);
      close(fd);
      if (Clock::now() >= deadline) {
        return Fail(nullptr, astr::nccl::kSystemError,
                    "rank " + std::to_string(rank) + ": cannot reach rank 0: " + err);
      }
      usleep(20000);
    }
    Tune(fd);
    comm->peers.push_back(fd);
    const Hello hello{layout.nonce, rank, nranks};
    char ack = 0;
    if (!SendAll(fd, &hello, sizeof(hello), deadline, nullptr, &why) ||
        !RecvAll(fd, &ack, 1, deadline, nullptr, &why)) {
      CloseAll(comm.get());
      return Fail(nullptr, astr::nccl::kSystemError,
                  "rank " + std::to_string(rank) + ": joining: " + why);
    }
  }
  *out = comm.release();
  return astr::nccl::kSuccess;
}

__attribute__((visibility("default"))) int ncclBroadcast(const void* sendbuff, void* recvbuff,
                                                         size_t count, int datatype, int root,
                                                         void* handle, void* /*stream*/) {
  Comm* comm = static_cast<Comm*>(handle);
  if (comm == nullptr) return Fail(nullptr, astr::nccl::kInvalidArgument, "comm is null");
  std::lock_guard<std::mutex> op(comm->op_mu);
  if (const int r = Usable(comm); r != astr::nccl::kSuccess) return r;
  if (root != 0) {
    return Fail(comm, astr::nccl::kInvalidArgument,
                "broadcasts from rank 0 only (root " + std::to_string(root) + ")");
  }
  const size_t item = TypeSize(datatype);
  if (item == 0) {
    return Fail(comm, astr::nccl::kInvalidArgument, "datatype " + std::to_string(datatype));
  }
  const size_t bytes = count * item;
  if (bytes > 0 && recvbuff == nullptr) {
    return Fail(comm, astr::nccl::kInvalidArgument, "recvbuff is null");
  }
  const auto deadline = Clock::now() + Timeout();
  const uint64_t seq = comm->seq++;
  std::string why;
  if (comm->rank == 0) {
    if (bytes > 0 && sendbuff == nullptr) {
      return Fail(comm, astr::nccl::kInvalidArgument, "sendbuff is null");
    }
    if (sendbuff != recvbuff && bytes > 0) std::memmove(recvbuff, sendbuff, bytes);
    const Header header{seq, bytes};
    for (int r = 1; r < comm->nranks; ++r) {
      const int fd = comm->peers[static_cast<size_t>(r)];
      if (!SendAll(fd, &header, sizeof(header), deadline, &comm->aborted, &why) ||
          !SendAll(fd, recvbuff, bytes, deadline, &comm->aborted, &why)) {
        return Fail(
            comm, astr::nccl::kSystemError,
            "broadcast " + std::to_string(seq) + " to rank " + std::to_string(r) + ": " + why);
      }
    }
    return astr::nccl::kSuccess;
  }
  const int fd = comm->peers[0];
  Header header{};
  if (!RecvAll(fd, &header, sizeof(header), deadline, &comm->aborted, &why)) {
    return Fail(comm, astr::nccl::kSystemError,
                "broadcast " + std::to_string(seq) + " from rank 0: " + why);
  }
  if (header.seq != seq || header.bytes != bytes) {
    return Fail(comm, astr::nccl::kInvalidUsage,
                "broadcast " + std::to_string(seq) + ": rank 0 sends broadcast " +
                    std::to_string(header.seq) + " of " + std::to_string(header.bytes) +
                    " bytes, this rank expects " + std::to_string(bytes));
  }
  if (!RecvAll(fd, recvbuff, bytes, deadline, &comm->aborted, &why)) {
    return Fail(comm, astr::nccl::kSystemError,
                "broadcast " + std::to_string(seq) + " from rank 0: " + why);
  }
  return astr::nccl::kSuccess;
}

__attribute__((visibility("default"))) int ncclAllReduce(const void* sendbuff, void* recvbuff,
                                                         size_t count, int datatype, int op,
                                                         void* handle, void* /*stream*/) {
  Comm* comm = static_cast<Comm*>(handle);
  if (comm == nullptr) return Fail(nullptr, astr::nccl::kInvalidArgument, "comm is null");
  std::lock_guard<std::mutex> lock(comm->op_mu);
  if (const int r = Usable(comm); r != astr::nccl::kSuccess) return r;
  if (op != 0) {
    return Fail(comm, astr::nccl::kInvalidArgument,
                "all-reduce op " + std::to_string(op) + ": the emulation sums only (ncclSum)");
  }
  const size_t item = TypeSize(datatype);
  if (!Summable(datatype)) {
    return Fail(comm, astr::nccl::kInvalidArgument,
                "all-reduce datatype " + std::to_string(datatype) +
                    ": the emulation sums float32, float64, int32 and int64");
  }
  const size_t bytes = count * item;
  if (bytes > 0 && (sendbuff == nullptr || recvbuff == nullptr)) {
    return Fail(comm, astr::nccl::kInvalidArgument, "sendbuff or recvbuff is null");
  }
  if (sendbuff != recvbuff && bytes > 0) std::memmove(recvbuff, sendbuff, bytes);
  const auto deadline = Clock::now() + Timeout();
  const uint64_t seq = comm->seq++;
  const Header header{seq, bytes};
  std::string why;
  const auto mismatch = [&](const Header& got, int rank) {
    return Fail(comm, astr::nccl::kInvalidUsage,
                "all-reduce " + std::to_string(seq) + ": rank " + std::to_string(rank) +
                    " sends operation " + std::to_string(got.seq) + " of " +
                    std::to_string(got.bytes) + " bytes, this rank has " + std::to_string(bytes));
  };
  if (comm->rank == 0) {
    std::vector<char> part(bytes);
    for (int r = 1; r < comm->nranks; ++r) {
      const int fd = comm->peers[static_cast<size_t>(r)];
      Header got{};
      if (!RecvAll(fd, &got, sizeof(got), deadline, &comm->aborted, &why)) {
        return Fail(
            comm, astr::nccl::kSystemError,
            "all-reduce " + std::to_string(seq) + " from rank " + std::to_string(r) + ": " + why);
      }
      if (got.seq != seq || got.bytes != bytes) return mismatch(got, r);
      if (!RecvAll(fd, part.data(), bytes, deadline, &comm->aborted, &why)) {
        return Fail(
            comm, astr::nccl::kSystemError,
            "all-reduce " + std::to_string(seq) + " from rank " + std::to_string(r) + ": " + why);
      }
      Accumulate(datatype, recvbuff, part.data(), count);
    }
    for (int r = 1; r < comm->nranks; ++r) {
      const int fd = comm->peers[static_cast<size_t>(r)];
      if (!SendAll(fd, &header, sizeof(header), deadline, &comm->aborted, &why) ||
          !SendAll(fd, recvbuff, bytes, deadline, &comm->aborted, &why)) {
        return Fail(
            comm, astr::nccl::kSystemError,
            "all-reduce " + std::to_string(seq) + " to rank " + std::to_string(r) + ": " + why);
      }
    }
    return astr::nccl::kSuccess;
  }
  const int fd = comm->peers[0];
  if (!SendAll(fd, &header, sizeof(header), deadline, &comm->aborted, &why) ||
      !SendAll(fd, recvbuff, bytes, deadline, &comm->aborted, &why)) {
    return Fail(comm, astr::nccl::kSystemError,
                "all-reduce " + std::to_string(seq) + " to rank 0: " + why);
  }
  Header got{};
  if (!RecvAll(fd, &got, sizeof(got), deadline, &comm->aborted, &why)) {
    return Fail(comm, astr::nccl::kSystemError,
                "all-reduce " + std::to_string(seq) + " from rank 0: " + why);
  }
  if (got.seq != seq || got.bytes != bytes) return mismatch(got, 0);
  if (!RecvAll(fd, recvbuff, bytes, deadline, &comm->aborted, &why)) {
    return Fail(comm, astr::nccl::kSystemError,
                "all-reduce " + std::to_string(seq) + " from rank 0: " + why);
  }
  return astr::nccl::kSuccess;
}

__attribute__((visibility("default"))) int ncclGroupStart() { return astr::nccl::kSuccess; }
__attribute__((visibility("default"))) int ncclGroupEnd() { return astr::nccl::kSuccess; }

__attribute__((visibility("default"))) int ncclCommGetAsyncError(void* handle, int* error) {
  if (handle == nullptr || error == nullptr) {
    return Fail(nullptr, astr::nccl::kInvalidArgument, "comm or error is null");
  }
  *error = static_cast<Comm*>(handle)->async_error.load();
  return astr::nccl::kSuccess;
}

__attribute__((visibility("default"))) int ncclCommCount(void* handle, int* count) {
  if (handle == nullptr || count == nullptr) {
    return Fail(nullptr, astr::nccl::kInvalidArgument, "comm or count is null");
  }
  *count = static_cast<Comm*>(handle)->nranks;
  return astr::nccl::kSuccess;
}

__attribute__((visibility("default"))) int ncclCommUserRank(void* handle, int* rank) {
  if (handle == nullptr || rank == nullptr) {
    return Fail(nullptr, astr::nccl::kInvalidArgument, "comm or rank is null");
  }
  *rank = static_cast<Comm*>(handle)->rank;
  return astr::nccl::kSuccess;
}

// Safe while another thread is inside ncclBroadcast on the same communicator: its sockets are shut
// so the operation returns, then the communicator is freed.
__attribute__((visibility("default"))) int ncclCommAbort(void* handle) {
  Comm* comm = static_cast<Comm*>(handle);
  if (comm == nullptr) return astr::nccl::kSuccess;
  comm->aborted.store(true);
  ShutdownAll(comm);
  {
    std::lock_guard<std::mutex> op(comm->op_mu);
    CloseAll(comm);
  }
  delete comm;
  return astr::nccl::kSuccess;
}

__attribute__((visibility("default"))) int ncclCommDestroy(void* handle) {
  Comm* comm = static_cast<Comm*>(handle);
  if (comm == nullptr) return astr::nccl::kSuccess;
  {
    std::lock_guard<std::mutex> op(comm->op_mu);
    CloseAll(comm);
  }
  delete comm;
  return astr::nccl::kSuccess;
}

}  // extern "C"
