// Terminal output of the client subcommands: streamed text as it arrives, the end-of-request
// summary (finish reasons, usage, timings) and JSON lines.
#pragma once

#include <google/protobuf/message.h>

#include <cstdio>
#include <string>
#include <vector>

#include "astr/client.h"

namespace astr::cli {

// "length", "stop", "eos", "abort", or "" while a sample runs.
const char* FinishReasonLabel(v1::FinishReason reason);

// What one sample produced.
struct SampleOutput {
  std::string text;
  int64_t tokens = 0;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  std::string matched_stop;  // the stop string or "id N", when finish is STOP
};

// Prints a streamed request's text to `out` as it arrives, flushing each piece. With several
// samples each one is printed whole under a "--- sample i ---" header: sample 0 live, the others
// kept until the samples before them have finished, then printed and followed live.
class StreamPrinter {
 public:
  StreamPrinter(FILE* out, int n);
  void Add(const v1::GenerateStreamResponse& message);
  // Prints whatever is still held back (a stream that ended early) and the final newline.
  void Finish();

  const std::vector<SampleOutput>& samples() const { return samples_; }
  const v1::Usage& usage() const { return usage_; }
  const v1::Timings& timings() const { return timings_; }
  uint64_t seed() const { return seed_; }

 private:
  void Print(const std::string& text);
  void StartSample(int index);
  void EndSample();

  FILE* out_;
  bool label_;
  int current_ = 0;  // the sample being printed live
  bool started_ = false;
  bool at_line_start_ = true;
  std::vector<SampleOutput> samples_;
  v1::Usage usage_;
  v1::Timings timings_;
  uint64_t seed_ = 0;
};

// Samples of a unary response, in index order.
std::vector<SampleOutput> SamplesOf(const v1::GenerateResponse& response);

// One line: "finish: eos; 12 prompt + 30 completion tokens (0 cached); first token 45 ms,
// total 310 ms; seed 7".
std::string SummaryLine(const std::vector<SampleOutput>& samples, const v1::Usage& usage,
                        const v1::Timings& timings, uint64_t seed);

// `message` as one line of JSON with the proto's field names (snake_case).
std::string JsonLine(const google::protobuf::Message& message);

}  // namespace astr::cli
