// IntentLog: a domain's intent log on the reserve's LUNs, in the role of
// ZFS's ZIL and ONTAP's NVLOG. What must be durable before it reaches its
// final place (today: every metadata change of the domain, as the batch the
// metadata store applies) is appended here and acknowledged once the record
// that holds it is on the array. The metadata store itself is then written
// back in transaction groups (a flush of its memtable) and the log space the
// group covered is reused (Checkpoint).
//
// Entries are opaque byte strings with a log sequence number (LSN), dense
// and increasing in the order of Append. The log does not look inside them;
// the domain gives them a type byte, so later kinds (small stable writes, a
// partner's mirror) fit without a new format.
//
// Group commit: one writer thread takes every entry appended since its last
// write, packs them into one record (at most max_record_bytes) and writes it
// in one WRITE with FUA; every operation waiting on an entry of that record
// is answered by that one round trip. Up to max_writes_in_flight records are
// on their way at once, each at the position after the one before; an entry
// is durable once its record and every record before it are written. So
// what is on the array is the appended sequence up to some LSN, then records
// that may be written or not (torn, missing), none of them acknowledged.
//
// Replay (Open) is exact: the entries after the last checkpoint, in LSN
// order, up to the first record that does not verify (bad checksum, wrong
// salt, wrong position, not the next LSN: a torn or never-written tail, or an
// older lap's record; or a record of an earlier session after one of a later
// session). Applying a metadata batch is idempotent over any state at least
// as new as the checkpoint, so replaying an entry the store already holds is
// harmless.
//
// Sessions: records written after a gap (an earlier record of theirs never
// reached the array before a crash) stay on the array past where the replay
// stopped, with the LSNs that come next. The next opening writes its records
// from there, and one of them could end just where such a stale record
// begins, its last LSN just before that record's first. So each writable
// opening writes the superblock once (a new sequence number, the same
// checkpoint) and stamps its records with that number, its session; a replay
// takes a record only if its session is at least that of the record before.
//
// On disk (docs/on-disk-format.md, "Intent log"): the log's space is a list
// of extents, each a multiple of 4 KiB. The first 8 KiB of the first extent
// hold two copies of the log superblock (salt, the checkpoint: position and
// LSN of the oldest record still needed); the rest is a ring addressed by a
// 64-bit "virtual" position that only grows (physical place = virtual mod
// capacity, mapped over the extents). A record is whole sectors (512 bytes,
// or the LUNs' block if larger) and never spans two extents: one that does
// not fit in what is left of an extent starts at the next.
//
// Space: every entry reserves its worst case before it is appended
// (Reserve), so the writer never waits for space and an entry appended is
// always written; Reserve waits while the log is full, asks for a
// checkpoint, and fails with TimedOut after reserve_timeout_ms.
//
// Failures: a record write or superblock write that fails makes the log
// fail: every waiter and every later call gets that error (the domain then
// refuses changes until it is opened again).
//
// Thread-safety: every method may be called concurrently. Append order is
// LSN order; callers that need "applied in LSN order" hold their own lock
// around apply + Append.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/histogram.h"
#include "base/limits.h"
#include "base/mutex.h"
#include "base/status.h"
#include "block/block_device.h"
#include "fs/allocator.h"

namespace nasgw::fs {

constexpr uint64_t kLogBlockBytes = 4096;
// A record is whole sectors: this, or a LUN's block if that is larger (at
// most kLogBlockBytes). An 8 KiB logged write takes 8.5 KiB, not 12.
constexpr uint64_t kLogSectorBytes = 512;
constexpr uint64_t kLogSuperBytes = 2 * kLogBlockBytes;  // two superblock copies
constexpr size_t kLogRecordHeaderBytes = 64;
constexpr size_t kLogEntryHeaderBytes = 4;  // u32 length before each entry

// A second copy of the log's newest entries in another node's memory: the
// partner's mirror in a controller pair (cluster/mirror.h, brief decision
// 5). With one attached, an entry is acknowledged (WaitAcknowledged) once
// the mirror holds it, without waiting for its record on the array; the
// record is still written as before, so the array's log lags by the writes
// in flight and the mirror only ever holds that lag.
class LogMirror {
 public:
  virtual ~LogMirror() = default;
  // Every entry appended from the attach on, in LSN order, with the log's
  // lock held: copy and queue, never block or call back into the log.
  virtual void Mirror(uint64_t lsn, std::string_view entry) = 0;
  // Every entry up to `lsn` is on the array (so the copy may let go of
  // them). The same rules as Mirror.
  virtual void Durable(uint64_t lsn) = 0;
};

class IntentLog;
// How a mirror tells the log what it holds, from any thread. It holds no
// reference to the log: once the log detaches the mirror or closes, Acked
// does nothing.
class MirrorAcks {
 public:
  // The mirror holds every entry from its first up to `lsn`.
  void Acked(uint64_t lsn);

