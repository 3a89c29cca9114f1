#include "fs/domain.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "base/clock.h"
#include "base/coding.h"
#include "base/log.h"
#include "base/mutex.h"

namespace nasgw::fs {

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

constexpr uint64_t kDataBlock = 4096;  // data extents are whole 4 KiB blocks

// ---- key and value encoding --------------------------------------------------
// Keys are big-endian so that RocksDB's byte order is numeric order.

void PutBE32(std::string* s, uint32_t v) {
  for (int i = 3; i >= 0; i--) s->push_back(static_cast<char>(v >> (8 * i)));
}
void PutBE64(std::string* s, uint64_t v) {
  for (int i = 7; i >= 0; i--) s->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetBE64(std::string_view s, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

std::string Prefix(char tag, uint32_t vol) {
  std::string k(1, tag);
  PutBE32(&k, vol);
  return k;
}
std::string Prefix(char tag, uint32_t vol, uint64_t ino) {
  std::string k = Prefix(tag, vol);
  PutBE64(&k, ino);
  return k;
}
std::string SuperKey() {
  return "S";
}
std::string VolKey(uint32_t vol) {
  return Prefix('V', vol);
}
std::string VolNameKey(const std::string& name) {
  return "N" + name;
}
std::string InodeKey(uint32_t vol, uint64_t ino) {
  return Prefix('I', vol, ino);
}
std::string DirentKey(uint32_t vol, uint64_t dir, const std::string& name) {
  return Prefix('D', vol, dir) + name;
}
std::string CookieKey(uint32_t vol, uint64_t dir, uint64_t cookie) {
  std::string k = Prefix('C', vol, dir);
  PutBE64(&k, cookie);
  return k;
}
std::string XattrKey(uint32_t vol, uint64_t ino, const std::string& name) {
  return Prefix('X', vol, ino) + name;
}
std::string OrphanKey(uint32_t vol, uint64_t ino) {
  return Prefix('O', vol, ino);
}
// Case-folded name index for case-insensitive lookups (SMB): one key per
// entry, the folded name then the exact name, so names that differ only in
// case can coexist. Folding is ASCII only for now.
std::string Fold(const std::string& name) {
  std::string f = name;
  for (char& c : f) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return f;
}
std::string FoldPrefix(uint32_t vol, uint64_t dir, const std::string& name) {
  return Prefix('F', vol, dir) + Fold(name) + '\0';
}
std::string FoldKey(uint32_t vol, uint64_t dir, const std::string& name) {
  return FoldPrefix(vol, dir, name) + name;
}
std::string ExtentKey(uint32_t vol, uint64_t ino, uint64_t record) {
  std::string k = Prefix('E', vol, ino);
  PutBE64(&k, record);
  return k;
}
// NFS exports: the record by id, the pseudo-path index (unique), and the
// id counter (absent: no export was ever added, the next id is 1).
std::string ExportKey(uint32_t id) {
  std::string k(1, 'P');
  PutBE32(&k, id);
  return k;
}
std::string PseudoKey(const std::string& pseudo) {
  return "Q" + pseudo;
}
std::string ExportCounterKey() {
  return "R";
}
// The secret that keys handle MACs (fs/handle.h): u8 version, 32 bytes.
constexpr uint8_t kHandleSecretVersion = 1;
std::string HandleSecretKey() {
  return "H";
}
std::string EncodeHandleSecret(const std::string& secret) {
  return std::string(1, static_cast<char>(kHandleSecretVersion)) + secret;
}
uint32_t GetBE32(std::string_view s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}
// The first key after every key that starts with `p`.
std::string PrefixEnd(std::string p) {
  while (!p.empty() && static_cast<uint8_t>(p.back()) == 0xff) p.pop_back();
  if (!p.empty()) p.back() = static_cast<char>(static_cast<uint8_t>(p.back()) + 1);
  return p;
}

// Times are a u64 of seconds and a u32 of nanoseconds.
void PutTime(Encoder& e, const Timespec& t) {
  e.U64(static_cast<uint64_t>(t.sec));
  e.U32(t.nsec);
}
Timespec GetTime(Decoder& d) {
  Timespec t;
  t.sec = static_cast<int64_t>(d.U64());
  t.nsec = d.U32();
  return t;
}

constexpr uint8_t kRecordVersion = 1;

struct Inode {
  Attr a;
  uint64_t parent = 0;       // directories
  uint64_t next_cookie = 1;  // directories
  std::string symlink;
};

std::string EncodeInode(const Inode& in) {
  Encoder e;
  e.U8(kRecordVersion);
  e.U8(static_cast<uint8_t>(in.a.type));
  e.U32(in.a.mode);
  e.U32(in.a.uid);
  e.U32(in.a.gid);
  e.U32(in.a.nlink);
  e.U64(in.a.size);
  e.U64(in.a.blocks);
  e.U64(in.a.rdev);
  e.U64(in.a.gen);
  e.U64(in.a.change);
  PutTime(e, in.a.atime);
  PutTime(e, in.a.mtime);
  PutTime(e, in.a.ctime);
  PutTime(e, in.a.btime);
  e.U64(in.parent);
  e.U64(in.next_cookie);
  e.Str32(in.symlink);
  return e.Release();
}

Result<Inode> DecodeInode(uint64_t ino, std::string_view v) {
  Decoder d(v);
  Inode in;
  if (d.U8() != kRecordVersion) return Status::Corruption("inode " + std::to_string(ino) + ": unknown version");
  in.a.ino = ino;
  in.a.type = static_cast<FileType>(d.U8());
  in.a.mode = d.U32();
  in.a.uid = d.U32();
  in.a.gid = d.U32();
  in.a.nlink = d.U32();
  in.a.size = d.U64();
  in.a.blocks = d.U64();
  in.a.rdev = d.U64();
  in.a.gen = d.U64();
  in.a.change = d.U64();
  in.a.atime = GetTime(d);
  in.a.mtime = GetTime(d);
  in.a.ctime = GetTime(d);
  in.a.btime = GetTime(d);
  in.parent = d.U64();
  in.next_cookie = d.U64();
  in.symlink = d.Str32();
  if (!d.ok() || in.a.type == FileType::kNone || static_cast<uint8_t>(in.a.type) > 7) {
    return Status::Corruption("inode " + std::to_string(ino) + ": bad record");
  }
  return in;
}

struct Dirent {
  uint64_t ino = 0;
  FileType type = FileType::kNone;
  uint64_t cookie = 0;
};

std::string EncodeDirent(const Dirent& d) {
  Encoder e;
  e.U64(d.ino);
  e.U8(static_cast<uint8_t>(d.type));
  e.U64(d.cookie);
  return e.Release();
}

Result<Dirent> DecodeDirent(std::string_view v) {
  Decoder d(v);
  Dirent r{d.U64(), static_cast<FileType>(d.U8()), d.U64()};
  if (!d.ok()) return Status::Corruption("bad directory entry");
  return r;
}

struct RecordMap {
  uint64_t birth = 0;  // transaction group that wrote it
  std::vector<Extent> extents;
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const auto& e : extents) n += e.length;
    return n;
  }
};

std::string EncodeRecordMap(const RecordMap& r) {
  Encoder e;
  e.U64(r.birth);
  e.U32(static_cast<uint32_t>(r.extents.size()));
  for (const auto& x : r.extents) {
    e.U32(x.lun);
    e.U64(x.offset);
    e.U64(x.length);
  }
  return e.Release();
}

Result<RecordMap> DecodeRecordMap(std::string_view v) {
  Decoder d(v);
  RecordMap r;
  r.birth = d.U64();
  uint32_t n = d.U32();
  for (uint32_t i = 0; i < n && d.ok(); i++) r.extents.push_back({d.U32(), d.U64(), d.U64()});
  if (!d.ok() || n == 0) return Status::Corruption("bad extent record");
  return r;
}

struct VolumeRec {
  std::string name;
  uint32_t record_bytes = kRecordBytesDefault;
  uint64_t next_ino = kRootIno + 1;
  uint64_t files = 0;
  uint64_t bytes = 0;
};

std::string EncodeVolume(const VolumeRec& v) {
  Encoder e;
  e.U8(kRecordVersion);
  e.Str32(v.name);
  e.U32(v.record_bytes);
  e.U64(v.next_ino);
  e.U64(v.files);
  e.U64(v.bytes);
  return e.Release();
}

Result<VolumeRec> DecodeVolume(std::string_view s) {
  Decoder d(s);
  VolumeRec v;
  if (d.U8() != kRecordVersion) return Status::Corruption("volume record version");
  v.name = d.Str32();
  v.record_bytes = d.U32();
  v.next_ino = d.U64();
  v.files = d.U64();
  v.bytes = d.U64();
  if (!d.ok()) return Status::Corruption("bad volume record");
  return v;
}

// The domain's own record: counters and which allocation groups hold data.
struct DomainRec {
  uint64_t txg = 0;
  uint32_t next_volume = 1;
  std::vector<std::pair<AgId, uint32_t>> data_groups;  // (first group, count) per run
};

std::string EncodeDomain(const DomainRec& r) {
  Encoder e;
  e.U8(kRecordVersion);
  e.U64(r.txg);
  e.U32(r.next_volume);
  e.U32(static_cast<uint32_t>(r.data_groups.size()));
  for (const auto& [ag, n] : r.data_groups) {
    e.U32(ag.lun);
    e.U32(ag.index);
    e.U32(n);
  }
  return e.Release();
}

Result<DomainRec> DecodeDomain(std::string_view s) {
  Decoder d(s);
  DomainRec r;
  if (d.U8() != kRecordVersion) return Status::Corruption("domain record version");
  r.txg = d.U64();
  r.next_volume = d.U32();
  uint32_t n = d.U32();
  for (uint32_t i = 0; i < n && d.ok(); i++) {
    AgId ag{d.U32(), d.U32()};
    r.data_groups.push_back({ag, d.U32()});
  }
  if (!d.ok()) return Status::Corruption("bad domain record");
  return r;
}

// An export as stored: the volume by id (its identity; the name is looked up
// when the export is read) and the other fields of fs::Export. New
// fields go at the end under a new version; a decoder refuses versions it
// does not know rather than drop what it cannot read.
constexpr uint8_t kExportVersion = 1;

struct ExportRec {
  uint32_t vol = 0;
  Export e;  // e.volume is not stored
};

std::string EncodeExport(const ExportRec& r) {
  Encoder e;
  e.U8(kExportVersion);
  e.U32(r.vol);
  e.Str16(r.e.path);
  e.Str16(r.e.pseudo);
  e.U8(static_cast<uint8_t>((r.e.read_only ? 1 : 0) | (r.e.root_squash ? 2 : 0)));
  e.U8(static_cast<uint8_t>(r.e.protocols.size()));
  for (uint32_t p : r.e.protocols) e.U8(static_cast<uint8_t>(p));
  e.U8(static_cast<uint8_t>(r.e.sec.size()));
  for (const auto& s : r.e.sec) e.Str16(s);
  e.U16(static_cast<uint16_t>(r.e.clients.size()));
  for (const auto& c : r.e.clients) e.Str16(c);
  return e.Release();
}

Result<ExportRec> DecodeExport(uint32_t id, std::string_view v) {
  Decoder d(v);
  ExportRec r;
  const uint8_t version = d.U8();
  if (version != kExportVersion) {
    return Status::Corruption("export " + std::to_string(id) + ": unknown record version " + std::to_string(version));
  }
  r.e.id = id;
  r.vol = d.U32();
  r.e.path = d.Str16();
  r.e.pseudo = d.Str16();
  const uint8_t flags = d.U8();
  r.e.read_only = (flags & 1) != 0;
  r.e.root_squash = (flags & 2) != 0;
  r.e.protocols.clear();
  for (uint8_t i = 0, n = d.U8(); i < n && d.ok(); i++) r.e.protocols.push_back(d.U8());
  r.e.sec.clear();
  for (uint8_t i = 0, n = d.U8(); i < n && d.ok(); i++) r.e.sec.push_back(d.Str16());
  for (uint16_t i = 0, n = d.U16(); i < n && d.ok(); i++) r.e.clients.push_back(d.Str16());
  if (!d.done() || (flags & ~3) != 0) return Status::Corruption("export " + std::to_string(id) + ": bad record");
  return r;
}

std::string EncodeExportCounter(uint32_t next) {
  Encoder e;
  e.U8(kExportVersion);
  e.U32(next);
  return e.Release();
}

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

}  // namespace

