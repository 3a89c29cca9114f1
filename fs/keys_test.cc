// The metadata keys and values (fs/keys.h): keys sort as their numbers do,
// every value round-trips, and a value that is truncated, corrupt or of an
// unknown version is Corruption, never a partly filled record.
#include "fs/keys.h"

#include <gtest/gtest.h>

#include "fs/acl.h"

namespace nasgw::fs::keys {
namespace {

Inode SampleInode() {
  Inode in;
  in.a.ino = 42;
  in.a.gen = 0x1234567890abcdefull;
  in.a.type = FileType::kSymlink;
  in.a.mode = 0777;
  in.a.uid = 1000;
  in.a.gid = 100;
  in.a.nlink = 3;
  in.a.size = 7;
  in.a.blocks = 8;
  in.a.rdev = 0x0801;
  in.a.change = 99;
  in.a.atime = {1, 2};
  in.a.mtime = {-3, 999'999'999};
  in.a.ctime = {5, 6};
  in.a.btime = {7, 8};
  in.parent = 9;
  in.next_cookie = 10;
  in.symlink = "target!";
  return in;
}

ExportRec SampleExport() {
  ExportRec r;
  r.vol = 7;
  r.e.id = 3;
  r.e.path = "/a/b";
  r.e.pseudo = "/p";
  r.e.clients = {"198.18.2.0/24", "2001:db8::1"};
  r.e.read_only = true;
  r.e.root_squash = false;
  r.e.sec = {"krb5", "sys"};
  r.e.protocols = {4};
  return r;
}

// Every strict prefix of `v` decodes to Corruption.
template <typename Decode>
void EveryTruncationIsCorruption(const std::string& v, Decode decode) {
  for (size_t n = 0; n < v.size(); n++) {
    auto r = decode(std::string_view(v).substr(0, n));
    ASSERT_FALSE(r.ok()) << "decoded from " << n << " of " << v.size() << " bytes";
    EXPECT_EQ(r.status().code(), Code::kCorruption) << n << ": " << r.status().ToString();
  }
}

TEST(KeysTest, KeysSortNumerically) {
  EXPECT_LT(InodeKey(1, 255), InodeKey(1, 256));
  EXPECT_LT(InodeKey(1, UINT64_MAX), InodeKey(2, 0));
  EXPECT_LT(CookieKey(1, 5, 1), CookieKey(1, 5, 0x100));
  EXPECT_LT(ExtentKey(1, 5, 0xff), ExtentKey(1, 5, 0x100));
  EXPECT_LT(ExportKey(255), ExportKey(256));
  // A key of each kind starts with its prefix, and PrefixEnd bounds them.
  const std::string p = Prefix('D', 1, 5);
  for (const std::string& k : {DirentKey(1, 5, ""), DirentKey(1, 5, "a"), DirentKey(1, 5, std::string(255, '\xff'))}) {
    EXPECT_EQ(k.compare(0, p.size(), p), 0);
    EXPECT_GE(k, p);
    EXPECT_LT(k, PrefixEnd(p));
  }
  EXPECT_LE(PrefixEnd(p), DirentKey(1, 6, ""));
  EXPECT_EQ(PrefixEnd("a\xff\xff"), "b");
  EXPECT_EQ(PrefixEnd("\xff"), "");
  EXPECT_EQ(GetBE64(InodeKey(3, 0x0102030405060708ull), 5), 0x0102030405060708ull);
  EXPECT_EQ(GetBE32(VolKey(0xa0b0c0d0u), 1), 0xa0b0c0d0u);
  // The case-insensitive index: folded name, NUL, exact name.
  // Windows' folding: Unicode's simple upper-case mapping, per code point.
  EXPECT_EQ(Fold("ReadMe.TXT"), "README.TXT");
  EXPECT_EQ(Fold("ärger.txt"), Fold("ÄRGER.TXT"));
  EXPECT_EQ(Fold("ärger.txt"), "ÄRGER.TXT");
  EXPECT_EQ(Fold("σοφία"), Fold("ΣΟΦΊΑ"));
  EXPECT_EQ(Fold("Straße"), "STRAßE") << "no full mapping: ß stays one character";
  EXPECT_EQ(Fold("привет"), "ПРИВЕТ");
  EXPECT_EQ(Fold("\xf0\x90\x90\xa8"), "\xf0\x90\x90\x80") << "outside the BMP (Deseret)";
  // Bytes that are not UTF-8 are kept as they are; a name is any bytes.
  EXPECT_EQ(Fold("a\xff\xc3"
                 "b"),
            "A\xff\xc3"
            "B");
  EXPECT_EQ(Fold("\xc0\xaf"), "\xc0\xaf") << "an overlong encoding is not a code point";
  EXPECT_EQ(FoldKey(1, 2, "ReadMe"), FoldPrefix(1, 2, "README") + "ReadMe");
  EXPECT_NE(FoldKey(1, 2, "ReadMe"), FoldKey(1, 2, "README"));
}

// Strict mode is a trailing flags byte and the atime policy one more: a
// record made before either (without the byte) reads as write-back and
// relatime, and a record with them round-trips.
TEST(KeysTest, VolumeRoundTripWithAndWithoutStrictMode) {
  VolumeRec v;
  v.name = "vol";
  v.record_bytes = 64 << 10;
  v.next_ino = 77;
  v.files = 5;
  v.bytes = 1 << 20;
  v.write_through = true;
  v.atime = 2;
  const std::string enc = EncodeVolume(v);
  auto out = DecodeVolume(enc);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->name, "vol");
  EXPECT_EQ(out->next_ino, 77u);
  EXPECT_EQ(out->bytes, 1u << 20);
  EXPECT_TRUE(out->write_through);
  EXPECT_EQ(out->atime, 2);
  v.next_snap = 9;
  EXPECT_EQ(DecodeVolume(EncodeVolume(v))->next_snap, 9u);
  auto no_snap = DecodeVolume(enc.substr(0, enc.size() - 4));  // before snapshots: the first id is 1
  ASSERT_TRUE(no_snap.ok()) << no_snap.status().ToString();
  EXPECT_EQ(no_snap->next_snap, 1u);
  EXPECT_EQ(no_snap->atime, 2);
  for (size_t cut = 1; cut < 4; cut++) {
    EXPECT_EQ(DecodeVolume(enc.substr(0, enc.size() - cut)).status().code(), Code::kCorruption) << cut;
  }
  // A clone's origin: absent in a volume that is not one; whole or refused.
  v.origin_vol = 3;
  v.origin_snap = 4;
  v.origin_txg = 5;
  const std::string clone = EncodeVolume(v);
  EXPECT_EQ(clone.size(), EncodeVolume(VolumeRec{v.name, v.record_bytes, v.next_ino, v.files, v.bytes, v.write_through,
                                                 v.atime, v.next_snap})
                                  .size() +
                              16);
  auto c = DecodeVolume(clone);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->origin_vol, 3u);
  EXPECT_EQ(c->origin_snap, 4u);
  EXPECT_EQ(c->origin_txg, 5u);
  for (size_t cut = 1; cut < 16; cut++) {
    EXPECT_EQ(DecodeVolume(clone.substr(0, clone.size() - cut)).status().code(), Code::kCorruption) << cut;
  }
  auto no_atime = DecodeVolume(enc.substr(0, enc.size() - 5));
  ASSERT_TRUE(no_atime.ok()) << no_atime.status().ToString();
  EXPECT_TRUE(no_atime->write_through);
  EXPECT_EQ(no_atime->atime, 0) << "relatime";
  auto old = DecodeVolume(enc.substr(0, enc.size() - 6));
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_FALSE(old->write_through);
  EXPECT_EQ(old->atime, 0);
  EXPECT_EQ(old->files, 5u);
  std::string unknown = enc;
  unknown[unknown.size() - 5] = 3;  // no such policy
  EXPECT_EQ(DecodeVolume(unknown).status().code(), Code::kCorruption);
}

