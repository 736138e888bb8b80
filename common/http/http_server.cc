#include "common/http/http_server.h"

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/base/logging.h"

namespace astr::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

// Bytes the disconnect watcher reads ahead (a pipelined next request) before it stops reading.
constexpr size_t kMaxReadAhead = 64 << 10;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string ErrorBody(std::string_view message) {
  // The shape of OpenAI's errors, which every JSON client of this server understands; the
  // message is ours and has no quotes or backslashes.
  return std::string("{\"error\":{\"message\":\"") + std::string(message) +
         "\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}";
}

// A TLS context from the options' files, or null when they name none.
StatusOr<std::shared_ptr<ssl::context>> MakeTlsContext(const ServerOptions& o) {
  if (o.tls_cert_file.empty() && o.tls_key_file.empty()) {
    if (!o.tls_client_ca_file.empty()) {
      return InvalidArgumentError("a client CA needs a certificate and key to serve");
    }
    return std::shared_ptr<ssl::context>();
  }
  if (o.tls_cert_file.empty() || o.tls_key_file.empty()) {
    return InvalidArgumentError("the TLS certificate and key go together: give both");
  }
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  beast::error_code ec;
  ctx->use_certificate_chain_file(o.tls_cert_file, ec);
  if (ec)
    return InvalidArgumentError(o.tls_cert_file + ": not a PEM certificate chain (" + ec.message() +
                                ")");
  ctx->use_private_key_file(o.tls_key_file, ssl::context::pem, ec);
  if (ec)
    return InvalidArgumentError(o.tls_key_file + ": not a PEM private key (" + ec.message() + ")");
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return InvalidArgumentError(o.tls_key_file + ": the key does not belong to " + o.tls_cert_file);
  }
  if (!o.tls_client_ca_file.empty()) {
    ctx->load_verify_file(o.tls_client_ca_file, ec);
    if (ec)
      return InvalidArgumentError(o.tls_client_ca_file + ": not a PEM CA bundle (" + ec.message() +
                                  ")");
    ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  return ctx;
}

}  // namespace

std::string_view ReasonPhrase(int status) {
  const std::string_view r = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  return r.empty() ? std::string_view("Unknown") : r;
}

const std::string* Request::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return &v;
  }
  return nullptr;
}

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  ServerOptions options;
  Handler handler;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::optional<tcp::acceptor> acceptor;
  // The acceptor's handlers and its close run here, one at a time (a close on another thread
  // while the next accept starts would race on the acceptor).
  asio::strand<asio::io_context::executor_type> accept_strand = asio::make_strand(io);
  std::vector<std::thread> threads;
  std::mutex mu;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;  // mu
  std::atomic<int64_t> open{0};
  std::atomic<int64_t> busy{0};  // connections answering a request
  std::atomic<bool> stopped{false};
  std::shared_ptr<ssl::context> tls;  // mu: what new connections use; null: plaintext

  std::shared_ptr<ssl::context> Tls() {
    std::lock_guard<std::mutex> lock(mu);
    return tls;
  }
  void Accept();
  void Register(const std::shared_ptr<Connection>& c);
  void Unregister(Connection* c);
};

