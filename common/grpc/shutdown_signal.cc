#include "common/grpc/shutdown_signal.h"

#include <pthread.h>
#include <signal.h>

#include "common/base/logging.h"

namespace astr::rpc {
namespace {

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace

void BlockShutdownSignals() {
  sigset_t set = ShutdownSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal(const std::function<void()>& on_reload) {
  sigset_t set = ShutdownSet();
  while (true) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig != SIGHUP) return sig;
    if (on_reload) {
      LOG(INFO) << "received SIGHUP: reloading";
      on_reload();
    } else {
      LOG(INFO) << "received SIGHUP: nothing to reload";
    }
  }
}

}  // namespace astr::rpc
