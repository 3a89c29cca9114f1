// The write-back data cache: the acknowledgement point of unstable writes
// (docs/architecture.md, "The write path"; the brief's decision 5).
//
// A write the head marks unstable (an NFS UNSTABLE WRITE, a FUSE write) is
// copied once into the file's dirty ranges and answered: nothing touches the
// SAN. A flusher writes a file's dirty ranges later, all of them in one
// transaction of the domain (fs::Domain::WriteV), when they are older than
// flush_after_ms or when the cache holds more than half its dirty budget. A
// stable write, a COMMIT, an fsync and a SETATTR flush the file first, so
// everything a client was told is durable is on the SAN when it is answered.
// Until then what a client reads and the attributes it is shown (size, mtime,
// ctime) include the dirty data.
//
// Answered-but-unflushed data is lost when nasgwd dies; the write verifier
// changes with every opening of the domain (daemon/node.cc), so NFS clients
// resend what they had not committed. The controller-pair issue adds "and in
// the partner's memory" as a second acknowledgement point: the seam is Write
// (after the copy, before the answer) and Flush (the release).
//
// Bounded: dirty bytes never pass dirty_bytes by more than one write (at most
// limits::kCacheWriteBytesMax); a writer that finds the cache full waits for
// the flusher (backpressure) and fails with Busy after stall_timeout_ms.
//
// Thread-safety: every method may be called concurrently. Lock order:
// File::flush_mu > DataCache::mu_ > File::mu, and ReadCache's mutex last
// (a leaf: it calls nothing back but a load of the dirty byte count).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "base/limits.h"
#include "base/log_limit.h"
#include "base/mutex.h"
#include "base/status.h"
#include "cache/read_cache.h"
#include "fs/domain.h"

namespace nasgw::cache {

struct DataCacheOptions {
  // Dirty data and clean blocks (the read cache) share this (the data
  // cache's share of the node's memory budget); dirty_bytes is at most half
  // of it.
  uint64_t memory_bytes = limits::SharesOf(limits::kMemoryBytesDefault).data;
  uint64_t dirty_bytes = limits::kCacheDirtyBytesDefault;
  // Largest read-ahead window of a sequential stream; 0: no read-ahead.
  uint64_t read_ahead_bytes = limits::kReadAheadBytesDefault;
  uint32_t flush_after_ms = limits::kCacheFlushAfterMsDefault;
  uint32_t stall_timeout_ms = limits::kCacheStallTimeoutMsDefault;
  // Most bytes one flush transaction carries; a file with more is flushed in
  // several transactions.
  uint64_t flush_bytes_max = limits::kCacheFlushBytesMax;
  // Strict mode: every write is flushed before it is answered (today's
  // write-through behaviour; answered FILE_SYNC).
  bool write_through = false;
  // Stable writes up to limits::kLogWriteBytesMax go to the domain's intent
  // log and are answered once logged (one shared array write), then flushed
  // like cached ones. Off: flushed to their place before the answer.
  bool log_stable_writes = true;
  // ... while the log's records reach the array within this (their recent
  // write time); slower, a stable write goes to its place, its bytes over
  // the array link once. 0: always the log. (limits::kLogSlowMsDefault)
  uint32_t log_slow_ms = limits::kLogSlowMsDefault;
  // A COMMIT or fsync logs its file's small dirty data (Commit), with the
  // same log_slow_ms rule. Off: it flushes the file to its place.
  bool log_commits = true;

