#include "tools/generation_load.h"

#include <algorithm>

#include "common/base/clock.h"

namespace astr::bench {
namespace {

int64_t NowNs() { return Nanos(std::chrono::steady_clock::now().time_since_epoch()); }

}  // namespace

GenerationLoad::GenerationLoad(client::Client* client, GenerationLoadOptions options)
    : client_(client), options_(options) {}

void GenerationLoad::Start() {
  Stop();
  stop_ = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.assign(static_cast<size_t>(options_.streams), {});
    error_.clear();
  }
  for (int64_t s = 0; s < options_.streams; ++s) threads_.emplace_back([this, s] { Run(s); });
}

void GenerationLoad::Stop() {
  stop_ = true;
  for (auto& t : threads_) t.join();
  threads_.clear();
}

StatusOr<int64_t> GenerationLoad::WaitAll(int64_t after_ns, int64_t version,
                                          std::chrono::seconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  int64_t latest = 0;
  const bool ok = cv_.wait_for(lock, timeout, [&] {
    latest = 0;
    for (const auto& stream : events_) {
      auto it = std::find_if(stream.begin(), stream.end(), [&](const Event& e) {
        return e.t_ns > after_ns && e.version >= version;
      });
      if (it == stream.end()) return false;
      latest = std::max(latest, it->t_ns);
    }
    return true;
  });
  if (!ok) {
    return Status(StatusCode::kDeadlineExceeded,
                  "generation: not every stream produced a token of weight version " +
                      std::to_string(version) + " within " + std::to_string(timeout.count()) +
                      " s" + (error_.empty() ? "" : "; " + error_));
  }
  return latest;
}

GenerationLoad::Window GenerationLoad::Measure(int64_t t0_ns, int64_t t1_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  Window w;
  for (const auto& stream : events_) {
    for (size_t i = 0; i < stream.size(); ++i) {
      if (stream[i].t_ns > t0_ns && stream[i].t_ns <= t1_ns) w.tokens += stream[i].tokens;
      if (i == 0 || stream[i].t_ns <= t0_ns || stream[i - 1].t_ns >= t1_ns) continue;
      const double gap_ms = (stream[i].t_ns - stream[i - 1].t_ns) / 1e6;
      if (gap_ms <= w.max_gap_ms) continue;
      w.max_gap_ms = gap_ms;
      w.gap_from_ms = (stream[i - 1].t_ns - t0_ns) / 1e6;
      w.gap_to_ms = (stream[i].t_ns - t0_ns) / 1e6;
    }
  }
  if (t1_ns > t0_ns) w.tokens_per_s = static_cast<double>(w.tokens) * 1e9 / (t1_ns - t0_ns);
  return w;
}

void GenerationLoad::Run(int64_t stream) {
  for (int64_t round = 0; !stop_; ++round) {
    v1::GenerateRequest r;
    r.set_request_id("bench-load-" + std::to_string(stream) + "-" + std::to_string(round));
    r.mutable_token_ids()->add_ids(1);  // BOS
    for (int64_t i = 1; i < options_.prompt_tokens; ++i) {
      r.mutable_token_ids()->add_ids(static_cast<int32_t>(3 + (stream * 7 + i) % 200));
    }
    r.mutable_sampling()->set_temperature(0.0f);
    r.mutable_sampling()->set_ignore_eos(true);
    r.mutable_sampling()->set_max_tokens(static_cast<int32_t>(options_.max_tokens));
    r.set_kv_on_weight_update(options_.kv_on_update);
    const Status st = client_->GenerateStream(r, [&](const v1::GenerateStreamResponse& m) {
      if (m.token_ids_size() > 0) {
        std::lock_guard<std::mutex> lock(mu_);
        events_[stream].push_back({NowNs(), m.token_ids_size(), m.weight_version()});
        cv_.notify_all();
      }
      return !stop_.load();
    });
    if (!st.ok() && !stop_) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = "stream " + std::to_string(stream) + ": " + st.ToString();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // not a busy loop
    }
  }
}

}  // namespace astr::bench
