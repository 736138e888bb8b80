// Fuzz target: the worker's weight-update stream (worker/service/weight_updates.h): the manifest
// check and the chunk assembly of WeightStager, then the staging, apply and rollback of
// WeightUpdates, on the live stories260K worker of stories_worker.h. Input: a stream of serialized
// astr.v1.UpdateWeightsRequests, each framed by a u16 little-endian length (fuzz_input.h Record),
// handled as the worker's StageWeights handles its stream: each record parsed from its bytes
// (raw_update_message.h, checked against protobuf's parse of the same record), the first message
// must carry the manifest, no later one may, every chunk goes to the stager, and the stream's end
// (or a record that does not parse) finishes it.
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
#include <string>
#include <string_view>
#include <vector>

#include "astr/v1/admin.pb.h"
#include "astr/v1/worker.pb.h"
#include "common/grpc/raw_update_message.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/stories_worker.h"
#include "worker/service/weight_updates.h"

namespace astr::fuzz {
namespace {

constexpr int kMaxMessages = 64;

WeightUpdates* g_updates = nullptr;
v1::SampledToken* g_served_token = nullptr;  // the served model's greedy token for the prompt

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

struct Chunk {
  int32_t tensor;
  int64_t offset;
  std::string data;
};

// The stager's part: the received tensors, or nothing when the stream is refused. Each record is
// parsed as the worker parses it (raw_update_message.h, from a ByteBuffer cut in three slices);
// whatever that parser accepts, protobuf must read the same way (the same manifest and chunks).
StatusOr<UpdateTensors> Receive(FuzzInput& in, WeightStager& stager) {
  for (int i = 0; i < kMaxMessages && !in.empty(); ++i) {
    const std::string_view record = in.Record();
    std::vector<grpc::Slice> slices;
    const size_t a = record.size() / 3, b = 2 * record.size() / 3;
    slices.emplace_back(record.data(), a);
    slices.emplace_back(record.data() + a, b - a);
    slices.emplace_back(record.data() + b, record.size() - b);
    const grpc::ByteBuffer bytes(slices.data(), slices.size());
    RawUpdateMessage message;
    std::vector<Chunk> chunks;
    const Status parsed =
        ParseRawUpdateMessage(bytes, &message, [&](int32_t t, int64_t o, ChunkPieces pieces) {
          std::string data;
          for (const auto& p : pieces)
            data.append(reinterpret_cast<const char*>(p.data()), p.size());
          chunks.push_back({t, o, std::move(data)});
          return OkStatus();
        });
    if (!parsed.ok()) break;  // the worker refuses the stream
    v1::UpdateWeightsRequest oracle;
    Check(oracle.ParseFromArray(record.data(), static_cast<int>(record.size())));
    Check(oracle.has_manifest() == message.has_manifest);
    Check(oracle.manifest().SerializeAsString() == message.manifest.SerializeAsString());
    Check(static_cast<size_t>(oracle.chunks_size()) == chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) {
      const v1::WeightChunk& want = oracle.chunks(static_cast<int>(c));
      Check(want.tensor() == chunks[c].tensor && want.offset() == chunks[c].offset &&
            want.data() == chunks[c].data);
    }
    if (i == 0) {
      if (!message.has_manifest) return InvalidArgumentError("no manifest");
      ASTR_RETURN_IF_ERROR(stager.Begin(message.manifest));
    } else if (message.has_manifest) {
      return InvalidArgumentError("a second manifest");
    }
    for (const Chunk& c : chunks) {
      ASTR_RETURN_IF_ERROR(stager.Add(
          c.tensor, c.offset, reinterpret_cast<const uint8_t*>(c.data.data()), c.data.size()));
    }
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
