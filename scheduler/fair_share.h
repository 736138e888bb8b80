// Fair share across clients: virtual token counters in the spirit of "Fairness in Serving LLMs"
// (Sheng et al., OSDI 2024, VTC). Each client (the API key when keys are on, else the client
// connection) has a counter of the service it received, in weighted tokens: every prompt token
// computed for it counts kInputWeight, every generated token kOutputWeight. The planner admits
// waiting sequences of the client with the smallest counter first and preempts those of the
// client with the largest counter first (priorities still come before both), so a client that
// sends a flood gets its share, not the machine, and the others are not starved.
//
// A client that comes back after a pause (no live request) is lifted to the smallest counter of
// the clients active then: idle time banks no credit (VTC's counter lift). Loop-owned.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace astr::sched {

class FairShare {
 public:
  static constexpr int64_t kInputWeight = 1;
  static constexpr int64_t kOutputWeight = 2;

  // A request of `client` arrived: its client's id (stable while the client has live requests).
  int32_t Join(const std::string& client);
  // A request of client `id` closed; a client with none left is forgotten.
  void Leave(int32_t id);
  // Service given to client `id` by one step.
  void Charge(int32_t id, int64_t input_tokens, int64_t output_tokens);
  // The client's virtual counter (0 for an unknown id).
  int64_t Counter(int32_t id) const;
  // Clients with live requests.
  int64_t active_clients() const { return static_cast<int64_t>(ids_.size()); }

 private:
  struct Client {
    std::string name;
    int64_t counter = 0;
    int32_t live = 0;  // requests not closed
  };
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<Client> clients_;
  std::vector<int32_t> free_ids_;
};

}  // namespace astr::sched
