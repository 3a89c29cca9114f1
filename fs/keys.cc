#include "fs/keys.h"

#include <locale.h>
#include <wctype.h>

#include "base/assert.h"
#include "fs/acl.h"

namespace nasgw::fs::keys {

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
namespace {

// One code point of valid UTF-8 at s[i] (its length in *len), or -1 for a
// byte that does not start one (kept as it is).
int32_t DecodeUtf8(const std::string& s, size_t i, size_t* len) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  if (c < 0x80) {
    *len = 1;
    return c;
  }
  size_t n;
  int32_t cp;
  if ((c & 0xe0) == 0xc0) {
    n = 2;
    cp = c & 0x1f;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3;
    cp = c & 0x0f;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return -1;
  }
  if (i + n > s.size()) return -1;
  for (size_t k = 1; k < n; k++) {
    if ((b(k) & 0xc0) != 0x80) return -1;
    cp = (cp << 6) | (b(k) & 0x3f);
  }
  static constexpr int32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;  // overlong, surrogate
  *len = n;
  return cp;
}

void EncodeUtf8(int32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

}  // namespace

std::string Fold(const std::string& name) {
  // glibc's C.UTF-8 (built into glibc, no locale files needed) carries
  // Unicode's simple case mappings.
  static const locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  NASGW_ASSERT_MSG(utf8 != static_cast<locale_t>(nullptr), "glibc has no C.UTF-8 locale");
  std::string f;
  f.reserve(name.size());
  for (size_t i = 0; i < name.size();) {
    size_t len = 1;
    const int32_t cp = DecodeUtf8(name, i, &len);
    if (cp < 0) {
      f.push_back(name[i]);
    } else {
      EncodeUtf8(static_cast<int32_t>(towupper_l(static_cast<wint_t>(cp), utf8)), &f);
    }
    i += len;
  }
  return f;
}
std::string FoldPrefix(uint32_t vol, uint64_t dir, const std::string& name) {
  return Prefix('G', vol, dir) + Fold(name) + '\0';
}
std::string FoldDoneKey() {
  return "U";
}
std::string FoldKey(uint32_t vol, uint64_t dir, const std::string& name) {
  return FoldPrefix(vol, dir, name) + name;
}
std::string ExtentKey(uint32_t vol, uint64_t ino, uint64_t record) {
  std::string k = Prefix('E', vol, ino);
  PutBE64(&k, record);
  return k;
}
std::string ExportKey(uint32_t id) {
  std::string k(1, 'P');
  PutBE32(&k, id);
  return k;
}
std::string PseudoKey(const std::string& pseudo) {
  return "Q" + pseudo;
}
std::string ShareKey(const std::string& name) {
  std::string k = "B";
  for (char c : name) k += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return k;
}
std::string ExportCounterKey() {
  return "R";
}
std::string HandleSecretKey() {
  return "H";
}
std::string LogBarrierKey() {
  return "L";
}
std::string EncodeLsn(uint64_t lsn) {
  Encoder e;
  e.U64(lsn);
  return e.Release();
}
Result<uint64_t> DecodeLsn(std::string_view v) {
  Decoder d(v);
  const uint64_t lsn = d.U64();
  if (!d.done()) return Status::Corruption("bad log barrier");
  return lsn;
}
std::string EncodeHandleSecret(const std::string& secret) {
  return std::string(1, static_cast<char>(kHandleSecretVersion)) + secret;
}
uint32_t GetBE32(std::string_view s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}
bool HasBirth(std::string_view key) {
  if (key.size() < 5) return false;
  switch (key[0]) {
    case 'I':
    case 'D':
    case 'C':
    case 'X':
    case 'E':
    case 'G':
    case 'V':
      return true;
    default:
      return false;
  }
}
std::string BirthsDoneKey() {
  return "K";
}
std::string BirthsProgressKey() {
  return "J";
}
std::string BirthsLogKey() {
  return "Jl";
}
void PutBirth(std::string* raw, uint64_t birth) {
  PutBE64(raw, birth);
}
uint64_t GetBirth(std::string_view raw) {
  return GetBE64(raw, raw.size() - kBirthBytes);
}
std::string HistoryPrefix(std::string_view key) {
  std::string k = "Y";
  k.append(key.substr(1, 4));  // the volume
  k.push_back(key[0]);         // the tag
  k.append(key.substr(5));
  return k;
}
std::string HistoryKey(std::string_view key, uint64_t kill) {
  std::string k = HistoryPrefix(key);
  PutBE64(&k, kill);
  return k;
}
std::string LiveKey(std::string_view history_prefix) {
  std::string_view p = history_prefix;
  std::string k(1, p[5]);
  k.append(p.substr(1, 4));
  k.append(p.substr(6));
  return k;
}
std::string DeadPrefix(uint32_t vol, uint64_t kill) {
  std::string k = Prefix('Z', vol);
  PutBE64(&k, kill);
  return k;
}
std::string DeadPrefix(uint32_t vol, uint64_t kill, uint64_t birth) {
  std::string k = DeadPrefix(vol, kill);
  PutBE64(&k, birth);
  return k;
}
std::string DeadExtentKey(uint32_t vol, uint64_t kill, uint64_t birth, const Extent& e) {
  std::string k = DeadPrefix(vol, kill, birth);
  k.push_back(kDeadExtent);
  PutBE32(&k, e.lun);
  PutBE64(&k, e.offset);
  PutBE64(&k, e.length);
  return k;
}
std::string DeadVersionKey(uint32_t vol, uint64_t kill, uint64_t birth, std::string_view history_key) {
  std::string k = DeadPrefix(vol, kill, birth);
  k.push_back(kDeadVersion);
  k.append(history_key);
  return k;
}
std::string EncodeU64(uint64_t v) {
  std::string s;
  PutBE64(&s, v);
  return s;
}
Result<DeadEntry> DecodeDead(std::string_view k, std::string_view v) {
  constexpr size_t head = 1 + 4 + 8 + 8 + 1;
  if (k.size() < head || k[0] != 'Z' || v.size() != 8) return Status::Corruption("malformed dead entry");
  DeadEntry d;
  d.vol = GetBE32(k, 1);
  d.kill = GetBE64(k, 5);
  d.birth = GetBE64(k, 13);
  d.kind = k[21];
  d.bytes = GetBE64(v, 0);
  if (d.kind == kDeadExtent) {
    if (k.size() != head + 20) return Status::Corruption("malformed dead extent");
    d.ext = {GetBE32(k, head), GetBE64(k, head + 4), GetBE64(k, head + 12)};
    if (d.ext.length == 0 || d.bytes != d.ext.length) return Status::Corruption("malformed dead extent");
  } else if (d.kind == kDeadVersion) {
    d.history_key = std::string(k.substr(head));
    if (d.history_key.size() < 1 + 4 + 1 + 8 || d.history_key[0] != 'Y' || GetBE32(d.history_key, 1) != d.vol ||
        GetBE64(d.history_key, d.history_key.size() - 8) != d.kill) {
      return Status::Corruption("malformed dead version");
    }
  } else {
    return Status::Corruption("dead entry of unknown kind");
  }
  if (d.birth >= d.kill) return Status::Corruption("dead entry killed no later than its birth");
  return d;
}
std::string SnapshotKey(uint32_t vol, uint32_t id) {
  std::string k = Prefix('W', vol);
  PutBE32(&k, id);
  return k;
}
std::string SnapshotNameKey(uint32_t vol, const std::string& name) {
  return Prefix('T', vol) + name;
}
std::string ScheduleKey(uint32_t vol, const std::string& name) {
  return Prefix('A', vol) + name;
}
std::string EncodeSchedule(const SnapshotSchedule& s) {
  Encoder e;
  e.U8(kScheduleVersion);
  e.U64(s.every_s);
  e.U32(s.keep);
  e.U64(static_cast<uint64_t>(s.last_run));
  return e.Release();
}
Result<SnapshotSchedule> DecodeSchedule(std::string_view v) {
  Decoder d(v);
  SnapshotSchedule s;
  if (d.U8() != kScheduleVersion) return Status::Corruption("snapshot schedule version");
  s.every_s = d.U64();
  s.keep = d.U32();
  s.last_run = static_cast<int64_t>(d.U64());
  if (!d.ok() || d.remaining() != 0 || s.every_s == 0 || s.keep == 0)
    return Status::Corruption("bad snapshot schedule");
  return s;
}
std::string EncodeSnapshot(const SnapshotRec& r) {
  Encoder e;
  e.U8(kSnapshotVersion);
  e.Str32(r.name);
  e.U64(r.txg);
  PutTime(e, r.created);
  e.U8(r.deleting ? 1 : 0);
  return e.Release();
}
Result<SnapshotRec> DecodeSnapshot(std::string_view v) {
  Decoder d(v);
  SnapshotRec r;
  if (d.U8() != kSnapshotVersion) return Status::Corruption("snapshot record version");
  r.name = d.Str32();
  r.txg = d.U64();
  r.created = GetTime(d);
  r.deleting = (d.U8() & 1) != 0;
  if (!d.ok() || d.remaining() != 0) return Status::Corruption("bad snapshot record");
  return r;
}

std::string PrefixEnd(std::string p) {
  while (!p.empty() && static_cast<uint8_t>(p.back()) == 0xff) p.pop_back();
  if (!p.empty()) p.back() = static_cast<char>(static_cast<uint8_t>(p.back()) + 1);
  return p;
}

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
  // POSIX ACLs: a later addition, absent from records without any.
  if (!in.a.acl_access.empty() || !in.a.acl_default.empty()) {
    e.Str32(in.a.acl_access);
    e.Str32(in.a.acl_default);
  }
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
  if (d.remaining() > 0) {
    in.a.acl_access = d.Str32();
    in.a.acl_default = d.Str32();
  }
  if (!d.done() || in.a.type == FileType::kNone || static_cast<uint8_t>(in.a.type) > 7) {
    return Status::Corruption("inode " + std::to_string(ino) + ": bad record");
  }
  for (const std::string* x : {&in.a.acl_access, &in.a.acl_default}) {
    if (x->empty()) continue;
    auto acl = ParseAcl(*x);
    if (!acl.ok() || acl->empty()) {
      return Status::Corruption("inode " + std::to_string(ino) + ": bad ACL: " + acl.status().ToString());
    }
  }
  return in;
}

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

