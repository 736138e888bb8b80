#include "scheduler/front/http_front.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "common/base/logging.h"
#include "scheduler/front/call_life.h"
#include "scheduler/front/openai_api.h"

namespace astr::front {

namespace oa = openai;
using json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

namespace {

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

http::Response ErrorResponse(const oa::ApiError& e) {
  http::Response r;
  r.status = e.status;
  r.body = e.Json();
  if (e.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
  return r;
}

oa::ApiError Error(int status, std::string message, std::string type = "invalid_request_error",
                   std::string param = "", std::string code = "") {
  oa::ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

oa::ApiError ModelNotFound(const std::string& model) {
  return Error(404, "The model '" + model + "' does not exist", "invalid_request_error", "model",
               "model_not_found");
}

// The answer to a request whose handling threw: a bug, logged with what it said; the client gets a
// 500 (the message names no more than the exception's text) and the server keeps serving.
oa::ApiError InternalError(const char* what) {
  LOG(ERROR) << "internal error answering an HTTP request: " << what;
  return Error(500, std::string("internal error: ") + what, "internal_error");
}
}  // namespace

// One completions or chat request: the call's life (call_life.h: admission, pump,
// back-pressure, stalls, cancellation) plus the OpenAI encoding of it. Owned by the front's
// registry until its response ends (and by the pool tasks running it); the exchange's and the
// calls' callbacks hold weak pointers.
class HttpGeneration final : public CallLife {
 public:
  HttpGeneration(HttpFront* front, std::shared_ptr<http::Exchange> exchange, oa::Endpoint endpoint)
      : CallLife(front->service(), front->pool(), exchange->request().peer),
        front_(front),
        exchange_(std::move(exchange)),
        endpoint_(endpoint),
        route_(endpoint == oa::Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions") {}

  // After a successful Open: registers with the front and starts the admission.
  void Start() {
    auto self = std::static_pointer_cast<HttpGeneration>(shared_from_this());
    front_->Register(self);
    std::weak_ptr<HttpGeneration> weak = self;
    exchange_->OnClose([weak] {
      if (auto g = weak.lock()) g->ClientGone();
    });
    Begin();
  }

  // The front's timer: keeps an idle stream alive with a comment line, and applies the stall
  // rule while the client leaves a write unread.
  void PingIfIdle(SteadyClock::time_point now, std::chrono::milliseconds interval) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!streaming_ || finished_) return;
    if (exchange_->unsent_bytes() > 0) {
      if (CheckStallLocked(sched::Clock::now())) FinishLocked();
      return;
    }
    if (now - last_write_ < interval) return;
    exchange_->Write(": ping\n\n");
    last_write_ = now;
  }

 private:
  // Pool: parse, check the model, choose the tool-call format.
  std::optional<Admission> Decode() override {
    const http::Request& http_req = exchange_->request();
    const std::string* rid = http_req.Header("x-request-id");
    oa::ParseResult parsed = oa::ParseRequest(endpoint_, http_req.body, rid ? *rid : "");
    if (!parsed.request) {
      Fail(parsed.error);
      return std::nullopt;
    }
    req_ = std::move(*parsed.request);
    if (!req_.model.empty() && req_.model != front_->model_name()) {
      Fail(ModelNotFound(req_.model));
      return std::nullopt;
    }
    // Tool calls are parsed from the output in the model's format (auto), or in the form the
    // constraint of a required / named choice gives it.
    using TC = oa::ApiRequest::ToolChoice;
    req_.tool_format = req_.tool_choice == TC::kRequired ? ToolCallFormat::kForced
                       : req_.tool_choice == TC::kNamed  ? ToolCallFormat::kNamed
                       : req_.tool_choice == TC::kAuto   ? front_->tool_format()
                                                         : ToolCallFormat::kNone;
    if (req_.tool_format == ToolCallFormat::kMistral) {
      // Its [TOOL_CALLS] marker is a special token: keep it in the text for the parser.
      for (v1::GenerateRequest& g : req_.prompts)
        g.mutable_sampling()->set_skip_special_tokens(false);
    }
    Admission admission;
    admission.prompts = req_.prompts;  // every prompt has the same constraint
    return admission;
  }

  // Every prompt admitted: the response's context, and the stream's start.
  void AdmittedLocked() override {
    const int32_t n = calls_[0]->built().sched.n;
    n_ = n;
    const bool chat = endpoint_ == oa::Endpoint::kChat;
    const std::string& id0 = calls_[0]->request_id();
    ctx_.texts = &front_->token_texts();
    ctx_.request = &req_;
    ctx_.id = (chat ? "chatcmpl-" : "cmpl-") + (req_.request_id.empty() ? id0 : req_.request_id);
    ctx_.model = front_->model_name();
    ctx_.created = UnixNow();
    ctx_.seed = calls_[0]->built().seed;
    for (size_t p = 0; p < calls_.size(); ++p) {
      oa::PromptInfo info;
      info.ids = calls_[p]->built().sched.prompt;
      if (req_.echo) {
        const v1::GenerateRequest& g = req_.prompts[p];
        info.text =
            g.has_text() ? g.text() : front_->service()->model().tokenizer->Decode(info.ids, false);
      }
      prompts_.push_back(std::move(info));
      usage_.prompt_tokens += static_cast<int64_t>(calls_[p]->built().sched.prompt.size());
    }
    close_seen_.assign(calls_.size(), false);
    statuses_.assign(calls_.size(), OkStatus());
    choices_.assign(calls_.size() * n, oa::ChoiceOutput());
    first_sent_.assign(calls_.size() * n, false);
    if (req_.tool_format != ToolCallFormat::kNone) {
      for (size_t c = 0; c < calls_.size() * n; ++c) {
        tool_streams_.push_back(std::make_unique<ToolCallStream>(req_.tool_format, req_.tool_name));
      }
    }
    sent_bytes_.assign(calls_.size() * n, 0);
    if (req_.stream) {
      front_->CountResponse(route_, 200);
      streaming_ = true;
      last_write_ = SteadyClock::now();
      exchange_->StartStream(200, "text/event-stream",
                             {{"Cache-Control", "no-cache"}, {"X-Request-Id", id0}});
    }
  }

  void EmitLocked() override {
    bool all_closed = true;
    for (size_t p = 0; p < calls_.size(); ++p) all_closed = all_closed && closed_[p];
    if (streaming_) return PumpStream();
    for (size_t p = 0; p < calls_.size(); ++p) TakeInto(p);
    if (!all_closed) return;
    for (size_t p = 0; p < calls_.size(); ++p) {
      if (!statuses_[p].ok()) return FailLocked(oa::ApiErrorFromStatus(statuses_[p], req_));
    }
    FillPromptScores();
    CountCompletion();
    http::Response r;
    r.body = oa::UnaryResponse(ctx_, choices_, prompts_, n_, usage_);
    r.headers.emplace_back("X-Request-Id", calls_[0]->request_id());
    exchange_->Respond(std::move(r));
    front_->CountResponse(route_, 200);
    FinishLocked();
  }

  // Unary: the call's new output into choices_, and its close.
  void TakeInto(size_t p) {
    calls_[p]->TakeDeltas(&update_);
    for (const auto& [index, delta] : update_.deltas) choices_[p * n_ + index].Append(delta);
    if (update_.closed && !close_seen_[p]) {
      close_seen_[p] = true;
      statuses_[p] = update_.status;
      usage_.cached_tokens += update_.timings.cached_tokens;
    }
  }

  void PumpStream() {
    // While the client has not taken the last write, output stays in the calls (one growing
    // delta per choice) and the pump runs again when the write completes; meanwhile the stall
    // rule may pause the calls (their pages go back to the pool) and, later, end them.
    if (exchange_->unsent_bytes() > 0) {
      OutputBlockedLocked(sched::Clock::now());
      std::weak_ptr<CallLife> weak = shared_from_this();
      exchange_->OnWritable([weak] {
        if (auto self = weak.lock()) self->SchedulePump();
      });
      return;
    }
    OutputTakenLocked();
    std::string out;
    bool done = true;
    for (size_t p = 0; p < calls_.size(); ++p) {
      // Echo with logprobs: the first chunk carries the prompt's scores; wait for them.
      if (req_.echo && req_.logprobs >= 0 && !calls_[p]->processor().prompt_scored() &&
          !closed_[p]) {
        done = false;
        continue;
      }
      if (req_.echo && req_.logprobs >= 0) FillPromptScores(p);
      calls_[p]->TakeDeltas(&update_);
      for (const auto& [index, delta] : update_.deltas) {
        const size_t c = p * n_ + index;
        oa::ChoiceOutput piece;
        piece.Append(delta);
        const bool first = !first_sent_[c];
        std::optional<oa::ToolChunk> tools;
        if (!tool_streams_.empty()) {
          tools.emplace();
          tool_streams_[c]->Push(piece.text, &tools->deltas);
          if (piece.finished) tool_streams_[c]->Finish(&tools->deltas);
          for (const ToolCallDelta& t : tools->deltas) {
            if (t.kind == ToolCallDelta::Kind::kContent) tools->content += t.text;
          }
          tools->any_call = !tool_streams_[c]->calls().empty();
        }
        out += oa::StreamChunk(ctx_, static_cast<int32_t>(c), piece, &prompts_[p], first,
                               sent_bytes_[c], tools ? &*tools : nullptr);
        sent_bytes_[c] += piece.text.size() + (first && req_.echo ? prompts_[p].text.size() : 0);
        first_sent_[c] = true;
      }
      if (update_.closed && !close_seen_[p]) {
        close_seen_[p] = true;
        statuses_[p] = update_.status;
        usage_.cached_tokens += update_.timings.cached_tokens;
      }
      done = done && close_seen_[p];
    }
    if (done) {
      // Choices that produced nothing (aborted at once) still get their first and last chunk.
      for (size_t p = 0; p < calls_.size(); ++p) {
        for (int32_t j = 0; j < n_; ++j) {
          const size_t c = p * n_ + j;
          if (first_sent_[c] || !statuses_[p].ok()) continue;
          oa::ChoiceOutput empty;
          empty.finished = true;
          empty.finish_reason = v1::FINISH_REASON_ABORT;
          out += oa::StreamChunk(ctx_, static_cast<int32_t>(c), empty, &prompts_[p], true);
        }
      }
      bool ok = true;
      for (size_t p = 0; p < calls_.size() && ok; ++p) {
        if (!statuses_[p].ok()) {
          out += oa::ErrorEvent(oa::ApiErrorFromStatus(statuses_[p], req_));
          ok = false;
        }
      }
      if (ok) {
        CountCompletion();
        if (req_.include_usage) out += oa::UsageChunk(ctx_, usage_);
      }
      out += oa::kDoneEvent;
    }
    if (!out.empty()) {
      exchange_->Write(std::move(out));
      last_write_ = SteadyClock::now();
    }
    if (done) {
      exchange_->End();
      FinishLocked();
    }
  }

  void FillPromptScores() {
    for (size_t p = 0; p < calls_.size(); ++p) FillPromptScores(p);
  }
  void FillPromptScores(size_t p) {
    if (!req_.echo || req_.logprobs < 0) return;
    const PromptScores& s = calls_[p]->processor().prompt_scores();
    prompts_[p].logprobs = s.logprobs;
    prompts_[p].top = s.top;
  }

  void CountCompletion() {
    usage_.completion_tokens = 0;
    for (const auto& c : calls_) usage_.completion_tokens += c->processor().completion_tokens();
  }

  void FailLocked(const Status& why) override {
    if (gone_) return FinishLocked();  // nobody to tell
    FailLocked(oa::ApiErrorFromStatus(why, req_));
  }
  void CancelledLocked(const Status&) override { FinishLocked(); }

  void Fail(const oa::ApiError& e) {
    std::lock_guard<std::mutex> lock(mu_);
    FailLocked(e);
  }
  void FailLocked(const oa::ApiError& e) {
    if (finished_) return;
    if (streaming_) {
      exchange_->Write(oa::ErrorEvent(e) + oa::kDoneEvent);
      exchange_->End();
    } else {
      exchange_->Respond(ErrorResponse(e));
      front_->CountResponse(route_, e.status);
    }
    FinishLocked();
  }

  // The response is complete (or the client is gone): the calls are released (their listeners
  // detach), and the front forgets this generation.
  void FinishLocked() {
    if (finished_) return;
    finished_ = true;
    CloseLocked();
    front_->Unregister(this);
  }

  void ClientGone() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      gone_ = true;
    }
    Cancel(Status(StatusCode::kCancelled, "the HTTP client disconnected"));
  }

