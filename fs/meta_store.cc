#include "fs/meta_store.h"

#include <cstdarg>
#include <cstdio>
#include <map>
#include <set>

#include "base/log.h"
#include "base/mutex.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/listener.h>
#include <rocksdb/statistics.h>
#include <rocksdb/system_clock.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/table_properties_collectors.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/write_buffer_manager.h>

namespace nasgw::fs {

namespace {

using rocksdb::FileOptions;
using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

constexpr char kDbPath[] = "/nasgw-meta";

IOStatus ToIO(const Status& s) {
  if (s.ok()) return IOStatus::OK();
  const std::string m = s.ToString();
  switch (s.code()) {
    case Code::kNotFound:
      return IOStatus::PathNotFound(m);
    case Code::kNoSpace:
      return IOStatus::NoSpace(m);
    case Code::kFenced:
      return IOStatus::IOFenced(m);
    case Code::kInvalidArgument:
      return IOStatus::InvalidArgument(m);
    case Code::kNotSupported:
      return IOStatus::NotSupported(m);
    case Code::kCorruption:
      return IOStatus::Corruption(m);
    default:
      return IOStatus::IOError(m);
  }
}

Status FromRocks(const rocksdb::Status& s) {
  if (s.ok()) return Status();
  const std::string m = s.ToString();
  if (s.IsNotFound()) return Status::NotFound(m);
  if (s.IsCorruption()) return Status::Corruption(m);
  if (s.IsNoSpace()) return Status::NoSpace(m);
  if (s.IsIOFenced()) return Status::Fenced(m);
  if (s.IsInvalidArgument()) return Status::InvalidArgument(m);
  if (s.IsNotSupported()) return Status::NotSupported(m);
  if (s.IsBusy() || s.IsTryAgain()) return Status::Busy(m);
  return Status::IoError(m);
}

// RocksDB names files by path; MetaFs has one flat namespace. Paths are kept
// as given, with duplicate slashes folded.
std::string Norm(const std::string& p) {
  std::string out;
  for (char c : p) {
    if (c == '/' && !out.empty() && out.back() == '/') continue;
    out += c;
  }
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

class SeqFile : public rocksdb::FSSequentialFile {
 public:
  SeqFile(MetaFs* fs, MetaFs::FileRef f) : fs_(fs), f_(std::move(f)) {}
  IOStatus Read(size_t n, const IOOptions&, Slice* result, char* scratch, IODebugContext*) override {
    auto got = fs_->Read(f_, pos_, n, scratch);
    if (!got.ok()) return ToIO(got.status());
    pos_ += *got;
    *result = Slice(scratch, *got);
    return IOStatus::OK();
  }
  IOStatus Skip(uint64_t n) override {
    pos_ += n;
    return IOStatus::OK();
  }

 private:
  MetaFs* fs_;
  MetaFs::FileRef f_;
  uint64_t pos_ = 0;
};

class RandFile : public rocksdb::FSRandomAccessFile {
 public:
  RandFile(MetaFs* fs, MetaFs::FileRef f) : fs_(fs), f_(std::move(f)) {}
  IOStatus Read(uint64_t offset, size_t n, const IOOptions&, Slice* result, char* scratch,
                IODebugContext*) const override {
    auto got = fs_->Read(f_, offset, n, scratch);
    if (!got.ok()) return ToIO(got.status());
    *result = Slice(scratch, *got);
    return IOStatus::OK();
  }

 private:
  MetaFs* fs_;
  MetaFs::FileRef f_;
};

class WFile : public rocksdb::FSWritableFile {
 public:
  WFile(MetaFs* fs, MetaFs::FileRef f, uint64_t size) : fs_(fs), f_(std::move(f)), size_(size) {}
  ~WFile() override {
    // RocksDB closes every file it cares about; one dropped unclosed was
    // abandoned (its data is not needed), but a failure is still logged.
    if (!closed_) {
      Status s = fs_->Close(f_);
      if (!s.ok()) NASGW_LOG(kWarn, "fs") << "metadata file close" << Kv("error", s.ToString());
    }
  }
  using rocksdb::FSWritableFile::Append;
  IOStatus Append(const Slice& data, const IOOptions&, IODebugContext*) override {
    size_ += data.size();
    return ToIO(fs_->Append(f_, data.data(), data.size()));
  }
  IOStatus Close(const IOOptions&, IODebugContext*) override {
    closed_ = true;
    return ToIO(fs_->Close(f_));
  }
  IOStatus Flush(const IOOptions&, IODebugContext*) override { return ToIO(fs_->Flush(f_)); }
  IOStatus Sync(const IOOptions&, IODebugContext*) override { return ToIO(fs_->Sync(f_)); }
  IOStatus Fsync(const IOOptions&, IODebugContext*) override { return ToIO(fs_->Sync(f_)); }
  uint64_t GetFileSize(const IOOptions&, IODebugContext*) override { return size_; }
  bool IsSyncThreadSafe() const override { return true; }

 private:
  MetaFs* fs_;
  MetaFs::FileRef f_;
  uint64_t size_;
  bool closed_ = false;
};

class Dir : public rocksdb::FSDirectory {
 public:
  // Renames, creates and deletes are durable in MetaFs when they return.
  IOStatus Fsync(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }
};

class Lock : public rocksdb::FileLock {};

class InfoLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char buf[1024];
    vsnprintf(buf, sizeof(buf), format, ap);
    NASGW_LOG(kDebug, "rocksdb") << buf;
  }
};

// RocksDB's view of MetaFs. Everything RocksDB stores goes through here; the
// wrapped default file system is used for nothing that touches data.
class MetaFileSystem : public rocksdb::FileSystemWrapper {
 public:
  MetaFileSystem(MetaFs* fs, bool read_only)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), fs_(fs), read_only_(read_only) {}
  const char* Name() const override { return "nasgw-metafs"; }