TEST(KeysTest, InodeRoundTrip) {
  const Inode in = SampleInode();
  const std::string v = EncodeInode(in);
  auto out = DecodeInode(42, v);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->a.ino, 42u);
  EXPECT_EQ(out->a.gen, in.a.gen);
  EXPECT_EQ(out->a.type, in.a.type);
  EXPECT_EQ(out->a.mode, in.a.mode);
  EXPECT_EQ(out->a.uid, in.a.uid);
  EXPECT_EQ(out->a.gid, in.a.gid);
  EXPECT_EQ(out->a.nlink, in.a.nlink);
  EXPECT_EQ(out->a.size, in.a.size);
  EXPECT_EQ(out->a.blocks, in.a.blocks);
  EXPECT_EQ(out->a.rdev, in.a.rdev);
  EXPECT_EQ(out->a.change, in.a.change);
  EXPECT_EQ(out->a.atime, in.a.atime);
  EXPECT_EQ(out->a.mtime, in.a.mtime);
  EXPECT_EQ(out->a.ctime, in.a.ctime);
  EXPECT_EQ(out->a.btime, in.a.btime);
  EXPECT_EQ(out->parent, in.parent);
  EXPECT_EQ(out->next_cookie, in.next_cookie);
  EXPECT_EQ(out->symlink, in.symlink);
  EveryTruncationIsCorruption(v, [](std::string_view s) { return DecodeInode(42, s); });

  std::string bad = v;
  bad[0] = static_cast<char>(kRecordVersion + 1);
  auto r = DecodeInode(42, bad);
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_NE(r.status().message().find("unknown version"), std::string::npos) << r.status().ToString();
  for (uint8_t type : {0, 8, 255}) {  // kNone and beyond the last type
    bad = v;
    bad[1] = static_cast<char>(type);
    EXPECT_EQ(DecodeInode(42, bad).status().code(), Code::kCorruption) << int{type};
  }
}

