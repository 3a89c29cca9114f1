#include "base/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "base/mutex.h"

namespace nasgw {

void WriteLogValue(std::ostream& os, std::string_view v) {
  bool quote = v.empty();
  for (char c : v) quote = quote || c == ' ' || c == '"' || static_cast<unsigned char>(c) < 0x20;
  if (!quote) {
    os << v;
    return;
  }
  os << '"';
  for (char c : v) {
    if (c == '"' || c == '\\') {
      os << '\\' << c;
    } else if (c == '\n') {
      os << "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      os << '?';
    } else {
      os << c;
    }
  }
  os << '"';
}
namespace {

LogLevel ThresholdFromEnv() {
  const char* v = std::getenv("NASGW_LOG");
  if (v == nullptr) return LogLevel::kInfo;
  if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(v, "warn") == 0) return LogLevel::kWarn;
  if (std::strcmp(v, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?";
}

// One line at a time, from any thread. Constant-initialized, and its
// destructor is trivial: lines may be logged before main and at exit.
constinit Mutex log_mu;

LogSink& Sink() REQUIRES(log_mu) {
  static LogSink* sink = new LogSink();  // never destroyed: lines may be logged at exit
  return *sink;
}

}  // namespace

bool LogEnabled(LogLevel level) {
  static const LogLevel threshold = ThresholdFromEnv();
  return level >= threshold;
}

LogLine::LogLine(LogLevel level, std::string_view component) {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t;
  gmtime_r(&ts.tv_sec, &t);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1000);
  os_ << buf << ' ' << LevelName(level) << ' ' << component << ' ';
}

LogLine::~LogLine() {
  os_ << '\n';
  std::string s = os_.str();
  MutexLock lock(log_mu);
  if (Sink()) {
    Sink()(s);
  } else {
    std::fwrite(s.data(), 1, s.size(), stderr);
  }
}

void SetLogSink(LogSink sink) {
  MutexLock lock(log_mu);
  Sink() = std::move(sink);
}

}  // namespace nasgw
