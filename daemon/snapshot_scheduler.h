// SnapshotScheduler: runs the snapshot schedules kept in the domain
// (fs::Domain::AddSnapshotSchedule; docs/snapshots.md, "Schedules").
//
// One thread. Every tick (a second) while the reserve is online it lists the
// schedules; for each that is due (never run, or last_run + every_s <= now,
// in Unix seconds) it runs it, through Node::RunSnapshotSchedule so that a
// removal waits for a run under way and none begins after it:
//   1. flushes the write-back cache (the admin CreateSnapshot's flush), so
//      every write answered before the run is in the snapshot;
//   2. takes the snapshot `<schedule>-<UTC YYYYMMDDTHHMMSSZ>` (names sort by
//      time). A name that exists (two runs in one second, or a snapshot made
//      by hand with that name) skips the run: it is taken a second later;
//   3. records the run (Domain::MarkScheduleRun(now));
//   4. retention: of the volume's snapshots named `<schedule>-` and a
//      timestamp of exactly that form, deletes the oldest (by name, that is
//      by time) until `keep` remain. Other snapshots are never touched.
// Each snapshot taken and deleted is logged (INFO, "snapshots"), each
// failure too (WARN); a failure never stops the thread. A failed run (the
// flush, the create or the record) is tried again after min(every_s, 60)
// seconds, not every tick. A schedule that missed runs (nasgwd was down,
// the reserve offline) runs once when it can, then every every_s from then.
//
// Prometheus (with `metrics`): nasgw_snapshot_schedule_runs_total,
// nasgw_snapshot_schedule_failures_total and
// nasgw_snapshot_schedule_deleted_total, labelled volume and schedule.
//
// Stop() ends the thread promptly: it waits on a condition variable between
// ticks, and checks between the steps of a run (the step under way, a flush,
// a snapshot or one deletion, finishes first).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "base/mutex.h"
#include "base/status.h"
#include "daemon/metrics.h"
#include "daemon/node.h"
#include "fs/domain.h"

namespace nasgw::daemon {

// The snapshot a schedule's run at `unix_seconds` takes:
// `<schedule>-YYYYMMDDTHHMMSSZ` (UTC).
std::string ScheduledSnapshotName(const std::string& schedule, int64_t unix_seconds);
// `snapshot` is named as the schedule's runs name theirs (what its retention
// may delete): `<schedule>-` then exactly YYYYMMDDTHHMMSSZ.
bool IsScheduledSnapshotOf(const std::string& schedule, const std::string& snapshot);

struct SnapshotSchedulerOptions {
  std::chrono::milliseconds tick{1000};
  // The time in Unix seconds (tests may move it); null: the system clock.
  std::function<int64_t()> now;
};

class SnapshotScheduler {
 public:
  // Writes what the write-back cache holds dirty to the domain and waits
  // for it (HeadService::FlushCache); null: there is no cache.
  using FlushFn = std::function<nasgw::Status()>;
  // REQUIRES: `node`, what `flush` flushes and `metrics` (null: none) outlive
  // Stop().
  static std::unique_ptr<SnapshotScheduler> Start(Node* node, FlushFn flush, Metrics* metrics,
                                                  SnapshotSchedulerOptions options = {});
  // Ends the thread and waits for it. Idempotent.
  void Stop();
  ~SnapshotScheduler();
  SnapshotScheduler(const SnapshotScheduler&) = delete;
  SnapshotScheduler& operator=(const SnapshotScheduler&) = delete;

 private:
  struct Children {
    Counter* runs = nullptr;
    Counter* failures = nullptr;
    Counter* deleted = nullptr;
  };
  using Key = std::pair<std::string, std::string>;  // volume, schedule

  SnapshotScheduler(Node* node, FlushFn flush, Metrics* metrics, SnapshotSchedulerOptions options);
  void Loop();
  // One pass over the schedules.
  void Tick();
  // One run of a due schedule (under Node::RunSnapshotSchedule); `failed`
  // is set when a step failed.
  nasgw::Status Run(const fs::SnapshotSchedule& s, int64_t now, bool* failed);
  // Deletes the schedule's oldest snapshots beyond `keep`; false when a
  // deletion failed.
  bool Retain(const fs::SnapshotSchedule& s);
  bool Stopping();
  Children& For(const Key& key);

  Node* const node_;
  const FlushFn flush_;
  Metrics* const metrics_;
  const SnapshotSchedulerOptions options_;
  // Only the scheduler's thread touches these.
  std::map<Key, int64_t> retry_at_;  // a failed run's next try (Unix seconds)
  std::map<Key, Children> children_;
  std::string list_error_;  // the last failure to list the schedules, said once

  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace nasgw::daemon
