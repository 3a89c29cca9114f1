// The read cache: clean file blocks held in memory, within the memory
// budget they share with the write-back cache's dirty data (the brief's
// decision 5; docs/cache.md, "Reads").
//
// Unit: one data block (fs::kDataBlockBytes), keyed by file (volume,
// snapshot, inode) and block number, tagged with the file's generation.
//
// Scan-resistant (segmented LRU with a ghost list, as 2Q and ARC): a block
// read once enters *probation* (at most a quarter of the capacity's
// worth when the cache is full); a second read while it is there, or a read
// soon after it was evicted from there (its key is in the *ghost* list),
// makes it *protected*. Eviction takes probation's oldest first, so a
// sequential scan passes through probation and leaves the protected working
// set alone. Blocks read ahead enter probation marked prefetched: their
// first real read does not count as a second.
//
// Staleness: the file's data changes only through DataCache (a flush
// commits new bytes, a truncation cuts them). Each change calls Update or
// Drop after it is on the SAN and before the change's overlay leaves the
// write-back cache, which bumps the file's version; a read that filled from
// the SAN takes a Fill first and its blocks are refused if the version
// moved meanwhile. So a block read before a change can never be cached
// after it. The one change that does not go through DataCache, a rollback
// of a volume to a snapshot, calls DropVolume once it committed (nasgwd's
// admin service, through DataCache::ForgetVolume).
//
// Read-ahead: Sequential() recognises a stream per file (three reads in a
// row that each follow on from the last, allowing for the reordering of a
// client's concurrent reads) and says what to read ahead, with a window that
// doubles from kReadAheadMinBytes to the configured maximum. The caller reads it
// (DataCache's read-ahead threads) and reports it done; a read that needs a
// block a read-ahead is fetching waits for it instead of fetching it again.
//
// Thread-safety: every method may be called concurrently (one mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "base/mutex.h"

namespace nasgw::cache {

struct FileKey {
  uint32_t vol = 0;
  uint64_t snap = 0;
  uint64_t ino = 0;
  bool operator<(const FileKey& o) const { return std::tie(vol, snap, ino) < std::tie(o.vol, o.snap, o.ino); }
  bool operator==(const FileKey& o) const { return std::tie(vol, snap, ino) == std::tie(o.vol, o.snap, o.ino); }
};

struct ReadCacheStats {
  uint64_t bytes = 0;               // held now
  uint64_t protected_bytes = 0;     // ... of which protected
  uint64_t capacity = 0;            // the budget less what shares it, now
  uint64_t hit_bytes = 0;           // bytes reads found here
  uint64_t miss_bytes = 0;          // bytes reads had to fetch (block-rounded)
  uint64_t prefetched_bytes = 0;    // read ahead into the cache
  uint64_t prefetch_hit_bytes = 0;  // ... and then read
  uint64_t evicted_bytes = 0;
  uint64_t refused_fills = 0;  // fills dropped because the file changed meanwhile
  uint64_t ahead_waits = 0;    // reads that waited for a read-ahead in flight
};

class ReadCache {
 public:
  static constexpr uint64_t kBlock = 4096;  // fs::kDataBlockBytes
  static constexpr uint64_t kReadAheadMinBytes = 128 << 10;
  // Reads of a stream arrive at most this many reads out of order.
  static constexpr uint64_t kReorderReads = 4;
  // Read-ahead begins at a stream's this-many'th read in a row (a read of a
  // file at offset 0 counts as the second): two random reads in a row that
  // land each just after the one before are rare; one is not.
  static constexpr uint32_t kStreamReads = 3;

  // `budget`: the bytes this cache shares with what `others` reports (the
  // dirty data now); the cache holds at most budget - others().
  ReadCache(uint64_t budget, uint64_t read_ahead_max, std::function<uint64_t()> others);
  ~ReadCache();
  ReadCache(const ReadCache&) = delete;
  ReadCache& operator=(const ReadCache&) = delete;

  // A read that may fill the cache from the SAN: its blocks are refused if
  // the file changed since the Fill was taken. Movable; releases its file.
  class Fill {
   public:
    Fill() = default;
    Fill(Fill&& o) noexcept { *this = std::move(o); }
    Fill& operator=(Fill&& o) noexcept;
    ~Fill();
    bool valid() const { return rc_ != nullptr; }

   private:
    friend class ReadCache;
    ReadCache* rc_ = nullptr;
    FileKey key_;
    uint64_t version_ = 0;
  };

