#include "proto/head.h"

#include <cerrno>
#include <random>

#include <gtest/gtest.h>

namespace nasgw::proto {
namespace {

Handle H(uint32_t vol, uint64_t ino, uint64_t gen, uint64_t scope = 1) {
  Handle h{vol, ino, gen, 0, scope, {}};
  for (size_t i = 0; i < h.mac.size(); i++) h.mac[i] = static_cast<uint8_t>(0xa0 + i);
  return h;
}

Request Base(Op op) {
  Request r;
  r.op = op;
  r.creds = {1000, 100, {4, 27, 1000}};
  r.h = H(3, 42, 7);
  return r;
}

Request RoundTrip(const Request& r, std::string* keep) {
  *keep = EncodeRequest(r);
  if (r.op == Op::kWrite) keep->append(r.data);
  auto d = DecodeRequest(r.op, *keep);
  EXPECT_TRUE(d.ok()) << OpName(r.op) << ": " << d.status().ToString();
  return d.ok() ? *d : Request{};
}

TEST(HeadProtocol, HeaderRoundTripAndChecks) {
  uint8_t b[kHeaderBytes];
  EncodeHeader({Op::kRead, 0x1122334455667788ull, 4096, 0}, b);
  auto h = DecodeHeader(b, false);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->op, Op::kRead);
  EXPECT_EQ(h->id, 0x1122334455667788ull);
  EXPECT_EQ(h->length, 4096u);

  EncodeHeader({Op::kRead, 1, kPayloadMax + 1, 0}, b);
  EXPECT_FALSE(DecodeHeader(b, false).ok());  // too long
  EncodeHeader({Op::kRead, 1, 10, 5}, b);
  EXPECT_FALSE(DecodeHeader(b, false).ok());  // a request with a status
  EXPECT_TRUE(DecodeHeader(b, true).ok());
  EncodeHeader({Op::kRead, 1, 10, 0}, b);
  b[6] = 99;
  EXPECT_FALSE(DecodeHeader(b, false).ok());  // unknown op
  EncodeHeader({Op::kRead, 1, 10, 0}, b);
  b[0] ^= 1;
  EXPECT_FALSE(DecodeHeader(b, false).ok());  // magic
  EncodeHeader({Op::kRead, 1, 10, 0}, b);
  b[4] = 1;  // the version before handles had MACs
  auto v = DecodeHeader(b, false);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("version 1"), std::string::npos);
  b[4] = 2;  // the version before WRITE's stability and the write verifier
  EXPECT_FALSE(DecodeHeader(b, false).ok());
  EXPECT_EQ(kVersion, 6);
}

