#include "proto/head.h"

#include <algorithm>
#include <cerrno>

#include "base/coding.h"

namespace nasgw::proto {

namespace {

Status Bad(std::string_view what) {
  return Status::InvalidArgument("head protocol: " + std::string(what));
}

// ---- shared pieces ----------------------------------------------------------

void PutMac(Encoder& e, const Mac& m) {
  for (uint8_t b : m) e.U8(b);
}
Mac GetMac(Decoder& d) {
  Mac m{};
  for (auto& b : m) b = d.U8();
  return m;
}

// u32 volume, u64 inode, u64 generation, u32 snapshot, u64 scope, [16]u8 MAC.
void PutHandle(Encoder& e, const Handle& h) {
  e.U32(h.volume);
  e.U64(h.ino);
  e.U64(h.gen);
  e.U32(h.snap);
  e.U64(h.scope);
  PutMac(e, h.mac);
}
Handle GetHandle(Decoder& d) {
  Handle h;
  h.volume = d.U32();
  h.ino = d.U64();
  h.gen = d.U64();
  h.snap = d.U32();
  h.scope = d.U64();
  h.mac = GetMac(d);
  return h;
}

void PutTime(Encoder& e, const Time& t) {
  e.U64(static_cast<uint64_t>(t.sec));
  e.U32(t.nsec);
}
Time GetTime(Decoder& d) {
  Time t;
  t.sec = static_cast<int64_t>(d.U64());
  t.nsec = d.U32();
  return t;
}
bool TimeOk(const Time& t) {
  return t.nsec < 1'000'000'000;
}

// An attr starts with its handle's identity and MAC (the volume and scope
// are the request's).
void PutAttr(Encoder& e, const Attr& a, const Mac& mac) {
  e.U64(a.ino);
  e.U64(a.gen);
  e.U32(a.snap);
  PutMac(e, mac);
  e.U8(static_cast<uint8_t>(a.type));
  e.U32(a.mode);
  e.U32(a.uid);
  e.U32(a.gid);
  e.U32(a.nlink);
  e.U64(a.size);
  e.U64(a.blocks);
  e.U64(a.rdev);
  PutTime(e, a.atime);
  PutTime(e, a.mtime);
  PutTime(e, a.ctime);
  PutTime(e, a.btime);
  e.U64(a.change);
  e.U8(a.flags);
}
bool TypeOk(uint8_t t) {
  return t >= static_cast<uint8_t>(FileType::kRegular) && t <= 7;
}
Attr GetAttr(Decoder& d, Mac& mac, bool& ok) {
  Attr a;
  a.ino = d.U64();
  a.gen = d.U64();
  a.snap = d.U32();
  mac = GetMac(d);
  uint8_t t = d.U8();
  a.type = static_cast<FileType>(t);
  a.mode = d.U32();
  a.uid = d.U32();
  a.gid = d.U32();
  a.nlink = d.U32();
  a.size = d.U64();
  a.blocks = d.U64();
  a.rdev = d.U64();
  a.atime = GetTime(d);
  a.mtime = GetTime(d);
  a.ctime = GetTime(d);
  a.btime = GetTime(d);
  a.change = d.U64();
  a.flags = d.U8();
  if (!TypeOk(t) || a.mode > 07777 || (a.flags & ~(kAttrAclAccess | kAttrAclDefault)) || !TimeOk(a.atime) ||
      !TimeOk(a.mtime) || !TimeOk(a.ctime) || !TimeOk(a.btime)) {
    ok = false;
  }
  return a;
}

void Reject(Request& r, int err, std::string why) {
  if (r.reject == 0) {
    r.reject = err;
    r.reject_why = std::move(why);
  }
}

// A path component: 1..255 bytes, no '/', no NUL. "." and ".." only where
// `dots` (LOOKUP).
void CheckName(Request& r, std::string_view n, std::string_view field, bool dots = false) {
  const std::string f(field);
  if (n.empty()) {
    Reject(r, ENOENT, f + " is empty");
  } else if (n.size() > kNameMax) {
    Reject(r, ENAMETOOLONG, f + " is longer than 255 bytes");
  } else if (n.find('/') != std::string_view::npos || n.find('\0') != std::string_view::npos) {
    Reject(r, EINVAL, f + " contains '/' or NUL");
  } else if (!dots && (n == "." || n == "..")) {
    Reject(r, EINVAL, f + " is '.' or '..'");
  }
}
void CheckXattrName(Request& r, std::string_view n) {
  if (n.empty() || n.find('\0') != std::string_view::npos) {
    Reject(r, EINVAL, "xattr name is empty or has NUL");
  } else if (n.size() > kXattrNameMax) {
    Reject(r, ERANGE, "xattr name longer than 255 bytes");
  }
}
Status CheckHandle(const Handle& h, std::string_view field) {
  if (h.ino == 0) return Bad(std::string(field) + ": inode 0");
  if (h.scope == 0) return Bad(std::string(field) + ": scope 0");
  return Status();
}
// MOUNT's path: empty, or names joined by single '/'.
void CheckMountPath(Request& r, std::string_view p) {
  if (p.empty()) return;
  if (p.size() > kMountPathMax) return Reject(r, ENAMETOOLONG, "mount path longer than 4095 bytes");
  size_t at = 0;
  while (r.reject == 0) {
    const size_t slash = p.find('/', at);
    const std::string_view n = p.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at);
    CheckName(r, n, "mount path component");
    if (slash == std::string_view::npos) break;
    at = slash + 1;
  }
}
Status CheckFlags(uint32_t flags, uint32_t allowed) {
  if (flags & ~allowed) return Bad("unknown flags");
  return Status();
}

}  // namespace

