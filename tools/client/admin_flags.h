// Flags of every `astr admin` verb: where astr-scheduler's admin service listens, the bearer token
// file, the deadline and --json.
#pragma once

#include <memory>
#include <string>

#include "astr/admin_client.h"
#include "common/base/flags.h"
#include "tools/client/client_flags.h"

namespace astr::cli {

struct AdminFlags {
  ServerFlags server;
  std::string token_file;
  double timeout_s = 0;
  bool json = false;

  AdminFlags();
  void Register(FlagSet* fs);
  // The flag values' own errors (--timeout-s < 0), found before any call.
  Status Check() const;
  // Reads the token from --token-file, then connects within --connect-timeout-s.
  StatusOr<std::unique_ptr<client::AdminClient>> Connect() const;
  // The deadline from --timeout-s.
  client::CallOptions CallOptions() const { return TimeoutOptions(timeout_s); }
};

// The bearer token in `path`, without the whitespace around it (a trailing newline). Errors name
// --token-file and the path: a file that cannot be read, or holds nothing but whitespace.
StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace astr::cli