// ---- the domain ----------------------------------------------------------------

struct Domain::Impl {
  std::shared_ptr<Reserve> reserve;
  uint32_t id = 0;
  std::unique_ptr<MetaFs> metafs;
  std::unique_ptr<MetaStore> store;
  std::unique_ptr<Allocator> space;  // data allocation groups
  bool unmap_freed = true;
  // Readers (lookups, attributes, reads) share it; changes hold it alone.
  mutable SharedMutex mu;
  DomainRec rec GUARDED_BY(mu);
  HandleKey handle_key;  // set at open, immutable after
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> open_count GUARDED_BY(mu);

  // Each volume's file count as committed, so that Statfs answers from
  // memory (no scan that could fail).
  std::map<uint32_t, uint64_t> vol_files GUARDED_BY(mu);

  // One change: a metadata batch plus the extents to free once it is durable.
  struct Txn {
    MetaBatch batch;
    std::vector<Extent> to_free;                            // replaced: free once the batch is durable
    std::vector<Extent> allocated;                          // new: free if the change is abandoned
    std::map<uint32_t, std::optional<uint64_t>> vol_files;  // volume records written (nullopt: deleted)
    void Abandon(Allocator& a) {
      // Nothing names these extents yet. Free fails only for an extent that
      // is free already (a bug); then nothing leaks, so log it and go on.
      for (const Extent& e : allocated) {
        Status s = a.Free(e);
        if (!s.ok()) NASGW_LOG(kError, "fs") << "free of abandoned extent" << Kv("error", s.ToString());
      }
      allocated.clear();
    }
  };

  void PutVolume(Txn& t, uint32_t vol, const VolumeRec& v) {
    t.batch.Put(VolKey(vol), EncodeVolume(v));
    t.vol_files[vol] = v.files;
  }

  Status Commit(Txn& t) REQUIRES(mu) {
    rec.txg++;
    t.batch.Put(SuperKey(), EncodeDomain(rec));
    Status s = store->Write(t.batch, /*sync=*/true);
    if (!s.ok()) {
      // Whether the batch landed is unknown; keeping the new extents
      // allocated is the safe side (a remount recounts the space).
      rec.txg--;
      return s.WithContext("commit metadata");
    }
    for (const auto& [vol, files] : t.vol_files) {
      if (files) {
        vol_files[vol] = *files;
      } else {
        vol_files.erase(vol);
      }
    }
    // The change is durable: its answer is success whatever happens to the
    // replaced extents. Free fails only for an extent already free (the
    // metadata disagreed with the free map); nothing leaks (free space is
    // recounted from the extent maps at the next open), but it is logged.
    for (const Extent& e : t.to_free) {
      if (unmap_freed) Unmap(e);  // before Free: nobody can have reused it yet
      Status f = space->Free(e);
      if (!f.ok()) NASGW_LOG(kError, "fs") << "free after commit" << Kv("error", f.ToString());
    }
    return Status();
  }