  HttpFront* const front_;
  const std::shared_ptr<http::Exchange> exchange_;
  const oa::Endpoint endpoint_;
  const char* const route_;

  // Guarded by mu_ (req_ is written by Decode, before any other step reads it).
  oa::ApiRequest req_;
  oa::ResponseContext ctx_;
  std::vector<bool> close_seen_;  // per call: TakeDeltas delivered it
  std::vector<Status> statuses_;
  std::vector<oa::ChoiceOutput> choices_;  // unary: accumulated; index p * n + j
  std::vector<bool> first_sent_;           // stream: per choice
  // Stream with a tool-call format: per choice, its parser.
  std::vector<std::unique_ptr<ToolCallStream>> tool_streams_;
  std::vector<size_t> sent_bytes_;  // stream: per choice, text streamed (echo included)
  std::vector<oa::PromptInfo> prompts_;
  oa::UsageTotals usage_;
  int32_t n_ = 1;
  bool streaming_ = false;
  bool gone_ = false;  // the client disconnected
  SteadyClock::time_point last_write_;
  CallUpdate update_;
};

HttpFront::HttpFront(GenerateService* service, HttpFrontOptions options)
    : service_(service), options_(std::move(options)) {
  v1::GetModelInfoResponse info;
  service_->GetModelInfo(&info);
  model_name_ = options_.served_model_name.empty() ? info.model_name()
                                                   : options_.served_model_name;
  max_model_len_ = info.max_context_tokens();
  started_unix_ = UnixNow();
  token_texts_ = std::make_unique<const oa::TokenTexts>(*service_->model().tokenizer);
  // --tool-call-parser: a format, or auto: the one the chat template writes.
  const auto& tmpl = service_->model().chat_template;
  tool_format_ =
      options_.tool_call_parser == "auto"
          ? (tmpl ? DetectToolCallFormat(tmpl->source()) : ToolCallFormat::kNone)
          : ParseToolCallFormat(options_.tool_call_parser).value_or(ToolCallFormat::kNone);
  if (options_.registry != nullptr) {
    requests_ = &options_.registry->AddCounter(
        "astr:http_requests_total",
        "HTTP requests answered, by route and status code (a stream counts when it starts).",
        {"route", "code"});
    options_.registry->AddCallbackGauge("astr:http_open_requests",
                                        "Completions and chat requests open on the HTTP API.", {})
        .Add({}, [this] { return static_cast<double>(open_generations()); });
  }
}

