// Structured logging: one line per event, "ts level component msg key=value ...".
// Thread-safe. The level comes from NASGW_LOG (debug|info|warn|error; default info).
//
//   NASGW_LOG(kWarn, "block") << "path down" << Kv("portal", p) << Kv("err", s);
#pragma once

#include <functional>
#include <sstream>
#include <string_view>

namespace nasgw {

enum class LogLevel { kDebug = 0, kInfo, kWarn, kError };

bool LogEnabled(LogLevel level);

// Where finished lines go (each with its newline): stderr, unless a sink is
// set. For tests that read what was logged. Called under the log's lock, one
// line at a time; a null sink restores stderr.
using LogSink = std::function<void(std::string_view line)>;
void SetLogSink(LogSink sink);

class LogLine {
 public:
  LogLine(LogLevel level, std::string_view component);
  ~LogLine();
  template <typename T>
  LogLine& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  std::ostringstream os_;
};

template <typename T>
struct KvPair {
  std::string_view key;
  const T& value;
};
template <typename T>
KvPair<T> Kv(std::string_view key, const T& value) {
  return {key, value};
}
// A value that is empty or holds a space, a quote or a control character is
// written quoted (with \" and \\ escaped), so a line always splits on
// spaces into key=value fields.
void WriteLogValue(std::ostream& os, std::string_view v);
template <typename T>
std::ostream& operator<<(std::ostream& os, const KvPair<T>& kv) {
  std::ostringstream v;
  v << kv.value;
  os << ' ' << kv.key << '=';
  WriteLogValue(os, v.str());
  return os;
}

}  // namespace nasgw

// A for statement, not if/else, so that an unbraced `if (x) NASGW_LOG(...)`
// has no dangling else.
#define NASGW_LOG(level, component)                                                                              \
  for (bool _nasgw_log_on = ::nasgw::LogEnabled(::nasgw::LogLevel::level); _nasgw_log_on; _nasgw_log_on = false) \
  ::nasgw::LogLine(::nasgw::LogLevel::level, component)
