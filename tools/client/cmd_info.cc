// `astr info`: what a running astr-scheduler serves (GetModelInfo) and its live counters
// (GetServerStats).
#include <cstdio>
#include <string>

#include "common/base/flags.h"
#include "tools/client/client_flags.h"
#include "tools/client/output.h"
#include "tools/command.h"

namespace astr::cli {
namespace {

constexpr char kProgram[] = "astr info";

void PrintModelInfo(const v1::GetModelInfoResponse& info) {
  std::printf("model:           %s (%s)\n", info.model_name().c_str(), info.architecture().c_str());
  std::printf("content hash:    %s\n", info.content_hash().c_str());
  std::printf("vocab size:      %d\n", info.vocab_size());
  std::printf("max context:     %d tokens\n", info.max_context_tokens());
  std::string eos;
  for (int id : info.eos_token_ids()) eos += (eos.empty() ? "" : ",") + std::to_string(id);
  std::printf("bos / eos ids:   %d / %s\n", info.bos_token_id(), eos.c_str());
  std::printf("chat template:   %s\n", info.has_chat_template() ? "yes" : "no");
  std::printf("weight version:  %lld\n", static_cast<long long>(info.weight_version()));
  std::printf("limits:          n <= %d, stop strings <= %d\n", info.max_n(),
              info.max_stop_strings());
  // What requests that leave these fields unset get (the scheduler's --generation-config).
  const v1::SamplingParameters& d = info.default_sampling();
  std::string defaults;
  auto add = [&](const char* name, const std::string& value) {
    defaults += (defaults.empty() ? "" : " ") + std::string(name) + "=" + value;
  };
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  if (d.has_temperature()) add("temperature", num(d.temperature()));
  if (d.has_top_k()) add("top_k", std::to_string(d.top_k()));
  if (d.has_top_p()) add("top_p", num(d.top_p()));
  if (d.has_min_p()) add("min_p", num(d.min_p()));
  if (d.has_repetition_penalty()) add("repetition_penalty", num(d.repetition_penalty()));
  if (d.penalty_window() != 0) add("penalty_window", std::to_string(d.penalty_window()));
  if (d.has_max_tokens()) add("max_tokens", std::to_string(d.max_tokens()));
  std::printf("served defaults: %s%s\n", defaults.empty() ? "none" : defaults.c_str(),
              info.default_sampling_source().empty()
                  ? ""
                  : (" (from " + info.default_sampling_source() + ")").c_str());
  for (const auto& w : info.workers()) {
    std::printf(
        "worker %s: backend %s, dtype %s, %lld pages x %d tokens, max batch %d seqs / %d "
        "tokens\n",
        w.address().c_str(), w.backend().c_str(), w.dtype().c_str(),
        static_cast<long long>(w.num_pages()), w.page_size(), w.max_batch(), w.max_batch_tokens());
  }
}

void PrintServerStats(const v1::GetServerStatsResponse& stats) {
  std::printf(
      "requests:        %d waiting, %d running; %lld admitted, %lld refused, %lld finished\n",
      stats.waiting_requests(), stats.running_requests(),
      static_cast<long long>(stats.requests_admitted()),
      static_cast<long long>(stats.requests_refused()),
      static_cast<long long>(stats.requests_finished()));
  std::printf("steps:           %lld; preemptions %lld%s\n", static_cast<long long>(stats.steps()),
              static_cast<long long>(stats.preemptions()), stats.draining() ? "; DRAINING" : "");
  for (const auto& w : stats.workers()) {
    std::printf(
        "worker %s: %s, %lld / %lld pages free, %d sequences, %lld steps (mean %.1f us), %lld "
        "sequences assigned\n",
        w.address().c_str(),
        w.up() ? (w.draining() ? "up, DRAINING" : "up") : (w.draining() ? "DOWN, DRAINING" : "DOWN"),
        static_cast<long long>(w.free_pages()),
        static_cast<long long>(w.total_pages()), w.running_sequences(),
        static_cast<long long>(w.steps()), w.mean_step_ns() / 1e3,
        static_cast<long long>(w.sequences_assigned()));
  }
}

int InfoCommand(int argc, const char* const* argv) {
  FlagSet fs(kProgram,
             "Show what a running astr-scheduler serves (model, limits, workers) and its "
             "live counters (queue, steps, free KV pages per worker).");
  ServerFlags server;
  server.Register(&fs);
  bool json = false;
  fs.Bool("json", &json,
          "Print one JSON object {\"model_info\": ..., \"server_stats\": ...} with the proto's "
          "field names.");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;

  auto client = server.Connect();
  if (!client.ok()) return PrintError(kProgram, client.status());
  auto info = (*client)->GetModelInfo();
  if (!info.ok()) return PrintError(kProgram, info.status());
  auto stats = (*client)->GetServerStats();
  if (!stats.ok()) return PrintError(kProgram, stats.status());
  if (json) {
    std::printf("{\"model_info\":%s,\"server_stats\":%s}\n", JsonLine(*info).c_str(),
                JsonLine(*stats).c_str());
  } else {
    std::printf("server:          %s\n", server.server.c_str());
    PrintModelInfo(*info);
    PrintServerStats(*stats);
  }
  return 0;
}

}  // namespace

ASTR_REGISTER_COMMAND("info", "Show a running server's model, limits and counters.", InfoCommand);

}  // namespace astr::cli