namespace {
// A version 2 map starts with a u64 no version 1 map can start with (its
// birth transaction group), then its version byte.
constexpr uint64_t kRecordMapMark = UINT64_MAX;
constexpr uint8_t kRecordMapVersion = 2;
constexpr uint64_t kPieceUnit = kDataBlockBytes;
}  // namespace

std::string EncodeRecordMap(const RecordMap& r) {
  Encoder e;
  e.U64(kRecordMapMark);
  e.U8(kRecordMapVersion);
  e.U32(static_cast<uint32_t>(r.pieces.size()));
  for (const auto& p : r.pieces) {
    e.U32(p.at);
    e.U32(p.ext.lun);
    e.U64(p.ext.offset);
    e.U64(p.ext.length);
    e.U64(p.birth);
  }
  return e.Release();
}

Result<RecordMap> DecodeRecordMap(std::string_view v) {
  Decoder d(v);
  RecordMap r;
  const uint64_t first = d.U64();
  if (first == kRecordMapMark) {
    if (d.U8() != kRecordMapVersion) return Status::Corruption("extent record version");
    const uint32_t n = d.U32();
    for (uint32_t i = 0; i < n && d.ok(); i++) {
      RecordPiece p;
      p.at = d.U32();
      p.ext = {d.U32(), d.U64(), d.U64()};
      p.birth = d.U64();
      r.pieces.push_back(p);
    }
  } else {
    // Version 1: `first` is the birth; the extents follow one another.
    const uint32_t n = d.U32();
    uint64_t at = 0;
    for (uint32_t i = 0; i < n && d.ok(); i++) {
      Extent x{d.U32(), d.U64(), d.U64()};
      if (at > kRecordBytesMax) break;
      r.pieces.push_back({static_cast<uint32_t>(at), x, first});
      at += x.length;
    }
  }
  if (!d.ok() || !d.done() || r.pieces.empty()) return Status::Corruption("bad extent record");
  uint64_t end = 0;
  for (const auto& p : r.pieces) {
    if (p.at < end || p.ext.length == 0 || p.at % kPieceUnit != 0 || p.ext.length % kPieceUnit != 0 ||
        p.ext.length > kRecordBytesMax || p.end() > kRecordBytesMax) {
      return Status::Corruption("extent record: a piece out of order, overlapping, unaligned or past the record");
    }
    end = p.end();
  }
  return r;
}

