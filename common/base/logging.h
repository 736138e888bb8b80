// The project's logger. A library says what happened; the binary decides where it goes and in which
// format (InitLogging). No library names a program in its messages: the line's prefix (or JSON
// fields) carries severity, time, thread and file:line.
//
//   LOG(INFO) << "weights loaded in " << seconds << " s";
//   LOG(WARNING) << "worker " << address << ": step stream broke: " << status.ToString();
//   VLOG(1) << "plan: " << n << " entries";   // shown with --v=1 or more
//
// Severities: INFO, WARNING, ERROR, FATAL (the process aborts after the line). With glog
// (ASTR_HAVE_GLOG, Debian's libgoogle-glog-dev) these are glog's own macros. Without it (the bare
// GPU build, or -DASTR_WITH_GLOG=OFF) a minimal fallback below provides LOG, LOG_IF, VLOG,
// VLOG_IS_ON, CHECK and CHECK_EQ/NE/LT/LE/GT/GE with the same behaviour and the same line formats.
//
// Before InitLogging a binary's lines go to stderr in the text format, INFO and up.
#pragma once

#include <string>
#include <string_view>

#include "common/base/flags.h"
#include "common/base/status.h"

#ifdef ASTR_HAVE_GLOG
#include <glog/logging.h>
#else
#include <sstream>

namespace astr::log_internal {

// glog's numbering: INFO 0, WARNING 1, ERROR 2, FATAL 3.
inline constexpr int kSeverityINFO = 0;
inline constexpr int kSeverityWARNING = 1;
inline constexpr int kSeverityERROR = 2;
inline constexpr int kSeverityFATAL = 3;

bool SeverityEnabled(int severity);  // at or above the minimum level (FATAL always)
bool VlogEnabled(int level);         // level <= the verbosity

// One line: collects the streamed message, writes it when destroyed.
class Message {
 public:
  Message(const char* file, int line, int severity);
  ~Message();
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
  std::ostream& stream() { return stream_; }

 protected:
  void Write();

 private:
  const char* file_;
  int line_;
  int severity_;
  bool written_ = false;
  std::ostringstream stream_;
};

// A FATAL line: written, then the process aborts.
class FatalMessage : public Message {
 public:
  FatalMessage(const char* file, int line) : Message(file, line, kSeverityFATAL) {}
  [[noreturn]] ~FatalMessage();
};

// Turns `stream << ...` into a void expression for the ?: of LOG_IF.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace astr::log_internal

#define ASTR_LOG_MESSAGE_INFO ::astr::log_internal::Message(__FILE__, __LINE__, 0)
#define ASTR_LOG_MESSAGE_WARNING ::astr::log_internal::Message(__FILE__, __LINE__, 1)
#define ASTR_LOG_MESSAGE_ERROR ::astr::log_internal::Message(__FILE__, __LINE__, 2)
#define ASTR_LOG_MESSAGE_FATAL ::astr::log_internal::FatalMessage(__FILE__, __LINE__)

#define LOG_IF(severity, condition)                                                   \
  !((condition) &&                                                                    \
    ::astr::log_internal::SeverityEnabled(::astr::log_internal::kSeverity##severity)) \
      ? (void)0                                                                       \
      : ::astr::log_internal::Voidify() & ASTR_LOG_MESSAGE_##severity.stream()
#define LOG(severity) LOG_IF(severity, true)
#define VLOG_IS_ON(level) ::astr::log_internal::VlogEnabled(level)
#define VLOG(level) LOG_IF(INFO, VLOG_IS_ON(level))
#define CHECK(condition) LOG_IF(FATAL, !(condition)) << "Check failed: " #condition " "
#define ASTR_CHECK_OP(op, a, b) LOG_IF(FATAL, !((a)op(b))) << "Check failed: " #a " " #op " " #b " "
#define CHECK_EQ(a, b) ASTR_CHECK_OP(==, a, b)
#define CHECK_NE(a, b) ASTR_CHECK_OP(!=, a, b)
#define CHECK_LT(a, b) ASTR_CHECK_OP(<, a, b)
#define CHECK_LE(a, b) ASTR_CHECK_OP(<=, a, b)
#define CHECK_GT(a, b) ASTR_CHECK_OP(>, a, b)
#define CHECK_GE(a, b) ASTR_CHECK_OP(>=, a, b)
#endif  // ASTR_HAVE_GLOG

namespace astr {

// glog's numbering, for LogAt.
enum class LogSeverity : int { kInfo = 0, kWarning = 1, kError = 2, kFatal = 3 };

// A binary's logging flags. The defaults are what a binary gets without them.
struct LogOptions {
  std::string format = "text";  // "text" (glog's line) or "json" (one JSON object per line)
  std::string level = "info";   // least severe lines shown: "info", "warning" or "error"
  int verbosity = 0;            // VLOG(n) lines with n <= verbosity are shown

  // Registers --log-format, --log-level and --v (also -v N) on `fs`, the current values as
  // defaults.
  void Register(FlagSet* fs);
};

// Sets up logging for a binary: every line to stderr in options.format, from options.level up,
// VLOG up to options.verbosity. Call once, first thing after the flags are parsed; a later call
// reconfigures (tests). INVALID_ARGUMENT, naming the flag, for an unknown format or level.
//
// Text lines are glog's: "I20250102 03:04:05.678901 1234 file.cc:42] message" (severity letter,
// local date and time, kernel thread id, source file:line). JSON lines are one object each, the
// fields in this order: {"time":"2025-01-02T03:04:05.678901Z","level":"INFO","thread":1234,
// "file":"file.cc","line":42,"message":"..."} (time in UTC, RFC 3339 with microseconds).
Status InitLogging(const char* argv0, const LogOptions& options);

// Logs `message` as LOG(severity) at file:line would: forwards another library's log lines
// (gRPC's) into ours. FATAL is logged as ERROR (the other library decides whether to abort).
void LogAt(LogSeverity severity, const char* file, int line, std::string_view message);

}  // namespace astr