TEST(HeadProtocol, EveryRequestRoundTrips) {
  std::string keep;
  Request r = Base(Op::kCreate);
  r.name = "a file";
  r.type = FileType::kSymlink;
  r.mode = 0777;
  r.name2 = "../target";
  Request d = RoundTrip(r, &keep);
  EXPECT_EQ(d.creds.groups, (std::vector<uint32_t>{4, 27, 1000}));
  EXPECT_EQ(d.h.ino, 42u);
  EXPECT_EQ(d.h.gen, 7u);
  EXPECT_EQ(d.name, "a file");
  EXPECT_EQ(d.name2, "../target");
  EXPECT_EQ(d.type, FileType::kSymlink);
  EXPECT_EQ(d.reject, 0);

  // A create whose mode the caller's umask has not narrowed carries it.
  r = Base(Op::kCreate);
  r.name = "f";
  r.type = FileType::kRegular;
  r.mode = 0666;
  r.flags = kCreateUmask;
  r.count = 027;
  d = RoundTrip(r, &keep);
  EXPECT_EQ(d.reject, 0);
  EXPECT_EQ(d.flags, kCreateUmask);
  EXPECT_EQ(d.count, 027u);
  r.count = 01000;  // beyond 0777: a protocol error
  EXPECT_EQ(DecodeRequest(Op::kCreate, EncodeRequest(r)).status().code(), Code::kInvalidArgument);
  r.flags = 0;  // without the flag no umask travels: what the decoder sees is 0
  r.count = 027;
  EXPECT_EQ(RoundTrip(r, &keep).count, 0u);

  r = Base(Op::kRename);
  r.name = "x";
  r.h2 = H(3, 9, 1);
  r.name2 = "y";
  r.flags = kRenameNoReplace;
  d = RoundTrip(r, &keep);
  EXPECT_EQ(d.h2.ino, 9u);
  EXPECT_EQ(d.name2, "y");
  EXPECT_EQ(d.flags, kRenameNoReplace);

  r = Base(Op::kWrite);
  std::string data(5000, 'z');
  r.data = data;
  r.offset = 1 << 20;
  r.stable = kDataSync;
  d = RoundTrip(r, &keep);
  EXPECT_EQ(d.data, data);
  EXPECT_EQ(d.offset, 1u << 20);
  EXPECT_EQ(d.stable, kDataSync);
  // The bytes are viewed in place, not copied.
  EXPECT_GE(d.data.data(), keep.data());
  EXPECT_LE(d.data.data() + d.data.size(), keep.data() + keep.size());

  r = Base(Op::kSetAttr);
  r.set.mask = kSetMode | kSetSize | kSetMtime;
  r.set.mode = 0640;
  r.set.size = 123;
  r.set.mtime = {99, 5};
  d = RoundTrip(r, &keep);
  EXPECT_EQ(d.set.mask, r.set.mask);
  EXPECT_EQ(d.set.mode, 0640u);
  EXPECT_EQ(d.set.mtime, (Time{99, 5}));

  for (Op op : {Op::kGetAttr, Op::kReadLink, Op::kFsync, Op::kListXattr, Op::kRelease}) RoundTrip(Base(op), &keep);
  r = Base(Op::kReadDir);
  r.count = 100;
  r.flags = kReadDirPlus;
  r.offset = 77;
  EXPECT_EQ(RoundTrip(r, &keep).offset, 77u);
  r = Base(Op::kSetXattr);
  r.name = "user.x";
  r.value = std::string("\0bin", 4);
  r.flags = kXattrCreate;
  EXPECT_EQ(RoundTrip(r, &keep).value, r.value);
  r = Base(Op::kHello);
  r.session[3] = 9;
  r.name2 = "fuse";
  EXPECT_EQ(RoundTrip(r, &keep).session[3], 9);
  r = Base(Op::kGetInode);
  r.offset = 0x1234567890ull;
  EXPECT_EQ(RoundTrip(r, &keep).offset, 0x1234567890ull);
  r.offset = 0;  // no inode 0
  EXPECT_FALSE(DecodeRequest(Op::kGetInode, EncodeRequest(r)).ok());
  EXPECT_TRUE(Idempotent(Op::kGetInode));
}

// Version 2's handle: u32 volume, u64 inode, u64 generation, u32 snapshot,
// u64 scope, [16]u8 MAC; every field travels.
TEST(HeadProtocol, HandlesCarrySnapshotScopeAndMac) {
  std::string keep;
  Request r = Base(Op::kGetAttr);
  r.h = H(0xdeadbeef, 0x0102030405060708ull, 0x8877665544332211ull, 0x1111222233334444ull);
  r.h.snap = 0x55667788;
  Request d = RoundTrip(r, &keep);
  EXPECT_EQ(keep.size(), 4 + 4 + 2 + 3 * 4 + 48u);  // credentials, then the handle
  EXPECT_EQ(d.h.volume, 0xdeadbeefu);
  EXPECT_EQ(d.h.ino, 0x0102030405060708ull);
  EXPECT_EQ(d.h.gen, 0x8877665544332211ull);
  EXPECT_EQ(d.h.snap, 0x55667788u);
  EXPECT_EQ(d.h.scope, 0x1111222233334444ull);
  EXPECT_EQ(d.h.mac, r.h.mac);
  // Both handles of LINK and RENAME.
  r = Base(Op::kLink);
  r.name = "n";
  r.h2 = H(3, 9, 1, 5);
  r.h2.mac[15] = 0x42;
  d = RoundTrip(r, &keep);
  EXPECT_EQ(d.h2.scope, 5u);
  EXPECT_EQ(d.h2.mac, r.h2.mac);
  EXPECT_EQ(d.h.mac, r.h.mac);

  // Replies: an attr carries its snapshot and its handle's MAC.
  Reply a;
  a.attr.ino = 9;
  a.attr.gen = 10;
  a.attr.snap = 11;
  a.attr.type = FileType::kRegular;
  for (size_t i = 0; i < a.mac.size(); i++) a.mac[i] = static_cast<uint8_t>(i * 7);
  for (Op op : {Op::kLookup, Op::kGetAttr, Op::kGetInode, Op::kSetAttr, Op::kCreate, Op::kLink, Op::kOpen}) {
    const std::string b = EncodeReply(op, a);
    EXPECT_EQ(b.size(), 134u) << OpName(op);
    auto got = DecodeReply(op, b);
    ASSERT_TRUE(got.ok()) << OpName(op);
    EXPECT_EQ(got->mac, a.mac);
    EXPECT_EQ(got->attr.snap, 11u);
    EXPECT_EQ(got->attr.gen, 10u);
  }
  a.verifier = 1;
  auto w = DecodeReply(Op::kWrite, EncodeReply(Op::kWrite, a));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->mac, a.mac);
  Reply m;
  m.volume = {4, 1 << 17, a.attr};
  m.volume.root.type = FileType::kDirectory;
  m.mac = a.mac;
  auto mr = DecodeReply(Op::kMount, EncodeReply(Op::kMount, m));
  ASSERT_TRUE(mr.ok());
  EXPECT_EQ(mr->mac, a.mac);
  EXPECT_EQ(mr->volume.root.ino, 9u);
  Reply rd;
  rd.entries = {{"a", 5, FileType::kRegular, 1}, {"b", 6, FileType::kRegular, 2}};
  rd.attrs = {a.attr, a.attr};
  rd.macs = {a.mac, Mac{}};
  rd.macs[1][3] = 0x99;
  auto rr = DecodeReply(Op::kReadDir, EncodeReply(Op::kReadDir, rd));
  ASSERT_TRUE(rr.ok());
  ASSERT_EQ(rr->macs.size(), 2u);
  EXPECT_EQ(rr->macs[0], a.mac);
  EXPECT_EQ(rr->macs[1], rd.macs[1]);
}

