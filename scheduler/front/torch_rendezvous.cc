#include "scheduler/front/torch_rendezvous.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "common/base/logging.h"

namespace astr::front {
namespace {

using Clock = std::chrono::steady_clock;

// torch/csrc/distributed/c10d/TCPStoreBackend.hpp: QueryType, the validation magic, the answers.
enum Query : uint8_t {
  kValidate = 0,
  kSet = 1,
  kGet = 3,
  kAdd = 4,
  kWait = 6,
};
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
constexpr uint8_t kStopWaiting = 0;

// Little-endian, as torch writes its integers (it copies them from memory on x86 and ARM).
template <typename T>
void PutValue(std::string* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out->push_back(static_cast<char>(static_cast<uint64_t>(value) >> (8 * i) & 0xff));
  }
}

void PutString(std::string* out, std::string_view s) {
  PutValue<uint64_t>(out, s.size());
  out->append(s);
}

int Remaining(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), 1 << 30)));
}

// One connect to `ai` bounded by `deadline`: the fd, or -1 with errno set.
int ConnectOnce(const addrinfo* ai, Clock::time_point deadline) {
  const int fd =
      socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) return -1;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      const int e = errno;
      close(fd);
      errno = e;
      return -1;
    }
    pollfd p{fd, POLLOUT, 0};
    const int n = poll(&p, 1, Remaining(deadline));
    int err = 0;
    socklen_t len = sizeof(err);
    if (n <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      close(fd);
      errno = n == 0 ? ETIMEDOUT : (err != 0 ? err : errno);
      return -1;
    }
  }
  // Blocking from here on: every read waits in poll with a deadline first.
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(
    const std::string& host, int port, std::chrono::milliseconds timeout) {
  const std::string address = host + ":" + std::to_string(port);
  if (port <= 0 || port > 65535) {
    return InvalidArgumentError("master_port: " + std::to_string(port) + " is not a TCP port");
  }
  const auto deadline = Clock::now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    return InvalidArgumentError("master_address: cannot resolve '" + host +
                                "': " + gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, freeaddrinfo);
  std::string last = "no address";
  // The trainer opens its store when it makes its side of the group, which may come after it
  // asked astr to join: a refused connection is tried again until the deadline.
  while (true) {
    for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
      const int fd = ConnectOnce(ai, deadline);
      if (fd < 0) {
        last = std::strerror(errno);
        continue;
      }
      std::unique_ptr<TcpStoreClient> client(new TcpStoreClient(fd, address));
      std::string hello;
      hello.push_back(static_cast<char>(kValidate));
      PutValue<uint32_t>(&hello, kValidationMagic);
      ASTR_RETURN_IF_ERROR(client->Send(hello));
      return client;
    }
    if (Clock::now() >= deadline) {
      return DeadlineExceededError("the trainer's TCPStore at " + address + ": cannot connect (" +
                                   last + ") within " + std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, Remaining(deadline))));
  }
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) close(fd_);
}

Status TcpStoreClient::Send(const std::string& bytes) {
  if (fd_ < 0) return UnavailableError("the trainer's TCPStore at " + address_ + ": closed");
  size_t sent = 0;
  const auto deadline = Clock::now() + io_timeout_;
  while (sent < bytes.size()) {
    pollfd p{fd_, POLLOUT, 0};
    if (poll(&p, 1, Remaining(deadline)) <= 0) {
      return UnavailableError("the trainer's TCPStore at " + address_ + ": cannot send");
    }
    const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return UnavailableError("the trainer's TCPStore at " + address_ +
                              ": send: " + std::strerror(errno));
    }
    sent += static_cast<size_t>(n);
  }
  return OkStatus();
}