HttpFront::~HttpFront() {
  Stop();
  pool_.reset();  // runs what is queued (it may touch this front), joins
  server_.reset();
}

Status HttpFront::Start() {
  pool_ = std::make_unique<TaskPool>(std::max(1, options_.threads));
  auto server = http::Server::Start(
      options_.server, [this](std::shared_ptr<http::Exchange> ex) { Handle(std::move(ex)); });
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  pinger_ = std::thread([this] { Ping(); });
  return OkStatus();
}

int HttpFront::port() const { return server_ ? server_->port() : 0; }

void HttpFront::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (pinger_.joinable()) pinger_.join();
  // Requests the drain ended (CancelAll) still write their last events: give them a moment, then
  // close what is left (every open exchange's OnClose runs: their calls are cancelled).
  for (int i = 0; i < 1000 && open_generations() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (server_) server_->Stop(std::chrono::milliseconds(1000));
  // Generations still admitting finish on the pool; they see their client gone.
  for (int i = 0; i < 500 && open_generations() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

int64_t HttpFront::open_generations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(open_.size());
}

void HttpFront::Register(const std::shared_ptr<HttpGeneration>& g) {
  std::lock_guard<std::mutex> lock(mu_);
  open_[g.get()] = g;
}

void HttpFront::Unregister(const HttpGeneration* g) {
  std::shared_ptr<HttpGeneration> keep;  // released after the lock: it may be the last owner
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(g);
  if (it == open_.end()) return;
  keep = std::move(it->second);
  open_.erase(it);
}

void HttpFront::CountResponse(const char* route, int status) {
  if (requests_ != nullptr) requests_->WithLabels({route, std::to_string(status)}).Increment();
}

void HttpFront::Ping() {
  // Also the stall watchdog (pause, then cancel, of streams whose client does not read).
  const auto tick = std::clamp(options_.ping_interval / 4, std::chrono::milliseconds(20),
                               std::chrono::milliseconds(200));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    stop_cv_.wait_for(lock, tick);
    if (stop_) break;
    std::vector<std::shared_ptr<HttpGeneration>> open;
    for (auto& [raw, g] : open_) open.push_back(g);
    lock.unlock();
    const auto now = SteadyClock::now();
    for (auto& g : open) g->PingIfIdle(now, options_.ping_interval);
    open.clear();
    lock.lock();
  }
}

