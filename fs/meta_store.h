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

struct MetaStoreOptions {
  // Memtable size; also bounds what a crash replays from the WAL.
  uint64_t write_buffer_bytes = 32ull << 20;
  // RocksDB block cache, part of the node's memory budget. 0: none, so every
  // read of a table block reaches the LUNs (fault tests).
  uint64_t block_cache_bytes = 64ull << 20;
  // Open with RocksDB's read-only mode: the WAL is replayed into memory only,
  // no file is created, written or deleted (nasgw-fsck without --repair).
  // Writes fail with NotSupported.
  bool read_only = false;
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

  Result<std::string> Get(std::string_view key);
  Status Write(MetaBatch& batch, bool sync);
  // Calls fn(key, value) for keys in [begin, end) in order until it returns
  // false. An empty `end` means no upper bound.
  Status Scan(std::string_view begin, std::string_view end,
              const std::function<bool(std::string_view, std::string_view)>& fn);
  // Flushes memtables to SST files (tests and orderly shutdown).
  Status Flush();

 private:
  struct Rep;
  explicit MetaStore(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace nasgw::fs