// One client connection: reads requests one at a time, writes their responses. Socket work runs
// on the connection's strand; the output state shared with Exchange callers is under mu_.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<Server::Impl> server, tcp::socket socket,
             std::shared_ptr<ssl::context> tls)
      : server_(std::move(server)),
        strand_(asio::make_strand(server_->io)),
        socket_(std::move(socket)),
        tls_context_(std::move(tls)),
        read_timer_(strand_),
        write_timer_(strand_) {
    beast::error_code ec;
    const tcp::endpoint remote = socket_.remote_endpoint(ec);
    if (!ec) peer_ = remote.address().to_string() + ":" + std::to_string(remote.port());
    socket_.set_option(tcp::no_delay(true), ec);
    if (tls_context_ != nullptr) tls_.emplace(socket_, *tls_context_);
  }

  void Start() {
    asio::dispatch(strand_, [self = shared_from_this()] {
      if (!self->tls_) return self->ReadHeader(/*first=*/true);
      // The handshake counts toward the first request's read timeout.
      self->ArmReadTimer(self->server_->options.read_timeout);
      self->tls_->async_handshake(ssl::stream_base::server,
                                  asio::bind_executor(self->strand_, [self](beast::error_code ec) {
                                    if (ec) {
                                      // A plaintext client, a client certificate the CA did not
                                      // sign, no common protocol version: the connection ends here.
                                      VLOG(1) << "http: TLS handshake with " << self->peer_
                                              << " failed: " << ec.message();
                                      return self->DoClose();
                                    }
                                    self->ReadHeader(/*first=*/true);
                                  }));
    });
  }

  // Closes from any thread.
  void CloseFromOutside() {
    asio::post(strand_, [self = shared_from_this()] { self->DoClose(); });
  }

  // --- Exchange side (any thread) ---
  void Respond(uint64_t id, Response r) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (id != exchange_id_ || started_ || closed_) return;
      started_ = true;
      done_ = true;
      std::string head = Head(r.status, r.content_type, r.headers, r.body.size(), false);
      out_ += head;
      out_ += r.body;
    }
    PostFlush();
  }

  void StartStream(uint64_t id, int status, const std::string& content_type,
                   const Headers& headers) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (id != exchange_id_ || started_ || closed_) return;
      started_ = true;
      chunked_ = version_ >= 11;
      if (!chunked_) keep_alive_ = false;
      out_ += Head(status, content_type, headers, 0, true);
    }
    PostFlush();
  }

  bool Write(uint64_t id, std::string_view data) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (id != exchange_id_ || closed_) return false;
      if (!started_ || done_) return false;
      if (data.empty()) return true;
      if (chunked_) {
        char size[24];
        std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
        out_ += size;
        out_ += data;
        out_ += "\r\n";
      } else {
        out_ += data;
      }
    }
    PostFlush();
    return true;
  }

  void End(uint64_t id) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (id != exchange_id_ || closed_ || !started_ || done_) return;
      done_ = true;
      if (chunked_) out_ += "0\r\n\r\n";
    }
    PostFlush();
  }

  size_t unsent(uint64_t id) const {
    std::lock_guard<std::mutex> lock(mu_);
    return out_.size() + in_flight_bytes_;
  }

  void OnWritable(uint64_t id, std::function<void()> cb) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (id != exchange_id_ || closed_) return;
      on_writable_ = std::move(cb);
    }
    PostFlush();
  }

  void OnClose(uint64_t id, std::function<void()> cb) {
    bool now = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (id != exchange_id_) return;  // that exchange completed: it never closes early
      if (closed_) {
        now = true;
      } else {
        on_close_ = std::move(cb);
      }
    }
    if (now) asio::post(strand_, std::move(cb));
  }

  bool closed(uint64_t id) const {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }

 private:
  std::string Head(int status, const std::string& content_type, const Headers& headers,
                   size_t length, bool stream) {
    std::string h = "HTTP/1.1 " + std::to_string(status) + " " +
                    std::string(ReasonPhrase(status)) + "\r\n";
    if (version_ < 11) h = "HTTP/1.0 " + h.substr(9);
    h += "Server: " + server_->options.server_name + "\r\n";
    if (!content_type.empty()) h += "Content-Type: " + content_type + "\r\n";
    if (!stream) {
      h += "Content-Length: " + std::to_string(length) + "\r\n";
    } else if (chunked_) {
      h += "Transfer-Encoding: chunked\r\n";
    }
    for (const auto& [k, v] : headers) h += k + ": " + v + "\r\n";
    h += keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    h += "\r\n";
    return h;
  }

  void PostFlush() {
    asio::post(strand_, [self = shared_from_this()] { self->Flush(); });
  }

  // --- strand ---
  // Runs `f` on the connection's byte stream: the TLS stream, or the socket itself.
  template <typename F>
  void WithStream(F&& f) {
    if (tls_) {
      f(*tls_);
    } else {
      f(socket_);
    }
  }

  void ReadHeader(bool first) {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(server_->options.max_header_bytes));
    parser_->body_limit(server_->options.max_body_bytes);
    ArmReadTimer(first ? server_->options.read_timeout : server_->options.idle_timeout);
    WithStream([&](auto& stream) {
      bhttp::async_read_header(
          stream, buffer_, *parser_,
          asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
            self->OnHeader(ec);
          }));
    });
  }

  void ArmReadTimer(std::chrono::milliseconds timeout) {
    read_timer_.expires_after(timeout);
    read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;  // cancelled
      self->DoClose();
    });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    ArmReadTimer(server_->options.read_timeout);
    const auto& req = parser_->get();
    // curl and others wait for this before sending a large body.
    auto expect = req.find(bhttp::field::expect);
    if (expect != req.end() && beast::iequals(expect->value(), "100-continue")) {
      auto msg = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      WithStream([&](auto& stream) {
        asio::async_write(stream, asio::buffer(*msg),
                          asio::bind_executor(strand_, [self = shared_from_this(), msg](
                                                           beast::error_code ec2, size_t) {
                            if (ec2) return self->DoClose();
                            self->ReadBody();
                          }));
      });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    if (closed_) return;
    WithStream([&](auto& stream) {
      bhttp::async_read(
          stream, buffer_, *parser_,
          asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
            self->OnBody(ec);
          }));
    });
  }

  void OnReadError(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset) {
      return DoClose();
    }
    int status = 400;
    std::string message = "malformed HTTP request: " + ec.message();
    if (ec == bhttp::error::body_limit) {
      status = 413;
      message = "request body larger than the limit of " +
                std::to_string(server_->options.max_body_bytes) + " bytes";
    } else if (ec == bhttp::error::header_limit) {
      status = 431;
      message = "request headers larger than the limit of " +
                std::to_string(server_->options.max_header_bytes) + " bytes";
    }
    read_timer_.cancel();
    // Answer and close: the rest of the request is not read.
    {
      std::lock_guard<std::mutex> lock(mu_);
      keep_alive_ = false;
      started_ = true;
      done_ = true;
      if (!has_exchange_) server_->busy.fetch_add(1);
      has_exchange_ = true;
      const std::string body = ErrorBody(message);
      out_ += Head(status, "application/json", {}, body.size(), false);
      out_ += body;
    }
    Flush();
  }

  void OnBody(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    read_timer_.cancel();
    auto& msg = parser_->get();
    Request request;
    request.method = std::string(msg.method_string());
    request.target = std::string(msg.target());
    const size_t q = request.target.find('?');
    request.path = request.target.substr(0, q);
    if (q != std::string::npos) request.query = request.target.substr(q + 1);
    for (const auto& field : msg) {
      request.headers.emplace_back(Lower(field.name_string()), std::string(field.value()));
    }
    request.body = std::move(msg.body());
    request.peer = peer_;
    request.version = static_cast<int>(msg.version());
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = ++exchange_id_;
      version_ = request.version;
      keep_alive_ = msg.keep_alive();
      started_ = done_ = chunked_ = false;
      if (!has_exchange_) server_->busy.fetch_add(1);
      has_exchange_ = true;
    }
    parser_.reset();
    Watch();  // a client that goes away while we answer is noticed now
    auto exchange = std::make_shared<Exchange>(shared_from_this(), id, std::move(request));
    try {
      server_->handler(exchange);
    } catch (const std::exception& e) {
      // A bug in the handler: this request gets a 500 (ignored if it was answered already), the
      // server keeps serving.
      LOG(ERROR) << "HTTP handler threw: " << e.what();
      Response r;
      r.status = 500;
      r.body = "{\"error\":{\"message\":\"internal error\",\"type\":\"internal_error\"}}";
      exchange->Respond(std::move(r));
    }
  }

  // Keeps a read pending while a response is produced: EOF or an error means the client left.
  void Watch() {
    if (watching_ || closed_ || buffer_.size() >= kMaxReadAhead) return;
    watching_ = true;
    WithStream([&](auto& stream) {
      stream.async_read_some(
          buffer_.prepare(4096),
          asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t n) {
            self->OnWatched(ec, n);
          }));
    });
  }

  void OnWatched(beast::error_code ec, size_t n) {
    watching_ = false;
    buffer_.commit(n);
    if (read_next_ && (!ec || ec == asio::error::operation_aborted)) {
      // The exchange finished and stopped the watcher (FinishExchange): parse the next request,
      // from what was read ahead and what comes.
      read_next_ = false;
      return ReadHeader(false);
    }
    if (ec) {
      // The client closed after the whole response was queued, before the last write's
      // completion ran: the response did reach it; the write's completion ends the exchange.
      bool last_write_pending = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_write_pending = writing_ && done_ && out_.empty();
      }
      if (last_write_pending) {
        peer_gone_ = true;
        return;
      }
      return DoClose();
    }
    Watch();
  }

  void Flush() {
    if (closed_ || writing_) return;
    std::function<void()> writable;
    bool finished = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (out_.empty()) {
        if (done_ && has_exchange_) {
          finished = true;
        } else if (on_writable_) {
          writable = std::move(on_writable_);
          on_writable_ = nullptr;
        }
      } else {
        writing_buf_.swap(out_);
        out_.clear();
        in_flight_bytes_ = writing_buf_.size();
      }
    }
    if (finished) return FinishExchange();
    if (writable) return writable();
    if (writing_buf_.empty()) return;
    writing_ = true;
    write_timer_.expires_after(server_->options.write_timeout);
    write_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      LOG(WARNING) << "http: " << self->peer_ << " took no data for "
                   << self->server_->options.write_timeout.count() << " ms: closing";
      self->DoClose();
    });
    WithStream([&](auto& stream) {
      asio::async_write(
          stream, asio::buffer(writing_buf_),
          asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
            self->writing_ = false;
            self->write_timer_.cancel();
            {
              std::lock_guard<std::mutex> lock(self->mu_);
              self->in_flight_bytes_ = 0;
            }
            self->writing_buf_.clear();
            if (ec) return self->DoClose();
            if (self->peer_gone_) return self->EndAfterPeerLeft();
            self->Flush();
          }));
    });
  }

  // The last write completed after the client had closed its side (OnWatched): the exchange is
  // complete (no OnClose), the connection ends.
  void EndAfterPeerLeft() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (out_.empty() && done_ && has_exchange_) {
        has_exchange_ = false;
        server_->busy.fetch_sub(1);
        ++exchange_id_;
        on_close_ = nullptr;
        on_writable_ = nullptr;
      }
    }
    DoClose();
  }

  // The response is written: the next request, or the end of the connection.
  void FinishExchange() {
    bool keep;
    {
      std::lock_guard<std::mutex> lock(mu_);
      keep = keep_alive_ && !server_->stopped.load();
      if (has_exchange_) server_->busy.fetch_sub(1);
      has_exchange_ = false;
      ++exchange_id_;  // the finished exchange's handle does nothing from now on
      on_close_ = nullptr;
      on_writable_ = nullptr;
    }
    if (!keep) {
      if (tls_ && !watching_) {
        // close_notify first, so the client can tell the end of the body from a cut connection
        // (bounded by the read timer).
        ArmReadTimer(server_->options.write_timeout);
        tls_->async_shutdown(asio::bind_executor(
            strand_, [self = shared_from_this()](beast::error_code) { self->DoClose(); }));
        return;
      }
      beast::error_code ec;
      socket_.shutdown(tcp::socket::shutdown_send, ec);
      return DoClose();
    }
    if (watching_) {
      // Only one read may be pending: stop the watcher; its completion starts the next read
      // (the next request may already be in buffer_, read ahead while this one was answered).
      read_next_ = true;
      beast::error_code ec;
      socket_.cancel(ec);
      return;
    }
    ReadHeader(false);
  }

  void DoClose() {
    std::function<void()> on_close;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      if (has_exchange_) {
        on_close = std::move(on_close_);
        server_->busy.fetch_sub(1);
        has_exchange_ = false;
      }
      on_close_ = nullptr;
      on_writable_ = nullptr;
      out_.clear();
    }
    read_timer_.cancel();
    write_timer_.cancel();
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    server_->Unregister(this);
    if (on_close) on_close();
  }

  // Declared first: destroyed last, so the io_context outlives the socket and timers.
  std::shared_ptr<Server::Impl> server_;
  asio::strand<asio::io_context::executor_type> strand_;
  tcp::socket socket_;
  const std::shared_ptr<ssl::context> tls_context_;  // outlives tls_
  std::optional<ssl::stream<tcp::socket&>> tls_;     // HTTPS: the TLS layer over socket_
  asio::steady_timer read_timer_;
  asio::steady_timer write_timer_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::string peer_;
  // Strand only.
  bool writing_ = false;
  bool watching_ = false;
  bool peer_gone_ = false;  // the client closed while the response's last write was in flight
  bool read_next_ = false;
  std::string writing_buf_;

  mutable std::mutex mu_;
  // Guarded by mu_.
  uint64_t exchange_id_ = 0;
  bool has_exchange_ = false;  // a request is being answered
  bool started_ = false;       // its head is queued
  bool done_ = false;          // its last byte is queued
  bool chunked_ = false;
  bool keep_alive_ = true;
  int version_ = 11;
  bool closed_ = false;
  std::string out_;
  size_t in_flight_bytes_ = 0;
  std::function<void()> on_writable_;
  std::function<void()> on_close_;

  friend class Exchange;
};