// POSIX ACLs ride at the end of the record, only when there is one: a
// record without reads as before; a record with one keeps both, a torn or
// invalid ACL is corruption.
TEST(KeysTest, InodeWithAclsRoundTrips) {
  Inode in = SampleInode();
  const std::string plain = EncodeInode(in);
  const Acl acl = {{kAclUserObj, 6}, {kAclUser, 4, 1000}, {kAclGroupObj, 4}, {kAclMask, 4}, {kAclOther, 0}};
  in.a.acl_access = EncodeAcl(acl);
  in.a.acl_default = EncodeAcl({{kAclUserObj, 7}, {kAclGroupObj, 5}, {kAclOther, 5}});
  const std::string v = EncodeInode(in);
  ASSERT_EQ(v.substr(0, plain.size()), plain) << "the ACLs are appended";
  auto out = DecodeInode(42, v);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->a.acl_access, in.a.acl_access);
  EXPECT_EQ(out->a.acl_default, in.a.acl_default);
  auto old = DecodeInode(42, plain);
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->a.acl_access.empty() && old->a.acl_default.empty());
  for (size_t n = plain.size() + 1; n < v.size(); n++) {
    EXPECT_EQ(DecodeInode(42, v.substr(0, n)).status().code(), Code::kCorruption) << n;
  }
  EXPECT_EQ(DecodeInode(42, v + "x").status().code(), Code::kCorruption) << "trailing bytes";
  in.a.acl_access = EncodeAcl({{kAclUserObj, 6}, {kAclOther, 0}});  // no owning group
  EXPECT_EQ(DecodeInode(42, EncodeInode(in)).status().code(), Code::kCorruption);
}

TEST(KeysTest, DirentRoundTrip) {
  const Dirent d{77, FileType::kDirectory, 12};
  const std::string v = EncodeDirent(d);
  auto out = DecodeDirent(v);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->ino, 77u);
  EXPECT_EQ(out->type, FileType::kDirectory);
  EXPECT_EQ(out->cookie, 12u);
  EveryTruncationIsCorruption(v, [](std::string_view s) { return DecodeDirent(s); });
}

