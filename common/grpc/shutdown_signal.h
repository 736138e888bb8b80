// SIGTERM / SIGINT handling for long-lived processes, and SIGHUP (reload): the signals are blocked
// in every thread and one thread takes them synchronously with sigwait, so draining and reloading
// run as ordinary code (no work in a signal handler).
#pragma once

#include <functional>

namespace astr::rpc {

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread. Call first thing in main(), before any
// thread starts, so that every thread inherits the mask.
void BlockShutdownSignals();

// Waits for SIGTERM or SIGINT (blocked by BlockShutdownSignals) and returns its number. Each SIGHUP
// meanwhile runs `on_reload` (on this thread) when given, and is logged and ignored otherwise.
int WaitForShutdownSignal(const std::function<void()>& on_reload = nullptr);

}  // namespace astr::rpc
