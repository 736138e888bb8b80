// Fuzz target: the HTTP/1.1 server (common/http/http_server.h, Boost.Beast), whose request parsing
// is reachable only through a socket. A live server on 127.0.0.1 (started once, small limits and
// one-second timeouts) gets each input as the raw bytes of one connection, which the client then
// half-closes and reads to its end. The handler answers by path: /stream streams the body back in
// chunks, anything else gets a whole response.
//
// Checked after every input: the server closed that connection within a few seconds of the
// client's end (its idle and read timeouts are one second), it still answers a well-formed request
// on a new connection, and it holds no connection afterwards (none leaks).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "common/http/http_server.h"
#include "tests/fuzz/fuzz_support.h"

namespace astr::fuzz {
namespace {

using namespace std::chrono_literals;

http::Server* g_server = nullptr;

// How long the client waits for the server to end a connection: past the server's timeouts.
constexpr auto kConnectionDeadline = 5s;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void Handle(std::shared_ptr<http::Exchange> ex) {
  const http::Request& r = ex->request();
  if (r.path == "/stream") {
    ex->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    ex->Write("data: start\n\n");
    ex->Write("data: " + r.body + "\n\n");
    ex->End();
    return;
  }
  http::Response response;
  response.content_type = "text/plain";
  response.headers = {{"X-Method", r.method}};
  response.body = r.method + " " + r.target + " " + std::to_string(r.body.size()) + " " +
                  std::to_string(r.headers.size());
  ex->Respond(std::move(response));
}

// A blocking loopback connection whose sends and reads give up after kConnectionDeadline. The
// fuzzer opens two connections per input, over a thousand a second, and every closed one holds its
// port in TIME_WAIT for a minute: when the ephemeral ports run out (EADDRNOTAVAIL, the machine's
// limit, not the server's), it waits for ports to come free; a connect a signal interrupted is
// tried again. Any other failure is a finding.
int Connect() {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    Check(fd >= 0);
    timeval timeout{};
    timeout.tv_sec = std::chrono::seconds(kConnectionDeadline).count();
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(g_server->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    const int err = errno;
    close(fd);
    // EINTR: a signal (libFuzzer's timers) interrupted the connect; try again on a new socket.
    if ((err != EADDRNOTAVAIL && err != EINTR) || std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "fuzz: connect to the server failed: %s\n", std::strerror(err));
      __builtin_trap();
    }
    std::this_thread::sleep_for(20ms);
  }
}

// Sends what the server takes (it may answer and close before reading everything), half-closes,
// and reads to the end. False when the server kept the connection open for kConnectionDeadline
// without sending anything.
bool Exchange(std::string_view bytes, std::string* answer) {
  const int fd = Connect();
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  bool ended = false;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      answer->append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    // 0: the server closed. An error: it reset the connection (it stopped reading a body it
    // refused), unless it is the receive timeout (EAGAIN), which means it kept the connection.
    ended = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    break;
  }
  close(fd);
  return ended;
}

void CheckServerStillAnswers() {
  std::string answer;
  Check(Exchange("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &answer));
  Check(answer.starts_with("HTTP/1.1 200 "));
  const auto deadline = std::chrono::steady_clock::now() + kConnectionDeadline;
  while (g_server->open_connections() != 0) {
    Check(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(1ms);
  }
}

}  // namespace
}  // namespace astr::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  using namespace astr;
  fuzz::InitQuietLogging((*argv)[0]);
  http::ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.threads = 1;
  // Small limits, so that short inputs reach the 431 and 413 paths too.
  o.max_header_bytes = 2048;
  o.max_body_bytes = 4096;
  o.idle_timeout = std::chrono::milliseconds(1000);
  o.read_timeout = std::chrono::milliseconds(1000);
  o.write_timeout = std::chrono::milliseconds(1000);
  auto server = http::Server::Start(o, fuzz::Handle);
  if (!server.ok()) {
    std::fprintf(stderr, "fuzz: %s\n", server.status().ToString().c_str());
    std::abort();
  }
  fuzz::g_server = server->release();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace astr;
  std::string answer;
  fuzz::Check(fuzz::Exchange({reinterpret_cast<const char*>(data), size}, &answer));
  fuzz::CheckServerStillAnswers();
  return 0;
}