 private:
  friend class IntentLog;
  Mutex mu_;  // taken before the log's
  IntentLog* log_ GUARDED_BY(mu_) = nullptr;
  const LogMirror* mirror_ = nullptr;  // set before it is shared
};

// Entries another node held for this log (what its mirror received and the
// array may lack), to replay after the log's own records at Open. Taken only
// when they continue the log: the same salt, appended by the opening that
// wrote the last record replayed or a later one, and their LSNs dense from
// at most the first LSN the log lacks. Open writes them to the log (this
// opening's first records) before it replays them.
struct LogTail {
  uint64_t salt = 0;
  uint64_t session = 0;                                   // the opening that appended them (IntentLog::session)
  std::vector<std::pair<uint64_t, std::string>> entries;  // by LSN, dense
};

struct IntentLogOptions {
  // One record (one array write) holds at most this much.
  uint32_t max_record_bytes = 1u << 20;
  // Reserve asks for a checkpoint once the log is this full (per cent).
  uint32_t checkpoint_fill_pct = 50;
  // Reserve gives up with TimedOut after waiting this long for space.
  uint32_t reserve_timeout_ms = 30'000;
  // Called when the log wants a checkpoint (fill past checkpoint_fill_pct,
  // or a Reserve waiting). From any thread; must not block.
  std::function<void()> want_checkpoint;
  // Open without a writer: replay only (nasgw-fsck). Reserve/Append fail.
  bool read_only = false;
  // Record writes on their way at once (1..64).
  uint32_t max_writes_in_flight = limits::kLogWritesInFlight;
  // Replayed after the log's own entries (LogTail); null: none.
  std::shared_ptr<const LogTail> tail;
};

struct IntentLogStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // from the checkpoint to the head
  uint64_t reserved_bytes = 0;
  uint64_t appended_lsn = 0;    // last LSN handed out (0: none)
  uint64_t durable_lsn = 0;     // every entry up to it is on the array
  uint64_t checkpoint_lsn = 0;  // first LSN a replay would apply
  uint64_t records = 0;         // record writes since open
  uint64_t entries = 0;         // entries written since open
  uint64_t bytes_written = 0;   // record bytes written since open
  uint64_t checkpoints = 0;
  uint64_t reserve_waits = 0;    // Reserve calls that had to wait for space
  uint64_t recent_write_ns = 0;  // recent_write_ns() now
  bool mirror_attached = false;
  uint64_t mirrored_lsn = 0;    // the mirror holds every entry from its first to here
  uint64_t mirror_acks = 0;     // WaitAcknowledged calls the mirror answered before the array
  uint64_t tail_replayed = 0;   // entries Open took from a LogTail
  HistogramData write_ns;       // latency of one record write
  HistogramData group_entries;  // entries per record
};

class IntentLog {
 public:
  using DeviceFn = std::function<std::shared_ptr<block::BlockDevice>(uint32_t lun)>;
  // Called for each replayed entry, in LSN order; an error stops Open.
  using ReplayFn = std::function<Status(uint64_t lsn, std::string_view entry)>;

  // Smallest log: the superblocks and room for a few records.
  static constexpr uint64_t kMinBytes = kLogSuperBytes + (4ull << 20);

  // Writes an empty log over `extents` (each a multiple of 4 KiB, the first
  // larger than the superblocks). `salt` tells this log's blocks from any
  // other's: pick it at random; it is kept by the caller with the extents.
  static Status Format(const DeviceFn& devices, const std::vector<Extent>& extents, uint64_t salt);

  // Reads the superblock, replays every entry after the checkpoint, and
  // returns the log ready to append after the last valid record. Corruption
  // if no superblock copy verifies or the superblock disagrees with
  // `extents`.
  static Result<std::unique_ptr<IntentLog>> Open(const DeviceFn& devices, const std::vector<Extent>& extents,
                                                 uint64_t salt, const ReplayFn& replay,
                                                 const IntentLogOptions& options = {});
  ~IntentLog();  // writes what was appended, then stops the writer
  IntentLog(const IntentLog&) = delete;
  IntentLog& operator=(const IntentLog&) = delete;

  // The largest entry Append takes (a record holding only it).
  size_t max_entry_bytes() const;
  // The space an entry of `bytes` reserves: its worst case, a record of its
  // own, in whole 4 KiB blocks (the largest sector a LUN may have).
  static uint64_t Cost(size_t bytes);

