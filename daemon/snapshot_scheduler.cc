#include "daemon/snapshot_scheduler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <vector>

#include "base/log.h"

namespace nasgw::daemon {

namespace {

// "YYYYMMDDTHHMMSSZ"
constexpr size_t kStampLen = 16;

int64_t SystemNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool Digits(const std::string& s, size_t pos, size_t n) {
  for (size_t i = pos; i < pos + n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

}  // namespace

std::string ScheduledSnapshotName(const std::string& schedule, int64_t unix_seconds) {
  const auto t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  char stamp[32] = {};
  if (gmtime_r(&t, &tm) == nullptr || std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm) != kStampLen) {
    std::snprintf(stamp, sizeof stamp, "%016lld", static_cast<long long>(unix_seconds));  // not reached before 10000
  }
  return schedule + "-" + stamp;
}

bool IsScheduledSnapshotOf(const std::string& schedule, const std::string& snapshot) {
  const size_t p = schedule.size() + 1;  // the stamp's first character
  if (snapshot.size() != p + kStampLen || snapshot.compare(0, schedule.size(), schedule) != 0 ||
      snapshot[p - 1] != '-') {
    return false;
  }
  return Digits(snapshot, p, 8) && snapshot[p + 8] == 'T' && Digits(snapshot, p + 9, 6) && snapshot[p + 15] == 'Z';
}

std::unique_ptr<SnapshotScheduler> SnapshotScheduler::Start(Node* node, FlushFn flush, Metrics* metrics,
                                                            SnapshotSchedulerOptions options) {
  std::unique_ptr<SnapshotScheduler> s(new SnapshotScheduler(node, std::move(flush), metrics, std::move(options)));
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

SnapshotScheduler::SnapshotScheduler(Node* node, FlushFn flush, Metrics* metrics, SnapshotSchedulerOptions options)
    : node_(node), flush_(std::move(flush)), metrics_(metrics), options_(std::move(options)) {}

SnapshotScheduler::~SnapshotScheduler() {
  Stop();
}

void SnapshotScheduler::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

bool SnapshotScheduler::Stopping() {
  MutexLock lock(mu_);
  return stop_;
}

void SnapshotScheduler::Loop() {
  // The first pass at once (a schedule that missed runs while nasgwd was
  // down runs now), then one a tick. A pass that overran its tick is
  // followed by the next one a tick later, not by a burst.
  auto next = std::chrono::steady_clock::now();
  MutexLock lock(mu_);
  while (!stop_) {
    if (cv_.WaitUntil(mu_, next, [&]() REQUIRES(mu_) { return stop_; })) break;
    lock.Unlock();
    Tick();
    next = std::max(next + options_.tick, std::chrono::steady_clock::now());
    lock.Lock();
  }
}

SnapshotScheduler::Children& SnapshotScheduler::For(const Key& key) {
  auto it = children_.find(key);
  if (it != children_.end()) return it->second;
  Children c;
  if (metrics_ != nullptr) {
    const Labels labels = {{"volume", key.first}, {"schedule", key.second}};
    c.runs = metrics_->Counter("nasgw_snapshot_schedule_runs_total", "Snapshots a snapshot schedule took.", labels);
    c.failures = metrics_->Counter("nasgw_snapshot_schedule_failures_total",
                                   "Snapshot schedule runs that failed (the cache flush, the snapshot, recording the "
                                   "run) and retention deletions that failed.",
                                   labels);
    c.deleted = metrics_->Counter("nasgw_snapshot_schedule_deleted_total",
                                  "Snapshots a snapshot schedule's retention deleted.", labels);
  }
  return children_.emplace(key, c).first->second;
}

void SnapshotScheduler::Tick() {
  auto all = node_->ListSnapshotSchedules();
  if (!all.ok()) {
    // Not online (unformatted, standby, fenced, shut down): nothing runs.
    // Anything else is said once, not every second.
    const std::string why = all.status().code() == Code::kUnavailable ? "" : all.status().ToString();
    if (!why.empty() && why != list_error_) {
      NASGW_LOG(kWarn, "snapshots") << "cannot list the snapshot schedules; none runs" << Kv("error", why);
    }
    list_error_ = why;
    return;
  }
  list_error_.clear();
  // Forget the retries of schedules that are gone.
  for (auto it = retry_at_.begin(); it != retry_at_.end();) {
    const bool listed = std::any_of(all->begin(), all->end(), [&](const fs::SnapshotSchedule& s) {
      return s.volume == it->first.first && s.name == it->first.second;
    });
    it = listed ? std::next(it) : retry_at_.erase(it);
  }
  for (const fs::SnapshotSchedule& listed : *all) {
    if (Stopping()) return;
    const int64_t now = options_.now ? options_.now() : SystemNow();
    auto due = [now](const fs::SnapshotSchedule& s) {
      return s.last_run == 0 || now >= s.last_run + static_cast<int64_t>(s.every_s);
    };
    if (!due(listed)) continue;
    const Key key(listed.volume, listed.name);
    if (auto r = retry_at_.find(key); r != retry_at_.end() && now < r->second) continue;
    bool failed = false;
    const nasgw::Status s =
        node_->RunSnapshotSchedule(listed.volume, listed.name, [&](const fs::SnapshotSchedule& current) {
          // As stored now: a run that raced this one's listing is not repeated.
          return due(current) ? Run(current, now, &failed) : nasgw::Status();
        });
    if (!s.ok() && !failed && s.code() != Code::kNotFound) {
      // Removed meanwhile (NotFound) is no failure; this is, but no step of
      // the run began (the reserve went offline between the list and the run).
      NASGW_LOG(kWarn, "snapshots") << "snapshot schedule not run" << Kv("volume", listed.volume)
                                    << Kv("schedule", listed.name) << Kv("error", s.ToString());
    }
    if (failed) {
      retry_at_[key] = now + static_cast<int64_t>(std::min<uint64_t>(listed.every_s, 60));
    } else {
      retry_at_.erase(key);
    }
  }
}

nasgw::Status SnapshotScheduler::Run(const fs::SnapshotSchedule& s, int64_t now, bool* failed) {
  Children& c = For({s.volume, s.name});
  auto fail = [&](const char* what, const nasgw::Status& st, const std::string& snapshot) {
    NASGW_LOG(kWarn, "snapshots") << what << Kv("volume", s.volume) << Kv("schedule", s.name)
                                  << Kv("snapshot", snapshot) << Kv("error", st.ToString());
    if (c.failures != nullptr) c.failures->Inc();
    *failed = true;
    return st;
  };
  const std::string name = ScheduledSnapshotName(s.name, now);
  // As the admin CreateSnapshot: every write answered before the run is in
  // the snapshot. A failed flush takes none.
  if (flush_) {
    if (nasgw::Status st = flush_(); !st.ok()) {
      return fail("scheduled snapshot not taken: the write-back cache could not be flushed", st, name);
    }
  }
  auto sn = node_->CreateSnapshot(s.volume, name);
  if (!sn.ok()) {
    if (sn.status().code() == Code::kExists) {
      // Two runs in one second, or a snapshot made by hand with this name:
      // this run is skipped; the next tick names its snapshot anew.
      NASGW_LOG(kInfo, "snapshots") << "scheduled snapshot skipped: the name exists" << Kv("volume", s.volume)
                                    << Kv("schedule", s.name) << Kv("snapshot", name);
      return nasgw::Status();
    }
    return fail("scheduled snapshot not taken", sn.status(), name);
  }
  NASGW_LOG(kInfo, "snapshots") << "scheduled snapshot taken" << Kv("volume", s.volume) << Kv("schedule", s.name)
                                << Kv("snapshot", name) << Kv("id", sn->id) << Kv("txg", sn->txg);
  if (c.runs != nullptr) c.runs->Inc();
  nasgw::Status result;
  if (nasgw::Status st = node_->MarkScheduleRun(s.volume, s.name, now); !st.ok()) {
    // The snapshot stands; the schedule runs again after the retry delay.
    result = fail("scheduled snapshot taken but its run not recorded", st, name);
  }
  if (!Retain(s)) *failed = true;
  return result;
}

bool SnapshotScheduler::Retain(const fs::SnapshotSchedule& s) {
  Children& c = For({s.volume, s.name});
  auto list = node_->ListSnapshotsOf(s.volume);  // names only: no space figures
  if (!list.ok()) {
    NASGW_LOG(kWarn, "snapshots") << "snapshot schedule retention: cannot list the snapshots" << Kv("volume", s.volume)
                                  << Kv("schedule", s.name) << Kv("error", list.status().ToString());
    if (c.failures != nullptr) c.failures->Inc();
    return false;
  }
  std::vector<std::string> mine;
  for (const fs::SnapshotInfo& sn : *list) {
    if (IsScheduledSnapshotOf(s.name, sn.name)) mine.push_back(sn.name);
  }
  std::sort(mine.begin(), mine.end());  // by time: the names' UTC stamps
  for (size_t i = 0; i + s.keep < mine.size(); i++) {
    if (Stopping()) return true;  // the next run deletes the rest
    auto gone = node_->DeleteSnapshot(s.volume, mine[i]);
    if (!gone.ok()) {
      if (gone.status().code() == Code::kNotFound) continue;  // deleted by hand meanwhile
      NASGW_LOG(kWarn, "snapshots") << "snapshot schedule retention: delete failed" << Kv("volume", s.volume)
                                    << Kv("schedule", s.name) << Kv("snapshot", mine[i])
                                    << Kv("error", gone.status().ToString());
      if (c.failures != nullptr) c.failures->Inc();
      return false;
    }
    NASGW_LOG(kInfo, "snapshots") << "scheduled snapshot deleted" << Kv("volume", s.volume) << Kv("schedule", s.name)
                                  << Kv("snapshot", mine[i]) << Kv("keep", s.keep)
                                  << Kv("freed_bytes", gone->frees_bytes);
    if (c.deleted != nullptr) c.deleted->Inc();
  }
  return true;
}

}  // namespace nasgw::daemon
