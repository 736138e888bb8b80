// Scheduler overhead per step: N sequences decoding together against a worker that computes
// nothing (`astr-worker --backend instant` on loopback, or an in-process stand-in), printed as
// JSON.
//
//   astr-bench-scheduler --model stories260K.gguf [--sequences 256] [--steps 2000]
//
// The Scheduler runs in this process. Its worker connection is wrapped to timestamp every plan:
// a step's time is the loop's period, from one plan's Send to the next (plan, RPC, results,
// events). Only steady-state steps count: every sequence decoding, none starting or ending.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/base/flags.h"
#include "common/base/logging.h"
#include "scheduler/scheduler.h"
#include "scheduler/worker_connection.h"

namespace astr {
namespace {

using sched::Clock;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// CPU time of the calling thread: what the loop itself burns, whatever else competes for the
// cores.
int64_t ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// One plan as the wrapped connection saw it.
struct StepRecord {
  int64_t send_ns = 0;         // when Send was called
  int64_t loop_cpu_ns = 0;     // the loop thread's CPU time then
  int64_t write_ns = 0;        // time inside Send (serialize + write)
  int64_t rpc_ns = 0;          // Send called -> its result returned by Receive
  int64_t worker_step_ns = 0;  // StepResult.step_ns
  bool steady = false;         // every sequence decoding, no start, no release
};

// Wraps a WorkerConnection and records each step into a preallocated table (no allocation, no
// lock: the loop thread is the only writer; readers wait for `recorded` to pass a count).
class TimedConnection final : public sched::WorkerConnection {
 public:
  TimedConnection(std::unique_ptr<WorkerConnection> inner, int64_t sequences, size_t capacity)
      : inner_(std::move(inner)), sequences_(sequences), records_(capacity) {}

  const std::string& address() const override { return inner_->address(); }
  const v1::InfoResponse& info() const override { return inner_->info(); }
  StatusOr<v1::InfoResponse> RefreshInfo() override { return inner_->RefreshInfo(); }
  Status Reconnect(std::chrono::milliseconds timeout) override {
    return inner_->Reconnect(timeout);
  }

  // With overlap the loop sends plan N+1 before reading result N: sends and receives keep their
  // own counters (the stream answers in order).
  Status Send(const v1::StepPlan& plan) override {
    const size_t i = sent_;
    if (i >= records_.size()) return inner_->Send(plan);
    StepRecord& r = records_[i];
    r.send_ns = NowNs();
    r.loop_cpu_ns = ThreadCpuNs();  // Send runs on the loop thread
    // Prompts fit one chunk, so a plan with one entry per sequence and no start is all decode.
    r.steady =
        plan.entries_size() == sequences_ && plan.start_size() == 0 && plan.release_size() == 0;
    if (r.steady) steady_.fetch_add(1, std::memory_order_relaxed);
    Status s = inner_->Send(plan);
    r.write_ns = NowNs() - r.send_ns;
    if (s.ok()) ++sent_;
    return s;
  }

  Status Receive(v1::StepResult* result) override {
    Status s = inner_->Receive(result);
    const size_t i = received_.load(std::memory_order_relaxed);
    if (s.ok() && i < sent_) {
      records_[i].rpc_ns = NowNs() - records_[i].send_ns;
      records_[i].worker_step_ns = result->step_ns();
      received_.store(i + 1, std::memory_order_release);
    }
    return s;
  }

  int64_t steady_steps() const { return steady_.load(std::memory_order_relaxed); }
  // Records [0, count) are complete.
  size_t count() const { return received_.load(std::memory_order_acquire); }
  const std::vector<StepRecord>& records() const { return records_; }

