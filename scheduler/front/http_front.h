// The OpenAI-compatible HTTP API of astr-scheduler (docs/http.md): /v1/completions,
// /v1/chat/completions (SSE when stream), /v1/models, /tokenize, /detokenize, /health and
// /metrics, on common/http's event-driven server. It calls GenerateService in-process, the same
// admission, validation, tokenization, templates, stop strings and detokenizer as the gRPC
// front; openai_api.h turns its requests and output into OpenAI's JSON.
//
// No request holds a thread: parsing and admission run on the front's task pool, output reaches a
// request through its scheduler channel's listener, which schedules a pump on the pool; a stream
// writes when the client has taken the previous write (while it has not, output accumulates in
// one delta per choice). A client that goes away (or stops reading for the server's write
// timeout) has its requests cancelled, queued or running, and their KV pages freed. Streams that
// have produced nothing for ping_interval get an SSE comment (": ping") so proxies and clients
// keep the connection.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/http/http_server.h"
#include "common/metrics/registry.h"
#include "scheduler/front/generate_service.h"
#include "scheduler/front/task_pool.h"
#include "scheduler/front/tool_calls.h"

namespace astr::front {

struct HttpFrontOptions {
  http::ServerOptions server;  // listen address, I/O threads, size limits, timeouts
  // The model name /v1/models lists and requests must name (empty: the served model's name).
  std::string served_model_name;
  std::chrono::milliseconds ping_interval{10'000};
  int threads = 4;  // task pool: parsing, admission, response assembly
  // Chat tool calls (docs/tools.md): "auto" (the chat template's format), "hermes",
  // "llama3_json", "mistral" or "none" (validated by the caller).
  std::string tool_call_parser = "auto";
  // Renders GET /metrics (Prometheus text format 0.0.4); null: 404.
  std::function<std::string()> metrics;
  // Where the front adds astr:http_requests_total{route,code} and astr:http_open_streams; null:
  // none.
  metrics::Registry* registry = nullptr;
};

class HttpGeneration;
namespace openai {
class TokenTexts;
}

class HttpFront {
 public:
  // `service` must outlive the front.
  HttpFront(GenerateService* service, HttpFrontOptions options);
  // Stop() if not called.
  ~HttpFront();

  // Binds and starts serving (the error names the address).
  Status Start();
  int port() const;
  // Reads the HTTPS certificate, key and client CA again (SIGHUP); http::Server::ReloadTls.
  Status ReloadTls() { return server_->ReloadTls(); }
  // Stops accepting and closes every connection (their requests are cancelled), then waits for
  // the pool's work to finish.
  void Stop();

  // Generations open now (admitted or being admitted).
  int64_t open_generations() const;

  // Internal, for HttpGeneration.
  GenerateService* service() const { return service_; }
  TaskPool* pool() { return pool_.get(); }
  const std::string& model_name() const { return model_name_; }
  // The format tool calls of tool_choice auto are parsed in (HttpFrontOptions::tool_call_parser).
  ToolCallFormat tool_format() const { return tool_format_; }
  const openai::TokenTexts& token_texts() const { return *token_texts_; }
  void Register(const std::shared_ptr<HttpGeneration>& g);
  void Unregister(const HttpGeneration* g);
  // Counts one answered request (astr:http_requests_total).
  void CountResponse(const char* route, int status);

 private:
  void Handle(std::shared_ptr<http::Exchange> exchange);
  // Answers one counted response on `to`.
  using Reply = std::function<void(const std::shared_ptr<http::Exchange>& to, http::Response)>;
  // /tokenize or /detokenize (on the pool).
  void Tokenize(const std::shared_ptr<http::Exchange>& ex, bool tokenize, const Reply& reply);
  // Sends ": ping" on streams idle for ping_interval.
  void Ping();

  GenerateService* const service_;
  HttpFrontOptions options_;
  std::string model_name_;
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;
  int64_t max_model_len_ = 0;
  int64_t started_unix_ = 0;
  std::unique_ptr<const openai::TokenTexts> token_texts_;
  std::unique_ptr<TaskPool> pool_;
  std::unique_ptr<http::Server> server_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by mu_
  // Owns every open generation (a generation unregisters itself when its response ends).
  std::unordered_map<const HttpGeneration*, std::shared_ptr<HttpGeneration>> open_;  // mu_
  std::thread pinger_;
  metrics::CounterFamily* requests_ = nullptr;
};

}  // namespace astr::front