TEST(HeadProtocol, MountTakesAPath) {
  std::string keep;
  Request r = Base(Op::kMount);
  r.h = {};
  r.name = "vol1";
  r.name2 = "a/b c/d";
  Request d = RoundTrip(r, &keep);
  EXPECT_EQ(d.name, "vol1");
  EXPECT_EQ(d.name2, "a/b c/d");
  EXPECT_EQ(d.reject, 0);
  r.name2 = "";
  EXPECT_EQ(RoundTrip(r, &keep).reject, 0);  // the volume's root
  for (const char* bad : {"/a", "a/", "a//b", "a/../b", ".", "a/./b"}) {
    r.name2 = bad;
    auto got = DecodeRequest(Op::kMount, EncodeRequest(r));
    ASSERT_TRUE(got.ok()) << bad;
    EXPECT_NE(got->reject, 0) << bad;
  }
  r.name2 = std::string(256, 'x');
  EXPECT_EQ(DecodeRequest(Op::kMount, EncodeRequest(r))->reject, ENAMETOOLONG);
  r.name2 = std::string(kMountPathMax + 1, 'x');
  EXPECT_EQ(DecodeRequest(Op::kMount, EncodeRequest(r))->reject, ENAMETOOLONG);
}

TEST(HeadProtocol, StructuralErrorsAreRefused) {
  Request r = Base(Op::kLookup);
  r.name = "n";
  std::string p = EncodeRequest(r);
  EXPECT_FALSE(DecodeRequest(Op::kLookup, p.substr(0, p.size() - 1)).ok());  // truncated
  EXPECT_FALSE(DecodeRequest(Op::kLookup, p + "x").ok());                    // trailing
  r.h.ino = 0;
  EXPECT_FALSE(DecodeRequest(Op::kLookup, EncodeRequest(r)).ok());  // inode 0
  r.h.ino = 42;
  r.h.scope = 0;
  EXPECT_FALSE(DecodeRequest(Op::kLookup, EncodeRequest(r)).ok());  // no scope
  r = Base(Op::kRename);
  r.name = "x";
  r.name2 = "y";
  r.h2 = H(3, 9, 1, 0);
  EXPECT_FALSE(DecodeRequest(Op::kRename, EncodeRequest(r)).ok());  // the target's scope is 0
  r.h2 = H(3, 9, 1);
  r.flags = kRenameExchange;
  EXPECT_TRUE(DecodeRequest(Op::kRename, EncodeRequest(r)).ok());
  r.flags = kRenameExchange | kRenameNoReplace;
  EXPECT_FALSE(DecodeRequest(Op::kRename, EncodeRequest(r)).ok());  // one or the other
  r.flags = 4;
  EXPECT_FALSE(DecodeRequest(Op::kRename, EncodeRequest(r)).ok());  // RENAME_WHITEOUT: no such flag here
  r = Base(Op::kRead);
  r.count = kIoBytesMax + 1;
  EXPECT_FALSE(DecodeRequest(Op::kRead, EncodeRequest(r)).ok());
  r = Base(Op::kReadDir);
  r.count = 0;
  EXPECT_FALSE(DecodeRequest(Op::kReadDir, EncodeRequest(r)).ok());
  r = Base(Op::kCreate);
  r.name = "f";
  r.type = static_cast<FileType>(9);
  EXPECT_FALSE(DecodeRequest(Op::kCreate, EncodeRequest(r)).ok());
  r.type = FileType::kRegular;
  r.flags = 64;
  EXPECT_FALSE(DecodeRequest(Op::kCreate, EncodeRequest(r)).ok());  // unknown flag
  r = Base(Op::kWrite);
  std::string data(10, 'a');
  r.data = data;
  std::string w = EncodeRequest(r) + data;
  EXPECT_FALSE(DecodeRequest(Op::kWrite, w.substr(0, w.size() - 1)).ok());  // short data
  // A group count that claims more than the payload holds.
  r = Base(Op::kGetAttr);
  std::string g = EncodeRequest(r);
  g[8] = static_cast<char>(0xff);
  g[9] = 0x03;
  EXPECT_FALSE(DecodeRequest(Op::kGetAttr, g).ok());
}

