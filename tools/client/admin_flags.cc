#include "tools/client/admin_flags.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace astr::cli {
namespace {

// astr-scheduler's default --admin-listen port.
constexpr char kDefaultAdminServer[] = "127.0.0.1:50053";

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

AdminFlags::AdminFlags() {
  server.server = kDefaultAdminServer;
  server.server_help = "Address of astr-scheduler's admin service (its --admin-listen, host:port).";
  server.with_api_key = false;  // admin calls carry the --token-file token
}

void AdminFlags::Register(FlagSet* fs) {
  server.Register(fs);
  fs->String("token-file", &token_file,
             "File holding the admin bearer token (the scheduler's --admin-token-file); the "
             "whitespace around it is ignored.",
             /*required=*/true);
  fs->Double("timeout-s", &timeout_s, "Deadline of the call in seconds; 0 = none.");
  fs->Bool("json", &json, "Print the server's response as one line of JSON (proto field names).");
}

Status AdminFlags::Check() const {
  if (timeout_s < 0) return InvalidArgumentError("--timeout-s must be >= 0");
  return OkStatus();
}

StatusOr<std::unique_ptr<client::AdminClient>> AdminFlags::Connect() const {
  ASTR_ASSIGN_OR_RETURN(const std::string token, ReadTokenFile(token_file));
  ASTR_ASSIGN_OR_RETURN(const auto timeout, server.ConnectTimeout());
  return client::AdminClient::Connect(server.server, token, timeout, server.connect);
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  const std::string what = "--token-file " + path;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    return InvalidArgumentError(what + ": cannot open (" + std::strerror(errno) + ")");
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int error = errno;
  std::fclose(f);
  if (failed) return InvalidArgumentError(what + ": cannot read (" + std::strerror(error) + ")");
  size_t begin = 0, end = text.size();
  while (begin < end && IsSpace(text[begin])) ++begin;
  while (end > begin && IsSpace(text[end - 1])) --end;
  if (begin == end) return InvalidArgumentError(what + ": the file holds no token");
  std::string token = text.substr(begin, end - begin);
  if (Status s = client::CheckAdminToken(token); !s.ok()) {
    return InvalidArgumentError(what + ": " + s.message());
  }
  return token;
}

}  // namespace astr::cli
