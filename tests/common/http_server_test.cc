// common/http's server over real loopback sockets: whole responses and keep-alive, chunked
// streams, size limits, disconnect notice (OnClose) for a request still being answered, flow
// control (OnWritable), a reader that stops reading, and Stop with exchanges still held.
#include "common/http/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace astr::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// A blocking loopback client speaking raw bytes.
class Client {
 public:
  explicit Client(int port) : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  void Send(const std::string& bytes) { asio::write(socket_, asio::buffer(bytes)); }
  // Reads until `needle` has arrived (or EOF); returns everything read so far.
  std::string ReadUntil(const std::string& needle) {
    boost::system::error_code ec;
    while (data_.find(needle) == std::string::npos) {
      char buf[4096];
      const size_t n = socket_.read_some(asio::buffer(buf), ec);
      if (ec) break;
      data_.append(buf, n);
    }
    return data_;
  }
  std::string ReadToEof() {
    boost::system::error_code ec;
    for (;;) {
      char buf[4096];
      const size_t n = socket_.read_some(asio::buffer(buf), ec);
      if (ec) break;
      data_.append(buf, n);
    }
    return data_;
  }
  void Clear() { data_.clear(); }
  void Close() {
    boost::system::error_code ec;
    socket_.close(ec);
  }
  tcp::socket& socket() { return socket_; }

 private:
  asio::io_context io_;
  tcp::socket socket_;
  std::string data_;
};

std::string Post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

ServerOptions Loopback() {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  return o;
}

