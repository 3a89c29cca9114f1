// Domain::Impl (internal to fs/): a domain's state and the one path by which
// every change reaches the metadata store. The modules of the domain's API
// (fs/volumes.cc, fs/namespace.cc, fs/data.cc, fs/exports.cc, fs/check.cc,
// fs/domain.cc) read through the Load* helpers and change through a Txn and
// Commit; nothing else writes to the store.
//
// A change builds a Txn (a metadata batch, the extents it allocated and the
// extents it replaced) under `mu`, held exclusively; Commit applies the batch
// to the store's memtable and appends it to the intent log (fs/intent_log.h),
// both under `mu` so that the log's order is the store's. The caller then
// lets `mu` go and waits in Durable for the log record that holds its batch
// (group commit: many changes share one array write); only then are the
// replaced extents freed. A change that fails before Commit abandons its Txn
// (its new extents go back); one whose Durable fails keeps them allocated
// (the log has failed; the domain refuses changes until it is reopened).
//
// Transaction groups: the store is written back by flushing its memtable
// (SyncTxg, from the txg thread every txg_interval_ms or when the log asks),
// after which the log's checkpoint moves past what the flush holds. A flush
// RocksDB starts itself waits first until the log holds everything in it
// (BeforeFlush), so the store on the LUNs is always a state the log can
// replay forward from. A batch too large for one log record is applied and
// flushed at once, with a barrier key ("L": every entry up to it is in the
// store), which replay honours.
//
// Locking: `mu` is shared by readers and held alone by changes; Commit and
// what feeds it REQUIRES(mu) held exclusively. sync_mu (one SyncTxg at a
// time) is taken before mu, txg_mu after everything.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "fs/allocator.h"
#include "fs/domain.h"
#include "fs/handle.h"
#include "fs/intent_log.h"
#include "fs/keys.h"
#include "fs/meta_store.h"
#include "fs/metafs.h"
#include "fs/read_fence.h"
#include "fs/reserve.h"

namespace nasgw::fs {

constexpr uint64_t kDataBlock = kDataBlockBytes;  // data extents are whole blocks
// The transaction group a read of the live volume sees: every one.
constexpr uint64_t kLive = UINT64_MAX;

// InvalidArgument unless `name` can be a directory entry (or a volume's name).
Status CheckName(const std::string& name);

// Intent log entry types: the first byte of an entry (docs/on-disk-format.md,
// "Intent log").
constexpr char kLogEntryMeta = 'M';  // a metadata batch (MetaBatch::Data)
// A metadata batch that also puts every logged write of one file up to an
// LSN in the file's extent maps (a flush of the write-back cache).
constexpr char kLogEntryCover = 'C';
constexpr char kLogEntryData = 'D';  // a stable write's bytes (LogData)
constexpr uint8_t kLogEntryVersion = 1;

// A file with logged writes: volume, inode, generation.
struct LoggedFile {
  uint32_t vol = 0;
  uint64_t ino = 0;
  uint64_t gen = 0;
  bool operator==(const LoggedFile&) const = default;
  bool operator<(const LoggedFile& o) const { return std::tie(vol, ino, gen) < std::tie(o.vol, o.ino, o.gen); }
};

// Logged writes a replay found and no cover named (yet): per file, by LSN.
using HeldWrites = std::map<LoggedFile, std::map<uint64_t, std::string>>;

// A logged write as the log holds it (entry type 'D').
struct LoggedWrite {
  LoggedFile f;
  uint64_t off = 0;
  Timespec mtime;
  std::string_view data;  // into the entry
};
std::string EncodeLoggedWrite(const LoggedFile& f, uint64_t off, const Timespec& mtime, const void* data, size_t n);
Result<LoggedWrite> DecodeLoggedWrite(std::string_view entry);
constexpr size_t kLoggedWriteHeaderBytes = 2 + 4 + 8 + 8 + 8 + 8 + 4;
// The header of a cover entry (the batch follows it).
std::string EncodeCover(const LoggedFile& f, uint64_t through);
Status DecodeCover(std::string_view entry, LoggedFile* f, uint64_t* through, std::string_view* batch);
constexpr size_t kCoverHeaderBytes = 2 + 4 + 8 + 8 + 8;

struct Domain::Impl {
  ~Impl();
  std::shared_ptr<Reserve> reserve;
  uint32_t id = 0;
  std::unique_ptr<MetaFs> metafs;
  std::unique_ptr<MetaStore> store;
  std::unique_ptr<Allocator> space;  // data allocation groups
  bool unmap_freed = true;
  // One transaction group sync at a time; before mu.
  Mutex sync_mu ACQUIRED_BEFORE(mu);
  // A write or truncation of a file holds the file's lock (one of these, by
  // hash) from before it reads the file's extent maps until it has
  // committed, so the maps it planned from are still the file's when it
  // applies its change although it let `mu` go while the data moved. Taken
  // before mu; one at a time.
  static constexpr size_t kFileLocks = 64;
  Mutex file_locks[kFileLocks];
  Mutex& FileLock(uint32_t vol, uint64_t ino) {
    return file_locks[((ino ^ (uint64_t{vol} << 40)) * 0x9E3779B97F4A7C15ull) >> 58];
  }
  // Readers (lookups, attributes, reads) share it; changes hold it alone.
  // No data moves under it: reads and writes do their device I/O without it
  // (writes under their file lock; reads inside the fence).
  mutable SharedMutex mu;
  // Replaced extents are freed when the reads that may still read them are
  // done (fs/read_fence.h).
  ReadFence fence{[this](const std::vector<Extent>& e) { FreeNow(e); }};
  void FreeNow(const std::vector<Extent>& extents);
  // Space a change freed while its log entry was held only by the partner's
  // mirror (IntentLog::WaitAcknowledged): retired once the entry is on the
  // array too, so that no write reuses the space while a replay of the
  // array's log alone would still name it.
  Mutex unlogged_free_mu;  // a leaf
  std::deque<std::pair<uint64_t, std::vector<Extent>>> unlogged_free GUARDED_BY(unlogged_free_mu);
  void RetireLogged();  // those whose entries are on the array now
  keys::DomainRec rec GUARDED_BY(mu);
  HandleKey handle_key;  // set at open, immutable after
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> open_count GUARDED_BY(mu);