void HttpFront::Handle(std::shared_ptr<http::Exchange> ex) {
  const http::Request& req = ex->request();
  const std::string& path = req.path;
  const char* route = "other";
  for (const char* known : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/tokenize",
                            "/detokenize", "/health", "/metrics"}) {
    if (path == known) route = known;
  }
  if (path.rfind("/v1/models/", 0) == 0) route = "/v1/models";
  // Answers and counts (generations count themselves).
  auto reply = [this, route](const std::shared_ptr<http::Exchange>& to, http::Response r) {
    CountResponse(route, r.status);
    to->Respond(std::move(r));
  };
  auto method_is = [&](const char* m) {
    if (req.method == m) return true;
    http::Response r = ErrorResponse(
        Error(405, "method " + req.method + " is not allowed on " + path + " (use " + m + ")"));
    r.headers.emplace_back("Allow", m);
    reply(ex, std::move(r));
    return false;
  };
  // /v1/*, /tokenize and /detokenize need an API key when the server has them (api_keys.h); a
  // generation's lease (CallLife::Open) holds its key's concurrency slot until the response ends.
  auto authorized = [&] {
    auto admitted = service_->api_keys().Admit(req.Header("authorization"), /*generation=*/false);
    if (admitted.ok()) return true;
    reply(ex, ErrorResponse(oa::ApiErrorFromStatus(admitted.status(), oa::ApiRequest())));
    return false;
  };

  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (!method_is("POST")) return;
    const auto endpoint =
        path == "/v1/completions" ? oa::Endpoint::kCompletions : oa::Endpoint::kChat;
    auto g = std::make_shared<HttpGeneration>(this, ex, endpoint);
    // The gate every front shares (call_life.h): the API key, the connection's call slot.
    if (Status s = g->Open(req.Header("authorization")); !s.ok()) {
      oa::ApiRequest as;
      as.endpoint = endpoint;
      reply(ex, ErrorResponse(oa::ApiErrorFromStatus(s, as)));
      return;
    }
    g->Start();
    return;
  }
  if (path == "/health") {
    if (!method_is("GET")) return;
    const v1::GetServerStatsResponse stats = service_->Stats();
    http::Response r;
    if (stats.accepting_requests()) {
      r.body = "{\"status\":\"ok\"}";
    } else {
      r.status = 503;
      r.body = json{{"status", "unavailable"}, {"reason", stats.not_accepting_reason()}}.dump();
      r.headers.emplace_back("Retry-After", "1");
    }
    reply(ex, std::move(r));
    return;
  }
  if (path == "/metrics") {
    if (!method_is("GET")) return;
    if (!options_.metrics) {
      reply(ex, ErrorResponse(Error(404, "no metrics")));
      return;
    }
    http::Response r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = options_.metrics();
    reply(ex, std::move(r));
    return;
  }
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
    if (!method_is("GET") || !authorized()) return;
    const json model = {{"id", model_name_},
                        {"object", "model"},
                        {"created", started_unix_},
                        {"owned_by", "astr"},
                        {"max_model_len", max_model_len_}};
    http::Response r;
    if (path == "/v1/models") {
      r.body = json{{"object", "list"}, {"data", json::array({model})}}.dump();
    } else if (path.substr(11) == model_name_) {
      r.body = model.dump();
    } else {
      r = ErrorResponse(ModelNotFound(path.substr(11)));
    }
    reply(ex, std::move(r));
    return;
  }
  if (path == "/tokenize" || path == "/detokenize") {
    if (!method_is("POST") || !authorized()) return;
    const bool tokenize = path == "/tokenize";
    pool_->Post([this, ex = std::move(ex), tokenize, reply] {
      try {
        Tokenize(ex, tokenize, reply);
      } catch (const std::exception& e) {
        reply(ex, ErrorResponse(InternalError(e.what())));
      }
    });
    return;
  }
  reply(ex, ErrorResponse(Error(404, "no route " + req.method + " " + path, "invalid_request_error",
                                  "", "not_found")));
}

