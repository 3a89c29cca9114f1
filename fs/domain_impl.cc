// Domain::Impl: the commit path and the reads every module shares (fs/domain_impl.h).
#include "fs/domain_impl.h"

#include <algorithm>

#include "base/clock.h"
#include "base/coding.h"
#include "base/log.h"
#include "block/block_device.h"

namespace nasgw::fs {

using namespace keys;  // fs/keys.h: the keys and values of the metadata

Timespec Now() {
  uint64_t ns = WallNanos();
  return {static_cast<int64_t>(ns / 1'000'000'000ull), static_cast<uint32_t>(ns % 1'000'000'000ull)};
}

Status CheckName(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return Status::InvalidArgument("invalid name '" + name + "'");
  if (name.size() > kNameMax) return Status(Code::kInvalidArgument, "name longer than 255 bytes");
  if (name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
    return Status::InvalidArgument("name contains '/' or NUL");
  }
  return Status();
}

void Domain::Impl::Txn::Abandon(Allocator& a) {
  // Nothing names these extents yet. Free fails only for an extent that
  // is free already (a bug); then nothing leaks, so log it and go on.
  for (const Extent& e : allocated) {
    Status s = a.Free(e);
    if (!s.ok()) NASGW_LOG(kError, "fs") << "free of abandoned extent" << Kv("error", s.ToString());
  }
  allocated.clear();
}

Domain::Impl::~Impl() {
  StopTxgThread();
  if (log && log->health().ok()) {
    // An orderly close leaves nothing to replay.
    Status s = SyncTxg(/*settle=*/true);
    if (!s.ok()) NASGW_LOG(kWarn, "fs") << "last transaction group at close" << Kv("error", s.ToString());
  }
  log_ready = nullptr;
  log.reset();
  store.reset();
  metafs.reset();
}

Status Domain::Impl::Commit(Txn& t) {
  // Where nothing was applied, the extents the change allocated go back.
  auto nothing = [&](const Status& s) {
    t.Abandon(*space);
    return s.WithContext("commit metadata");
  };
  if (!log) return nothing(Status::NotSupported("domain opened read-only"));
  if (Status r = MetaRoom(t.essential); !r.ok()) return nothing(r);
  if (Status v = Version(t); !v.ok()) return nothing(v);
  if (t.ends_group) {
    DomainRec next = rec;
    next.txg++;
    t.batch.Put(SuperKey(), EncodeDomain(next));
  } else {
    t.batch.Put(SuperKey(), EncodeDomain(rec));
  }
  const size_t head = t.through != 0 ? kCoverHeaderBytes : 1;  // the entry's type (and cover)
  const size_t bytes = head + t.batch.Data().size();
  if (bytes > log->max_entry_bytes()) {
    // Too large for one log record (a volume or a huge file deleted): it
    // becomes durable by a flush of its own, with a barrier saying every
    // entry before it is in the store too.
    const uint64_t covered = log->appended_lsn();
    t.batch.Put(LogBarrierKey(), EncodeLsn(covered));
    if (Status a = store->Apply(t.batch); !a.ok()) return nothing(a);
    Status s = store->Flush();
    if (!s.ok()) {
      // Applied but maybe not durable: nothing later may be either.
      metafs->Poison(s.WithContext("a large change could not be flushed; reopen the domain"));
      return s.WithContext("commit metadata");
    }
    Status c = log->Checkpoint(CheckpointLimit(covered));
    if (!c.ok()) NASGW_LOG(kWarn, "fs") << "log checkpoint after a large change" << Kv("error", c.ToString());
    t.lsn = 0;
    if (t.through != 0) {
      // The maps are in the store; a cover of its own (no batch) tells a
      // replay that the file's logged writes up to `through` are in them.
      std::string cover = EncodeCover(t.covers, t.through);
      if (Status r = log->Reserve(cover.size()); r.ok()) {
        t.lsn = log->Append(std::move(cover));
      } else {
        t.through = 0;  // they stay pinned (and would be written again by a replay: harmless)
      }
    }
  } else {
    if (Status r = log->Reserve(bytes, t.txg); !r.ok()) return nothing(r);
    Status s = store->Apply(t.batch);
    if (!s.ok()) {
      log->Unreserve(bytes);
      return nothing(s);
    }
    std::string entry;
    entry.reserve(bytes);
    if (t.through != 0) {
      entry.append(EncodeCover(t.covers, t.through));
    } else {
      entry.push_back(kLogEntryMeta);
    }
    entry.append(t.batch.Data());
    t.lsn = log->Append(std::move(entry));
  }
  if (t.ends_group) rec.txg++;
  for (const auto& [vol, n] : t.pinned_data) snap_data_bytes[vol] += n;
  for (const auto& [vol, n] : t.pinned_meta) snap_meta_bytes[vol] += n;
  // Logged writes this change put in place, or whose file it removed: the
  // log need not keep them past this entry (a replay skips them: covered,
  // or no such file).
  if (t.through != 0) Unpin(t.covers, t.through);
  for (const LoggedFile& f : t.dropped) Unpin(f, UINT64_MAX);
  for (const auto& [vol, files] : t.vol_files) {
    if (files) {
      vol_files[vol] = *files;
    } else {
      vol_files.erase(vol);
      UnpinVolume(vol);
    }
  }
  return Status();
}

Status Domain::Impl::Durable(Txn& t) {
  if (t.lsn != 0) NASGW_RETURN_IF_ERROR(log->WaitAcknowledged(t.lsn).WithContext("commit metadata"));
  // The change is durable: its answer is success whatever happens to the
  // replaced extents. Free fails only for an extent already free (the
  // metadata disagreed with the free map); nothing leaks (free space is
  // recounted from the extent maps at the next open), but it is logged.
  // Reads that began before may still read the replaced extents: the
  // fence frees them once those are done.
  if (t.lsn != 0 && !t.to_free.empty() && log->durable_lsn() < t.lsn) {
    MutexLock l(unlogged_free_mu);
    unlogged_free.emplace_back(t.lsn, std::move(t.to_free));
  } else if (!t.to_free.empty()) {
    fence.Retire(std::move(t.to_free));
  }
  t.to_free.clear();
  RetireLogged();
  return Status();
}

void Domain::Impl::RetireLogged() {
  if (!log) return;
  std::vector<std::vector<Extent>> ready;
  const uint64_t durable = log->durable_lsn();  // before the leaf lock
  {
    MutexLock l(unlogged_free_mu);
    if (unlogged_free.empty()) return;
    while (!unlogged_free.empty() && unlogged_free.front().first <= durable) {
      ready.push_back(std::move(unlogged_free.front().second));
      unlogged_free.pop_front();
    }
  }
  for (auto& e : ready) fence.Retire(std::move(e));
}

void Domain::Impl::FreeNow(const std::vector<Extent>& extents) {
  for (const Extent& e : extents) {
    if (unmap_freed) Unmap(e);  // before Free: nobody can have reused it yet
    Status f = space->Free(e);
    if (!f.ok()) NASGW_LOG(kError, "fs") << "free after commit" << Kv("error", f.ToString());
  }
}

Status Domain::Impl::BeforeFlush() {
  IntentLog* l = log_ready.load();
  if (l == nullptr) return Status();  // opening: what is applied came from the log
  Status s = l->WaitDurable(l->appended_lsn());
  if (!s.ok()) metafs->Poison(s.WithContext("the intent log failed; the metadata store may not move past it"));
  return s;
}

Status Domain::Impl::SyncTxg(bool settle) {
  if (!log) return Status::NotSupported("domain opened read-only");
  MutexLock sync(sync_mu);
  // The store first, without the domain's lock: a change that waits for log
  // space waits holding it, and only this frees log space. Every entry
  // appended so far is applied (Commit applies, then appends); the
  // checkpoint stays before the oldest logged write not yet in place.
  const uint64_t covered = CheckpointLimit(log->appended_lsn());
  NASGW_RETURN_IF_ERROR(store->Flush().WithContext("flush the metadata store"));
  NASGW_RETURN_IF_ERROR(log->Checkpoint(covered));
  // Then the group's number, which new extents take as their birth.
  Txn t;
  {
    WriterLock l(mu);
    rec.txg++;
    t.essential = true;
    t.txg = true;
    Status s = Commit(t);
    if (!s.ok()) {
      rec.txg--;
      return s.WithContext("transaction group");
    }
  }
  NASGW_RETURN_IF_ERROR(Durable(t));
  if (!settle) return Status();
  const uint64_t numbered = CheckpointLimit(log->appended_lsn());
  NASGW_RETURN_IF_ERROR(store->Flush().WithContext("flush the metadata store"));
  return log->Checkpoint(numbered);
}

void Domain::Impl::WantTxg() {
  MutexLock l(txg_mu);
  txg_wanted = true;
  txg_cv.NotifyOne();
}

void Domain::Impl::StartTxgThread() {
  txg_thread = std::thread([this] {
    uint64_t synced = log->appended_lsn();
    uint64_t limit = CheckpointLimit(synced);  // where the last sync could move the checkpoint
    uint64_t last_ns = MonotonicNanos();
    const uint64_t interval_ns = uint64_t{txg_interval_ms} * 1'000'000;
    MutexLock l(txg_mu);
    while (!txg_stop) {
      txg_cv.WaitFor(txg_mu, std::chrono::milliseconds(txg_interval_ms),
                     [&]() REQUIRES(txg_mu) { return txg_stop || txg_wanted; });
      if (txg_stop) break;
      const bool wanted = txg_wanted;
      txg_wanted = false;
      l.Unlock();
      Status s;
      // The log asks when it fills; a sync that cannot move its checkpoint
      // (logged writes not yet in place pin it where the last one left it)
      // would only flush the store again: the cache's flusher syncs once
      // they are in place, and the interval still does.
      const bool due = MonotonicNanos() - last_ns >= interval_ns;
      const bool futile = wanted && !due && CheckpointLimit(log->appended_lsn()) <= limit;
      if (!futile && (wanted || log->appended_lsn() != synced)) {
        synced = log->appended_lsn();
        limit = CheckpointLimit(synced);
        s = SyncTxg();
        last_ns = MonotonicNanos();
      }
      RetireLogged();
      l.Lock();
      if (!s.ok()) {
        NASGW_LOG(kError, "fs") << "transaction group sync failed" << Kv("domain", id) << Kv("error", s.ToString());
        if (!log->health().ok()) break;  // nothing more can be synced
      }
    }
  });
}

void Domain::Impl::StopTxgThread() {
  {
    MutexLock l(txg_mu);
    txg_stop = true;
    txg_cv.NotifyAll();
  }
  if (txg_thread.joinable()) txg_thread.join();
}

Status Domain::Impl::ReplayEntry(uint64_t lsn, std::string_view entry, uint64_t barrier, HeldWrites* held) {
  const std::string where = "intent log entry " + std::to_string(lsn);
  std::string_view batch;
  if (entry.empty()) return Status::Corruption(where + " is empty");
  switch (entry[0]) {
    case kLogEntryMeta:
      batch = entry.substr(1);
      break;
    case kLogEntryData: {
      // Kept whatever the barrier: its bytes are in no map until a cover says so.
      auto w = DecodeLoggedWrite(entry);
      if (!w.ok()) return w.status().WithContext(where);
      (*held)[w->f].emplace(lsn, std::string(entry));
      return Status();
    }
    case kLogEntryCover: {
      LoggedFile f;
      uint64_t through = 0;
      NASGW_RETURN_IF_ERROR(DecodeCover(entry, &f, &through, &batch).WithContext(where));
      if (auto it = held->find(f); it != held->end()) {
        auto& writes = it->second;
        writes.erase(writes.begin(), writes.upper_bound(through));
        if (writes.empty()) held->erase(it);
      }
      break;
    }
    default:
      return Status::Corruption(where + " of unknown type");
  }
  if (lsn <= barrier || batch.empty()) return Status();  // in the store already (a large change's flush)
  auto b = MetaBatch::FromData(std::string(batch));
  if (!b.ok()) return b.status().WithContext(where);
  if (lsn <= old_format_through && upgraded) {
    // Written before the births upgrade, replayed over keys it has done:
    // they get birth 0 as the upgrade gave them.
    MetaBatch with;
    b->ForEach([&](bool put, std::string_view k, std::string_view v) {
      if (!put) {
        with.Delete(k);
      } else if (upgraded(k)) {
        std::string raw(v);
        PutBirth(&raw, 0);
        with.Put(k, raw);
      } else {
        with.Put(k, v);
      }
    });
    return store->Apply(with);
  }
  return store->Apply(*b);
}

Status Domain::Impl::ApplyHeld(HeldWrites& held) {
  std::map<uint64_t, const std::string*> order;  // every file's, by LSN
  for (const auto& [f, writes] : held) {
    for (const auto& [lsn, entry] : writes) order.emplace(lsn, &entry);
  }
  uint64_t applied = 0, skipped = 0;
  for (const auto& [lsn, entry] : order) {
    auto w = DecodeLoggedWrite(*entry);
    if (!w.ok()) return w.status();  // decoded once already
    const WritePiece piece{w->off, reinterpret_cast<const uint8_t*>(w->data.data()), w->data.size()};
    auto r = WritePieces(w->f.vol, w->f.ino, w->f.gen, {piece}, &w->mtime, nullptr, 1, lsn);
    if (r.ok()) {
      applied++;
      continue;
    }
    switch (r.status().code()) {
      case Code::kStale:
      case Code::kNotFound:
        skipped++;  // the file went after the write (its removal is in the log)
        Unpin(w->f, lsn);
        continue;
      case Code::kNoSpace:
        // The space its flush had reserved is free again after a restart,
        // so this is not expected: say so loudly, and go on opening.
        NASGW_LOG(kError, "fs") << "a logged write could not be replayed: no space" << Kv("domain", id)
                                << Kv("volume", w->f.vol) << Kv("ino", w->f.ino) << Kv("offset", w->off)
                                << Kv("bytes", w->data.size());
        Unpin(w->f, lsn);
        continue;
      default:
        return r.status().WithContext("replay a logged write to inode " + std::to_string(w->f.ino));
    }
  }
  if (!order.empty()) {
    NASGW_LOG(kInfo, "fs") << "logged writes replayed" << Kv("domain", id) << Kv("applied", applied)
                           << Kv("skipped", skipped);
  }
  held.clear();
  return Status();
}

void Domain::Impl::Pin(uint64_t lsn, const LoggedFile& f) {
  pins.emplace(lsn, f);
  pins_by_file[f].insert(lsn);
}

void Domain::Impl::Unpin(const LoggedFile& f, uint64_t through) {
  MutexLock l(pin_mu);
  auto it = pins_by_file.find(f);
  if (it == pins_by_file.end()) return;
  auto& lsns = it->second;
  while (!lsns.empty() && *lsns.begin() <= through) {
    pins.erase(*lsns.begin());
    lsns.erase(lsns.begin());
  }
  if (lsns.empty()) pins_by_file.erase(it);
}

void Domain::Impl::UnpinVolume(uint32_t vol) {
  MutexLock l(pin_mu);
  auto it = pins_by_file.lower_bound(LoggedFile{vol, 0, 0});
  while (it != pins_by_file.end() && it->first.vol == vol) {
    for (uint64_t lsn : it->second) pins.erase(lsn);
    it = pins_by_file.erase(it);
  }
}

uint64_t Domain::Impl::CheckpointLimit(uint64_t lsn) {
  MutexLock l(pin_mu);
  if (pins.empty()) return lsn;
  return std::min(lsn, pins.begin()->first - 1);
}

namespace {

// The head of a 'D' or 'C' entry: type, version, the file.
Encoder EntryHead(char type, const LoggedFile& f) {
  Encoder e;
  e.U8(static_cast<uint8_t>(type));
  e.U8(kLogEntryVersion);
  e.U32(f.vol);
  e.U64(f.ino);
  e.U64(f.gen);
  return e;
}

Status ReadEntryHead(Decoder& d, char type, LoggedFile* f) {
  const uint8_t t = d.U8(), version = d.U8();
  f->vol = d.U32();
  f->ino = d.U64();
  f->gen = d.U64();
  if (!d.ok() || t != static_cast<uint8_t>(type))
    return Status::Corruption(std::string("log entry '") + type + "': short or of another type");
  if (version != kLogEntryVersion)
    return Status::Corruption(std::string("log entry '") + type + "' of version " + std::to_string(version));
  return Status();
}

}  // namespace

std::string EncodeLoggedWrite(const LoggedFile& f, uint64_t off, const Timespec& mtime, const void* data, size_t n) {
  Encoder e = EntryHead(kLogEntryData, f);
  e.U64(off);
  e.U64(static_cast<uint64_t>(mtime.sec));
  e.U32(mtime.nsec);
  std::string s = e.Release();
  s.append(static_cast<const char*>(data), n);
  return s;
}

Result<LoggedWrite> DecodeLoggedWrite(std::string_view entry) {
  Decoder d(entry);
  LoggedWrite w;
  NASGW_RETURN_IF_ERROR(ReadEntryHead(d, kLogEntryData, &w.f));
  w.off = d.U64();
  w.mtime.sec = static_cast<int64_t>(d.U64());
  w.mtime.nsec = d.U32();
  if (!d.ok()) return Status::Corruption("logged write: short");
  w.data = d.View(d.remaining());
  if (w.data.empty() || w.off > kFileSizeMax || w.data.size() > kFileSizeMax - w.off || w.f.gen == 0 ||
      w.mtime.nsec >= 1'000'000'000u) {
    return Status::Corruption("logged write of inode " + std::to_string(w.f.ino) + " out of range");
  }
  return w;
}

std::string EncodeCover(const LoggedFile& f, uint64_t through) {
  Encoder e = EntryHead(kLogEntryCover, f);
  e.U64(through);
  return e.Release();
}

Status DecodeCover(std::string_view entry, LoggedFile* f, uint64_t* through, std::string_view* batch) {
  Decoder d(entry);
  NASGW_RETURN_IF_ERROR(ReadEntryHead(d, kLogEntryCover, f));
  *through = d.U64();
  if (!d.ok()) return Status::Corruption("cover entry: short");
  *batch = d.View(d.remaining());
  return Status();
}

void Domain::Impl::Unmap(const Extent& e) {
  auto dev = reserve->lun(e.lun);
  const auto& in = dev->info();
  if (!in.thin_provisioned) return;
  const uint64_t bs = in.block_size;
  uint64_t lba = e.offset / bs, left = e.length / bs;
  while (left > 0) {
    const uint64_t n = in.max_unmap_blocks ? std::min<uint64_t>(left, in.max_unmap_blocks) : left;
    Status s = block::UnmapSync(*dev, lba, n);
    if (!s.ok()) {
      // The extent is free in the domain either way; only the array keeps
      // its space until the blocks are written again.
      NASGW_LOG(kWarn, "fs") << "unmap failed" << Kv("lun", e.lun) << Kv("error", s.ToString());
      return;
    }
    lba += n;
    left -= n;
  }
}

Status Domain::Impl::LastLinkGone(Txn& t, uint32_t vol, Inode& in, VolumeRec& v) {
  auto it = open_count.find({vol, in.a.ino});
  if (it != open_count.end() && it->second > 0) {
    Touch(in, false);
    PutInode(t, vol, in);
    t.batch.Put(OrphanKey(vol, in.a.ino), "");
    return Status();
  }
  return DropInode(t, vol, in, v);
}

Status Domain::Impl::DropInode(Txn& t, uint32_t vol, const Inode& in, VolumeRec& v) {
  std::vector<std::string> xattrs;
  std::string xp = Prefix('X', vol, in.a.ino);
  NASGW_RETURN_IF_ERROR(store
                            ->Scan(xp, PrefixEnd(xp),
                                   [&](std::string_view k, std::string_view) {
                                     xattrs.emplace_back(k);
                                     return true;
                                   })
                            .WithContext("xattrs of inode " + std::to_string(in.a.ino)));
  auto recs = LoadRecords(vol, in.a.ino);
  if (!recs.ok()) return recs.status();
  t.batch.Delete(InodeKey(vol, in.a.ino));
  t.dropped.push_back({vol, in.a.ino, in.a.gen});
  for (const auto& k : xattrs) t.batch.Delete(k);
  for (auto& [r, m] : *recs) {
    t.batch.Delete(ExtentKey(vol, in.a.ino, r));
    t.Free(vol, m);
    v.bytes -= std::min(v.bytes, m.bytes());
  }
  v.files -= std::min<uint64_t>(v.files, 1);
  return Status();
}

Status Domain::Impl::data_reserve(uint64_t bytes) {
  Status s = space->Reserve(bytes);
  if (!s.ok()) return Status::NoSpace("volume full: " + std::string(s.message()));
  return Status();
}

Status Domain::Impl::MetaRoom(bool essential) const {
  if (essential || !meta_room_checks.load(std::memory_order_acquire)) return Status();
  const uint64_t free = metafs->free_bytes();
  if (free >= meta_floor) return Status();
  return Status::NoSpace("metadata space full: " + std::to_string(free >> 10) + " KiB of " +
                         std::to_string(metafs->total_bytes() >> 10) + " KiB free, " +
                         std::to_string(meta_floor >> 10) +
                         " KiB kept for the metadata store's own flushes and compactions; deletes are still accepted");
}

Result<VolumeRec> Domain::Impl::LoadVolume(uint32_t vol, uint64_t at) {
  auto v = GetAt(VolKey(vol), at);
  if (!v.ok()) {
    return v.status().code() == Code::kNotFound ? Status::NotFound("no volume " + std::to_string(vol)) : v.status();
  }
  return DecodeVolume(*v);
}

Result<Inode> Domain::Impl::LoadInode(uint32_t vol, uint64_t ino, uint64_t at) {
  auto v = GetAt(InodeKey(vol, ino), at);
  if (!v.ok()) {
    return v.status().code() == Code::kNotFound ? Status::NotFound("no inode " + std::to_string(ino)) : v.status();
  }
  return DecodeInode(ino, *v);
}

Result<Inode> Domain::Impl::LoadDir(uint32_t vol, uint64_t dir, uint64_t at) {
  auto d = LoadInode(vol, dir, at);
  if (!d.ok()) return d.status();
  if (d->a.type != FileType::kDirectory) return Status(Code::kNotDir, "inode " + std::to_string(dir));
  // A removed directory still open somewhere: nothing may be made, found or
  // listed in it (Linux answers ENOENT for a dead directory too).
  if (d->a.nlink == 0) return Status::NotFound("directory " + std::to_string(dir) + " was removed");
  return d;
}

Result<Dirent> Domain::Impl::LoadDirent(uint32_t vol, uint64_t dir, const std::string& name, uint64_t at) {
  auto v = GetAt(DirentKey(vol, dir, name), at);
  if (!v.ok()) {
    return v.status().code() == Code::kNotFound ? Status::NotFound("no entry '" + name + "'") : v.status();
  }
  return DecodeDirent(*v);
}

Result<bool> Domain::Impl::Has(std::string_view key) {
  auto v = store->Get(key);
  if (v.ok()) return true;
  if (v.status().code() == Code::kNotFound) return false;
  return v.status();
}

Status Domain::Impl::CheckNameFree(uint32_t vol, uint64_t dir, const std::string& name) {
  auto e = LoadDirent(vol, dir, name);
  if (e.ok()) return Status::Exists("'" + name + "' exists");
  return e.status().code() == Code::kNotFound ? Status() : e.status();
}

Result<bool> Domain::Impl::DirEmpty(uint32_t vol, uint64_t dir) {
  bool empty = true;
  std::string p = Prefix('D', vol, dir);
  Status s = store->Scan(p, PrefixEnd(p), [&](std::string_view, std::string_view) {
    empty = false;
    return false;
  });
  if (!s.ok()) return s.WithContext("scan directory " + std::to_string(dir));
  return empty;
}

Status Domain::Impl::ScanRecords(uint32_t vol, uint64_t ino, uint64_t from, uint64_t to,
                                 const std::function<bool(uint64_t, RecordMap&)>& fn, uint64_t at) {
  std::string p = Prefix('E', vol, ino);
  std::string end = to == UINT64_MAX ? PrefixEnd(p) : ExtentKey(vol, ino, to + 1);
  Status bad;
  Status s = ScanAt(ExtentKey(vol, ino, from), end, at, SIZE_MAX, [&](std::string_view k, std::string_view v) {
    if (k.size() != p.size() + 8) {
      bad = Status::Corruption("extent key of " + std::to_string(k.size()) + " bytes");
      return false;
    }
    const uint64_t r = GetBE64(k, p.size());
    auto m = DecodeRecordMap(v);
    if (!m.ok()) {
      bad = m.status().WithContext("record " + std::to_string(r));
      return false;
    }
    return fn(r, m.value());
  });
  if (s.ok()) s = bad;
  if (!s.ok()) return s.WithContext("extent maps of inode " + std::to_string(ino));
  return Status();
}

Result<std::map<uint64_t, RecordMap>> Domain::Impl::LoadRecords(uint32_t vol, uint64_t ino, uint64_t from, uint64_t to,
                                                                uint64_t at) {
  std::map<uint64_t, RecordMap> out;
  NASGW_RETURN_IF_ERROR(ScanRecords(
      vol, ino, from, to,
      [&](uint64_t r, RecordMap& m) {
        out[r] = std::move(m);
        return true;
      },
      at));
  return out;
}

Result<uint32_t> Domain::Impl::VolumeId(const std::string& name) {
  auto idb = store->Get(VolNameKey(name));
  if (!idb.ok()) {
    return idb.status().code() == Code::kNotFound ? Status::NotFound("no volume '" + name + "'")
                                                  : idb.status().WithContext("volume '" + name + "'");
  }
  if (idb->size() != 4) return Status::Corruption("volume name index of '" + name + "'");
  return GetBE32(*idb, 0);
}

}  // namespace nasgw::fs