TEST(KeysTest, RecordMapRoundTrip) {
  const RecordMap m{{{0, {0, 4096, 8192}, 5}, {16384, {2, 1 << 20, 4096}, 7}}};
  EXPECT_EQ(m.bytes(), 12288u);
  const std::string v = EncodeRecordMap(m);
  auto out = DecodeRecordMap(v);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->pieces, m.pieces);
  EveryTruncationIsCorruption(v, [](std::string_view s) { return DecodeRecordMap(s); });
  // A record with no pieces is not one.
  EXPECT_EQ(DecodeRecordMap(EncodeRecordMap(RecordMap{})).status().code(), Code::kCorruption);
  // A count larger than what follows.
  std::string lying = v;
  lying[9] = 3;  // the count (little-endian, after the mark and version): 3 pieces, 2 present
  EXPECT_EQ(DecodeRecordMap(lying).status().code(), Code::kCorruption);
  // An unknown version.
  std::string v3 = v;
  v3[8] = 3;
  EXPECT_EQ(DecodeRecordMap(v3).status().code(), Code::kCorruption);
}

TEST(KeysTest, RecordMapRefusesPiecesThatCannotBe) {
  auto bad = [](std::vector<RecordPiece> p) {
    return DecodeRecordMap(EncodeRecordMap(RecordMap{std::move(p)})).status().code();
  };
  EXPECT_EQ(bad({{8192, {0, 0, 8192}, 1}, {4096, {0, 65536, 4096}, 1}}), Code::kCorruption);  // out of order
  EXPECT_EQ(bad({{0, {0, 0, 8192}, 1}, {4096, {0, 65536, 4096}, 1}}), Code::kCorruption);     // overlapping
  EXPECT_EQ(bad({{512, {0, 0, 4096}, 1}}), Code::kCorruption);                                // unaligned place
  EXPECT_EQ(bad({{0, {0, 0, 1000}, 1}}), Code::kCorruption);                                  // partial block
  EXPECT_EQ(bad({{0, {0, 0, 0}, 1}}), Code::kCorruption);                                     // empty
  EXPECT_EQ(bad({{kRecordBytesMax, {0, 0, 4096}, 1}}), Code::kCorruption);                    // past any record
  EXPECT_EQ(bad({{0, {0, 0, 8192}, 1}, {8192, {1, 0, 4096}, 2}}), Code::kOk);                 // abutting
}

TEST(KeysTest, RecordMapReadsVersionOne) {
  // Version 1: birth, count, then extents holding the record from its start.
  Encoder e;
  e.U64(9);
  e.U32(2);
  for (const Extent& x : {Extent{1, 40960, 8192}, Extent{0, 4096, 4096}}) {
    e.U32(x.lun);
    e.U64(x.offset);
    e.U64(x.length);
  }
  const std::string v = e.Release();
  auto out = DecodeRecordMap(v);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const std::vector<RecordPiece> want{{0, {1, 40960, 8192}, 9}, {8192, {0, 4096, 4096}, 9}};
  EXPECT_EQ(out->pieces, want);
  EveryTruncationIsCorruption(v, [](std::string_view s) { return DecodeRecordMap(s); });
}

TEST(KeysTest, VolumeRoundTrip) {
  VolumeRec r;
  r.name = "vol1";
  r.record_bytes = 64 << 10;
  r.next_ino = 1000;
  r.files = 12;
  r.bytes = 1 << 30;
  const std::string v = EncodeVolume(r);
  auto out = DecodeVolume(v);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->name, r.name);
  EXPECT_EQ(out->record_bytes, r.record_bytes);
  EXPECT_EQ(out->next_ino, r.next_ino);
  EXPECT_EQ(out->files, r.files);
  EXPECT_EQ(out->bytes, r.bytes);
  EXPECT_FALSE(out->write_through);
  // The last six bytes (strict mode's flags, the atime policy, the next
  // snapshot id) may be missing (an older record):
  // VolumeRoundTripWithAndWithoutStrictMode. Any shorter is corrupt.
  EveryTruncationIsCorruption(v.substr(0, v.size() - 6), [](std::string_view s) { return DecodeVolume(s); });
  std::string bad = v;
  bad[0] = 2;
  EXPECT_EQ(DecodeVolume(bad).status().code(), Code::kCorruption);
}

