#include "tools/loopback_copy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "common/base/clock.h"

namespace astr::bench {
namespace {

// Bytes per send() / recv() call.
constexpr size_t kCallBytes = 8 << 20;

}  // namespace

StatusOr<double> LoopbackCopySeconds(const std::vector<std::span<const uint8_t>>& data,
                                     int64_t total, int64_t receivers, bool fresh) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, static_cast<int>(receivers)) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (listener >= 0) close(listener);
    return InternalError(std::string("copy: cannot listen on loopback: ") + std::strerror(errno));
  }
  std::vector<int> send_fds, recv_fds;
  for (int64_t i = 0; i < receivers; ++i) {
    const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(listener);
      return InternalError(std::string("copy: cannot connect: ") + std::strerror(errno));
    }
    send_fds.push_back(s);
    recv_fds.push_back(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
  }
  close(listener);
  std::vector<std::unique_ptr<uint8_t[]>> buffers(static_cast<size_t>(receivers));
  if (!fresh) {
    for (auto& b : buffers) {
      b.reset(new uint8_t[static_cast<size_t>(total)]);
      std::memset(b.get(), 0, static_cast<size_t>(total));  // touched: no page faults
    }
  }
  std::vector<int64_t> received(static_cast<size_t>(receivers), 0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < send_fds.size(); ++i) {
    threads.emplace_back([&, i] {
      for (const auto& span : data) {
        for (size_t off = 0; off < span.size();) {
          const ssize_t n = send(send_fds[i], span.data() + off,
                                 std::min(kCallBytes, span.size() - off), MSG_NOSIGNAL);
          if (n <= 0) return;
          off += static_cast<size_t>(n);
        }
      }
      shutdown(send_fds[i], SHUT_WR);
    });
    threads.emplace_back([&, i] {
      if (fresh) buffers[i].reset(new uint8_t[static_cast<size_t>(total)]);
      uint8_t* out = buffers[i].get();
      while (received[i] < total) {
        const ssize_t n = recv(recv_fds[i], out + received[i],
                               std::min<int64_t>(kCallBytes, total - received[i]), 0);
        if (n <= 0) return;
        received[i] += n;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = static_cast<double>(NanosSince(start)) / 1e9;
  for (int fd : send_fds) close(fd);
  for (int fd : recv_fds) close(fd);
  for (int64_t r : received) {
    if (r != total) {
      return InternalError("copy: a receiver got " + std::to_string(r) + " of " +
                           std::to_string(total) + " bytes");
    }
  }
  size_t at = 0;
  for (const auto& span : data) {
    if (std::memcmp(buffers[0].get() + at, span.data(), span.size()) != 0) {
      return InternalError("copy: the bytes received differ from those sent");
    }
    at += span.size();
  }
  return seconds;
}

}  // namespace astr::bench