bool LeaseTypeOk(uint32_t t) {
  return t == 0 || t == kLeaseRead || t == (kLeaseRead | kLeaseWrite);
}

namespace {

bool LockTypeOk(uint32_t t) {
  return t == kLockRead || t == kLockWrite;
}
// A lock description: u8 type, u64 start, u64 length, u64 session, u64 owner.
void PutLock(Encoder& e, const LockInfo& l) {
  e.U8(static_cast<uint8_t>(l.type));
  e.U64(l.start);
  e.U64(l.length);
  e.U64(l.session);
  e.U64(l.owner);
}
// `none_ok`: type 0 (no lock; every other field 0) is allowed.
LockInfo GetLock(Decoder& d, bool none_ok, bool& ok) {
  LockInfo l;
  l.type = d.U8();
  l.start = d.U64();
  l.length = d.U64();
  l.session = d.U64();
  l.owner = d.U64();
  uint64_t end = 0;
  if (l.type == 0) {
    if (!none_ok || l.start != 0 || l.length != 0 || l.session != 0 || l.owner != 0) ok = false;
  } else if (!LockTypeOk(l.type) || !LockRangeEnd(l.start, l.length, &end)) {
    ok = false;
  }
  return l;
}

}  // namespace

const char* OpName(Op op) {
  switch (op) {
    case Op::kHello:
      return "hello";
    case Op::kMount:
      return "mount";
    case Op::kStatfs:
      return "statfs";
    case Op::kGoodbye:
      return "goodbye";
    case Op::kLookup:
      return "lookup";
    case Op::kGetAttr:
      return "getattr";
    case Op::kSetAttr:
      return "setattr";
    case Op::kAccess:
      return "access";
    case Op::kGetInode:
      return "getinode";
    case Op::kCreate:
      return "create";
    case Op::kLink:
      return "link";
    case Op::kUnlink:
      return "unlink";
    case Op::kRmdir:
      return "rmdir";
    case Op::kRename:
      return "rename";
    case Op::kReadLink:
      return "readlink";
    case Op::kReadDir:
      return "readdir";
    case Op::kFindCaseless:
      return "findcaseless";
    case Op::kOpen:
      return "open";
    case Op::kRelease:
      return "release";
    case Op::kRead:
      return "read";
    case Op::kWrite:
      return "write";
    case Op::kFsync:
      return "fsync";
    case Op::kFallocate:
      return "fallocate";
    case Op::kSeek:
      return "seek";
    case Op::kGetXattr:
      return "getxattr";
    case Op::kSetXattr:
      return "setxattr";
    case Op::kListXattr:
      return "listxattr";
    case Op::kRemoveXattr:
      return "removexattr";
    case Op::kLock:
      return "lock";
    case Op::kUnlock:
      return "unlock";
    case Op::kTestLock:
      return "testlock";
    case Op::kShare:
      return "share";
    case Op::kLease:
      return "lease";
    case Op::kRecall:
      return "recall";
  }
  return "?";
}

bool KnownOp(uint16_t op) {
  return std::string_view(OpName(static_cast<Op>(op))) != "?";
}

bool Idempotent(Op op) {
  switch (op) {
    case Op::kHello:
    case Op::kMount:
    case Op::kStatfs:
    case Op::kLookup:
    case Op::kGetAttr:
    case Op::kGetInode:
    case Op::kSetAttr:  // absolute values (the "now" times are set again: harmless)
    case Op::kAccess:
    case Op::kReadLink:
    case Op::kReadDir:
    case Op::kFindCaseless:
    case Op::kOpen:  // each open has its own id: a resend adds nothing
    case Op::kRelease:
    case Op::kRead:
    case Op::kWrite:  // the same bytes at the same offset
    case Op::kFsync:
    case Op::kFallocate:  // the same range allocated, punched or zeroed again
    case Op::kSeek:
    case Op::kGetXattr:
    case Op::kListXattr:
    case Op::kGoodbye:  // ending an ended session changes nothing
    case Op::kLock:     // re-locking what the owner holds changes nothing
    case Op::kUnlock:   // unlocking nothing is fine
    case Op::kTestLock:
    case Op::kShare:  // it sets the owner's reservation: a resend sets the same
    case Op::kLease:  // the same
    case Op::kRecall:
      return true;
    case Op::kCreate:  // a resend could report EEXIST for its own create
    case Op::kLink:
    case Op::kUnlink:
    case Op::kRmdir:
    case Op::kRename:
    case Op::kSetXattr:  // with XATTR_CREATE a resend fails
    case Op::kRemoveXattr:
      return false;
  }
  return false;
}