std::string EncodeVolume(const VolumeRec& v) {
  Encoder e;
  e.U8(kRecordVersion);
  e.Str32(v.name);
  e.U32(v.record_bytes);
  e.U64(v.next_ino);
  e.U64(v.files);
  e.U64(v.bytes);
  e.U8(v.write_through ? 1 : 0);
  e.U8(v.atime);
  e.U32(v.next_snap);
  if (v.origin_vol != 0) {
    e.U32(v.origin_vol);
    e.U32(v.origin_snap);
    e.U64(v.origin_txg);
  }
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
  if (d.remaining() > 0) v.write_through = (d.U8() & 1) != 0;
  if (d.remaining() > 0) v.atime = d.U8();
  if (d.remaining() > 0) v.next_snap = d.U32();
  if (d.remaining() > 0) {
    v.origin_vol = d.U32();
    v.origin_snap = d.U32();
    v.origin_txg = d.U64();
    if (v.origin_vol == 0) return Status::Corruption("bad volume record: a clone of volume 0");
  }
  if (!d.ok() || d.remaining() != 0 || v.atime > 2 || v.next_snap == 0) return Status::Corruption("bad volume record");
  return v;
}

std::string EncodeDomain(const DomainRec& r) {
  Encoder e;
  e.U8(kDomainRecVersion);
  e.U64(r.txg);
  e.U32(r.next_volume);
  e.U32(static_cast<uint32_t>(r.data_groups.size()));
  for (const auto& [ag, n] : r.data_groups) {
    e.U32(ag.lun);
    e.U32(ag.index);
    e.U32(n);
  }
  e.U64(r.log_salt);
  e.U32(static_cast<uint32_t>(r.log_extents.size()));
  for (const Extent& x : r.log_extents) {
    e.U32(x.lun);
    e.U64(x.offset);
    e.U64(x.length);
  }
  return e.Release();
}