  // Each volume's file count as committed, so that Statfs answers from
  // memory (no scan that could fail).
  std::map<uint32_t, uint64_t> vol_files GUARDED_BY(mu);
  // Volumes in strict mode (keys::VolumeRec::write_through), for the
  // write-back cache's every write; a leaf lock. Volume ids are never
  // reused, so a deleted volume's entry is harmless.
  mutable Mutex strict_mu;
  std::set<uint32_t> strict_vols GUARDED_BY(strict_mu);
  // Volumes whose atime policy is not relatime (keys::VolumeRec::atime),
  // for every read; under strict_mu too.
  std::map<uint32_t, Atime> vol_atime GUARDED_BY(strict_mu);

  // ---- the intent log and transaction groups (fs/domain_impl.cc)
  std::unique_ptr<IntentLog> log;  // null when opened read-only
  // The log BeforeFlush waits for: set once replay is done.
  std::atomic<IntentLog*> log_ready{nullptr};
  uint64_t unreplayed = 0;  // read-only open: entries found, not applied
  uint32_t txg_interval_ms = 5000;
  Mutex txg_mu;
  CondVar txg_cv;
  bool txg_wanted GUARDED_BY(txg_mu) = false;
  bool txg_stop GUARDED_BY(txg_mu) = false;
  std::thread txg_thread;

  // The store's before_flush: waits until the log holds everything applied.
  Status BeforeFlush();
  // Ends the open transaction group (see above).
  // `settle`: the group's own numbering entry is flushed too, so the log
  // holds nothing past the checkpoint (an orderly close, Domain::SyncTxg).
  Status SyncTxg(bool settle = false) EXCLUDES(mu);
  // Asks the txg thread for a sync soon (the log's want_checkpoint).
  void WantTxg();
  void StartTxgThread();
  void StopTxgThread();
  // Applies a replayed log entry to the store; a logged write goes to
  // `held` (applied once the domain is open, unless a later cover entry of
  // its file names it) whatever the barrier, as a cover does.
  Status ReplayEntry(uint64_t lsn, std::string_view entry, uint64_t barrier, HeldWrites* held);
  // Writes the logged writes replay left in `held` to their files, in LSN order.
  Status ApplyHeld(HeldWrites& held) EXCLUDES(mu);

