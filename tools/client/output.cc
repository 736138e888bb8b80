#include "tools/client/output.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <sstream>

namespace astr::cli {

const char* FinishReasonLabel(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_EOS:
      return "eos";
    case v1::FINISH_REASON_ABORT:
      return "abort";
    default:
      return "";
  }
}

namespace {

template <typename M>
std::string MatchedStop(const M& m) {
  if (m.has_stop_string()) return m.stop_string();
  if (m.has_stop_token_id()) return "id " + std::to_string(m.stop_token_id());
  return "";
}

}  // namespace

StreamPrinter::StreamPrinter(FILE* out, int n)
    : out_(out), label_(n > 1), samples_(static_cast<size_t>(std::max(n, 1))) {}

void StreamPrinter::Print(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), out_);
  std::fflush(out_);
  at_line_start_ = text.back() == '\n';
}

void StreamPrinter::StartSample(int index) {
  if (label_) Print("--- sample " + std::to_string(index) + " ---\n");
  Print(samples_[index].text);
}

void StreamPrinter::EndSample() {
  if (!at_line_start_) Print("\n");
}

void StreamPrinter::Add(const v1::GenerateStreamResponse& m) {
  if (m.has_usage()) usage_ = m.usage();
  if (m.has_timings()) timings_ = m.timings();
  if (m.seed() != 0) seed_ = m.seed();
  const int index = m.index();
  if (index < 0) return;
  // A server that sends more samples than asked still has them shown, not dropped.
  if (static_cast<size_t>(index) >= samples_.size()) {
    samples_.resize(index + 1);
    label_ = true;
  }
  if (!started_) {
    started_ = true;
    StartSample(0);
  }
  SampleOutput& s = samples_[index];
  s.text += m.text();
  s.tokens += m.token_ids_size();
  if (index == current_) Print(m.text());
  if (m.finish_reason() == v1::FINISH_REASON_UNSPECIFIED) return;
  s.finish = m.finish_reason();
  s.matched_stop = MatchedStop(m);
  // The live sample ended: show the next ones, each whole so far, until one is still running.
  while (current_ < static_cast<int>(samples_.size()) &&
         samples_[current_].finish != v1::FINISH_REASON_UNSPECIFIED) {
    EndSample();
    if (++current_ < static_cast<int>(samples_.size())) StartSample(current_);
  }
}

void StreamPrinter::Finish() {
  if (!started_) return;
  if (current_ >= static_cast<int>(samples_.size())) return;
  EndSample();
  while (++current_ < static_cast<int>(samples_.size())) {
    StartSample(current_);
    EndSample();
  }
}

std::vector<SampleOutput> SamplesOf(const v1::GenerateResponse& response) {
  std::vector<SampleOutput> out;
  for (const auto& c : response.completions()) {
    SampleOutput s;
    s.text = c.text();
    s.tokens = c.token_ids_size();
    s.finish = c.finish_reason();
    s.matched_stop = MatchedStop(c);
    out.push_back(std::move(s));
  }
  return out;
}

std::string SummaryLine(const std::vector<SampleOutput>& samples, const v1::Usage& usage,
                        const v1::Timings& timings, uint64_t seed) {
  std::ostringstream o;
  o << "finish: ";
  for (size_t i = 0; i < samples.size(); ++i) {
    if (i > 0) o << ", ";
    if (samples.size() > 1) o << "[" << i << "] ";
    const char* label = FinishReasonLabel(samples[i].finish);
    o << (*label != '\0' ? label : "none");
    if (!samples[i].matched_stop.empty()) o << " (" << samples[i].matched_stop << ")";
  }
  o << "; " << usage.prompt_tokens() << " prompt + " << usage.completion_tokens()
    << " completion tokens (" << usage.cached_tokens() << " cached)";
  const double ttft_ms = timings.time_to_first_token_ns() / 1e6;
  const double total_ms = timings.total_ns() / 1e6;
  o.setf(std::ios::fixed);
  o.precision(0);
  if (timings.total_ns() > 0) {
    o << "; first token " << ttft_ms << " ms, total " << total_ms << " ms";
    if (usage.completion_tokens() > 0) {
      o.precision(1);
      o << " (" << usage.completion_tokens() / (total_ms / 1e3) << " tok/s)";
    }
  }
  if (timings.preemptions() > 0) o << "; preempted " << timings.preemptions() << "x";
  if (seed != 0) o << "; seed " << seed;
  return o.str();
}

std::string JsonLine(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) return "{\"error\":\"cannot print the message as JSON\"}";
  return out;
}

}  // namespace astr::cli