  // Reserves log space for an entry of `bytes`; waits while the log is full.
  // InvalidArgument past max_entry_bytes(); TimedOut; the log's failure.
  // The last kUrgentBytes of the usable space are only for an `urgent`
  // entry: the transaction group's, which empties the log (were it to wait
  // for space like the changes filling it, neither would ever go on).
  Status Reserve(size_t bytes, bool urgent = false);
  static constexpr uint64_t kUrgentBytes = 64ull << 10;
  void Unreserve(size_t bytes);
  // Appends an entry whose space was reserved (with its own size), and
  // returns its LSN. Never fails: a log that has failed reports it to
  // WaitDurable.
  uint64_t Append(std::string entry);
  // Waits until the entry with `lsn` is on the array (ok) or the log failed.
  Status WaitDurable(uint64_t lsn);
  // Waits until the entry with `lsn` is on the array or held by an attached
  // mirror whose first entry directly follows entries all on the array (so
  // the array's log and the mirror together hold every entry up to `lsn`);
  // or the log failed. What an operation's answer waits for.
  Status WaitAcknowledged(uint64_t lsn);
  // From the next LSN on, entries also go to `m` (replacing any mirror
  // attached); `m` says what it holds through the returned MirrorAcks.
  // *first: the first LSN `m` gets.
  std::shared_ptr<MirrorAcks> AttachMirror(std::shared_ptr<LogMirror> m, uint64_t* first);
  // `m` no longer acknowledges anything (nothing if another is attached).
  void DetachMirror(const LogMirror* m);
  // This opening's session, stamped on its records (0: read-only).
  uint64_t session() const { return session_; }
  uint64_t salt() const { return salt_; }
  // Every entry up to `lsn` is durable elsewhere: the records holding only
  // such entries are no longer needed. Writes the superblock (FUA), then
  // frees their space.
  Status Checkpoint(uint64_t lsn);

  uint64_t appended_lsn() const;
  uint64_t durable_lsn() const;
  // How long record writes take lately: a moving average over about the
  // last four (0 before the first).
  uint64_t recent_write_ns() const { return recent_write_ns_.load(std::memory_order_relaxed); }
  // How long an answer takes lately: with a mirror attached that answers,
  // the lesser of its acknowledgements' moving average (append to ack) and
  // recent_write_ns(); otherwise recent_write_ns().
  uint64_t recent_answer_ns() const;
  // A partner's mirror answers for new entries now (attached, and the
  // array's log has reached the stream's first entry).
  bool mirror_answers() const EXCLUDES(mu_);
  // Percentage of the space entries can use (the capacity less the slack
  // kept for records that skip to the next extent) in use or reserved, with
  // `extra` more bytes.
  uint32_t fill_pct(uint64_t extra = 0) const;
  // Ok, or why the log failed.
  Status health() const;
  // Entries Open replayed.
  uint64_t replayed() const { return replayed_; }
  IntentLogStats Stats() const;

 private:
  struct Pending {
    uint64_t lsn;
    std::string entry;
  };
  struct Written {  // a record between the checkpoint and the head
    uint64_t vpos;
    uint64_t first_lsn;
    uint64_t last_lsn;  // first_lsn - 1 for a record of no entries (never written)
    uint64_t bytes;
  };
  struct Flight {  // a record on its way to the array
    uint64_t vpos;
    uint64_t first_lsn;
    uint64_t last_lsn;
    uint64_t bytes;
    uint64_t start_ns;
    std::vector<uint8_t> rec;
    bool done = false;
  };
  struct Place {
    uint32_t extent;
    uint64_t offset;  // within the extent
    uint64_t room;    // bytes from there to the extent's end
  };
  IntentLog(DeviceFn devices, std::vector<Extent> extents, uint64_t salt, IntentLogOptions options);

  Place Locate(uint64_t vpos) const;
  // The virtual position where a record of `bytes` written at or after
  // `vpos` starts (the next extent's start if it does not fit).
  uint64_t Fit(uint64_t vpos, uint64_t bytes) const;
  Status ReadAt(uint64_t vpos, uint8_t* data, size_t n);
  Status WriteSuper(uint64_t seq, uint64_t tail_vpos, uint64_t tail_lsn);
  // Reads and verifies the record at vpos expecting `lsn`; its entries.
  // A record of a session before session_min does not verify; `session`
  // is the record's.
  bool ReadRecord(uint64_t vpos, uint64_t lsn, uint64_t session_min, uint64_t* bytes, std::vector<std::string>* entries,
                  uint64_t* session);
  void WriterLoop();
  // A record write ended (on the device's thread): entries become durable
  // up to the last record with every record before it written.
  void RecordWritten(Flight* f, const Status& s);
  void Fail(const Status& s) REQUIRES(mu_);
  uint64_t UsedLocked() const REQUIRES(mu_);

