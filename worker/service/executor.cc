#include "worker/service/executor.h"

#include <algorithm>
#include <chrono>
#include <span>

#include "common/base/clock.h"
#include "common/base/page_list.h"
#include "common/grpc/sampling_proto.h"
#include "worker/rope.h"

namespace astr {

StatusOr<SamplingParams> SamplingParamsFromProto(const v1::WorkerSamplingParams& p,
                                                 int64_t vocab_size) {
  SamplingParams s = rpc::FromWorkerProto(p);
  ASTR_RETURN_IF_ERROR(ValidateSamplingParams(s, vocab_size));
  return s;
}

WorkerExecutor::WorkerExecutor(std::unique_ptr<StepRunner> runner)
    : runner_(std::move(runner)), limits_(runner_->limits()) {
  const model::ModelConfig& c = runner_->config();
  vocab_size_ = c.vocab_size;
  const int64_t pool_tokens = limits_.num_pages * limits_.page_size;
  max_context_tokens_ = c.max_context_tokens > 0 ? c.max_context_tokens : pool_tokens;
  longrope_original_ = LongRopeOriginalContext(c);
  page_refs_.assign(static_cast<size_t>(limits_.num_pages), 0);
  batch_.set_window_tables(static_cast<int32_t>(limits_.kv_window_tables));
  sample_out_.resize(static_cast<size_t>(limits_.max_sample_rows));
}

void WorkerExecutor::AddPage(Sequence* seq, int32_t page) {
  seq->pages.push_back(page);
  if (page_refs_[page]++ == 0) ++pages_in_use_;
}

void WorkerExecutor::AddWindowPage(Sequence* seq, int32_t page) {
  seq->window_pages.push_back(page);
  if (page_refs_[page]++ == 0) ++pages_in_use_;
}

void WorkerExecutor::Unref(int32_t page) {
  if (--page_refs_[page] == 0) --pages_in_use_;
}

void WorkerExecutor::DropBehindWindow(Sequence* seq, int64_t position) {
  const int64_t tables = limits_.kv_window_tables;
  if (tables == 0) return;
  const int64_t first = FirstWindowPage(position, limits_.kv_window_tokens, limits_.page_size);
  if (first <= seq->window_first) return;
  const int64_t drop = (first - seq->window_first) * tables;
  for (int64_t i = 0; i < drop; ++i) Unref(seq->window_pages[i]);
  seq->window_pages.erase(seq->window_pages.begin(), seq->window_pages.begin() + drop);
  seq->window_first = first;
}

void WorkerExecutor::Release(uint64_t live_id) {
  auto it = live_.find(live_id);
  for (int32_t page : it->second.pages) Unref(page);
  for (int32_t page : it->second.window_pages) Unref(page);
  live_.erase(it);
}

void WorkerExecutor::Start(const v1::SequenceStart& start) {
  Sequence& seq = live_[start.live_id()];
  seq.context.assign(start.tokens().begin(), start.tokens().end());
  seq.num_prompt_tokens = start.num_prompt_tokens();
  seq.num_computed = start.num_cached_tokens();
  seq.pages.clear();
  seq.pages.reserve(start.pages_size());
  for (int32_t page : start.pages()) AddPage(&seq, page);
  seq.window_pages.clear();
  seq.window_first = start.window_first_page();
  seq.rope_long = longrope_original_ > 0 && start.tokens_size() > longrope_original_;
  for (int32_t page : start.window_pages()) AddWindowPage(&seq, page);
  // Validated already; the conversion cannot fail here.
  SamplingParams params = *SamplingParamsFromProto(start.params(), vocab_size_);
  // A sequence never holds more than max_context_tokens_ tokens, so a longer window is the whole
  // context; the sampler sizes its window buffer by this number, which comes from the client.
  if (params.penalty_window >= max_context_tokens_) params.penalty_window = 0;
  const std::span<const int32_t> prompt(seq.context.data(), seq.num_prompt_tokens);
  seq.sampler = std::make_unique<SequenceSampler>(std::move(params), start.sample_index(), prompt);
  // A restarted sequence (after preemption or a move) continues its RNG counter and penalty
  // counts: the tokens it generated before are appended as if sampled here.
  for (size_t i = seq.num_prompt_tokens; i < seq.context.size(); ++i) {
    seq.sampler->Append(seq.context[i]);
  }
  seq.score_from = start.score_from();
  seq.scorer.reset();
  if (seq.score_from > 0) {
    seq.scorer = std::make_unique<PromptScorer>(
        seq.sampler->params(), start.sample_index(),
        std::span<const int32_t>(seq.context.data(), static_cast<size_t>(seq.score_from)));
  }
}

void WorkerExecutor::AddScoredRows(uint64_t live_id, Sequence* seq, int64_t begin, int64_t end,
                                   int64_t first_row) {
  if (seq->scorer == nullptr) return;
  const ScoredRows rows = ScoredRowsOf(seq->score_from, seq->num_prompt_tokens, begin, end);
  for (int64_t pos = rows.begin; pos < rows.end; ++pos) {
    score_rows_.push_back(static_cast<int32_t>(first_row + pos - begin));
    scores_.push_back({.scorer = seq->scorer.get(), .token = seq->context[pos + 1]});
    scored_.push_back({.live_id = live_id, .seq = seq, .position = pos + 1});
  }
}

void WorkerExecutor::EmitPromptScores(std::span<const SampleResult> out, v1::StepResult* result) {
  for (size_t j = 0; j < scored_.size(); ++j) {
    const SampleResult& r = out[j];
    v1::PromptTokenScore* score = result->add_prompt_scores();
    score->set_live_id(scored_[j].live_id);
    score->set_position(static_cast<int32_t>(scored_[j].position));
    score->set_logprob(r.logprob);
    for (int32_t k = 0; k < r.num_top; ++k) {
      v1::TokenLogprob* alt = score->add_top();
      alt->set_token_id(r.top[k].id);
      alt->set_logprob(r.top[k].logprob);
    }
    Sequence* seq = scored_[j].seq;
    if (scored_[j].position == seq->num_prompt_tokens - 1) seq->scorer.reset();
  }
}

const uint32_t* WorkerExecutor::CopyMask(const std::string& bytes) {
  if (bytes.empty()) return nullptr;
  const size_t words = bytes.size() / 4;
  if (mask_storage_.empty()) {  // once: room for every sample row, so pointers stay valid
    mask_storage_.resize(static_cast<size_t>(limits_.max_sample_rows) * words);
  }
  uint32_t* dst = mask_storage_.data() + masks_used_ * words;
  ++masks_used_;
  for (size_t w = 0; w < words; ++w) {  // little-endian words, whatever the host
    const auto* b = reinterpret_cast<const uint8_t*>(bytes.data()) + 4 * w;
    dst[w] = uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
  }
  return dst;
}

Status WorkerExecutor::ReadLateMasks(const v1::StepPlan& plan, const ReadNext& read_next) {
  const std::string step = "step " + std::to_string(plan.step_id());
  if (!read_next) return InternalError(step + ": masks follow, but nothing reads them");
  v1::StepPlan masks;
  if (!read_next(&masks)) return UnavailableError(step + ": the stream ended before its masks");
  if (masks.masks_for_step() != plan.step_id() ||
      masks.entries_size() != static_cast<int>(late_masks_.size())) {
    return InternalError(step + ": expected its masks (" + std::to_string(late_masks_.size()) +
                         " entries), got a message for step " +
                         std::to_string(masks.masks_for_step()) + " with " +
                         std::to_string(masks.entries_size()));
  }
  for (int k = 0; k < masks.entries_size(); ++k) {
    const v1::StepEntry& e = masks.entries(k);
    SampleRequest& s = samples_[late_masks_[static_cast<size_t>(k)]];
    if (e.live_id() != s.live_id) {
      return InternalError(step + ": masks entries[" + std::to_string(k) + "] is for sequence " +
                           std::to_string(e.live_id()) + ", not " + std::to_string(s.live_id));
    }
    if (e.allowed_tokens().empty()) continue;
    if (const std::string why = MaskProblem(e.allowed_tokens()); !why.empty()) {
      return InternalError(step + ": masks entries[" + std::to_string(k) + "].allowed_tokens " +
                           why);
    }
    s.allowed = CopyMask(e.allowed_tokens());
  }
  return OkStatus();
}

Status WorkerExecutor::Execute(const v1::StepPlan& plan, v1::StepResult* result,
                               const ReadNext& read_next) {
  const auto step_start = std::chrono::steady_clock::now();
  ASTR_RETURN_IF_ERROR(Validate(plan));

  for (uint64_t id : plan.release()) Release(id);
  for (const v1::SequenceStart& start : plan.start()) Start(start);
  // The scheduler gave back, for this plan, every live sequence's window ids that no query from
  // its next position on reads, whether or not the sequence has an entry in it.
  if (limits_.kv_window_tables > 0) {
    for (auto& [id, seq] : live_) DropBehindWindow(&seq, seq.num_computed);
  }

  batch_.Clear();
  masks_used_ = 0;
  late_masks_.clear();
  samples_.clear();
  sample_seqs_.clear();
  score_rows_.clear();
  scores_.clear();
  scored_.clear();
  for (const v1::StepEntry& entry : plan.entries()) {
    Sequence* seq = &live_.find(entry.live_id())->second;
    for (int32_t page : entry.new_pages()) AddPage(seq, page);
    for (int32_t page : entry.new_window_pages()) AddWindowPage(seq, page);
    const int64_t begin = entry.start_position();
    const int64_t first_row = batch_.num_tokens();
    batch_.Append(seq->context.data() + begin, entry.num_tokens(), begin, seq->pages.data(),
                  limits_.page_size, entry.sample(), seq->window_pages.data(), seq->window_first,
                  seq->rope_long);
    AddScoredRows(entry.live_id(), seq, begin, begin + entry.num_tokens(), first_row);
    seq->num_computed = begin + entry.num_tokens();
    if (entry.sample()) {
      samples_.push_back({.live_id = entry.live_id(),
                          .position = static_cast<int64_t>(seq->context.size()),
                          .sampler = seq->sampler.get(),
                          .allowed = CopyMask(entry.allowed_tokens())});
      if (entry.mask_follows()) late_masks_.push_back(samples_.size() - 1);
      sample_seqs_.push_back(seq);
    }
  }

  // Scored rows come after the sample rows (StepRunner::Run).
  batch_.sample_rows.insert(batch_.sample_rows.end(), score_rows_.begin(), score_rows_.end());

  result->Clear();
  result->set_step_id(plan.step_id());
  result->set_weight_version(weight_version());
  if (!plan.entries().empty()) {
    RunTimings timings;
    const std::span<SampleResult> out(sample_out_.data(), samples_.size() + scores_.size());
    std::function<Status()> late;
    if (!late_masks_.empty()) late = [&] { return ReadLateMasks(plan, read_next); };
    const Status run =
        runner_->Run(batch_, samples_, scores_, out, &timings, late, !late_masks_.empty());
    if (!run.ok())
      return run.code() == StatusCode::kInvalidArgument ? InternalError(run.message()) : run;
    result->set_forward_ns(timings.forward_ns);
    result->set_sample_ns(timings.sample_ns);
    for (size_t i = 0; i < samples_.size(); ++i) {
      const SampleResult& r = out[i];
      Sequence* seq = sample_seqs_[i];
      seq->sampler->Append(r.token);
      seq->context.push_back(r.token);
      v1::SampledToken* token = result->add_samples();
      token->set_live_id(samples_[i].live_id);
      token->set_token_id(r.token);
      token->set_logprob(r.logprob);
      for (int32_t k = 0; k < r.num_top; ++k) {
        v1::TokenLogprob* alt = token->add_top();
        alt->set_token_id(r.top[k].id);
        alt->set_logprob(r.top[k].logprob);
      }
      if (seq->sampler->params().return_sampling_mask) {
        v1::SamplingMask* mask = token->mutable_sampling_mask();
        mask->set_count(r.mask.count);
        mask->mutable_token_ids()->Add(r.mask.ids.begin(), r.mask.ids.end());
      }
    }
    EmitPromptScores(out.subspan(samples_.size()), result);
  }
  ++steps_;
  PublishCounters();
  result->set_step_ns(NanosSince(step_start));
  return OkStatus();
}

void WorkerExecutor::Reset() {
  live_.clear();
  std::fill(page_refs_.begin(), page_refs_.end(), 0);
  pages_in_use_ = 0;
  PublishCounters();
}

void WorkerExecutor::PublishCounters() {
  live_counter_.store(static_cast<int64_t>(live_.size()), std::memory_order_relaxed);
  pages_counter_.store(pages_in_use_, std::memory_order_relaxed);
  steps_counter_.store(steps_, std::memory_order_relaxed);
}

WorkerExecutor::Counters WorkerExecutor::counters() const {
  return {.live_sequences = live_counter_.load(std::memory_order_relaxed),
          .pages_in_use = pages_counter_.load(std::memory_order_relaxed),
          .steps = steps_counter_.load(std::memory_order_relaxed)};
}

}  // namespace astr
