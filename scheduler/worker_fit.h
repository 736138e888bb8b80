// The one rule by which a worker may serve in the pool, checked when the scheduler starts, when a
// worker joins, and when one comes back after a reconnect: it serves the pool's model (content
// hash) at the pool's weight version, with a usable KV pool; one that comes back must also keep the
// KV pool it had (the scheduler's page accounting for it is that pool's).
#pragma once

#include <cstdint>
#include <string>

#include "astr/v1/worker.pb.h"
#include "common/base/status.h"

namespace astr::sched {

struct PoolIdentity {
  std::string content_hash;  // empty: not known yet (any model is accepted)
  std::string model_path;    // for messages
  int64_t weight_version = 0;
  // A reconnect: what the worker reported when it joined (its pool must be the same).
  const v1::InfoResponse* previous = nullptr;
};

// The pool a first worker defines.
PoolIdentity PoolOf(const v1::InfoResponse& first);

// OK, or FAILED_PRECONDITION naming the worker, what it serves and what the pool serves.
Status CheckWorkerFits(const std::string& address, const v1::InfoResponse& info,
                       const PoolIdentity& pool);

}  // namespace astr::sched