  IOStatus NewSequentialFile(const std::string& name, const FileOptions&,
                             std::unique_ptr<rocksdb::FSSequentialFile>* out, IODebugContext*) override {
    auto f = fs_->OpenForRead(Norm(name));
    if (!f.ok()) return ToIO(f.status());
    *out = std::make_unique<SeqFile>(fs_, *f);
    return IOStatus::OK();
  }
  IOStatus NewRandomAccessFile(const std::string& name, const FileOptions&,
                               std::unique_ptr<rocksdb::FSRandomAccessFile>* out, IODebugContext*) override {
    auto f = fs_->OpenForRead(Norm(name));
    if (!f.ok()) return ToIO(f.status());
    *out = std::make_unique<RandFile>(fs_, *f);
    return IOStatus::OK();
  }
  IOStatus NewWritableFile(const std::string& name, const FileOptions&, std::unique_ptr<rocksdb::FSWritableFile>* out,
                           IODebugContext*) override {
    if (read_only_) return IOStatus::NotSupported("metadata store opened read-only: " + name);
    auto f = fs_->OpenForWrite(Norm(name));
    if (!f.ok()) return ToIO(f.status());
    *out = std::make_unique<WFile>(fs_, *f, 0);
    return IOStatus::OK();
  }
  IOStatus ReopenWritableFile(const std::string& name, const FileOptions&,
                              std::unique_ptr<rocksdb::FSWritableFile>* out, IODebugContext*) override {
    if (read_only_) return IOStatus::NotSupported("metadata store opened read-only: " + name);
    const std::string n = Norm(name);
    if (!fs_->Exists(n)) return NewWritableFile(name, {}, out, nullptr);
    auto f = fs_->OpenForRead(n);
    auto size = fs_->Size(n);
    if (!f.ok() || !size.ok()) return ToIO(f.ok() ? size.status() : f.status());
    *out = std::make_unique<WFile>(fs_, *f, *size);
    return IOStatus::OK();
  }
  IOStatus ReuseWritableFile(const std::string& name, const std::string& old, const FileOptions& o,
                             std::unique_ptr<rocksdb::FSWritableFile>* out, IODebugContext* d) override {
    // The old file's space must come back: a delete that fails is the
    // answer (a missing old file is not a failure).
    Status s = fs_->Delete(Norm(old));
    if (!s.ok() && s.code() != Code::kNotFound) return ToIO(s);
    return NewWritableFile(name, o, out, d);
  }
  IOStatus NewDirectory(const std::string&, const IOOptions&, std::unique_ptr<rocksdb::FSDirectory>* out,
                        IODebugContext*) override {
    *out = std::make_unique<Dir>();
    return IOStatus::OK();
  }
  IOStatus FileExists(const std::string& name, const IOOptions&, IODebugContext*) override {
    const std::string n = Norm(name);
    if (fs_->Exists(n) || IsDir(n)) return IOStatus::OK();
    return IOStatus::NotFound(n);
  }
  IOStatus GetChildren(const std::string& dir, const IOOptions&, std::vector<std::string>* out,
                       IODebugContext*) override {
    const std::string prefix = Norm(dir) + "/";
    out->clear();
    std::set<std::string> seen;
    for (const std::string& n : fs_->List(prefix)) {
      std::string rest = n.substr(prefix.size());
      rest = rest.substr(0, rest.find('/'));  // a subdirectory shows as one entry
      if (seen.insert(rest).second) out->push_back(rest);
    }
    return IOStatus::OK();
  }
  IOStatus DeleteFile(const std::string& name, const IOOptions&, IODebugContext*) override {
    if (read_only_) return IOStatus::NotSupported("metadata store opened read-only: " + name);
    return ToIO(fs_->Delete(Norm(name)));
  }
  IOStatus CreateDir(const std::string& d, const IOOptions&, IODebugContext*) override {
    MutexLock lock(mu_);
    dirs_.insert(Norm(d));
    return IOStatus::OK();
  }
  IOStatus CreateDirIfMissing(const std::string& d, const IOOptions& o, IODebugContext* g) override {
    return CreateDir(d, o, g);
  }
  IOStatus DeleteDir(const std::string& d, const IOOptions&, IODebugContext*) override {
    MutexLock lock(mu_);
    dirs_.erase(Norm(d));
    return IOStatus::OK();
  }
  IOStatus IsDirectory(const std::string& p, const IOOptions&, bool* is_dir, IODebugContext*) override {
    *is_dir = IsDir(Norm(p));
    return IOStatus::OK();
  }
  IOStatus GetFileSize(const std::string& name, const IOOptions&, uint64_t* size, IODebugContext*) override {
    auto s = fs_->Size(Norm(name));
    if (!s.ok()) return ToIO(s.status());
    *size = *s;
    return IOStatus::OK();
  }
  IOStatus GetFileModificationTime(const std::string& name, const IOOptions&, uint64_t* secs,
                                   IODebugContext*) override {
    auto t = fs_->ModifiedNs(Norm(name));
    if (!t.ok()) return ToIO(t.status());
    *secs = *t / 1'000'000'000ull;
    return IOStatus::OK();
  }
  IOStatus RenameFile(const std::string& from, const std::string& to, const IOOptions&, IODebugContext*) override {
    if (read_only_) return IOStatus::NotSupported("metadata store opened read-only: " + from);
    return ToIO(fs_->Rename(Norm(from), Norm(to)));
  }
  IOStatus LinkFile(const std::string&, const std::string&, const IOOptions&, IODebugContext*) override {
    return IOStatus::NotSupported("hard links in MetaFs");
  }
  IOStatus LockFile(const std::string& name, const IOOptions&, rocksdb::FileLock** lock, IODebugContext*) override {
    // One process opens a domain at a time: the cluster proves that with a
    // SCSI reservation. Within the process, refuse a second open.
    MutexLock l(mu_);
    if (!locks_.insert(Norm(name)).second) return IOStatus::IOError("lock held: " + name);
    auto* lk = new Lock;
    lock_names_[lk] = Norm(name);
    *lock = lk;
    return IOStatus::OK();
  }
  IOStatus UnlockFile(rocksdb::FileLock* lock, const IOOptions&, IODebugContext*) override {
    MutexLock l(mu_);
    locks_.erase(lock_names_[lock]);
    lock_names_.erase(lock);
    delete lock;
    return IOStatus::OK();
  }
  IOStatus NewLogger(const std::string&, const IOOptions&, std::shared_ptr<rocksdb::Logger>* out,
                     IODebugContext*) override {
    *out = std::make_shared<InfoLogger>();
    return IOStatus::OK();
  }
  IOStatus GetAbsolutePath(const std::string& p, const IOOptions&, std::string* out, IODebugContext*) override {
    *out = Norm(p);
    return IOStatus::OK();
  }
  IOStatus GetTestDirectory(const IOOptions&, std::string* path, IODebugContext*) override {
    *path = "/test";
    return IOStatus::OK();
  }
  IOStatus GetFreeSpace(const std::string&, const IOOptions&, uint64_t* free, IODebugContext*) override {
    *free = fs_->Stats().free_bytes;
    return IOStatus::OK();
  }

