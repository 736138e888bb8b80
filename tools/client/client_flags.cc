#include "tools/client/client_flags.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace astr::cli {

void RegisterConnectFlags(FlagSet* fs, client::ConnectOptions* options, bool api_key) {
  fs->Bool("tls", &options->tls,
           "Connect over TLS, verifying the server against the system's CA roots (or "
           "--tls-ca-file, which implies --tls).");
  fs->String("tls-ca-file", &options->tls_ca_file,
             "PEM CA bundle the server's certificate must be signed by (implies --tls).");
  fs->String("tls-cert-file", &options->tls_cert_file,
             "PEM client certificate for servers that require one (mutual TLS), with "
             "--tls-key-file.");
  fs->String("tls-key-file", &options->tls_key_file, "PEM private key of --tls-cert-file.");
  fs->String("tls-server-name", &options->tls_server_name,
             "The name the server's certificate must carry, instead of the host of --server.");
  if (api_key) {
    if (const char* env = std::getenv("ASTR_API_KEY")) options->api_key = env;
    fs->String("api-key", &options->api_key,
               "API key of a server started with --api-key-file, sent as `authorization: "
               "Bearer KEY`. Default: $ASTR_API_KEY (which, unlike the flag, other users "
               "cannot read from the process list).");
  }
}

void ServerFlags::Register(FlagSet* fs) {
  fs->String("server", &server, server_help);
  fs->Double("connect-timeout-s", &connect_timeout_s,
             "Seconds to wait for the connection before giving up.");
  RegisterConnectFlags(fs, &connect, with_api_key);
}

StatusOr<std::chrono::milliseconds> ServerFlags::ConnectTimeout() const {
  if (connect_timeout_s <= 0) {
    return InvalidArgumentError("--connect-timeout-s must be > 0");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(connect_timeout_s * 1000));
}

StatusOr<std::unique_ptr<client::Client>> ServerFlags::Connect() const {
  ASTR_ASSIGN_OR_RETURN(const auto timeout, ConnectTimeout());
  return client::Client::Connect(server, timeout, connect);
}

client::CallOptions TimeoutOptions(double timeout_s) {
  if (timeout_s <= 0) return {};
  return client::CallOptions::Timeout(
      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
}

void RequestFlags::Register(FlagSet* fs, bool with_n) {
  fs->StringList("stop", &stops,
                 "Stop string (repeatable): the sample ends where its text contains it.");
  if (with_n) fs->Int("n", &n, "Samples to generate for the prompt.");
  fs->Int("priority", &priority, "Scheduling priority: larger runs first and is preempted last.");
  fs->String("request-id", &request_id, "Request id shown in the server's logs; default: made up.");
  fs->String("cache-salt", &cache_salt,
             "Prefix cache namespace: only requests with the same salt share cached K/V "
             "(GenerateRequest.cache_salt). Default: the shared one.");
  fs->Bool("include-stop", &include_stop, "Keep the matched stop string in the text.");
  fs->Bool("show-special", &show_special, "Show special tokens (e.g. <|im_end|>) in the text.");
  fs->Double("timeout-s", &timeout_s, "Deadline of the request in seconds; 0 = none.");
  sampling.Register(fs);
}

Status RequestFlags::Apply(const FlagSet& fs, v1::GenerateRequest* request) const {
  ASTR_ASSIGN_OR_RETURN(SamplingParams p, sampling.ToParamsWithoutModel());
  if (timeout_s < 0) return InvalidArgumentError("--timeout-s must be >= 0");
  v1::SamplingParameters* s = request->mutable_sampling();
  s->set_temperature(p.temperature);
  s->set_top_k(p.top_k);
  s->set_top_p(p.top_p);
  s->set_min_p(p.min_p);
  s->set_repetition_penalty(p.repetition_penalty);
  s->set_frequency_penalty(p.frequency_penalty);
  s->set_presence_penalty(p.presence_penalty);
  s->set_penalty_window(p.penalty_window);
  for (const auto& [id, bias] : p.logit_bias) (*s->mutable_logit_bias())[id] = bias;
  if (fs.WasSet("seed")) s->set_seed(p.seed);
  for (const auto& stop : stops) s->add_stop(stop);
  for (int32_t id : p.stop_token_ids) s->add_stop_token_ids(id);
  s->set_ignore_eos(p.ignore_eos);
  s->set_min_tokens(p.min_tokens);
  s->set_max_tokens(p.max_tokens);
  s->set_return_logprobs(p.return_logprob || p.logprobs > 0);
  s->set_top_logprobs(p.logprobs);
  s->set_logprobs_mode(p.logprobs_mode == LogprobsMode::kProcessed ? v1::LOGPROBS_MODE_PROCESSED
                                                                   : v1::LOGPROBS_MODE_RAW);
  s->set_include_stop_str_in_output(include_stop);
  if (show_special) s->set_skip_special_tokens(false);
  request->set_n(n);
  request->set_priority(priority);
  if (!request_id.empty()) request->set_request_id(request_id);
  if (!cache_salt.empty()) request->set_cache_salt(cache_salt);
  return OkStatus();
}

client::CallOptions RequestFlags::CallOptions() const { return TimeoutOptions(timeout_s); }

int PrintError(const char* program, const Status& status) {
  std::fprintf(stderr, "%s: %s\n", program, status.ToString().c_str());
  return 1;
}

}  // namespace astr::cli