TEST(HeadProtocol, BadValuesAreRejectedWithErrno) {
  Request r = Base(Op::kCreate);
  r.type = FileType::kRegular;
  r.name = std::string(256, 'n');
  auto d = DecodeRequest(Op::kCreate, EncodeRequest(r));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->reject, ENAMETOOLONG);
  r.name = "a/b";
  EXPECT_EQ(DecodeRequest(Op::kCreate, EncodeRequest(r))->reject, EINVAL);
  r.name = "..";
  EXPECT_EQ(DecodeRequest(Op::kCreate, EncodeRequest(r))->reject, EINVAL);
  Request l = Base(Op::kLookup);
  l.name = "..";
  EXPECT_EQ(DecodeRequest(Op::kLookup, EncodeRequest(l))->reject, 0);
  // A size beyond the largest file is the file system's refusal (EFBIG, as
  // truncate(2)), not a malformed request: NFS SETATTR answers FBIG.
  Request t = Base(Op::kSetAttr);
  t.set.mask = kSetSize;
  t.set.size = ~0ull;
  auto big = DecodeRequest(Op::kSetAttr, EncodeRequest(t));
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->reject, EFBIG);
  t.set.size = kFileSizeMax;
  EXPECT_EQ(DecodeRequest(Op::kSetAttr, EncodeRequest(t))->reject, 0);
  t.set.mask = kSetMode;  // a size that is not asked for must still be sane
  t.set.size = ~0ull;
  EXPECT_FALSE(DecodeRequest(Op::kSetAttr, EncodeRequest(t)).ok());
  Request x = Base(Op::kSetXattr);
  x.name = "user.big";
  x.value = std::string(kXattrValueMax + 1, 'v');
  EXPECT_EQ(DecodeRequest(Op::kSetXattr, EncodeRequest(x))->reject, E2BIG);
}

TEST(HeadProtocol, RepliesRoundTrip) {
  Reply r;
  r.entries = {{"a", 5, FileType::kRegular, 1}, {"b", 6, FileType::kDirectory, 2}};
  r.attrs.resize(2);
  r.attrs[0].type = FileType::kRegular;
  r.attrs[0].size = 77;
  r.attrs[1].type = FileType::kDirectory;
  r.eof = true;
  auto d = DecodeReply(Op::kReadDir, EncodeReply(Op::kReadDir, r));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->entries.size(), 2u);
  EXPECT_EQ(d->entries[1].name, "b");
  EXPECT_EQ(d->attrs[0].size, 77u);
  EXPECT_TRUE(d->eof);

  Reply a;
  a.attr.type = FileType::kRegular;
  a.attr.mtime = {5, 6};
  a.u32 = 8192;
  a.stable = kFileSync;
  a.verifier = 0x0123456789abcdefull;
  auto w = DecodeReply(Op::kWrite, EncodeReply(Op::kWrite, a));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->u32, 8192u);
  EXPECT_EQ(w->stable, kFileSync);
  EXPECT_EQ(w->verifier, 0x0123456789abcdefull);
  EXPECT_EQ(w->attr.mtime, (Time{5, 6}));
  EXPECT_EQ(EncodeReply(Op::kWrite, a).size(), 4 + 1 + 8 + 134u);
  a.attr.flags = kAttrAclAccess | kAttrAclDefault;  // the ACL flags travel
  auto fl = DecodeReply(Op::kGetAttr, EncodeReply(Op::kGetAttr, a));
  ASSERT_TRUE(fl.ok());
  EXPECT_EQ(fl->attr.flags, kAttrAclAccess | kAttrAclDefault);
  a.attr.flags = 4;  // an unknown flag
  EXPECT_FALSE(DecodeReply(Op::kGetAttr, EncodeReply(Op::kGetAttr, a)).ok());
  a.attr.flags = 0;
  a.attr.type = FileType::kNone;  // not a valid type
  EXPECT_FALSE(DecodeReply(Op::kGetAttr, EncodeReply(Op::kGetAttr, a)).ok());

  uint8_t p[kReadPrefixBytes];
  EncodeReadPrefix(true, 100, p);
  auto rp = DecodeReadPrefix(p, kReadPrefixBytes + 100, 4096);
  ASSERT_TRUE(rp.ok());
  EXPECT_TRUE(rp->first);
  EXPECT_EQ(rp->second, 100u);
  EXPECT_FALSE(DecodeReadPrefix(p, kReadPrefixBytes + 100, 50).ok());  // more than asked
  EXPECT_FALSE(DecodeReadPrefix(p, kReadPrefixBytes + 99, 4096).ok());

  EXPECT_EQ(DecodeError(EncodeError("no such volume")), "no such volume");
  EXPECT_EQ(DecodeError("x"), "(no message)");
}