void EncodeHeader(const FrameHeader& h, uint8_t out[kHeaderBytes]) {
  PutFixed32(out, kMagic);
  out[4] = static_cast<uint8_t>(kVersion);
  out[5] = static_cast<uint8_t>(kVersion >> 8);
  out[6] = static_cast<uint8_t>(static_cast<uint16_t>(h.op));
  out[7] = static_cast<uint8_t>(static_cast<uint16_t>(h.op) >> 8);
  PutFixed64(out + 8, h.id);
  PutFixed32(out + 16, h.length);
  PutFixed32(out + 20, h.status);
}

Result<FrameHeader> DecodeHeader(const uint8_t in[kHeaderBytes], bool reply) {
  if (GetFixed32(in) != kMagic) return Bad("bad magic");
  const uint16_t version = static_cast<uint16_t>(in[4] | (in[5] << 8));
  if (version != kVersion) {
    return Bad("version " + std::to_string(version) + " not supported (this side speaks " + std::to_string(kVersion) +
               ")");
  }
  const uint16_t op = static_cast<uint16_t>(in[6] | (in[7] << 8));
  if (!KnownOp(op)) return Bad("unknown op " + std::to_string(op));
  FrameHeader h;
  h.op = static_cast<Op>(op);
  h.id = GetFixed64(in + 8);
  h.length = GetFixed32(in + 16);
  h.status = GetFixed32(in + 20);
  if (h.length > kPayloadMax) return Bad("payload of " + std::to_string(h.length) + " bytes exceeds the limit");
  if (!reply && h.status != 0) return Bad("request with a status");
  if (reply && h.status > 4095) return Bad("reply status " + std::to_string(h.status) + " is not an errno");
  return h;
}

// ---- requests -----------------------------------------------------------------

std::string EncodeRequest(const Request& r) {
  Encoder e;
  e.U32(r.creds.uid);
  e.U32(r.creds.gid);
  e.U16(static_cast<uint16_t>(r.creds.groups.size()));
  for (uint32_t g : r.creds.groups) e.U32(g);
  switch (r.op) {
    case Op::kHello:
      for (uint8_t b : r.session) e.U8(b);
      e.Str16(r.name2);
      break;
    case Op::kMount:
      e.Str16(r.name);
      e.Str16(r.name2);
      break;
    case Op::kStatfs:
      e.U32(r.h.volume);
      break;
    case Op::kLookup:
    case Op::kUnlink:
    case Op::kRmdir:
    case Op::kFindCaseless:
    case Op::kGetXattr:
    case Op::kRemoveXattr:
      PutHandle(e, r.h);
      e.Str16(r.name);
      break;
    case Op::kGetAttr:
    case Op::kReadLink:
    case Op::kFsync:
    case Op::kListXattr:
      PutHandle(e, r.h);
      break;
    case Op::kGetInode:
      PutHandle(e, r.h);
      e.U64(r.offset);
      break;
    case Op::kRelease:
      PutHandle(e, r.h);
      e.U64(r.open_id);
      break;
    case Op::kSetAttr:
      PutHandle(e, r.h);
      e.U32(r.set.mask);
      e.U32(r.set.mode);
      e.U32(r.set.uid);
      e.U32(r.set.gid);
      e.U64(r.set.size);
      PutTime(e, r.set.atime);
      PutTime(e, r.set.mtime);
      break;
    case Op::kAccess:
      PutHandle(e, r.h);
      e.U32(r.count);
      break;
    case Op::kOpen:
      PutHandle(e, r.h);
      e.U32(r.count);
      e.U64(r.open_id);
      break;
    case Op::kCreate:
      PutHandle(e, r.h);
      e.Str16(r.name);
      e.U8(static_cast<uint8_t>(r.type));
      e.U32(r.mode);
      e.U64(r.offset);
      e.Str16(r.name2);
      e.U32(r.flags);
      e.U64(r.open_id);
      if (r.flags & kCreateUmask) e.U32(r.count);
      break;
    case Op::kLink:
      PutHandle(e, r.h);
      PutHandle(e, r.h2);
      e.Str16(r.name);
      break;
    case Op::kRename:
      PutHandle(e, r.h);
      e.Str16(r.name);
      PutHandle(e, r.h2);
      e.Str16(r.name2);
      e.U32(r.flags);
      break;
    case Op::kReadDir:
      PutHandle(e, r.h);
      e.U64(r.offset);
      e.U32(r.count);
      e.U32(r.flags);
      break;
    case Op::kRead:
      PutHandle(e, r.h);
      e.U64(r.offset);
      e.U32(r.count);
      break;
    case Op::kFallocate:
      PutHandle(e, r.h);
      e.U32(r.flags);
      e.U64(r.offset);
      e.U64(r.length);
      break;
    case Op::kSeek:
      PutHandle(e, r.h);
      e.U32(r.flags);
      e.U64(r.offset);
      break;
    case Op::kWrite:
      PutHandle(e, r.h);
      e.U64(r.offset);
      e.U32(r.stable);
      e.U32(static_cast<uint32_t>(r.data.size()));
      break;
    case Op::kSetXattr:
      PutHandle(e, r.h);
      e.Str16(r.name);
      e.Str32(r.value);
      e.U32(r.flags);
      break;
    case Op::kGoodbye:
      break;
    case Op::kLock:
    case Op::kTestLock:
      PutHandle(e, r.h);
      e.U64(r.owner);
      e.U8(static_cast<uint8_t>(r.lock_type));
      e.U64(r.offset);
      e.U64(r.length);
      if (r.op == Op::kLock) e.U32(r.flags);
      break;
    case Op::kUnlock:
      PutHandle(e, r.h);
      e.U64(r.owner);
      e.U64(r.offset);
      e.U64(r.length);
      break;
    case Op::kShare:
      PutHandle(e, r.h);
      e.U64(r.owner);
      e.U32(r.share_access);
      e.U32(r.share_deny);
      break;
    case Op::kLease:
      PutHandle(e, r.h);
      e.U64(r.owner);
      e.U32(r.lease);
      break;
    case Op::kRecall:
      break;  // not a request: DecodeRequest refuses it
  }
  return e.Release();
}