  // ---- logged writes (fs/domain_impl.cc): a stable write's bytes in the
  // intent log pin the log (the checkpoint stays before them) until the
  // file's extent maps hold them (a WriteV with logged_through at or past
  // them commits) or the file is gone.
  Mutex pin_mu;                                            // a leaf
  std::map<uint64_t, LoggedFile> pins GUARDED_BY(pin_mu);  // lsn -> file
  std::map<LoggedFile, std::set<uint64_t>> pins_by_file GUARDED_BY(pin_mu);
  void Pin(uint64_t lsn, const LoggedFile& f) REQUIRES(pin_mu);
  // Unpins the file's logged writes up to `through`.
  void Unpin(const LoggedFile& f, uint64_t through) EXCLUDES(pin_mu);
  // Unpins every file of a volume (deleted).
  void UnpinVolume(uint32_t vol) EXCLUDES(pin_mu);
  // The highest LSN a checkpoint may move to now: `lsn`, or just before the
  // oldest pinned write.
  uint64_t CheckpointLimit(uint64_t lsn) EXCLUDES(pin_mu);

  // ---- the commit path (fs/domain_impl.cc)

  // One change: a metadata batch plus the extents to free once it is durable.
  struct Txn {
    MetaBatch batch;
    std::vector<Extent> to_free;                            // replaced: free once the batch is durable
    std::vector<Extent> allocated;                          // new: free if the change is abandoned
    std::map<uint32_t, std::optional<uint64_t>> vol_files;  // volume records written (nullopt: deleted)
    uint64_t lsn = 0;                                       // its log entry, set by Commit (0: made durable by a flush)
    // A flush of logged writes: the file's writes up to `through` are in
    // the maps this batch commits (0: none).
    LoggedFile covers;
    uint64_t through = 0;
    std::vector<LoggedFile> dropped;  // files removed: their logged writes go
    // Deletes, a flush of writes already accepted, a transaction group:
    // never refused for metadata room (MetaRoom); each is bounded by what was
    // accepted before it.
    bool essential = false;
    bool txg = false;  // a transaction group's: may use the log's urgent space
    // A snapshot's: the batch is the last of the open group, and the next
    // group begins with it (persisted in the same batch).
    bool ends_group = false;
    // A rollback's: the values of versioned keys carry their births already
    // (versions put back), and nothing it replaces is kept for a snapshot.
    bool raw_values = false;
    // Extents the change replaces, with their births: freed once the batch
    // is durable, unless a snapshot still sees them (then Version keeps them
    // on its dead list).
    struct Killed {
      uint32_t vol = 0;
      Extent ext;
      uint64_t birth = 0;
    };
    std::vector<Killed> killed;
    // Data and metadata bytes the dead lists gain (or lose) per volume.
    std::map<uint32_t, int64_t> pinned_data, pinned_meta;
    // Frees `allocated`: nothing names these extents yet.
    void Abandon(Allocator& a);
    void Kill(uint32_t vol, const Extent& e, uint64_t birth) { killed.push_back({vol, e, birth}); }
    // A record's space, freed once the batch is durable.
    void Free(uint32_t vol, const keys::RecordMap& m) {
      for (const keys::RecordPiece& p : m.pieces) Kill(vol, p.ext, p.birth);
    }
  };

  void PutVolume(Txn& t, uint32_t vol, const keys::VolumeRec& v) {
    t.batch.Put(keys::VolKey(vol), keys::EncodeVolume(v));
    t.vol_files[vol] = v.files;
  }
  void PutInode(Txn& t, uint32_t vol, const keys::Inode& in) {
    t.batch.Put(keys::InodeKey(vol, in.a.ino), keys::EncodeInode(in));
  }
  // ctime (and mtime for a content change) to now; the change counter bumps.
  static void Touch(keys::Inode& in, bool content) {
    Timespec now = Now();
    in.a.ctime = now;
    if (content) in.a.mtime = now;
    in.a.change++;
  }

  // Applies `t` and appends it to the log; the caller then releases mu and
  // calls Durable. Fails (changing nothing, and giving the extents `t`
  // allocated back) when the log is full past its timeout or has failed.
  Status Commit(Txn& t) REQUIRES(mu);
  // Waits until `t` is on the array, then frees (and unmaps) what it
  // replaced. Call without mu.
  Status Durable(Txn& t) EXCLUDES(mu);
  // Best effort: a failed UNMAP only means the array keeps the space.
  void Unmap(const Extent& e);

