// Snapshots (fs/domain.h, "snapshots"; the design is docs/snapshots.md):
// versions kept for them at commit, reads at a snapshot, create, list and
// delete with the dead-list rule, and the upgrade that gives every value its
// birth.
#include <algorithm>
#include <cctype>
#include <set>

#include "base/log.h"
#include "fs/domain_impl.h"

namespace nasgw::fs {

using namespace keys;  // fs/keys.h: the keys and values of the metadata

std::optional<uint64_t> Domain::Impl::NewestSnap(uint32_t vol) const {
  auto it = snaps.find(vol);
  if (it == snaps.end()) return std::nullopt;
  // Ids and groups grow together: the newest is the highest id not being
  // deleted (every commit asks, so this is not a walk of them all).
  for (auto s = it->second.rbegin(); s != it->second.rend(); ++s) {
    if (!s->second.deleting) return s->second.txg;
  }
  return std::nullopt;
}

Result<uint64_t> Domain::Impl::ReadAt(uint32_t vol, uint32_t snap) {
  if (snap == 0) return kLive;
  auto it = snaps.find(vol);
  if (it != snaps.end()) {
    auto s = it->second.find(snap);
    if (s != it->second.end() && !s->second.deleting) return s->second.txg;
  }
  return Status(Code::kStale, "snapshot " + std::to_string(snap) + " of volume " + std::to_string(vol) + " is gone");
}

Status Domain::Impl::Version(Txn& t) {
  const uint64_t kill = rec.txg + 1;  // the open group (rec.txg counts those synced)
  // Extents: kept on the dead list when a snapshot sees them (born no later
  // than the newest), else freed once the batch is durable.
  std::vector<std::pair<std::string, std::string>> dead;
  for (const Txn::Killed& x : t.killed) {
    if (Borrowed(x.vol, x.birth)) continue;  // the origin's snapshot holds it
    auto newest = NewestSnap(x.vol);
    if (newest && x.birth <= *newest) {
      dead.emplace_back(DeadExtentKey(x.vol, kill, x.birth, x.ext), EncodeU64(x.ext.length));
      t.pinned_data[x.vol] += static_cast<int64_t>(x.ext.length);
    } else {
      t.to_free.push_back(x.ext);
    }
  }
  t.killed.clear();
  if (!births || t.raw_values) {
    // Before the upgrade at open, when no snapshot can exist; or a rollback,
    // whose values carry their births and which replaces only what was
    // written after the newest snapshot.
    for (const auto& [k, v] : dead) t.batch.Put(k, v);
    return Status();
  }
  // Metadata: the batch again, each new value with its birth, and before a
  // key's first change in it the version it replaces, kept when a snapshot
  // sees it.
  MetaBatch out;
  std::set<std::string, std::less<>> seen;
  Status bad;
  t.batch.ForEach([&](bool put, std::string_view key, std::string_view value) {
    mu.AssertHeld();  // called here, under Commit's lock
    if (!bad.ok()) return;
    if (!HasBirth(key)) {
      if (put) {
        out.Put(key, value);
      } else {
        out.Delete(key);
      }
      return;
    }
    const uint32_t vol = GetBE32(key, 1);
    auto newest = NewestSnap(vol);
    if (newest && seen.emplace(key).second) {
      auto old = store->GetRaw(key);
      if (old.ok()) {
        if (old->size() < kBirthBytes) {
          bad = Status::Corruption("value of a " + std::string(key.substr(0, 1)) + " key is shorter than its birth");
          return;
        }
        const uint64_t birth = GetBirth(*old);
        if (birth <= *newest) {
          std::string hk = HistoryKey(key, kill);
          const uint64_t bytes = hk.size() + old->size();
          out.Put(DeadVersionKey(vol, kill, birth, hk), EncodeU64(bytes));
          out.Put(hk, *old);
          t.pinned_meta[vol] += static_cast<int64_t>(bytes);
        }
      } else if (old.status().code() != Code::kNotFound) {
        bad = old.status().WithContext("the version a change replaces");
        return;
      }
    }
    if (put) {
      std::string v(value);
      PutBirth(&v, kill);
      out.Put(key, v);
    } else {
      out.Delete(key);
    }
  });
  NASGW_RETURN_IF_ERROR(bad);
  for (const auto& [k, v] : dead) out.Put(k, v);
  t.batch = std::move(out);
  return Status();
}

Result<std::string> Domain::Impl::GetAt(std::string_view key, uint64_t at) {
  if (at == kLive) return store->Get(key);
  auto raw = store->GetRaw(key);
  if (raw.ok()) {
    if (raw->size() < kBirthBytes) return Status::Corruption("value shorter than its birth");
    if (GetBirth(*raw) <= at) {
      raw->resize(raw->size() - kBirthBytes);
      return raw;
    }
  } else if (raw.status().code() != Code::kNotFound) {
    return raw.status();
  }
  // The first version killed after `at`, if it was born by then.
  const std::string p = HistoryPrefix(key);
  std::string start = p;
  PutBE64(&start, at + 1);
  std::optional<std::string> found;
  Status bad;
  NASGW_RETURN_IF_ERROR(store->ScanRaw(start, PrefixEnd(p), [&](std::string_view k, std::string_view v) {
    if (k.size() == p.size() + 8 && v.size() >= kBirthBytes && GetBirth(v) <= at) {
      found = std::string(v.substr(0, v.size() - kBirthBytes));
    } else if (k.size() == p.size() + 8 && v.size() < kBirthBytes) {
      bad = Status::Corruption("history value shorter than its birth");
    }
    return false;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  if (!found) return Status::NotFound("key");
  return std::move(*found);
}

Status Domain::Impl::ScanAt(std::string_view begin, std::string_view end, uint64_t at, size_t max,
                            const std::function<bool(std::string_view, std::string_view)>& fn) {
  if (at == kLive) return store->Scan(begin, end, fn);
  // The live keys born by then (at most `max`), and the kept versions of
  // keys up to the last of those (or `end`): the two never name one key (a
  // kept version killed after `at` means the live one was born after it).
  std::map<std::string, std::string, std::less<>> got;
  std::optional<std::string> last;
  Status bad;
  NASGW_RETURN_IF_ERROR(store->ScanRaw(begin, end, [&](std::string_view k, std::string_view v) {
    if (v.size() < kBirthBytes) {
      bad = Status::Corruption("value shorter than its birth");
      return false;
    }
    if (GetBirth(v) > at) return true;
    got.emplace(k, v.substr(0, v.size() - kBirthBytes));
    if (got.size() >= max) {
      last = std::string(k);
      return false;
    }
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  const std::string hb = HistoryPrefix(begin);
  std::string he;
  if (last) {
    he = PrefixEnd(HistoryPrefix(*last));
  } else if (end.size() >= 5 && end.substr(0, 5) == begin.substr(0, 5)) {
    he = HistoryPrefix(end);
  } else {
    he = PrefixEnd(HistoryPrefix(begin.substr(0, 5)));
  }
  std::string current;
  bool settled = false;
  NASGW_RETURN_IF_ERROR(store->ScanRaw(hb, he, [&](std::string_view k, std::string_view v) {
    if (k.size() < 6 + 8 || v.size() < kBirthBytes) {
      bad = Status::Corruption("malformed history key");
      return false;
    }
    std::string live = LiveKey(k.substr(0, k.size() - 8));
    // A page that goes on after a key (begin = that key and a NUL) also
    // meets that key's own history: not in this page.
    if (std::string_view(live) < begin) return true;
    if (live != current) {
      current = live;
      settled = false;
    }
    if (settled || GetBE64(k, k.size() - 8) <= at) return true;
    settled = true;  // the first version killed after `at`: visible if born by then
    if (last && live > *last) return true;
    // Only the first `max` keys of the merge are wanted: past them, stop
    // (a page costs what it returns, not the directory's history).
    if (got.size() >= max && live > got.rbegin()->first) return false;
    if (GetBirth(v) <= at) {
      got.emplace(std::move(live), v.substr(0, v.size() - kBirthBytes));
      if (got.size() > max) got.erase(std::prev(got.end()));
    }
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  size_t n = 0;
  for (const auto& [k, v] : got) {
    if (n++ >= max || !fn(k, v)) break;
  }
  return Status();
}

Status Domain::Impl::LoadUpgradeState() {
  auto done = Has(BirthsDoneKey());
  if (!done.ok()) return done.status();
  auto lsn = store->Get(BirthsLogKey());
  if (!lsn.ok()) {
    if (lsn.status().code() != Code::kNotFound) return lsn.status().WithContext("births upgrade");
    return Status();  // not begun: every logged batch is older, and the upgrade does all their keys after
  }
  auto through = DecodeLsn(*lsn);
  if (!through.ok()) return through.status();
  old_format_through = *through;
  if (*done) {
    upgraded = HasBirth;
    return Status();
  }
  auto p = store->Get(BirthsProgressKey());
  if (p.ok()) {
    upgraded = [progress = *p](std::string_view k) { return HasBirth(k) && k <= progress; };
  } else if (p.status().code() != Code::kNotFound) {
    return p.status().WithContext("births upgrade progress");
  }
  return Status();
}

Status Domain::Impl::UpgradeBirths(bool read_only) {
  auto done = Has(BirthsDoneKey());
  if (!done.ok()) return done.status();
  if (*done) {
    store->SetBirths(HasBirth);
    births = true;
    return Status();
  }
  std::string progress;
  if (auto p = store->Get(BirthsProgressKey()); p.ok()) {
    progress = *p;
  } else if (p.status().code() != Code::kNotFound) {
    return p.status().WithContext("births upgrade progress");
  }
  if (read_only) {
    // Checking a domain its owner began to upgrade: the keys up to the
    // progress key have their births.
    if (!progress.empty()) {
      store->SetBirths([progress](std::string_view k) { return HasBirth(k) && k <= progress; });
    }
    return Status();
  }
  if (auto has = Has(BirthsLogKey()); !has.ok() || !*has) {
    if (!has.ok()) return has.status();
    MetaBatch b;
    b.Put(BirthsLogKey(), EncodeLsn(log ? log->appended_lsn() : 0));
    NASGW_RETURN_IF_ERROR(store->Write(b, true).WithContext("births upgrade"));
  }
  uint64_t given = 0;
  for (;;) {
    std::string from = progress.empty() ? std::string("C") : progress + std::string(1, '\0');
    MetaBatch b;
    size_t n = 0;
    std::string last;
    NASGW_RETURN_IF_ERROR(store->ScanRaw(from, "Y", [&](std::string_view k, std::string_view v) {
      if (!HasBirth(k)) return true;
      std::string raw(v);
      PutBirth(&raw, 0);
      b.Put(k, raw);
      last = std::string(k);
      return ++n < kBirthUpgradeBatch;
    }));
    if (n == 0) {
      MetaBatch fin;
      fin.Put(BirthsDoneKey(), std::string(1, '\x01'));
      fin.Delete(BirthsProgressKey());
      NASGW_RETURN_IF_ERROR(store->Write(fin, true).WithContext("births upgrade"));
      break;
    }
    b.Put(BirthsProgressKey(), last);
    NASGW_RETURN_IF_ERROR(store->Write(b, true).WithContext("births upgrade"));
    progress = last;
    given += n;
  }
  if (given > 0) {
    NASGW_LOG(kInfo, "fs") << "metadata values given their births (snapshots)" << Kv("domain", id) << Kv("keys", given);
  }
  store->SetBirths(HasBirth);
  births = true;
  return Status();
}

Status Domain::Impl::LoadSnapshots() {
  snaps.clear();
  snap_data_bytes.clear();
  snap_meta_bytes.clear();
  Status bad;
  NASGW_RETURN_IF_ERROR(store->Scan("W", "X", [&](std::string_view k, std::string_view v) {
    mu.AssertHeld();  // called here, under the caller's lock
    auto r = DecodeSnapshot(v);
    if (!r.ok() || k.size() != 9) {
      bad = r.ok() ? Status::Corruption("snapshot key of " + std::to_string(k.size()) + " bytes") : r.status();
      return false;
    }
    snaps[GetBE32(k, 1)][GetBE32(k, 5)] = {r->txg, r->deleting};
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  // What the dead lists pin: their extents are in use.
  NASGW_RETURN_IF_ERROR(store->Scan("Z", "[", [&](std::string_view k, std::string_view v) {
    mu.AssertHeld();  // called here, under the caller's lock
    auto d = DecodeDead(k, v);
    if (!d.ok()) {
      bad = d.status();
      return false;
    }
    if (d->kind == kDeadExtent) {
      snap_data_bytes[d->vol] += d->bytes;
      if (space) {
        if (Status s = space->MarkUsed(d->ext); !s.ok()) {
          bad = s.WithContext("dead extent");
          return false;
        }
      }
    } else {
      snap_meta_bytes[d->vol] += d->bytes;
    }
    return true;
  }));
  return bad;
}

Result<std::pair<uint64_t, uint64_t>> Domain::Impl::ReleaseSnapshot(uint32_t vol, uint32_t snap) {
  uint64_t freed_data = 0, freed_meta = 0;
  uint64_t kill_from = 0;
  for (;;) {
    WriterLock lock(mu);
    auto& vs = snaps[vol];
    auto me = vs.find(snap);
    if (me == vs.end()) return Status::NotFound("snapshot " + std::to_string(snap));
    const uint64_t S = me->second.txg;
    // Its neighbours among the snapshots still recorded (those being
    // deleted too: they release their own ranges).
    std::optional<uint64_t> P, N;
    for (const auto& [oid, o] : vs) {
      if (oid == snap) continue;
      if (o.txg < S && (!P || o.txg > *P)) P = o.txg;
      if (o.txg > S && (!N || o.txg < *N)) N = o.txg;
    }
    const uint64_t lo_birth = P ? *P + 1 : 0;
    if (kill_from <= S) kill_from = S + 1;
    // Dead entries killed in (S, N] and born in (P, S]: what only S sees.
    // Per kill group, one seek to its first entry born after P.
    const std::string vend = PrefixEnd(Prefix('Z', vol));
    std::vector<DeadEntry> batch;
    std::vector<std::string> batch_keys;
    Status bad;
    bool more = true;
    // Bounded by what it releases and by the kill groups it visits (each a
    // seek, perhaps releasing nothing), so the lock is let go often.
    size_t groups = 0;
    while (more && batch.size() < kReleaseBatch && groups++ < kReleaseBatch) {
      if (N && kill_from > *N) {
        more = false;
        break;
      }
      // The next kill group at or after kill_from.
      std::optional<uint64_t> group;
      NASGW_RETURN_IF_ERROR(store->ScanRaw(DeadPrefix(vol, kill_from), vend, [&](std::string_view k, std::string_view) {
        if (k.size() >= 13) group = GetBE64(k, 5);
        return false;
      }));
      if (!group || (N && *group > *N)) {
        more = false;
        break;
      }
      const std::string gend = PrefixEnd(DeadPrefix(vol, *group));
      bool group_done = true;
      NASGW_RETURN_IF_ERROR(
          store->ScanRaw(DeadPrefix(vol, *group, lo_birth), gend, [&](std::string_view k, std::string_view v) {
            auto d = DecodeDead(k, v);
            if (!d.ok()) {
              bad = d.status();
              return false;
            }
            if (d->birth > S) return false;  // births are in order: the rest are seen by later snapshots
            batch.push_back(std::move(*d));
            batch_keys.emplace_back(k);
            if (batch.size() >= kReleaseBatch) {
              group_done = false;
              return false;
            }
            return true;
          }));
      NASGW_RETURN_IF_ERROR(bad);
      if (group_done) kill_from = *group + 1;
    }
    Txn t;
    t.essential = true;
    for (size_t i = 0; i < batch.size(); i++) {
      const DeadEntry& d = batch[i];
      t.batch.Delete(batch_keys[i]);
      if (d.kind == kDeadExtent) {
        t.to_free.push_back(d.ext);
        t.pinned_data[vol] -= static_cast<int64_t>(d.bytes);
        freed_data += d.bytes;
      } else {
        t.batch.Delete(d.history_key);
        t.pinned_meta[vol] -= static_cast<int64_t>(d.bytes);
        freed_meta += d.bytes;
      }
    }
    if (!more) {
      // Everything released: the record goes in the same batch.
      auto r = store->Get(SnapshotKey(vol, snap));
      if (!r.ok()) return r.status().WithContext("snapshot record");
      auto rec_s = DecodeSnapshot(*r);
      if (!rec_s.ok()) return rec_s.status();
      t.batch.Delete(SnapshotKey(vol, snap));
      t.batch.Delete(SnapshotNameKey(vol, rec_s->name));
      NASGW_RETURN_IF_ERROR(Commit(t).WithContext("delete snapshot"));
      vs.erase(snap);
      if (vs.empty()) snaps.erase(vol);
      lock.Unlock();
      NASGW_RETURN_IF_ERROR(Durable(t).WithContext("delete snapshot"));
      return std::make_pair(freed_data, freed_meta);
    }
    NASGW_RETURN_IF_ERROR(Commit(t).WithContext("delete snapshot"));
    lock.Unlock();
    NASGW_RETURN_IF_ERROR(Durable(t).WithContext("delete snapshot"));
  }
}

namespace {
SnapshotInfo Info(uint32_t id, const SnapshotRec& r) {
  SnapshotInfo i;
  i.id = id;
  i.name = r.name;
  i.txg = r.txg;
  i.created = r.created;
  return i;
}
}  // namespace

Result<SnapshotInfo> Domain::CreateSnapshot(const std::string& volume, const std::string& name) {
  NASGW_RETURN_IF_ERROR(CheckName(name).WithContext("snapshot name"));
  WriterLock lock(impl_->mu);
  if (!impl_->births) return Status::NotSupported("domain opened read-only");
  auto vol = impl_->VolumeId(volume);
  if (!vol.ok()) return vol.status();
  auto v = impl_->LoadVolume(*vol);
  if (!v.ok()) return v.status();
  auto taken = impl_->Has(SnapshotNameKey(*vol, name));
  if (!taken.ok()) return taken.status();
  if (*taken) return Status::Exists("volume '" + volume + "' has a snapshot '" + name + "'");
  if (v->next_snap >= kSnapshotDir) return Status::NoSpace("volume '" + volume + "' has used every snapshot id");
  const uint32_t id = v->next_snap++;
  SnapshotRec r;
  r.name = name;
  r.txg = impl_->rec.txg + 1;  // the open group, which this batch closes
  r.created = Now();
  Impl::Txn t;
  t.ends_group = true;
  impl_->PutVolume(t, *vol, *v);
  t.batch.Put(SnapshotKey(*vol, id), EncodeSnapshot(r));
  std::string idb;
  PutBE32(&idb, id);
  t.batch.Put(SnapshotNameKey(*vol, name), idb);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t).WithContext("create snapshot"));
  impl_->snaps[*vol][id] = {r.txg, false};
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t).WithContext("create snapshot"));
  NASGW_LOG(kInfo, "fs") << "snapshot created" << Kv("volume", volume) << Kv("snapshot", name) << Kv("id", id)
                         << Kv("txg", r.txg);
  return Info(id, r);
}

Result<SnapshotInfo> Domain::SnapshotOf(uint32_t vol, const std::string& name) {
  ReaderLock lock(impl_->mu);
  auto idb = impl_->store->Get(SnapshotNameKey(vol, name));
  if (!idb.ok()) {
    return idb.status().code() == Code::kNotFound ? Status::NotFound("no snapshot '" + name + "'") : idb.status();
  }
  if (idb->size() != 4) return Status::Corruption("snapshot name index of '" + name + "'");
  const uint32_t id = GetBE32(*idb, 0);
  auto rv = impl_->store->Get(SnapshotKey(vol, id));
  if (!rv.ok()) return rv.status().WithContext("snapshot record");
  auto r = DecodeSnapshot(*rv);
  if (!r.ok()) return r.status();
  if (r->deleting) return Status::NotFound("snapshot '" + name + "' is being deleted");
  return Info(id, *r);
}

Result<SnapshotInfo> Domain::SnapshotById(uint32_t vol, uint32_t id) {
  ReaderLock lock(impl_->mu);
  auto rv = impl_->store->Get(SnapshotKey(vol, id));
  if (!rv.ok()) {
    return rv.status().code() == Code::kNotFound ? Status(Code::kStale, "snapshot " + std::to_string(id) + " is gone")
                                                 : rv.status().WithContext("snapshot record");
  }
  auto r = DecodeSnapshot(*rv);
  if (!r.ok()) return r.status();
  if (r->deleting) return Status(Code::kStale, "snapshot " + std::to_string(id) + " is being deleted");
  return Info(id, *r);
}

namespace {
// The snapshots of `vol` not being deleted, by id (which is their order).
Result<std::vector<SnapshotInfo>> ScanSnapshots(MetaStore& store, uint32_t vol) {
  std::vector<SnapshotInfo> out;
  Status bad;
  const std::string p = Prefix('W', vol);
  NASGW_RETURN_IF_ERROR(store.Scan(p, PrefixEnd(p), [&](std::string_view k, std::string_view v) {
    auto r = DecodeSnapshot(v);
    if (!r.ok() || k.size() != 9) {
      bad = r.ok() ? Status::Corruption("snapshot key") : r.status();
      return false;
    }
    if (!r->deleting) out.push_back(Info(GetBE32(k, 5), *r));
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  return out;
}
}  // namespace

Status Domain::Impl::Rollback(Txn& t, uint32_t vol, uint64_t S, RollbackInfo* info, std::vector<uint64_t>* orphans) {
  Status bad;
  auto too_big = [&]() {
    if (t.batch.Data().size() <= kRollbackBytesMax) return false;
    bad =
        Status::FailedPrecondition("the changes since the snapshot exceed " + std::to_string(kRollbackBytesMax >> 20) +
                                   " MiB of metadata, more than one rollback transaction may hold");
    return true;
  };
  // 1. What was written after S goes: every live key born after it (S saw
  // either nothing there or a version the history keeps), and the data
  // pieces born after it. Pieces born by S in a map written since are in
  // the version put back below (pieces never move between records).
  std::map<uint64_t, uint64_t> removed_inodes;  // ino -> generation
  for (char tag : {'C', 'D', 'E', 'G', 'I', 'X'}) {
    const std::string p = Prefix(tag, vol);
    NASGW_RETURN_IF_ERROR(store->ScanRaw(p, PrefixEnd(p), [&](std::string_view k, std::string_view v) {
      if (v.size() < kBirthBytes) {
        bad = Status::Corruption("value shorter than its birth");
        return false;
      }
      if (GetBirth(v) <= S) return true;
      const std::string_view value = v.substr(0, v.size() - kBirthBytes);
      if (tag == 'E') {
        auto m = DecodeRecordMap(value);
        if (!m.ok()) {
          bad = m.status().WithContext("rollback");
          return false;
        }
        for (const RecordPiece& piece : m->pieces) {
          if (piece.birth <= S) continue;
          t.Kill(vol, piece.ext, piece.birth);  // born after the newest snapshot: freed
          info->freed_bytes += piece.ext.length;
        }
      } else if (tag == 'I' && k.size() == 13) {
        auto in = DecodeInode(GetBE64(k, 5), value);
        if (!in.ok()) {
          bad = in.status().WithContext("rollback");
          return false;
        }
        removed_inodes[in->a.ino] = in->a.gen;
      }
      t.batch.Delete(k);
      info->removed_keys++;
      return !too_big();
    }));
    NASGW_RETURN_IF_ERROR(bad);
  }
  // 2. What S saw and a change since killed comes back: the dead entries
  // killed after S (all born by S: S is the newest snapshot and none is
  // being deleted). Extents are named again by the versions put back;
  // history versions become the live ones, with their births.
  std::set<std::string, std::less<>> restored;
  std::map<uint64_t, uint32_t> restored_nlink;
  const std::string zend = PrefixEnd(Prefix('Z', vol));
  NASGW_RETURN_IF_ERROR(store->ScanRaw(DeadPrefix(vol, S + 1), zend, [&](std::string_view k, std::string_view v) {
    auto d = DecodeDead(k, v);
    if (!d.ok()) {
      bad = d.status();
      return false;
    }
    if (d->birth > S) {
      bad = Status::Corruption("a dead entry born after the newest snapshot");
      return false;
    }
    if (d->kind == kDeadExtent) {
      t.batch.Delete(k);
      t.pinned_data[vol] -= static_cast<int64_t>(d->bytes);
      return !too_big();
    }
    const std::string live = LiveKey(std::string_view(d->history_key).substr(0, d->history_key.size() - 8));
    // The volume record keeps its settings and ids, and its counters are set
    // below; the version S saw stays in the history, for S.
    if (live == VolKey(vol)) return true;
    t.batch.Delete(k);
    t.pinned_meta[vol] -= static_cast<int64_t>(d->bytes);
    t.batch.Delete(d->history_key);
    // A key's first version killed after S is the one S saw (dead entries
    // are in kill order).
    if (!restored.insert(live).second) return !too_big();
    auto raw = store->GetRaw(d->history_key);
    if (!raw.ok()) {
      bad = raw.status().WithContext("history version to restore");
      return false;
    }
    if (raw->size() < kBirthBytes) {
      bad = Status::Corruption("history value shorter than its birth");
      return false;
    }
    if (live[0] == 'I' && live.size() == 13) {
      auto in = DecodeInode(GetBE64(live, 5), std::string_view(*raw).substr(0, raw->size() - kBirthBytes));
      if (!in.ok()) {
        bad = in.status().WithContext("rollback");
        return false;
      }
      restored_nlink[in->a.ino] = in->a.nlink;
    }
    t.batch.Put(live, *raw);
    info->restored_keys++;
    return !too_big();
  }));
  NASGW_RETURN_IF_ERROR(bad);
  // 3. The volume's counters as S saw them; its name, settings, and the
  // next inode number and snapshot id stay (no number is used twice).
  auto raw_v = store->GetRaw(VolKey(vol));
  if (!raw_v.ok()) return raw_v.status().WithContext("volume record");
  if (raw_v->size() < kBirthBytes) return Status::Corruption("volume record shorter than its birth");
  if (GetBirth(*raw_v) > S) {
    auto now = LoadVolume(vol);
    if (!now.ok()) return now.status();
    auto then = LoadVolume(vol, S);
    if (!then.ok()) return then.status().WithContext("volume record at the snapshot");
    now->files = then->files;
    now->bytes = then->bytes;
    std::string nv = EncodeVolume(*now);
    PutBirth(&nv, rec.txg + 1);
    t.batch.Put(VolKey(vol), nv);
    t.vol_files[vol] = now->files;
  }
  // 4. Orphan keys (not versioned) follow the inodes: a removed inode's
  // goes, a restored inode's goes when S saw it linked and comes back when
  // S saw it open but unlinked.
  const std::string op = Prefix('O', vol);
  std::set<uint64_t> has_orphan_key;
  NASGW_RETURN_IF_ERROR(store->ScanRaw(op, PrefixEnd(op), [&](std::string_view k, std::string_view) {
    if (k.size() != 13) {
      bad = Status::Corruption("orphan key of " + std::to_string(k.size()) + " bytes");
      return false;
    }
    const uint64_t ino = GetBE64(k, 5);
    has_orphan_key.insert(ino);
    auto r = restored_nlink.find(ino);
    if (r != restored_nlink.end() ? r->second > 0 : removed_inodes.contains(ino)) t.batch.Delete(k);
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  // A file gone with the rollback takes its logged writes with it; one put
  // back (the same number and generation) keeps them: they are placed after
  // the rollback, live and at a replay alike.
  for (const auto& [ino, gen] : removed_inodes) {
    if (!restored_nlink.contains(ino)) t.dropped.push_back({vol, ino, gen});
  }
  for (const auto& [ino, nlink] : restored_nlink) {
    if (nlink != 0) continue;
    if (!has_orphan_key.contains(ino)) t.batch.Put(OrphanKey(vol, ino), "");
    if (!open_count.contains({vol, ino})) orphans->push_back(ino);
  }
  return Status();
}

Result<RollbackInfo> Domain::RollbackSnapshot(const std::string& volume, const std::string& name) {
  MutexLock one(impl_->snap_delete_mu);  // no deletion meanwhile
  WriterLock lock(impl_->mu);
  if (!impl_->births) return Status::NotSupported("domain opened read-only");
  auto vol = impl_->VolumeId(volume);
  if (!vol.ok()) return vol.status();
  auto listed = ScanSnapshots(*impl_->store, *vol);
  if (!listed.ok()) return listed.status();
  const SnapshotInfo* target = nullptr;
  for (const SnapshotInfo& s : *listed) {
    if (s.name == name) target = &s;
  }
  if (target == nullptr) return Status::NotFound("volume '" + volume + "' has no snapshot '" + name + "'");
  std::string newer;
  for (const SnapshotInfo& s : *listed) {
    if (s.txg > target->txg) newer += (newer.empty() ? "'" : ", '") + s.name + "'";
  }
  if (!newer.empty()) {
    return Status::FailedPrecondition("volume '" + volume + "' has snapshots newer than '" + name + "' (" + newer +
                                      "): a rollback goes to the newest snapshot only; delete them first");
  }
  for (const auto& [sid, sn] : impl_->snaps[*vol]) {
    if (sn.deleting) {
      return Status::FailedPrecondition(
          "a snapshot of volume '" + volume +
          "' is still being deleted (its deletion failed part way); delete it again first");
    }
  }
  RollbackInfo info;
  info.snapshot = *target;
  std::vector<uint64_t> orphans;
  Impl::Txn t;
  t.essential = true;  // it gives back what it replaces
  t.raw_values = true;
  NASGW_RETURN_IF_ERROR(impl_->Rollback(t, *vol, target->txg, &info, &orphans).WithContext("rollback"));
  NASGW_RETURN_IF_ERROR(impl_->Commit(t).WithContext("rollback"));
  impl_->rollbacks[*vol]++;
  // Files the snapshot saw open but unlinked that nobody has open here are
  // reclaimed now, as at an open (the orphan keys stay if this fails).
  for (uint64_t ino : orphans) {
    auto in = impl_->LoadInode(*vol, ino);
    auto v = impl_->LoadVolume(*vol);
    if (!in.ok() || !v.ok()) break;
    Impl::Txn d;
    d.essential = true;
    if (!impl_->DropInode(d, *vol, *in, *v).ok()) break;
    d.batch.Delete(OrphanKey(*vol, ino));
    impl_->PutVolume(d, *vol, *v);
    if (!impl_->Commit(d).ok()) break;
    info.orphans++;
    t.lsn = std::max(t.lsn, d.lsn);
    t.to_free.insert(t.to_free.end(), d.to_free.begin(), d.to_free.end());
  }
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t).WithContext("rollback"));
  NASGW_LOG(kInfo, "fs") << "volume rolled back" << Kv("volume", volume) << Kv("snapshot", name)
                         << Kv("txg", target->txg) << Kv("removed_keys", info.removed_keys)
                         << Kv("restored_keys", info.restored_keys) << Kv("freed_bytes", info.freed_bytes);
  return info;
}

Status Domain::Impl::LoadVolumes() {
  clones.clear();
  vol_files.clear();
  Status bad;
  NASGW_RETURN_IF_ERROR(store->Scan("V", "W", [&](std::string_view k, std::string_view val) {
    mu.AssertHeld();  // called here, under the caller's lock
    auto v = DecodeVolume(val);
    if (!v.ok() || k.size() != 5) {
      bad = v.ok() ? Status::Corruption("volume key of " + std::to_string(k.size()) + " bytes") : v.status();
      return false;
    }
    const uint32_t vol = GetBE32(k, 1);
    vol_files[vol] = v->files;
    if (v->origin_vol != 0) clones[vol] = {v->origin_vol, v->origin_snap, v->origin_txg};
    MutexLock strict(strict_mu);
    if (v->write_through) strict_vols.insert(vol);
    if (v->atime != 0) vol_atime[vol] = static_cast<Atime>(v->atime);
    return true;
  }));
  return bad;
}

Result<VolumeInfo> Domain::CloneSnapshot(const std::string& volume, const std::string& snapshot,
                                         const std::string& clone) {
  NASGW_RETURN_IF_ERROR(CheckName(clone).WithContext("volume name"));
  MutexLock one(impl_->snap_delete_mu);  // the snapshot stays meanwhile
  WriterLock lock(impl_->mu);
  if (!impl_->births) return Status::NotSupported("domain opened read-only");
  auto vol = impl_->VolumeId(volume);
  if (!vol.ok()) return vol.status();
  auto idb = impl_->store->Get(SnapshotNameKey(*vol, snapshot));
  if (!idb.ok()) {
    return idb.status().code() == Code::kNotFound
               ? Status::NotFound("volume '" + volume + "' has no snapshot '" + snapshot + "'")
               : idb.status();
  }
  if (idb->size() != 4) return Status::Corruption("snapshot name index of '" + snapshot + "'");
  const uint32_t snap = GetBE32(*idb, 0);
  auto at = impl_->ReadAt(*vol, snap);
  if (!at.ok()) return Status::NotFound("snapshot '" + snapshot + "' is being deleted");
  const uint64_t S = *at;
  auto taken = impl_->Has(VolNameKey(clone));
  if (!taken.ok()) return taken.status();
  if (*taken) return Status::Exists("volume '" + clone + "' exists");
  auto then = impl_->LoadVolume(*vol, S);
  if (!then.ok()) return then.status().WithContext("volume record at the snapshot");
  VolumeRec cv;
  cv.name = clone;
  cv.record_bytes = then->record_bytes;
  cv.next_ino = then->next_ino;
  cv.files = then->files;
  cv.bytes = then->bytes;
  cv.origin_vol = *vol;
  cv.origin_snap = snap;
  cv.origin_txg = S;
  NASGW_RETURN_IF_ERROR(impl_->VolumeIdLeft());
  const uint32_t id = impl_->rec.next_volume;
  Impl::Txn t;
  Status bad;
  // The snapshot's keys under the clone's id. Files the snapshot saw open
  // but unlinked are left out: nobody has them open in the clone.
  std::set<uint64_t> left_out;
  auto copy = [&](char tag) -> Status {
    const std::string p = Prefix(tag, *vol), end = PrefixEnd(p);
    std::string from = p;
    for (;;) {
      size_t n = 0;
      std::string last;
      NASGW_RETURN_IF_ERROR(impl_->ScanAt(from, end, S, kRollbackBatch, [&](std::string_view k, std::string_view v) {
        n++;
        last = std::string(k);
        if (k.size() < 13) {
          bad = Status::Corruption("key of " + std::to_string(k.size()) + " bytes");
          return false;
        }
        const uint64_t ino = GetBE64(k, 5);
        if (tag == 'I') {
          auto in = DecodeInode(ino, v);
          if (!in.ok()) {
            bad = in.status().WithContext("clone");
            return false;
          }
          if (in->a.nlink == 0) {
            left_out.insert(ino);
            cv.files -= std::min<uint64_t>(cv.files, 1);
            return true;
          }
        } else if (left_out.contains(ino)) {
          if (tag == 'E') {
            auto m = DecodeRecordMap(v);
            if (!m.ok()) {
              bad = m.status().WithContext("clone");
              return false;
            }
            cv.bytes -= std::min(cv.bytes, m->bytes());
          }
          return true;
        }
        std::string key = Prefix(tag, id);
        key.append(k.substr(5));
        t.batch.Put(key, v);
        if (t.batch.Data().size() > kRollbackBytesMax) {
          bad =
              Status::FailedPrecondition("the snapshot's metadata exceeds " + std::to_string(kRollbackBytesMax >> 20) +
                                         " MiB, more than one clone transaction may hold");
          return false;
        }
        return true;
      }));
      NASGW_RETURN_IF_ERROR(bad);
      if (n < kRollbackBatch) return Status();
      from = last + std::string(1, '\0');
    }
  };
  for (char tag : {'I', 'C', 'D', 'E', 'G', 'X'}) NASGW_RETURN_IF_ERROR(copy(tag).WithContext("clone"));
  std::string idb2;
  PutBE32(&idb2, id);
  t.batch.Put(VolNameKey(clone), idb2);
  impl_->PutVolume(t, id, cv);
  impl_->rec.next_volume++;
  if (Status s = impl_->Commit(t); !s.ok()) {
    impl_->rec.next_volume--;
    return s.WithContext("clone");
  }
  impl_->clones[id] = {*vol, snap, S};
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t).WithContext("clone"));
  NASGW_LOG(kInfo, "fs") << "clone made" << Kv("volume", volume) << Kv("snapshot", snapshot) << Kv("clone", clone)
                         << Kv("id", id) << Kv("files", cv.files);
  return FindVolume(clone);
}

Result<std::vector<SnapshotInfo>> Domain::ListSnapshotsOf(uint32_t vol) {
  ReaderLock lock(impl_->mu);
  return ScanSnapshots(*impl_->store, vol);
}

Result<std::vector<SnapshotInfo>> Domain::ListSnapshots(const std::string& volume) {
  ReaderLock lock(impl_->mu);
  auto vol = impl_->VolumeId(volume);
  if (!vol.ok()) return vol.status();
  auto listed = ScanSnapshots(*impl_->store, *vol);
  if (!listed.ok()) return listed.status();
  std::vector<SnapshotInfo>& out = *listed;
  Status bad;
  std::sort(out.begin(), out.end(), [](const SnapshotInfo& a, const SnapshotInfo& b) { return a.txg < b.txg; });
  // What deleting each would free: a dead entry born in b and killed in k
  // is seen by the snapshots in [b, k); it is one's alone when only one is.
  std::vector<uint64_t> groups;
  std::map<uint64_t, size_t> by_group;
  if (auto it = impl_->snaps.find(*vol); it != impl_->snaps.end()) {
    for (const auto& [id, s] : it->second) groups.push_back(s.txg);
  }
  std::sort(groups.begin(), groups.end());
  for (size_t i = 0; i < out.size(); i++) by_group[out[i].txg] = i;
  const std::string zp = Prefix('Z', *vol);
  NASGW_RETURN_IF_ERROR(impl_->store->Scan(zp, PrefixEnd(zp), [&](std::string_view k, std::string_view v) {
    auto d = DecodeDead(k, v);
    if (!d.ok()) {
      bad = d.status();
      return false;
    }
    auto first = std::lower_bound(groups.begin(), groups.end(), d->birth);
    if (first == groups.end() || *first >= d->kill) return true;           // seen by none: a deletion under way
    if (first + 1 != groups.end() && *(first + 1) < d->kill) return true;  // shared
    auto it = by_group.find(*first);
    if (it == by_group.end()) return true;
    (d->kind == kDeadExtent ? out[it->second].frees_bytes : out[it->second].frees_meta_bytes) += d->bytes;
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  return out;
}

Result<SnapshotInfo> Domain::FindSnapshot(const std::string& volume, const std::string& name) {
  auto all = ListSnapshots(volume);
  if (!all.ok()) return all.status();
  for (auto& s : *all) {
    if (s.name == name) return std::move(s);
  }
  return Status::NotFound("volume '" + volume + "' has no snapshot '" + name + "'");
}

Status Domain::CheckSnapshot(uint32_t vol, uint32_t snap) {
  ReaderLock lock(impl_->mu);
  return impl_->ReadAt(vol, snap).status();
}

Result<SnapshotInfo> Domain::DeleteSnapshot(const std::string& volume, const std::string& name) {
  MutexLock one(impl_->snap_delete_mu);
  uint32_t vol = 0, id = 0;
  SnapshotRec r;
  {
    WriterLock lock(impl_->mu);
    if (!impl_->births) return Status::NotSupported("domain opened read-only");
    auto v = impl_->VolumeId(volume);
    if (!v.ok()) return v.status();
    vol = *v;
    auto idb = impl_->store->Get(SnapshotNameKey(vol, name));
    if (!idb.ok()) {
      return idb.status().code() == Code::kNotFound
                 ? Status::NotFound("volume '" + volume + "' has no snapshot '" + name + "'")
                 : idb.status();
    }
    if (idb->size() != 4) return Status::Corruption("snapshot name index of '" + name + "'");
    id = GetBE32(*idb, 0);
    std::string clones;
    for (const auto& [cid, o] : impl_->clones) {
      if (o.vol != vol || o.snap != id) continue;
      auto cv = impl_->LoadVolume(cid);
      clones += (clones.empty() ? "'" : ", '") + (cv.ok() ? cv->name : std::to_string(cid)) + "'";
    }
    if (!clones.empty()) {
      return Status::FailedPrecondition("snapshot '" + name + "' of volume '" + volume + "' has clones (" + clones +
                                        "): delete them first");
    }
    auto rv = impl_->store->Get(SnapshotKey(vol, id));
    if (!rv.ok()) return rv.status().WithContext("snapshot record");
    auto dec = DecodeSnapshot(*rv);
    if (!dec.ok()) return dec.status();
    r = *dec;
    if (!r.deleting) {
      // Gone to readers at once; a crash from here on is finished at open.
      r.deleting = true;
      Impl::Txn t;
      t.essential = true;
      t.batch.Put(SnapshotKey(vol, id), EncodeSnapshot(r));
      NASGW_RETURN_IF_ERROR(impl_->Commit(t).WithContext("delete snapshot"));
      impl_->snaps[vol][id].deleting = true;
      lock.Unlock();
      NASGW_RETURN_IF_ERROR(impl_->Durable(t).WithContext("delete snapshot"));
    }
  }
  auto freed = impl_->ReleaseSnapshot(vol, id);
  if (!freed.ok()) return freed.status();
  SnapshotInfo i = Info(id, r);
  i.frees_bytes = freed->first;
  i.frees_meta_bytes = freed->second;
  NASGW_LOG(kInfo, "fs") << "snapshot deleted" << Kv("volume", volume) << Kv("snapshot", name) << Kv("id", id)
                         << Kv("freed_bytes", i.frees_bytes);
  return i;
}

namespace {
Status CheckSchedule(const SnapshotSchedule& s) {
  if (s.name.empty() || s.name.size() > kScheduleNameMax) {
    return Status::InvalidArgument("schedule name must be 1-" + std::to_string(kScheduleNameMax) + " bytes");
  }
  for (char c : s.name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return Status::InvalidArgument("schedule name '" + s.name + "': letters, digits, '.', '_' and '-' only");
    }
  }
  if (s.every_s == 0 || s.every_s > kScheduleEveryMax) {
    return Status::InvalidArgument("a schedule runs every 1 s to 366 days");
  }
  if (s.keep == 0 || s.keep > kScheduleKeepMax) {
    return Status::InvalidArgument("a schedule keeps 1 to " + std::to_string(kScheduleKeepMax) + " snapshots");
  }
  return Status();
}
}  // namespace

Result<SnapshotSchedule> Domain::AddSnapshotSchedule(const std::string& volume, const SnapshotSchedule& spec) {
  NASGW_RETURN_IF_ERROR(CheckSchedule(spec));
  WriterLock lock(impl_->mu);
  auto vol = impl_->VolumeId(volume);
  if (!vol.ok()) return vol.status();
  auto taken = impl_->Has(ScheduleKey(*vol, spec.name));
  if (!taken.ok()) return taken.status();
  if (*taken) return Status::Exists("volume '" + volume + "' has a schedule '" + spec.name + "'");
  SnapshotSchedule s = spec;
  s.volume = volume;
  s.last_run = 0;
  Impl::Txn t;
  t.batch.Put(ScheduleKey(*vol, s.name), EncodeSchedule(s));
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t));
  return s;
}

Result<std::vector<SnapshotSchedule>> Domain::ListSnapshotSchedules() {
  ReaderLock lock(impl_->mu);
  std::map<uint32_t, std::string> names;  // volume ids to names
  Status bad;
  NASGW_RETURN_IF_ERROR(impl_->store->Scan("V", "W", [&](std::string_view k, std::string_view v) {
    auto rec = DecodeVolume(v);
    if (!rec.ok() || k.size() != 5) {
      bad = rec.ok() ? Status::Corruption("volume key") : rec.status();
      return false;
    }
    names[GetBE32(k, 1)] = rec->name;
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  std::vector<SnapshotSchedule> out;
  NASGW_RETURN_IF_ERROR(impl_->store->Scan("A", "B", [&](std::string_view k, std::string_view v) {
    auto s = DecodeSchedule(v);
    if (!s.ok() || k.size() < 6) {
      bad = s.ok() ? Status::Corruption("schedule key") : s.status();
      return false;
    }
    auto vn = names.find(GetBE32(k, 1));
    if (vn == names.end()) {
      bad = Status::Corruption("a snapshot schedule of a volume that does not exist");
      return false;
    }
    s->volume = vn->second;
    s->name = std::string(k.substr(5));
    out.push_back(std::move(*s));
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  return out;
}

namespace {
// The schedule `name` of `volume` changed by `change` (erase: removed).
template <typename Change>
Status ChangeSchedule(Domain::Impl& impl, const std::string& volume, const std::string& name, Change change) {
  WriterLock lock(impl.mu);
  auto vol = impl.VolumeId(volume);
  if (!vol.ok()) return vol.status();
  auto v = impl.store->Get(ScheduleKey(*vol, name));
  if (!v.ok()) {
    return v.status().code() == Code::kNotFound
               ? Status::NotFound("volume '" + volume + "' has no schedule '" + name + "'")
               : v.status();
  }
  auto s = DecodeSchedule(*v);
  if (!s.ok()) return s.status();
  Domain::Impl::Txn t;
  if (change(*s)) {
    t.batch.Put(ScheduleKey(*vol, name), EncodeSchedule(*s));
  } else {
    t.batch.Delete(ScheduleKey(*vol, name));
  }
  NASGW_RETURN_IF_ERROR(impl.Commit(t));
  lock.Unlock();
  return impl.Durable(t);
}
}  // namespace

Status Domain::RemoveSnapshotSchedule(const std::string& volume, const std::string& name) {
  return ChangeSchedule(*impl_, volume, name, [](SnapshotSchedule&) { return false; });
}

Status Domain::MarkScheduleRun(const std::string& volume, const std::string& name, int64_t when) {
  return ChangeSchedule(*impl_, volume, name, [&](SnapshotSchedule& s) {
    s.last_run = when;
    return true;
  });
}

}  // namespace nasgw::fs