Result<Request> DecodeRequest(Op op, std::string_view payload) {
  Decoder d(payload);
  Request r;
  r.op = op;
  r.creds.uid = d.U32();
  r.creds.gid = d.U32();
  const uint16_t ngroups = d.U16();
  if (ngroups > kGroupsMax) return Bad("more than 1024 groups");
  if (d.remaining() < size_t{ngroups} * 4) return Bad("truncated credentials");
  r.creds.groups.resize(ngroups);
  for (auto& g : r.creds.groups) g = d.U32();
  Status s;
  switch (op) {
    case Op::kHello:
      for (auto& b : r.session) b = d.U8();
      r.name2 = d.Str16();
      if (r.name2.size() > 255) s = Bad("client name longer than 255 bytes");
      break;
    case Op::kMount:
      r.name = d.Str16();
      r.name2 = d.Str16();
      if (!d.ok()) break;
      CheckName(r, r.name, "volume name");
      CheckMountPath(r, r.name2);
      break;
    case Op::kStatfs:
      r.h.volume = d.U32();
      r.h.ino = kRootIno;
      break;
    case Op::kLookup:
    case Op::kUnlink:
    case Op::kRmdir:
    case Op::kFindCaseless:
      r.h = GetHandle(d);
      r.name = d.Str16();
      CheckName(r, r.name, "name", op == Op::kLookup);
      break;
    case Op::kGetXattr:
    case Op::kRemoveXattr:
      r.h = GetHandle(d);
      r.name = d.Str16();
      CheckXattrName(r, r.name);
      break;
    case Op::kGetAttr:
    case Op::kReadLink:
    case Op::kFsync:
    case Op::kListXattr:
      r.h = GetHandle(d);
      break;
    case Op::kGetInode:
      r.h = GetHandle(d);
      r.offset = d.U64();
      if (d.ok() && r.offset == 0) return Bad("getinode of inode 0");
      break;
    case Op::kRelease:
      r.h = GetHandle(d);
      r.open_id = d.U64();
      break;
    case Op::kSetAttr:
      r.h = GetHandle(d);
      r.set.mask = d.U32();
      r.set.mode = d.U32();
      r.set.uid = d.U32();
      r.set.gid = d.U32();
      r.set.size = d.U64();
      r.set.atime = GetTime(d);
      r.set.mtime = GetTime(d);
      if (!d.ok()) break;
      if (r.set.mask & ~kSetAll) {
        s = Bad("unknown setattr bits");
      } else if (r.set.mode > 07777) {
        s = Bad("mode beyond 07777");
      } else if (r.set.size > kFileSizeMax && !(r.set.mask & kSetSize)) {
        s = Bad("size beyond the largest file");  // not even asked for
      } else if (r.set.size > kFileSizeMax) {
        Reject(r, EFBIG, "size beyond the largest file (2^63 - 1 bytes)");
      } else if (!TimeOk(r.set.atime) || !TimeOk(r.set.mtime)) {
        s = Bad("nanoseconds beyond 999999999");
      } else if ((r.set.mask & kSetAtime) && (r.set.mask & kSetAtimeNow)) {
        s = Bad("atime both given and now");
      } else if ((r.set.mask & kSetMtime) && (r.set.mask & kSetMtimeNow)) {
        s = Bad("mtime both given and now");
      }
      break;
    case Op::kAccess:
    case Op::kOpen:
      r.h = GetHandle(d);
      r.count = d.U32();
      if (op == Op::kOpen) r.open_id = d.U64();
      if (d.ok() && (r.count & ~7u)) s = Bad("access bits beyond rwx");
      break;
    case Op::kCreate: {
      r.h = GetHandle(d);
      r.name = d.Str16();
      const uint8_t t = d.U8();
      r.type = static_cast<FileType>(t);
      r.mode = d.U32();
      r.offset = d.U64();
      r.name2 = d.Str16();
      r.flags = d.U32();
      r.open_id = d.U64();
      if (r.flags & kCreateUmask) r.count = d.U32();
      if (!d.ok()) break;
      CheckName(r, r.name, "name");
      if (!TypeOk(t)) {
        s = Bad("unknown file type");
      } else if (r.mode > 07777) {
        s = Bad("mode beyond 07777");
      } else if (!(s = CheckFlags(r.flags, kCreateOpen | kCreateUnchecked | kCreateUmask)).ok()) {
        break;
      } else if (r.count > 0777) {
        s = Bad("umask beyond 0777");
      } else if (r.type == FileType::kSymlink &&
                 (r.name2.empty() || r.name2.size() > kSymlinkMax || r.name2.find('\0') != std::string::npos)) {
        s = Bad("symlink target must be 1..4095 bytes without NUL");
      } else if (r.type != FileType::kSymlink && !r.name2.empty()) {
        s = Bad("a link target for something that is not a symlink");
      } else if ((r.flags & (kCreateOpen | kCreateUnchecked)) && r.type != FileType::kRegular) {
        s = Bad("open/unchecked create of something that is not a regular file");
      }
      break;
    }
    case Op::kLink:
      r.h = GetHandle(d);
      r.h2 = GetHandle(d);
      r.name = d.Str16();
      CheckName(r, r.name, "name");
      if (d.ok()) s = CheckHandle(r.h2, "directory");
      break;
    case Op::kRename:
      r.h = GetHandle(d);
      r.name = d.Str16();
      r.h2 = GetHandle(d);
      r.name2 = d.Str16();
      r.flags = d.U32();
      if (!d.ok()) break;
      CheckName(r, r.name, "name");
      CheckName(r, r.name2, "new name");
      s = CheckHandle(r.h2, "target directory");
      if (s.ok()) s = CheckFlags(r.flags, kRenameNoReplace | kRenameExchange);
      if (s.ok() && r.flags == (kRenameNoReplace | kRenameExchange)) s = Bad("NOREPLACE and EXCHANGE together");
      break;
    case Op::kReadDir:
      r.h = GetHandle(d);
      r.offset = d.U64();
      r.count = d.U32();
      r.flags = d.U32();
      if (!d.ok()) break;
      if (r.count == 0 || r.count > kReadDirMax) {
        s = Bad("readdir count must be 1..1024");
      } else {
        s = CheckFlags(r.flags, kReadDirPlus | kReadDirXattrs | kReadDirSnapshotDir);
        if (s.ok() && r.flags == kReadDirXattrs) s = Bad("readdir xattrs without attributes (plus)");
      }
      break;
    case Op::kRead:
      r.h = GetHandle(d);
      r.offset = d.U64();
      r.count = d.U32();
      if (d.ok() && r.count > kIoBytesMax) s = Bad("read of more than 1 MiB");
      break;
    case Op::kFallocate:
      r.h = GetHandle(d);
      r.flags = d.U32();
      r.offset = d.U64();
      r.length = d.U64();
      if (!d.ok()) break;
      if (r.flags != 0 && r.flags != kFallocKeepSize && r.flags != (kFallocPunchHole | kFallocKeepSize) &&
          r.flags != kFallocZeroRange && r.flags != (kFallocZeroRange | kFallocKeepSize)) {
        Reject(r, EOPNOTSUPP, "fallocate mode " + std::to_string(r.flags) + " is not supported");
      } else if (r.length == 0) {
        Reject(r, EINVAL, "fallocate of 0 bytes");
      } else if (r.offset > kFileSizeMax || r.length > kFileSizeMax - r.offset) {
        Reject(r, EFBIG, "fallocate beyond the largest file (2^63 - 1 bytes)");
      }
      break;
    case Op::kSeek:
      r.h = GetHandle(d);
      r.flags = d.U32();
      r.offset = d.U64();
      if (d.ok() && r.flags != kSeekData && r.flags != kSeekHole) s = Bad("seek must be for data (0) or a hole (1)");
      break;
    case Op::kWrite: {
      r.h = GetHandle(d);
      r.offset = d.U64();
      r.stable = d.U32();
      const uint32_t n = d.U32();
      if (!d.ok()) break;
      if (n > kIoBytesMax) {
        s = Bad("write of more than 1 MiB");
      } else if (r.stable > kFileSync) {
        s = Bad("write stability beyond file_sync");
      } else if (r.offset > kFileSizeMax || n > kFileSizeMax - r.offset) {
        s = Bad("write beyond the largest file");
      } else {
        r.data = d.View(n);
      }
      break;
    }
    case Op::kSetXattr:
      r.h = GetHandle(d);
      r.name = d.Str16();
      r.value = d.Str32();  // bounded by the payload
      r.flags = d.U32();
      if (!d.ok()) break;
      CheckXattrName(r, r.name);
      if (r.value.size() > kXattrValueMax) Reject(r, E2BIG, "xattr value larger than 64 KiB");
      s = CheckFlags(r.flags, kXattrCreate | kXattrReplace);
      if (s.ok() && r.flags == (kXattrCreate | kXattrReplace)) s = Bad("xattr create and replace both set");
      break;
    case Op::kGoodbye:
      break;
    case Op::kLock:
    case Op::kTestLock:
    case Op::kUnlock: {
      r.h = GetHandle(d);
      r.owner = d.U64();
      if (op != Op::kUnlock) r.lock_type = d.U8();
      r.offset = d.U64();
      r.length = d.U64();
      if (op == Op::kLock) r.flags = d.U32();
      if (!d.ok()) break;
      uint64_t end = 0;
      if (op != Op::kUnlock && !LockTypeOk(r.lock_type)) {
        s = Bad("lock type must be 1 (read) or 2 (write)");
      } else if (!(s = CheckFlags(r.flags, kLockFlagsAll)).ok()) {
        break;
      } else if (!LockRangeEnd(r.offset, r.length, &end)) {
        Reject(r, EINVAL, "lock range ends beyond the largest offset (2^64 - 1)");
      }
      break;
    }
    case Op::kShare:
      r.h = GetHandle(d);
      r.owner = d.U64();
      r.share_access = d.U32();
      r.share_deny = d.U32();
      if (!d.ok()) break;
      if (r.share_access & ~kShareAll) {
        s = Bad("unknown share access bits");
      } else if (r.share_deny & ~kShareAll) {
        s = Bad("unknown share deny bits");
      }
      break;
    case Op::kLease:
      r.h = GetHandle(d);
      r.owner = d.U64();
      r.lease = d.U32();
      if (d.ok() && !LeaseTypeOk(r.lease)) s = Bad("lease type must be 0, 1 (read) or 3 (read and write)");
      break;
    case Op::kRecall:
      return Bad("recall is nasgwd's notice, not a request");
  }
  if (!s.ok()) return s;
  if (!d.ok()) return Bad(std::string("truncated ") + OpName(op) + " request");
  if (!d.done()) return Bad(std::string("trailing bytes after ") + OpName(op) + " request");
  if (op != Op::kHello && op != Op::kMount && op != Op::kStatfs && op != Op::kGoodbye) {
    if (Status hs = CheckHandle(r.h, "handle"); !hs.ok()) return hs;
  }
  return r;
}

