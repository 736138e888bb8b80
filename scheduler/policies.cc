#include "scheduler/policies.h"

#include <algorithm>
#include <string>

namespace astr::sched {

bool QueueOrder::operator()(const Sequence* a, const Sequence* b) const {
  const RequestState& ra = *a->request;
  const RequestState& rb = *b->request;
  if (ra.req.priority != rb.req.priority) return ra.req.priority > rb.req.priority;
  if (ra.key != rb.key) return ra.key < rb.key;
  return a->sample_index < b->sample_index;
}

StepLimits StepCapacity::For(int64_t worker_max_batch_tokens, int64_t worker_max_batch,
                             int32_t max_context_tokens) const {
  StepLimits limits;
  limits.max_tokens = options_.max_batch_tokens;
  if (worker_max_batch_tokens > 0) {
    limits.max_tokens = std::min<int64_t>(limits.max_tokens, worker_max_batch_tokens);
  }
  limits.max_sequences = options_.max_running;
  if (worker_max_batch > 0) {
    limits.max_sequences = std::min<int64_t>(limits.max_sequences, worker_max_batch);
  }
  limits.prefill_chunk = std::min(options_.prefill_chunk, limits.max_tokens);
  limits.max_context_tokens = max_context_tokens;
  limits.max_logits_rows = worker_max_batch > 0 ? worker_max_batch : limits.max_sequences;
  return limits;
}

size_t PreemptionPolicy::PickVictim(std::span<Sequence* const> candidates,
                                    const FairShare* fair) const {
  size_t victim = 0;
  QueueOrder order;
  // Lowest priority; then (fair share) the client served most; then last in queue order.
  auto before = [&](const Sequence* a, const Sequence* b) {  // a is preempted before b
    const RequestState& ra = *a->request;
    const RequestState& rb = *b->request;
    if (ra.req.priority != rb.req.priority) return ra.req.priority < rb.req.priority;
    if (fair != nullptr) {
      const int64_t ca = fair->Counter(ra.client), cb = fair->Counter(rb.client);
      if (ca != cb) return ca > cb;
    }
    return order(b, a);
  };
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (before(candidates[i], candidates[victim])) victim = i;
  }
  return victim;
}

Status AdmissionPolicy::Admit(const QueueCounters& queue, const SchedRequest& request) const {
  if (queue.draining) {
    return UnavailableError(
        "the scheduler is draining (shutting down) and accepts no new requests");
  }
  if (queue.waiting_requests >= options_.max_queued_requests) {
    return ResourceExhaustedError(
        "the request queue is full: " + std::to_string(queue.waiting_requests) +
        " requests are waiting (limit --max-queued-requests=" +
        std::to_string(options_.max_queued_requests) + ")");
  }
  const int64_t tokens = static_cast<int64_t>(request.prompt.size()) * std::max(request.n, 1);
  if (queue.waiting_tokens + tokens > options_.max_queued_tokens) {
    return ResourceExhaustedError(
        "the request queue is full: " + std::to_string(queue.waiting_tokens) +
        " prompt tokens are waiting and this request adds " + std::to_string(tokens) +
        " (prompt length * n; limit --max-queued-tokens=" +
        std::to_string(options_.max_queued_tokens) + ")");
  }
  return OkStatus();
}

void StepCostModel::Observe(int64_t tokens, int64_t step_ns) {
  if (tokens <= 0 || step_ns <= 0) return;
  constexpr double kForget = 0.98;  // about the last 50 steps
  const double t = static_cast<double>(tokens);
  const double ms = static_cast<double>(step_ns) * 1e-6;
  s0_ = s0_ * kForget + 1;
  s1_ = s1_ * kForget + t;
  s2_ = s2_ * kForget + t * t;
  sy_ = sy_ * kForget + ms;
  sty_ = sty_ * kForget + t * ms;
  ++samples_;
  const double det = s0_ * s2_ - s1_ * s1_;
  double per_token = 0, fixed = 0;
  // Token counts that barely vary (steady decode) cannot separate the two terms: then the whole
  // time is taken as per-token, which overestimates prefill and so errs towards shorter steps.
  if (det > 1e-9 * s0_ * s2_) {
    per_token = (s0_ * sty_ - s1_ * sy_) / det;
    fixed = (sy_ - per_token * s1_) / s0_;
  }
  if (per_token <= 0 || fixed < 0) {
    per_token = sty_ / s2_;
    fixed = 0;
  }
  per_token_ms_ = per_token;
  fixed_ms_ = fixed;
}

int64_t StepCostModel::Budget(int64_t decode_rows, int64_t waiting, int64_t max_tokens) const {
  if (max_step_ms_ < 0 || decode_rows <= 0 || !calibrated() || per_token_ms_ <= 0) {
    return max_tokens;
  }
  const double queue = std::max(1.0, static_cast<double>(waiting) / decode_rows);
  const double target = max_step_ms_ > 0 ? static_cast<double>(max_step_ms_)
                                         : kAutoFactor * queue * PredictMs(decode_rows);
  const double fit = (target - fixed_ms_) / per_token_ms_;
  const int64_t tokens =
      fit >= static_cast<double>(max_tokens) ? max_tokens : static_cast<int64_t>(fit);
  return std::min(max_tokens, std::max(decode_rows + kMinPrefillTokens, tokens));
}

int Router::Pick(std::span<const WorkerLoad> workers, int64_t sequence_tokens) const {
  int best = -1;
  for (int i = 0; i < static_cast<int>(workers.size()); ++i) {
    const WorkerLoad& w = workers[i];
    if (!w.accepting || w.capacity_tokens < sequence_tokens) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const WorkerLoad& b = workers[best];
    if (w.sequences < b.sequences || (w.sequences == b.sequences && w.tokens < b.tokens)) best = i;
  }
  if (best < 0) return best;
  // Cache-aware: of the workers within the slack of the least loaded, the one holding the
  // longest cached prefix.
  int cached = -1;
  for (int i = 0; i < static_cast<int>(workers.size()); ++i) {
    const WorkerLoad& w = workers[i];
    if (!w.accepting || w.capacity_tokens < sequence_tokens || w.cached_tokens == 0 ||
        w.sequences > workers[best].sequences + cache_slack_) {
      continue;
    }
    if (cached < 0 || w.cached_tokens > workers[cached].cached_tokens ||
        (w.cached_tokens == workers[cached].cached_tokens &&
         w.sequences < workers[cached].sequences)) {
      cached = i;
    }
  }
  return cached >= 0 ? cached : best;
}

}  // namespace astr::sched
