// A domain's volumes, and its online growth (fs/domain.h, "volumes", Grow).
#include <set>

#include "base/log.h"
#include "fs/domain_impl.h"

namespace nasgw::fs {

using namespace keys;  // fs/keys.h: the keys and values of the metadata

namespace {
VolumeInfo Info(const Domain::Impl& impl, uint32_t id, const VolumeRec& v) REQUIRES_SHARED(impl.mu) {
  VolumeInfo i{id, v.name, v.record_bytes, v.files, v.bytes, v.write_through, static_cast<Atime>(v.atime)};
  if (auto it = impl.snaps.find(id); it != impl.snaps.end()) {
    for (const auto& [sid, s] : it->second) i.snapshots += s.deleting ? 0 : 1;
  }
  if (auto it = impl.snap_data_bytes.find(id); it != impl.snap_data_bytes.end()) i.snapshot_bytes = it->second;
  if (v.origin_vol != 0) {
    // Names as they are now (a record that cannot be read shows the id).
    i.origin_volume = std::to_string(v.origin_vol);
    i.origin_snapshot = std::to_string(v.origin_snap);
    if (auto ov = impl.store->Get(VolKey(v.origin_vol)); ov.ok()) {
      if (auto o = DecodeVolume(*ov); o.ok()) i.origin_volume = o->name;
    }
    if (auto os = impl.store->Get(SnapshotKey(v.origin_vol, v.origin_snap)); os.ok()) {
      if (auto o = DecodeSnapshot(*os); o.ok()) i.origin_snapshot = o->name;
    }
  }
  return i;
}

Status CheckRecordBytes(uint32_t record_bytes) {
  if (record_bytes < kRecordBytesMin || record_bytes > kRecordBytesMax || (record_bytes & (record_bytes - 1))) {
    return Status::InvalidArgument("record size must be a power of two from 4 KiB to 1 MiB");
  }
  return Status();
}
}  // namespace

Result<VolumeInfo> Domain::CreateVolume(const std::string& name, uint32_t record_bytes) {
  NASGW_RETURN_IF_ERROR(CheckName(name));
  NASGW_RETURN_IF_ERROR(CheckRecordBytes(record_bytes));
  WriterLock lock(impl_->mu);
  auto taken = impl_->Has(VolNameKey(name));
  if (!taken.ok()) return taken.status().WithContext("volume '" + name + "'");
  if (*taken) return Status::Exists("volume '" + name + "' exists");
  NASGW_RETURN_IF_ERROR(impl_->VolumeIdLeft());
  const uint32_t id = impl_->rec.next_volume++;
  VolumeRec v;
  v.name = name;
  v.record_bytes = record_bytes;
  v.files = 1;
  Inode root;
  root.a.ino = kRootIno;
  root.a.gen = NewGeneration();
  root.a.type = FileType::kDirectory;
  root.a.mode = 0755;
  root.a.nlink = 2;
  root.a.atime = root.a.mtime = root.a.ctime = root.a.btime = Now();
  root.parent = kRootIno;
  Impl::Txn t;
  std::string idb;
  PutBE32(&idb, id);
  t.batch.Put(VolNameKey(name), idb);
  impl_->PutVolume(t, id, v);
  impl_->PutInode(t, id, root);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  const VolumeInfo info = Info(*impl_, id, v);
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t));
  return info;
}

Result<VolumeInfo> Domain::FindVolume(const std::string& name) {
  ReaderLock lock(impl_->mu);
  auto id = impl_->VolumeId(name);
  if (!id.ok()) return id.status();
  auto v = impl_->LoadVolume(*id);
  if (!v.ok()) return v.status();
  return Info(*impl_, *id, *v);
}