// ---- replies ------------------------------------------------------------------

std::string EncodeReply(Op op, const Reply& r) {
  Encoder e;
  switch (op) {
    case Op::kHello:
      e.Str16(r.hello.node_name);
      for (uint8_t b : r.hello.instance) e.U8(b);
      e.U32(r.hello.payload_max);
      e.U32(r.hello.inflight_max);
      e.U8(r.hello.resumed ? 1 : 0);
      e.U64(r.hello.write_verifier);
      break;
    case Op::kMount:
      e.U32(r.volume.volume);
      e.U32(r.volume.record_bytes);
      PutAttr(e, r.volume.root, r.mac);
      break;
    case Op::kStatfs:
      e.U64(r.statfs.total_bytes);
      e.U64(r.statfs.free_bytes);
      e.U64(r.statfs.files);
      break;
    case Op::kLookup:
    case Op::kGetAttr:
    case Op::kGetInode:
    case Op::kSetAttr:
    case Op::kCreate:
    case Op::kLink:
    case Op::kOpen:
    case Op::kFallocate:
      PutAttr(e, r.attr, r.mac);
      break;
    case Op::kSeek:
      e.U64(r.offset);
      break;
    case Op::kWrite:
      e.U32(r.u32);
      e.U8(static_cast<uint8_t>(r.stable));
      e.U64(r.verifier);
      PutAttr(e, r.attr, r.mac);
      break;
    case Op::kFsync:
      e.U64(r.verifier);
      break;
    case Op::kAccess:
      e.U32(r.u32);
      break;
    case Op::kUnlink:
    case Op::kRmdir:
    case Op::kRename:
    case Op::kRelease:
    case Op::kSetXattr:
    case Op::kRemoveXattr:
    case Op::kGoodbye:
    case Op::kLock:
    case Op::kUnlock:
    case Op::kShare:
    case Op::kLease:
    case Op::kRecall:
      break;
    case Op::kTestLock:
      PutLock(e, r.lock);
      break;
    case Op::kReadLink:
    case Op::kFindCaseless:
      e.Str16(r.text);
      break;
    case Op::kGetXattr:
      e.Str32(r.text);
      break;
    case Op::kListXattr:
      e.U32(static_cast<uint32_t>(r.names.size()));
      for (const auto& n : r.names) e.Str16(n);
      break;
    case Op::kReadDir: {
      const bool plus = !r.attrs.empty(), xattrs = plus && !r.xattrs.empty();
      e.U8(r.eof ? 1 : 0);
      e.U8((plus ? 1 : 0) | (xattrs ? 2 : 0));
      e.U32(static_cast<uint32_t>(r.entries.size()));
      for (size_t i = 0; i < r.entries.size(); i++) {
        const auto& x = r.entries[i];
        e.Str16(x.name);
        e.U64(x.ino);
        e.U8(static_cast<uint8_t>(x.type));
        e.U64(x.cookie);
        if (plus) PutAttr(e, r.attrs[i], i < r.macs.size() ? r.macs[i] : Mac{});
        if (xattrs) {
          const bool carried = i < r.xattrs.size() && r.xattrs[i].carried;
          e.U8(carried ? 1 : 0);
          if (!carried) continue;
          e.U16(static_cast<uint16_t>(r.xattrs[i].list.size()));
          for (const auto& [name, value] : r.xattrs[i].list) {
            e.Str16(name);
            e.Str32(value);
          }
        }
      }
      break;
    }
    case Op::kRead: {
      // Only for a copy-through path (tests); the server writes the prefix
      // and the bytes separately.
      e.U8(r.eof ? 1 : 0);
      e.Str32(r.text);
      break;
    }
  }
  return e.Release();
}

