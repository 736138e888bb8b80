// Flags shared by the `astr` subcommands that talk to a running server (generate, chat, info,
// health, admin): the server address, and a generation request's parameters under the same flag
// names as `astr run` (SamplingFlags), so that offline and served generation read alike.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "astr/client.h"
#include "common/base/flags.h"
#include "worker/engine_flags.h"

namespace astr::cli {

// --tls, --tls-ca-file, --tls-cert-file, --tls-key-file, --tls-server-name into `options`; with
// `api_key`, --api-key too (default: $ASTR_API_KEY).
void RegisterConnectFlags(FlagSet* fs, client::ConnectOptions* options, bool api_key);

// --server, --connect-timeout-s and the connection's TLS flags and API key.
struct ServerFlags {
  std::string server = "127.0.0.1:50051";
  double connect_timeout_s = 10;
  client::ConnectOptions connect;
  // What --help says of --server.
  std::string server_help = "Address of astr-scheduler (host:port).";
  // Whether --api-key is offered (the admin service takes a token instead).
  bool with_api_key = true;

  void Register(FlagSet* fs);
  // --connect-timeout-s as a duration; an error unless it is > 0.
  StatusOr<std::chrono::milliseconds> ConnectTimeout() const;
  // Connects, waiting at most --connect-timeout-s; the error names the address.
  StatusOr<std::unique_ptr<client::Client>> Connect() const;
};

// Options with a deadline `timeout_s` seconds from now; none when timeout_s <= 0.
client::CallOptions TimeoutOptions(double timeout_s);

// Sampling flags plus the request-level ones (--stop, --n, --priority, ...).
struct RequestFlags {
  SamplingFlags sampling;
  std::vector<std::string> stops;
  int n = 1;
  int priority = 0;
  std::string request_id;
  std::string cache_salt;
  bool include_stop = false;
  bool show_special = false;
  double timeout_s = 0;

  // Defaults that suit a served model: a longer answer than `astr run`'s 32 tokens.
  RequestFlags() { sampling.max_tokens = 256; }
  // `with_n`: whether --n is offered (chat answers one sample per turn).
  void Register(FlagSet* fs, bool with_n);
  // Writes the parameters into `request` (sampling, n, priority, request id). --seed is sent only
  // when given, so that an unseeded request gets a fresh seed from the server.
  Status Apply(const FlagSet& fs, v1::GenerateRequest* request) const;
  // The deadline from --timeout-s.
  client::CallOptions CallOptions() const;
};

// Prints "<program>: CODE: message" to stderr and returns 1 (the exit code of a failed call).
int PrintError(const char* program, const Status& status);

}  // namespace astr::cli
