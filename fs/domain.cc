// A domain: create, open (with the reclaim of orphans), statfs (fs/domain.h).
// The API's other parts are in fs/volumes.cc, fs/namespace.cc, fs/data.cc,
// fs/exports.cc and fs/check.cc; the commit path in fs/domain_impl.{h,cc}.
#include "fs/domain.h"

#include <algorithm>
#include <map>

#include "base/limits.h"
#include "base/log.h"
#include "fs/domain_impl.h"

namespace nasgw::fs {

using namespace keys;  // fs/keys.h: the keys and values of the metadata

const char* FileTypeName(FileType t) {
  switch (t) {
    case FileType::kNone:
      return "none";
    case FileType::kRegular:
      return "file";
    case FileType::kDirectory:
      return "directory";
    case FileType::kSymlink:
      return "symlink";
    case FileType::kFifo:
      return "fifo";
    case FileType::kSocket:
      return "socket";
    case FileType::kCharDevice:
      return "char-device";
    case FileType::kBlockDevice:
      return "block-device";
  }
  return "?";
}

namespace {

Status CheckDomainId(const Reserve& reserve, uint32_t id) {
  if (id < reserve.domains()) return Status();
  return Status::InvalidArgument("domain " + std::to_string(id) + ": reserve '" + reserve.name() + "' has " +
                                 std::to_string(reserve.domains()) + " domain" + (reserve.domains() == 1 ? "" : "s"));
}

}  // namespace

Domain::Domain(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Domain::~Domain() = default;

Result<std::unique_ptr<Domain>> Domain::Create(const std::shared_ptr<Reserve>& reserve, uint32_t id,
                                               const DomainOptions& o) {
  NASGW_RETURN_IF_ERROR(CheckDomainId(*reserve, id));
  // The domain's share of every LUN (Reserve::AgSlice). Metadata: the first
  // groups of each share; data: the rest.
  std::vector<Reserve::Slice> slices;
  uint64_t total = 0;
  for (uint32_t l = 0; l < reserve->lun_count(); l++) {
    slices.push_back(Reserve::AgSlice(reserve->ag_count(l), id, reserve->domains()));
    total += slices.back().count;
  }
  const uint32_t luns = reserve->lun_count();
  uint32_t per_lun = o.meta_groups ? (o.meta_groups + luns - 1) / luns
                                   : static_cast<uint32_t>(std::max<uint64_t>(1, total / 16 / luns));
  std::vector<AgId> meta;
  DomainRec rec;
  rec.next_volume = FirstVolumeId(id);
  for (uint32_t l = 0; l < luns; l++) {
    const uint32_t n = slices[l].count;
    const uint32_t m = std::min(per_lun, n > 1 ? n - 1 : n);
    for (uint32_t g = 0; g < m; g++) meta.push_back({l, slices[l].first + g});
    if (n > m) rec.data_groups.push_back({{l, slices[l].first + m}, n - m});
  }
  if (rec.data_groups.empty()) return Status::NoSpace("reserve too small for metadata and data");
  auto fs = MetaFs::Create(reserve, id, meta, o.metafs);
  if (!fs.ok()) return fs.status();
  {
    auto store = MetaStore::Open(fs->get(), o.store);
    if (!store.ok()) return store.status();
    MetaBatch b;
    b.Put(SuperKey(), EncodeDomain(rec));
    b.Put(HandleSecretKey(), EncodeHandleSecret(NewHandleSecret()));
    b.Put(FoldDoneKey(), std::string(1, '\x01'));  // born with the Unicode index
    NASGW_RETURN_IF_ERROR((*store)->Write(b, true));
  }
  fs->reset();
  return Open(reserve, id, o);
}

namespace {

// The intent log's size for a domain with `data_bytes` of data space.
uint64_t LogBytes(const DomainOptions& o, uint64_t data_bytes) {
  if (o.log_bytes != 0) return o.log_bytes;
  return std::clamp<uint64_t>(data_bytes / 32, IntentLog::kMinBytes, 256ull << 20);
}

}  // namespace

Result<std::unique_ptr<Domain>> Domain::Open(const std::shared_ptr<Reserve>& reserve, uint32_t id,
                                             const DomainOptions& o) {
  NASGW_RETURN_IF_ERROR(CheckDomainId(*reserve, id));
  auto impl = std::make_unique<Impl>();
  impl->reserve = reserve;
  impl->id = id;
  impl->unmap_freed = o.unmap_freed;
  impl->txg_interval_ms = std::max<uint32_t>(o.txg_interval_ms, 10);
  auto fs = MetaFs::Mount(reserve, id, o.metafs);
  if (!fs.ok()) return fs.status();
  impl->metafs = std::move(fs.value());
  // The metadata headroom (limits::kMetaHeadroomMaxBytes): half the
  // metadata space, so a compaction (whose output is at most its input, at
  // most the other half) always finds room; memtables a small part of it.
  const uint64_t meta_total = impl->metafs->total_bytes();
  impl->meta_floor = std::min(meta_total / 2, limits::kMetaHeadroomMaxBytes);
  MetaStoreOptions store_options = o.store;
  store_options.write_buffer_bytes =
      std::min(store_options.write_buffer_bytes, std::max(limits::kMetaWriteBufferMinBytes, meta_total / 16));
  store_options.read_only = o.read_only;
  store_options.before_flush = [i = impl.get()] { return i->BeforeFlush(); };
  auto store = MetaStore::Open(impl->metafs.get(), store_options);
  if (!store.ok()) return store.status();
  impl->store = std::move(store.value());
  auto load_rec = [&]() -> Result<DomainRec> {
    auto r = impl->store->Get(SuperKey());
    if (!r.ok()) return r.status().WithContext("domain record");
    return DecodeDomain(*r);
  };
  auto rec = load_rec();
  if (!rec.ok()) return rec.status();
  auto devices = [reserve](uint32_t lun) -> std::shared_ptr<block::BlockDevice> {
    return lun < reserve->lun_count() ? reserve->lun(lun) : nullptr;
  };
  IntentLogOptions log_options = o.log;
  log_options.want_checkpoint = [i = impl.get()] { i->WantTxg(); };
  log_options.read_only = o.read_only;
  HeldWrites held;  // logged writes to write once open
  if (rec->log_salt != 0) {
    // Replay what the log holds past the store's last flush (read-only:
    // count it; the owner replays it).
    uint64_t barrier = 0;
    auto b = impl->store->Get(LogBarrierKey());
    if (b.ok()) {
      auto lsn = DecodeLsn(*b);
      if (!lsn.ok()) return lsn.status();
      barrier = *lsn;
    } else if (b.status().code() != Code::kNotFound) {
      return b.status().WithContext("log barrier");
    }
    NASGW_RETURN_IF_ERROR(impl->LoadUpgradeState().WithContext("births upgrade"));
    Impl* i = impl.get();
    auto log = IntentLog::Open(
        devices, rec->log_extents, rec->log_salt,
        [&](uint64_t lsn, std::string_view entry) {
          if (o.read_only) {
            if (lsn > barrier || (!entry.empty() && entry[0] == kLogEntryData)) i->unreplayed++;
            return Status();
          }
          return i->ReplayEntry(lsn, entry, barrier, &held);
        },
        log_options);
    if (!log.ok()) return log.status().WithContext("intent log of domain " + std::to_string(id));
    if (!o.read_only) {
      impl->log = std::move(log.value());
      impl->log_ready = impl->log.get();
      if (impl->log->max_entry_bytes() < kLoggedWriteHeaderBytes + limits::kLogWriteBytesMax) {
        // A log made before its small fragments were left out: stable
        // writes past its record size go to their place (slower, as safe).
        NASGW_LOG(kWarn, "fs") << "intent log records are small: larger stable writes are written in place"
                               << Kv("domain", id)
                               << Kv("largest_logged_write", impl->log->max_entry_bytes() - kLoggedWriteHeaderBytes);
      }
      // Logged writes no flush put in place stay in the log until the end
      // of the open writes them.
      size_t logged_writes = 0;
      {
        MutexLock pinned(impl->pin_mu);
        for (const auto& [f, writes] : held) {
          for (const auto& [lsn, entry] : writes) impl->Pin(lsn, f);
          logged_writes += writes.size();
        }
      }
      if (impl->log->replayed() > 0) {
        NASGW_LOG(kInfo, "fs") << "intent log replayed" << Kv("domain", id) << Kv("entries", impl->log->replayed())
                               << Kv("logged_writes", logged_writes);
        // Make the replayed state a transaction group of its own.
        NASGW_RETURN_IF_ERROR(impl->store->Flush().WithContext("flush after replay"));
        NASGW_RETURN_IF_ERROR(impl->log->Checkpoint(impl->CheckpointLimit(impl->log->appended_lsn())));
        rec = load_rec();
        if (!rec.ok()) return rec.status();
      }
    }
  }
  WriterLock lock(impl->mu);  // not shared yet: for the analysis
  impl->rec = *rec;
  // The handle secret; a domain made before handles had MACs gets one now
  // (read-only, for checking, it goes without: its key verifies nothing).
  auto secret = impl->store->Get(HandleSecretKey());
  if (!secret.ok() && secret.status().code() == Code::kNotFound && !o.read_only) {
    MetaBatch b;
    b.Put(HandleSecretKey(), EncodeHandleSecret(NewHandleSecret()));
    NASGW_RETURN_IF_ERROR(impl->store->Write(b, true).WithContext("store the handle secret"));
    secret = impl->store->Get(HandleSecretKey());
  }
  if (secret.ok()) {
    if (secret->size() != 1 + kHandleSecretBytes || static_cast<uint8_t>((*secret)[0]) != kHandleSecretVersion) {
      return Status::Corruption("bad handle secret record");
    }
    auto key = HandleKey::FromSecret(std::string_view(*secret).substr(1));
    if (!key.ok()) return key.status();
    impl->handle_key = *key;
  } else if (secret.status().code() != Code::kNotFound) {
    return secret.status().WithContext("handle secret");
  }
  // Births on every versioned value (a domain made before snapshots gets
  // them now), before anything reads one.
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl->UpgradeBirths(o.read_only).WithContext("give metadata values their births"));
  lock.Lock();
  impl->space = std::make_unique<Allocator>(reserve->ag_bytes(), kDataBlock);
  for (const auto& [first, n] : impl->rec.data_groups) {
    for (uint32_t g = 0; g < n; g++) {
      NASGW_RETURN_IF_ERROR(
          impl->space->AddGroup({first.lun, first.index + g}, Reserve::AgOffset(reserve->ag_bytes(), first.index + g)));
    }
  }
  // Space in use is what the extent maps name, and the intent log.
  for (const Extent& e : impl->rec.log_extents) {
    NASGW_RETURN_IF_ERROR(impl->space->MarkUsed(e).WithContext("intent log extent"));
  }
  NASGW_RETURN_IF_ERROR(impl->LoadVolumes().WithContext("volume records"));
  Status bad;
  NASGW_RETURN_IF_ERROR(impl->store->Scan("E", "F", [&](std::string_view k, std::string_view v) {
    auto m = DecodeRecordMap(v);
    if (!m.ok() || k.size() < 5) {
      bad = m.ok() ? Status::Corruption("extent key") : m.status();
      return false;
    }
    impl->mu.AssertHeld();  // called here, under the lock above
    for (const RecordPiece& p : m->pieces) {
      if (impl->Borrowed(GetBE32(k, 1), p.birth)) continue;  // the origin's: marked there
      const Extent& e = p.ext;
      Status s = impl->space->MarkUsed(e);
      if (!s.ok()) {
        bad = s;
        return false;
      }
    }
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  // The snapshots, and the extents their dead lists keep.
  NASGW_RETURN_IF_ERROR(impl->LoadSnapshots().WithContext("snapshots"));
  if (impl->rec.log_salt == 0 && !o.read_only) {
    // A new domain, or one made before the intent log: give it one, in up
    // to four pieces on different LUNs (the allocator rotates over them).
    const uint64_t bytes = LogBytes(o, impl->space->total_bytes());
    const uint32_t pieces = std::max<uint32_t>(1, std::min<uint32_t>(4, static_cast<uint32_t>(reserve->lun_count())));
    const uint64_t piece = (bytes / pieces + kDataBlock - 1) / kDataBlock * kDataBlock;
    // A log record never spans two extents, so the smallest extent bounds
    // the largest record (and with it the largest logged write): a piece
    // the allocator split at a group's end leaves its small fragments out,
    // and more is taken until the log has its size. Only space too
    // fragmented for that makes the log use them.
    const uint64_t min_extent = IntentLogOptions{}.max_record_bytes;
    const uint64_t want = bytes + kLogSuperBytes;
    std::vector<Extent> extents, small;
    uint64_t kept = 0;
    for (uint32_t p = 0; p < pieces || (kept < want && p < pieces + 16); p++) {
      const uint64_t sb = extents.empty() ? kLogSuperBytes : 0;  // the superblocks open the first extent
      const uint64_t ask = p < pieces ? piece + sb : std::max(want - kept, min_extent + sb);
      auto got = impl->space->Allocate((ask + kDataBlock - 1) / kDataBlock * kDataBlock);
      if (!got.ok()) return got.status().WithContext("space for the intent log");
      for (const Extent& e : *got) {
        if (e.length >= min_extent + (extents.empty() ? sb : 0)) {
          extents.push_back(e);
          kept += e.length;
        } else {
          small.push_back(e);
        }
      }
    }
    if (kept < want) {
      extents.insert(extents.end(), small.begin(), small.end());
      small.clear();
      NASGW_LOG(kWarn, "fs") << "intent log made of small extents too: its records are small" << Kv("domain", id);
    }
    for (const Extent& e : small) NASGW_RETURN_IF_ERROR(impl->space->Free(e));
    uint64_t salt = 0;
    while (salt == 0) salt = NewGeneration();
    NASGW_RETURN_IF_ERROR(IntentLog::Format(devices, extents, salt).WithContext("format the intent log"));
    DomainRec next = impl->rec;
    next.log_salt = salt;
    next.log_extents = extents;
    MetaBatch b;
    b.Put(SuperKey(), EncodeDomain(next));
    NASGW_RETURN_IF_ERROR(impl->store->Write(b, true).WithContext("record the intent log"));
    impl->rec = next;
    auto log = IntentLog::Open(
        devices, extents, salt, [](uint64_t, std::string_view) { return Status(); }, log_options);
    if (!log.ok()) return log.status();
    impl->log = std::move(log.value());
    impl->log_ready = impl->log.get();
    NASGW_LOG(kInfo, "fs") << "intent log made" << Kv("domain", id) << Kv("bytes", bytes)
                           << Kv("pieces", extents.size());
  }
  if (impl->log) impl->StartTxgThread();
  // Files that were unlinked while open when the domain last stopped.
  std::vector<std::pair<uint32_t, uint64_t>> orphans;
  NASGW_RETURN_IF_ERROR(impl->store->Scan("O", "P", [&](std::string_view k, std::string_view) {
    if (k.size() != 13) {  // 'O', volume, inode
      bad = Status::Corruption("orphan key of " + std::to_string(k.size()) + " bytes");
      return false;
    }
    orphans.push_back({GetBE32(k, 1), GetBE64(k, 5)});
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  if (o.read_only) orphans.clear();  // the owner reclaims them when it opens the domain
  for (const auto& [vol, ino] : orphans) {
    // An orphan whose inode or volume is gone only needs its key removed;
    // one that cannot be read stops the open (dropping the key would leave
    // a nameless inode behind for good).
    auto in = impl->LoadInode(vol, ino);
    if (!in.ok() && in.status().code() != Code::kNotFound) return in.status().WithContext("orphan");
    auto v = impl->LoadVolume(vol);
    if (!v.ok() && v.status().code() != Code::kNotFound) return v.status().WithContext("orphan");
    Impl::Txn t;
    if (in.ok() && v.ok()) {
      NASGW_RETURN_IF_ERROR(impl->DropInode(t, vol, *in, *v).WithContext("remove orphan"));
      impl->PutVolume(t, vol, *v);
    }
    t.batch.Delete(OrphanKey(vol, ino));
    NASGW_RETURN_IF_ERROR(impl->Commit(t).WithContext("remove orphan"));
    lock.Unlock();
    NASGW_RETURN_IF_ERROR(impl->Durable(t).WithContext("remove orphan"));
    lock.Lock();
  }
  lock.Unlock();
  if (!o.read_only) {
    auto upgraded = impl->UpgradeFoldIndex();
    if (!upgraded.ok()) return upgraded.status().WithContext("upgrade the case-insensitive index");
    if (*upgraded > 0) {
      NASGW_LOG(kInfo, "fs") << "case-insensitive index rebuilt with Unicode case mapping" << Kv("domain", id)
                             << Kv("names", *upgraded);
    }
  }
  // Logged writes last, over the namespace as the log left it: those of a
  // file removed later find no file.
  NASGW_RETURN_IF_ERROR(impl->ApplyHeld(held));
  if (!o.read_only) {
    // Snapshot deletions a stop cut short are finished before anything else.
    std::vector<std::pair<uint32_t, uint32_t>> deleting;
    {
      ReaderLock l(impl->mu);
      for (const auto& [vol, ss] : impl->snaps) {
        for (const auto& [sid, sn] : ss) {
          if (sn.deleting) deleting.emplace_back(vol, sid);
        }
      }
    }
    for (const auto& [vol, sid] : deleting) {
      MutexLock one(impl->snap_delete_mu);
      auto freed = impl->ReleaseSnapshot(vol, sid);
      if (!freed.ok()) return freed.status().WithContext("finish deleting snapshot " + std::to_string(sid));
      NASGW_LOG(kInfo, "fs") << "snapshot deletion finished" << Kv("domain", id) << Kv("volume", vol) << Kv("id", sid)
                             << Kv("freed_bytes", freed->first);
    }
  }
  impl->meta_room_checks.store(true, std::memory_order_release);
  return std::unique_ptr<Domain>(new Domain(std::move(impl)));
}

const HandleKey& Domain::handle_key() const {
  return impl_->handle_key;
}

uint64_t Domain::txg() const {
  ReaderLock lock(impl_->mu);
  return impl_->rec.txg;
}

Status Domain::SyncTxg() {
  return impl_->SyncTxg(/*settle=*/true);
}

IntentLogStats Domain::LogStats() const {
  return impl_->log ? impl_->log->Stats() : IntentLogStats{};
}

Result<Domain::MirrorStart> Domain::AttachLogMirror(std::shared_ptr<LogMirror> m) {
  if (!impl_->log) return Status::FailedPrecondition("domain opened read-only: no intent log to mirror");
  MirrorStart s;
  s.salt = impl_->log->salt();
  s.session = impl_->log->session();
  s.acks = impl_->log->AttachMirror(std::move(m), &s.first_lsn);
  return s;
}

void Domain::DetachLogMirror(const LogMirror* m) {
  if (impl_->log) impl_->log->DetachMirror(m);
}

uint64_t Domain::unreplayed_log_entries() const {
  return impl_->unreplayed;
}

StatFs Domain::Statfs() {
  StatFs s;
  ReaderLock lock(impl_->mu);
  for (const auto& [vol, files] : impl_->vol_files) s.files += files;
  s.total_bytes = impl_->space->total_bytes();
  s.free_bytes = impl_->space->available_bytes();
  return s;
}

}  // namespace nasgw::fs