  Status Validate() const;
};

struct DataCacheStats {
  uint64_t dirty_bytes = 0;        // dirty and being flushed, now
  uint64_t dirty_files = 0;        // files with dirty data, now
  uint64_t writes_cached = 0;      // answered from memory
  uint64_t writes_stable = 0;      // flushed before the answer (stable, strict)
  uint64_t writes_logged = 0;      // stable, answered once in the intent log
  uint64_t writes_log_slow = 0;    // stable, of writes_stable: to their place since the log was slow
  uint64_t commits_logged = 0;     // COMMITs and fsyncs answered once their file's dirty data was logged
  uint64_t commits_flushed = 0;    // ... answered once it was in place
  uint64_t bytes_written = 0;      // by clients, through the cache
  uint64_t read_bytes_dirty = 0;   // bytes reads took from dirty data
  uint64_t flushes = 0;            // flush transactions committed
  uint64_t flush_bytes = 0;        // bytes they carried
  uint64_t flush_errors = 0;       // flushes that failed (the data stays dirty)
  uint64_t flush_dropped = 0;      // bytes of files deleted before their flush
  uint64_t stalls = 0;             // writers that waited for the flusher
  uint64_t stall_timeouts = 0;     // ... and gave up (Busy)
  uint64_t no_space = 0;           // writes refused: no space to reserve for their flush
  uint64_t flush_nanos_total = 0;  // time spent in flush transactions
  ReadCacheStats read;             // the clean blocks
};

class DataCache {
 public:
  // `domain` is held weakly: when its opening ends (the node closed or lost
  // it) the cache has nothing to flush to, and its dirty data is dropped,
  // as the new write verifier tells clients.
  DataCache(std::weak_ptr<fs::Domain> domain, const DataCacheOptions& o);
  ~DataCache();  // Close()
  DataCache(const DataCache&) = delete;
  DataCache& operator=(const DataCache&) = delete;

  // Writes n bytes at off of the file `a` (attributes as loaded, committed).
  // Unstable: copied and answered; `*stable_out` false. Stable (or strict):
  // flushed with the file's other dirty data before the answer; true.
  // Returns the attributes the client is shown (with the dirty data).
  Result<fs::Attr> Write(uint32_t vol, const fs::Attr& a, uint64_t off, const void* data, size_t n, bool stable,
                         bool* stable_out);
  // Reads up to n bytes at off, dirty data included; *size_out is the size
  // the file has with it (for EOF). `a` as Shown gave it.
  Result<size_t> Read(uint32_t vol, const fs::Attr& a, uint64_t off, size_t n, void* out, uint64_t* size_out);
  // `a` as a client sees it: size and times with the dirty data. `a` must
  // not predate a flush of the file that completed since (the dirty data it
  // carried would be in neither): attributes loaded before are shown with
  // Shown instead.
  fs::Attr Overlay(uint32_t vol, fs::Attr a) const;
  // Loads a file's committed attributes with `load` and shows them with the
  // dirty data, loading again if a flush completed in between, so that a
  // client is never shown a size or change attribute that went back. Waits
  // for a flush of the file in progress when flushes keep ending under it.
  Result<fs::Attr> Shown(uint32_t vol, const std::function<Result<fs::Attr>()>& load) const;
  // The file's dirty data on the SAN (before a SETATTR, a fallocate, a
  // SEEK_DATA, a file's last name going).
  Status Flush(uint32_t vol, uint64_t ino);
  // COMMIT and fsync: the file's dirty data durable. When the part of it
  // not in the intent log is small (limits::kCommitLogBytesMax with a
  // partner's mirror answering for the log, kLogWriteBytesMax without),
  // that part is logged as stable writes are, stays dirty for the flusher,
  // and the answer comes once the log holds it: from the partner's memory
  // in a healthy pair. Otherwise (more, strict mode, a slow or full log)
  // Flush.
  Status Commit(uint32_t vol, uint64_t ino);
  // A SETATTR: the file's dirty data flushed first (a truncation cuts it,
  // and times set now must not be overtaken by a later flush of earlier
  // writes), then the change, and a truncation's cut blocks leave the read
  // cache. Every change of a file's size goes through here.
  Result<fs::Attr> SetAttrs(uint32_t vol, uint64_t ino, const fs::SetAttr& s);
  // fallocate and SEEK_DATA/SEEK_HOLE (fs::Domain::Fallocate, Seek): the
  // file's dirty data flushed first, as for a SETATTR, so the maps they
  // change or read hold it; a fallocate's zeroed blocks leave the read cache.
  Result<fs::Attr> Fallocate(uint32_t vol, uint64_t ino, uint32_t mode, uint64_t off, uint64_t len);
  Result<uint64_t> Seek(uint32_t vol, uint64_t ino, uint64_t off, bool hole);
  // Every file's (orderly shutdown). The first error.
  Status FlushAll();
  // Volume `vol` was rolled back to a snapshot (fs::Domain::RollbackSnapshot):
  // its files' committed data and attributes changed in ways no flush of
  // this cache said. The clean blocks held of them are dropped (reads and
  // read-aheads that began before cache nothing), and attributes loaded
  // before are loaded again (Shown). Dirty data stays: the caller flushed
  // the cache before the rollback, so whatever is dirty now was written
  // while it ran, and is flushed after it (over the rolled-back file; or
  // dropped at its flush, when the rollback took the file away). Returns the
  // clean bytes dropped.
  uint64_t ForgetVolume(uint32_t vol);
  // FlushAll, then stops the flusher; later writes are written through.
  Status Close();