 private:
  std::unique_ptr<WorkerConnection> inner_;
  int64_t sequences_;
  std::vector<StepRecord> records_;
  size_t sent_ = 0;  // loop thread only
  std::atomic<size_t> received_{0};
  std::atomic<int64_t> steady_{0};
};

// Answers every plan at once without RPC: isolates the loop's own cost.
class InProcessWorker final : public sched::WorkerConnection {
 public:
  explicit InProcessWorker(int64_t sequences) {
    info_.set_model_name("in-process");
    info_.set_content_hash("in-process");
    info_.set_backend("in-process");
    info_.set_vocab_size(1000);
    info_.set_max_context_tokens(1 << 20);
    info_.set_num_pages(1 << 22);
    info_.set_page_size(16);
    info_.set_max_batch(static_cast<int32_t>(sequences));
    info_.set_max_batch_tokens(1 << 16);
  }
  const std::string& address() const override { return address_; }
  const v1::InfoResponse& info() const override { return info_; }
  StatusOr<v1::InfoResponse> RefreshInfo() override { return info_; }
  Status Reconnect(std::chrono::milliseconds) override { return OkStatus(); }
  // Up to two plans in flight (overlap): results wait in a two-slot ring, reused.
  Status Send(const v1::StepPlan& plan) override {
    v1::StepResult& result = results_[sent_++ % 2];
    result.Clear();
    result.set_step_id(plan.step_id());
    for (const v1::StepEntry& e : plan.entries()) {
      if (!e.sample()) continue;
      v1::SampledToken* t = result.add_samples();
      t->set_live_id(e.live_id());
      t->set_token_id(3 + static_cast<int32_t>((e.live_id() * 31 + e.start_position()) % 900));
    }
    return OkStatus();
  }
  Status Receive(v1::StepResult* result) override {
    if (received_ == sent_) return InternalError("Receive without a plan in flight");
    result->Swap(&results_[received_++ % 2]);
    return OkStatus();
  }

 private:
  std::string address_ = "in-process";
  v1::InfoResponse info_;
  v1::StepResult results_[2];
  uint64_t sent_ = 0;
  uint64_t received_ = 0;
};

// astr-worker as a child process; its stderr is forwarded, prefixed.
class WorkerProcess {
 public:
  ~WorkerProcess() { Stop(); }

  StatusOr<std::string> Start(const std::vector<std::string>& argv) {
    int fds[2];
    if (pipe(fds) != 0) return InternalError("pipe failed");
    pid_ = fork();
    if (pid_ < 0) return InternalError("fork failed");
    if (pid_ == 0) {
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      std::fprintf(stderr, "cannot run %s\n", args[0]);
      _exit(127);
    }
    close(fds[1]);
    err_ = fdopen(fds[0], "r");
    char line[4096];
    while (std::fgets(line, sizeof(line), err_) != nullptr) {
      std::fprintf(stderr, "[worker] %s", line);
      // The worker logs "listening on HOST:PORT" (after a log prefix, or inside a JSON line).
      const std::string s(line);
      const std::string tag = "listening on ";
      if (const size_t at = s.find(tag); at != std::string::npos) {
        const size_t begin = at + tag.size();
        const std::string address = s.substr(begin, s.find_first_of(" \t\r\n\"", begin) - begin);
        forwarder_ = std::thread([this] {
          char buf[4096];
          while (std::fgets(buf, sizeof(buf), err_) != nullptr) {
            std::fprintf(stderr, "[worker] %s", buf);
          }
        });
        return address;
      }
    }
    return UnavailableError(argv[0] + " exited before printing 'listening on'");
  }

  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
    if (forwarder_.joinable()) forwarder_.join();
    if (err_ != nullptr) fclose(err_);
    err_ = nullptr;
  }

 private:
  pid_t pid_ = -1;
  FILE* err_ = nullptr;
  std::thread forwarder_;
};

struct Flags {
  std::string model;
  std::string worker_bin;
  std::string worker;
  bool in_process = false;
  bool overlap = true;
  int64_t sequences = 256;
  int64_t steps = 2000;
  int64_t warmup = 50;
  int64_t prompt_tokens = 16;
  int64_t max_tokens = 2000;
  int64_t page_size = 16;
};

std::string DefaultWorkerBin() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "astr-worker" : (self.parent_path() / "astr-worker").string();
}

