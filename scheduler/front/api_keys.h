// API keys of the public API (gRPC astr.v1.Generate and the HTTP API), with per-key limits.
//
// The key file (--api-key-file) holds one key per line, optionally followed by its settings:
//
//   KEY [name=NAME] [rps=R] [burst=B] [max_concurrent=N]
//
// `name` is what logs, errors and metrics say instead of the key (default: key-<line number>);
// `rps` bounds the key's calls per second (a token bucket of `burst` calls, default max(1, rps));
// `max_concurrent` bounds its generations open at once (unary and streamed). 0 or absent means
// unlimited. Blank lines and lines starting with '#' are skipped. The file is read again on
// SIGHUP (Reload): a key that stays keeps its open count and bucket, a removed key is refused from
// then on (its open calls finish).
//
// Checking a key compares it with every key of the file in constant time (no early exit on the
// first differing byte, nor on the first matching key), so response times tell nothing about how
// close a guess was. Refusals name the key's name, never the key.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace astr::front {

struct ApiKeySpec {
  std::string key;
  std::string name;
  double rps = 0;              // 0 = no rate limit
  double burst = 0;            // the bucket's size; 0 = max(1, rps)
  int64_t max_concurrent = 0;  // 0 = unlimited
};

// Parses the key file's text; `path` names it in errors ("--api-key-file PATH line 3: ...").
StatusOr<std::vector<ApiKeySpec>> ParseApiKeys(std::string_view text, const std::string& path);

// Equality that takes the same time whatever the bytes (the longer length decides the time).
bool ConstantTimeEqual(std::string_view a, std::string_view b);

class ApiKeys {
 public:
  using Clock = std::chrono::steady_clock;
  struct State;

  // A generation's hold on its key's concurrency slot, given back when destroyed.
  class Lease {
   public:
    Lease() = default;
    explicit Lease(std::shared_ptr<State> state) : state_(std::move(state)) {}
    Lease(Lease&&) noexcept = default;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();
    void Release();
    // The key's name (ApiKeySpec::name); empty when released or when the server has no keys.
    std::string key_name() const;
    // Who the call is for fairness (structured-output compiles and the scheduler's fair share),
    // the same on every front: "key NAME" when the call presented an API key, else "peer PEER"
    // (the client connection).
    std::string ClientName(const std::string& peer) const;

   private:
    std::shared_ptr<State> state_;
  };

  // No keys: every call is let in (Admit always succeeds).
  ApiKeys() = default;
  // Reads `path` (--api-key-file).
  static StatusOr<std::shared_ptr<ApiKeys>> Load(const std::string& path);
  // Reads the file again (SIGHUP). On error the keys in use stay.
  Status Reload();

  bool required() const { return !path_.empty(); }

  // Checks `authorization` (the header or metadata value, nullptr when absent): UNAUTHENTICATED
  // when it is missing or holds no known key; RESOURCE_EXHAUSTED when the key's rate (every call
  // counts) or, for a generation, its concurrency is used up. A generation's lease holds its slot.
  StatusOr<Lease> Admit(const std::string* authorization, bool generation,
                        Clock::time_point now = Clock::now());

 private:
  explicit ApiKeys(std::string path) : path_(std::move(path)) {}
  void Install(std::vector<ApiKeySpec> specs);

  const std::string path_;
  std::mutex mu_;
  std::vector<std::shared_ptr<State>> keys_;  // guarded by mu_
};

}  // namespace astr::front
