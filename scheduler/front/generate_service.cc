#include "scheduler/front/generate_service.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "common/service/grpc_status.h"
#include "scheduler/front/output_processor.h"

namespace astr::front {
namespace {

// How often the watcher looks at every open call's ServerContext::IsCancelled: a cancelled or
// timed-out client is noticed within this interval, and its sequences are released at the
// scheduler's next step after that.
constexpr std::chrono::milliseconds kWatchInterval(5);
// A waiting call wakes at least this often to see whether the watcher marked it gone (its channel
// normally closes at once, unless the scheduler loop is stuck on a worker).
constexpr std::chrono::milliseconds kCallWakeInterval(50);

uint64_t RandomU64() {
  thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }());
  return rng();
}

// "astr-" + 16 hex digits: unique enough to find one request in the logs.
std::string MakeRequestId() {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "astr-%016llx", static_cast<unsigned long long>(RandomU64()));
  return buf;
}

std::optional<sched::Clock::time_point> DeadlineOf(const grpc::ServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return std::nullopt;
  // The scheduler's clock is steady; carry the remaining time over.
  return sched::Clock::now() + (deadline - std::chrono::system_clock::now());
}

void FillTimings(const sched::RequestTimings& t, v1::Timings* out) {
  out->set_queue_ns(t.queue_ns);
  out->set_time_to_first_token_ns(t.time_to_first_token_ns);
  out->set_total_ns(t.total_ns);
  out->set_preemptions(t.preemptions);
}

void FillTop(const std::vector<std::vector<sched::TopEntry>>& top,
             google::protobuf::RepeatedPtrField<v1::TopLogprobs>* out) {
  for (const auto& position : top) {
    v1::TopLogprobs* entry = out->Add();
    for (const sched::TopEntry& e : position) {
      v1::TokenLogprob* lp = entry->add_entries();
      lp->set_token_id(e.token_id);
      lp->set_logprob(e.logprob);
    }
  }
}

template <typename Message>
void FillFinish(const SampleDelta& d, Message* out) {
  out->set_finish_reason(d.finish_reason);
  if (d.stop_string) out->set_stop_string(*d.stop_string);
  if (d.stop_token_id) out->set_stop_token_id(*d.stop_token_id);
}

void AppendToCompletion(const SampleDelta& d, v1::Completion* c) {
  c->mutable_text()->append(d.text);
  c->mutable_token_ids()->Add(d.token_ids.begin(), d.token_ids.end());
  c->mutable_logprobs()->Add(d.logprobs.begin(), d.logprobs.end());
  FillTop(d.top, c->mutable_top_logprobs());
  if (!d.token_ids.empty()) c->set_weight_version(d.weight_version);
  if (d.finished) FillFinish(d, c);
}

v1::GenerateStreamResponse StreamMessage(const std::string& request_id, int32_t index,
                                         const SampleDelta& d) {
  v1::GenerateStreamResponse m;
  m.set_request_id(request_id);
  m.set_index(index);
  m.set_text(d.text);
  m.mutable_token_ids()->Add(d.token_ids.begin(), d.token_ids.end());
  m.mutable_logprobs()->Add(d.logprobs.begin(), d.logprobs.end());
  FillTop(d.top, m.mutable_top_logprobs());
  m.set_weight_version(d.weight_version);
  if (d.finished) FillFinish(d, &m);
  return m;
}

}  // namespace

// One admitted Generate / GenerateStream call, owned by its handler thread.
class GenerateService::Call {
 public:
  explicit Call(GenerateService* service) : service_(service) {}
  ~Call() {
    if (channel) service_->Unregister(channel->key());
  }
  uint64_t key() const { return channel->key(); }
  const std::string& request_id() const { return built.sched.request_id; }

  BuiltRequest built;
  std::shared_ptr<sched::RequestChannel> channel;
  std::unique_ptr<OutputProcessor> processor;
  std::atomic<bool> gone{false};  // set by the watcher: the client cancelled or timed out

 private:
  GenerateService* const service_;
};

// What Next() found: new output per sample and, once, the request's end.
struct GenerateService::Update {
  std::vector<std::pair<int32_t, SampleDelta>> deltas;  // (sample index, delta)
  bool closed = false;
  Status status;
  sched::RequestTimings timings;
};

GenerateService::GenerateService(sched::Scheduler* scheduler, ServedModel model,
                                 RequestLimits limits, std::vector<std::string> worker_addresses)
    : scheduler_(scheduler),
      model_(std::move(model)),
      limits_(limits),
      worker_addresses_(std::move(worker_addresses)),
      watcher_([this] { WatchCancellations(); }) {}

GenerateService::~GenerateService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_one();
  watcher_.join();
}