// Runs rounds of `sequences` requests until enough steady steps were recorded; a consumer thread
// drains every channel as a front end would.
void RunRounds(sched::Scheduler* scheduler, const TimedConnection& timed, const Flags& f,
               int32_t max_tokens) {
  uint64_t seed = 1;
  while (timed.steady_steps() < f.warmup + f.steps) {
    std::vector<std::shared_ptr<sched::RequestChannel>> channels;
    for (int64_t i = 0; i < f.sequences; ++i) {
      sched::SchedRequest r;
      r.request_id = "bench-" + std::to_string(seed);
      for (int64_t t = 0; t < f.prompt_tokens; ++t) r.prompt.push_back(3 + static_cast<int32_t>(t));
      r.sampling.seed = seed++;
      r.sampling.temperature = 0.0f;  // greedy, as before
      r.sampling.top_p = 1.0f;
      r.sampling.repetition_penalty = 1.0f;
      r.sampling.ignore_eos = true;
      r.max_tokens = max_tokens;
      auto ch = scheduler->Submit(std::move(r));
      if (!ch.ok()) {
        LOG(ERROR) << ch.status().ToString();
        return;
      }
      channels.push_back(*ch);
    }
    std::atomic<bool> done{false};
    std::thread consumer([&] {
      std::vector<bool> closed(channels.size(), false);
      size_t open = channels.size();
      while (open > 0) {
        bool any = false;
        for (size_t i = 0; i < channels.size(); ++i) {
          if (closed[i]) continue;
          sched::RequestChannel::Batch b = channels[i]->Wait(std::chrono::milliseconds(0));
          any |= !b.events.empty();
          if (b.closed) {
            closed[i] = true;
            --open;
          }
        }
        if (!any) std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
      done = true;
    });
    while (!done && timed.steady_steps() < f.warmup + f.steps) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!done) {
      for (const auto& ch : channels)
        scheduler->Cancel(ch->key(), Status(StatusCode::kCancelled, "benchmark done"));
    }
    consumer.join();
  }
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

nlohmann::json Summarize(const TimedConnection& timed, const Flags& f) {
  const std::vector<StepRecord>& r = timed.records();
  const size_t n = timed.count();
  std::vector<double> step_us, rpc_us, worker_us, write_us, cpu_us;
  int64_t skipped = 0;
  for (size_t i = 0; i + 1 < n; ++i) {
    if (!r[i].steady || !r[i + 1].steady) continue;
    if (skipped++ < f.warmup) continue;
    step_us.push_back((r[i + 1].send_ns - r[i].send_ns) / 1e3);
    rpc_us.push_back(r[i].rpc_ns / 1e3);
    write_us.push_back(r[i].write_ns / 1e3);
    cpu_us.push_back((r[i + 1].loop_cpu_ns - r[i].loop_cpu_ns) / 1e3);
    worker_us.push_back(r[i].worker_step_ns / 1e3);
  }
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  const double step_mean = mean(step_us);
  nlohmann::json j;
  j["running_sequences"] = f.sequences;
  j["steps_measured"] = step_us.size();
  j["step_us"] = {
      {"mean", step_mean}, {"p50", Percentile(step_us, 0.50)}, {"p99", Percentile(step_us, 0.99)}};
  j["rpc_us"] = {{"mean", mean(rpc_us)}, {"p50", Percentile(rpc_us, 0.50)}};
  j["send_us"] = {{"mean", mean(write_us)}, {"p50", Percentile(write_us, 0.50)}};
  j["loop_cpu_us"] = {{"mean", mean(cpu_us)}, {"p50", Percentile(cpu_us, 0.50)}};
  j["worker_step_us_mean"] = mean(worker_us);
  j["worker_step_share"] = step_mean > 0 ? mean(worker_us) / step_mean : 0.0;
  j["target_us"] = 200;
  j["target_met"] = step_mean > 0 && step_mean <= 200;
  return j;
}

int Run(int argc, const char* const* argv) {
  Flags f;
  FlagSet fs("astr-bench-scheduler",
             "Measure the scheduler's overhead per step: N sequences decode together "
             "against a worker that computes nothing (astr-worker --backend instant, "
             "started here on 127.0.0.1); prints JSON with the loop's time per step "
             "(plan, RPC, results) over steady-state steps.");
  fs.String("model", &f.model,
            "Model the instant worker loads for its vocabulary and limits (a .gguf or HF "
            "folder). Required unless --worker or --in-process.");
  fs.String("worker-bin", &f.worker_bin,
            "astr-worker binary to start (default: the astr-worker next to this binary).");
  fs.String("worker", &f.worker, "Use this running worker (HOST:PORT) instead of starting one.");
  fs.Bool("in-process", &f.in_process,
          "Answer plans in-process without RPC: the loop's own cost alone.");
  fs.Bool("overlap", &f.overlap,
          "Send plan N+1 before reading result N (SchedulerOptions::overlap_steps); "
          "--no-overlap measures the serial loop.");
  fs.Int("sequences", &f.sequences, "Sequences decoding together (requests of n = 1).");
  fs.Int("steps", &f.steps, "Steady-state steps to measure.");
  fs.Int("warmup-steps", &f.warmup, "Steady-state steps skipped before measuring.");
  fs.Int("prompt-tokens", &f.prompt_tokens, "Prompt length of every request.");
  fs.Int("max-tokens", &f.max_tokens,
         "Tokens per request (capped by the context); finished rounds are resubmitted.");
  fs.Int("page-size", &f.page_size, "KV page size given to the started worker.");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  (void)InitLogging(argv[0], LogOptions());
  if (f.worker_bin.empty()) f.worker_bin = DefaultWorkerBin();
  if (f.sequences < 1 || f.steps < 1 || f.warmup < 0 || f.prompt_tokens < 1 ||
      f.prompt_tokens > 512 || f.max_tokens < 2 || f.page_size < 1) {
    std::fprintf(stderr,
                 "astr-bench-scheduler: --sequences, --steps, --max-tokens (>= 2), --page-size "
                 "and --prompt-tokens (1..512) must be positive\n");
    return 2;
  }
  if (!f.in_process && f.worker.empty() && f.model.empty()) {
    std::fprintf(stderr, "astr-bench-scheduler: --model is required to start a worker\n");
    return 2;
  }

  WorkerProcess process;
  std::unique_ptr<sched::WorkerConnection> conn;
  std::string mode = "in-process";
  if (f.in_process) {
    conn = std::make_unique<InProcessWorker>(f.sequences);
  } else {
    std::string address = f.worker;
    if (address.empty()) {
      const int64_t pages =
          f.sequences * ((f.prompt_tokens + f.max_tokens + f.page_size - 1) / f.page_size);
      auto started = process.Start({f.worker_bin, "--model", f.model, "--backend", "instant",
                                    "--listen", "127.0.0.1:0", "--num-pages", std::to_string(pages),
                                    "--page-size", std::to_string(f.page_size), "--max-batch",
                                    std::to_string(f.sequences), "--max-batch-tokens",
                                    std::to_string(std::max<int64_t>(f.sequences * 16, 2048))});
      if (!started.ok()) {
        LOG(ERROR) << started.status().ToString();
        return 1;
      }
      address = *started;
    }
    auto connected = sched::ConnectWorker(address, std::chrono::seconds(60));
    if (!connected.ok()) {
      LOG(ERROR) << connected.status().ToString();
      return 1;
    }
    conn = std::move(*connected);
    mode = "grpc " + conn->info().backend() + " worker";
  }
  const v1::InfoResponse info = conn->info();
  const int32_t context = info.max_context_tokens() > 0 ? info.max_context_tokens() : 1 << 20;
  const int32_t max_tokens =
      static_cast<int32_t>(std::min<int64_t>(f.max_tokens, context - f.prompt_tokens));
  auto timed = std::make_unique<TimedConnection>(
      std::move(conn), f.sequences, static_cast<size_t>(4 * (f.steps + f.warmup) + 4096));
  TimedConnection* timed_ptr = timed.get();
  sched::SchedulerOptions options;
  options.max_running = f.sequences;
  options.overlap_steps = f.overlap;
  options.max_batch_tokens = std::max<int64_t>(2048, f.sequences);
  options.max_queued_requests = std::max<int64_t>(1024, f.sequences);
  std::vector<std::unique_ptr<sched::WorkerConnection>> workers;
  workers.push_back(std::move(timed));
  auto scheduler = sched::Scheduler::Create(options, std::move(workers));
  if (!scheduler.ok()) {
    LOG(ERROR) << scheduler.status().ToString();
    return 1;
  }
  RunRounds(scheduler->get(), *timed_ptr, f, max_tokens);
  const int64_t loop_mean_ns = (*scheduler)->Stats().workers(0).mean_step_ns();
  nlohmann::json j = Summarize(*timed_ptr, f);
  j["worker"] = mode;
  j["overlap"] = f.overlap;
  j["scheduler_mean_step_ns_last_256"] = loop_mean_ns;
  scheduler->reset();
  process.Stop();
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace astr

int main(int argc, char** argv) { return astr::Run(argc, argv); }