void HttpFront::Tokenize(const std::shared_ptr<http::Exchange>& ex, bool tokenize,
                         const Reply& reply) {
  http::Response r;
  oa::ApiRequest as;  // for naming fields in errors
  if (tokenize) {
    oa::TokenizeParse t = oa::ParseTokenize(ex->request().body);
    if (!t.request) {
      service_->CountInvalid();
      return reply(ex, ErrorResponse(t.error));
    }
    if (!t.model.empty() && t.model != model_name_) {
      return reply(ex, ErrorResponse(ModelNotFound(t.model)));
    }
    as.endpoint = t.request->has_chat() ? oa::Endpoint::kChat : oa::Endpoint::kCompletions;
    v1::TokenizeResponse out;
    Status s = service_->Tokenize(*t.request, &out);
    if (!s.ok()) return reply(ex, ErrorResponse(oa::ApiErrorFromStatus(s, as)));
    json body = {{"count", out.token_ids_size()},
                 {"max_model_len", max_model_len_},
                 {"tokens", std::vector<int32_t>(out.token_ids().begin(), out.token_ids().end())}};
    if (t.return_token_strs) {
      body["token_strs"] = std::vector<std::string>(out.tokens().begin(), out.tokens().end());
    }
    r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  } else {
    oa::DetokenizeParse d = oa::ParseDetokenize(ex->request().body);
    if (!d.request) {
      service_->CountInvalid();
      return reply(ex, ErrorResponse(d.error));
    }
    if (!d.model.empty() && d.model != model_name_) {
      return reply(ex, ErrorResponse(ModelNotFound(d.model)));
    }
    v1::DetokenizeResponse out;
    Status s = service_->Detokenize(*d.request, &out);
    if (!s.ok()) {
      oa::ApiError e = oa::ApiErrorFromStatus(s, as);
      e.param = "tokens";
      if (e.message.rfind("token_ids", 0) == 0) e.message = "tokens" + e.message.substr(9);
      return reply(ex, ErrorResponse(e));
    }
    r.body = json{{"prompt", out.text()}}.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  reply(ex, std::move(r));
}

}  // namespace astr::front