TEST(KeysTest, DomainRoundTrip) {
  DomainRec r;
  r.txg = 123456;
  r.next_volume = 4;
  r.data_groups = {{{0, 1}, 15}, {{1, 1}, 15}, {{2, 0}, 16}};
  r.log_salt = 0xfeedface12345678ull;
  r.log_extents = {{0, 4 << 20, 2 << 20}, {1, 4 << 20, 2 << 20}};
  const std::string v = EncodeDomain(r);
  auto out = DecodeDomain(v);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->log_salt, r.log_salt);
  EXPECT_EQ(out->log_extents, r.log_extents);
  EXPECT_EQ(out->txg, r.txg);
  EXPECT_EQ(out->next_volume, r.next_volume);
  ASSERT_EQ(out->data_groups.size(), 3u);
  EXPECT_EQ(out->data_groups[2].first.lun, 2u);
  EXPECT_EQ(out->data_groups[2].first.index, 0u);
  EXPECT_EQ(out->data_groups[2].second, 16u);
  EveryTruncationIsCorruption(v, [](std::string_view s) { return DecodeDomain(s); });
  std::string bad = v;
  bad[0] = 0;
  EXPECT_EQ(DecodeDomain(bad).status().code(), Code::kCorruption);
  // A salt without extents (or extents without a salt) is no log.
  DomainRec half = r;
  half.log_extents.clear();
  EXPECT_EQ(DecodeDomain(EncodeDomain(half)).status().code(), Code::kCorruption);
}

// A version 1 record (before the intent log) still reads, with no log.
TEST(KeysTest, DomainVersion1HasNoLog) {
  Encoder e;
  e.U8(1);
  e.U64(77);
  e.U32(3);
  e.U32(1);
  e.U32(0);
  e.U32(1);
  e.U32(9);
  auto out = DecodeDomain(e.Release());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->txg, 77u);
  EXPECT_EQ(out->next_volume, 3u);
  ASSERT_EQ(out->data_groups.size(), 1u);
  EXPECT_EQ(out->data_groups[0].second, 9u);
  EXPECT_EQ(out->log_salt, 0u);
  EXPECT_TRUE(out->log_extents.empty());
}

TEST(KeysTest, ExportRoundTrip) {
  const ExportRec r = SampleExport();
  const std::string v = EncodeExport(r);
  auto out = DecodeExport(3, v);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->vol, 7u);
  EXPECT_EQ(out->e, r.e);
  EveryTruncationIsCorruption(v, [](std::string_view s) { return DecodeExport(3, s); });
  // Trailing bytes, unknown flags and an unknown version are refused.
  EXPECT_EQ(DecodeExport(3, v + "x").status().code(), Code::kCorruption);
  std::string bad = v;
  bad[0] = static_cast<char>(kExportVersion + 1);
  auto unknown = DecodeExport(3, bad);
  EXPECT_EQ(unknown.status().code(), Code::kCorruption);
  EXPECT_NE(unknown.status().message().find("unknown record version 2"), std::string::npos)
      << unknown.status().ToString();
  bad = v;
  const size_t flags_at = 1 + 4 + 2 + r.e.path.size() + 2 + r.e.pseudo.size();
  bad[flags_at] = 8;
  EXPECT_EQ(DecodeExport(3, bad).status().code(), Code::kCorruption);
  // Flag 4: `.snapshot` listed.
  ExportRec shown = r;
  shown.e.show_snapshot_dir = true;
  auto back = DecodeExport(3, EncodeExport(shown));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->e.show_snapshot_dir);
  EXPECT_EQ(back->e, shown.e);
}