Result<std::vector<VolumeInfo>> Domain::ListVolumes() {
  ReaderLock lock(impl_->mu);
  std::vector<VolumeInfo> out;
  Status bad;
  NASGW_RETURN_IF_ERROR(impl_->store->Scan("V", "W", [&](std::string_view k, std::string_view val) {
    auto v = DecodeVolume(val);
    if (!v.ok() || k.size() != 5) {
      bad = v.ok() ? Status::Corruption("volume key of " + std::to_string(k.size()) + " bytes") : v.status();
      return false;
    }
    impl_->mu.AssertReaderHeld();  // the scan runs under the lock taken above
    out.push_back(Info(*impl_, GetBE32(k, 1), *v));
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  return out;
}

namespace {
// Volume `name`'s record, changed by `change(id, record)` under the domain's
// writer lock (it returns false when there is nothing to change), then
// committed; durable when this returns.
template <typename Change>
Result<VolumeInfo> ChangeVolume(Domain::Impl& impl, const std::string& name, Change change) {
  WriterLock lock(impl.mu);
  auto vid = impl.VolumeId(name);
  if (!vid.ok()) return vid.status();
  const uint32_t id = *vid;
  auto v = impl.LoadVolume(id);
  if (!v.ok()) return v.status();
  Result<bool> changed = change(id, *v);
  if (!changed.ok()) return changed.status();
  const VolumeInfo info = Info(impl, id, *v);
  if (*changed) {
    Domain::Impl::Txn t;
    impl.PutVolume(t, id, *v);
    NASGW_RETURN_IF_ERROR(impl.Commit(t));
    lock.Unlock();
    NASGW_RETURN_IF_ERROR(impl.Durable(t));
  }
  return info;
}
}  // namespace

Result<VolumeInfo> Domain::SetVolumeRecordBytes(const std::string& name, uint32_t record_bytes) {
  NASGW_RETURN_IF_ERROR(CheckRecordBytes(record_bytes));
  return ChangeVolume(*impl_, name, [&](uint32_t id, VolumeRec& v) -> Result<bool> {
    if (v.record_bytes == record_bytes) return false;
    // Record r of a file covers [r*rs, (r+1)*rs): a new size would
    // reinterpret every extent map. The byte counter is the extent maps'
    // sum; the scan makes sure even if a counter were off.
    bool has_extents = false;
    const std::string p = Prefix('E', id);
    NASGW_RETURN_IF_ERROR(impl_->store->Scan(p, PrefixEnd(p), [&](std::string_view, std::string_view) {
      has_extents = true;
      return false;
    }));
    if (v.bytes > 0 || has_extents) {
      return Status(Code::kFailedPrecondition,
                    "volume '" + name + "' holds data; the record size can only change while it is empty");
    }
    v.record_bytes = record_bytes;
    return true;
  });
}

Result<VolumeInfo> Domain::SetVolumeWriteThrough(const std::string& name, bool on) {
  auto v = ChangeVolume(*impl_, name, [&](uint32_t, VolumeRec& rec) -> Result<bool> {
    if (rec.write_through == on) return false;
    rec.write_through = on;
    return true;
  });
  if (!v.ok()) return v.status();
  MutexLock s(impl_->strict_mu);
  if (on) {
    impl_->strict_vols.insert(v->id);
  } else {
    impl_->strict_vols.erase(v->id);
  }
  return v;
}

bool Domain::VolumeWriteThrough(uint32_t vol) const {
  MutexLock s(impl_->strict_mu);
  return impl_->strict_vols.contains(vol);
}

Result<VolumeInfo> Domain::SetVolumeAtime(const std::string& name, Atime atime) {
  if (static_cast<uint8_t>(atime) > 2) return Status::InvalidArgument("unknown atime policy");
  auto v = ChangeVolume(*impl_, name, [&](uint32_t, VolumeRec& rec) -> Result<bool> {
    if (rec.atime == static_cast<uint8_t>(atime)) return false;
    rec.atime = static_cast<uint8_t>(atime);
    return true;
  });
  if (!v.ok()) return v.status();
  MutexLock s(impl_->strict_mu);
  if (atime == Atime::kRelatime) {
    impl_->vol_atime.erase(v->id);
  } else {
    impl_->vol_atime[v->id] = atime;
  }
  return v;
}

Atime Domain::VolumeAtime(uint32_t vol) const {
  MutexLock s(impl_->strict_mu);
  auto it = impl_->vol_atime.find(vol);
  return it == impl_->vol_atime.end() ? Atime::kRelatime : it->second;
}

const char* AtimeName(Atime a) {
  switch (a) {
    case Atime::kRelatime:
      return "relatime";
    case Atime::kStrict:
      return "strictatime";
    case Atime::kNever:
      return "noatime";
  }
  return "unknown";
}

bool ParseAtime(std::string_view name, Atime* out) {
  for (Atime a : {Atime::kRelatime, Atime::kStrict, Atime::kNever}) {
    if (name == AtimeName(a)) {
      *out = a;
      return true;
    }
  }
  return false;
}

bool AtimeDue(Atime policy, const Attr& a, Timespec now) {
  switch (policy) {
    case Atime::kNever:
      return false;
    case Atime::kStrict:
      return !(a.atime == now);  // as Linux: any other time, even a later one
    case Atime::kRelatime:
      // As Linux's relatime: when the last access is not after the last
      // change of content or attributes, or is a day old.
      return !(a.mtime < a.atime) || !(a.ctime < a.atime) || now.sec - a.atime.sec >= int64_t{24} * 3600;
  }
  return false;
}

Status Domain::DeleteVolume(const std::string& name, bool force) {
  // The id under the lock held for the delete: a volume deleted and made
  // again under the same name in between is the one deleted.
  WriterLock lock(impl_->mu);
  auto id = impl_->VolumeId(name);
  if (!id.ok()) return id.status();
  const uint32_t vol = *id;
  if (auto it = impl_->snaps.find(vol); it != impl_->snaps.end() && !it->second.empty()) {
    return Status(Code::kFailedPrecondition,
                  "volume '" + name + "' has " + std::to_string(it->second.size()) + " snapshot(s): delete them first");
  }
  std::string scheduled;
  const std::string sp = Prefix('A', vol);
  NASGW_RETURN_IF_ERROR(impl_->store->Scan(sp, PrefixEnd(sp), [&](std::string_view k, std::string_view) {
    scheduled += (scheduled.empty() ? "" : ", ") + std::string(k.substr(sp.size()));
    return true;
  }));
  if (!scheduled.empty()) {
    return Status(Code::kFailedPrecondition,
                  "volume '" + name + "' has snapshot schedules (" + scheduled + "): remove them first");
  }
  std::string exported;
  size_t exports = 0;
  Status bad;
  NASGW_RETURN_IF_ERROR(impl_->ScanExports([&](Result<ExportRec> r) {
    if (!r.ok()) {
      bad = r.status();
      return false;
    }
    if (r->vol == vol) {
      exported += (exported.empty() ? "" : ", ") + std::to_string(r->e.id);
      exports++;
    }
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  std::string shared;
  NASGW_RETURN_IF_ERROR(impl_->ScanShares([&](Result<ShareRec> r) {
    if (!r.ok()) {
      bad = r.status();
      return false;
    }
    if (r->vol == vol) shared += (shared.empty() ? "'" : ", '") + r->s.name + "'";
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  if (!exported.empty() || !shared.empty()) {
    std::string m = "volume '" + name + "' is";
    if (!exported.empty())
      m += " exported over NFS (" + std::string(exports == 1 ? "export " : "exports ") + exported + ")";
    if (!exported.empty() && !shared.empty()) m += " and";
    if (!shared.empty()) m += " shared over SMB (" + shared + ")";
    m += "; remove ";
    m += !exported.empty() && !shared.empty() ? "its exports and shares"
                                              : (!exported.empty() ? "its exports" : "its shares");
    return Status(Code::kFailedPrecondition, m + " first");
  }
  if (!force) {
    auto empty = impl_->DirEmpty(vol, kRootIno);
    if (!empty.ok()) return empty.status();
    if (!*empty) return Status(Code::kNotEmpty, "volume '" + name + "' is not empty (force deletes it with its files)");
  }
  // Every key of the volume goes in one batch; a scan that fails stops the
  // delete (a partial one would leave unreachable keys and leak extents).
  Impl::Txn t;
  for (char tag : {'I', 'D', 'C', 'F', 'G', 'X', 'E', 'O'}) {
    std::string p = Prefix(tag, vol);
    Status undecodable;
    NASGW_RETURN_IF_ERROR(impl_->store->Scan(p, PrefixEnd(p), [&](std::string_view k, std::string_view v) {
      t.batch.Delete(k);
      if (tag == 'E') {
        auto m = DecodeRecordMap(v);
        if (!m.ok()) {
          undecodable =
              m.status().WithContext(k.size() >= 13 ? "inode " + std::to_string(GetBE64(k, 5)) : "extent key");
          return false;
        }
        t.Free(vol, *m);
      }
      return true;
    }));
    NASGW_RETURN_IF_ERROR(undecodable);
  }
  t.batch.Delete(VolKey(vol));
  t.batch.Delete(VolNameKey(name));
  t.vol_files[vol] = std::nullopt;
  t.essential = true;                       // a delete: allowed into the metadata headroom
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));  // a clone's borrowed pieces stay (Version)
  impl_->clones.erase(vol);
  lock.Unlock();
  return impl_->Durable(t);
}

std::vector<AgId> Domain::allocation_groups() {
  std::vector<AgId> groups = impl_->metafs->groups();
  ReaderLock lock(impl_->mu);
  for (const auto& [first, n] : impl_->rec.data_groups) {
    for (uint32_t i = 0; i < n; i++) groups.push_back({first.lun, first.index + i});
  }
  return groups;
}

Result<uint64_t> Domain::Grow() {
  WriterLock lock(impl_->mu);
  // A LUN is covered once the domain holds any group of it, metadata or
  // data (a share of one group is all metadata).
  std::set<uint32_t> covered;
  for (const auto& [first, n] : impl_->rec.data_groups) covered.insert(first.lun);
  for (const AgId& g : impl_->metafs->groups()) covered.insert(g.lun);
  uint64_t added = 0;
  DomainRec next = impl_->rec;
  std::vector<AgId> fresh;
  for (uint32_t l = 0; l < impl_->reserve->lun_count(); l++) {
    if (covered.contains(l)) continue;
    const Reserve::Slice share = Reserve::AgSlice(impl_->reserve->ag_count(l), impl_->id, impl_->reserve->domains());
    if (share.count == 0) continue;
    next.data_groups.push_back({{l, share.first}, share.count});
    for (uint32_t g = 0; g < share.count; g++) fresh.push_back({l, share.first + g});
    added += uint64_t{share.count} * impl_->reserve->ag_bytes();
  }
  if (fresh.empty()) return uint64_t{0};
  // Record first, then use: a crash in between leaves groups recorded but
  // unused, never used but unrecorded.
  DomainRec saved = impl_->rec;
  impl_->rec = next;
  Impl::Txn t;
  t.essential = true;  // more room, not less
  Status s = impl_->Commit(t);
  if (!s.ok()) {
    impl_->rec = saved;
    return s;
  }
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t));
  for (const AgId& g : fresh) {
    NASGW_RETURN_IF_ERROR(impl_->space->AddGroup(g, Reserve::AgOffset(impl_->reserve->ag_bytes(), g.index)));
  }
  NASGW_LOG(kInfo, "fs") << "domain grew" << Kv("bytes", added) << Kv("groups", fresh.size());
  return added;
}

}  // namespace nasgw::fs
