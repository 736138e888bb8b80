// An event-driven HTTP/1.1 server on Boost.Beast/Asio: a few I/O threads hold any number of
// connections (no thread per connection or per stream). It parses requests (size limits, idle
// and read timeouts), hands each one to a handler as an Exchange, and writes what the handler
// answers: a whole response, or a stream (chunked transfer encoding; SSE) fed piece by piece.
//
// Flow control and disconnects: a stream's writes go out one at a time; what the handler writes
// meanwhile waits in the exchange's buffer (unsent_bytes), and the handler is told when the buffer
// has drained (OnWritable) so that it can produce the next piece then instead of buffering without
// bound. A write the client does not take for write_timeout closes the connection. While a
// response is being produced the server keeps reading the socket, so a client that goes away
// (EOF, reset) is noticed at once: the exchange's OnClose callback runs, and the handler cancels
// its work. Every method of Exchange is thread-safe and may be called after the connection closed
// (it then does nothing).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/status.h"

namespace astr::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct ServerOptions {
  std::string listen;  // HOST:PORT; port 0 picks a free one
  int threads = 2;     // I/O threads
  // Largest request head (request line + headers); beyond it 431.
  size_t max_header_bytes = 16 << 10;
  // Largest request body; beyond it 413 (the body is not read).
  size_t max_body_bytes = 8 << 20;
  // A connection with no request in progress is closed after this long (keep-alive idle).
  std::chrono::milliseconds idle_timeout{60'000};
  // A request whose head and body take longer than this to arrive is answered 408 and closed
  // (slow-loris senders).
  std::chrono::milliseconds read_timeout{30'000};
  // A write the client does not take for this long closes the connection (a reader that stopped
  // reading is dropped, not buffered for).
  std::chrono::milliseconds write_timeout{30'000};
  // Connections beyond this are accepted and closed at once.
  int64_t max_connections = 8192;
  // Value of the Server header.
  std::string server_name = "astr";
  // HTTPS: the PEM certificate chain and private key served (both or neither); with a CA bundle,
  // clients must present a certificate it signed (mutual TLS). Re-read by Server::ReloadTls.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
};

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // target without the query
  std::string query;   // after '?', without it
  Headers headers;     // names lower-cased, in arrival order
  std::string body;
  std::string peer;  // "HOST:PORT" of the client
  int version = 11;  // 10 or 11

  // The first header of that (lower-case) name, or null.
  const std::string* Header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  Headers headers;  // extra headers (Retry-After, ...)
  std::string body;
};

class Connection;

// One request and its response.
class Exchange {
 public:
  Exchange(std::shared_ptr<Connection> connection, uint64_t id, Request request);
  ~Exchange();
  const Request& request() const { return request_; }

  // Sends a whole response (once; ignored after the first Respond / StartStream).
  void Respond(Response response);
  // Starts a streamed response: the head now, the body by Write, ended by End. HTTP/1.1 clients
  // get chunked transfer encoding; HTTP/1.0 clients a body ended by closing the connection.
  void StartStream(int status, std::string content_type, Headers headers = {});
  // Appends to the stream (queued behind a write in flight). False once the connection is gone.
  bool Write(std::string data);
  // Ends the stream (after what is queued has been written).
  void End();

  // Bytes written by Write and not yet taken by the socket.
  size_t unsent_bytes() const;
  // `callback` runs once (on an I/O thread) the next time the unsent buffer is empty (at once, on
  // an I/O thread, when it already is). Set it again for the next time.
  void OnWritable(std::function<void()> callback);
  // `callback` runs once (on an I/O thread) when the connection closes before the response has
  // been completely written: the client went away, a write timed out, or the server stopped.
  // It runs at once (on an I/O thread) when that has already happened.
  void OnClose(std::function<void()> callback);
  // True once the connection is gone (the response can no longer reach the client).
  bool closed() const;

 private:
  std::shared_ptr<Connection> connection_;
  const uint64_t id_;  // which exchange of the connection: a finished one's calls do nothing
  Request request_;
};

using Handler = std::function<void(std::shared_ptr<Exchange>)>;

class Server {
 public:
  // Binds, listens and starts the I/O threads. INVALID_ARGUMENT for a malformed address,
  // UNAVAILABLE when it cannot bind (address in use, not local).
  static StatusOr<std::unique_ptr<Server>> Start(ServerOptions options, Handler handler);
  // Stop() if not called.
  ~Server();

  // The bound port.
  int port() const { return port_; }
  // Stops accepting, gives the responses being written up to `grace` to complete, then closes
  // every connection (their exchanges' OnClose run) and joins the I/O threads. Exchanges the
  // handler still holds stay valid and do nothing.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0));
  // Connections open now.
  int64_t open_connections() const;
  // Reads the TLS files of the options again; new connections use them, open ones keep theirs.
  // On error (the message names the file) the old certificate stays.
  Status ReloadTls();

  struct Impl;

 private:
  Server() = default;
  std::shared_ptr<Impl> impl_;  // shared with the connections, which outlive Stop
  int port_ = 0;
};

// "Not Found" for 404, etc.; "Unknown" for a code it does not know.
std::string_view ReasonPhrase(int status);

}  // namespace astr::http
