#include "scheduler/front/generate_service.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <utility>

namespace astr::front {
namespace {

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

void FillTimings(const sched::RequestTimings& t, v1::Timings* out) {
  out->set_queue_ns(t.queue_ns);
  out->set_time_to_first_token_ns(t.time_to_first_token_ns);
  out->set_total_ns(t.total_ns);
  out->set_preemptions(t.preemptions);
}

void FillTop(const std::vector<std::vector<TokenLogprob>>& top,
             google::protobuf::RepeatedPtrField<v1::TopLogprobs>* out) {
  for (const auto& position : top) {
    v1::TopLogprobs* entry = out->Add();
    for (const TokenLogprob& e : position) {
      v1::TokenLogprob* lp = entry->add_entries();
      lp->set_token_id(e.id);
      lp->set_logprob(e.logprob);
    }
  }
}

void FillMasks(const std::vector<SamplingMask>& masks,
               google::protobuf::RepeatedPtrField<v1::SamplingMask>* out) {
  for (const SamplingMask& m : masks) {
    v1::SamplingMask* entry = out->Add();
    entry->set_count(m.count);
    entry->mutable_token_ids()->Add(m.ids.begin(), m.ids.end());
  }
}

// Appends `spans` to `out`, joining a span that continues the last one with the same version.
void AddSpans(const std::vector<VersionSpan>& spans,
              google::protobuf::RepeatedPtrField<v1::WeightVersionSpan>* out) {
  std::vector<VersionSpan> joined;
  if (!out->empty()) {
    const v1::WeightVersionSpan& last = (*out)[out->size() - 1];
    joined.push_back({last.version(), last.start(), last.count()});
    out->RemoveLast();
  }
  for (const VersionSpan& s : spans) AppendVersionSpan(&joined, s);
  for (const VersionSpan& s : joined) {
    v1::WeightVersionSpan* span = out->Add();
    span->set_version(s.version);
    span->set_start(s.start);
    span->set_count(s.count);
  }
}

template <typename Message>
void FillPromptScoresOf(const GenerateService::Call& call, Message* out) {
  if (call.built().output.logprob_start <= 0) return;
  const PromptScores& scores = call.processor().prompt_scores();
  out->mutable_prompt_logprobs()->Add(scores.logprobs.begin(), scores.logprobs.end());
  FillTop(scores.top, out->mutable_prompt_top_logprobs());
  out->set_prompt_weight_version(scores.weight_version);
}

template <typename Message>
void FillFinish(const SampleDelta& d, Message* out) {
  out->set_finish_reason(d.finish_reason);
  if (d.stop_string) out->set_stop_string(*d.stop_string);
  if (d.stop_token_id) out->set_stop_token_id(*d.stop_token_id);
}

}  // namespace

void AppendToCompletion(const SampleDelta& d, v1::Completion* c) {
  c->mutable_text()->append(d.text);
  c->mutable_token_ids()->Add(d.token_ids.begin(), d.token_ids.end());
  c->mutable_logprobs()->Add(d.logprobs.begin(), d.logprobs.end());
  FillTop(d.top, c->mutable_top_logprobs());
  FillMasks(d.masks, c->mutable_sampling_masks());
  if (!d.token_ids.empty()) c->set_weight_version(d.weight_version);
  AddSpans(d.versions, c->mutable_weight_versions());
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
  FillMasks(d.masks, m.mutable_sampling_masks());
  m.set_weight_version(d.weight_version);
  AddSpans(d.versions, m.mutable_weight_versions());
  if (d.finished) FillFinish(d, &m);
  return m;
}

void FillTotals(const GenerateService::Call& call, const CallUpdate& update, v1::Usage* usage,
                v1::Timings* timings) {
  usage->set_prompt_tokens(static_cast<int32_t>(call.built().sched.prompt.size()));
  usage->set_completion_tokens(call.processor().completion_tokens());
  usage->set_cached_tokens(update.timings.cached_tokens);
  FillTimings(update.timings, timings);
}

void FillPromptScores(const GenerateService::Call& call, v1::GenerateResponse* response) {
  FillPromptScoresOf(call, response);
}

void FillPromptScores(const GenerateService::Call& call, v1::GenerateStreamResponse* message) {
  FillPromptScoresOf(call, message);
}

GenerateService::Call::~Call() {
  if (processor_) CountOutput(/*destroying=*/true);
  if (channel_) {
    channel_->SetListener(nullptr);
    service_->Unregister(channel_->key());
  }
}

bool GenerateService::Call::Absorb() {
  if (closed_) return true;
  sched::RequestChannel::Batch batch = channel_->Take();
  stopped_.clear();
  processor_->Apply(batch.events, &stopped_);
  for (int32_t index : stopped_) {
    service_->scheduler_->FinishSample(key(), index, processor_->sample(index).num_tokens());
  }
  if (batch.closed) {
    // Samples the scheduler did not finish (abort, or a closed request) end here.
    processor_->AbortUnfinished();
    closed_ = true;
    status_ = batch.status;
    timings_ = batch.timings;
  }
  CountOutput(/*destroying=*/false);
  return closed_;
}

void GenerateService::Call::CountOutput(bool destroying) {
  const int32_t n = processor_->num_samples();
  if (counted_.empty()) counted_.assign(n, false);
  for (int32_t i = 0; i < n; ++i) {
    const SampleOutput& s = processor_->sample(i);
    if (counted_[i] || !(s.done() || destroying)) continue;
    counted_[i] = true;
    // FINISH_REASON_UNSPECIFIED (never finished: the call went away first) counts as an abort.
    service_->scheduler_->CountSampleOutput(s.done() ? s.finish_reason() : v1::FINISH_REASON_ABORT,
                                            s.num_tokens());
  }
  if (!request_counted_ && (closed_ || destroying)) {
    request_counted_ = true;
    service_->scheduler_->ObserveRequestOutput(processor_->completion_tokens());
  }
}

void GenerateService::Call::TakeDeltas(CallUpdate* update) {
  update->deltas.clear();
  for (int32_t i = 0; i < processor_->num_samples(); ++i) {
    SampleDelta d = processor_->sample(i).TakeDelta();
    if (!d.empty()) update->deltas.emplace_back(i, std::move(d));
  }
  update->closed = closed_;
  if (closed_ && !close_taken_) {
    close_taken_ = true;
    update->status = status_;
    update->timings = timings_;
  }
}

void GenerateService::Call::Cancel(Status why) {
  service_->scheduler_->Cancel(key(), std::move(why));
}

GenerateService::GenerateService(sched::Scheduler* scheduler, ServedModel model,
                                 RequestLimits limits, FrontLimits front_limits)
    : scheduler_(scheduler),
      model_(std::move(model)),
      limits_(limits),
      front_limits_(front_limits),
      peer_limiter_(front_limits.max_calls_per_peer, "--max-calls-per-peer"),
      api_keys_(front_limits.api_keys != nullptr ? front_limits.api_keys
                                                 : std::make_shared<ApiKeys>()) {
  if (model_.constraints != nullptr) {
    compiles_ = std::make_unique<CompileQueue>(model_.constraints, front_limits.compiles);
  }
}

GenerateService::~GenerateService() { compiles_.reset(); }

std::shared_ptr<CompileQueue::Ticket> GenerateService::PrepareConstraint(
    const v1::GenerateRequest& request, const std::string& client, CompileQueue::Done done,
    CompileQueue::Post post) {
  auto constraint = ConstraintOf(request.sampling(), model_);
  if (constraint.ok() && *constraint) {
    // A tool choice's constraint is made of the tools: their count first, at once.
    if (Status tools = CheckTools(request); !tools.ok()) constraint = tools;
  }
  if (!constraint.ok()) {
    CountError(constraint.status());
    done(constraint.status());
    return nullptr;
  }
  if (!*constraint) {
    done(std::shared_ptr<const sched::CompiledConstraint>());
    return nullptr;
  }
  return compiles_->Submit(
      client, (*constraint)->spec, (*constraint)->field,
      [this, done = std::move(done)](CompileQueue::Result r) {
        if (!r.ok()) CountError(r.status());
        done(std::move(r));
      },
      std::move(post));
}

void GenerateService::CancelAll(const Status& why) {
  std::vector<uint64_t> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, call] : open_) keys.push_back(key);
  }
  for (uint64_t key : keys) scheduler_->Cancel(key, why);
}