Status TcpStoreClient::Receive(void* data, size_t size, Clock::time_point deadline) {
  if (fd_ < 0) return UnavailableError("the trainer's TCPStore at " + address_ + ": closed");
  char* out = static_cast<char*>(data);
  size_t got = 0;
  while (got < size) {
    pollfd p{fd_, POLLIN, 0};
    const int n = poll(&p, 1, Remaining(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      // Whatever answer was due may still come: nothing more can be read on this connection.
      close(fd_);
      fd_ = -1;
      return DeadlineExceededError("the trainer's TCPStore at " + address_ + ": no answer in time");
    }
    const ssize_t r = recv(fd_, out + got, size - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return UnavailableError("the trainer's TCPStore at " + address_ + ": " +
                              (r == 0 ? "the store closed the connection"
                                      : std::string("recv: ") + std::strerror(errno)));
    }
    got += static_cast<size_t>(r);
  }
  return OkStatus();
}

StatusOr<int64_t> TcpStoreClient::Add(const std::string& key, int64_t delta) {
  std::string q;
  q.push_back(static_cast<char>(kAdd));
  PutString(&q, key);
  PutValue<int64_t>(&q, delta);
  ASTR_RETURN_IF_ERROR(Send(q));
  uint8_t raw[8];
  ASTR_RETURN_IF_ERROR(Receive(raw, sizeof(raw), Clock::now() + io_timeout_));
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | raw[i];
  return static_cast<int64_t>(v);
}

Status TcpStoreClient::Set(const std::string& key, std::string_view value) {
  std::string q;
  q.push_back(static_cast<char>(kSet));
  PutString(&q, key);
  PutString(&q, value);
  return Send(q);
}

StatusOr<std::string> TcpStoreClient::Get(const std::string& key,
                                          std::chrono::milliseconds timeout) {
  // As torch's get: wait for the key, then read it.
  std::string q;
  q.push_back(static_cast<char>(kWait));
  PutValue<uint64_t>(&q, 1);
  PutString(&q, key);
  ASTR_RETURN_IF_ERROR(Send(q));
  uint8_t answer = 0xff;
  Status waited = Receive(&answer, 1, Clock::now() + timeout);
  if (!waited.ok()) {
    if (waited.code() == StatusCode::kDeadlineExceeded) {
      return DeadlineExceededError("the trainer's TCPStore at " + address_ + ": '" + key +
                                   "' was not set within " + std::to_string(timeout.count()) +
                                   " ms");
    }
    return waited;
  }
  if (answer != kStopWaiting) {
    return UnavailableError("the trainer's TCPStore at " + address_ + ": answered " +
                            std::to_string(answer) + " to a wait (not torch's TCPStore?)");
  }
  q.clear();
  q.push_back(static_cast<char>(kGet));
  PutString(&q, key);
  ASTR_RETURN_IF_ERROR(Send(q));
  uint8_t raw[8];
  const auto deadline = Clock::now() + io_timeout_;
  ASTR_RETURN_IF_ERROR(Receive(raw, sizeof(raw), deadline));
  uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = size << 8 | raw[i];
  if (size > (uint64_t{64} << 20)) {
    return UnavailableError("the trainer's TCPStore at " + address_ + ": '" + key + "' holds " +
                            std::to_string(size) + " bytes (not a unique id)");
  }
  std::string value(size, '\0');
  ASTR_RETURN_IF_ERROR(Receive(value.data(), value.size(), deadline));
  return value;
}

// ---------------------------------------------------------------------------------------------
// The pickled unique id.

StatusOr<std::string> NcclUniqueIdFromPickle(std::string_view p) {
  // Walks the opcodes a pickled ctypes structure uses (and the common ones around them) without
  // running anything: the class must be named ncclUniqueId and hold one 128-byte string.
  const auto bad = [](const std::string& why) {
    return InvalidArgumentError("the unique id rank 0 published is not a pickled ncclUniqueId: " +
                                why);
  };
  size_t at = 0;
  const auto need = [&](size_t n) { return at + n <= p.size(); };
  const auto little = [&](size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(p[at + i])) << (8 * i);
    return v;
  };
  std::vector<std::string> blobs;
  bool named = false;
  bool stopped = false;
  if (p.size() < 2 || static_cast<uint8_t>(p[0]) != 0x80 || static_cast<uint8_t>(p[1]) < 2) {
    return bad("it does not start with a pickle protocol 2+ header");
  }
  while (at < p.size() && !stopped) {
    const uint8_t op = static_cast<uint8_t>(p[at++]);
    // Length-prefixed strings and bytes.
    size_t len_bytes = 0;
    bool is_bytes = false;
    switch (op) {
      case 0x8c:
        len_bytes = 1;
        break;  // SHORT_BINUNICODE
      case 'X':
        len_bytes = 4;
        break;  // BINUNICODE
      case 0x8d:
        len_bytes = 8;
        break;  // BINUNICODE8
      case 'C':
        len_bytes = 1;
        is_bytes = true;
        break;  // SHORT_BINBYTES
      case 'B':
        len_bytes = 4;
        is_bytes = true;
        break;  // BINBYTES
      case 0x8e:
        len_bytes = 8;
        is_bytes = true;
        break;  // BINBYTES8
      case 0x96:
        len_bytes = 8;
        is_bytes = true;
        break;  // BYTEARRAY8
      case 0x8a:
        len_bytes = 1;
        break;  // LONG1
      default:
        break;
    }
    if (len_bytes > 0) {
      if (!need(len_bytes)) return bad("truncated");
      const uint64_t n = little(len_bytes);
      at += len_bytes;
      if (n > p.size() - at) return bad("truncated");
      const std::string_view v = p.substr(at, n);
      at += n;
      if (is_bytes) blobs.emplace_back(v);
      if (op == 0x8c || op == 'X' || op == 0x8d) named = named || v == "ncclUniqueId";
      continue;
    }
    size_t skip = 0;
    switch (op) {
      case 0x80:
        skip = 1;
        break;  // PROTO
      case 0x95:
        skip = 8;
        break;  // FRAME
      case 'q':
      case 'h':
      case 'K':
        skip = 1;
        break;  // BINPUT BINGET BININT1
      case 'M':
        skip = 2;
        break;  // BININT2
      case 'r':
      case 'j':
      case 'J':
        skip = 4;
        break;  // LONG_BINPUT LONG_BINGET BININT
      case 'G':
        skip = 8;
        break;  // BINFLOAT
      case 0x94:
      case 0x93:
      case '}':
      case ')':
      case ']':
      case 0x85:
      case 0x86:
      case 0x87:
      case 'R':
      case '(':
      case 't':
      case 'N':
      case 'b':
      case 's':
      case 'u':
      case 0x88:
      case 0x89:
      case 0x81:
      case 'a':
      case 'e':
      case 'l':
      case 'd':
      case '0':
        break;  // MEMOIZE STACK_GLOBAL containers tuples REDUCE MARK BUILD ... POP
      case '.':
        stopped = true;
        break;
      case 'c': {  // GLOBAL "module\nname\n"
        for (int line = 0; line < 2; ++line) {
          const size_t nl = p.find('\n', at);
          if (nl == std::string_view::npos) return bad("truncated");
          if (line == 1) named = named || p.substr(at, nl - at) == "ncclUniqueId";
          at = nl + 1;
        }
        break;
      }
      default: {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "0x%02x", op);
        return bad(std::string("pickle opcode ") + hex + " at byte " + std::to_string(at - 1) +
                   " is not one a ctypes structure uses");
      }
    }
    if (!need(skip)) return bad("truncated");
    at += skip;
  }
  if (!stopped) return bad("truncated (no STOP)");
  if (!named) return bad("no class named ncclUniqueId in it");
  std::string id;
  int found = 0;
  for (const std::string& b : blobs) {
    if (b.size() == 128) {
      id = b;
      ++found;
    }
  }
  if (found != 1) {
    return bad(std::to_string(found) + " byte strings of 128 bytes in it (expected 1)");
  }
  return id;
}

StatusOr<std::string> JoinVllmRendezvous(const std::string& host, int port, int workers,
                                         std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  ASTR_ASSIGN_OR_RETURN(auto store, TcpStoreClient::Connect(host, port, timeout));
  // Each vLLM worker's TCPStore checks in once (waitForWorkers); the trainer's waits for all.
  for (int i = 0; i < workers; ++i) ASTR_RETURN_IF_ERROR(store->Add("init/", 1).status());
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  ASTR_ASSIGN_OR_RETURN(
      std::string pickled,
      store->Get("/broadcast_from/0/0", std::max(left, std::chrono::milliseconds(1))));
  ASTR_ASSIGN_OR_RETURN(std::string id, NcclUniqueIdFromPickle(pickled));
  LOG(INFO) << "weights: read the trainer's NCCL unique id from its TCPStore at " << host << ":"
            << port << " for " << workers << " worker(s)";
  return id;
}

}  // namespace astr::front