// --- Exchange ---

Exchange::Exchange(std::shared_ptr<Connection> connection, uint64_t id, Request request)
    : connection_(std::move(connection)), id_(id), request_(std::move(request)) {}
Exchange::~Exchange() = default;

void Exchange::Respond(Response response) {
  connection_->Respond(id_, std::move(response));
}
void Exchange::StartStream(int status, std::string content_type, Headers headers) {
  connection_->StartStream(id_, status, content_type, headers);
}
bool Exchange::Write(std::string data) {
  return connection_->Write(id_, data);
}
void Exchange::End() { connection_->End(id_); }
size_t Exchange::unsent_bytes() const {
  return connection_->unsent(id_);
}
void Exchange::OnWritable(std::function<void()> callback) {
  connection_->OnWritable(id_, std::move(callback));
}
void Exchange::OnClose(std::function<void()> callback) {
  connection_->OnClose(id_, std::move(callback));
}
bool Exchange::closed() const { return connection_->closed(0); }

// --- Server ---

void Server::Impl::Accept() {
  acceptor->async_accept(
      asio::make_strand(io),
      asio::bind_executor(
          accept_strand, [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
            if (ec) {
              if (ec == asio::error::operation_aborted || self->stopped.load()) return;
              LOG(WARNING) << "http: accept failed: " << ec.message();
            } else if (self->open.load() >= self->options.max_connections) {
              beast::error_code ignored;
              socket.close(ignored);
            } else {
              auto c = std::make_shared<Connection>(self, std::move(socket), self->Tls());
              self->Register(c);
              c->Start();
            }
            if (!self->stopped.load()) self->Accept();
          }));
}

