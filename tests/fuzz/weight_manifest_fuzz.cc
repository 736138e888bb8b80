// Fuzz target: the worker's weight-update stream (worker/service/weight_updates.h): the manifest
// check and the chunk assembly of WeightStager, then the staging, apply and rollback of
// WeightUpdates, on the live stories260K worker of stories_worker.h. Input: a stream of serialized
// astr.v1.UpdateWeightsRequests, each framed by a u16 little-endian length (fuzz_input.h Record),
// handled as the worker's StageWeights handles its stream: the first message must carry the
// manifest, no later one may, every chunk goes to the stager, and the stream's end (or a record
// that does not parse) finishes it.
//
// An update that stages is applied, one greedy step runs on its weights (whatever values they
// hold: NaN and infinities included), and it is rolled back. Checked, as weight_updates.h
// promises: the rollback restores the served weights bit for bit (the greedy token and its logprob
// are those of the model), and no weight set is held beside the served one afterwards.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "astr/v1/admin.pb.h"
#include "astr/v1/worker.pb.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/stories_worker.h"
#include "worker/service/weight_updates.h"

namespace astr::fuzz {
namespace {

constexpr int kMaxMessages = 64;

WeightUpdates* g_updates = nullptr;
v1::SampledToken* g_served_token = nullptr;  // the served model's greedy token for the prompt

// The stager's part: the received tensors, or nothing when the stream is refused.
StatusOr<UpdateTensors> Receive(FuzzInput& in, WeightStager& stager) {
  v1::UpdateWeightsRequest message;
  for (int i = 0; i < kMaxMessages && !in.empty(); ++i) {
    const std::string_view record = in.Record();
    if (!message.ParseFromArray(record.data(), static_cast<int>(record.size()))) break;
    if (i == 0) {
      if (!message.has_manifest()) return InvalidArgumentError("no manifest");
      ASTR_RETURN_IF_ERROR(stager.Begin(message.manifest()));
    } else if (message.has_manifest()) {
      return InvalidArgumentError("a second manifest");
    }
    for (const v1::WeightChunk& chunk : message.chunks()) ASTR_RETURN_IF_ERROR(stager.Add(chunk));
  }
  return stager.Finish();
}

// Starts a sequence on "Once upon a time", samples its first token greedily, and releases it.
StatusOr<v1::SampledToken> GreedyFirstToken(WorkerExecutor& executor) {
  static uint64_t step_id = 0;
  v1::StepPlan plan;
  plan.set_step_id(++step_id);
  v1::SequenceStart* start = plan.add_start();
  start->set_live_id(1);
  start->mutable_params()->set_top_p(1);
  start->mutable_params()->set_repetition_penalty(1);
  start->mutable_params()->set_return_logprob(true);
  for (int32_t t : {1, 403, 407, 261, 378}) start->add_tokens(t);
  start->set_num_prompt_tokens(5);
  v1::StepEntry* entry = plan.add_entries();
  entry->set_live_id(1);
  entry->set_num_tokens(5);
  entry->add_new_pages(0);
  entry->add_new_pages(1);
  entry->set_sample(true);
  v1::StepResult result;
  const Status status = executor.Execute(plan, &result);
  executor.Reset();
  ASTR_RETURN_IF_ERROR(status);
  if (result.samples_size() != 1) return InternalError("expected one sampled token");
  return result.samples(0);
}

bool SameToken(const v1::SampledToken& a, const v1::SampledToken& b) {
  const float la = a.logprob(), lb = b.logprob();
  return a.token_id() == b.token_id() && std::memcmp(&la, &lb, sizeof(la)) == 0;
}

v1::ControlWeightsRequest Control(v1::ControlWeightsRequest::Action action, uint64_t staged_id,
                                  int64_t version) {
  v1::ControlWeightsRequest r;
  r.set_action(action);
  r.set_staged_id(staged_id);
  r.set_version(version);
  return r;
}

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// Serves the staged update for one step, then rolls it back.
void ApplyAndRollBack(uint64_t staged_id) {
  StoriesWorker& w = FuzzStoriesWorker();
  WorkerExecutor& executor = *w.executor;
  StepRunner& runner = executor.mutable_runner();
  std::vector<std::unique_ptr<WeightSet>> dropped;
  const int64_t served = g_updates->version();
  Check(g_updates
            ->Control(Control(v1::ControlWeightsRequest::APPLY, staged_id, served + 1), runner,
                      executor, &dropped)
            .ok());
  (void)GreedyFirstToken(executor);  // any token, or a refusal: the weights are arbitrary
  Check(g_updates
            ->Control(Control(v1::ControlWeightsRequest::ROLLBACK, staged_id, served), runner,
                      executor, &dropped)
            .ok());
  auto token = GreedyFirstToken(executor);
  Check(token.ok() && SameToken(*token, *g_served_token));
  const WeightUpdates::Holding holding = g_updates->holding();
  Check(!holding.staged && !holding.previous);
}

}  // namespace
}  // namespace astr::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  using namespace astr;
  fuzz::InitQuietLogging((*argv)[0]);
  fuzz::StoriesWorker& w = fuzz::FuzzStoriesWorker();
  fuzz::g_updates = new WeightUpdates(w.path, w.file->config());
  auto token = fuzz::GreedyFirstToken(*w.executor);
  if (!token.ok()) {
    std::fprintf(stderr, "fuzz: the greedy step fails: %s\n", token.status().ToString().c_str());
    std::abort();
  }
  fuzz::g_served_token = new v1::SampledToken(*token);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace astr;
  fuzz::FuzzInput in(data, size);
  WeightStager stager(fuzz::g_updates->config());
  auto tensors = fuzz::Receive(in, stager);
  if (!tensors.ok()) return 0;
  auto staged = fuzz::g_updates->StageTensors(std::move(*tensors), stager.bytes_received(),
                                              fuzz::FuzzStoriesWorker().executor->mutable_runner());
  if (staged.ok()) fuzz::ApplyAndRollBack(staged->staged_id());
  return 0;
}