Result<Reply> DecodeReply(Op op, std::string_view payload) {
  Decoder d(payload);
  Reply r;
  bool ok = true;
  switch (op) {
    case Op::kHello:
      r.hello.node_name = d.Str16();
      for (auto& b : r.hello.instance) b = d.U8();
      r.hello.payload_max = d.U32();
      r.hello.inflight_max = d.U32();
      {
        const uint8_t resumed = d.U8();
        if (resumed > 1) ok = false;
        r.hello.resumed = resumed == 1;
      }
      r.hello.write_verifier = d.U64();
      break;
    case Op::kMount:
      r.volume.volume = d.U32();
      r.volume.record_bytes = d.U32();
      r.volume.root = GetAttr(d, r.mac, ok);
      break;
    case Op::kStatfs:
      r.statfs.total_bytes = d.U64();
      r.statfs.free_bytes = d.U64();
      r.statfs.files = d.U64();
      break;
    case Op::kLookup:
    case Op::kGetAttr:
    case Op::kGetInode:
    case Op::kSetAttr:
    case Op::kCreate:
    case Op::kLink:
    case Op::kOpen:
    case Op::kFallocate:
      r.attr = GetAttr(d, r.mac, ok);
      break;
    case Op::kSeek:
      r.offset = d.U64();
      break;
    case Op::kWrite:
      r.u32 = d.U32();
      r.stable = d.U8();
      r.verifier = d.U64();
      if (r.stable > kFileSync || r.verifier == 0) ok = false;
      r.attr = GetAttr(d, r.mac, ok);
      break;
    case Op::kFsync:
      r.verifier = d.U64();
      if (d.ok() && r.verifier == 0) ok = false;
      break;
    case Op::kAccess:
      r.u32 = d.U32();
      break;
    case Op::kUnlink:
    case Op::kRmdir:
    case Op::kRename:
    case Op::kRelease:
    case Op::kSetXattr:
    case Op::kRemoveXattr:
    case Op::kGoodbye:
    case Op::kLock:
    case Op::kUnlock:
    case Op::kShare:
    case Op::kLease:
    case Op::kRecall:
      break;
    case Op::kTestLock:
      r.lock = GetLock(d, /*none_ok=*/true, ok);
      break;
    case Op::kReadLink:
    case Op::kFindCaseless:
      r.text = d.Str16();
      break;
    case Op::kGetXattr:
      if (d.remaining() >= 4) {
        Decoder peek = d;
        if (peek.U32() > kXattrValueMax) return Bad("xattr value larger than 64 KiB");
      }
      r.text = d.Str32();
      break;
    case Op::kListXattr: {
      const uint32_t n = d.U32();
      // Each name takes at least 3 bytes: bounds the loop before allocating.
      if (n > d.remaining() / 3) return Bad("listxattr count beyond the payload");
      for (uint32_t i = 0; i < n && d.ok(); i++) r.names.push_back(d.Str16());
      break;
    }
    case Op::kReadDir: {
      r.eof = d.U8() != 0;
      const uint8_t what = d.U8();
      const bool plus = (what & 1) != 0, xattrs = (what & 2) != 0;
      if (what > 3 || (xattrs && !plus)) return Bad("readdir reply with unknown contents");
      const uint32_t n = d.U32();
      if (n > kReadDirMax) return Bad("readdir reply with more than 1024 entries");
      for (uint32_t i = 0; i < n && d.ok(); i++) {
        DirEntry x;
        x.name = d.Str16();
        x.ino = d.U64();
        const uint8_t t = d.U8();
        x.type = static_cast<FileType>(t);
        x.cookie = d.U64();
        if (d.ok() && !TypeOk(t)) ok = false;
        r.entries.push_back(std::move(x));
        if (plus) {
          r.macs.emplace_back();
          r.attrs.push_back(GetAttr(d, r.macs.back(), ok));
        }
        if (xattrs) {
          Reply::EntryXattrs& xs = r.xattrs.emplace_back();
          const uint8_t carried = d.U8();
          if (carried > 1) ok = false;
          xs.carried = carried == 1;
          const uint16_t count = xs.carried ? d.U16() : 0;
          for (uint16_t j = 0; j < count && d.ok() && ok; j++) {
            std::string name = d.Str16();
            if (name.empty() || name.size() > kXattrNameMax || d.remaining() < 4) ok = false;
            if (!ok) break;
            Decoder peek = d;
            if (peek.U32() > kReadDirXattrBytesMax) {
              ok = false;
              break;
            }
            xs.list.emplace_back(std::move(name), d.Str32());
          }
          if (ok && EntryXattrBytes(xs) > kReadDirXattrBytesMax) ok = false;
        }
      }
      break;
    }
    case Op::kRead: {
      r.eof = d.U8() != 0;
      r.text = d.Str32();
      break;
    }
  }
  if (!ok) return Bad(std::string("bad attributes, lock, stability or verifier in ") + OpName(op) + " reply");
  if (!d.done()) return Bad(std::string("malformed ") + OpName(op) + " reply");
  return r;
}

