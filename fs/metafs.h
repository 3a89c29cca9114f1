// MetaFs: the small file system that holds a domain's metadata store
// (RocksDB's files) on the reserve's LUNs, in the manner of Ceph's BlueFS.
// Nothing of it lives on a controller's local disk, so whichever node holds
// the domain can mount it.
//
// On disk (docs/on-disk-format.md):
//  - a superblock, two 4 KiB copies in the domain's slot of LUN 0's reserve
//    header, the newer (higher sequence) valid copy wins;
//  - a log of file-table changes (create, extents, size, rename, delete),
//    in 4 KiB blocks, each record checksummed and sequence-numbered, chained
//    through extents of its own; replaying it rebuilds the file table;
//  - file data in extents allocated from the domain's metadata allocation
//    groups.
// A log flush only ever writes fresh blocks, never rewrites a block holding
// committed records, so a torn write cannot take committed records with it.
// When the log grows past a bound it is compacted: the current table is
// written as a new log and the superblock switched to it.
//
// Durability: Sync(file) returns once the file's data is on the LUN (written,
// then SYNCHRONIZE CACHE) and the log records naming its extents and size are
// too. Rename and Delete are durable when they return; a deleted file's space
// is reused only after its delete record is durable.
//
// Thread-safety: everything may be called concurrently. Data I/O of a file
// happens under that file's lock; the file table and the log under the
// MetaFs lock. Lock order: File::mu, then MetaFs::mu_.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "fs/allocator.h"
#include "fs/reserve.h"

namespace nasgw::fs {

// The domain table: a slot per domain in LUN 0's reserve header.
constexpr uint64_t kDomainTableOffset = 64ull << 10;
constexpr uint64_t kDomainSlotBytes = 16ull << 10;    // superblock copies A and B, 4 KiB each, then spare
constexpr uint32_t kDomainsMax = kReserveDomainsMax;  // slots between 64 KiB and 512 KiB
constexpr uint64_t kHeartbeatOffset = 512ull << 10;   // [512 KiB, 1 MiB): the cluster's disk heartbeat slots
static_assert(kDomainTableOffset + kDomainsMax * kDomainSlotBytes <= kHeartbeatOffset);
static_assert(kHeartbeatOffset < kReserveHeaderBytes);

constexpr size_t kMetaBlockBytes = 4096;  // log block and superblock size
constexpr size_t kMetaFileNameMax = 255;
constexpr uint32_t kMetaGroupsMax = 400;  // metadata allocation groups listed in a superblock

struct MetaFsOptions {
  // Compact the log once it holds this many bytes.
  uint64_t log_compact_bytes = 8ull << 20;
  // Log space is taken in extents of this size.
  uint64_t log_extent_bytes = 1ull << 20;
  // File data is allocated in chunks growing from min to max as a file grows.
  uint64_t chunk_min_bytes = 64ull << 10;
  uint64_t chunk_max_bytes = 4ull << 20;
};

struct MetaFsStats {
  uint64_t files = 0;
  uint64_t file_bytes = 0;       // sum of file sizes
  uint64_t allocated_bytes = 0;  // data and log extents
  uint64_t log_bytes = 0;        // live log since the last compaction
  uint64_t compactions = 0;
  uint64_t free_bytes = 0;
};

class MetaFs {
 public:
  class File;
  using FileRef = std::shared_ptr<File>;

  // Writes an empty MetaFs for `domain` over the given allocation groups.
  // Exists if the domain's slot already holds a valid superblock.
  static Result<std::unique_ptr<MetaFs>> Create(const std::shared_ptr<Reserve>& reserve, uint32_t domain,
                                                const std::vector<AgId>& groups, const MetaFsOptions& options = {});
  static Result<std::unique_ptr<MetaFs>> Mount(const std::shared_ptr<Reserve>& reserve, uint32_t domain,
                                               const MetaFsOptions& options = {});
  ~MetaFs();

  // Creates `name` empty, replacing a file of that name; durable on return.
  Result<FileRef> OpenForWrite(const std::string& name);
  Result<FileRef> OpenForRead(const std::string& name);

  Status Append(const FileRef& f, const void* data, size_t n);
  // Writes whole buffered blocks to the LUNs (not durable yet).
  Status Flush(const FileRef& f);
  // Makes everything appended durable (data, extents, size).
  Status Sync(const FileRef& f);
  Status Close(const FileRef& f);
  // Reads up to n bytes at offset; fewer at the end of the file.
  Result<size_t> Read(const FileRef& f, uint64_t offset, size_t n, void* out);

