#include "worker/backends/cpu/cpu_weight_builder.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/model/model_file.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/weight_overlay.h"

namespace astr {
namespace {

// Complete groups waiting to be packed, plus the tensor about to be received, hold at most this
// many received bytes (one group or tensor always fits, whatever its size): past it Add and
// AwaitRoom wait, so that a sender faster than the packing does not pile the update up in memory.
constexpr uint64_t kMaxQueuedBytes = uint64_t{64} << 20;

class CpuWeightBuilder final : public WeightBuilder {
 public:
  CpuWeightBuilder(const model::ModelConfig& config, cpu::WeightType type, int threads,
                   std::shared_ptr<const CpuWeights> served, std::unique_ptr<CpuWeights> spare,
                   std::function<void(std::unique_ptr<CpuWeights>)> give_back)
      : config_(config),
        type_(type),
        pool_(threads),
        served_(std::move(served)),
        spare_(std::move(spare)),
        give_back_(std::move(give_back)),
        target_(EmptyCpuWeights(config_, type_)),
        groups_(CpuWeightGroups(config_)),
        states_(groups_.size()) {
    if (spare_ != nullptr &&
        (spare_->type != type_ || spare_->layers.size() != target_.layers.size())) {
      spare_.reset();
    }
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (const std::string& name : groups_[g].tensors) group_of_[name] = g;
    }
    for (model::WeightSpec& w : model::ExpectedWeights(config_)) {
      shapes_.emplace(std::move(w.name), std::move(w.shape));
    }
    thread_ = std::thread([this] { Run(); });
  }

  ~CpuWeightBuilder() override {
    Stop();
    ReleaseReceived();
    if (!finished_ && give_back_) {
      // A failed build: what holds more storage serves the next build (the spare's storage moves
      // into the new set group by group).
      auto built = std::make_unique<CpuWeights>(std::move(target_));
      if (spare_ != nullptr && spare_->bytes() > built->bytes()) {
        give_back_(std::move(spare_));
      } else {
        give_back_(std::move(built));
      }
    }
  }

  Status Add(std::shared_ptr<UpdateTensor> tensor) override {
    auto it = group_of_.find(tensor->canonical);
    if (it == group_of_.end()) {
      return InternalError("tensor '" + tensor->canonical + "' is not one the CPU backend packs");
    }
    const size_t g = it->second;
    std::unique_lock<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    State& state = states_[g];
    state.received.emplace(tensor->canonical, tensor);
    state.bytes += tensor->bytes;
    if (state.received.size() < groups_[g].tensors.size()) return OkStatus();
    room_.wait(lock, [&] {
      return queued_bytes_ == 0 || queued_bytes_ + state.bytes <= kMaxQueuedBytes || !error_.ok();
    });
    if (!error_.ok()) return error_;
    queued_bytes_ += state.bytes;
    queue_.push_back(g);
    work_.notify_one();
    return OkStatus();
  }

  void AwaitRoom(uint64_t bytes) override {
    std::unique_lock<std::mutex> lock(mu_);
    // Only queued groups are waited for: they are packed whatever else arrives.
    room_.wait(lock, [&] {
      return queued_bytes_ == 0 || queued_bytes_ + bytes <= kMaxQueuedBytes || !error_.ok();
    });
  }