 private:
  bool IsDir(const std::string& n) {
    {
      MutexLock lock(mu_);
      if (dirs_.contains(n)) return true;
    }
    return !fs_->List(n + "/").empty();
  }

  MetaFs* fs_;
  const bool read_only_;
  Mutex mu_;
  std::set<std::string> dirs_ GUARDED_BY(mu_);
  std::set<std::string> locks_ GUARDED_BY(mu_);
  std::map<rocksdb::FileLock*, std::string> lock_names_ GUARDED_BY(mu_);
};

}  // namespace

struct MetaBatch::Rep {
  rocksdb::WriteBatch batch;
};

MetaBatch::MetaBatch() : rep_(std::make_unique<Rep>()) {}
MetaBatch::~MetaBatch() = default;
MetaBatch::MetaBatch(MetaBatch&&) noexcept = default;
MetaBatch& MetaBatch::operator=(MetaBatch&&) noexcept = default;
void MetaBatch::Put(std::string_view k, std::string_view v) {
  rep_->batch.Put(Slice(k.data(), k.size()), Slice(v.data(), v.size())).PermitUncheckedError();
}
void MetaBatch::Delete(std::string_view k) {
  rep_->batch.Delete(Slice(k.data(), k.size())).PermitUncheckedError();
}
void MetaBatch::ForEach(const std::function<void(bool, std::string_view, std::string_view)>& fn) const {
  struct Each : rocksdb::WriteBatch::Handler {
    const std::function<void(bool, std::string_view, std::string_view)>* fn;
    rocksdb::Status PutCF(uint32_t, const Slice& k, const Slice& v) override {
      (*fn)(true, std::string_view(k.data(), k.size()), std::string_view(v.data(), v.size()));
      return rocksdb::Status::OK();
    }
    rocksdb::Status DeleteCF(uint32_t, const Slice& k) override {
      (*fn)(false, std::string_view(k.data(), k.size()), {});
      return rocksdb::Status::OK();
    }
  } each;
  each.fn = &fn;
  // Only batches built here or checked by FromData reach this: they parse.
  rep_->batch.Iterate(&each).PermitUncheckedError();
}

