#include "base/log_limit.h"

#include "base/mutex.h"

namespace nasgw {

namespace {
// Callers read the clock before taking the lock: a time may arrive a little
// behind one already seen.
uint64_t Since(uint64_t now_ns, uint64_t then_ns) {
  return now_ns > then_ns ? now_ns - then_ns : 0;
}
}  // namespace

LogLimiter::LogLimiter(uint64_t interval_ns, size_t keys_max)
    : interval_ns_(interval_ns), keys_max_(keys_max < 1 ? 1 : keys_max) {}

std::optional<LogLimiter::Report> LogLimiter::Add(std::string_view key, uint64_t now_ns, std::string_view note) {
  MutexLock l(mu_);
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    // A new key reports at once; past keys_max they all share one entry
    // (kOtherKey's slot is kept free for that).
    if (keys_.size() + 1 >= keys_max_) {
      key = kOtherKey;
      it = keys_.find(key);
    }
    if (it == keys_.end()) {
      keys_.emplace(std::string(key), Entry{now_ns, 0, {}});
      return Report{std::string(key), 1, std::string(note)};
    }
  }
  Entry& e = it->second;
  if (Since(now_ns, e.reported_ns) >= interval_ns_) {
    Report r{it->first, e.held + 1, std::string(note)};
    e.reported_ns = now_ns;
    e.held = 0;
    e.note.clear();
    return r;
  }
  e.held++;
  e.note.assign(note);
  return std::nullopt;
}

std::vector<LogLimiter::Report> LogLimiter::Due(uint64_t now_ns) {
  std::vector<Report> out;
  MutexLock l(mu_);
  for (auto it = keys_.begin(); it != keys_.end();) {
    Entry& e = it->second;
    if (Since(now_ns, e.reported_ns) < interval_ns_) {
      ++it;
    } else if (e.held > 0) {
      out.push_back({it->first, e.held, std::move(e.note)});
      e.reported_ns = now_ns;
      e.held = 0;
      e.note.clear();
      ++it;
    } else {
      it = keys_.erase(it);  // quiet for an interval: its next event reports at once
    }
  }
  return out;
}

std::vector<LogLimiter::Report> LogLimiter::Drain() {
  std::vector<Report> out;
  MutexLock l(mu_);
  for (auto& [key, e] : keys_) {
    if (e.held > 0) out.push_back({key, e.held, std::move(e.note)});
  }
  keys_.clear();
  return out;
}

}  // namespace nasgw