  // The last name of `in` is gone: drop it now, or keep it as an orphan
  // until its last release if it is open.
  Status LastLinkGone(Txn& t, uint32_t vol, keys::Inode& in, keys::VolumeRec& v) REQUIRES(mu);
  // Drops an inode with no names left: its record, xattrs and data. Fails,
  // adding nothing the caller must commit, if it cannot see them all (a
  // partial drop would leave unreachable xattrs or leak extents).
  Status DropInode(Txn& t, uint32_t vol, const keys::Inode& in, keys::VolumeRec& v);

  // Reserves data space (NoSpace, "volume full", when there is none).
  Status data_reserve(uint64_t bytes);
  // NoSpace when a change that adds metadata (not `essential`) finds less
  // than meta_floor free in the metadata groups: the headroom left for the
  // store's flushes and compactions, the MetaFs log and the essential
  // changes. Checked from the end of Open on (replay is never refused).
  Status MetaRoom(bool essential) const;
  uint64_t meta_floor = 0;
  std::atomic<bool> meta_room_checks{false};

  // ---- snapshots (fs/snapshots.cc, docs/snapshots.md)
  struct Snap {
    uint64_t txg = 0;
    bool deleting = false;
  };
  // Per volume, its snapshots by id (those being deleted too).
  std::map<uint32_t, std::map<uint32_t, Snap>> snaps GUARDED_BY(mu);
  // Per volume, the data and metadata bytes its dead lists pin.
  std::map<uint32_t, uint64_t> snap_data_bytes GUARDED_BY(mu), snap_meta_bytes GUARDED_BY(mu);
  // Values carry births (keys::BirthsDoneKey): set at open, fixed after.
  bool births = false;
  // One snapshot deletion at a time; before mu.
  Mutex snap_delete_mu ACQUIRED_BEFORE(mu);
  // The newest snapshot of `vol` not being deleted: what a kill keeps
  // versions for (nullopt: none).
  std::optional<uint64_t> NewestSnap(uint32_t vol) const REQUIRES_SHARED(mu);
  // The group a read at snapshot `snap` of `vol` sees (kLive for 0); Stale
  // for a snapshot that is gone or being deleted.
  Result<uint64_t> ReadAt(uint32_t vol, uint32_t snap) REQUIRES_SHARED(mu);
  // In Commit: keeps what `t` kills that a snapshot still sees (history
  // keys and dead entries, in the same batch), frees the rest once
  // durable, and gives the batch's new values their birth.
  Status Version(Txn& t) REQUIRES(mu);
  // Gives back what only snapshot `snap` of `vol` (marked deleting) holds, in
  // transactions of at most kReleaseBatch entries, then drops its record.
  // Returns the data and metadata bytes freed.
  static constexpr size_t kReleaseBatch = 1024;
  Result<std::pair<uint64_t, uint64_t>> ReleaseSnapshot(uint32_t vol, uint32_t snap) REQUIRES(snap_delete_mu)
      EXCLUDES(mu);
  // Undoes every change to `vol` after group S, its newest snapshot's, in
  // one transaction (Domain::RollbackSnapshot); `t` is committed by the
  // caller. Orphans it restores that nobody has open go to `orphans`.
  Status Rollback(Txn& t, uint32_t vol, uint64_t S, RollbackInfo* info, std::vector<uint64_t>* orphans) REQUIRES(mu);
  // Rollbacks of each volume so far: a write that planned its change before
  // one must plan again (WritePieces).
  std::map<uint32_t, uint64_t> rollbacks GUARDED_BY(mu);
  // Clones by volume: their origin volume, snapshot id and its group.
  struct Origin {
    uint32_t vol = 0, snap = 0;
    uint64_t txg = 0;
  };
  std::map<uint32_t, Origin> clones GUARDED_BY(mu);
  // A data piece of `vol` born in `birth` that belongs to a clone's origin
  // snapshot: never freed or kept by this volume.
  bool Borrowed(uint32_t vol, uint64_t birth) const REQUIRES_SHARED(mu) {
    auto it = clones.find(vol);
    return it != clones.end() && birth <= it->second.txg;
  }
  // At open, from the volume records: each volume's file count (Statfs),
  // strict mode, atime policy and, for a clone, its origin.
  Status LoadVolumes() REQUIRES(mu);
  // Before replay: which logged batches were written before the births
  // upgrade (LSN up to old_format_through) and which of their keys the
  // upgrade has done (`upgraded`; null: none).
  Status LoadUpgradeState();
  uint64_t old_format_through = 0;
  std::function<bool(std::string_view)> upgraded;
  // At open: values get births (a domain made before snapshots), the
  // snapshots and their dead lists are loaded (dead extents marked used).
  Status UpgradeBirths(bool read_only) EXCLUDES(mu);
  Status LoadSnapshots() REQUIRES(mu);
  // The value of `key` at group `at` (kLive: the live value).
  // (Neither touches state `mu` guards; callers hold it so that the store
  // is one state throughout.)
  Result<std::string> GetAt(std::string_view key, uint64_t at);
  // The keys in [begin, end) (live keys of one tag and volume) as they were
  // at group `at`, in order, at most `max`, until fn returns false.
  Status ScanAt(std::string_view begin, std::string_view end, uint64_t at, size_t max,
                const std::function<bool(std::string_view, std::string_view)>& fn);

