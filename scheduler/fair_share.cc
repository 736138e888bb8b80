#include "scheduler/fair_share.h"

#include <algorithm>
#include <limits>

namespace astr::sched {

int32_t FairShare::Join(const std::string& client) {
  auto it = ids_.find(client);
  if (it != ids_.end()) {
    ++clients_[it->second].live;
    return it->second;
  }
  // Counter lift: start at the smallest counter of the active clients (0 when none is).
  int64_t floor = std::numeric_limits<int64_t>::max();
  for (const auto& [name, id] : ids_) floor = std::min(floor, clients_[id].counter);
  if (ids_.empty()) floor = 0;
  int32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<int32_t>(clients_.size());
    clients_.emplace_back();
  }
  clients_[id] = Client{client, floor, 1};
  ids_.emplace(client, id);
  return id;
}

void FairShare::Leave(int32_t id) {
  if (id < 0 || id >= static_cast<int32_t>(clients_.size())) return;
  Client& c = clients_[id];
  if (c.live <= 0 || --c.live > 0) return;
  ids_.erase(c.name);
  c = Client{};
  free_ids_.push_back(id);
}

void FairShare::Charge(int32_t id, int64_t input_tokens, int64_t output_tokens) {
  if (id < 0 || id >= static_cast<int32_t>(clients_.size())) return;
  clients_[id].counter += kInputWeight * input_tokens + kOutputWeight * output_tokens;
}

int64_t FairShare::Counter(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(clients_.size())) return 0;
  return clients_[id].counter;
}

}  // namespace astr::sched