  // Best effort: a failed UNMAP only means the array keeps the space.
  void Unmap(const Extent& e) {
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

  Result<VolumeRec> LoadVolume(uint32_t vol) {
    auto v = store->Get(VolKey(vol));
    if (!v.ok()) {
      return v.status().code() == Code::kNotFound ? Status::NotFound("no volume " + std::to_string(vol)) : v.status();
    }
    return DecodeVolume(*v);
  }

  Result<Inode> LoadInode(uint32_t vol, uint64_t ino) {
    auto v = store->Get(InodeKey(vol, ino));
    if (!v.ok()) {
      return v.status().code() == Code::kNotFound ? Status::NotFound("no inode " + std::to_string(ino)) : v.status();
    }
    return DecodeInode(ino, *v);
  }

  Result<Inode> LoadDir(uint32_t vol, uint64_t dir) {
    auto d = LoadInode(vol, dir);
    if (!d.ok()) return d.status();
    if (d->a.type != FileType::kDirectory) return Status(Code::kNotDir, "inode " + std::to_string(dir));
    return d;
  }

  Result<Dirent> LoadDirent(uint32_t vol, uint64_t dir, const std::string& name) {
    auto v = store->Get(DirentKey(vol, dir, name));
    if (!v.ok()) {
      return v.status().code() == Code::kNotFound ? Status::NotFound("no entry '" + name + "'") : v.status();
    }
    return DecodeDirent(*v);
  }

  void PutInode(Txn& t, uint32_t vol, const Inode& in) { t.batch.Put(InodeKey(vol, in.a.ino), EncodeInode(in)); }

  static void Touch(Inode& in, bool content) {
    Timespec now = Now();
    in.a.ctime = now;
    if (content) in.a.mtime = now;
    in.a.change++;
  }

  // True if `key` exists; an error other than NotFound is returned as is
  // (a key that could not be read is neither there nor absent).
  Result<bool> Has(std::string_view key) {
    auto v = store->Get(key);
    if (v.ok()) return true;
    if (v.status().code() == Code::kNotFound) return false;
    return v.status();
  }

  // Exists if `name` is in the directory, ok if it is not, else why it
  // could not be told.
  Status CheckNameFree(uint32_t vol, uint64_t dir, const std::string& name) {
    auto e = LoadDirent(vol, dir, name);
    if (e.ok()) return Status::Exists("'" + name + "' exists");
    return e.status().code() == Code::kNotFound ? Status() : e.status();
  }

  // A failed scan is an error, never "empty": rmdir must not remove a
  // directory whose entries it could not see.
  Result<bool> DirEmpty(uint32_t vol, uint64_t dir) {
    bool empty = true;
    std::string p = Prefix('D', vol, dir);
    Status s = store->Scan(p, PrefixEnd(p), [&](std::string_view, std::string_view) {
      empty = false;
      return false;
    });
    if (!s.ok()) return s.WithContext("scan directory " + std::to_string(dir));
    return empty;
  }

  // Extent maps of records [from, to] (inclusive) of a file. A scan that
  // fails or a map that does not decode is an error, never a hole.
  Result<std::map<uint64_t, RecordMap>> LoadRecords(uint32_t vol, uint64_t ino, uint64_t from = 0,
                                                    uint64_t to = UINT64_MAX) {
    std::map<uint64_t, RecordMap> out;
    std::string p = Prefix('E', vol, ino);
    std::string end = to == UINT64_MAX ? PrefixEnd(p) : ExtentKey(vol, ino, to + 1);
    Status bad;
    Status s = store->Scan(ExtentKey(vol, ino, from), end, [&](std::string_view k, std::string_view v) {
      const uint64_t r = GetBE64(k, p.size());
      auto m = DecodeRecordMap(v);
      if (!m.ok()) {
        bad = m.status().WithContext("record " + std::to_string(r));
        return false;
      }
      out[r] = std::move(m.value());
      return true;
    });
    if (s.ok()) s = bad;
    if (!s.ok()) return s.WithContext("extent maps of inode " + std::to_string(ino));
    return out;
  }

  // The last name of `in` is gone: drop it now, or keep it as an orphan
  // until its last release if it is open.
  Status LastLinkGone(Txn& t, uint32_t vol, Inode& in, VolumeRec& v) REQUIRES(mu) {
    auto it = open_count.find({vol, in.a.ino});
    if (it != open_count.end() && it->second > 0) {
      Touch(in, false);
      PutInode(t, vol, in);
      t.batch.Put(OrphanKey(vol, in.a.ino), "");
      return Status();
    }
    return DropInode(t, vol, in, v);
  }

  // Drops an inode with no names left: its record, xattrs and data. Fails,
  // adding nothing the caller must commit, if it cannot see them all (a
  // partial drop would leave unreachable xattrs or leak extents).
  Status DropInode(Txn& t, uint32_t vol, const Inode& in, VolumeRec& v) {
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
    for (const auto& k : xattrs) t.batch.Delete(k);
    for (auto& [r, m] : *recs) {
      t.batch.Delete(ExtentKey(vol, in.a.ino, r));
      for (const Extent& e : m.extents) t.to_free.push_back(e);
      v.bytes -= std::min(v.bytes, m.bytes());
    }
    v.files -= std::min<uint64_t>(v.files, 1);
    return Status();
  }

  Status ReadExtents(const std::vector<Extent>& extents, uint64_t at, uint8_t* out, size_t n) {
    // Reads [at, at+n) of the concatenation of extents; at, n block aligned.
    uint64_t base = 0;
    size_t done = 0;
    for (const Extent& e : extents) {
      if (done == n) break;
      const uint64_t pos = at + done;
      if (pos >= base + e.length) {
        base += e.length;
        continue;
      }
      const uint64_t in = pos - base;
      const size_t k = static_cast<size_t>(std::min<uint64_t>(n - done, e.length - in));
      auto dev = reserve->lun(e.lun);
      NASGW_RETURN_IF_ERROR(block::ReadSync(*dev, (e.offset + in) / dev->info().block_size, out + done, k));
      done += k;
      base += e.length;
    }
    if (done < n) std::memset(out + done, 0, n - done);
    return Status();
  }

  Status WriteExtents(const std::vector<Extent>& extents, const uint8_t* data) {
    size_t done = 0;
    for (const Extent& e : extents) {
      auto dev = reserve->lun(e.lun);
      NASGW_RETURN_IF_ERROR(
          block::WriteSync(*dev, e.offset / dev->info().block_size, data + done, e.length, /*fua=*/true));
      done += e.length;
    }
    return Status();
  }

  // Rewrites records [first, last] of a file so that they hold `size` bytes
  // of content: new data `data` at file offset `off` (n bytes), old content
  // elsewhere, zeros past the old size. Allocates all new space before it
  // writes anything, so NoSpace changes nothing.
  Status RewriteRecords(Txn& t, uint32_t vol, Inode& in, VolumeRec& v, uint64_t first, uint64_t last, uint64_t new_size,
                        uint64_t off, const uint8_t* data, size_t n) REQUIRES(mu) {
    const uint64_t rs = v.record_bytes;
    auto loaded = LoadRecords(vol, in.a.ino, first, last);
    if (!loaded.ok()) return loaded.status();
    const auto& old = *loaded;
    uint64_t need = 0;
    for (uint64_t r = first; r <= last; r++) {
      const uint64_t start = r * rs;
      if (start >= new_size) break;
      need += (std::min(rs, new_size - start) + kDataBlock - 1) / kDataBlock * kDataBlock;
    }
    NASGW_RETURN_IF_ERROR(data_reserve(need));
    // Whatever the reservation does not turn into extents goes back, on
    // every way out of here.
    uint64_t taken = 0;
    struct Release {
      Allocator& a;
      uint64_t need;
      uint64_t& taken;
      ~Release() {
        if (need > taken) a.Unreserve(need - taken);
      }
    } release{*space, need, taken};
    std::vector<uint8_t> buf(rs);
    for (uint64_t r = first; r <= last; r++) {
      const uint64_t start = r * rs;
      if (start >= new_size) break;
      const uint64_t valid = std::min(rs, new_size - start);
      const uint64_t len = (valid + kDataBlock - 1) / kDataBlock * kDataBlock;
      std::fill(buf.begin(), buf.end(), 0);
      auto it = old.find(r);
      if (it != old.end()) {
        // Old content, up to the old size (a hole or past-EOF reads as zeros).
        const uint64_t old_valid = in.a.size > start ? std::min(rs, in.a.size - start) : 0;
        const uint64_t have =
            std::min<uint64_t>(it->second.bytes(), (old_valid + kDataBlock - 1) / kDataBlock * kDataBlock);
        NASGW_RETURN_IF_ERROR(ReadExtents(it->second.extents, 0, buf.data(), static_cast<size_t>(have)));
        if (old_valid < rs) std::memset(buf.data() + old_valid, 0, rs - old_valid);
      }
      if (valid < rs) std::memset(buf.data() + valid, 0, rs - valid);
      // The new bytes that fall into this record.
      if (n > 0 && off < start + rs && off + n > start) {
        const uint64_t from = std::max(off, start), to = std::min(off + n, start + rs);
        std::memcpy(buf.data() + (from - start), data + (from - off), to - from);
      }
      auto got = space->AllocateReserved(len);
      if (!got.ok()) return got.status();
      taken += len;
      RecordMap m{rec.txg + 1, *got};
      t.allocated.insert(t.allocated.end(), m.extents.begin(), m.extents.end());
      NASGW_RETURN_IF_ERROR(WriteExtents(m.extents, buf.data()));
      t.batch.Put(ExtentKey(vol, in.a.ino, r), EncodeRecordMap(m));
      in.a.blocks += len / 512;
      v.bytes += len;
      if (it != old.end()) {
        for (const Extent& e : it->second.extents) t.to_free.push_back(e);
        in.a.blocks -= std::min<uint64_t>(in.a.blocks, it->second.bytes() / 512);
        v.bytes -= std::min(v.bytes, it->second.bytes());
      }
    }
    return Status();
  }

  // ---- exports: mu held (shared for reads, exclusively for changes).
  Result<ExportRec> LoadExport(uint32_t export_id) REQUIRES_SHARED(mu) {
    auto v = store->Get(ExportKey(export_id));
    if (!v.ok()) {
      return v.status().code() == Code::kNotFound ? Status::NotFound("no export " + std::to_string(export_id))
                                                  : v.status();
    }
    return DecodeExport(export_id, *v);
  }

  // The export with its volume's name.
  Result<Export> Named(const ExportRec& r) REQUIRES_SHARED(mu) {
    auto v = LoadVolume(r.vol);
    if (!v.ok()) {
      if (v.status().code() != Code::kNotFound) return v.status().WithContext("export " + std::to_string(r.e.id));
      return Status::Corruption("export " + std::to_string(r.e.id) + " names volume " + std::to_string(r.vol) +
                                ", which does not exist");
    }
    Export e = r.e;
    e.volume = v->name;
    return e;
  }

  Result<uint32_t> NextExportId() REQUIRES_SHARED(mu) {
    auto v = store->Get(ExportCounterKey());
    if (!v.ok()) return v.status().code() == Code::kNotFound ? Result<uint32_t>(1u) : v.status();
    Decoder d(*v);
    const uint8_t version = d.U8();
    const uint32_t next = d.U32();
    if (version != kExportVersion || !d.done() || next == 0) return Status::Corruption("bad export id counter");
    return next;
  }

  // Every export record, by id; fn returns false to stop.
  Status ScanExports(const std::function<bool(Result<ExportRec>)>& fn) REQUIRES_SHARED(mu) {
    return store->Scan("P", "Q", [&](std::string_view k, std::string_view v) {
      if (k.size() != 5) return fn(Status::Corruption("export key of " + std::to_string(k.size()) + " bytes"));
      return fn(DecodeExport(GetBE32(k, 1), v));
    });
  }

  // NotFound unless `path` (normalised) is a directory of volume `vol`.
  Status CheckExportDir(uint32_t vol, const std::string& volume, const std::string& path) REQUIRES_SHARED(mu) {
    uint64_t dir = kRootIno;
    std::string walked;
    size_t at = 1;
    while (at < path.size()) {
      size_t end = path.find('/', at);
      if (end == std::string::npos) end = path.size();
      const std::string name = path.substr(at, end - at);
      at = end + 1;
      walked += "/" + name;
      auto e = LoadDirent(vol, dir, name);
      if (!e.ok()) {
        if (e.status().code() != Code::kNotFound) return e.status();
        return Status::NotFound("no directory '" + walked + "' in volume '" + volume + "'");
      }
      if (e->type != FileType::kDirectory) {
        return Status::NotFound("'" + walked + "' in volume '" + volume + "' is a " + FileTypeName(e->type) +
                                ", not a directory");
      }
      dir = e->ino;
    }
    return Status();
  }

  // The id of the volume called `name`: NotFound, or why it could not be read.
  Result<uint32_t> VolumeId(const std::string& name) REQUIRES_SHARED(mu) {
    auto idb = store->Get(VolNameKey(name));
    if (!idb.ok()) {
      return idb.status().code() == Code::kNotFound ? Status::NotFound("no volume '" + name + "'")
                                                    : idb.status().WithContext("volume '" + name + "'");
    }
    if (idb->size() != 4) return Status::Corruption("volume name index of '" + name + "'");
    return GetBE32(*idb, 0);
  }

  Status data_reserve(uint64_t bytes) {
    Status s = space->Reserve(bytes);
    if (!s.ok()) return Status::NoSpace("volume full: " + std::string(s.message()));
    return Status();
  }
};

Domain::Domain(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Domain::~Domain() = default;

Result<std::unique_ptr<Domain>> Domain::Create(const std::shared_ptr<Reserve>& reserve, uint32_t id,
                                               const DomainOptions& o) {
  // Metadata: the first groups of every LUN; data: the rest.
  uint64_t total = 0;
  for (uint32_t l = 0; l < reserve->lun_count(); l++) total += reserve->ag_count(l);
  uint32_t per_lun = o.meta_groups ? (o.meta_groups + reserve->lun_count() - 1) / reserve->lun_count()
                                   : static_cast<uint32_t>(std::max<uint64_t>(1, total / 16 / reserve->lun_count()));
  std::vector<AgId> meta;
  DomainRec rec;
  for (uint32_t l = 0; l < reserve->lun_count(); l++) {
    const uint32_t n = reserve->ag_count(l);
    const uint32_t m = std::min(per_lun, n > 1 ? n - 1 : n);
    for (uint32_t g = 0; g < m; g++) meta.push_back({l, g});
    if (n > m) rec.data_groups.push_back({{l, m}, n - m});
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
    NASGW_RETURN_IF_ERROR((*store)->Write(b, true));
  }
  fs->reset();
  return Open(reserve, id, o);
}

Result<std::unique_ptr<Domain>> Domain::Open(const std::shared_ptr<Reserve>& reserve, uint32_t id,
                                             const DomainOptions& o) {
  auto impl = std::make_unique<Impl>();
  impl->reserve = reserve;
  impl->id = id;
  impl->unmap_freed = o.unmap_freed;
  auto fs = MetaFs::Mount(reserve, id, o.metafs);
  if (!fs.ok()) return fs.status();
  impl->metafs = std::move(fs.value());
  MetaStoreOptions store_options = o.store;
  store_options.read_only = o.read_only;
  auto store = MetaStore::Open(impl->metafs.get(), store_options);
  if (!store.ok()) return store.status();
  impl->store = std::move(store.value());
  auto r = impl->store->Get(SuperKey());
  if (!r.ok()) return r.status().WithContext("domain record");
  auto rec = DecodeDomain(*r);
  if (!rec.ok()) return rec.status();
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
  impl->space = std::make_unique<Allocator>(reserve->ag_bytes(), kDataBlock);
  for (const auto& [first, n] : impl->rec.data_groups) {
    for (uint32_t g = 0; g < n; g++) {
      NASGW_RETURN_IF_ERROR(
          impl->space->AddGroup({first.lun, first.index + g}, Reserve::AgOffset(reserve->ag_bytes(), first.index + g)));
    }
  }
  // Space in use is what the extent maps name.
  Status bad;
  NASGW_RETURN_IF_ERROR(impl->store->Scan("E", "F", [&](std::string_view, std::string_view v) {
    auto m = DecodeRecordMap(v);
    if (!m.ok()) {
      bad = m.status();
      return false;
    }
    for (const Extent& e : m->extents) {
      Status s = impl->space->MarkUsed(e);
      if (!s.ok()) {
        bad = s;
        return false;
      }
    }
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  // Files that were unlinked while open when the domain last stopped.
  std::vector<std::pair<uint32_t, uint64_t>> orphans;
  NASGW_RETURN_IF_ERROR(impl->store->Scan("O", "P", [&](std::string_view k, std::string_view) {
    orphans.push_back(
        {static_cast<uint32_t>(GetBE64(std::string(4, '\0') + std::string(k.substr(1, 4)), 0)), GetBE64(k, 5)});
    return true;
  }));
  // Each volume's file count, for Statfs.
  std::map<uint32_t, uint64_t> vol_files;
  NASGW_RETURN_IF_ERROR(impl->store->Scan("V", "W", [&](std::string_view k, std::string_view val) {
    auto v = DecodeVolume(val);
    if (!v.ok() || k.size() != 5) {
      bad = v.ok() ? Status::Corruption("volume key of " + std::to_string(k.size()) + " bytes") : v.status();
      return false;
    }
    vol_files[GetBE32(k, 1)] = v->files;
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  impl->vol_files = std::move(vol_files);
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
  }
  return std::unique_ptr<Domain>(new Domain(std::move(impl)));
}

const HandleKey& Domain::handle_key() const {
  return impl_->handle_key;
}

uint64_t Domain::txg() const {
  ReaderLock lock(impl_->mu);
  return impl_->rec.txg;
}

// ---- volumes -------------------------------------------------------------------

namespace {
VolumeInfo Info(uint32_t id, const VolumeRec& v) {
  return {id, v.name, v.record_bytes, v.files, v.bytes};
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
  return Info(id, v);
}

Result<VolumeInfo> Domain::FindVolume(const std::string& name) {
  ReaderLock lock(impl_->mu);
  auto id = impl_->VolumeId(name);
  if (!id.ok()) return id.status();
  auto v = impl_->LoadVolume(*id);
  if (!v.ok()) return v.status();
  return Info(*id, *v);
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
    out.push_back(Info(GetBE32(k, 1), *v));
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  return out;
}

Result<VolumeInfo> Domain::SetVolumeRecordBytes(const std::string& name, uint32_t record_bytes) {
  NASGW_RETURN_IF_ERROR(CheckRecordBytes(record_bytes));
  WriterLock lock(impl_->mu);
  auto vid = impl_->VolumeId(name);
  if (!vid.ok()) return vid.status();
  const uint32_t id = *vid;
  auto v = impl_->LoadVolume(id);
  if (!v.ok()) return v.status();
  if (v->record_bytes == record_bytes) return Info(id, *v);
  // Record r of a file covers [r*rs, (r+1)*rs): a new size would reinterpret
  // every extent map. The byte counter is the extent maps' sum; the scan
  // makes sure even if a counter were off.
  bool has_extents = false;
  const std::string p = Prefix('E', id);
  NASGW_RETURN_IF_ERROR(impl_->store->Scan(p, PrefixEnd(p), [&](std::string_view, std::string_view) {
    has_extents = true;
    return false;
  }));
  if (v->bytes > 0 || has_extents) {
    return Status(Code::kFailedPrecondition,
                  "volume '" + name + "' holds data; the record size can only change while it is empty");
  }
  v->record_bytes = record_bytes;
  Impl::Txn t;
  impl_->PutVolume(t, id, *v);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  return Info(id, *v);
}

Status Domain::DeleteVolume(const std::string& name, bool force) {
  auto info = FindVolume(name);
  if (!info.ok()) return info.status();
  WriterLock lock(impl_->mu);
  const uint32_t vol = info->id;
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
  if (!exported.empty()) {
    return Status(Code::kFailedPrecondition, "volume '" + name + "' is exported over NFS (" +
                                                 (exports == 1 ? "export " : "exports ") + exported +
                                                 "); remove its exports first");
  }
  if (!force) {
    auto empty = impl_->DirEmpty(vol, kRootIno);
    if (!empty.ok()) return empty.status();
    if (!*empty) return Status(Code::kNotEmpty, "volume '" + name + "' is not empty (force deletes it with its files)");
  }
  // Every key of the volume goes in one batch; a scan that fails stops the
  // delete (a partial one would leave unreachable keys and leak extents).
  Impl::Txn t;
  for (char tag : {'I', 'D', 'C', 'F', 'X', 'E', 'O'}) {
    std::string p = Prefix(tag, vol);
    Status undecodable;
    NASGW_RETURN_IF_ERROR(impl_->store->Scan(p, PrefixEnd(p), [&](std::string_view k, std::string_view v) {
      t.batch.Delete(k);
      if (tag == 'E') {
        auto m = DecodeRecordMap(v);
        if (!m.ok()) {
          undecodable = m.status().WithContext("inode " + std::to_string(GetBE64(k, 5)));
          return false;
        }
        t.to_free.insert(t.to_free.end(), m->extents.begin(), m->extents.end());
      }
      return true;
    }));
    NASGW_RETURN_IF_ERROR(undecodable);
  }
  t.batch.Delete(VolKey(vol));
  t.batch.Delete(VolNameKey(name));
  t.vol_files[vol] = std::nullopt;
  return impl_->Commit(t);
}

// ---- NFS exports ---------------------------------------------------------------

Result<Export> Domain::AddExport(const Export& spec) {
  Export e = spec;
  NASGW_RETURN_IF_ERROR(NormalizeExport(&e));
  WriterLock lock(impl_->mu);
  auto idb = impl_->store->Get(VolNameKey(e.volume));
  if (!idb.ok()) {
    return idb.status().code() == Code::kNotFound ? Status::NotFound("no volume '" + e.volume + "'") : idb.status();
  }
  const uint32_t vol = GetBE32(*idb, 0);
  NASGW_RETURN_IF_ERROR(impl_->CheckExportDir(vol, e.volume, e.path));
  auto other = impl_->store->Get(PseudoKey(e.pseudo));
  if (other.ok()) {
    return Status::Exists("pseudo path '" + e.pseudo + "' is taken by export " + std::to_string(GetBE32(*other, 0)));
  }
  if (other.status().code() != Code::kNotFound) return other.status();
  auto next = impl_->NextExportId();
  if (!next.ok()) return next.status();
  if (*next > kExportIdMax) {
    return Status::NoSpace("every export id (1.." + std::to_string(kExportIdMax) +
                           ") has been used; ids are never reused");
  }
  e.id = *next;
  ExportRec r{vol, e};
  r.e.volume.clear();
  Impl::Txn t;
  std::string idv;
  PutBE32(&idv, e.id);
  t.batch.Put(ExportKey(e.id), EncodeExport(r));
  t.batch.Put(PseudoKey(e.pseudo), idv);
  t.batch.Put(ExportCounterKey(), EncodeExportCounter(e.id + 1));
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  return e;
}

Result<std::vector<Export>> Domain::ListExports() {
  ReaderLock lock(impl_->mu);
  std::vector<Export> out;
  Status bad;
  NASGW_RETURN_IF_ERROR(impl_->ScanExports([&](Result<ExportRec> r) REQUIRES_SHARED(impl_->mu) {
    Result<Export> e = r.ok() ? impl_->Named(*r) : Result<Export>(r.status());
    if (!e.ok()) {
      bad = e.status();
      return false;
    }
    out.push_back(std::move(e.value()));
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  return out;
}

Result<Export> Domain::GetExport(uint32_t id) {
  ReaderLock lock(impl_->mu);
  auto r = impl_->LoadExport(id);
  if (!r.ok()) return r.status();
  return impl_->Named(*r);
}

Result<Export> Domain::FindExport(const std::string& pseudo) {
  auto p = NormalizeExportPath("pseudo path", pseudo);
  if (!p.ok()) return p.status();
  ReaderLock lock(impl_->mu);
  auto idv = impl_->store->Get(PseudoKey(*p));
  if (!idv.ok()) {
    return idv.status().code() == Code::kNotFound ? Status::NotFound("no export with pseudo path '" + *p + "'")
                                                  : idv.status();
  }
  if (idv->size() != 4) return Status::Corruption("pseudo path index of '" + *p + "'");
  auto r = impl_->LoadExport(GetBE32(*idv, 0));
  if (!r.ok()) return r.status();
  return impl_->Named(*r);
}

Result<Export> Domain::RemoveExport(uint32_t id) {
  WriterLock lock(impl_->mu);
  auto r = impl_->LoadExport(id);
  if (!r.ok()) return r.status();
  Export e = r->e;
  auto v = impl_->LoadVolume(r->vol);
  if (v.ok()) {
    e.volume = v->name;
  } else if (v.status().code() != Code::kNotFound) {
    return v.status();
  }  // removing an export of a missing volume repairs it
  Impl::Txn t;
  t.batch.Delete(ExportKey(id));
  t.batch.Delete(PseudoKey(e.pseudo));
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  return e;
}

// ---- names ---------------------------------------------------------------------

Result<Attr> Domain::Lookup(uint32_t vol, uint64_t dir, const std::string& name) {
  ReaderLock lock(impl_->mu);
  auto d = impl_->LoadDir(vol, dir);
  if (!d.ok()) return d.status();
  if (name == ".") return d->a;
  if (name == "..") {
    auto p = impl_->LoadInode(vol, d->parent);
    if (!p.ok()) return p.status();
    return p->a;
  }
  if (name.size() > kNameMax) return Status::InvalidArgument("name longer than 255 bytes");
  auto e = impl_->LoadDirent(vol, dir, name);
  if (!e.ok()) return e.status();
  auto in = impl_->LoadInode(vol, e->ino);
  if (!in.ok()) return in.status().WithContext("entry '" + name + "' names a missing inode");
  return in->a;
}

Result<std::string> Domain::FindCaseless(uint32_t vol, uint64_t dir, const std::string& name) {
  ReaderLock lock(impl_->mu);
  NASGW_RETURN_IF_ERROR(impl_->LoadDir(vol, dir).status());
  if (name.empty() || name.size() > kNameMax) return Status::InvalidArgument("bad name");
  Status exact = impl_->CheckNameFree(vol, dir, name);
  if (exact.code() == Code::kExists) return name;  // an exact match wins
  NASGW_RETURN_IF_ERROR(exact);
  const std::string p = FoldPrefix(vol, dir, name);
  std::string found;
  NASGW_RETURN_IF_ERROR(impl_->store->Scan(p, PrefixEnd(p), [&](std::string_view k, std::string_view) {
    found = std::string(k.substr(p.size()));
    return false;  // the first in byte order
  }));
  if (found.empty()) return Status::NotFound("no entry matching '" + name + "' in any case");
  return found;
}

Result<Attr> Domain::GetAttr(uint32_t vol, uint64_t ino) {
  ReaderLock lock(impl_->mu);
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  return in->a;
}

Result<Attr> Domain::GetAttr(const Handle& h) {
  ReaderLock lock(impl_->mu);
  auto v = impl_->LoadVolume(h.volume);
  if (!v.ok()) {
    return v.status().code() == Code::kNotFound ? Status(Code::kStale, "volume of handle is gone") : v.status();
  }
  auto in = impl_->LoadInode(h.volume, h.ino);
  if (!in.ok()) {
    return in.status().code() == Code::kNotFound ? Status(Code::kStale, "inode " + std::to_string(h.ino) + " is gone")
                                                 : in.status();
  }
  if (in->a.gen != h.gen) return Status(Code::kStale, "inode " + std::to_string(h.ino) + " was reused");
  return in->a;
}

Result<Attr> Domain::Create(uint32_t vol, uint64_t dir, const std::string& name, FileType type, uint32_t mode,
                            uint32_t uid, uint32_t gid, uint64_t rdev, const std::string& symlink) {
  NASGW_RETURN_IF_ERROR(CheckName(name));
  if (type == FileType::kNone) return Status::InvalidArgument("no file type");
  if (type == FileType::kSymlink && (symlink.empty() || symlink.size() > kSymlinkMax)) {
    return Status::InvalidArgument("symlink target must be 1-4095 bytes");
  }
  WriterLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto d = impl_->LoadDir(vol, dir);
  if (!d.ok()) return d.status();
  NASGW_RETURN_IF_ERROR(impl_->CheckNameFree(vol, dir, name));
  Inode in;
  in.a.ino = v->next_ino++;
  in.a.gen = NewGeneration();
  in.a.type = type;
  in.a.mode = mode & 07777;
  in.a.uid = uid;
  in.a.gid = gid;
  in.a.nlink = type == FileType::kDirectory ? 2 : 1;
  in.a.rdev = rdev;
  in.a.atime = in.a.mtime = in.a.ctime = in.a.btime = Now();
  if (type == FileType::kDirectory) in.parent = dir;
  if (type == FileType::kSymlink) {
    in.symlink = symlink;
    in.a.size = symlink.size();
  }
  Impl::Txn t;
  Dirent e{in.a.ino, type, d->next_cookie++};
  t.batch.Put(DirentKey(vol, dir, name), EncodeDirent(e));
  t.batch.Put(CookieKey(vol, dir, e.cookie), name);
  t.batch.Put(FoldKey(vol, dir, name), "");
  if (type == FileType::kDirectory) d->a.nlink++;
  Impl::Touch(*d, true);
  impl_->PutInode(t, vol, *d);
  impl_->PutInode(t, vol, in);
  v->files++;
  impl_->PutVolume(t, vol, *v);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  return in.a;
}

Result<std::string> Domain::ReadLink(uint32_t vol, uint64_t ino) {
  ReaderLock lock(impl_->mu);
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  if (in->a.type != FileType::kSymlink) return Status::InvalidArgument("not a symlink");
  return in->symlink;
}

Result<Attr> Domain::Link(uint32_t vol, uint64_t ino, uint64_t dir, const std::string& name) {
  NASGW_RETURN_IF_ERROR(CheckName(name));
  WriterLock lock(impl_->mu);
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  if (in->a.type == FileType::kDirectory) return Status::PermissionDenied("hard links to directories are not allowed");
  if (in->a.nlink >= UINT32_MAX - 1) return Status::NoSpace("too many links");
  auto d = impl_->LoadDir(vol, dir);
  if (!d.ok()) return d.status();
  NASGW_RETURN_IF_ERROR(impl_->CheckNameFree(vol, dir, name));
  Impl::Txn t;
  Dirent e{ino, in->a.type, d->next_cookie++};
  t.batch.Put(DirentKey(vol, dir, name), EncodeDirent(e));
  t.batch.Put(CookieKey(vol, dir, e.cookie), name);
  t.batch.Put(FoldKey(vol, dir, name), "");
  Impl::Touch(*d, true);
  impl_->PutInode(t, vol, *d);
  in->a.nlink++;
  Impl::Touch(*in, false);
  impl_->PutInode(t, vol, *in);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  return in->a;
}

namespace {
// Removes the entry `name` (already loaded as e) from directory d in t.
void RemoveEntry(Domain::Impl& impl, Domain::Impl::Txn& t, uint32_t vol, Inode& d, const std::string& name,
                 const Dirent& e) {
  t.batch.Delete(DirentKey(vol, d.a.ino, name));
  t.batch.Delete(CookieKey(vol, d.a.ino, e.cookie));
  t.batch.Delete(FoldKey(vol, d.a.ino, name));
  Domain::Impl::Touch(d, true);
  (void)impl;
}
}  // namespace

Status Domain::Unlink(uint32_t vol, uint64_t dir, const std::string& name) {
  NASGW_RETURN_IF_ERROR(CheckName(name));
  WriterLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto d = impl_->LoadDir(vol, dir);
  if (!d.ok()) return d.status();
  auto e = impl_->LoadDirent(vol, dir, name);
  if (!e.ok()) return e.status();
  if (e->type == FileType::kDirectory) return Status(Code::kIsDir, "'" + name + "' is a directory");
  auto in = impl_->LoadInode(vol, e->ino);
  if (!in.ok()) return in.status();
  Impl::Txn t;
  RemoveEntry(*impl_, t, vol, *d, name, *e);
  impl_->PutInode(t, vol, *d);
  if (--in->a.nlink == 0) {
    NASGW_RETURN_IF_ERROR(impl_->LastLinkGone(t, vol, *in, *v));
  } else {
    Impl::Touch(*in, false);
    impl_->PutInode(t, vol, *in);
  }
  impl_->PutVolume(t, vol, *v);
  return impl_->Commit(t);
}

Status Domain::Rmdir(uint32_t vol, uint64_t dir, const std::string& name) {
  NASGW_RETURN_IF_ERROR(CheckName(name));
  WriterLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto d = impl_->LoadDir(vol, dir);
  if (!d.ok()) return d.status();
  auto e = impl_->LoadDirent(vol, dir, name);
  if (!e.ok()) return e.status();
  if (e->type != FileType::kDirectory) return Status(Code::kNotDir, "'" + name + "' is not a directory");
  auto empty = impl_->DirEmpty(vol, e->ino);
  if (!empty.ok()) return empty.status();
  if (!*empty) return Status(Code::kNotEmpty, "directory '" + name + "' is not empty");
  auto in = impl_->LoadInode(vol, e->ino);
  if (!in.ok()) return in.status();
  Impl::Txn t;
  RemoveEntry(*impl_, t, vol, *d, name, *e);
  d->a.nlink--;
  impl_->PutInode(t, vol, *d);
  NASGW_RETURN_IF_ERROR(impl_->DropInode(t, vol, *in, *v));
  impl_->PutVolume(t, vol, *v);
  return impl_->Commit(t);
}

Status Domain::Rename(uint32_t vol, uint64_t from_dir, const std::string& from, uint64_t to_dir,
                      const std::string& to) {
  NASGW_RETURN_IF_ERROR(CheckName(from));
  NASGW_RETURN_IF_ERROR(CheckName(to));
  WriterLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto sd = impl_->LoadDir(vol, from_dir);
  if (!sd.ok()) return sd.status();
  auto se = impl_->LoadDirent(vol, from_dir, from);
  if (!se.ok()) return se.status();
  if (from_dir == to_dir && from == to) return Status();
  const bool same_dir = from_dir == to_dir;
  Result<Inode> dd = same_dir ? sd : impl_->LoadDir(vol, to_dir);
  if (!dd.ok()) return dd.status();
  auto moved = impl_->LoadInode(vol, se->ino);
  if (!moved.ok()) return moved.status();
  const bool is_dir = se->type == FileType::kDirectory;
  // A directory may not move below itself.
  if (is_dir && !same_dir) {
    for (uint64_t up = to_dir; up != kRootIno;) {
      if (up == se->ino) return Status::InvalidArgument("cannot move a directory into itself");
      auto p = impl_->LoadInode(vol, up);
      if (!p.ok()) return p.status();
      up = p->parent;
    }
  }
  // The target directory's inode: the very same object as the source's when
  // both are one directory, so that every change lands in what is written.
  Inode& dst = same_dir ? *sd : *dd;
  Impl::Txn t;
  auto te = impl_->LoadDirent(vol, to_dir, to);
  if (!te.ok() && te.status().code() != Code::kNotFound) return te.status();
  if (te.ok()) {
    if (te->ino == se->ino) return Status();  // two names of one file: nothing to do
    auto target = impl_->LoadInode(vol, te->ino);
    if (!target.ok()) return target.status();
    if (is_dir && te->type != FileType::kDirectory) return Status(Code::kNotDir, "'" + to + "' is not a directory");
    if (!is_dir && te->type == FileType::kDirectory) return Status(Code::kIsDir, "'" + to + "' is a directory");
    if (te->type == FileType::kDirectory) {
      auto empty = impl_->DirEmpty(vol, te->ino);
      if (!empty.ok()) return empty.status();
      if (!*empty) return Status(Code::kNotEmpty, "'" + to + "' is not empty");
      dst.a.nlink--;
      NASGW_RETURN_IF_ERROR(impl_->DropInode(t, vol, *target, *v));
    } else if (--target->a.nlink == 0) {
      NASGW_RETURN_IF_ERROR(impl_->LastLinkGone(t, vol, *target, *v));
    } else {
      Impl::Touch(*target, false);
      impl_->PutInode(t, vol, *target);
    }
    t.batch.Delete(CookieKey(vol, to_dir, te->cookie));
  }
  // Source entry out, target entry in (same batch: atomic).
  t.batch.Delete(DirentKey(vol, from_dir, from));
  t.batch.Delete(CookieKey(vol, from_dir, se->cookie));
  t.batch.Delete(FoldKey(vol, from_dir, from));
  Dirent ne{se->ino, se->type, dst.next_cookie++};
  t.batch.Put(DirentKey(vol, to_dir, to), EncodeDirent(ne));
  t.batch.Put(CookieKey(vol, to_dir, ne.cookie), to);
  t.batch.Put(FoldKey(vol, to_dir, to), "");
  if (is_dir && !same_dir) {
    moved->parent = to_dir;
    sd->a.nlink--;
    dst.a.nlink++;
  }
  Impl::Touch(*moved, false);
  impl_->PutInode(t, vol, *moved);
  Impl::Touch(*sd, true);
  impl_->PutInode(t, vol, *sd);
  if (!same_dir) {
    Impl::Touch(dst, true);
    impl_->PutInode(t, vol, dst);
  }
  impl_->PutVolume(t, vol, *v);
  return impl_->Commit(t);
}

Result<std::vector<DirEntry>> Domain::ReadDir(uint32_t vol, uint64_t dir, uint64_t cookie, size_t max) {
  ReaderLock lock(impl_->mu);
  auto d = impl_->LoadDir(vol, dir);
  if (!d.ok()) return d.status();
  std::vector<DirEntry> out;
  std::string p = Prefix('C', vol, dir);
  Status bad;
  NASGW_RETURN_IF_ERROR(
      impl_->store->Scan(CookieKey(vol, dir, cookie + 1), PrefixEnd(p), [&](std::string_view k, std::string_view name) {
        if (out.size() >= max) return false;
        auto e = impl_->LoadDirent(vol, dir, std::string(name));
        if (!e.ok()) {
          bad = e.status().WithContext("directory index");
          return false;
        }
        out.push_back({std::string(name), e->ino, e->type, GetBE64(k, p.size())});
        return true;
      }));
  NASGW_RETURN_IF_ERROR(bad);
  return out;
}

// ---- extended attributes ---------------------------------------------------------

Result<std::string> Domain::GetXattr(uint32_t vol, uint64_t ino, const std::string& name) {
  ReaderLock lock(impl_->mu);
  NASGW_RETURN_IF_ERROR(impl_->LoadInode(vol, ino).status());
  auto v = impl_->store->Get(XattrKey(vol, ino, name));
  if (!v.ok()) {
    return v.status().code() == Code::kNotFound ? Status::NotFound("no attribute " + name)
                                                : v.status().WithContext("attribute " + name);
  }
  return *v;
}

Status Domain::SetXattr(uint32_t vol, uint64_t ino, const std::string& name, const std::string& value, int flags) {
  if (name.empty() || name.size() > kXattrNameMax) return Status::InvalidArgument("attribute name 1-255 bytes");
  if (value.size() > kXattrValueMax) return Status::NoSpace("attribute value larger than 64 KiB");
  WriterLock lock(impl_->mu);
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  auto has = impl_->Has(XattrKey(vol, ino, name));
  if (!has.ok()) return has.status().WithContext("attribute " + name);
  const bool exists = *has;
  if ((flags & 1) && exists) return Status::Exists("attribute " + name + " exists");  // XATTR_CREATE
  if ((flags & 2) && !exists) return Status::NotFound("no attribute " + name);        // XATTR_REPLACE
  Impl::Txn t;
  t.batch.Put(XattrKey(vol, ino, name), value);
  Impl::Touch(*in, false);
  impl_->PutInode(t, vol, *in);
  return impl_->Commit(t);
}

Result<std::vector<std::string>> Domain::ListXattr(uint32_t vol, uint64_t ino) {
  ReaderLock lock(impl_->mu);
  NASGW_RETURN_IF_ERROR(impl_->LoadInode(vol, ino).status());
  std::vector<std::string> out;
  std::string p = Prefix('X', vol, ino);
  NASGW_RETURN_IF_ERROR(impl_->store->Scan(p, PrefixEnd(p), [&](std::string_view k, std::string_view) {
    out.emplace_back(k.substr(p.size()));
    return true;
  }));
  return out;
}

Status Domain::RemoveXattr(uint32_t vol, uint64_t ino, const std::string& name) {
  WriterLock lock(impl_->mu);
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  auto has = impl_->Has(XattrKey(vol, ino, name));
  if (!has.ok()) return has.status().WithContext("attribute " + name);
  if (!*has) return Status::NotFound("no attribute " + name);
  Impl::Txn t;
  t.batch.Delete(XattrKey(vol, ino, name));
  Impl::Touch(*in, false);
  impl_->PutInode(t, vol, *in);
  return impl_->Commit(t);
}

// ---- data ------------------------------------------------------------------------

Result<size_t> Domain::Read(uint32_t vol, uint64_t ino, uint64_t offset, size_t n, void* out) {
  ReaderLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  if (in->a.type == FileType::kDirectory) return Status(Code::kIsDir, "is a directory");
  if (offset >= in->a.size) return size_t{0};
  n = static_cast<size_t>(std::min<uint64_t>(n, in->a.size - offset));
  const uint64_t rs = v->record_bytes;
  auto* dst = static_cast<uint8_t*>(out);
  std::memset(dst, 0, n);  // holes read as zeros
  auto recs = impl_->LoadRecords(vol, ino, offset / rs, (offset + n - 1) / rs);
  if (!recs.ok()) return recs.status();
  std::vector<uint8_t> buf;
  for (const auto& [r, m] : *recs) {
    const uint64_t start = r * rs;
    if (start >= offset + n) break;
    const uint64_t from = std::max(offset, start), to = std::min<uint64_t>(offset + n, start + rs);
    if (from >= to) continue;
    const uint64_t first = (from - start) / kDataBlock * kDataBlock;
    const uint64_t last = std::min<uint64_t>(m.bytes(), (to - start + kDataBlock - 1) / kDataBlock * kDataBlock);
    if (last <= first) continue;  // beyond what the record holds: zeros
    buf.resize(static_cast<size_t>(last - first));
    NASGW_RETURN_IF_ERROR(impl_->ReadExtents(m.extents, first, buf.data(), buf.size()));
    const uint64_t copy_to = std::min(to, start + last);
    if (copy_to > from) std::memcpy(dst + (from - offset), buf.data() + (from - start - first), copy_to - from);
  }
  return n;
}

Result<Attr> Domain::Write(uint32_t vol, uint64_t ino, uint64_t offset, const void* data, size_t n) {
  if (n == 0) return GetAttr(vol, ino);
  if (offset > kFileSizeMax || n > kFileSizeMax - offset) return Status::OutOfRange("file would exceed 2^63 bytes");
  WriterLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  if (in->a.type == FileType::kDirectory) return Status(Code::kIsDir, "is a directory");
  if (in->a.type != FileType::kRegular) return Status::InvalidArgument("not a regular file");
  const uint64_t rs = v->record_bytes;
  const uint64_t new_size = std::max(in->a.size, offset + n);
  Impl::Txn t;
  Status s = impl_->RewriteRecords(t, vol, *in, *v, offset / rs, (offset + n - 1) / rs, new_size, offset,
                                   static_cast<const uint8_t*>(data), n);
  if (!s.ok()) {
    t.Abandon(*impl_->space);  // nothing was committed: the new extents go back
    return s;
  }
  in->a.size = new_size;
  Impl::Touch(*in, true);
  impl_->PutInode(t, vol, *in);
  impl_->PutVolume(t, vol, *v);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  return in->a;
}

Result<Attr> Domain::SetAttrs(uint32_t vol, uint64_t ino, const SetAttr& s) {
  WriterLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  Impl::Txn t;
  if (s.set_mode) in->a.mode = s.mode & 07777;
  if (s.set_uid) in->a.uid = s.uid;
  if (s.set_gid) in->a.gid = s.gid;
  if (s.set_atime) in->a.atime = s.atime;
  if (s.set_mtime) in->a.mtime = s.mtime;
  if (s.set_size && s.size != in->a.size) {
    if (in->a.type == FileType::kDirectory) return Status(Code::kIsDir, "cannot truncate a directory");
    if (in->a.type != FileType::kRegular) return Status::InvalidArgument("not a regular file");
    if (s.size > kFileSizeMax) return Status::OutOfRange("size beyond 2^63 bytes");
    const uint64_t rs = v->record_bytes;
    if (s.size < in->a.size) {
      // Records wholly past the end go; the one the end falls in is cut.
      auto recs = impl_->LoadRecords(vol, ino, s.size / rs);
      if (!recs.ok()) return recs.status();
      bool cut = false;  // a record the new end falls inside
      for (auto& [r, m] : *recs) {
        if (r * rs < s.size) {
          cut = true;
        } else {
          t.batch.Delete(ExtentKey(vol, ino, r));
          t.to_free.insert(t.to_free.end(), m.extents.begin(), m.extents.end());
          in->a.blocks -= std::min<uint64_t>(in->a.blocks, m.bytes() / 512);
          v->bytes -= std::min(v->bytes, m.bytes());
        }
      }
      if (s.size % rs != 0 && cut) {
        Status w = impl_->RewriteRecords(t, vol, *in, *v, s.size / rs, s.size / rs, s.size, 0, nullptr, 0);
        if (!w.ok()) {
          t.Abandon(*impl_->space);
          return w;
        }
      }
    }
    // Growing only moves the end: the new range is a hole.
    in->a.size = s.size;
    Impl::Touch(*in, true);
  } else {
    Impl::Touch(*in, false);
  }
  impl_->PutInode(t, vol, *in);
  impl_->PutVolume(t, vol, *v);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  return in->a;
}

Result<uint64_t> Domain::Grow() {
  WriterLock lock(impl_->mu);
  std::set<uint32_t> covered;
  for (const auto& [first, n] : impl_->rec.data_groups) covered.insert(first.lun);
  uint64_t added = 0;
  DomainRec next = impl_->rec;
  std::vector<AgId> fresh;
  for (uint32_t l = 0; l < impl_->reserve->lun_count(); l++) {
    if (covered.contains(l)) continue;
    const uint32_t n = impl_->reserve->ag_count(l);
    if (n == 0) continue;
    next.data_groups.push_back({{l, 0}, n});
    for (uint32_t g = 0; g < n; g++) fresh.push_back({l, g});
    added += uint64_t{n} * impl_->reserve->ag_bytes();
  }
  if (fresh.empty()) return uint64_t{0};
  // Record first, then use: a crash in between leaves groups recorded but
  // unused, never used but unrecorded.
  DomainRec saved = impl_->rec;
  impl_->rec = next;
  Impl::Txn t;
  Status s = impl_->Commit(t);
  if (!s.ok()) {
    impl_->rec = saved;
    return s;
  }
  for (const AgId& g : fresh) {
    NASGW_RETURN_IF_ERROR(impl_->space->AddGroup(g, Reserve::AgOffset(impl_->reserve->ag_bytes(), g.index)));
  }
  NASGW_LOG(kInfo, "fs") << "domain grew" << Kv("bytes", added) << Kv("groups", fresh.size());
  return added;
}

Status Domain::OpenFile(uint32_t vol, uint64_t ino) {
  WriterLock lock(impl_->mu);
  NASGW_RETURN_IF_ERROR(impl_->LoadInode(vol, ino).status());
  impl_->open_count[{vol, ino}]++;
  return Status();
}

Status Domain::ReleaseFile(uint32_t vol, uint64_t ino) {
  WriterLock lock(impl_->mu);
  auto it = impl_->open_count.find({vol, ino});
  if (it == impl_->open_count.end() || it->second == 0) return Status::InvalidArgument("file is not open");
  if (--it->second > 0) return Status();
  impl_->open_count.erase(it);
  // The file is released whatever follows. If an unlinked file cannot be
  // dropped now, its orphan key stays and the next open drops it; the
  // caller still hears why.
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status().code() == Code::kNotFound ? Status() : in.status().WithContext("release");
  if (in->a.nlink > 0) return Status();
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  Impl::Txn t;
  NASGW_RETURN_IF_ERROR(impl_->DropInode(t, vol, *in, *v).WithContext("release"));
  t.batch.Delete(OrphanKey(vol, ino));
  impl_->PutVolume(t, vol, *v);
  return impl_->Commit(t);
}

Status Domain::Fsync(uint32_t vol, uint64_t ino) {
  // Every change is durable when its call returns (see the header).
  ReaderLock lock(impl_->mu);
  return impl_->LoadInode(vol, ino).status();
}

Result<std::vector<std::string>> Domain::Check() {
  WriterLock lock(impl_->mu);
  std::vector<std::string> problems;
  auto add = [&](std::string p) {
    if (problems.size() < 1000) problems.push_back(std::move(p));
  };
  MetaStore& st = *impl_->store;
  // Extents: inside the data groups, no block owned twice.
  Allocator fresh(impl_->reserve->ag_bytes(), kDataBlock);
  for (const auto& [first, n] : impl_->rec.data_groups) {
    for (uint32_t g = 0; g < n; g++) {
      NASGW_RETURN_IF_ERROR(
          fresh.AddGroup({first.lun, first.index + g}, Reserve::AgOffset(impl_->reserve->ag_bytes(), first.index + g)));
    }
  }
  uint64_t used = 0;
  NASGW_RETURN_IF_ERROR(st.Scan("E", "F", [&](std::string_view k, std::string_view v) {
    auto m = DecodeRecordMap(v);
    if (!m.ok()) {
      add("extent record " + std::to_string(GetBE64(k, 5)) + ": " + m.status().ToString());
      return true;
    }
    for (const Extent& e : m->extents) {
      Status s = fresh.MarkUsed(e);
      if (!s.ok()) add("inode " + std::to_string(GetBE64(k, 5)) + ": " + s.ToString());
      used += e.length;
    }
    return true;
  }));
  if (impl_->space->total_bytes() - impl_->space->free_bytes() != used) {
    add("free space count is off: the allocator has " +
        std::to_string(impl_->space->total_bytes() - impl_->space->free_bytes()) + " bytes in use, the extent maps " +
        std::to_string(used));
  }
  // Per volume: inodes, names, links.
  std::vector<uint32_t> vols;
  NASGW_RETURN_IF_ERROR(st.Scan("V", "W", [&](std::string_view k, std::string_view) {
    vols.push_back(static_cast<uint32_t>(GetBE64(std::string(4, '\0') + std::string(k.substr(1, 4)), 0)));
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
      auto folded = impl_->Has(FoldKey(vol, dir, name));
      if (!folded.ok()) {
        failed = folded.status();
        return false;
      }
      if (!*folded) add(at + ": missing from the case-insensitive index");
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
    std::string fp = Prefix('F', vol);
    NASGW_RETURN_IF_ERROR(st.Scan(fp, PrefixEnd(fp), [&](std::string_view, std::string_view) {
      folded++;
      return true;
    }));
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
        for (const auto& [r, m] : *recs) {
          if (r * v->record_bytes >= in.a.size) {
            add(where + "inode " + std::to_string(ino) + " has data past its end (record " + std::to_string(r) + ")");
          }
        }
      }
    }
    if (v->files != inodes.size()) {
      add(where + "file count " + std::to_string(v->files) + ", inodes " + std::to_string(inodes.size()));
    }
  }
  // NFS exports: each decodes, names a volume, sits below the id counter,
  // and the pseudo-path index and the records name each other.
  auto next = impl_->NextExportId();
  if (!next.ok()) {
    if (next.status().code() != Code::kCorruption) return next.status();
    add("export id counter: " + next.status().ToString());
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
  return problems;
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