void Server::Impl::Register(const std::shared_ptr<Connection>& c) {
  std::lock_guard<std::mutex> lock(mu);
  connections.emplace(c.get(), c);
  open.fetch_add(1);
}

void Server::Impl::Unregister(Connection* c) {
  std::lock_guard<std::mutex> lock(mu);
  if (connections.erase(c) > 0) open.fetch_sub(1);
}

StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options, Handler handler) {
  const size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos || colon + 1 >= options.listen.size()) {
    return InvalidArgumentError("'" + options.listen + "' is not HOST:PORT");
  }
  std::string host = options.listen.substr(0, colon);
  const std::string port_text = options.listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = -1;
  try {
    size_t used = 0;
    port = std::stoi(port_text, &used);
    if (used != port_text.size()) port = -1;
  } catch (...) {
  }
  if (port < 0 || port > 65535) {
    return InvalidArgumentError("'" + options.listen + "': the port must be 0..65535");
  }
  if (options.threads < 1) return InvalidArgumentError("threads must be >= 1");

  auto tls = MakeTlsContext(options);
  if (!tls.ok()) return tls.status();
  auto impl = std::make_shared<Impl>();
  impl->options = std::move(options);
  impl->handler = std::move(handler);
  impl->tls = std::move(*tls);
  beast::error_code ec;
  tcp::resolver resolver(impl->io);
  auto endpoints = resolver.resolve(host.empty() ? "0.0.0.0" : host, std::to_string(port),
                                    tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return InvalidArgumentError("'" + impl->options.listen + "': cannot resolve '" + host +
                                "': " + ec.message());
  }
  const tcp::endpoint endpoint = *endpoints.begin();
  impl->acceptor.emplace(impl->io);
  impl->acceptor->open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor->bind(endpoint, ec);
  if (!ec) impl->acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return UnavailableError("cannot listen on " + impl->options.listen + ": " + ec.message());
  }
  std::unique_ptr<Server> server(new Server());
  server->port_ = impl->acceptor->local_endpoint().port();
  impl->work.emplace(asio::make_work_guard(impl->io));
  impl->Accept();
  for (int i = 0; i < impl->options.threads; ++i) {
    impl->threads.emplace_back([io = &impl->io] { io->run(); });
  }
  server->impl_ = std::move(impl);
  return server;
}