TEST(HttpServer, AnswersAndKeepsTheConnectionAlive) {
  std::atomic<int> seen{0};
  auto server = Server::Start(Loopback(), [&](std::shared_ptr<Exchange> ex) {
    seen.fetch_add(1);
    Response r;
    r.body = ex->request().method + " " + ex->request().path + " q=" + ex->request().query +
             " body=" + ex->request().body;
    ex->Respond(std::move(r));
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_GT((*server)->port(), 0);
  Client c((*server)->port());
  c.Send(Post("/a?x=1", "hello"));
  std::string got = c.ReadUntil("body=hello");
  EXPECT_NE(got.find("HTTP/1.1 200 OK\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("Content-Length: 24\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("POST /a q=x=1 body=hello"), std::string::npos) << got;
  c.Clear();
  // Same connection, second request.
  c.Send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  got = c.ReadUntil("body=");
  EXPECT_NE(got.find("GET /b q= body="), std::string::npos) << got;
  EXPECT_EQ(seen.load(), 2);
}

// Two requests in one write: the second is read ahead while the first is answered (by the
// parser or the disconnect watcher) and must be answered next, not wait for more bytes.
TEST(HttpServer, PipelinedRequestsAreAnsweredInOrder) {
  auto server = Server::Start(Loopback(), [](std::shared_ptr<Exchange> ex) {
    ex->Respond(Response{.body = "path=" + ex->request().path + ";"});
  });
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  c.Send("GET /first HTTP/1.1\r\nHost: x\r\n\r\nGET /second HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string got = c.ReadUntil("path=/second;");
  const size_t first = got.find("path=/first;");
  const size_t second = got.find("path=/second;");
  ASSERT_NE(first, std::string::npos) << got;
  ASSERT_NE(second, std::string::npos) << got;
  EXPECT_LT(first, second);
}

// A handler that throws (a bug) costs its request a 500, not the process: the same connection
// and the server go on serving.
TEST(HttpServer, AHandlerThatThrowsGetsA500AndTheServerKeepsServing) {
  auto server = Server::Start(Loopback(), [](std::shared_ptr<Exchange> ex) {
    if (ex->request().path == "/throw") throw std::runtime_error("planted");
    ex->Respond(Response{.body = "fine"});
  });
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  c.Send("GET /throw HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string got = c.ReadUntil("\"internal_error\"}}");
  EXPECT_EQ(got.rfind("HTTP/1.1 500 ", 0), 0u) << got;
  c.Clear();
  c.Send("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n");
  got = c.ReadUntil("fine");
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
}

TEST(HttpServer, ConnectionCloseIsHonoured) {
  auto server = Server::Start(Loopback(), [](std::shared_ptr<Exchange> ex) {
    ex->Respond(Response{.body = "bye"});
  });
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  c.Send("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string got = c.ReadToEof();  // the server closes after the response
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  EXPECT_EQ(got.substr(got.size() - 3), "bye");
}

TEST(HttpServer, BodyAndHeaderLimitsAreAnsweredNotRead) {
  ServerOptions o = Loopback();
  o.max_body_bytes = 100;
  o.max_header_bytes = 1024;
  std::atomic<int> seen{0};
  auto server = Server::Start(o, [&](std::shared_ptr<Exchange> ex) {
    seen.fetch_add(1);
    ex->Respond(Response{});
  });
  ASSERT_TRUE(server.ok());
  {
    Client c((*server)->port());
    c.Send(Post("/", std::string(101, 'x')));
    const std::string got = c.ReadToEof();
    EXPECT_EQ(got.rfind("HTTP/1.1 413 ", 0), 0u) << got;
    EXPECT_NE(got.find("\"error\""), std::string::npos) << got;
  }
  {
    Client c((*server)->port());
    c.Send("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(2000, 'y') + "\r\n\r\n");
    const std::string got = c.ReadToEof();
    EXPECT_EQ(got.rfind("HTTP/1.1 431 ", 0), 0u) << got;
  }
  {
    Client c((*server)->port());
    c.Send("NOT HTTP AT ALL\r\n\r\n");
    const std::string got = c.ReadToEof();
    EXPECT_EQ(got.rfind("HTTP/1.1 400 ", 0), 0u) << got;
  }
  EXPECT_EQ(seen.load(), 0);
}

TEST(HttpServer, ExpectContinueGetsAnInterimResponse) {
  auto server = Server::Start(Loopback(), [](std::shared_ptr<Exchange> ex) {
    ex->Respond(Response{.body = "got " + ex->request().body});
  });
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  c.Send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_NE(c.ReadUntil("100 Continue\r\n\r\n").find("HTTP/1.1 100 Continue"), std::string::npos);
  c.Send("abc");
  EXPECT_NE(c.ReadUntil("got abc").find("got abc"), std::string::npos);
}

TEST(HttpServer, StreamsChunksInOrderAndEnds) {
  auto server = Server::Start(Loopback(), [](std::shared_ptr<Exchange> ex) {
    std::thread([ex] {
      ex->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
      for (int i = 0; i < 5; ++i) {
        EXPECT_TRUE(ex->Write("data: " + std::to_string(i) + "\n\n"));
        std::this_thread::sleep_for(1ms);
      }
      ex->End();
    }).detach();
  });
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  c.Send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string got = c.ReadUntil("0\r\n\r\n");
  EXPECT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos) << got;
  EXPECT_NE(got.find("Content-Type: text/event-stream"), std::string::npos) << got;
  size_t at = 0;
  for (int i = 0; i < 5; ++i) {
    const std::string chunk = "9\r\ndata: " + std::to_string(i) + "\n\n\r\n";
    const size_t pos = got.find(chunk, at);
    ASSERT_NE(pos, std::string::npos) << i << ": " << got;
    at = pos + chunk.size();
  }
  EXPECT_EQ(got.substr(got.size() - 5), "0\r\n\r\n");
}

TEST(HttpServer, Http10StreamEndsByClosing) {
  auto server = Server::Start(Loopback(), [](std::shared_ptr<Exchange> ex) {
    ex->StartStream(200, "text/plain");
    ex->Write("one ");
    ex->Write("two");
    ex->End();
  });
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  c.Send("GET / HTTP/1.0\r\n\r\n");
  const std::string got = c.ReadToEof();
  EXPECT_EQ(got.rfind("HTTP/1.0 200 ", 0), 0u) << got;
  EXPECT_EQ(got.find("chunked"), std::string::npos) << got;
  EXPECT_EQ(got.substr(got.size() - 7), "one two");
}

// A client that leaves while its request is being answered: OnClose runs, and later calls on the
// exchange do nothing.
TEST(HttpServer, ClientThatLeavesIsNoticedWhileTheAnswerIsPending) {
  std::mutex mu;
  std::shared_ptr<Exchange> held;
  std::atomic<bool> closed{false};
  auto server = Server::Start(Loopback(), [&](std::shared_ptr<Exchange> ex) {
    ex->OnClose([&] { closed.store(true); });
    std::lock_guard<std::mutex> lock(mu);
    held = std::move(ex);  // answered never: the client gives up first
  });
  ASSERT_TRUE(server.ok());
  {
    Client c((*server)->port());
    c.Send(Post("/slow", "{}"));
    ASSERT_TRUE(WaitFor([&] {
      std::lock_guard<std::mutex> lock(mu);
      return held != nullptr;
    }));
    EXPECT_FALSE(closed.load());
    c.Close();
  }
  EXPECT_TRUE(WaitFor([&] { return closed.load(); }));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_TRUE(held->closed());
  held->StartStream(200, "text/plain");
  EXPECT_FALSE(held->Write("too late"));
  EXPECT_TRUE(WaitFor([&] { return (*server)->open_connections() == 0; }));
}

TEST(HttpServer, OnCloseDoesNotRunForACompletedExchange) {
  std::atomic<bool> closed{false};
  auto server = Server::Start(Loopback(), [&](std::shared_ptr<Exchange> ex) {
    ex->OnClose([&] { closed.store(true); });
    ex->Respond(Response{.body = "ok"});
  });
  ASSERT_TRUE(server.ok());
  {
    Client c((*server)->port());
    c.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    c.ReadUntil("ok");
  }
  EXPECT_TRUE(WaitFor([&] { return (*server)->open_connections() == 0; }));
  EXPECT_FALSE(closed.load());
}

// A reader that stops reading: writes pile up in the socket buffers, unsent_bytes stays > 0, and
// after write_timeout the connection is dropped (OnClose) instead of buffering forever.
TEST(HttpServer, AReaderThatStopsReadingIsDropped) {
  ServerOptions o = Loopback();
  o.write_timeout = 300ms;
  std::atomic<bool> closed{false};
  std::atomic<bool> stop{false};
  std::thread writer;
  auto server = Server::Start(o, [&](std::shared_ptr<Exchange> ex) {
    ex->OnClose([&] { closed.store(true); });
    writer = std::thread([ex, &stop] {
      ex->StartStream(200, "text/plain");
      const std::string piece(64 << 10, 'z');
      // Writes only when the previous one was taken, as the OpenAI front does.
      while (!stop.load() && !ex->closed()) {
        if (ex->unsent_bytes() == 0) ex->Write(piece);
        std::this_thread::sleep_for(1ms);
      }
    });
  });
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  boost::asio::socket_base::receive_buffer_size small(4096);
  c.socket().set_option(small);
  c.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  // Never read.
  EXPECT_TRUE(WaitFor([&] { return closed.load(); }, 10'000ms));
  stop.store(true);
  writer.join();
}

TEST(HttpServer, OnWritableRunsWhenTheBufferDrains) {
  std::atomic<int> writable{0};
  auto server = Server::Start(Loopback(), [&](std::shared_ptr<Exchange> ex) {
    ex->StartStream(200, "text/plain");
    ex->Write("first");
    ex->OnWritable([&, ex] {
      writable.fetch_add(1);
      EXPECT_EQ(ex->unsent_bytes(), 0u);
      ex->Write("second");
      ex->End();
    });
  });
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  c.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string got = c.ReadUntil("0\r\n\r\n");
  EXPECT_NE(got.find("first"), std::string::npos);
  EXPECT_NE(got.find("second"), std::string::npos);
  EXPECT_EQ(writable.load(), 1);
}

TEST(HttpServer, ManyConcurrentConnectionsOnTwoThreads) {
  ServerOptions o = Loopback();
  o.threads = 2;
  std::mutex mu;
  std::vector<std::shared_ptr<Exchange>> held;
  auto server = Server::Start(o, [&](std::shared_ptr<Exchange> ex) {
    ex->StartStream(200, "text/event-stream");
    std::lock_guard<std::mutex> lock(mu);
    held.push_back(std::move(ex));
  });
  ASSERT_TRUE(server.ok());
  constexpr int kClients = 300;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<Client>((*server)->port()));
    clients.back()->Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return held.size() == kClients;
  }));
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& ex : held) {
      ex->Write("data: x\n\n");
      ex->End();
    }
  }
  for (auto& c : clients) {
    EXPECT_NE(c->ReadUntil("0\r\n\r\n").find("data: x"), std::string::npos);
  }
}

TEST(HttpServer, StopClosesOpenConnectionsAndHeldExchangesStaySafe) {
  std::shared_ptr<Exchange> held;
  std::atomic<bool> closed{false};
  std::mutex mu;
  auto server = Server::Start(Loopback(), [&](std::shared_ptr<Exchange> ex) {
    ex->OnClose([&] { closed.store(true); });
    std::lock_guard<std::mutex> lock(mu);
    held = std::move(ex);
  });
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  c.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return held != nullptr;
  }));
  (*server)->Stop();
  EXPECT_TRUE(closed.load());
  server->reset();
  std::lock_guard<std::mutex> lock(mu);
  held->Respond(Response{});  // does nothing, does not crash
  EXPECT_TRUE(held->closed());
  held.reset();
}

TEST(HttpServer, BadListenAddressesAreRefused) {
  for (const char* bad : {"nocolon", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:x"}) {
    ServerOptions o;
    o.listen = bad;
    auto server = Server::Start(o, [](std::shared_ptr<Exchange>) {});
    EXPECT_FALSE(server.ok()) << bad;
  }
  auto first = Server::Start(Loopback(), [](std::shared_ptr<Exchange>) {});
  ASSERT_TRUE(first.ok());
  ServerOptions same;
  same.listen = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = Server::Start(same, [](std::shared_ptr<Exchange>) {});
  EXPECT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace astr::http