  DataCacheStats stats() const;
  // Waits until the cache holds no dirty data (the flusher, or anyone, has
  // written it all), at most `timeout_ms`; false if it still holds some.
  bool WaitClean(uint32_t timeout_ms) EXCLUDES(mu_);

 private:
  struct File;
  using Key = std::pair<uint32_t, uint64_t>;  // volume, inode

  std::shared_ptr<File> Find(Key k) const;
  std::shared_ptr<File> FindOrMake(Key k, uint64_t gen);
  // Commit's logging: the LSN the answer waits for (0: nothing to wait
  // for), or NotSupported when the dirty data goes to its place instead.
  Result<uint64_t> LogDirty(fs::Domain& d, File& f);
  // Wakes the flusher when logged writes fill the log past
  // limits::kLogWriteFlushPct.
  void WakeFlusherIfLogFills(fs::Domain& d) EXCLUDES(mu_);
  Status FlushFile(const std::shared_ptr<File>& f);
  Status Admit();
  void Release(uint64_t bytes);
  void FlusherLoop(bool helper);
  void Retire(const std::shared_ptr<File>& f);
  // The committed bytes of [off, off+n) into out, through the read cache.
  Status ReadClean(fs::Domain& d, uint32_t vol, const fs::Attr& a, uint64_t off, uint64_t n, uint8_t* out);
  // A read of [off, off+n) done: read ahead if it follows a stream.
  void ReadAhead(uint32_t vol, const fs::Attr& a, uint64_t off, uint64_t n, uint64_t size) EXCLUDES(mu_);
  void AheadLoop() EXCLUDES(mu_);

  const std::weak_ptr<fs::Domain> domain_;
  const DataCacheOptions o_;

  mutable Mutex mu_;
  CondVar space_cv_;    // dirty bytes went down
  CondVar flusher_cv_;  // work for the flusher, or stop
  std::map<Key, std::shared_ptr<File>> files_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  bool closed_ GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> dirty_{0};
  // Flushes that ended (their flushing data left the cache): attributes
  // loaded before one ended are loaded again (Shown).
  std::atomic<uint64_t> epoch_{0};
  std::vector<std::thread> flushers_;
  std::set<const File*> flushing_now_ GUARDED_BY(mu_);  // taken by a flusher thread
  ReadCache rc_;
  struct AheadTask {
    uint32_t vol = 0;
    fs::Attr a;
    ReadCache::Ahead span;
  };
  CondVar ahead_cv_;  // a read-ahead queued, or stop
  std::deque<AheadTask> ahead_q_ GUARDED_BY(mu_);
  std::vector<std::thread> ahead_threads_;

  struct Counters {
    std::atomic<uint64_t> writes_cached{0}, writes_stable{0}, writes_logged{0}, writes_log_slow{0}, bytes_written{0},
        read_bytes_dirty{0}, flushes{0}, flush_bytes{0}, flush_errors{0}, flush_dropped{0}, stalls{0},
        stall_timeouts{0}, flush_nanos{0}, no_space{0}, commits_logged{0}, commits_flushed{0};
  };
  mutable Counters c_;
  LogLimiter flush_log_{1'000'000'000};  // a failing array: one line a second
};

}  // namespace nasgw::cache