int64_t GenerateService::open_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(open_.size());
}

void GenerateService::Unregister(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(key);
}

void GenerateService::CountError(const Status& s) {
  if (s.code() == StatusCode::kInvalidArgument) invalid_.fetch_add(1, std::memory_order_relaxed);
}

void GenerateService::Call::OutputBlocked(sched::Clock::time_point since) {
  if (!blocked_since_) blocked_since_ = since;
}

void GenerateService::Call::OutputTaken() {
  blocked_since_.reset();
  if (!paused_) return;
  paused_ = false;
  if (!closed_) service_->scheduler_->Hold(key(), false);
}

std::optional<Status> GenerateService::Call::CheckStall(sched::Clock::time_point now) {
  if (!blocked_since_ || stalled_) return std::nullopt;
  const FrontLimits& limits = service_->front_limits_;
  const auto blocked = now - *blocked_since_;
  if (limits.stream_stall_timeout.count() > 0 && blocked >= limits.stream_stall_timeout) {
    stalled_ = true;
    service_->CountStalled();
    Status why(StatusCode::kCancelled, "the client read nothing for " +
                                           std::to_string(limits.stream_stall_timeout.count()) +
                                           " ms (--stream-stall-timeout-s): stream cancelled");
    if (!closed_) Cancel(why);  // a request that ended meanwhile has nothing left to abort
    return why;
  }
  if (!closed_ && !paused_ && limits.stream_pause_after.count() > 0 &&
      blocked >= limits.stream_pause_after) {
    paused_ = true;
    service_->CountPaused();
    service_->scheduler_->Hold(key(), true);
  }
  return std::nullopt;
}

