// Weight updates on the CUDA backend (PrepareWeights / SwapWeights, cuda_weight_set.h), with CUDA
// graphs on: after a swap the backend computes, bit for bit, what a backend created from the new
// model computes, by replaying the graphs it captured before the swap (none re-captured, no device
// memory allocated); a second swap with the set the first returned (a rollback) brings back the
// old logits bit for bit; preparing on another thread while steps run changes nothing served; and
// an update of another shape fails in PrepareWeights and leaves serving as it was.
//
// Bit for bit: the same kernels on the same shapes and the same device, and graph replay equals
// eager launches bit for bit (graph_replay cases), so any difference is a weight that did not
// arrive, or arrived in the wrong place.
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu/model_fixtures.h"
#include "tests/gpu/op_test.h"
#include "worker/backends/cuda/cuda_backend.h"
#include "worker/backends/cuda/device_memory.h"

namespace astr::gputest {
namespace {

// A served model, an update of the same shape with other values (another seed), and one of
// another shape.
struct UpdateCase {
  std::string name;
  ModelSpec served, update, wrong_shape;
};

UpdateCase MakeCase(const std::string& name, const std::string& args, int seed,
                    const std::string& wrong_flag) {
  const std::string s = std::to_string(seed), u = std::to_string(seed + 10);
  return {name,
          {"update-" + name + "-served", args + " --seed " + s, ""},
          {"update-" + name + "-new", args + " --seed " + u, ""},
          {"update-" + name + "-wrong", args + " " + wrong_flag + " --seed " + u, ""}};
}

const std::vector<UpdateCase>& Cases() {
  static const std::vector<UpdateCase> cases = {
      MakeCase("llama-d64",
               "--arch llama --hidden 256 --layers 2 --heads 4 --kv-heads 1 --ffn 512 --vocab 1000",
               11, "--ffn 384"),
      // qkv bias.
      MakeCase("qwen2-d128",
               "--arch qwen2 --hidden 512 --layers 2 --heads 4 --kv-heads 2 --ffn 768 --vocab 1500",
               12, "--kv-heads 1"),
      // q/k norm, lm_head tied to the embedding.
      MakeCase("qwen3-d128-tied",
               "--arch qwen3 --hidden 256 --layers 2 --heads 4 --kv-heads 2 --head-dim 128 "
               "--ffn 512 --vocab 1200 --tie",
               13, "--vocab 1100"),
  };
  return cases;
}

using Logits = std::vector<std::vector<float>>;  // per step: [sample rows, vocab]

constexpr int kProbeDecodeSteps = 7;

// One fixed run from empty sequences on pages 0..127 (whatever earlier runs left there is
// overwritten before it is read): a prefill of 4 prompts, then decode steps at buckets 1, 2 and 4
// (padded ones included), each sequence extended by its argmax. Every step's logits.
StatusOr<Logits> Probe(Backend& backend) {
  const int64_t vocab = backend.config().vocab_size;
  Driver d;
  const std::vector<int64_t> lens = {5, 17, 33, 2};
  for (size_t i = 0; i < lens.size(); ++i) {
    d.Add(Prompt(lens[i], vocab, 7 + static_cast<int64_t>(i)));
  }
  Logits out;
  std::vector<size_t> sampled;
  std::vector<float> logits(16 * vocab);
  auto run = [&](const StepBatch& batch) -> Status {
    ASTR_RETURN_IF_ERROR(backend.Forward(batch, logits.data()));
    out.emplace_back(logits.begin(), logits.begin() + static_cast<int64_t>(sampled.size()) * vocab);
    d.Accept(sampled, logits, vocab);
    return OkStatus();
  };
  ASTR_RETURN_IF_ERROR(run(d.Next(&sampled)));
  const size_t decode[kProbeDecodeSteps] = {1, 2, 4, 3, 4, 1, 2};
  for (size_t n : decode) ASTR_RETURN_IF_ERROR(run(d.Decode(n, &sampled)));
  return out;
}

// "" when both runs have the same logits bit for bit, else where they first differ.
std::string FirstDifference(const Logits& got, const Logits& want) {
  if (got.size() != want.size()) {
    return std::to_string(got.size()) + " steps, expected " + std::to_string(want.size());
  }
  for (size_t s = 0; s < got.size(); ++s) {
    if (got[s].size() != want[s].size()) return "step " + std::to_string(s) + ": size differs";
    if (std::memcmp(got[s].data(), want[s].data(), got[s].size() * sizeof(float)) == 0) continue;
    int64_t at = 0;
    const double err =
        MaxAbsDiff(got[s].data(), want[s].data(), static_cast<int64_t>(got[s].size()), &at);
    return "step " + std::to_string(s) + " (0 = prefill) logit " + std::to_string(at) + ": got " +
           std::to_string(got[s][at]) + " want " + std::to_string(want[s][at]) + " (max |diff| " +
           std::to_string(err) + ")";
  }
  return "";
}

// The served backend and one created from the update, each probed once (the served one captures
// the graphs of buckets 1, 2 and 4).
struct Probed {
  std::unique_ptr<model::ModelFile> served_file, update_file;
  std::unique_ptr<cuda::CudaBackend> served, fresh;
  Logits before, want_new;
};

StatusOr<Probed> ServedAndFresh(const UpdateCase& uc) {
  Probed p;
  ASTR_ASSIGN_OR_RETURN(p.served_file, OpenModel(uc.served));
  ASTR_ASSIGN_OR_RETURN(p.update_file, OpenModel(uc.update));
  ASTR_ASSIGN_OR_RETURN(p.served, cuda::CudaBackend::Create(*p.served_file, Options(true)));
  ASTR_ASSIGN_OR_RETURN(p.fresh, cuda::CudaBackend::Create(*p.update_file, Options(true)));
  ASTR_ASSIGN_OR_RETURN(p.before, Probe(*p.served));
  ASTR_ASSIGN_OR_RETURN(p.want_new, Probe(*p.fresh));
  return p;
}

// Prepare on another thread while the served model runs, swap, compare with a fresh backend of
// the new model; swap back, compare with the logits from before.
CaseResult SwapMatchesFreshBackend(const UpdateCase& uc) {
  auto probed = ServedAndFresh(uc);
  if (!probed.ok()) return Fail(probed.status().ToString());
  cuda::CudaBackend& b = *probed->served;
  const auto& update_file = probed->update_file;
  const Logits* before = &probed->before;
  const Logits* want_new = &probed->want_new;
  if (FirstDifference(*before, *want_new).empty()) {
    return Fail("the two models give the same logits: a swap would go unnoticed");
  }
  const int captured = b.graphs().captured();
  if (captured != 3) return Fail("captured " + std::to_string(captured) + " graphs, expected 3");
  const int64_t replays = b.graphs().replays();
  const int64_t allocations = cuda::DeviceAllocator::allocations();

  StatusOr<std::unique_ptr<WeightSet>> prepared = InternalError("PrepareWeights did not run");
  std::thread preparer([&] { prepared = b.PrepareWeights(*update_file); });
  auto during = Probe(b);
  preparer.join();
  if (!prepared.ok()) return Fail("PrepareWeights: " + prepared.status().ToString());
  if (!during.ok()) return Fail(during.status().ToString());
  if (std::string e = FirstDifference(*during, *before); !e.empty()) {
    return Fail("while preparing, the served logits changed: " + e);
  }

  std::unique_ptr<WeightSet> old = b.SwapWeights(std::move(*prepared));
  auto after = Probe(b);
  if (!after.ok()) return Fail(after.status().ToString());
  if (std::string e = FirstDifference(*after, *want_new); !e.empty()) {
    return Fail("after the swap, against a backend created from the new model: " + e);
  }

  std::unique_ptr<WeightSet> dropped = b.SwapWeights(std::move(old));
  auto rolled_back = Probe(b);
  if (!rolled_back.ok()) return Fail(rolled_back.status().ToString());
  if (std::string e = FirstDifference(*rolled_back, *before); !e.empty()) {
    return Fail("after the rollback, against the logits from before: " + e);
  }

  if (b.graphs().captured() != captured) {
    return Fail("graphs captured again: " + std::to_string(b.graphs().captured()));
  }
  const int64_t want_replays = replays + 3 * kProbeDecodeSteps;
  if (b.graphs().replays() != want_replays) {
    return Fail(std::to_string(b.graphs().replays() - replays) + " replays over three probes, " +
                "expected " + std::to_string(3 * kProbeDecodeSteps));
  }
  if (cuda::DeviceAllocator::allocations() != allocations) {
    return Fail("preparing or swapping allocated device memory");
  }
  CaseResult r = Pass(0.0, 0.0);
  r.detail = "logits bit-exact after the swap and the rollback; " +
             std::to_string(dropped->bytes()) + " host bytes per weight set; " +
             std::to_string(3 * kProbeDecodeSteps) + " graph replays, none re-captured";
  return r;
}

// An update of another shape fails in PrepareWeights, naming a tensor; serving is unchanged.
CaseResult WrongShapeChangesNothing(const UpdateCase& uc) {
  auto served_file = OpenModel(uc.served);
  auto wrong_file = OpenModel(uc.wrong_shape);
  if (!served_file.ok() || !wrong_file.ok()) {
    return Fail((served_file.ok() ? wrong_file.status() : served_file.status()).ToString());
  }
  auto served = cuda::CudaBackend::Create(**served_file, Options(true));
  if (!served.ok()) return Fail(served.status().ToString());
  auto before = Probe(**served);
  if (!before.ok()) return Fail(before.status().ToString());
  auto prepared = (*served)->PrepareWeights(**wrong_file);
  if (prepared.ok()) return Fail("PrepareWeights accepted a model of another shape");
  if (prepared.status().code() != StatusCode::kInvalidArgument ||
      prepared.status().message().find("tensor '") == std::string::npos) {
    return Fail("expected INVALID_ARGUMENT naming a tensor, got " + prepared.status().ToString());
  }
  auto after = Probe(**served);
  if (!after.ok()) return Fail(after.status().ToString());
  if (std::string e = FirstDifference(*after, *before); !e.empty()) {
    return Fail("serving changed after a failed PrepareWeights: " + e);
  }
  CaseResult r = Pass(0.0, 0.0);
  r.detail = prepared.status().message();
  return r;
}

// ReleaseMemory / ResumeMemory (docs/rl.md "Releasing GPU memory"): with the weights kept on the
// host, the device's free memory grows by what is released, steps are refused meanwhile, and after
// resuming the captured graphs replay the same logits bit for bit; with the weights discarded,
// a swap to the update after resuming gives a fresh backend's logits of it.
CaseResult ReleaseAndResume(const UpdateCase& uc) {
  auto probed = ServedAndFresh(uc);
  if (!probed.ok()) return Fail(probed.status().ToString());
  cuda::CudaBackend& b = *probed->served;
  if (!b.releasable()) return Fail("the backend's memory is not releasable on this device");
  const auto& update_file = probed->update_file;
  const Logits* before = &probed->before;
  const Logits* want_new = &probed->want_new;
  probed->fresh.reset();  // its memory would blur the free-memory check
  const int captured = b.graphs().captured();
  size_t free0 = 0, total = 0;
  if (cudaMemGetInfo(&free0, &total) != cudaSuccess) return Fail("cudaMemGetInfo");
  auto released = b.ReleaseMemory({.weights = true, .kv_cache = true}, /*keep_weights=*/true);
  if (!released.ok()) return Fail("ReleaseMemory: " + released.status().ToString());
  const int64_t freed =
      static_cast<int64_t>(released->device_free_bytes) - static_cast<int64_t>(free0);
  if (released->bytes <= 0 || freed < released->bytes * 9 / 10) {
    return Fail("released " + std::to_string(released->bytes) + " bytes but free memory grew by " +
                std::to_string(freed));
  }
  if (auto refused = Probe(b);
      refused.ok() || refused.status().code() != StatusCode::kFailedPrecondition) {
    return Fail("a step ran on released memory");
  }
  auto resumed = b.ResumeMemory({.weights = true, .kv_cache = true});
  if (!resumed.ok()) return Fail("ResumeMemory: " + resumed.status().ToString());
  auto after = Probe(b);
  if (!after.ok()) return Fail(after.status().ToString());
  if (std::string e = FirstDifference(*after, *before); !e.empty()) {
    return Fail("after releasing and resuming: " + e);
  }
  // Discarded weights: refused until an update, then the update's logits.
  if (auto r = b.ReleaseMemory({.weights = true, .kv_cache = true}, false); !r.ok()) {
    return Fail("ReleaseMemory (discard): " + r.status().ToString());
  }
  if (b.PrepareWeights(*update_file).ok())
    return Fail("an update was prepared into released memory");
  if (auto r = b.ResumeMemory({.weights = true, .kv_cache = true}); !r.ok()) {
    return Fail("ResumeMemory: " + r.status().ToString());
  }
  if (Probe(b).ok()) return Fail("a step ran on discarded weights");
  auto prepared = b.PrepareWeights(*update_file);
  if (!prepared.ok()) return Fail("PrepareWeights: " + prepared.status().ToString());
  b.SwapWeights(std::move(*prepared));
  auto updated = Probe(b);
  if (!updated.ok()) return Fail(updated.status().ToString());
  if (std::string e = FirstDifference(*updated, *want_new); !e.empty()) {
    return Fail("after discarding, resuming and updating: " + e);
  }
  if (b.graphs().captured() != captured) {
    return Fail("graphs captured again: " + std::to_string(b.graphs().captured()));
  }
  CaseResult r = Pass(0.0, 0.0);
  r.detail = std::to_string(released->bytes) + " bytes released (free memory +" +
             std::to_string(freed) + "), logits bit-exact after resuming, graphs replayed, none " +
             "re-captured; discarded weights refused until updated";
  return r;
}

void RegisterWeightUpdateCases() {
  for (const UpdateCase& c : Cases()) {
    RegisterCase({"memory_release", c.name, [c] { return ReleaseAndResume(c); }});
    RegisterCase({"weight_swap", c.name, [c] { return SwapMatchesFreshBackend(c); }});
    RegisterCase({"weight_swap_wrong_shape", c.name, [c] { return WrongShapeChangesNothing(c); }});
  }
}

}  // namespace

ASTR_GPU_CASES(RegisterWeightUpdateCases);

}  // namespace astr::gputest