  // ---- reads (fs/domain_impl.cc): NotFound names what is missing; any
  // other error is returned as is. `at`: the group to read at (kLive, or a
  // snapshot's, from ReadAt).
  Result<keys::VolumeRec> LoadVolume(uint32_t vol, uint64_t at = kLive);
  Result<keys::Inode> LoadInode(uint32_t vol, uint64_t ino, uint64_t at = kLive);
  // NotDir for another type, NotFound for a removed one (still open).
  Result<keys::Inode> LoadDir(uint32_t vol, uint64_t dir, uint64_t at = kLive);
  Result<keys::Dirent> LoadDirent(uint32_t vol, uint64_t dir, const std::string& name, uint64_t at = kLive);
  // True if `key` exists; an error other than NotFound is returned as is
  // (a key that could not be read is neither there nor absent).
  Result<bool> Has(std::string_view key);
  // Exists if `name` is in the directory, ok if it is not, else why it
  // could not be told.
  Status CheckNameFree(uint32_t vol, uint64_t dir, const std::string& name);
  // A failed scan is an error, never "empty": rmdir must not remove a
  // directory whose entries it could not see.
  Result<bool> DirEmpty(uint32_t vol, uint64_t dir);
  // Extent maps of records [from, to] (inclusive) of a file. A scan that
  // fails or a map that does not decode is an error, never a hole.
  Result<std::map<uint64_t, keys::RecordMap>> LoadRecords(uint32_t vol, uint64_t ino, uint64_t from = 0,
                                                          uint64_t to = UINT64_MAX, uint64_t at = kLive);
  // The same, one record at a time, in order, until `fn` returns false.
  Status ScanRecords(uint32_t vol, uint64_t ino, uint64_t from, uint64_t to,
                     const std::function<bool(uint64_t, keys::RecordMap&)>& fn, uint64_t at = kLive);
  // The id of the volume called `name`: NotFound, or why it could not be read.
  Result<uint32_t> VolumeId(const std::string& name) REQUIRES_SHARED(mu);

  // ---- data (fs/data.cc)