StatusOr<std::unique_ptr<GenerateService::Call>> GenerateService::Admit(
    const v1::GenerateRequest& request, std::optional<sched::Clock::time_point> deadline,
    std::shared_ptr<const sched::CompiledConstraint> compiled, std::string client) {
  if (scheduler_->draining()) {
    refused_front_.fetch_add(1, std::memory_order_relaxed);
    return UnavailableError("draining: the server is shutting down and admits no new requests");
  }
  std::unique_ptr<Call> call(new Call(this));
  auto built = BuildRequest(request, model_, limits_, RandomU64(), deadline, std::move(compiled));
  if (!built.ok()) {
    CountError(built.status());
    return built.status();
  }
  call->built_ = std::move(*built);
  if (call->built_.sched.request_id.empty()) call->built_.sched.request_id = MakeRequestId();
  call->built_.sched.client = std::move(client);
  // Submit takes its own copy; the prompt stays here for the detokenizer and the response.
  // The scheduler counts its own refusals.
  auto channel = scheduler_->Submit(call->built_.sched);
  if (!channel.ok()) {
    CountError(channel.status());
    return channel.status();
  }
  call->channel_ = std::move(*channel);
  call->processor_ = std::make_unique<OutputProcessor>(
      *model_.tokenizer, call->built_.output, call->built_.sched.prompt, call->built_.sched.n);
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_[call->key()] = call.get();
  }
  return call;
}