size_t MetaBatch::count() const {
  return static_cast<size_t>(rep_->batch.Count());
}
const std::string& MetaBatch::Data() const {
  return rep_->batch.Data();
}
Result<MetaBatch> MetaBatch::FromData(std::string data) {
  // The smallest valid batch is its 12-byte header (sequence, count).
  if (data.size() < 12) return Status::Corruption("metadata batch of " + std::to_string(data.size()) + " bytes");
  MetaBatch b;
  b.rep_->batch = rocksdb::WriteBatch(std::move(data));
  // Count() reads the header; walking it checks every record parses.
  struct Check : rocksdb::WriteBatch::Handler {
    uint32_t n = 0;
    rocksdb::Status PutCF(uint32_t, const Slice&, const Slice&) override {
      n++;
      return rocksdb::Status::OK();
    }
    rocksdb::Status DeleteCF(uint32_t, const Slice&) override {
      n++;
      return rocksdb::Status::OK();
    }
  } check;
  rocksdb::Status s = b.rep_->batch.Iterate(&check);
  if (!s.ok() || check.n != b.rep_->batch.Count()) {
    return Status::Corruption("metadata batch does not parse: " + s.ToString());
  }
  return b;
}

namespace {
// Runs MetaStoreOptions::before_flush; a failure there fails the flush by
// way of the file system (the table file cannot be written), which the
// caller arranges (MetaFs::Poison).
class FlushGate : public rocksdb::EventListener {
 public:
  explicit FlushGate(std::function<Status()> fn) : fn_(std::move(fn)) {}
  void OnFlushBegin(rocksdb::DB*, const rocksdb::FlushJobInfo&) override {
    Status s = fn_();
    if (!s.ok()) NASGW_LOG(kError, "fs") << "metadata flush refused" << Kv("error", s.ToString());
  }

 private:
  std::function<Status()> fn_;
};
}  // namespace

namespace {
// RocksDB's clock, with its one-second pause after a failed flush capped.
class PauseCap : public rocksdb::SystemClockWrapper {
 public:
  PauseCap(const std::shared_ptr<rocksdb::SystemClock>& t, uint32_t cap_ms)
      : rocksdb::SystemClockWrapper(t), cap_us_(uint64_t{cap_ms} * 1000) {}
  static const char* kClassName() { return "NasgwPauseCap"; }
  const char* Name() const override { return kClassName(); }
  void SleepForMicroseconds(int micros) override {
    if (micros >= 1'000'000 && static_cast<uint64_t>(micros) > cap_us_) micros = static_cast<int>(cap_us_);
    target_->SleepForMicroseconds(micros);
  }