  Status Rename(const std::string& from, const std::string& to);
  Status Delete(const std::string& name);
  bool Exists(const std::string& name);
  Result<uint64_t> Size(const std::string& name);
  Result<uint64_t> ModifiedNs(const std::string& name);
  // Names that start with `prefix`.
  std::vector<std::string> List(const std::string& prefix);

  MetaFsStats Stats();
  // The metadata groups' space, and what is not allocated (the allocator's
  // own lock; no MetaFs lock).
  uint64_t total_bytes() const { return alloc_->total_bytes(); }
  uint64_t free_bytes() const { return alloc_->free_bytes(); }
  // Refuses every later change (file table, log, new files) with `why`,
  // as a failed log write does: nothing more can be made durable until the
  // MetaFs is mounted again. For a caller that knows the store must not
  // move on (the domain, when its intent log failed).
  void Poison(const Status& why);
  uint32_t domain() const { return domain_; }
  // The allocation groups it holds (as its superblock lists them).
  std::vector<AgId> groups() EXCLUDES(mu_);

 private:
  struct Record;
  MetaFs(std::shared_ptr<Reserve> reserve, uint32_t domain, const MetaFsOptions& options);

  Status WriteSuperblock() REQUIRES(mu_);
  Status Replay() REQUIRES(mu_);
  Status AppendLog(const std::vector<std::vector<uint8_t>>& records) REQUIRES(mu_);
  Status CompactLog() REQUIRES(mu_);
  Status MaybeCompact() REQUIRES(mu_);
  Status EnsureLogSpace(size_t bytes, uint64_t next_seq) REQUIRES(mu_);
  Status WriteExtentBytes(const Extent& e, uint64_t at, const uint8_t* data, size_t n);
  Status ReadExtentBytes(const Extent& e, uint64_t at, uint8_t* data, size_t n);
  Status FlushLuns(const std::vector<uint32_t>& luns);
  Status WriteBuffered(File& f, bool tail);  // REQUIRES(f.mu), annotated where File is defined
  std::vector<uint8_t> EncodeRecord(uint8_t type, std::string_view payload) REQUIRES(mu_);
  std::vector<uint8_t> EncodeRecordAt(uint8_t type, std::string_view payload, uint64_t seq) REQUIRES(mu_);
  void DropFile(uint64_t id) REQUIRES(mu_);
  // The file's name, for an error message of a caller holding f.mu (takes mu_).
  std::string NameOf(const File& f) EXCLUDES(mu_);
  // Returns an extent to the allocator. Free fails only for an extent that
  // is free already (a bug, no leak); that is logged, not returned, because
  // every caller is past the point where the answer could change.
  void GiveBack(const Extent& e);
  void ReleaseSpace(File& f) EXCLUDES(mu_);  // takes f.mu

  std::shared_ptr<Reserve> reserve_;
  const uint32_t domain_;
  const MetaFsOptions options_;
  std::unique_ptr<Allocator> alloc_;

  // Taken after a File's mu (fs/metafs.cc), never before.
  Mutex mu_;
  // The file table.
  std::map<uint64_t, FileRef> files_ GUARDED_BY(mu_);
  std::map<std::string, uint64_t> names_ GUARDED_BY(mu_);
  uint64_t next_file_id_ GUARDED_BY(mu_) = 1;
  // The superblock and log.
  std::vector<AgId> groups_ GUARDED_BY(mu_);
  uint64_t sb_seq_ GUARDED_BY(mu_) = 0;
  uint64_t log_start_seq_ GUARDED_BY(mu_) = 1;
  uint64_t next_seq_ GUARDED_BY(mu_) = 1;
  std::vector<Extent> log_extents_ GUARDED_BY(mu_);  // the chain, first one in the superblock
  uint64_t log_pos_ GUARDED_BY(mu_) = 0;             // bytes used in log_extents_.back()
  uint64_t log_bytes_ GUARDED_BY(mu_) = 0;           // since the last compaction
  uint64_t compactions_ GUARDED_BY(mu_) = 0;
  uint64_t log_salt_ GUARDED_BY(mu_) = 0;  // per log: records of another log never verify
  Status sticky_ GUARDED_BY(mu_);          // a failed log write poisons the MetaFs
};

}  // namespace nasgw::fs
