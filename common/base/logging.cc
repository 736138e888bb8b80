#include "common/base/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>

#ifndef ASTR_HAVE_GLOG
#include <atomic>
#include <chrono>
#endif

namespace astr {
namespace {

enum class Format { kText, kJson };

constexpr const char* kSeverityNames[] = {"INFO", "WARNING", "ERROR", "FATAL"};

int64_t ThreadId() { return static_cast<int64_t>(syscall(SYS_gettid)); }

const char* BaseName(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

// {"time":"2025-01-02T03:04:05.678901Z","level":...,"thread":...,"file":...,"line":...,
// "message":...}: the message last, so a reader that searches the raw line for text finds it
// undisturbed by the other fields. nlohmann escapes quotes, control characters and invalid UTF-8.
std::string JsonLine(int severity, const char* file, int line, std::time_t seconds, int32_t micros,
                     std::string_view message) {
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char time[96];
  std::snprintf(time, sizeof(time), "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(micros));
  nlohmann::ordered_json j;
  j["time"] = time;
  j["level"] = kSeverityNames[severity];
  j["thread"] = ThreadId();
  j["file"] = BaseName(file);
  j["line"] = line;
  j["message"] = std::string(message);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// One write per line, so lines of concurrent threads never interleave.
void WriteStderr(const std::string& line) {
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

struct Parsed {
  Format format;
  int min_severity;
};

StatusOr<Parsed> ParseOptions(const LogOptions& o) {
  Parsed p{};
  if (o.format == "text") {
    p.format = Format::kText;
  } else if (o.format == "json") {
    p.format = Format::kJson;
  } else {
    return InvalidArgumentError("--log-format: '" + o.format + "' is not one of text or json");
  }
  if (o.level == "info") {
    p.min_severity = 0;
  } else if (o.level == "warning") {
    p.min_severity = 1;
  } else if (o.level == "error") {
    p.min_severity = 2;
  } else {
    return InvalidArgumentError("--log-level: '" + o.level +
                                "' is not one of info, warning or error");
  }
  if (o.verbosity < 0) {
    return InvalidArgumentError("--v must be >= 0, got " + std::to_string(o.verbosity));
  }
  return p;
}

#ifdef ASTR_HAVE_GLOG

// JSON lines: glog hands every message to its sinks; its own stderr and file output are off.
class JsonSink : public google::LogSink {
 public:
  void send(google::LogSeverity severity, const char* full_filename, const char* base_filename,
            int line, const google::LogMessageTime& time, const char* message,
            size_t message_len) override {
    WriteStderr(JsonLine(severity, base_filename, line, time.timestamp(), time.usec(),
                         std::string_view(message, message_len)));
  }
};

#else  // the fallback

std::atomic<int> g_min_severity{0};
std::atomic<int> g_verbosity{0};
std::atomic<Format> g_format{Format::kText};
std::mutex g_write_mu;

// glog's text line: "I20250102 03:04:05.678901  1234 file.cc:42] message".
std::string TextLine(int severity, const char* file, int line, std::time_t seconds, int32_t micros,
                     std::string_view message) {
  std::tm local{};
  localtime_r(&seconds, &local);
  char prefix[160];
  std::snprintf(prefix, sizeof(prefix), "%c%04d%02d%02d %02d:%02d:%02d.%06d %5lld %s:%d] ",
                kSeverityNames[severity][0], local.tm_year + 1900, local.tm_mon + 1, local.tm_mday,
                local.tm_hour, local.tm_min, local.tm_sec, static_cast<int>(micros),
                static_cast<long long>(ThreadId()), BaseName(file), line);
  std::string out = prefix;
  out.append(message);
  out += '\n';
  return out;
}

void Emit(int severity, const char* file, int line, std::string_view message) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now).count();
  const std::time_t seconds = static_cast<std::time_t>(us / 1000000);
  const auto micros = static_cast<int32_t>(us % 1000000);
  const std::string text = g_format.load() == Format::kJson
                               ? JsonLine(severity, file, line, seconds, micros, message)
                               : TextLine(severity, file, line, seconds, micros, message);
  std::lock_guard<std::mutex> lock(g_write_mu);
  WriteStderr(text);
}

#endif  // ASTR_HAVE_GLOG

}  // namespace

void LogOptions::Register(FlagSet* fs) {
  fs->String("log-format", &format,
             "Log lines on stderr: text (glog's 'I20250102 03:04:05.678901 1234 file.cc:42] "
             "message') or json (one JSON object per line with time (RFC 3339, UTC, "
             "microseconds), level, thread, file, line and message, for log collectors).");
  fs->String("log-level", &level, "Least severe log lines shown: info, warning or error.");
  fs->Int("v", &verbosity,
          "Verbose logging: VLOG(n) lines with n <= this are shown as INFO (also -v N).");
}

#ifdef ASTR_HAVE_GLOG

Status InitLogging(const char* argv0, const LogOptions& options) {
  ASTR_ASSIGN_OR_RETURN(const Parsed p, ParseOptions(options));
  static std::once_flag init;
  std::call_once(init, [argv0] { google::InitGoogleLogging(argv0); });
  static JsonSink sink;
  static bool sink_added = false;
  FLAGS_minloglevel = p.min_severity;
  FLAGS_v = options.verbosity;
  FLAGS_colorlogtostderr = false;
  if (p.format == Format::kJson) {
    // No glog line on stderr (stderrthreshold above FATAL) and no log files (empty destination).
    FLAGS_logtostderr = false;
    FLAGS_alsologtostderr = false;
    FLAGS_stderrthreshold = google::NUM_SEVERITIES;
    for (int s = 0; s < google::NUM_SEVERITIES; ++s) google::SetLogDestination(s, "");
    if (!sink_added) google::AddLogSink(&sink);
    sink_added = true;
  } else {
    if (sink_added) google::RemoveLogSink(&sink);
    sink_added = false;
    FLAGS_logtostderr = true;
  }
  return OkStatus();
}

void LogAt(LogSeverity severity, const char* file, int line, std::string_view message) {
  const int s = severity == LogSeverity::kFatal ? google::GLOG_ERROR : static_cast<int>(severity);
  google::LogMessage(BaseName(file), line, s).stream() << message;
}

#else  // the fallback

Status InitLogging(const char* /*argv0*/, const LogOptions& options) {
  ASTR_ASSIGN_OR_RETURN(const Parsed p, ParseOptions(options));
  g_min_severity = p.min_severity;
  g_verbosity = options.verbosity;
  g_format = p.format;
  return OkStatus();
}

void LogAt(LogSeverity severity, const char* file, int line, std::string_view message) {
  const int s = severity == LogSeverity::kFatal ? 2 : static_cast<int>(severity);
  if (log_internal::SeverityEnabled(s)) Emit(s, file, line, message);
}

namespace log_internal {

bool SeverityEnabled(int severity) {
  return severity >= kSeverityFATAL || severity >= g_min_severity.load(std::memory_order_relaxed);
}

bool VlogEnabled(int level) { return level <= g_verbosity.load(std::memory_order_relaxed); }

Message::Message(const char* file, int line, int severity)
    : file_(file), line_(line), severity_(severity) {}

Message::~Message() { Write(); }

void Message::Write() {
  if (written_) return;
  written_ = true;
  Emit(severity_, file_, line_, stream_.str());
}

FatalMessage::~FatalMessage() {
  Write();
  std::abort();
}

}  // namespace log_internal

#endif  // ASTR_HAVE_GLOG

}  // namespace astr
