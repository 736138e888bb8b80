#include "scheduler/worker_fit.h"

namespace astr::sched {

PoolIdentity PoolOf(const v1::InfoResponse& first) {
  return PoolIdentity{first.content_hash(), first.model_path(), first.weight_version(), nullptr};
}

Status CheckWorkerFits(const std::string& address, const v1::InfoResponse& info,
                       const PoolIdentity& pool) {
  const std::string worker = "worker " + address;
  if (!pool.content_hash.empty() && info.content_hash() != pool.content_hash) {
    return FailedPreconditionError(worker + " serves model hash " + info.content_hash() + " (" +
                                   info.model_path() + "), the pool serves model hash " +
                                   pool.content_hash + " (" + pool.model_path + ")");
  }
  if (info.weight_version() != pool.weight_version) {
    return FailedPreconditionError(
        worker + " serves weight version " + std::to_string(info.weight_version()) +
        ", the pool serves version " + std::to_string(pool.weight_version) +
        " (push the weights to it first, or restart it from the current checkpoint)");
  }
  if (info.num_pages() < 1 || info.page_size() < 1) {
    return FailedPreconditionError(worker + " reports a KV pool of " +
                                   std::to_string(info.num_pages()) + " pages of " +
                                   std::to_string(info.page_size()) + " tokens");
  }
  if (pool.previous != nullptr && (info.num_pages() != pool.previous->num_pages() ||
                                   info.page_size() != pool.previous->page_size())) {
    return FailedPreconditionError(worker + " came back with a KV pool of " +
                                   std::to_string(info.num_pages()) + " pages of " +
                                   std::to_string(info.page_size()) + " tokens, not its " +
                                   std::to_string(pool.previous->num_pages()) + " pages of " +
                                   std::to_string(pool.previous->page_size()));
  }
  if (pool.previous != nullptr && (info.kv_window_tables() != pool.previous->kv_window_tables() ||
                                   info.kv_window_tokens() != pool.previous->kv_window_tokens())) {
    return FailedPreconditionError(
        worker + " came back with " + std::to_string(info.kv_window_tables()) +
        " window page tables of " + std::to_string(info.kv_window_tokens()) + " tokens, not its " +
        std::to_string(pool.previous->kv_window_tables()) + " of " +
        std::to_string(pool.previous->kv_window_tokens()));
  }
  return OkStatus();
}

}  // namespace astr::sched
