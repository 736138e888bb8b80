// Runs a piece of untrusted-cost work (a structured-output constraint's compile) in a child process
// that can be stopped: fork()ed from the caller so that it shares every read-only structure the
// work needs (the vocabulary) without a copy, then watched by the caller, which kills it when it
// passes its wall-time or memory limit or when the caller cancels. Whatever the child allocated
// goes back to the system when it ends; a crash in the work (a library bug, a stack overflow on a
// pathological input) ends the child, never the server.
//
// Memory is the child's anonymous resident memory (RssAnon of /proc/PID/status) above what it
// inherited, sampled every few milliseconds, with an address-space limit behind it for allocation
// bursts between samples. The child runs at a lower CPU priority (nice 10) than the serving
// threads.
//
// The child is single-threaded after fork() until the work starts threads of its own (glibc
// supports that); it touches no lock the parent's other threads may hold except the allocator's,
// which fork() leaves consistent. It writes nothing to logs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace astr::sched {

// Whether fork() may be used while other threads run. Not under GCC's AddressSanitizer: its
// runtime (libasan 8, GCC 12) does not lock its allocator around fork(), so a child forked while
// another thread allocates can deadlock on its first allocation. Callers then run the work in
// their own process, unbounded: that is a sanitizer test build only, never a served one.
// GCC says __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, clang __has_feature (the fuzz build).
#if defined(__SANITIZE_ADDRESS__)
#define ASTR_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASTR_ADDRESS_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define ASTR_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ASTR_THREAD_SANITIZER 1
#endif
#endif

#if defined(ASTR_ADDRESS_SANITIZER)
inline constexpr bool kSandboxAvailable = false;
#else
inline constexpr bool kSandboxAvailable = true;
#endif

struct SandboxLimits {
  std::chrono::milliseconds time{5000};  // wall time from fork to the child's answer
  int64_t memory_bytes = 256 << 20;      // anonymous memory the child may add to what it inherits
};

// What the work reports, in the child.
struct SandboxWork {
  std::string error;           // empty: it succeeded
  int64_t retained_bytes = 0;  // heap its result holds (HeapInUseBytes after minus before)
};

struct SandboxResult {
  enum class Outcome {
    kOk,          // the work succeeded
    kFailed,      // the work reported `error`
    kOverTime,    // killed at the time limit
    kOverMemory,  // killed at the memory limit (or an allocation failed)
    kCancelled,   // killed because *cancelled became true
    kCrashed,     // the child ended without an answer (a signal, an abort)
    kNoSandbox,   // fork() or pipe() failed: nothing ran
  };
  Outcome outcome = Outcome::kNoSandbox;
  std::string error;           // kFailed: the work's message; kCrashed / kNoSandbox: what happened
  int64_t retained_bytes = 0;  // kOk: as reported by the work
  std::chrono::nanoseconds elapsed{0};
};

// Runs `work` in a child process under `limits`. `cancelled` (may be null) is read every sample:
// once true the child is killed. Blocks the calling thread until the child is gone.
SandboxResult RunInSandbox(const std::function<SandboxWork()>& work, const SandboxLimits& limits,
                           const std::atomic<bool>* cancelled);

// Bytes the allocator has handed out and not taken back (in the calling process: every arena).
int64_t HeapInUseBytes();

}  // namespace astr::sched
