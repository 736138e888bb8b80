#include "scheduler/front/api_keys.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <unordered_map>

#include "common/base/file_util.h"

namespace astr::front {

struct ApiKeys::State {
  ApiKeySpec spec;  // written under both the owner's mu_ and mu (Reload); read under either
  std::mutex mu;
  double tokens = 0;  // guarded by mu: the rate bucket
  Clock::time_point refilled;
  int64_t open = 0;  // guarded by mu: generations holding a lease

  double Burst() const { return spec.burst > 0 ? spec.burst : std::max(1.0, spec.rps); }
};

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

StatusOr<double> Number(std::string_view value, const std::string& where) {
  const std::string v(value);
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(d) || d < 0) {
    return InvalidArgumentError(where + " must be a number >= 0, got '" + v + "'");
  }
  return d;
}

}  // namespace

bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

StatusOr<std::vector<ApiKeySpec>> ParseApiKeys(std::string_view text, const std::string& path) {
  std::vector<ApiKeySpec> specs;
  std::unordered_map<std::string, int> names;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = Trim(text.substr(pos, eol - pos));
    pos = eol + 1;
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    const std::string where = "--api-key-file " + path + " line " + std::to_string(line_no);
    std::istringstream fields{std::string(line)};
    ApiKeySpec spec;
    fields >> spec.key;
    spec.name = "key-" + std::to_string(line_no);
    std::string field;
    while (fields >> field) {
      const size_t eq = field.find('=');
      if (eq == std::string::npos) {
        return InvalidArgumentError(where + ": '" + field +
                                    "' is not NAME=VALUE (name, rps, burst, max_concurrent)");
      }
      const std::string k = field.substr(0, eq);
      const std::string_view v = std::string_view(field).substr(eq + 1);
      if (k == "name") {
        if (v.empty()) return InvalidArgumentError(where + ": name is empty");
        spec.name = std::string(v);
      } else if (k == "rps" || k == "burst" || k == "max_concurrent") {
        auto d = Number(v, where + ": " + k);
        if (!d.ok()) return d.status();
        if (k == "rps") spec.rps = *d;
        if (k == "burst") spec.burst = *d;
        if (k == "max_concurrent") {
          if (*d != std::floor(*d)) {
            return InvalidArgumentError(where + ": max_concurrent must be a whole number");
          }
          spec.max_concurrent = static_cast<int64_t>(*d);
        }
      } else {
        return InvalidArgumentError(where + ": unknown setting '" + k +
                                    "' (name, rps, burst, max_concurrent)");
      }
    }
    if (spec.burst > 0 && spec.burst < 1) {
      return InvalidArgumentError(where + ": burst must be at least 1 (one call)");
    }
    if (auto [it, fresh] = names.emplace(spec.name, line_no); !fresh) {
      return InvalidArgumentError(where + ": name '" + spec.name + "' is used on line " +
                                  std::to_string(it->second) + " too");
    }
    for (const ApiKeySpec& other : specs) {
      if (other.key == spec.key) {
        return InvalidArgumentError(where + ": the key of '" + other.name + "' again");
      }
    }
    specs.push_back(std::move(spec));
  }
  if (specs.empty()) return InvalidArgumentError("--api-key-file: " + path + " holds no key");
  return specs;
}

ApiKeys::Lease& ApiKeys::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    state_ = std::move(other.state_);
  }
  return *this;
}

ApiKeys::Lease::~Lease() { Release(); }

void ApiKeys::Lease::Release() {
  if (state_ == nullptr) return;
  std::lock_guard<std::mutex> lock(state_->mu);
  --state_->open;
  state_.reset();
}

std::string ApiKeys::Lease::ClientName(const std::string& peer) const {
  const std::string key = key_name();
  return key.empty() ? "peer " + peer : "key " + key;
}

std::string ApiKeys::Lease::key_name() const {
  if (state_ == nullptr) return "";
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->spec.name;
}

StatusOr<std::shared_ptr<ApiKeys>> ApiKeys::Load(const std::string& path) {
  std::shared_ptr<ApiKeys> keys(new ApiKeys(path));
  if (Status s = keys->Reload(); !s.ok()) return s;
  return keys;
}

Status ApiKeys::Reload() {
  auto text = ReadFileToString(path_);
  if (!text.ok()) return text.status().WithContext("--api-key-file");
  auto specs = ParseApiKeys(*text, path_);
  if (!specs.ok()) return specs.status();
  Install(std::move(*specs));
  return OkStatus();
}

void ApiKeys::Install(std::vector<ApiKeySpec> specs) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<State>> next;
  for (ApiKeySpec& spec : specs) {
    std::shared_ptr<State> state;
    for (const auto& old : keys_) {
      if (old->spec.key == spec.key) state = old;
    }
    if (state == nullptr) {
      state = std::make_shared<State>();
      state->refilled = Clock::now();
      state->spec = std::move(spec);
      state->tokens = state->Burst();
    } else {
      std::lock_guard<std::mutex> key_lock(state->mu);
      state->spec = std::move(spec);
      state->tokens = std::min(state->tokens, state->Burst());
    }
    next.push_back(std::move(state));
  }
  keys_ = std::move(next);
}

StatusOr<ApiKeys::Lease> ApiKeys::Admit(const std::string* authorization, bool generation,
                                        Clock::time_point now) {
  if (!required()) return Lease();
  if (authorization == nullptr) {
    return UnauthenticatedError("missing API key (send `authorization: Bearer KEY`)");
  }
  constexpr std::string_view kBearer = "Bearer ";
  std::string_view sent = *authorization;
  if (sent.substr(0, kBearer.size()) != kBearer) {
    return UnauthenticatedError("the authorization must be `Bearer KEY`");
  }
  sent.remove_prefix(kBearer.size());
  std::shared_ptr<State> match;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& k : keys_) {
      // Every key is compared; which one matched is kept without a branch on the comparison's
      // time.
      if (ConstantTimeEqual(sent, k->spec.key)) match = k;
    }
  }
  if (match == nullptr) return UnauthenticatedError("incorrect API key");
  std::lock_guard<std::mutex> lock(match->mu);
  const ApiKeySpec& spec = match->spec;
  if (spec.rps > 0) {
    const double elapsed = std::chrono::duration<double>(now - match->refilled).count();
    if (elapsed > 0) {
      match->tokens = std::min(match->Burst(), match->tokens + elapsed * spec.rps);
      match->refilled = now;
    }
    if (match->tokens < 1) {
      std::ostringstream m;
      m << "API key '" << spec.name << "' is over its rate of " << spec.rps
        << " calls per second (burst " << match->Burst() << "); retry later";
      return ResourceExhaustedError(m.str());
    }
  }
  if (generation && spec.max_concurrent > 0 && match->open >= spec.max_concurrent) {
    return ResourceExhaustedError("API key '" + spec.name + "' already has " +
                                  std::to_string(match->open) +
                                  " generations open, its max_concurrent");
  }
  if (spec.rps > 0) match->tokens -= 1;
  if (!generation) return Lease();
  ++match->open;
  return Lease(std::move(match));
}

}  // namespace astr::front