Result<DomainRec> DecodeDomain(std::string_view s) {
  Decoder d(s);
  DomainRec r;
  const uint8_t version = d.U8();
  if (version != 1 && version != kDomainRecVersion) {
    return Status::Corruption("domain record version " + std::to_string(version));
  }
  r.txg = d.U64();
  r.next_volume = d.U32();
  uint32_t n = d.U32();
  for (uint32_t i = 0; i < n && d.ok(); i++) {
    AgId ag{d.U32(), d.U32()};
    r.data_groups.push_back({ag, d.U32()});
  }
  if (version >= 2) {
    r.log_salt = d.U64();
    const uint32_t m = d.U32();
    for (uint32_t i = 0; i < m && d.ok(); i++) r.log_extents.push_back({d.U32(), d.U64(), d.U64()});
    if (d.ok() && (r.log_salt == 0) != r.log_extents.empty()) return Status::Corruption("bad domain record: log");
  }
  if (!d.done()) return Status::Corruption("bad domain record");
  return r;
}

std::string EncodeExport(const ExportRec& r) {
  Encoder e;
  e.U8(kExportVersion);
  e.U32(r.vol);
  e.Str16(r.e.path);
  e.Str16(r.e.pseudo);
  e.U8(static_cast<uint8_t>((r.e.read_only ? 1 : 0) | (r.e.root_squash ? 2 : 0) | (r.e.show_snapshot_dir ? 4 : 0)));
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
  r.e.show_snapshot_dir = (flags & 4) != 0;
  r.e.protocols.clear();
  for (uint8_t i = 0, n = d.U8(); i < n && d.ok(); i++) r.e.protocols.push_back(d.U8());
  r.e.sec.clear();
  for (uint8_t i = 0, n = d.U8(); i < n && d.ok(); i++) r.e.sec.push_back(d.Str16());
  for (uint16_t i = 0, n = d.U16(); i < n && d.ok(); i++) r.e.clients.push_back(d.Str16());
  if (!d.done() || (flags & ~7) != 0) return Status::Corruption("export " + std::to_string(id) + ": bad record");
  return r;
}

std::string EncodeExportCounter(uint32_t next) {
  Encoder e;
  e.U8(kExportVersion);
  e.U32(next);
  return e.Release();
}
Result<uint32_t> DecodeExportCounter(std::string_view v) {
  Decoder d(v);
  const uint8_t version = d.U8();
  const uint32_t next = d.U32();
  if (version != kExportVersion || !d.done() || next == 0) return Status::Corruption("bad export id counter");
  return next;
}

std::string EncodeShare(const ShareRec& r) {
  Encoder e;
  e.U8(kShareVersion);
  e.U32(r.vol);
  e.Str16(r.s.name);
  e.Str16(r.s.path);
  e.Str16(r.s.comment);
  e.U8(static_cast<uint8_t>((r.s.read_only ? 1 : 0) | (r.s.browseable ? 0 : 2) | (r.s.encrypt ? 4 : 0) |
                            (r.s.guest_ok ? 8 : 0)));
  e.U16(static_cast<uint16_t>(r.s.valid_users.size()));
  for (const auto& u : r.s.valid_users) e.Str16(u);
  return e.Release();
}

Result<ShareRec> DecodeShare(std::string_view v) {
  Decoder d(v);
  ShareRec r;
  const uint8_t version = d.U8();
  if (version != kShareVersion) {
    return Status::Corruption("share: unknown record version " + std::to_string(version));
  }
  r.vol = d.U32();
  r.s.name = d.Str16();
  r.s.path = d.Str16();
  r.s.comment = d.Str16();
  const uint8_t flags = d.U8();
  r.s.read_only = (flags & 1) != 0;
  r.s.browseable = (flags & 2) == 0;
  r.s.encrypt = (flags & 4) != 0;
  r.s.guest_ok = (flags & 8) != 0;
  for (uint16_t i = 0, n = d.U16(); i < n && d.ok(); i++) r.s.valid_users.push_back(d.Str16());
  if (!d.done() || (flags & ~15) != 0 || r.s.name.empty()) {
    return Status::Corruption("share '" + r.s.name + "': bad record");
  }
  return r;
}

}  // namespace nasgw::fs::keys