  // Copies what the cache holds of [off, off+n) into out (out[0] is byte
  // off). Returns the block-aligned span [first, end) that holds every byte
  // it did not copy (first == end: all copied), and then a Fill for it.
  std::pair<uint64_t, uint64_t> Get(const FileKey& k, uint64_t gen, uint64_t off, uint64_t n, uint8_t* out, Fill* fill)
      EXCLUDES(mu_);
  // Blocks read from the SAN: data[0] is byte `first` (block-aligned), n
  // bytes (a partial last block is held with zeros after it).
  void Insert(const Fill& fill, uint64_t gen, uint64_t first, const uint8_t* data, uint64_t n, bool prefetched)
      EXCLUDES(mu_);
  // Bytes [off, off+n) of the file are now these on the SAN (a flush): whole
  // blocks are replaced, partial ones dropped; fills begun before refused.
  void Update(const FileKey& k, uint64_t gen, uint64_t off, const uint8_t* data, uint64_t n) EXCLUDES(mu_);
  // The file changed in a way Update does not say (a truncation): all of
  // its blocks dropped, fills begun before refused.
  void Drop(const FileKey& k) EXCLUDES(mu_);
  // Every file of volume `vol` changed in ways nobody said (a rollback to a
  // snapshot): Drop for each of them. Returns the bytes dropped.
  uint64_t DropVolume(uint32_t vol) EXCLUDES(mu_);
  // Evicts down to the capacity (the dirty data grew).
  void Trim() EXCLUDES(mu_);

  // Read-ahead. A read of [off, off+n) of a file `size` bytes long: the span
  // to read ahead now, if any, with its Fill; AheadDone when it ends.
  struct Ahead {
    uint64_t first = 0, end = 0;
    Fill fill;
  };
  Ahead Sequential(const FileKey& k, uint64_t gen, uint64_t off, uint64_t n, uint64_t size) EXCLUDES(mu_);
  void AheadDone(const FileKey& k, uint64_t first, uint64_t end) EXCLUDES(mu_);
  // Waits (at most timeout_ms) while a read-ahead in flight fetches part of
  // [first, end); true if it waited.
  bool WaitAhead(const FileKey& k, uint64_t first, uint64_t end, uint32_t timeout_ms) EXCLUDES(mu_);

  ReadCacheStats stats() const EXCLUDES(mu_);

 private:
  struct File;
  struct Block {
    File* file = nullptr;
    uint64_t index = 0;
    std::unique_ptr<uint8_t[]> data;
    int list = 0;  // kProbation or kProtected
    std::list<Block*>::iterator pos;
    bool prefetched = false;
  };
  struct File {
    FileKey key;
    uint64_t gen = 0;
    uint64_t version = 0;
    uint32_t pins = 0;  // Fills and read-aheads in flight
    std::map<uint64_t, Block> blocks;
    // The stream: where the last reads ended, the window, how far read-ahead
    // was asked for, and the spans being read ahead now.
    uint64_t next = 0, window = 0, ahead_to = 0;
    uint32_t run = 0;  // reads in a row that followed on (the stream's length)
    std::vector<std::pair<uint64_t, uint64_t>> inflight;
  };
  using GhostKey = std::tuple<uint32_t, uint64_t, uint64_t, uint64_t>;  // vol, snap, ino, block
  static constexpr int kProbation = 0, kProtected = 1;

  File& FileFor(const FileKey& k, uint64_t gen) REQUIRES(mu_);
  void Release(const FileKey& k) EXCLUDES(mu_);
  void MaybeForget(File& f) REQUIRES(mu_);
  void Touch(Block& b) REQUIRES(mu_);
  void Place(File& f, uint64_t index, const uint8_t* data, uint64_t n, bool prefetched) REQUIRES(mu_);
  void Remove(Block& b, bool ghost) REQUIRES(mu_);
  void DropBlocks(File& f) REQUIRES(mu_);
  void Evict() REQUIRES(mu_);
  uint64_t Capacity() const;

  const uint64_t budget_;
  const uint64_t ahead_max_;
  const std::function<uint64_t()> others_;
  mutable Mutex mu_;
  CondVar ahead_cv_;  // a read-ahead ended
  std::map<FileKey, std::unique_ptr<File>> files_ GUARDED_BY(mu_);
  std::list<Block*> lists_[2] GUARDED_BY(mu_);  // newest first
  uint64_t bytes_[2] GUARDED_BY(mu_) = {0, 0};
  std::list<GhostKey> ghost_order_ GUARDED_BY(mu_);  // newest first
  std::set<GhostKey> ghost_ GUARDED_BY(mu_);
  ReadCacheStats c_ GUARDED_BY(mu_);
};

}  // namespace nasgw::cache
