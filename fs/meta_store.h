// MetaStore: a domain's ordered key-value store (RocksDB), kept on the
// reserve through MetaFs. The only place in nasgw that includes RocksDB is
// fs/meta_store.cc; everything else sees this interface, so the engine can be
// swapped or faked in tests.
//
// Writes are atomic batches; a batch written with sync=true is on the LUNs
// when Write returns (WAL appended, written, SYNCHRONIZE CACHE, and the
// MetaFs log naming it durable).
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "fs/metafs.h"

namespace nasgw::fs {

// The metadata memory several stores share, one bound for all of a node's
// domains (part of the node's memory budget, docs/cache.md "Memory"):
// RocksDB's block cache, with every store's memtables charged to it (a
// WriteBufferManager: past half of it the largest memtable is flushed) and
// one set of hit and miss counters.
class MetaCache {
 public:
  static std::shared_ptr<MetaCache> New(uint64_t bytes);
  ~MetaCache();
  MetaCache(const MetaCache&) = delete;
  MetaCache& operator=(const MetaCache&) = delete;

  uint64_t capacity() const;
  uint64_t usage() const;           // table blocks and memtables held
  uint64_t memtable_bytes() const;  // the memtables' part of it
  uint64_t hits() const;            // block reads the cache answered
  uint64_t misses() const;          // ... and those that went to the LUNs

 private:
  friend class MetaStore;
  struct Rep;
  explicit MetaCache(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

struct MetaStoreOptions {
  // Memtable size; also bounds what a crash replays from the WAL.
  uint64_t write_buffer_bytes = 32ull << 20;
  // The shared metadata memory (above); when set, block_cache_bytes is
  // not used.
  std::shared_ptr<MetaCache> cache;
  // The store's own RocksDB block cache, when no shared one is given. 0:
  // none, so every read of a table block reaches the LUNs (fault tests).
  uint64_t block_cache_bytes = 64ull << 20;
  // Open with RocksDB's read-only mode: the WAL is replayed into memory only,
  // no file is created, written or deleted (nasgw-fsck without --repair).
  // Writes fail with NotSupported.
  bool read_only = false;
  // Called on RocksDB's flush thread before a memtable is written to a
  // table file, with what it holds fixed. Batches applied without the WAL
  // (Apply) must be durable elsewhere before that (the domain waits for its
  // intent log); an error makes the flush fail (the store then refuses
  // writes until reopened). Nothing when empty.
  std::function<Status()> before_flush;
  // After a failed background flush RocksDB pauses a whole second before
  // it tries again; this caps that pause (a failed store is closed sooner).
  uint32_t error_pause_ms = 1000;
};

class MetaBatch {
 public:
  MetaBatch();
  ~MetaBatch();
  MetaBatch(MetaBatch&&) noexcept;
  MetaBatch& operator=(MetaBatch&&) noexcept;
  void Put(std::string_view key, std::string_view value);
  void Delete(std::string_view key);
  size_t count() const;
  // Calls fn(put, key, value) for each operation in order (value empty for
  // a delete).
  void ForEach(const std::function<void(bool, std::string_view, std::string_view)>& fn) const;
  // The batch as bytes (RocksDB's WriteBatch representation), for the
  // intent log; FromData reads it back (Corruption if it does not parse).
  const std::string& Data() const;
  static Result<MetaBatch> FromData(std::string data);

 private:
  friend class MetaStore;
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

class MetaStore {
 public:
  // Opens (creating if empty) the store kept in `fs`, which must outlive it.
  static Result<std::unique_ptr<MetaStore>> Open(MetaFs* fs, const MetaStoreOptions& options = {});
  ~MetaStore();

  // Births (docs/snapshots.md): the value of every key `has_birth` answers
  // true for ends in the transaction group that wrote it (a big-endian
  // u64), which Get and Scan strip (Corruption for a value too short to
  // hold one) and GetRaw and ScanRaw keep. Set once, before the store is
  // used from several threads; unset, no value is touched.
  void SetBirths(std::function<bool(std::string_view key)> has_birth);

  Result<std::string> Get(std::string_view key);
  Result<std::string> GetRaw(std::string_view key);
  // Writes through RocksDB's own WAL; with sync, durable on return.
  Status Write(MetaBatch& batch, bool sync);
  // Applies the batch to the memtable only (no WAL): visible to reads at
  // once, durable once a flush has written it to a table file. The caller
  // keeps it durable until then (the intent log); RocksDB's recovery then
  // gives the state of the last flush.
  Status Apply(MetaBatch& batch);
  // Calls fn(key, value) for keys in [begin, end) in order until it returns
  // false. An empty `end` means no upper bound.
  Status Scan(std::string_view begin, std::string_view end,
              const std::function<bool(std::string_view, std::string_view)>& fn);
  Status ScanRaw(std::string_view begin, std::string_view end,
                 const std::function<bool(std::string_view, std::string_view)>& fn);
  // Flushes memtables to table files and waits: everything applied before
  // the call is durable when it returns (a transaction group).
  Status Flush();

 private:
  struct Rep;
  explicit MetaStore(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace nasgw::fs