TEST(KeysTest, ExportCounterRoundTrip) {
  const std::string v = EncodeExportCounter(65536);
  auto next = DecodeExportCounter(v);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, 65536u);
  EveryTruncationIsCorruption(v, [](std::string_view s) { return DecodeExportCounter(s); });
  EXPECT_EQ(DecodeExportCounter(v + "x").status().code(), Code::kCorruption);
  EXPECT_EQ(DecodeExportCounter(EncodeExportCounter(0)).status().code(), Code::kCorruption) << "0 is never next";
  std::string bad = v;
  bad[0] = 9;
  EXPECT_EQ(DecodeExportCounter(bad).status().code(), Code::kCorruption);
}

TEST(KeysTest, HandleSecret) {
  const std::string secret(32, 's');
  const std::string v = EncodeHandleSecret(secret);
  ASSERT_EQ(v.size(), 33u);
  EXPECT_EQ(static_cast<uint8_t>(v[0]), kHandleSecretVersion);
  EXPECT_EQ(v.substr(1), secret);
}

}  // namespace
// History keys keep one key's versions together and in kill order, whatever
// names follow; dead entries round-trip and refuse what is malformed.
TEST(KeysTest, HistoryAndDeadEntries) {
  const std::string a = DirentKey(3, 7, "a"), ab = DirentKey(3, 7, "ab"), a1 = DirentKey(3, 7, "a\x01");
  EXPECT_TRUE(HasBirth(a));
  EXPECT_FALSE(HasBirth(SnapshotKey(3, 1)));
  EXPECT_FALSE(HasBirth(ExportKey(1)));
  EXPECT_LT(HistoryKey(a, 5), HistoryKey(a, 6));
  EXPECT_LT(HistoryKey(a, 1ull << 40), HistoryKey(a1, 0));
  EXPECT_LT(HistoryKey(a1, 1ull << 40), HistoryKey(ab, 0));
  EXPECT_EQ(LiveKey(HistoryPrefix(a)), a);
  EXPECT_EQ(LiveKey(HistoryPrefix(InodeKey(3, 9))), InodeKey(3, 9));
  const Extent e{1, 8192, 4096};
  auto x = DecodeDead(DeadExtentKey(3, 9, 4, e), EncodeU64(4096));
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(x->kind, kDeadExtent);
  EXPECT_EQ(x->vol, 3u);
  EXPECT_EQ(x->kill, 9u);
  EXPECT_EQ(x->birth, 4u);
  EXPECT_EQ(x->ext, e);
  EXPECT_EQ(DecodeDead(DeadExtentKey(3, 9, 4, e), EncodeU64(1)).status().code(), Code::kCorruption);
  EXPECT_EQ(DecodeDead(DeadExtentKey(3, 4, 4, e), EncodeU64(4096)).status().code(), Code::kCorruption)
      << "killed in the group of its birth";
  const std::string hk = HistoryKey(a, 9);
  auto y = DecodeDead(DeadVersionKey(3, 9, 4, hk), EncodeU64(40));
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->history_key, hk);
  EXPECT_EQ(DecodeDead(DeadVersionKey(3, 8, 4, hk), EncodeU64(40)).status().code(), Code::kCorruption)
      << "a history key of another kill";
  EXPECT_LT(DeadPrefix(3, 9, 4), DeadPrefix(3, 9, 5));
  EXPECT_LT(DeadExtentKey(3, 9, 5, e), DeadPrefix(3, 10));
  SnapshotRec r;
  r.name = "hourly-2026-11-27T08:00";
  r.txg = 12;
  r.created = {100, 5};
  auto back = DecodeSnapshot(EncodeSnapshot(r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->name, r.name);
  EXPECT_EQ(back->txg, 12u);
  EXPECT_FALSE(back->deleting);
  EveryTruncationIsCorruption(EncodeSnapshot(r), [](std::string_view s) { return DecodeSnapshot(s); });
}

}  // namespace nasgw::fs::keys