void GenerateService::WatchCancellations() {
  std::vector<std::pair<uint64_t, Status>> gone;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, kWatchInterval, [this] { return stop_; })) {
    gone.clear();
    // Under mu_: a call unregisters before its handler returns, so each context is alive here.
    for (auto& [key, open] : open_) {
      if (open.call->gone.load(std::memory_order_relaxed) || !open.context->IsCancelled()) {
        continue;
      }
      open.call->gone.store(true, std::memory_order_release);
      const bool expired = open.context->deadline() <= std::chrono::system_clock::now();
      gone.emplace_back(key, expired ? Status(StatusCode::kDeadlineExceeded, "deadline passed")
                                     : Status(StatusCode::kCancelled, "cancelled by the client"));
    }
    lock.unlock();
    for (auto& [key, why] : gone) scheduler_->Cancel(key, std::move(why));
    lock.lock();
  }
}

void GenerateService::StartDrain() { draining_.store(true); }

void GenerateService::CancelAll(const Status& why) {
  std::vector<uint64_t> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, open] : open_) keys.push_back(key);
  }
  for (uint64_t key : keys) scheduler_->Cancel(key, why);
}

int64_t GenerateService::open_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(open_.size());
}

void GenerateService::Register(Call* call, grpc::ServerContext* context) {
  std::lock_guard<std::mutex> lock(mu_);
  open_[call->key()] = OpenCall{context, call};
}

void GenerateService::Unregister(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(key);
}

Status GenerateService::Admit(grpc::ServerContext* context, const v1::GenerateRequest& request,
                              Call* call) {
  if (draining_.load()) {
    return UnavailableError("draining: the server is shutting down and admits no new requests");
  }
  ASTR_ASSIGN_OR_RETURN(call->built,
                        BuildRequest(request, model_, limits_, RandomU64(), DeadlineOf(*context)));
  if (call->built.sched.request_id.empty()) call->built.sched.request_id = MakeRequestId();
  // Submit takes its own copy; the prompt stays here for the detokenizer and the response.
  ASTR_ASSIGN_OR_RETURN(call->channel, scheduler_->Submit(call->built.sched));
  Register(call, context);
  call->processor = std::make_unique<OutputProcessor>(
      *model_.tokenizer, call->built.output, call->built.sched.prompt, call->built.sched.n);
  return OkStatus();
}

bool GenerateService::Next(Call* call, Update* update) {
  update->deltas.clear();
  std::vector<int32_t> stopped;
  while (true) {
    // The watcher has already cancelled the request in the scheduler.
    if (call->gone.load(std::memory_order_acquire)) return false;
    sched::RequestChannel::Batch batch = call->channel->Wait(kCallWakeInterval);
    stopped.clear();
    call->processor->Apply(batch.events, &stopped);
    for (int32_t index : stopped) scheduler_->FinishSample(call->key(), index);
    if (batch.closed) {
      // Samples the scheduler did not finish (abort, or a closed request) end here.
      call->processor->AbortUnfinished();
      update->closed = true;
      update->status = batch.status;
      update->timings = batch.timings;
    }
    for (int32_t i = 0; i < call->processor->num_samples(); ++i) {
      SampleDelta d = call->processor->sample(i).TakeDelta();
      if (!d.empty()) update->deltas.emplace_back(i, std::move(d));
    }
    if (!update->deltas.empty() || update->closed) return true;
  }
}