// WRITE says how durable it must be; its reply the level reached and the
// write verifier, which FSYNC (NFS COMMIT) and HELLO replies carry too.
TEST(HeadProtocol, StabilityAndWriteVerifier) {
  std::string keep;
  Request r = Base(Op::kWrite);
  std::string data(3, 'w');
  r.data = data;
  for (uint32_t st : {kUnstable, kDataSync, kFileSync}) {
    r.stable = st;
    EXPECT_EQ(RoundTrip(r, &keep).stable, st);
  }
  r.stable = kFileSync + 1;  // no such level: a protocol error
  EXPECT_FALSE(DecodeRequest(Op::kWrite, EncodeRequest(r) + data).ok());

  Reply w;
  w.attr.type = FileType::kRegular;
  w.stable = kFileSync + 1;
  w.verifier = 5;
  EXPECT_FALSE(DecodeReply(Op::kWrite, EncodeReply(Op::kWrite, w)).ok());  // no such level
  w.stable = kUnstable;
  w.verifier = 0;
  EXPECT_FALSE(DecodeReply(Op::kWrite, EncodeReply(Op::kWrite, w)).ok());  // nasgwd never sends 0

  Reply f;
  f.verifier = ~0ull;
  EXPECT_EQ(EncodeReply(Op::kFsync, f).size(), 8u);
  auto fd = DecodeReply(Op::kFsync, EncodeReply(Op::kFsync, f));
  ASSERT_TRUE(fd.ok());
  EXPECT_EQ(fd->verifier, ~0ull);
  EXPECT_FALSE(DecodeReply(Op::kFsync, "").ok());
  f.verifier = 0;
  EXPECT_FALSE(DecodeReply(Op::kFsync, EncodeReply(Op::kFsync, f)).ok());

  Reply h;
  h.hello.node_name = "gw-a";
  h.hello.resumed = true;
  h.hello.write_verifier = 0x1122334455667788ull;
  auto hd = DecodeReply(Op::kHello, EncodeReply(Op::kHello, h));
  ASSERT_TRUE(hd.ok());
  EXPECT_EQ(hd->hello.write_verifier, 0x1122334455667788ull);
  EXPECT_TRUE(hd->hello.resumed);
  h.hello.write_verifier = 0;  // no domain open yet: allowed in HELLO
  EXPECT_TRUE(DecodeReply(Op::kHello, EncodeReply(Op::kHello, h)).ok());
}