size_t EntryXattrBytes(const Reply::EntryXattrs& x) {
  size_t n = 0;
  for (const auto& [name, value] : x.list) n += name.size() + 1 + 4 + value.size();
  return n;
}

void EncodeReadPrefix(bool eof, uint32_t n, uint8_t out[kReadPrefixBytes]) {
  out[0] = eof ? 1 : 0;
  PutFixed32(out + 1, n);
}

Result<std::pair<bool, uint32_t>> DecodeReadPrefix(const uint8_t in[kReadPrefixBytes], uint32_t payload_length,
                                                   uint32_t asked) {
  const uint32_t n = GetFixed32(in + 1);
  if (in[0] > 1 || n > asked || payload_length != kReadPrefixBytes + n) return Bad("malformed read reply");
  return std::make_pair(in[0] == 1, n);
}

std::string EncodeError(std::string_view message) {
  Encoder e;
  e.Str16(message.substr(0, kMessageMax));
  return e.Release();
}

std::string DecodeError(std::string_view payload) {
  Decoder d(payload);
  std::string m = d.Str16();
  if (!d.ok()) return "(no message)";
  return m.substr(0, kMessageMax);
}

bool LockRangeEnd(uint64_t start, uint64_t length, uint64_t* end) {
  if (length == 0) {
    *end = kLockEnd;
    return true;
  }
  if (length - 1 > kLockEnd - start) return false;
  *end = start + (length - 1);
  return true;
}

std::string EncodeLockDenied(std::string_view message, const LockInfo& conflict) {
  Encoder e;
  e.Str16(message.substr(0, kMessageMax));
  PutLock(e, conflict);
  return e.Release();
}

std::string EncodeRecall(const Recall& r) {
  Encoder e;
  e.U32(r.volume);
  e.U64(r.ino);
  e.U64(r.owner);
  e.U32(r.break_to);
  return e.Release();
}

Result<Recall> DecodeRecall(std::string_view payload) {
  Decoder d(payload);
  Recall r;
  r.volume = d.U32();
  r.ino = d.U64();
  r.owner = d.U64();
  r.break_to = d.U32();
  if (!d.ok() || !d.done()) return Bad("malformed recall");
  if (r.break_to != 0 && r.break_to != kLeaseRead) return Bad("recall's break_to must be 0 or 1 (read)");
  return r;
}

Result<LockInfo> DecodeLockDenied(std::string_view payload) {
  Decoder d(payload);
  (void)d.Str16();
  bool ok = true;
  LockInfo l = GetLock(d, /*none_ok=*/false, ok);
  if (!d.ok() || !ok || !d.done()) return Bad("malformed lock conflict in a lock reply");
  return l;
}

}  // namespace nasgw::proto
