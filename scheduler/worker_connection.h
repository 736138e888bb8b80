// The scheduler's end of one worker: its Info and the step stream. The gRPC implementation dials
// astr-worker; tests and the benchmark may use other implementations.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "astr/v1/worker.pb.h"
#include "common/base/status.h"
#include "common/grpc/tls.h"
#include "scheduler/step_plan.h"

namespace astr::sched {

class WorkerConnection {
 public:
  virtual ~WorkerConnection() = default;
  virtual const std::string& address() const = 0;
  // Info read when the connection was made.
  virtual const v1::InfoResponse& info() const = 0;
  // Fresh Info from the worker (live counters).
  virtual StatusOr<v1::InfoResponse> RefreshInfo() = 0;
  // Writes one plan on the step stream. UNAVAILABLE when the stream is broken.
  virtual Status Send(const v1::StepPlan& plan) = 0;
  // Serializes what the planner decided (step_plan.h, into a reused message) and sends it.
  Status SendStep(const PlannedStep& step) {
    ToProto(step, &wire_);
    return Send(wire_);
  }
  // Blocks for the next result. UNAVAILABLE when the stream is broken.
  virtual Status Receive(v1::StepResult* result) = 0;
  // Drops the current step stream and opens a fresh one (the worker starts it with no live
  // sequences), re-dialing as needed for at most `timeout`. UNAVAILABLE if the worker cannot be
  // reached, FAILED_PRECONDITION if it answers but is shutting down (draining). The scheduler
  // calls it from a helper thread while the loop leaves this connection alone.
  virtual Status Reconnect(std::chrono::milliseconds timeout) = 0;
  // False once the connection under an idle step stream is known to be lost (the worker died or
  // stopped answering keepalive pings): the loop, which only reads while a step is in flight,
  // checks this between steps so that an idle worker's loss is noticed too.
  virtual bool Alive() const { return true; }

 private:
  v1::StepPlan wire_;  // SendStep's message, reused (only the loop thread sends)
};

// Dials `address` (host:port), reads Info and opens the step stream, retrying until `timeout`.
// FAILED_PRECONDITION when the worker answers that it is shutting down (InfoResponse.draining).
// With `step_timeout` > 0, a Receive that gets no result for that long cancels the stream and
// fails with UNAVAILABLE: a worker that stops answering (hung step, stopped process) without
// closing its connection is treated like one that died.
// `security`: plaintext or TLS (--worker-tls-*).
StatusOr<std::unique_ptr<WorkerConnection>> ConnectWorker(
    const std::string& address, std::chrono::milliseconds timeout,
    std::chrono::milliseconds step_timeout = std::chrono::milliseconds(0),
    const rpc::ChannelSecurity& security = {});

}  // namespace astr::sched