TEST(HeadProtocol, LockRequestsRoundTripAndAreStrict) {
  std::string keep;
  Request r = Base(Op::kLock);
  r.owner = 0xfeedface12345678ull;
  r.lock_type = kLockWrite;
  r.offset = 4096;
  r.length = 0;  // to the end of the file
  Request d = RoundTrip(r, &keep);
  EXPECT_EQ(d.owner, r.owner);
  EXPECT_EQ(d.lock_type, kLockWrite);
  EXPECT_EQ(d.offset, 4096u);
  EXPECT_EQ(d.length, 0u);
  EXPECT_EQ(d.reject, 0);
  // The field layout: handle, u64 owner, u8 type, u64 start, u64 length, u32 flags.
  EXPECT_EQ(keep.size(), EncodeRequest(Base(Op::kGetAttr)).size() + 8 + 1 + 8 + 8 + 4);
  r.op = Op::kTestLock;
  r.lock_type = kLockRead;
  r.length = 10;
  d = RoundTrip(r, &keep);
  EXPECT_EQ(d.lock_type, kLockRead);
  EXPECT_EQ(d.length, 10u);
  EXPECT_EQ(keep.size(), EncodeRequest(Base(Op::kGetAttr)).size() + 8 + 1 + 8 + 8);
  Request u = Base(Op::kUnlock);
  u.owner = 3;
  u.offset = 1;
  u.length = ~0ull;  // ends exactly at 2^64 - 1
  d = RoundTrip(u, &keep);
  EXPECT_EQ(d.owner, 3u);
  EXPECT_EQ(d.length, ~0ull);
  EXPECT_EQ(keep.size(), EncodeRequest(Base(Op::kGetAttr)).size() + 8 + 8 + 8);
  Request g = Base(Op::kGoodbye);
  g.h = {};
  RoundTrip(g, &keep);

  // Protocol errors: an unknown type, flags, a handle with inode 0, truncation.
  r = Base(Op::kLock);
  r.lock_type = 3;
  EXPECT_FALSE(DecodeRequest(Op::kLock, EncodeRequest(r)).ok());
  r.lock_type = 0;
  EXPECT_FALSE(DecodeRequest(Op::kLock, EncodeRequest(r)).ok());
  r.lock_type = kLockRead;
  r.flags = kLockReclaim;  // the one flag: carried
  auto reclaim = DecodeRequest(Op::kLock, EncodeRequest(r));
  ASSERT_TRUE(reclaim.ok());
  EXPECT_EQ(reclaim->flags, kLockReclaim);
  r.flags = 2;  // an unknown one
  EXPECT_FALSE(DecodeRequest(Op::kLock, EncodeRequest(r)).ok());
  r.flags = 0;
  r.h.ino = 0;
  EXPECT_FALSE(DecodeRequest(Op::kLock, EncodeRequest(r)).ok());
  r.h.ino = 42;
  std::string p = EncodeRequest(r);
  EXPECT_FALSE(DecodeRequest(Op::kLock, p.substr(0, p.size() - 1)).ok());
  EXPECT_FALSE(DecodeRequest(Op::kLock, p + "x").ok());
  EXPECT_FALSE(DecodeRequest(Op::kGoodbye, EncodeRequest(Base(Op::kGoodbye)) + "x").ok());
  // A range beyond 2^64 - 1 is well-formed but refused: EINVAL, the
  // connection stays.
  r.offset = 2;
  r.length = ~0ull;
  auto e = DecodeRequest(Op::kLock, EncodeRequest(r));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->reject, EINVAL);
  u.offset = ~0ull;
  u.length = 2;
  EXPECT_EQ(DecodeRequest(Op::kUnlock, EncodeRequest(u))->reject, EINVAL);
  u.length = 1;  // the last byte alone
  EXPECT_EQ(DecodeRequest(Op::kUnlock, EncodeRequest(u))->reject, 0);

  for (Op op : {Op::kLock, Op::kUnlock, Op::kTestLock, Op::kGoodbye}) {
    EXPECT_TRUE(Idempotent(op)) << OpName(op);
    EXPECT_TRUE(KnownOp(static_cast<uint16_t>(op)));
  }
  EXPECT_STREQ(OpName(Op::kTestLock), "testlock");
}

TEST(HeadProtocol, ShareRoundTripsAndIsStrict) {
  std::string keep;
  Request r = Base(Op::kShare);
  r.owner = 0x1234567890abcdefull;
  r.share_access = kShareRead | kShareWrite;
  r.share_deny = kShareWrite | kShareDelete;
  Request d = RoundTrip(r, &keep);
  EXPECT_EQ(d.owner, r.owner);
  EXPECT_EQ(d.share_access, kShareRead | kShareWrite);
  EXPECT_EQ(d.share_deny, kShareWrite | kShareDelete);
  // handle, u64 owner, u32 access, u32 deny
  EXPECT_EQ(keep.size(), EncodeRequest(Base(Op::kGetAttr)).size() + 8 + 4 + 4);
  r.share_access = 0;  // a release
  r.share_deny = 0;
  EXPECT_EQ(RoundTrip(r, &keep).share_access, 0u);
  // Unknown bits, a truncated or overlong payload: protocol errors.
  r.share_access = 8;
  EXPECT_FALSE(DecodeRequest(Op::kShare, EncodeRequest(r)).ok());
  r.share_access = kShareRead;
  r.share_deny = 0x80000000u;
  EXPECT_FALSE(DecodeRequest(Op::kShare, EncodeRequest(r)).ok());
  r.share_deny = 0;
  std::string p = EncodeRequest(r);
  EXPECT_FALSE(DecodeRequest(Op::kShare, p.substr(0, p.size() - 1)).ok());
  EXPECT_FALSE(DecodeRequest(Op::kShare, p + "x").ok());
  EXPECT_TRUE(Idempotent(Op::kShare));
  EXPECT_STREQ(OpName(Op::kShare), "share");
  EXPECT_TRUE(DecodeReply(Op::kShare, "").ok());
  EXPECT_FALSE(DecodeReply(Op::kShare, "x").ok());
}