grpc::Status GenerateService::Generate(grpc::ServerContext* context,
                                       const v1::GenerateRequest* request,
                                       v1::GenerateResponse* response) {
  Call call(this);
  if (Status s = Admit(context, *request, &call); !s.ok()) return ToGrpcStatus(s);
  const BuiltRequest& built = call.built;
  response->set_request_id(built.sched.request_id);
  response->set_seed(built.seed);
  if (built.output.return_prompt_ids) {
    response->mutable_prompt_ids()->Add(built.sched.prompt.begin(), built.sched.prompt.end());
  }
  for (int32_t i = 0; i < built.sched.n; ++i) response->add_completions()->set_index(i);
  Update update;
  while (Next(&call, &update)) {
    for (const auto& [index, delta] : update.deltas) {
      AppendToCompletion(delta, response->mutable_completions(index));
    }
    if (!update.closed) continue;
    if (!update.status.ok()) return ToGrpcStatus(update.status);
    v1::Usage* usage = response->mutable_usage();
    usage->set_prompt_tokens(static_cast<int32_t>(built.sched.prompt.size()));
    usage->set_completion_tokens(call.processor->completion_tokens());
    usage->set_cached_tokens(update.timings.cached_tokens);
    FillTimings(update.timings, response->mutable_timings());
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
}

grpc::Status GenerateService::GenerateStream(
    grpc::ServerContext* context, const v1::GenerateRequest* request,
    grpc::ServerWriter<v1::GenerateStreamResponse>* writer) {
  Call call(this);
  if (Status s = Admit(context, *request, &call); !s.ok()) return ToGrpcStatus(s);
  const BuiltRequest& built = call.built;
  // Once every sample is done, the last message waits for the request to close: it carries the
  // usage and timings, which only the close knows.
  std::optional<v1::GenerateStreamResponse> held;
  bool first = true;
  Update update;
  std::vector<v1::GenerateStreamResponse> out;
  while (Next(&call, &update)) {
    out.clear();
    if (held) out.push_back(std::move(*held));
    held.reset();
    for (const auto& [index, delta] : update.deltas) {
      out.push_back(StreamMessage(call.request_id(), index, delta));
    }
    if (update.closed && out.empty()) {  // nothing new: the totals go in a message of their own
      out.emplace_back().set_request_id(call.request_id());
    }
    if (first && !out.empty()) {
      first = false;
      out.front().set_seed(built.seed);
      if (built.output.return_prompt_ids) {
        out.front().mutable_prompt_ids()->Add(built.sched.prompt.begin(), built.sched.prompt.end());
      }
    }
    if (update.closed) {
      v1::Usage* usage = out.back().mutable_usage();
      usage->set_prompt_tokens(static_cast<int32_t>(built.sched.prompt.size()));
      usage->set_completion_tokens(call.processor->completion_tokens());
      usage->set_cached_tokens(update.timings.cached_tokens);
      FillTimings(update.timings, out.back().mutable_timings());
    } else if (call.processor->all_done() && !out.empty()) {
      held = std::move(out.back());
      out.pop_back();
    }
    for (const v1::GenerateStreamResponse& m : out) {
      if (!writer->Write(m)) {
        scheduler_->Cancel(call.key(), Status(StatusCode::kCancelled, "the client went away"));
        return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
    }
    if (update.closed) return ToGrpcStatus(update.status);
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
}

grpc::Status GenerateService::Tokenize(grpc::ServerContext* /*context*/,
                                       const v1::TokenizeRequest* request,
                                       v1::TokenizeResponse* response) {
  StatusOr<Prompt> prompt = InvalidArgumentError("input: missing (set text or chat)");
  if (request->has_text()) {
    const bool add_special = !request->has_add_special_tokens() || request->add_special_tokens();
    prompt = TokenizeText(model_, request->text(), add_special, "text");
  } else if (request->has_chat()) {
    prompt = TokenizeChat(model_, request->chat(), "chat");
  }
  if (!prompt.ok()) return ToGrpcStatus(prompt.status());
  for (int32_t id : prompt->ids) {
    response->add_token_ids(id);
    response->add_tokens(model_.tokenizer->IdToToken(id));
  }
  response->set_rendered_prompt(std::move(prompt->rendered));
  return grpc::Status::OK;
}

grpc::Status GenerateService::Detokenize(grpc::ServerContext* /*context*/,
                                         const v1::DetokenizeRequest* request,
                                         v1::DetokenizeResponse* response) {
  const auto& ids = request->token_ids();
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= model_.vocab_size) {
      return ToGrpcStatus(InvalidArgumentError(
          "token_ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
          " is outside the vocabulary [0, " + std::to_string(model_.vocab_size) + ")"));
    }
  }
  const bool skip = !request->has_skip_special_tokens() || request->skip_special_tokens();
  response->set_text(model_.tokenizer->Decode(std::vector<int32_t>(ids.begin(), ids.end()), skip));
  return grpc::Status::OK;
}

grpc::Status GenerateService::GetModelInfo(grpc::ServerContext* /*context*/,
                                           const v1::GetModelInfoRequest* /*request*/,
                                           v1::GetModelInfoResponse* response) {
  const std::vector<v1::InfoResponse> infos = scheduler_->WorkerInfos();
  if (!infos.empty()) {
    response->set_model_name(infos[0].model_name());
    response->set_architecture(infos[0].architecture());
    response->set_content_hash(infos[0].content_hash());
    response->set_weight_version(infos[0].weight_version());
  }
  response->set_vocab_size(model_.vocab_size);
  response->set_max_context_tokens(model_.max_context_tokens);
  response->mutable_eos_token_ids()->Add(model_.eos_token_ids.begin(), model_.eos_token_ids.end());
  response->set_bos_token_id(model_.tokenizer->bos_id());
  response->set_has_chat_template(model_.chat_template != nullptr);
  response->set_max_n(limits_.max_n);
  response->set_max_stop_strings(limits_.max_stop_strings);
  for (size_t i = 0; i < infos.size(); ++i) {
    const v1::InfoResponse& info = infos[i];
    v1::WorkerDescription* w = response->add_workers();
    if (i < worker_addresses_.size()) w->set_address(worker_addresses_[i]);
    w->set_backend(info.backend());
    w->set_dtype(info.dtype());
    w->set_num_pages(info.num_pages());
    w->set_page_size(info.page_size());
    w->set_max_batch(info.max_batch());
    w->set_max_batch_tokens(info.max_batch_tokens());
  }
  return grpc::Status::OK;
}

grpc::Status GenerateService::GetServerStats(grpc::ServerContext* /*context*/,
                                             const v1::GetServerStatsRequest* /*request*/,
                                             v1::GetServerStatsResponse* response) {
  *response = scheduler_->Stats();
  return grpc::Status::OK;
}

}  // namespace astr::front
