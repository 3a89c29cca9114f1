// fsck of a domain (Domain::Check, fs/domain.h).
#include <algorithm>
#include <map>
#include <set>

#include "fs/domain_impl.h"

namespace nasgw::fs {

using namespace keys;  // fs/keys.h: the keys and values of the metadata

Result<std::vector<std::string>> Domain::Check() {
  WriterLock lock(impl_->mu);
  std::vector<std::string> problems;
  auto add = [&](std::string p) {
    if (problems.size() < 1000) problems.push_back(std::move(p));
  };
  MetaStore& st = *impl_->store;
  // Whether the case-insensitive index is the Unicode one (fs/keys.h).
  auto fold_done_key = impl_->Has(FoldDoneKey());
  if (!fold_done_key.ok()) return fold_done_key.status();
  const bool fold_done = *fold_done_key;
  // Allocation groups: each inside this domain's share of its LUN
  // (Reserve::AgSlice; so never another domain's), none held twice.
  const Reserve& reserve = *impl_->reserve;
  std::set<AgId> groups_held;
  auto hold = [&](const AgId& g, const char* as) {
    const std::string at = std::string(as) + " group " + std::to_string(g.lun) + "/" + std::to_string(g.index);
    if (g.lun >= reserve.lun_count() || g.index >= reserve.ag_count(g.lun)) {
      add(at + " is not on the reserve");
      return;
    }
    const Reserve::Slice share = Reserve::AgSlice(reserve.ag_count(g.lun), impl_->id, reserve.domains());
    if (g.index < share.first || g.index >= share.first + share.count) {
      add(at + " is outside domain " + std::to_string(impl_->id) + "'s share of LUN " + std::to_string(g.lun) +
          " (groups " + std::to_string(share.first) + ".." + std::to_string(share.first + share.count) + ")");
    }
    if (!groups_held.insert(g).second) add(at + " is held twice");
  };
  for (const AgId& g : impl_->metafs->groups()) hold(g, "metadata");
  for (const auto& [first, n] : impl_->rec.data_groups) {
    for (uint32_t i = 0; i < n; i++) hold({first.lun, first.index + i}, "data");
  }
  if (impl_->rec.next_volume < FirstVolumeId(impl_->id) || impl_->rec.next_volume > LastVolumeId(impl_->id) + 1) {
    add("volume id counter " + std::to_string(impl_->rec.next_volume) + " is outside domain " +
        std::to_string(impl_->id) + "'s ids");
  }
  // Extents: inside the data groups, no block owned twice.
  Allocator fresh(impl_->reserve->ag_bytes(), kDataBlock);
  for (const auto& [first, n] : impl_->rec.data_groups) {
    for (uint32_t g = 0; g < n; g++) {
      NASGW_RETURN_IF_ERROR(
          fresh.AddGroup({first.lun, first.index + g}, Reserve::AgOffset(impl_->reserve->ag_bytes(), first.index + g)));
    }
  }
  uint64_t used = 0;
  // The intent log's space: inside the data groups, owned by nothing else.
  for (const Extent& e : impl_->rec.log_extents) {
    Status s = fresh.MarkUsed(e);
    if (!s.ok()) add("intent log extent: " + s.ToString());
    used += e.length;
  }
  struct Borrowed {
    uint32_t vol;
    uint64_t ino;
    Extent e;
  };
  std::vector<Borrowed> borrowed;
  NASGW_RETURN_IF_ERROR(st.Scan("E", "F", [&](std::string_view k, std::string_view v) {
    impl_->mu.AssertHeld();  // called here, under Check's lock
    if (k.size() != 21) {    // 'E', volume, inode, record
      add("extent key of " + std::to_string(k.size()) + " bytes");
      return true;
    }
    auto m = DecodeRecordMap(v);
    if (!m.ok()) {
      add("extent record " + std::to_string(GetBE64(k, 5)) + ": " + m.status().ToString());
      return true;
    }
    for (const RecordPiece& p : m->pieces) {
      const Extent& e = p.ext;
      if (impl_->Borrowed(GetBE32(k, 1), p.birth)) {
        borrowed.push_back({GetBE32(k, 1), GetBE64(k, 5), e});  // a clone's: its origin's snapshot holds it
        continue;
      }
      Status s = fresh.MarkUsed(e);
      if (!s.ok()) add("inode " + std::to_string(GetBE64(k, 5)) + ": " + s.ToString());
      used += e.length;
    }
    return true;
  }));
  // Snapshots (docs/snapshots.md): every dead extent is in the data groups
  // and owned by nothing else, every dead entry and history key name each
  // other, each entry is still seen by a snapshot, and the per-volume
  // totals match.
  std::map<uint32_t, std::vector<uint64_t>> snap_groups;
  const uint64_t synced = impl_->rec.txg;
  NASGW_RETURN_IF_ERROR(st.Scan("W", "X", [&](std::string_view k, std::string_view v) {
    auto r = DecodeSnapshot(v);
    if (!r.ok() || k.size() != 9) {
      add("snapshot record: " + (r.ok() ? "key of " + std::to_string(k.size()) + " bytes" : r.status().ToString()));
      return true;
    }
    const uint32_t vol = GetBE32(k, 1), id = GetBE32(k, 5);
    snap_groups[vol].push_back(r->txg);
    if (r->txg > synced) add("snapshot " + std::to_string(id) + " is of a group not yet begun");
    auto idb = st.Get(SnapshotNameKey(vol, r->name));
    if (!idb.ok() || idb->size() != 4 || GetBE32(*idb, 0) != id) {
      add("snapshot " + std::to_string(id) + " '" + r->name + "' is not in the name index");
    }
    return true;
  }));
  for (auto& [vol, g] : snap_groups) std::sort(g.begin(), g.end());
  std::map<uint32_t, uint64_t> dead_data, dead_meta;
  Status failed_dead;
  NASGW_RETURN_IF_ERROR(st.Scan("Z", "[", [&](std::string_view k, std::string_view v) {
    auto d = DecodeDead(k, v);
    if (!d.ok()) {
      add("dead entry: " + d.status().ToString());
      return true;
    }
    const std::string at = "volume " + std::to_string(d->vol) + " dead entry (" + std::to_string(d->birth) + ", " +
                           std::to_string(d->kill) + "]: ";
    const auto& g = snap_groups[d->vol];
    auto first = std::lower_bound(g.begin(), g.end(), d->birth);
    if (first == g.end() || *first >= d->kill) add(at + "no snapshot sees it (leaked)");
    if (d->kind == kDeadExtent) {
      Status s = fresh.MarkUsed(d->ext);
      if (!s.ok()) add(at + s.ToString());
      used += d->ext.length;
      dead_data[d->vol] += d->bytes;
    } else {
      dead_meta[d->vol] += d->bytes;
      auto h = st.GetRaw(d->history_key);
      if (!h.ok()) {
        if (h.status().code() != Code::kNotFound) {
          failed_dead = h.status();
          return false;
        }
        add(at + "its history key is missing");
      } else if (h->size() < kBirthBytes || GetBirth(*h) != d->birth || d->bytes != d->history_key.size() + h->size()) {
        add(at + "its history key does not match it");
      }
    }
    return true;
  }));
  NASGW_RETURN_IF_ERROR(failed_dead);
  // Clones: their origin snapshot is there, and holds (live or dead-listed)
  // every piece they borrow from it.
  for (const auto& [vol, o] : impl_->clones) {
    auto has = impl_->Has(SnapshotKey(o.vol, o.snap));
    if (!has.ok()) return has.status();
    if (!*has) add("clone volume " + std::to_string(vol) + ": its origin snapshot is gone");
  }
  for (const Borrowed& b : borrowed) {
    if (!fresh.Free(b.e).ok() || !fresh.MarkUsed(b.e).ok()) {
      add("clone volume " + std::to_string(b.vol) + " inode " + std::to_string(b.ino) +
          ": a piece it shares is not held by its origin");
    }
  }
  NASGW_RETURN_IF_ERROR(st.ScanRaw("Y", "Z", [&](std::string_view k, std::string_view v) {
    if (k.size() < 6 + 8 || v.size() < kBirthBytes) {
      add("history key of " + std::to_string(k.size()) + " bytes");
      return true;
    }
    auto has = impl_->Has(DeadVersionKey(GetBE32(k, 1), GetBE64(k, k.size() - 8), GetBirth(v), k));
    if (!has.ok()) {
      failed_dead = has.status();
      return false;
    }
    if (!*has) add("history key of volume " + std::to_string(GetBE32(k, 1)) + " has no dead entry");
    return true;
  }));
  NASGW_RETURN_IF_ERROR(failed_dead);
  NASGW_RETURN_IF_ERROR(st.Scan("A", "B", [&](std::string_view k, std::string_view v) {
    auto s = DecodeSchedule(v);
    if (!s.ok() || k.size() < 6) {
      add("snapshot schedule: " + (s.ok() ? std::string("key too short") : s.status().ToString()));
      return true;
    }
    auto named = impl_->Has(VolKey(GetBE32(k, 1)));
    if (!named.ok()) {
      failed_dead = named.status();
      return false;
    }
    if (!*named) add("snapshot schedule '" + std::string(k.substr(5)) + "' names a volume that does not exist");
    return true;
  }));
  NASGW_RETURN_IF_ERROR(failed_dead);
  // The counts kept in memory against what the dead lists hold, both ways.
  for (auto [kept, found] : {std::pair{&impl_->snap_data_bytes, &dead_data}, {&impl_->snap_meta_bytes, &dead_meta}}) {
    std::set<uint32_t> vols_seen;
    for (const auto& [vol, n] : *kept) vols_seen.insert(vol);
    for (const auto& [vol, n] : *found) vols_seen.insert(vol);
    for (uint32_t vol : vols_seen) {
      const uint64_t a = kept->count(vol) ? kept->at(vol) : 0, b = found->count(vol) ? found->at(vol) : 0;
      if (a != b) {
        add("volume " + std::to_string(vol) + ": snapshot space count is " + std::to_string(a) +
            " bytes, the dead lists hold " + std::to_string(b));
      }
    }
  }
  if (impl_->space->total_bytes() - impl_->space->free_bytes() != used) {
    add("free space count is off: the allocator has " +
        std::to_string(impl_->space->total_bytes() - impl_->space->free_bytes()) + " bytes in use, the extent maps " +
        std::to_string(used));
  }
  // Per volume: inodes, names, links.
  std::vector<uint32_t> vols;
  const uint32_t next_volume = impl_->rec.next_volume;
  NASGW_RETURN_IF_ERROR(st.Scan("V", "W", [&](std::string_view k, std::string_view) {
    if (k.size() != 5) {  // 'V', volume
      add("volume key of " + std::to_string(k.size()) + " bytes");
      return true;
    }
    const uint32_t vol = GetBE32(k, 1);
    if (VolumeDomain(vol) != impl_->id || vol >= next_volume) {
      add("volume " + std::to_string(vol) + " is not an id of domain " + std::to_string(impl_->id) +
          " below its counter " + std::to_string(next_volume));
    }
    vols.push_back(vol);
    return true;
  }));
  // A read that fails is the check's error, never a problem it reports (or
  // a problem it misses).
  for (uint32_t vol : vols) {
    auto v = impl_->LoadVolume(vol);
    if (!v.ok()) {
      if (v.status().code() != Code::kCorruption) return v.status();
      add("volume " + std::to_string(vol) + ": " + v.status().ToString());
      continue;
    }
    const std::string where = "volume '" + v->name + "': ";
    std::map<uint64_t, Inode> inodes;
    std::string ip = Prefix('I', vol);
    NASGW_RETURN_IF_ERROR(st.Scan(ip, PrefixEnd(ip), [&](std::string_view k, std::string_view val) {
      if (k.size() != 13) {  // 'I', volume, inode
        add(where + "inode key of " + std::to_string(k.size()) + " bytes");
        return true;
      }
      const uint64_t ino = GetBE64(k, 5);
      auto in = DecodeInode(ino, val);
      if (!in.ok()) {
        add(where + in.status().ToString());
      } else {
        inodes[ino] = *in;
        if (ino >= v->next_ino) add(where + "inode " + std::to_string(ino) + " is beyond the next inode number");
      }
      return true;
    }));
    std::map<uint64_t, uint32_t> names, subdirs;
    std::string dp = Prefix('D', vol);
    Status failed;
    NASGW_RETURN_IF_ERROR(st.Scan(dp, PrefixEnd(dp), [&](std::string_view k, std::string_view val) {
      if (k.size() < 14) {  // 'D', volume, directory, a name of at least a byte
        add(where + "entry key of " + std::to_string(k.size()) + " bytes");
        return true;
      }
      const uint64_t dir = GetBE64(k, 5);
      const std::string name(k.substr(13));
      auto e = DecodeDirent(val);
      const std::string at = where + "entry '" + name + "' in directory " + std::to_string(dir);
      if (!e.ok()) {
        add(at + ": " + e.status().ToString());
        return true;
      }
      auto d = inodes.find(dir);
      if (d == inodes.end() || d->second.a.type != FileType::kDirectory) add(at + ": the directory does not exist");
      auto in = inodes.find(e->ino);
      if (in == inodes.end()) {
        add(at + ": names missing inode " + std::to_string(e->ino));
        return true;
      }
      if (in->second.a.type != e->type) add(at + ": type differs from its inode");
      names[e->ino]++;
      if (e->type == FileType::kDirectory) {
        subdirs[dir]++;
        if (in->second.parent != dir)
          add(at + ": the directory's parent pointer is " + std::to_string(in->second.parent));
      }
      auto c = st.Get(CookieKey(vol, dir, e->cookie));
      if (!c.ok() && c.status().code() != Code::kNotFound) {
        failed = c.status();
        return false;
      }
      if (!c.ok() || *c != name) add(at + ": missing from the readdir index");
      if (fold_done) {
        auto folded = impl_->Has(FoldKey(vol, dir, name));
        if (!folded.ok()) {
          failed = folded.status();
          return false;
        }
        if (!*folded) add(at + ": missing from the case-insensitive index");
      }
      return true;
    }));
    NASGW_RETURN_IF_ERROR(failed);
    uint64_t cookies = 0, entries = 0;
    for (const auto& [ino, n] : names) entries += n;
    std::string cp = Prefix('C', vol);
    NASGW_RETURN_IF_ERROR(st.Scan(cp, PrefixEnd(cp), [&](std::string_view, std::string_view) {
      cookies++;
      return true;
    }));
    if (cookies != entries) {
      add(where + "readdir index has " + std::to_string(cookies) + " entries for " + std::to_string(entries) +
          " names");
    }
    uint64_t folded = 0;
    // The index's keys: 'G' once upgraded (fs/keys.h), before that the
    // ASCII 'F' index the owner's next open rebuilds.
    std::string fp = Prefix(fold_done ? 'G' : 'F', vol);
    NASGW_RETURN_IF_ERROR(st.Scan(fp, PrefixEnd(fp), [&](std::string_view, std::string_view) {
      folded++;
      return true;
    }));
    if (fold_done) {
      std::string old = Prefix('F', vol);
      uint64_t stale = 0;
      NASGW_RETURN_IF_ERROR(st.Scan(old, PrefixEnd(old), [&](std::string_view, std::string_view) {
        stale++;
        return true;
      }));
      if (stale != 0) add(where + std::to_string(stale) + " keys of the old ASCII case-insensitive index remain");
    }
    if (folded != entries) {
      add(where + "case-insensitive index has " + std::to_string(folded) + " entries for " + std::to_string(entries) +
          " names");
    }
    for (const auto& [ino, in] : inodes) {
      auto is_orphan = impl_->Has(OrphanKey(vol, ino));
      if (!is_orphan.ok()) return is_orphan.status();
      const bool orphan = *is_orphan;
      uint64_t want = in.a.type == FileType::kDirectory ? 2 + subdirs[ino] : names[ino];
      if (ino != kRootIno && names[ino] == 0 && !orphan) add(where + "inode " + std::to_string(ino) + " has no name");
      if (!orphan && in.a.nlink != want) {
        add(where + "inode " + std::to_string(ino) + " link count " + std::to_string(in.a.nlink) + ", should be " +
            std::to_string(want));
      }
      if (in.a.type == FileType::kRegular) {
        auto recs = impl_->LoadRecords(vol, ino);
        if (!recs.ok()) {
          if (recs.status().code() != Code::kCorruption) return recs.status();
          continue;  // the extent scan above reported the record
        }
        uint64_t held = 0;
        const std::string file = where + "inode " + std::to_string(ino);
        for (const auto& [r, m] : *recs) {
          const uint64_t start = r * v->record_bytes;
          // What the record may hold: up to the end's block in the last one.
          const uint64_t room =
              start >= in.a.size
                  ? 0
                  : std::min<uint64_t>(v->record_bytes, (in.a.size - start + kDataBlock - 1) / kDataBlock * kDataBlock);
          if (m.pieces.back().end() > room) {
            add(file + " has data past its end (record " + std::to_string(r) + ")");
          }
          held += m.bytes();
        }
        if (in.a.blocks != held / 512) {
          add(file + " counts " + std::to_string(in.a.blocks) + " blocks, its records hold " +
              std::to_string(held / 512));
        }
      }
    }
    if (v->files != inodes.size()) {
      add(where + "file count " + std::to_string(v->files) + ", inodes " + std::to_string(inodes.size()));
    }
  }
  // NFS exports: each decodes, names a volume, sits below the id counter,
  // and the pseudo-path index and the records name each other.
  const ExportIdRange export_ids = ExportIds(impl_->id, reserve.domains());
  auto next = impl_->NextExportId();
  if (!next.ok()) {
    if (next.status().code() != Code::kCorruption) return next.status();
    add("export id counter: " + next.status().ToString());
  } else if (*next < export_ids.first || *next > export_ids.last + 1) {
    add("export id counter " + std::to_string(*next) + " is outside domain " + std::to_string(impl_->id) + "'s ids " +
        std::to_string(export_ids.first) + ".." + std::to_string(export_ids.last));
  }
  std::map<std::string, uint32_t> pseudos;
  Status failed;
  NASGW_RETURN_IF_ERROR(impl_->ScanExports([&](Result<ExportRec> r) {
    if (!r.ok()) {
      add(r.status().ToString());
      return true;
    }
    const std::string at = "export " + std::to_string(r->e.id) + ": ";
    auto named = impl_->Has(VolKey(r->vol));
    if (!named.ok()) {
      failed = named.status();
      return false;
    }
    if (!*named) add(at + "names volume " + std::to_string(r->vol) + ", which does not exist");
    if (next.ok() && r->e.id >= *next) add(at + "is not below the id counter " + std::to_string(*next));
    if (r->e.id < export_ids.first || r->e.id > export_ids.last) add(at + "is not an id of this domain");
    if (!pseudos.emplace(r->e.pseudo, r->e.id).second) add(at + "pseudo path '" + r->e.pseudo + "' is used twice");
    return true;
  }));
  NASGW_RETURN_IF_ERROR(failed);
  uint64_t indexed = 0;
  NASGW_RETURN_IF_ERROR(st.Scan("Q", "R", [&](std::string_view k, std::string_view v) {
    indexed++;
    const std::string pseudo(k.substr(1));
    auto it = pseudos.find(pseudo);
    if (v.size() != 4 || it == pseudos.end() || it->second != GetBE32(v, 0)) {
      add("pseudo path index: '" + pseudo + "' does not match an export");
    }
    return true;
  }));
  if (indexed != pseudos.size()) {
    add("pseudo path index has " + std::to_string(indexed) + " entries for " + std::to_string(pseudos.size()) +
        " exports");
  }
  // SMB shares: each decodes, names a volume, and sits under its own name.
  NASGW_RETURN_IF_ERROR(st.Scan("B", "C", [&](std::string_view k, std::string_view v) {
    auto r = DecodeShare(v);
    if (!r.ok()) {
      add(r.status().ToString());
      return true;
    }
    const std::string at = "share '" + r->s.name + "': ";
    if (ShareKey(r->s.name) != k) add(at + "is stored under another name's key");
    auto named = impl_->Has(VolKey(r->vol));
    if (!named.ok()) {
      failed = named.status();
      return false;
    }
    if (!*named) add(at + "names volume " + std::to_string(r->vol) + ", which does not exist");
    return true;
  }));
  NASGW_RETURN_IF_ERROR(failed);
  return problems;
}

}  // namespace nasgw::fs
