// SIGTERM / SIGINT handling for long-lived processes: the signals are blocked in every thread and
// one thread takes them synchronously with sigwait, so draining runs as ordinary code (no work in
// a signal handler).
#pragma once

namespace astr::rpc {

// Blocks SIGTERM and SIGINT in the calling thread. Call first thing in main(), before any thread
// starts, so that every thread inherits the mask.
void BlockShutdownSignals();

// Waits for SIGTERM or SIGINT (blocked by BlockShutdownSignals) and returns its number.
int WaitForShutdownSignal();

}  // namespace astr::rpc