  const DeviceFn devices_;
  const std::vector<Extent> extents_;
  const uint64_t salt_;
  const IntentLogOptions options_;
  uint64_t capacity_ = 0;            // ring bytes (extents less the superblocks)
  uint64_t slack_ = 0;               // kept free for records skipping to the next extent
  uint64_t max_record_ = 0;          // options_.max_record_bytes, at most the smallest extent
  uint64_t unit_ = kLogSectorBytes;  // records are multiples of it: the largest block of the log's LUNs
  std::vector<uint64_t> starts_;     // virtual start (mod capacity) of each extent's ring part
  uint64_t replayed_ = 0;

  Mutex checkpoint_mu_ ACQUIRED_BEFORE(mu_);  // one Checkpoint at a time
  uint64_t super_seq_ GUARDED_BY(checkpoint_mu_) = 0;

  mutable Mutex mu_;
  CondVar work_cv_;     // the writer: entries appended, or stop
  CondVar durable_cv_;  // WaitDurable
  CondVar space_cv_;    // Reserve
  std::deque<Pending> pending_ GUARDED_BY(mu_);
  std::deque<Written> written_ GUARDED_BY(mu_);
  uint64_t next_lsn_ GUARDED_BY(mu_) = 1;
  uint64_t durable_lsn_ GUARDED_BY(mu_) = 0;
  uint64_t tail_vpos_ GUARDED_BY(mu_) = 0;
  uint64_t tail_lsn_ GUARDED_BY(mu_) = 1;
  uint64_t head_vpos_ GUARDED_BY(mu_) = 0;  // where the next record goes (before Fit)
  uint64_t reserved_ GUARDED_BY(mu_) = 0;
  std::deque<std::unique_ptr<Flight>> flight_ GUARDED_BY(mu_);  // oldest first
  uint64_t session_ = 0;  // this opening's, stamped on its records (set before the writer starts)
  friend class MirrorAcks;
  // `m` holds every entry from its first up to `lsn`.
  void MirrorAcked(const LogMirror* m, uint64_t lsn);
  // Cuts the MirrorAcks of a mirror let go from the log (outside mu_).
  static void Orphan(const std::shared_ptr<MirrorAcks>& acks);
  std::shared_ptr<LogMirror> mirror_ GUARDED_BY(mu_);
  std::shared_ptr<MirrorAcks> mirror_sink_ GUARDED_BY(mu_);
  uint64_t mirror_first_ GUARDED_BY(mu_) = 0;  // the first LSN mirror_ got
  uint64_t mirrored_lsn_ GUARDED_BY(mu_) = 0;  // mirror_ holds mirror_first_..this
  uint64_t mirror_acks_ GUARDED_BY(mu_) = 0;
  // Mirrored entries not yet acknowledged, with when they were appended
  // (at most kMirrorTimedMax: the oldest go first).
  std::deque<std::pair<uint64_t, uint64_t>> mirror_sent_ GUARDED_BY(mu_);
  static constexpr size_t kMirrorTimedMax = 1u << 16;
  uint64_t recent_mirror_ns_ GUARDED_BY(mu_) = 0;
  uint64_t tail_replayed_ = 0;
  // The session of the mirror's copy this opening adopts, in its
  // superblocks (0: none). Set before the writer starts.
  uint64_t adopts_ = 0;
  uint64_t adopts_end_ = 0;  // the last LSN of the run it adopts
  // Which entries of a LogTail the log lacks: [from, end), the dense run
  // from the first at or past `next` (LSN). nullptr when they may be taken
  // (this log's salt, a session at least `last_session`, continuing the
  // log at `next`), else why not.
  struct TailRun {
    size_t from = 0, end = 0;
  };
  const char* CheckTail(const LogTail& tail, uint64_t next, uint64_t last_session, TailRun* run) const;
  // Appends a LogTail's entries that continue the log at `next` (LSN) and
  // whose session is at least `last_session`, waits for them on the array,
  // then replays them.
  Status TakeTail(const LogTail& tail, uint64_t next, uint64_t last_session, const ReplayFn& replay);
  // An entry is acknowledged (WaitAcknowledged).
  bool AcknowledgedLocked(uint64_t lsn) const REQUIRES(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  Status failed_ GUARDED_BY(mu_);
  bool asked_checkpoint_ GUARDED_BY(mu_) = false;
  // Statistics.
  uint64_t records_ GUARDED_BY(mu_) = 0;
  uint64_t entries_ GUARDED_BY(mu_) = 0;
  uint64_t bytes_written_ GUARDED_BY(mu_) = 0;
  uint64_t checkpoints_ GUARDED_BY(mu_) = 0;
  uint64_t reserve_waits_ GUARDED_BY(mu_) = 0;
  Histogram write_ns_;
  Histogram group_entries_;
  std::atomic<uint64_t> recent_write_ns_{0};  // updated under mu_

  std::thread writer_;
};

}  // namespace nasgw::fs