  StatusOr<std::unique_ptr<WeightSet>> Finish(const BaseOpener& open_base) override {
    Stop();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_.ok()) return error_;
    }
    // What the update did not complete: copied from the served set, or rebuilt from its tensors
    // and the served values of the others.
    std::shared_ptr<const model::ModelFile> base;
    for (size_t g = 0; g < groups_.size(); ++g) {
      State& state = states_[g];
      if (state.built) continue;
      if (state.received.empty()) {
        CopyCpuWeightGroup(groups_[g], *served_, &target_, spare_.get());
        continue;
      }
      UpdateTensors tensors(state.received.begin(), state.received.end());
      bool needs_base = false;
      for (const std::string& name : groups_[g].tensors) {
        if (tensors.count(name) != 0) continue;
        std::vector<float> values;
        if (!UnpackCpuTensor(config_, *served_, groups_[g], name, &values)) {
          needs_base = true;
          continue;
        }
        auto t = std::make_shared<UpdateTensor>();
        t->hf_name = model::HfNameFromCanonical(config_.architecture, name);
        t->canonical = name;
        t->dtype = model::DType::kF32;
        t->shape = shapes_.at(name);
        t->bytes = values.size() * sizeof(float);
        t->data = ReceiveBuffers::Global().Take(t->bytes);
        if (!t->data) {
          return ResourceExhaustedError("tensor '" + name + "': cannot allocate " +
                                        std::to_string(t->bytes) + " bytes");
        }
        std::memcpy(t->data.get(), values.data(), t->bytes);
        tensors.emplace(name, std::move(t));
      }
      if (needs_base && base == nullptr) {
        ASTR_ASSIGN_OR_RETURN(base, open_base());
      }
      {
        WeightOverlay source(config_, needs_base ? base : nullptr, std::move(tensors));
        ASTR_RETURN_IF_ERROR(
            LoadCpuWeightGroup(source, groups_[g], type_, &pool_, &target_, spare_.get()));
      }
      Release(state);
    }
    auto set = std::make_unique<CpuWeightSet>();
    set->weights = std::make_shared<CpuWeights>(std::move(target_));
    finished_ = true;
    return std::unique_ptr<WeightSet>(std::move(set));
  }

 private:
  struct State {
    std::map<std::string, std::shared_ptr<UpdateTensor>> received;
    uint64_t bytes = 0;
    bool built = false;
  };

  void Run() {
    while (true) {
      size_t g = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_.wait(lock, [this] { return !queue_.empty() || stopping_; });
        if (queue_.empty()) return;
        g = queue_.front();
      }
      State& state = states_[g];  // this thread's once queued
      Status s;
      {
        WeightOverlay source(config_, nullptr,
                             UpdateTensors(state.received.begin(), state.received.end()));
        s = LoadCpuWeightGroup(source, groups_[g], type_, &pool_, &target_, spare_.get());
      }
      std::lock_guard<std::mutex> lock(mu_);
      queue_.pop_front();
      queued_bytes_ -= state.bytes;
      room_.notify_all();
      if (!s.ok()) {
        if (error_.ok()) error_ = s;
        continue;
      }
      state.built = true;
      Release(state);
    }
  }

  // Hands a built group's received bytes back for the next update.
  static void Release(State& state) {
    for (auto& [name, t] : state.received) {
      if (t.use_count() == 1) ReceiveBuffers::Global().Put(std::move(t->data));
    }
    state.received.clear();
  }

  void ReleaseReceived() {
    for (State& state : states_) Release(state);
  }

  // Packs what is queued, then ends the thread.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      work_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }

  const model::ModelConfig config_;
  const cpu::WeightType type_;
  cpu::ThreadPool pool_;  // its own: Forward runs on the backend's meanwhile
  const std::shared_ptr<const CpuWeights> served_;
  std::unique_ptr<CpuWeights> spare_;
  const std::function<void(std::unique_ptr<CpuWeights>)> give_back_;
  CpuWeights target_;
  const std::vector<CpuWeightGroup> groups_;
  std::map<std::string, size_t> group_of_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::vector<State> states_;
  bool finished_ = false;

  std::mutex mu_;  // guards the queue, error_ and stopping_; states_[g] belongs to Add until queued
  std::condition_variable work_, room_;
  std::deque<size_t> queue_;
  uint64_t queued_bytes_ = 0;
  Status error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<WeightBuilder> MakeCpuWeightBuilder(
    const model::ModelConfig& config, cpu::WeightType type, int threads,
    std::shared_ptr<const CpuWeights> served, std::unique_ptr<CpuWeights> spare,
    std::function<void(std::unique_ptr<CpuWeights>)> give_back) {
  return std::make_unique<CpuWeightBuilder>(config, type, threads, std::move(served),
                                            std::move(spare), std::move(give_back));
}

}  // namespace astr
