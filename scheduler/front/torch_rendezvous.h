// Joining a trainer's NCCL group the way vLLM's workers do (docs/rl.md "vLLM's weight-transfer
// routes"): the trainer (rank 0) hosts a torch.distributed TCPStore at master_address:master_port
// (vLLM's StatelessProcessGroup), every rank checks in on the store's "init/" counter, and rank 0
// publishes its ncclUniqueId under "broadcast_from/0/0" as a pickled ctypes structure. The
// scheduler does this on behalf of its workers, then hands them the unique id (JoinWeightGroup).
//
// TcpStoreClient speaks torch's TCPStore wire protocol (torch/csrc/distributed/c10d/TCPStore.cpp,
// the same for the classic and the libuv server): each request is a query byte and its
// arguments, strings and byte strings as a little-endian uint64 length and the bytes.
// tools/check_torch_rendezvous.sh checks it against torch itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/base/status.h"

namespace astr::front {

class TcpStoreClient {
 public:
  // Connects to the store at host:port and says hello (torch's validation and ping), retrying
  // while nothing listens there yet (a trainer opens its store after asking astr to join) until
  // `timeout`. UNAVAILABLE / DEADLINE_EXCEEDED naming the address.
  static StatusOr<std::unique_ptr<TcpStoreClient>> Connect(const std::string& host, int port,
                                                           std::chrono::milliseconds timeout);
  ~TcpStoreClient();
  TcpStoreClient(const TcpStoreClient&) = delete;
  TcpStoreClient& operator=(const TcpStoreClient&) = delete;

  // Keys are the store's own: torch's Python API puts "/" before its keys ("/broadcast_from/0/0")
  // but not before "init/".
  // Adds `delta` to the integer at `key`; the new value.
  StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  // Sets `key`.
  Status Set(const std::string& key, std::string_view value);
  // The value of `key`, once it is set; DEADLINE_EXCEEDED after `timeout` (the connection is
  // then closed: every later call fails).
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout);

 private:
  explicit TcpStoreClient(int fd, std::string address) : fd_(fd), address_(std::move(address)) {}
  Status Send(const std::string& bytes);
  Status Receive(void* data, size_t size, std::chrono::steady_clock::time_point deadline);

  int fd_;
  std::string address_;  // host:port, for errors
  std::chrono::milliseconds io_timeout_{30000};
};

// The 128 bytes of an ncclUniqueId as vLLM's StatelessProcessGroup.broadcast_obj stores it:
// pickle.dumps of its ctypes structure ncclUniqueId (protocol 3 or later: Python writes 4 or 5).
// INVALID_ARGUMENT saying what the bytes are instead.
StatusOr<std::string> NcclUniqueIdFromPickle(std::string_view pickle);

// vLLM's rendezvous for `workers` ranks: checks them in on the store's "init/" counter (the
// trainer's store waits for world_size check-ins), then reads rank 0's unique id. Waits up to
// `timeout` in all.
StatusOr<std::string> JoinVllmRendezvous(const std::string& host, int port, int workers,
                                         std::chrono::milliseconds timeout);

}  // namespace astr::front