TEST(HeadProtocol, FallocateAndSeekRoundTripAndAreChecked) {
  std::string keep;
  Request r = Base(Op::kFallocate);
  r.flags = kFallocPunchHole | kFallocKeepSize;
  r.offset = 4096;
  r.length = 1 << 20;
  Request d = RoundTrip(r, &keep);
  EXPECT_EQ(d.flags, r.flags);
  EXPECT_EQ(d.offset, 4096u);
  EXPECT_EQ(d.length, 1u << 20);
  EXPECT_EQ(keep.size(), EncodeRequest(Base(Op::kGetAttr)).size() + 4 + 8 + 8);
  // Well-formed but refused as Linux refuses them: the errno travels.
  for (uint32_t mode : {uint32_t{kFallocPunchHole}, uint32_t{0x08}, kFallocPunchHole | kFallocZeroRange | 1u}) {
    r.flags = mode;
    auto x = DecodeRequest(Op::kFallocate, EncodeRequest(r));
    ASSERT_TRUE(x.ok());
    EXPECT_EQ(x->reject, EOPNOTSUPP) << mode;
  }
  r.flags = 0;
  r.length = 0;
  EXPECT_EQ(DecodeRequest(Op::kFallocate, EncodeRequest(r))->reject, EINVAL);
  r.length = kFileSizeMax;
  EXPECT_EQ(DecodeRequest(Op::kFallocate, EncodeRequest(r))->reject, EFBIG);
  std::string p = EncodeRequest(r);
  EXPECT_FALSE(DecodeRequest(Op::kFallocate, p.substr(0, p.size() - 1)).ok());
  EXPECT_TRUE(Idempotent(Op::kFallocate));
  Reply fr;
  fr.attr.type = FileType::kRegular;
  fr.attr.size = 77;
  auto fd = DecodeReply(Op::kFallocate, EncodeReply(Op::kFallocate, fr));
  ASSERT_TRUE(fd.ok());
  EXPECT_EQ(fd->attr.size, 77u);

  Request s = Base(Op::kSeek);
  s.flags = kSeekHole;
  s.offset = 12345;
  d = RoundTrip(s, &keep);
  EXPECT_EQ(d.flags, kSeekHole);
  EXPECT_EQ(d.offset, 12345u);
  s.flags = 2;
  EXPECT_FALSE(DecodeRequest(Op::kSeek, EncodeRequest(s)).ok()) << "neither data nor hole";
  Reply sr;
  sr.offset = 1ull << 40;
  auto sd = DecodeReply(Op::kSeek, EncodeReply(Op::kSeek, sr));
  ASSERT_TRUE(sd.ok());
  EXPECT_EQ(sd->offset, 1ull << 40);
  EXPECT_FALSE(DecodeReply(Op::kSeek, "1234567").ok());
  EXPECT_STREQ(OpName(Op::kSeek), "seek");
  EXPECT_STREQ(OpName(Op::kFallocate), "fallocate");
}