Status GenerateService::Tokenize(const v1::TokenizeRequest& request,
                                 v1::TokenizeResponse* response) {
  StatusOr<Prompt> prompt = TokenizeRequestInput(model_, request);
  if (!prompt.ok()) {
    CountError(prompt.status());
    return prompt.status();
  }
  for (int32_t id : prompt->ids) {
    response->add_token_ids(id);
    response->add_tokens(model_.tokenizer->IdToToken(id));
  }
  response->set_rendered_prompt(std::move(prompt->rendered));
  return OkStatus();
}

Status GenerateService::Detokenize(const v1::DetokenizeRequest& request,
                                   v1::DetokenizeResponse* response) {
  const auto& ids = request.token_ids();
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= model_.vocab_size) {
      invalid_.fetch_add(1, std::memory_order_relaxed);
      return FieldError("token_ids[" + std::to_string(i) + "]",
                        " = " + std::to_string(ids[i]) + " is outside the vocabulary [0, " +
                            std::to_string(model_.vocab_size) + ")");
    }
  }
  const bool skip = !request.has_skip_special_tokens() || request.skip_special_tokens();
  response->set_text(model_.tokenizer->Decode(std::vector<int32_t>(ids.begin(), ids.end()), skip));
  return OkStatus();
}

void GenerateService::GetModelInfo(v1::GetModelInfoResponse* response) const {
  const std::vector<sched::WorkerMember> members = scheduler_->Members();
  if (!members.empty()) {
    const v1::InfoResponse& first = members[0].info;
    response->set_model_name(first.model_name());
    response->set_architecture(first.architecture());
    response->set_content_hash(first.content_hash());
  }
  // The version served now (members' Info is as read when they joined).
  response->set_weight_version(scheduler_->weight_version().version);
  response->set_vocab_size(model_.vocab_size);
  response->set_max_context_tokens(model_.max_context_tokens);
  response->mutable_eos_token_ids()->Add(model_.eos_token_ids.begin(), model_.eos_token_ids.end());
  response->set_bos_token_id(model_.tokenizer->bos_id());
  response->set_has_chat_template(model_.chat_template != nullptr);
  response->set_max_n(limits_.max_n);
  response->set_max_stop_strings(limits_.max_stop_strings);
  const model::GenerationDefaults& d = model_.generation_defaults;
  v1::SamplingParameters* s = response->mutable_default_sampling();
  if (d.temperature) s->set_temperature(*d.temperature);
  if (d.top_k) s->set_top_k(*d.top_k);
  if (d.top_p) s->set_top_p(*d.top_p);
  if (d.min_p) s->set_min_p(*d.min_p);
  if (d.repetition_penalty) s->set_repetition_penalty(*d.repetition_penalty);
  if (d.penalty_window) s->set_penalty_window(*d.penalty_window);
  if (d.max_tokens) s->set_max_tokens(*d.max_tokens);
  response->set_default_sampling_source(d.source);
  for (const sched::WorkerMember& member : members) {
    const v1::InfoResponse& info = member.info;
    v1::WorkerDescription* w = response->add_workers();
    w->set_address(member.address);
    w->set_backend(info.backend());
    w->set_dtype(info.dtype());
    w->set_num_pages(info.num_pages());
    w->set_page_size(info.page_size());
    w->set_max_batch(info.max_batch());
    w->set_max_batch_tokens(info.max_batch_tokens());
  }
}

v1::GetServerStatsResponse GenerateService::Stats() const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  v1::GetServerStatsResponse stats = scheduler_->Stats();
  stats.set_requests_refused(stats.requests_refused() + refused_front_.load(kRelaxed) +
                             refused_peer_limit_.load(kRelaxed));
  stats.set_requests_invalid(invalid_.load(kRelaxed));
  stats.set_requests_refused_peer_limit(refused_peer_limit_.load(kRelaxed));
  stats.set_streams_stalled(stalled_.load(kRelaxed));
  stats.set_streams_paused(paused_.load(kRelaxed));
  stats.set_open_calls(static_cast<int32_t>(peer_limiter_.open()));
  return stats;
}

}  // namespace astr::front