 private:
  const uint64_t cap_us_;
};

class ClockEnv : public rocksdb::EnvWrapper {
 public:
  ClockEnv(rocksdb::Env* base, std::shared_ptr<rocksdb::SystemClock> clock) : rocksdb::EnvWrapper(base) {
    system_clock_ = std::move(clock);  // what GetSystemClock() returns
  }
  static const char* kClassName() { return "NasgwClockEnv"; }
  const char* Name() const override { return kClassName(); }
};
}  // namespace

struct MetaCache::Rep {
  std::shared_ptr<rocksdb::Cache> cache;
  std::shared_ptr<rocksdb::WriteBufferManager> memtables;
  std::shared_ptr<rocksdb::Statistics> stats;
};

MetaCache::MetaCache(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
MetaCache::~MetaCache() = default;

std::shared_ptr<MetaCache> MetaCache::New(uint64_t bytes) {
  auto rep = std::make_unique<Rep>();
  rep->cache = rocksdb::NewLRUCache(bytes);
  // Memtables are charged to the cache (dummy entries), so that blocks
  // make room for them; past half of the cache RocksDB flushes the largest.
  // No stall: a write waiting here could hold the domain's lock.
  rep->memtables = std::make_shared<rocksdb::WriteBufferManager>(bytes / 2, rep->cache, /*allow_stall=*/false);
  rep->stats = rocksdb::CreateDBStatistics();
  rep->stats->set_stats_level(rocksdb::StatsLevel::kExceptHistogramOrTimers);  // counters only: cheap
  return std::shared_ptr<MetaCache>(new MetaCache(std::move(rep)));
}

uint64_t MetaCache::capacity() const {
  return rep_->cache->GetCapacity();
}
uint64_t MetaCache::usage() const {
  return rep_->cache->GetUsage();
}
uint64_t MetaCache::memtable_bytes() const {
  return rep_->memtables->memory_usage();
}
uint64_t MetaCache::hits() const {
  return rep_->stats->getTickerCount(rocksdb::BLOCK_CACHE_HIT);
}
uint64_t MetaCache::misses() const {
  return rep_->stats->getTickerCount(rocksdb::BLOCK_CACHE_MISS);
}

struct MetaStore::Rep {
  std::shared_ptr<rocksdb::FileSystem> fs;
  std::unique_ptr<rocksdb::Env> base_env;
  std::unique_ptr<rocksdb::Env> env;
  std::unique_ptr<rocksdb::DB> db;
  std::function<bool(std::string_view)> has_birth;
};

MetaStore::MetaStore(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}

MetaStore::~MetaStore() {
  if (rep_->db) {
    rocksdb::Status s = rep_->db->Close();
    if (!s.ok()) NASGW_LOG(kWarn, "fs") << "metadata store close" << Kv("error", s.ToString());
    rep_->db.reset();
  }
}

Result<std::unique_ptr<MetaStore>> MetaStore::Open(MetaFs* fs, const MetaStoreOptions& o) {
  auto rep = std::make_unique<Rep>();
  rep->fs = std::make_shared<MetaFileSystem>(fs, o.read_only);
  rep->base_env = rocksdb::NewCompositeEnv(rep->fs);
  rep->env = std::make_unique<ClockEnv>(rep->base_env.get(),
                                        std::make_shared<PauseCap>(rep->base_env->GetSystemClock(), o.error_pause_ms));
  rocksdb::Options opts;
  opts.env = rep->env.get();
  opts.create_if_missing = !o.read_only;
  opts.info_log = std::make_shared<InfoLogger>();
  opts.write_buffer_size = o.write_buffer_bytes;
  opts.max_write_buffer_number = 2;
  opts.max_background_jobs = 2;  // two cores
  opts.max_open_files = -1;
  // No periodic statistics dump: it collects the block cache's entry
  // statistics through a collector kept in the cache with the clock of the
  // store that first made it, and the cache is shared by every store of the
  // node (MetaCache) and outlives a closed one: a dump then called through
  // a freed clock (nasgwd died under memory_lab's flood after a domain was
  // opened twice). The metrics endpoint reads what is needed instead.
  opts.stats_dump_period_sec = 0;
  opts.stats_persist_period_sec = 0;
  opts.paranoid_checks = true;
  // Closing does not flush: batches applied without the WAL are in the
  // domain's intent log, and after a log failure they must not reach a
  // table file. The domain flushes at an orderly close itself.
  opts.avoid_flush_during_shutdown = true;
  // Tables made mostly of deletions are compacted soon, so the space of
  // what was deleted comes back (the metadata headroom refuses new metadata
  // until it does): a file is marked when 32 of any 128 entries in a row
  // are deletions.
  opts.table_properties_collector_factories.push_back(rocksdb::NewCompactOnDeletionCollectorFactory(128, 32));
  if (o.before_flush) opts.listeners.push_back(std::make_shared<FlushGate>(o.before_flush));
  rocksdb::BlockBasedTableOptions t;
  if (o.cache != nullptr) {
    t.block_cache = o.cache->rep_->cache;
    opts.write_buffer_manager = o.cache->rep_->memtables;
    opts.statistics = o.cache->rep_->stats;
    // Index and filter blocks inside the bound too (else every open table
    // holds its own outside any budget); level 0's stay pinned, as they are
    // read by every lookup.
    t.cache_index_and_filter_blocks = true;
    t.pin_l0_filter_and_index_blocks_in_cache = true;
  } else if (o.block_cache_bytes == 0) {
    t.no_block_cache = true;
  } else {
    t.block_cache = rocksdb::NewLRUCache(o.block_cache_bytes);
  }
  opts.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  rocksdb::DB* db = nullptr;
  rocksdb::Status s =
      o.read_only ? rocksdb::DB::OpenForReadOnly(opts, kDbPath, &db) : rocksdb::DB::Open(opts, kDbPath, &db);
  if (!s.ok()) return FromRocks(s).WithContext("open metadata store of domain " + std::to_string(fs->domain()));
  rep->db.reset(db);
  return std::unique_ptr<MetaStore>(new MetaStore(std::move(rep)));
}

void MetaStore::SetBirths(std::function<bool(std::string_view key)> has_birth) {
  rep_->has_birth = std::move(has_birth);
}

namespace {
constexpr size_t kBirthBytes = 8;
Status NoBirth(std::string_view key) {
  return Status::Corruption("value of a " + std::string(key.substr(0, 1)) + " key is shorter than its birth");
}
}  // namespace

Result<std::string> MetaStore::Get(std::string_view key) {
  auto v = GetRaw(key);
  if (v.ok() && rep_->has_birth && rep_->has_birth(key)) {
    if (v->size() < kBirthBytes) return NoBirth(key);
    v->resize(v->size() - kBirthBytes);
  }
  return v;
}

Result<std::string> MetaStore::GetRaw(std::string_view key) {
  std::string v;
  rocksdb::Status s = rep_->db->Get(rocksdb::ReadOptions(), Slice(key.data(), key.size()), &v);
  if (s.IsNotFound()) return Status::NotFound("key");
  if (!s.ok()) return FromRocks(s);
  return v;
}

Status MetaStore::Write(MetaBatch& batch, bool sync) {
  rocksdb::WriteOptions w;
  w.sync = sync;
  return FromRocks(rep_->db->Write(w, &batch.rep_->batch));
}

Status MetaStore::Apply(MetaBatch& batch) {
  rocksdb::WriteOptions w;
  w.disableWAL = true;
  return FromRocks(rep_->db->Write(w, &batch.rep_->batch));
}

Status MetaStore::Scan(std::string_view begin, std::string_view end,
                       const std::function<bool(std::string_view, std::string_view)>& fn) {
  if (!rep_->has_birth) return ScanRaw(begin, end, fn);
  Status bad;
  Status s = ScanRaw(begin, end, [&](std::string_view k, std::string_view v) {
    if (rep_->has_birth(k)) {
      if (v.size() < kBirthBytes) {
        bad = NoBirth(k);
        return false;
      }
      v.remove_suffix(kBirthBytes);
    }
    return fn(k, v);
  });
  return s.ok() ? bad : s;
}

Status MetaStore::ScanRaw(std::string_view begin, std::string_view end,
                          const std::function<bool(std::string_view, std::string_view)>& fn) {
  rocksdb::ReadOptions r;
  std::string upper(end);
  Slice upper_slice(upper);
  if (!end.empty()) r.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(rep_->db->NewIterator(r));
  for (it->Seek(Slice(begin.data(), begin.size())); it->Valid(); it->Next()) {
    if (!fn(std::string_view(it->key().data(), it->key().size()),
            std::string_view(it->value().data(), it->value().size()))) {
      break;
    }
  }
  return FromRocks(it->status());
}

Status MetaStore::Flush() {
  return FromRocks(rep_->db->Flush(rocksdb::FlushOptions()));
}

}  // namespace nasgw::fs