TEST(HeadProtocol, ReadDirXattrsRoundTripAndAreBounded) {
  Request q = Base(Op::kReadDir);
  q.count = 10;
  q.flags = kReadDirPlus | kReadDirXattrs;
  std::string keep;
  EXPECT_EQ(RoundTrip(q, &keep).flags, kReadDirPlus | kReadDirXattrs);
  q.flags = kReadDirXattrs;
  EXPECT_FALSE(DecodeRequest(Op::kReadDir, EncodeRequest(q)).ok()) << "xattrs need plus";
  Reply r;
  for (int i = 0; i < 2; i++) {
    r.entries.push_back({"e" + std::to_string(i), uint64_t(10 + i), FileType::kRegular, uint64_t(i + 1)});
    Attr a;
    a.type = FileType::kRegular;
    r.attrs.push_back(a);
    r.macs.push_back(Mac{});
  }
  r.xattrs.resize(2);
  r.xattrs[0].carried = true;
  r.xattrs[0].list = {{"user.DOSATTRIB", std::string("\0\1", 2)}, {"user.x", "y"}};
  auto d = DecodeReply(Op::kReadDir, EncodeReply(Op::kReadDir, r));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->xattrs.size(), 2u);
  EXPECT_TRUE(d->xattrs[0].carried);
  EXPECT_EQ(d->xattrs[0].list, r.xattrs[0].list);
  EXPECT_FALSE(d->xattrs[1].carried);
  EXPECT_EQ(EntryXattrBytes(r.xattrs[0]), 14 + 1 + 4 + 2 + 6 + 1 + 4 + 1);
  // Past the entry's bound: a malformed reply.
  r.xattrs[1].carried = true;
  r.xattrs[1].list = {{"user.big", std::string(kReadDirXattrBytesMax, 'b')}};
  EXPECT_FALSE(DecodeReply(Op::kReadDir, EncodeReply(Op::kReadDir, r)).ok());
  // Without PLUS nothing is sent, whatever the vector holds.
  Reply bare = r;
  bare.attrs.clear();
  bare.macs.clear();
  d = DecodeReply(Op::kReadDir, EncodeReply(Op::kReadDir, bare));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->xattrs.empty());
}

TEST(HeadProtocol, LockRepliesRoundTripAndAreStrict) {
  Reply r;
  r.lock = {kLockWrite, 100, 0, 7, 0xabcdefull};
  auto d = DecodeReply(Op::kTestLock, EncodeReply(Op::kTestLock, r));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->lock.type, kLockWrite);
  EXPECT_EQ(d->lock.start, 100u);
  EXPECT_EQ(d->lock.length, 0u);
  EXPECT_EQ(d->lock.session, 7u);
  EXPECT_EQ(d->lock.owner, 0xabcdefull);
  EXPECT_EQ(EncodeReply(Op::kTestLock, r).size(), 33u);
  // Nothing conflicts: type 0, every other field 0.
  d = DecodeReply(Op::kTestLock, EncodeReply(Op::kTestLock, Reply{}));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->lock.type, 0u);
  Reply bad;
  bad.lock = {0, 5, 0, 0, 0};  // no lock, but a start
  EXPECT_FALSE(DecodeReply(Op::kTestLock, EncodeReply(Op::kTestLock, bad)).ok());
  bad.lock = {3, 0, 0, 1, 1};  // unknown type
  EXPECT_FALSE(DecodeReply(Op::kTestLock, EncodeReply(Op::kTestLock, bad)).ok());
  bad.lock = {kLockRead, ~0ull, 2, 1, 1};  // beyond 2^64 - 1
  EXPECT_FALSE(DecodeReply(Op::kTestLock, EncodeReply(Op::kTestLock, bad)).ok());
  EXPECT_TRUE(DecodeReply(Op::kLock, "").ok());
  EXPECT_FALSE(DecodeReply(Op::kLock, "x").ok());
  EXPECT_TRUE(DecodeReply(Op::kUnlock, "").ok());
  EXPECT_TRUE(DecodeReply(Op::kGoodbye, "").ok());

  // A LOCK refused with EAGAIN: the message, then the conflicting lock.
  const std::string denied = EncodeLockDenied("conflicts", r.lock);
  EXPECT_EQ(DecodeError(denied), "conflicts");  // still reads as an error message
  auto c = DecodeLockDenied(denied);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->owner, 0xabcdefull);
  EXPECT_EQ(c->type, kLockWrite);
  EXPECT_FALSE(DecodeLockDenied(EncodeError("conflicts")).ok());  // no lock
  EXPECT_FALSE(DecodeLockDenied(denied + "x").ok());
  EXPECT_FALSE(DecodeLockDenied(EncodeLockDenied("m", Reply{}.lock)).ok());  // type 0 is no conflict
}

// Random bytes never crash the decoders (the libFuzzer target runs the same
// function far longer; this keeps a quick version in every build).
TEST(HeadProtocol, RandomPayloadsNeverCrash) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; i++) {
    std::string p(rng() % 200, '\0');
    for (auto& c : p) c = static_cast<char>(rng());
    static const std::vector<uint16_t> kOps = {1,  2,  3,  4,  10, 11, 12, 13, 20, 21, 22, 23, 24, 25,
                                               26, 27, 30, 31, 32, 33, 34, 40, 41, 42, 43, 50, 51, 52};
    const Op op = static_cast<Op>(kOps[rng() % kOps.size()]);
    (void)DecodeRequest(op, p);
    (void)DecodeReply(op, p);
    (void)DecodeLockDenied(p);
  }
}

}  // namespace
}  // namespace nasgw::proto
