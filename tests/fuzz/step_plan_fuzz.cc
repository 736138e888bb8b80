// Fuzz target: the worker's plan validation and step execution (worker/service/executor.h) on a
// live executor over stories260K (stories_worker.h). Input: a stream of serialized
// astr.v1.StepPlans, each framed by a u16 little-endian length (fuzz_input.h Record), fed as the
// worker's step stream feeds them: a masks message (masks_for_step) outside a step is skipped, a
// plan whose masks follow reads the next record as them, a refused plan (INVALID_ARGUMENT) is
// answered and the stream goes on, and any other error ends the stream. The stream's end resets
// the executor, as a closed stream does.
//
// Checked, as executor.h promises: a refused plan changes nothing (live sequences, pages in use,
// steps), and a reset leaves no sequence and no page behind, so no state leaks into the next input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "astr/v1/worker.pb.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/stories_worker.h"

namespace astr::fuzz {
namespace {

// Enough for a few sequences to start, prefill in chunks, decode and be released.
constexpr int kMaxPlans = 32;

bool SameState(const WorkerExecutor::Counters& a, const WorkerExecutor::Counters& b) {
  return a.live_sequences == b.live_sequences && a.pages_in_use == b.pages_in_use &&
         a.steps == b.steps;
}

}  // namespace
}  // namespace astr::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  astr::fuzz::InitQuietLogging((*argv)[0]);
  (void)astr::fuzz::FuzzStoriesWorker();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace astr;
  WorkerExecutor& executor = *fuzz::FuzzStoriesWorker().executor;
  fuzz::FuzzInput in(data, size);
  const WorkerExecutor::ReadNext read_next = [&in](v1::StepPlan* plan) {
    if (in.empty()) return false;
    const std::string_view record = in.Record();
    return plan->ParseFromArray(record.data(), static_cast<int>(record.size()));
  };
  v1::StepPlan plan;
  v1::StepResult result;
  for (int i = 0; i < fuzz::kMaxPlans && read_next(&plan); ++i) {
    if (plan.masks_for_step() != 0) continue;
    const WorkerExecutor::Counters before = executor.counters();
    const Status status = executor.Execute(plan, &result, read_next);
    if (status.code() == StatusCode::kInvalidArgument) {
      if (!fuzz::SameState(before, executor.counters())) __builtin_trap();
    } else if (!status.ok()) {
      break;
    }
  }
  executor.Reset();
  const WorkerExecutor::Counters after = executor.counters();
  if (after.live_sequences != 0 || after.pages_in_use != 0) __builtin_trap();
  return 0;
}