  // Reads [from, to) of a record (bytes from its start, block aligned) into
  // `out`: its pieces' bytes, zeros where no piece is. The reads are
  // submitted to `io`; `out` is filled once it is waited for.
  void ReadRecord(block::IoBatch& io, const keys::RecordMap& m, uint64_t from, uint64_t to, uint8_t* out);
  // Writes `data` over the extents, in order, with FUA (submitted to `io`).
  void WriteExtents(block::IoBatch& io, const std::vector<Extent>& extents, const uint8_t* data);
  // A run of blocks a write touches in record r (block aligned, from the
  // record's start), and the fresh extents it goes to.
  struct Span {
    uint64_t r = 0, from = 0, to = 0;
    std::vector<Extent> got;
  };
  // Puts the fresh extents `got` (whole blocks, already written) in map `m`
  // at `at`: the parts of older pieces they replace go to t.to_free. Counts
  // blocks and bytes.
  void PlaceBlocks(Txn& t, uint32_t vol, keys::Inode& in, keys::VolumeRec& v, keys::RecordMap& m, uint64_t at,
                   const std::vector<Extent>& got) REQUIRES(mu);
  // One file's change: its lock and the domain's taken, its inode and
  // volume loaded, `change` applied, then both put, committed and durable;
  // an error from `change` gives back what it allocated and changes
  // nothing. SETATTR and FALLOCATE.
  Result<Attr> ChangeFile(uint32_t vol, uint64_t ino,
                          const std::function<Status(Txn&, keys::Inode&, keys::VolumeRec&)>& change) EXCLUDES(mu);
  // Frees what m's pieces hold of [lo, hi) (bytes from the record's start),
  // once the batch is durable; the parts of pieces outside it stay.
  void FreeRange(Txn& t, uint32_t vol, keys::Inode& in, keys::VolumeRec& v, keys::RecordMap& m, uint64_t lo,
                 uint64_t hi) REQUIRES(mu);
  // Makes [from, to) of record r (map m; bytes from the record's start,
  // from < to <= the record size) read as zeros: the blocks it covers are
  // freed, and a block it covers in part is rewritten with zeros there.
  // Puts the record's map (or its deletion) in the batch. Truncation (the
  // end to the record's end) and punching holes.
  Status ZeroRecord(Txn& t, uint32_t vol, keys::Inode& in, keys::VolumeRec& v, uint64_t r, keys::RecordMap m,
                    uint64_t from, uint64_t to) REQUIRES(mu);
  // Writes several pieces (sorted by offset, not overlapping) into a file:
  // only the blocks they touch are written, each once, the bytes of a block
  // a piece covers in part kept from before. Three steps: under mu shared,
  // load the maps and allocate; with no lock but the file's, read the
  // partial blocks and write the data; under mu, commit the maps. NoSpace
  // comes before anything is written and changes nothing.
  // Domain::Write (gen 0: any generation; mtime null: now) and WriteV.
  // `held`: space reserved by the caller, used first (see Domain::WriteV).
  // `logged_through`: see Domain::WriteV.
  Result<Attr> WritePieces(uint32_t vol, uint64_t ino, uint64_t gen, const std::vector<WritePiece>& pieces,
                           const Timespec* mtime, uint64_t* held, uint64_t changes, uint64_t logged_through = 0)
      EXCLUDES(mu);
  // The spans the pieces touch, with the maps of their records (one scan
  // per run of consecutive records).
  Status PlanSpans(uint32_t vol, uint64_t ino, uint64_t rs, const std::vector<WritePiece>& pieces,
                   std::map<uint64_t, keys::RecordMap>* maps, std::vector<Span>* spans) REQUIRES_SHARED(mu);
  // Builds each span's blocks (new bytes over the old ones of blocks covered
  // in part, zeros past `old_size`) and writes them to its extents.
  Status FillSpans(const std::map<uint64_t, keys::RecordMap>& maps, uint64_t rs, uint64_t old_size,
                   const std::vector<WritePiece>& pieces, const std::vector<Span>& spans);

  // ---- exports (fs/exports.cc): mu held (shared for reads, exclusively
  // for changes).
  Result<keys::ExportRec> LoadExport(uint32_t export_id) REQUIRES_SHARED(mu);
  // The export with its volume's name.
  Result<Export> Named(const keys::ExportRec& r) REQUIRES_SHARED(mu);
  Result<uint32_t> NextExportId() REQUIRES_SHARED(mu);
  // NoSpace once the domain's volume ids (FirstVolumeId..LastVolumeId) are
  // all used: ids are never reused.
  Status VolumeIdLeft() const REQUIRES_SHARED(mu) {
    if (rec.next_volume <= LastVolumeId(id)) return Status();
    return Status::NoSpace("every volume id of domain " + std::to_string(id) + " has been used; ids are never reused");
  }
  // Every export record, by id; fn returns false to stop.
  Status ScanExports(const std::function<bool(Result<keys::ExportRec>)>& fn) REQUIRES_SHARED(mu);
  // NotFound unless `path` (normalised) is a directory of volume `vol`.
  Status CheckExportDir(uint32_t vol, const std::string& volume, const std::string& path) REQUIRES_SHARED(mu);

  // Rebuilds the case-insensitive index of a domain made before Unicode
  // folding ('F' keys, ASCII) as the 'G' index, then writes FoldDoneKey
  // (fs/keys.h), in transactions of at most kFoldUpgradeBatch keys. Done
  // once, by the owner's open; one that stopped half way is done again
  // (its puts and deletes repeat harmlessly). Returns the entries indexed.
  Result<uint64_t> UpgradeFoldIndex() EXCLUDES(mu);

  // ---- shares (fs/shares.cc), as exports.
  // Every share record, by key; fn returns false to stop.
  Status ScanShares(const std::function<bool(Result<keys::ShareRec>)>& fn) REQUIRES_SHARED(mu);
  // The share with its volume's name.
  Result<Share> NamedShare(const keys::ShareRec& r) REQUIRES_SHARED(mu);
};

}  // namespace nasgw::fs