void Server::Stop(std::chrono::milliseconds grace) {
  if (impl_ == nullptr || impl_->stopped.exchange(true)) return;
  asio::post(impl_->accept_strand, [impl = impl_] {
    beast::error_code ec;
    impl->acceptor->close(ec);
  });
  // Responses being written get `grace` to finish (their connections close after them).
  const auto until = std::chrono::steady_clock::now() + grace;
  while (impl_->busy.load() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& [raw, weak] : impl_->connections) {
      if (auto c = weak.lock()) open.push_back(std::move(c));
    }
  }
  for (auto& c : open) c->CloseFromOutside();
  open.clear();
  impl_->work.reset();
  // Closing every socket ends every operation; what is left are handlers posted by exchanges.
  for (int i = 0; i < 200 && impl_->open.load() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  impl_->io.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  // Runs what is still queued (handlers of closed connections, which own them), so that no
  // connection is kept alive by a handler that never runs.
  impl_->io.restart();
  impl_->io.poll();
}

Server::~Server() { Stop(); }

int64_t Server::open_connections() const { return impl_ == nullptr ? 0 : impl_->open.load(); }

Status Server::ReloadTls() {
  if (impl_ == nullptr) return FailedPreconditionError("the server is not running");
  auto tls = MakeTlsContext(impl_->options);
  if (!tls.ok()) return tls.status();
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->tls = std::move(*tls);
  return OkStatus();
}

}  // namespace astr::http
