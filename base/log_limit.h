// LogLimiter: keeps a flood of like events from flooding the log.
//
// Events are grouped by a key (say, the peer uid of a malformed frame). The
// first event of a key is reported at once; after that the key gets at most
// one report per interval, carrying how many events there were since its
// last report (this one included) and the latest event's note. Events held
// back are never lost: Due() reports the keys whose interval has passed
// (call it periodically, e.g. once a second) and Drain() reports every count
// still held (at shutdown). So the counts of all reports add up to the
// number of events.
//
// Memory: one entry per key that had an event in the last interval, at
// most keys_max; events of further keys are counted under kOtherKey.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"

namespace nasgw {

class LogLimiter {
 public:
  static constexpr std::string_view kOtherKey = "(other)";

  struct Report {
    std::string key;
    uint64_t count = 0;  // events since the key's last report, this one included
    std::string note;    // the latest event's
  };

  explicit LogLimiter(uint64_t interval_ns, size_t keys_max = 1024);

  // Counts one event of `key` at now_ns (monotonic): a report to log now,
  // or nothing when the key was reported less than an interval ago.
  std::optional<Report> Add(std::string_view key, uint64_t now_ns, std::string_view note = {});
  // Reports of the keys holding events whose interval has passed by now_ns.
  std::vector<Report> Due(uint64_t now_ns);
  // Reports of every key holding events, whatever the time; forgets all keys.
  std::vector<Report> Drain();

 private:
  struct Entry {
    uint64_t reported_ns = 0;  // the last report
    uint64_t held = 0;         // events since
    std::string note;
  };
  const uint64_t interval_ns_;
  const size_t keys_max_;
  Mutex mu_;
  std::map<std::string, Entry, std::less<>> keys_ GUARDED_BY(mu_);
};

}  // namespace nasgw
