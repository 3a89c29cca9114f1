// Every limit in nasgw, in one place. Unit last in the name; each says why.
// Runtime options are validated against the *_min/_max bounds here, so a
// config can never ask for something the code was not built to carry.
#pragma once

#include <cstdint>

namespace nasgw::limits {

// ---- block/ ----------------------------------------------------------------

// Commands in flight to one LUN over all its paths. The default matches what
// tgtd and most arrays accept per session without TASK SET FULL; the max keeps
// the per-device request table small and bounded.
constexpr uint32_t kQueueDepthDefault = 64;
constexpr uint32_t kQueueDepthMax = 512;

// Requests admitted but not yet on the wire, per LUN. Past this a submitter
// blocks (backpressure) rather than the queue growing without bound.
constexpr uint32_t kSubmitQueueMax = 4096;

// Bulk I/O (file data) per LUN is held to a window of the LUN's delivery
// rate times this target (block/bulk_window.h): about how long a metadata or
// intent-log command queues behind data. 0 turns the window off.
constexpr uint32_t kBulkTargetMsDefault = 25;
constexpr uint32_t kBulkTargetMsMax = 10'000;
constexpr uint64_t kBulkWindowMinBytes = 256 << 10;
constexpr uint64_t kBulkWindowMaxBytes = uint64_t{256} << 20;

// Largest single read or write. 8 MiB covers a 1 MiB record times a stripe,
// and bounds the memory one request can pin.
constexpr uint64_t kIoBytesMax = 8ull << 20;

// Most buffers in one vectored request (Linux's IOV_MAX is 1024; 256 covers a
// 1 MiB record in 4 KiB pages).
constexpr uint32_t kIovecsMax = 256;

// Paths (portals) to one LUN. Real SANs have 2-4; 8 leaves headroom.
constexpr uint32_t kPathsMax = 8;

// A request that has not completed after this long (over every retry and
// path) fails with TimedOut. 30 s is the Linux SCSI default command timeout.
constexpr uint32_t kIoTimeoutMsDefault = 30'000;
constexpr uint32_t kIoTimeoutMsMin = 100;
constexpr uint32_t kIoTimeoutMsMax = 600'000;

// A path with commands outstanding and no response for this long is declared
// dead and its commands move to another path. Short enough that multipath
// failover stays far below the I/O timeout, long enough to ride out a busy
// array's latency spikes (arrays answer in milliseconds when healthy).
constexpr uint32_t kPathTimeoutMsDefault = 5'000;
constexpr uint32_t kPathTimeoutMsMin = 50;
constexpr uint32_t kPathTimeoutMsMax = 120'000;

// TCP connect + iSCSI login on one path.
constexpr uint32_t kConnectTimeoutMsDefault = 5'000;
constexpr uint32_t kConnectTimeoutMsMin = 50;
constexpr uint32_t kConnectTimeoutMsMax = 120'000;

// Reconnect backoff on a dead path: doubles from min to max, with jitter, so a
// restarting array is not hammered and a short blip costs little.
constexpr uint32_t kReconnectBackoffMsMin = 50;
constexpr uint32_t kReconnectBackoffMsMax = 2'000;

// Retries of one command for transient SCSI conditions (UNIT ATTENTION, BUSY,
// NOT READY becoming ready) before its error is returned.
constexpr uint32_t kCommandRetriesMax = 16;

// ---- cache/ (the write-back data cache) ----------------------------------

// Dirty data held in memory before writers wait for the flusher (at most
// half of the data cache's share of the memory budget, below). 256 MiB
// absorbs several seconds of a 10GbE client burst and stays a small part of
// a controller's memory; the minimum still holds a few largest writes.
constexpr uint64_t kCacheDirtyBytesDefault = 256ull << 20;
constexpr uint64_t kCacheDirtyBytesMin = 4ull << 20;
constexpr uint64_t kCacheDirtyBytesMax = 64ull << 30;

// The node's memory budget ([cache] memory_mib): one bound for what nasgwd
// holds in memory that grows with load. It is cut in three (MemoryShares
// below): the metadata cache (RocksDB's block cache and every domain's
// memtables, fs::MetaCache), the head's request buffers (payloads read and
// replies owed, daemon/head_server.h), and the data cache (dirty data and
// clean blocks; the clean blocks get what the dirty data leaves). 2 GiB
// holds a few clients' working sets on a small controller; a real head gives
// it most of its memory (ZFS's ARC takes half by default). What comes on
// top is fixed (code, threads, connections) or bookkeeping: about 150 bytes
// per 4 KiB block held (under 4%). docs/cache.md "Memory" states it.
constexpr uint64_t kMemoryBytesDefault = 2ull << 30;
constexpr uint64_t kMemoryBytesMin = 32ull << 20;
constexpr uint64_t kMemoryBytesMax = 1ull << 40;
// The metadata cache: an eighth, at least 4 MiB (a few memtables of a small
// domain), at most 4 GiB (RocksDB's index and hot blocks of a large one).
constexpr uint64_t kMetaCacheBytesMin = 4ull << 20;
constexpr uint64_t kMetaCacheBytesMax = 4ull << 30;
// Request buffers: an eighth, at least 4 MiB (a few of the largest WRITE or
// READ at once: the head protocol's 1 MiB plus its header), at most 1 GiB
// (a thousand of them in flight is more than any array's queues hold).
constexpr uint64_t kRequestBytesMin = 4ull << 20;
constexpr uint64_t kRequestBytesMax = 1ull << 30;
// Frames up to this size are not charged to the request buffers: they are
// bounded by each connection's in-flight cap, and a small request (a
// GETATTR) must never queue for bytes behind another's writes.
constexpr uint64_t kRequestChargedFrameBytesMin = 64ull << 10;
// The data cache's least (its dirty data at most half of it).
constexpr uint64_t kCacheMemoryBytesMin = 16ull << 20;
constexpr uint64_t kCacheMemoryBytesMax = kMemoryBytesMax;

// malloc arenas of nasgwd (glibc's M_ARENA_MAX; its default is 8 per
// core): each arena keeps memory freed into it that it cannot return, so
// fewer arenas bound what comes on top of the budget.
constexpr int kMallocArenas = 2;

struct MemoryShares {
  uint64_t meta = 0;      // fs::MetaCache
  uint64_t requests = 0;  // the head server's request buffers
  uint64_t data = 0;      // cache::DataCache: dirty and clean
};

constexpr uint64_t Clamp(uint64_t v, uint64_t lo, uint64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// How a budget of `bytes` (kMemoryBytes{Min,Max}) is cut.
constexpr MemoryShares SharesOf(uint64_t bytes) {
  MemoryShares s;
  s.meta = Clamp(bytes / 8, kMetaCacheBytesMin, kMetaCacheBytesMax);
  s.requests = Clamp(bytes / 8, kRequestBytesMin, kRequestBytesMax);
  s.data = bytes - s.meta - s.requests;
  return s;
}
static_assert(SharesOf(kMemoryBytesMin).data >= kCacheMemoryBytesMin, "the least budget must leave a data cache");

// Largest read-ahead window of one sequential stream (it doubles from
// 128 KiB up to this); 0 turns read-ahead off. 4 MiB keeps a 10GbE stream
// busy over 4 LUNs and bounds what a stream that stops wastes.
constexpr uint64_t kReadAheadBytesDefault = 4ull << 20;
constexpr uint64_t kReadAheadBytesMax = 64ull << 20;
// Threads that read ahead, and read-aheads waiting for one (past that a
// read-ahead is skipped: the stream's own reads fetch it). Each holds one
// window's buffer while it reads (8 x 4 MiB at the default window, in the
// memory budget's stated overhead). Two served 16 streams at 354 MB/s
// against the array's 1,700 (NFS benchmark, 256K reads from 16 clients);
// eight at 569.
constexpr uint32_t kReadAheadThreads = 8;
constexpr uint32_t kReadAheadQueueMax = 64;
// A read that needs blocks a read-ahead is fetching waits for it this long
// at most, then fetches them itself.
constexpr uint32_t kReadAheadWaitMs = 5'000;

// Age of the oldest dirty byte of a file before the flusher writes it: the
// window in which overwrites and neighbouring writes coalesce, and the most
// an unstable writer that never commits has in memory only.
constexpr uint32_t kCacheFlushAfterMsDefault = 1'000;
constexpr uint32_t kCacheFlushAfterMsMin = 10;
constexpr uint32_t kCacheFlushAfterMsMax = 60'000;

// A writer waiting for dirty space this long fails with Busy (NFS clients
// retry) rather than hang.
constexpr uint32_t kCacheStallTimeoutMsDefault = 30'000;
constexpr uint32_t kCacheStallTimeoutMsMin = 100;
constexpr uint32_t kCacheStallTimeoutMsMax = 600'000;

// Flusher threads, each writing one due file at a time that no other is
// writing; all but the first only while the cache is over half full (or
// the intent log fills): then one file's flush stuck in the array holds up
// no other file's, and sequential streams of several files reach the array
// together. More threads, or helpers at all times, cost the 16-client
// random workload's p99 on 2 cores (docs/cache.md, The flusher).
constexpr uint32_t kFlushesInFlight = 2;

// Most data one flush transaction carries: bounds the memory it holds and
// the time one file's lock is held.
constexpr uint64_t kCacheFlushBytesMax = 16ull << 20;

// Largest one cached write (the head protocol's largest WRITE).
constexpr uint64_t kCacheWriteBytesMax = 16ull << 20;

// Adjacent dirty ranges of a file are joined up to this size (so a sequential
// stream is one piece per MiB, and joining never copies more than this).
constexpr uint64_t kCacheRangeBytesMax = 1ull << 20;

// Stable writes up to this size go to the intent log (one shared array
// write) and are flushed to their place later; larger ones are written to
// their place before the answer (the log would carry them twice for no
// gain in latency). ZFS's zfs_immediate_write_sz plays this part.
constexpr uint64_t kLogWriteBytesMax = 64ull << 10;
// Logged writes pin the intent log until flushed: past this fill (per cent)
// stable writes go to their place instead, so the log never fills with them.
constexpr uint32_t kLogWriteFillPctMax = 60;
// The flusher writes files with logged writes first once the log is this
// full (per cent), so the next checkpoint can move past them.
constexpr uint32_t kLogWriteFlushPct = 30;
// A COMMIT or fsync whose file holds at most this much dirty data not in
// the intent log logs it, as stable writes, when a partner's mirror answers
// for the log (the answer comes from the partner's memory, not the array);
// without one, up to kLogWriteBytesMax, as a stable write would. More goes
// to its place before the answer.
constexpr uint64_t kCommitLogBytesMax = 1ull << 20;
// A stable write goes to the intent log while the log's records reach the
// array quickly: their recent write time (a moving average) at most this.
// Slower, the records queue behind a saturated array link, where bytes
// cost more than round trips: the write goes to its place instead and
// crosses the link once, not twice (log, then flush). 0: always the log.
constexpr uint32_t kLogSlowMsDefault = 20;
constexpr uint32_t kLogSlowMsMax = 10'000;

// Intent log record writes in flight at once (each up to 1 MiB, with FUA):
// while one is on its way the next group forms and goes, so the log keeps
// the array as busy as several writers would, not one round trip at a time.
// A replay stops at the first record missing; what the records after it
// held was never acknowledged (docs/on-disk-format.md, "Intent log").
constexpr uint32_t kLogWritesInFlight = 8;

// Device reads and writes one file operation keeps in flight at once, over
// all the LUNs its blocks are on (a flush's writes, a read's pieces).
constexpr uint32_t kDataIoDepth = 32;

// Metadata headroom. A change that adds metadata is refused (NoSpace) once
// the domain's metadata groups have less than min(half of them, this) free;
// deletes, transaction groups and flushes of accepted writes never are (each
// is bounded by what was accepted before). The headroom is for those and for
// RocksDB's memtable flushes and compactions and the MetaFs log, which must
// never meet ENOSPC (a store that did stopped taking writes, and a domain
// whose MetaFs log could not grow did not reopen). Half: a compaction's output is at most its input, and the store
// holds at most the other half; 4 GiB covers two compactions of RocksDB's
// max_compaction_bytes (25 x 64 MiB) on a large reserve.
constexpr uint64_t kMetaHeadroomMaxBytes = 4ull << 30;
// The store's write buffer is at most 1/16 of the metadata space (two of them
// fill an eighth, well inside the headroom's lower half), and at least this.
constexpr uint64_t kMetaWriteBufferMinBytes = 256ull << 10;

static_assert(kPathTimeoutMsDefault < kIoTimeoutMsDefault, "paths must fail over before I/O times out");
static_assert(kReconnectBackoffMsMax < kIoTimeoutMsDefault);
static_assert(kQueueDepthDefault <= kQueueDepthMax);

}  // namespace nasgw::limits
