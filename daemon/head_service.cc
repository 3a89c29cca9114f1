#include "daemon/head_service.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>

#include "base/clock.h"
#include "base/limits.h"
#include "base/log.h"
#include "base/mutex.h"
#include "daemon/access.h"
#include "fs/acl.h"
#include "fs/handle.h"

namespace nasgw::daemon {

using proto::Op;

// The protocol restates the file system's limits and enumerations.
static_assert(proto::kNameMax == fs::kNameMax && proto::kSymlinkMax == fs::kSymlinkMax);
static_assert(proto::kXattrNameMax == fs::kXattrNameMax && proto::kXattrValueMax == fs::kXattrValueMax);
static_assert(proto::kFileSizeMax == fs::kFileSizeMax && proto::kRootIno == fs::kRootIno);
static_assert(proto::kMacBytes == fs::kHandleMacBytes);
static_assert(static_cast<int>(proto::FileType::kBlockDevice) == static_cast<int>(fs::FileType::kBlockDevice) &&
              static_cast<int>(proto::FileType::kRegular) == static_cast<int>(fs::FileType::kRegular));

fs::Handle FromWire(const proto::Handle& h) {
  fs::Handle out{h.volume, h.ino, h.gen, h.snap, h.scope, {}};
  std::copy(h.mac.begin(), h.mac.end(), out.mac.begin());
  return out;
}

proto::Mac ToWire(const fs::HandleMac& m) {
  proto::Mac out{};
  std::copy(m.begin(), m.end(), out.begin());
  return out;
}

// The two enumerations have the same values (checked above); the decoder
// lets only kRegular..kBlockDevice through.
fs::FileType FromWire(proto::FileType t) {
  return static_cast<fs::FileType>(t);
}

proto::FileType ToWire(fs::FileType t) {
  return static_cast<proto::FileType>(t);
}

fs::Timespec FromWire(const proto::Time& t) {
  return {t.sec, t.nsec};
}

proto::Time ToWire(const fs::Timespec& t) {
  return {t.sec, t.nsec};
}

proto::Attr ToWire(const fs::Attr& a) {
  proto::Attr out;
  out.ino = a.ino;
  out.gen = a.gen;
  out.snap = a.snap;
  out.type = ToWire(a.type);
  out.mode = a.mode;
  out.uid = a.uid;
  out.gid = a.gid;
  out.nlink = a.nlink;
  out.size = a.size;
  out.blocks = a.blocks;
  out.rdev = a.rdev;
  out.atime = ToWire(a.atime);
  out.mtime = ToWire(a.mtime);
  out.ctime = ToWire(a.ctime);
  out.btime = ToWire(a.btime);
  out.change = a.change;
  out.flags = static_cast<uint8_t>((a.acl_access.empty() ? 0 : proto::kAttrAclAccess) |
                                   (a.acl_default.empty() ? 0 : proto::kAttrAclDefault));
  return out;
}

fs::SetAttr FromWire(const proto::SetAttr& s, const fs::Timespec& now) {
  fs::SetAttr out;
  out.set_mode = (s.mask & proto::kSetMode) != 0;
  out.set_uid = (s.mask & proto::kSetUid) != 0;
  out.set_gid = (s.mask & proto::kSetGid) != 0;
  out.set_size = (s.mask & proto::kSetSize) != 0;
  out.set_atime = (s.mask & (proto::kSetAtime | proto::kSetAtimeNow)) != 0;
  out.set_mtime = (s.mask & (proto::kSetMtime | proto::kSetMtimeNow)) != 0;
  out.mode = s.mode;
  out.uid = s.uid;
  out.gid = s.gid;
  out.size = s.size;
  out.atime = (s.mask & proto::kSetAtimeNow) ? now : FromWire(s.atime);
  out.mtime = (s.mask & proto::kSetMtimeNow) ? now : FromWire(s.mtime);
  return out;
}

proto::DirEntry ToWire(const fs::DirEntry& e) {
  return {e.name, e.ino, ToWire(e.type), e.cookie};
}

proto::StatFs ToWire(const fs::StatFs& s) {
  return {s.total_bytes, s.free_bytes, s.files};
}

int ErrnoOf(const Status& s) {
  if (s.code() == Code::kInvalidArgument && s.message().find("longer than 255") != std::string_view::npos) {
    return ENAMETOOLONG;
  }
  return s.ToErrno();
}

namespace {

struct Fail {
  int err;
  std::string why;
};

// One request's execution: helpers return false after filling `out` with
// the error, so each op reads as a straight line of checks.
class Exec {
 public:
  Exec(fs::Domain& d, cache::DataCache& c, uint64_t verifier, LockTable& locks, const HeadService::Recaller& recaller,
       DirParents& parents, HeadSession& s, const proto::Request& r, HeadOutcome& out)
      : d_(d),
        c_(c),
        verifier_(verifier),
        locks_(locks),
        recaller_(recaller),
        parents_(parents),
        s_(s),
        r_(r),
        out_(out) {
    out_.volume = r.h.volume;
  }

  bool Error(int err, std::string why) {
    out_.err = err;
    out_.why = std::move(why);
    return false;
  }
  bool Error(const Status& s) { return Error(ErrnoOf(s), s.ToString()); }
  bool Deny(int err, const char* what) {
    return err == 0 || Error(err, std::string(err == EPERM ? "not permitted: " : "permission denied: ") + what);
  }

  // A handle nasgwd issued: its MAC verifies with the domain's key. First
  // of all checks, for every handle of the request.
  bool Verify(const proto::Handle& h) {
    if (d_.handle_key().Verify(FromWire(h))) return true;
    return Error(EBADMSG, "bad handle: not issued by this reserve's nasgwd in this scope");
  }
  bool VerifyHandles() {
    switch (r_.op) {
      case Op::kHello:
      case Op::kGoodbye:
      case Op::kMount:
      case Op::kStatfs:
        return true;  // no handle
      case Op::kLink:
      case Op::kRename:
        if (!Verify(r_.h) || !Verify(r_.h2)) return false;
        if (r_.h2.scope != r_.h.scope) return Error(EXDEV, "the two handles are of different scopes (exports)");
        return true;
      default:
        return Verify(r_.h);
    }
  }
  // The MAC of the handle of `a`, issued in the request's scope.
  proto::Mac Mint(const fs::Attr& a, uint64_t scope) const {
    return ToWire(d_.handle_key().Mac({r_.h.volume, a.ino, a.gen, a.snap, scope, {}}));
  }
  proto::Mac Mint(const fs::Attr& a) const { return Mint(a, r_.h.scope); }

  // The object a handle names (its MAC already verified): ESTALE for a
  // deleted object (the generation must match; there is no wildcard), a
  // snapshot that does not exist, or a directory outside the scope.
  bool Load(const proto::Handle& h, fs::Attr& a) {
    if (h.snap == fs::kSnapshotDir) return LoadSnapshotDir(h, a);
    // A snapshot's objects never change: the domain answers, not the cache.
    Result<fs::Attr> got =
        h.snap != 0 ? d_.GetAttr(FromWire(h)) : c_.Shown(h.volume, [&] { return d_.GetAttr(FromWire(h)); });
    if (!got.ok()) {
      if (got.status().code() == Code::kNotFound) return Error(ESTALE, got.status().ToString());
      return Error(got.status());
    }
    a = *got;
    // (A snapshot's directories were reached from the scope's, and ".."
    // stops at the scope's directory in a snapshot too.)
    if (h.snap == 0 && h.scope != fs::kRootIno && a.type == fs::FileType::kDirectory && a.ino != h.scope) {
      auto in = parents_.Within(d_, h.volume, a.ino, h.scope);
      if (!in.ok())
        return Error(in.status().code() == Code::kNotFound ? ESTALE : ErrnoOf(in.status()), in.status().ToString());
      if (!*in) return Error(ESTALE, "directory " + std::to_string(a.ino) + " is outside the export's directory");
    }
    return true;
  }
  // The `.snapshot` directory of a live directory: read-only, listing the
  // volume's snapshots (each the directory as it was then).
  bool LoadSnapshotDir(const proto::Handle& h, fs::Attr& a) {
    proto::Handle live = h;
    live.snap = 0;
    if (!Load(live, a)) return false;
    if (a.type != fs::FileType::kDirectory) return Error(ESTALE, "a .snapshot directory of something not a directory");
    SnapshotDirOf(a);
    return true;
  }
  static void SnapshotDirOf(fs::Attr& a) {
    a.snap = fs::kSnapshotDir;
    a.mode &= 0555;
    a.nlink = 2;
    a.size = 0;
    a.blocks = 0;
    a.acl_access.clear();
    a.acl_default.clear();
  }
  // Snapshots are read-only: EROFS for anything that would change one
  // (checked once, before any op runs).
  bool ReadOnlySnapshot() {
    const bool linked = r_.op == Op::kLink || r_.op == Op::kRename;
    if (r_.h.snap == 0 && !(linked && r_.h2.snap != 0)) {
      // In the live volume, `.snapshot` is taken in every directory.
      const bool makes = r_.op == Op::kCreate || r_.op == Op::kLink;
      if ((makes && r_.name == kSnapshotName) || (r_.op == Op::kRename && r_.name2 == kSnapshotName)) {
        return Error(EEXIST, "'.snapshot' is the snapshots' directory");
      }
      return true;
    }
    bool writes = ChangesFiles(r_.op);
    switch (r_.op) {
      case Op::kOpen:
        writes = (r_.count & proto::kAccessWrite) != 0;
        break;
      case Op::kLock:
        writes = r_.lock_type == proto::kLockWrite;
        break;
      case Op::kShare:
        writes = (r_.share_access & (proto::kShareWrite | proto::kShareDelete)) != 0;
        break;
      case Op::kLease:
        writes = (r_.lease & proto::kLeaseWrite) != 0;
        break;
      case Op::kGetInode:
        return Error(ESTALE, "snapshot objects are not found by number");
      default:
        break;
    }
    return !writes || Error(EROFS, "snapshots are read-only");
  }
  static constexpr const char* kSnapshotName = ".snapshot";
  bool LoadDir(const proto::Handle& h, fs::Attr& a) {
    if (!Load(h, a)) return false;
    if (a.type != fs::FileType::kDirectory) return Error(ENOTDIR, "not a directory");
    return true;
  }
  bool Child(const fs::Attr& dir, const std::string& name, fs::Attr& a) {
    auto got = d_.Lookup(r_.h.volume, dir.ino, name);
    if (!got.ok()) return Error(got.status());
    a = *got;
    return true;
  }
  bool Set(const Result<fs::Attr>& a) {
    if (!a.ok()) return Error(a.status());
    const fs::Attr shown = a->snap != 0 ? *a : c_.Overlay(r_.h.volume, *a);
    out_.reply.attr = ToWire(shown);
    out_.reply.mac = Mint(shown);
    return true;
  }
  bool Done(const Status& s) { return s.ok() || Error(s); }
  // A file lost a name: if that was its last and it is not open, the cache's
  // flush finds it gone and gives its dirty data and reserved space up now;
  // otherwise its data is flushed (it lives on).
  void Forget(const fs::Attr& a) {
    if (a.type == fs::FileType::kRegular) c_.Flush(r_.h.volume, a.ino).IgnoreError();
  }

  bool Run();

 private:
  // LOOKUP in a directory: live, a snapshot's, or a `.snapshot` directory.
  bool LookupIn(const fs::Attr& dir);
  bool ReadSnapshotDir(const fs::Attr& dir);
  bool Create();
  bool Rename();
  bool Exchange(const fs::Attr& from_dir, const fs::Attr& to_dir, const fs::Attr& a);
  bool SetAttr();
  bool Read();
  // Load, then what changing the data needs: write permission, no other
  // head's lease in the way, setuid and setgid cleared as Linux does.
  bool LoadForWrite(fs::Attr& a);
  proto::Reply::EntryXattrs EntryXattrs(const fs::Attr& a, size_t* budget);
  // After LOCK, SHARE or LEASE took something in the lock table: false
  // (EBADF, and the session's entries dropped) when the session ended
  // meanwhile.
  bool StillInSession();
  bool Write();
  bool Fallocate();
  bool Seek();
  bool Xattr();
  bool Acl(const fs::Attr& a);
  bool Open();
  bool AddOpen(uint64_t ino);
  bool Release();
  bool ReadDir();
  bool Lock();
  bool Unlock();
  bool Share();
  bool Lease();
  // Waits (EINPROGRESS: the head retries) while a lease of another
  // coherence domain on `ino` stands in the way of this request: `write`
  // for a change of data or size (or an open for it), else a read.
  bool Uncontended(uint64_t ino, bool write);
  bool Mount();

  fs::Domain& d_;
  cache::DataCache& c_;      // the write-back cache of d_'s opening
  const uint64_t verifier_;  // the write verifier of d_'s opening
  LockTable& locks_;
  const HeadService::Recaller& recaller_;
  DirParents& parents_;
  HeadSession& s_;
  const proto::Request& r_;
  HeadOutcome& out_;
};

bool Exec::Run() {
  const uint32_t vol = r_.h.volume;
  fs::Attr a, dir;
  if (!VerifyHandles() || !ReadOnlySnapshot()) return false;
  switch (r_.op) {
    case Op::kHello:
      return Error(EPROTO, "hello is answered by the transport");
    case Op::kGoodbye:
      return Error(EPROTO, "goodbye is answered before the domain is needed");
    case Op::kMount:
      return Mount();
    case Op::kStatfs: {
      auto root = d_.GetAttr(vol, fs::kRootIno);  // the volume exists
      if (!root.ok()) {
        return Error(root.status().code() == Code::kNotFound ? ESTALE : ErrnoOf(root.status()),
                     root.status().ToString());
      }
      out_.reply.statfs = ToWire(d_.Statfs());
      return true;
    }
    case Op::kLookup:
      if (!LoadDir(r_.h, dir) || !Deny(CheckAccess(dir, r_.creds, proto::kAccessExec), "search directory")) {
        return false;
      }
      // Nothing above the scope's directory: its ".." is itself (as an
      // NFS server answers at an export's root).
      if (r_.name == ".." && dir.ino == r_.h.scope && dir.snap != fs::kSnapshotDir) return Set(dir);
      return LookupIn(dir);
    case Op::kGetAttr:
      if (!Load(r_.h, a)) return false;
      return Set(a);
    case Op::kGetInode: {
      // The scope's directory first, then the object, which must be in that
      // scope: a directory below it (Load walks up), anything in a
      // whole-volume scope; in a sub-directory scope a file's parents are
      // not known, so only directories are found.
      if (!LoadDir(r_.h, dir)) return false;
      auto got = d_.GetAttr(vol, r_.offset);
      if (!got.ok()) {
        return Error(got.status().code() == Code::kNotFound ? ESTALE : ErrnoOf(got.status()), got.status().ToString());
      }
      if (r_.h.scope != fs::kRootIno && got->type != fs::FileType::kDirectory) {
        return Error(ESTALE, "only directories are found by number in a sub-directory scope");
      }
      proto::Handle h = r_.h;
      h.ino = got->ino;
      h.gen = got->gen;
      if (!Load(h, a)) return false;
      return Set(a);
    }
    case Op::kSetAttr:
      return SetAttr();
    case Op::kAccess:
      if (!Load(r_.h, a)) return false;
      out_.reply.u32 = Granted(a, r_.creds, r_.count);
      if (a.snap != 0) out_.reply.u32 &= ~proto::kAccessWrite;  // read-only
      return true;
    case Op::kCreate:
      return Create();
    case Op::kLink:
      if (!Load(r_.h, a) || !LoadDir(r_.h2, dir)) return false;
      if (a.type == fs::FileType::kDirectory) return Error(EPERM, "hard links to directories are not allowed");
      if (!Deny(CheckAccess(dir, r_.creds, proto::kAccessWrite | proto::kAccessExec), "write directory")) return false;
      return Set(d_.Link(vol, a.ino, dir.ino, r_.name));
    case Op::kUnlink:
    case Op::kRmdir:
      if (!LoadDir(r_.h, dir) || !Deny(CheckAccess(dir, r_.creds, proto::kAccessExec), "search directory") ||
          !Child(dir, r_.name, a) || !Deny(CheckRemove(dir, a, r_.creds), "remove from directory")) {
        return false;
      }
      if (!Done(r_.op == Op::kUnlink ? d_.Unlink(vol, dir.ino, r_.name) : d_.Rmdir(vol, dir.ino, r_.name))) {
        return false;
      }
      Forget(a);
      return true;
    case Op::kRename:
      return Rename();
    case Op::kReadLink: {
      if (!Load(r_.h, a)) return false;
      auto t = d_.ReadLink(vol, a.ino, a.snap);
      if (!t.ok()) return Error(t.status());
      out_.reply.text = *t;
      if (a.snap == 0) d_.Accessed(vol, a, fs::Now());
      return true;
    }
    case Op::kReadDir:
      return ReadDir();
    case Op::kFindCaseless: {
      if (!LoadDir(r_.h, dir) || !Deny(CheckAccess(dir, r_.creds, proto::kAccessExec), "search directory")) {
        return false;
      }
      if (dir.snap != 0) {
        // In a snapshot: the exact name only.
        if (!LookupIn(dir)) return false;
        out_.reply.text = r_.name;
        return true;
      }
      auto t = d_.FindCaseless(vol, dir.ino, r_.name);
      if (!t.ok()) return Error(t.status());
      out_.reply.text = *t;
      return true;
    }
    case Op::kOpen:
      return Open();
    case Op::kRelease:
      return Release();
    case Op::kRead:
      return Read();
    case Op::kWrite:
      return Write();
    case Op::kFsync:
      // The file's dirty data durable (logged, answered by the partner's
      // mirror in a healthy pair, or in place; DataCache::Commit), and its
      // metadata; a snapshot's are there already.
      if (!Load(r_.h, a)) return false;
      if (a.snap == 0 && (!Done(c_.Commit(vol, a.ino)) || !Done(d_.Fsync(vol, a.ino)))) return false;
      out_.reply.verifier = verifier_;
      return true;
    case Op::kFallocate:
      return Fallocate();
    case Op::kSeek:
      return Seek();
    case Op::kGetXattr:
    case Op::kSetXattr:
    case Op::kListXattr:
    case Op::kRemoveXattr:
      return Xattr();
    case Op::kLock:
    case Op::kTestLock:
      return Lock();
    case Op::kUnlock:
      return Unlock();
    case Op::kShare:
      return Share();
    case Op::kLease:
      return Lease();
    case Op::kRecall:
      return Error(EPROTO, "recall is nasgwd's notice");
  }
  return Error(ENOSYS, "unknown op");
}

bool Exec::LookupIn(const fs::Attr& dir) {
  const uint32_t vol = r_.h.volume;
  if (dir.snap == fs::kSnapshotDir) {
    if (r_.name == ".") return Set(dir);
    if (r_.name == "..") return Set(d_.GetAttr(vol, dir.ino));  // the live directory it is in
    auto s = d_.SnapshotOf(vol, r_.name);
    if (!s.ok()) return Error(s.status());
    // The directory as it was then; younger than the snapshot: none.
    auto at = d_.GetAttr(vol, dir.ino, s->id);
    if (!at.ok() && at.status().code() == Code::kNotFound) return Error(ENOENT, "not in snapshot '" + s->name + "'");
    return Set(at);
  }
  if (dir.snap == 0 && r_.name == kSnapshotName) {
    fs::Attr s = dir;
    SnapshotDirOf(s);
    return Set(s);
  }
  return Set(d_.Lookup(vol, dir.ino, r_.name, dir.snap));
}

// A `.snapshot` directory lists the snapshots in which its directory
// existed, by id (the cookie), each a directory.
bool Exec::ReadSnapshotDir(const fs::Attr& dir) {
  const uint32_t vol = r_.h.volume;
  auto snaps = d_.ListSnapshotsOf(vol);
  if (!snaps.ok()) return Error(snaps.status());
  const bool plus = (r_.flags & proto::kReadDirPlus) != 0;
  out_.reply.eof = true;
  for (const fs::SnapshotInfo& s : *snaps) {
    if (s.id <= r_.offset) continue;
    if (out_.reply.entries.size() >= r_.count) {
      out_.reply.eof = false;
      break;
    }
    auto at = d_.GetAttr(vol, dir.ino, s.id);
    if (!at.ok()) continue;  // the directory is younger than the snapshot (or it went meanwhile)
    if (plus) {
      out_.reply.attrs.push_back(ToWire(*at));
      out_.reply.macs.push_back(Mint(*at));
      if (r_.flags & proto::kReadDirXattrs) out_.reply.xattrs.emplace_back();  // not carried: asked for
    }
    out_.reply.entries.push_back({s.name, dir.ino, proto::FileType::kDirectory, s.id});
  }
  return true;
}

bool Exec::Create() {
  fs::Attr dir;
  if (!LoadDir(r_.h, dir) ||
      !Deny(CheckAccess(dir, r_.creds, proto::kAccessWrite | proto::kAccessExec), "write directory")) {
    return false;
  }
  uint32_t mode = r_.mode, uid = 0, gid = 0;
  const fs::FileType type = FromWire(r_.type);
  NewOwner(dir, r_.creds, type, mode, uid, gid);
  // A head whose kernel left the umask to the file system (FUSE with POSIX
  // ACLs) sends it: applied unless the directory has a default ACL.
  const uint32_t umask = (r_.flags & proto::kCreateUmask) ? r_.count : 0;
  auto made = d_.Create(r_.h.volume, dir.ino, r_.name, type, mode, uid, gid, r_.offset, r_.name2, umask);
  if (!made.ok() && made.status().code() == Code::kExists && (r_.flags & proto::kCreateUnchecked)) {
    made = d_.Lookup(r_.h.volume, dir.ino, r_.name);
    if (made.ok() && made->type != fs::FileType::kRegular) return Error(EEXIST, "exists and is not a file");
  }
  if (!Set(made)) return false;
  if (r_.flags & proto::kCreateOpen) return AddOpen(made->ino);
  return true;
}

bool Exec::Rename() {
  const uint32_t vol = r_.h.volume;
  fs::Attr from_dir, to_dir, victim;
  if (r_.h2.volume != vol) return Error(EXDEV, "rename across volumes");
  if (!LoadDir(r_.h, from_dir) || !LoadDir(r_.h2, to_dir) ||
      !Deny(CheckAccess(from_dir, r_.creds, proto::kAccessExec), "search directory") ||
      !Deny(CheckAccess(to_dir, r_.creds, proto::kAccessExec), "search directory") ||
      !Child(from_dir, r_.name, victim) || !Deny(CheckRemove(from_dir, victim, r_.creds), "move out of directory")) {
    return false;
  }
  if (r_.flags & proto::kRenameExchange) return Exchange(from_dir, to_dir, victim);
  auto existing = d_.Lookup(vol, to_dir.ino, r_.name2);
  if (existing.ok()) {
    if (r_.flags & proto::kRenameNoReplace) return Error(EEXIST, "'" + r_.name2 + "' exists");
    if (existing->ino != victim.ino && !Deny(CheckRemove(to_dir, *existing, r_.creds), "replace in directory")) {
      return false;
    }
  } else if (!Deny(CheckAccess(to_dir, r_.creds, proto::kAccessWrite | proto::kAccessExec), "write directory")) {
    return false;
  }
  // Moving a directory to another parent rewrites its "..".
  if (victim.type == fs::FileType::kDirectory && from_dir.ino != to_dir.ino &&
      !Deny(CheckAccess(victim, r_.creds, proto::kAccessWrite), "move directory")) {
    return false;
  }
  const bool dir_moves = victim.type == fs::FileType::kDirectory && from_dir.ino != to_dir.ino;
  Status s = d_.Rename(vol, from_dir.ino, r_.name, to_dir.ino, r_.name2);
  if (dir_moves) parents_.Moved();  // also on failure: the outcome may be unknown
  if (!Done(s)) return false;
  if (existing.ok() && existing->ino != victim.ino) Forget(*existing);
  return true;
}

// RENAME_EXCHANGE: both entries leave their directories (each may be
// removed from it: sticky rules), and a directory that changes parent
// rewrites its "..", as Linux's rename(2) checks them.
bool Exec::Exchange(const fs::Attr& from_dir, const fs::Attr& to_dir, const fs::Attr& a) {
  fs::Attr b;
  if (!Child(to_dir, r_.name2, b) || !Deny(CheckRemove(to_dir, b, r_.creds), "move out of directory")) return false;
  const bool moves = from_dir.ino != to_dir.ino;
  for (const fs::Attr* x : {&a, static_cast<const fs::Attr*>(&b)}) {
    if (moves && x->type == fs::FileType::kDirectory &&
        !Deny(CheckAccess(*x, r_.creds, proto::kAccessWrite), "move directory")) {
      return false;
    }
  }
  Status s = d_.Exchange(r_.h.volume, from_dir.ino, r_.name, to_dir.ino, r_.name2);
  if (moves && (a.type == fs::FileType::kDirectory || b.type == fs::FileType::kDirectory)) parents_.Moved();
  return Done(s);
}

// MOUNT: a volume, and a directory in it by path (empty: the root), walked
// with the caller's credentials (search permission on every directory, no
// symbolic links followed). The directory becomes a scope: its handle is
// issued in its own scope.
bool Exec::Mount() {
  auto v = d_.FindVolume(r_.name);
  if (!v.ok()) return Error(v.status());
  out_.volume = v->id;
  auto at = d_.GetAttr(v->id, fs::kRootIno);
  if (!at.ok()) return Error(at.status());
  size_t pos = 0;
  const std::string& path = r_.name2;
  while (pos < path.size()) {
    const size_t slash = path.find('/', pos);
    const std::string name = path.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    pos = slash == std::string::npos ? path.size() : slash + 1;
    if (!Deny(CheckAccess(*at, r_.creds, proto::kAccessExec), "search directory")) return false;
    at = d_.Lookup(v->id, at->ino, name);
    if (!at.ok()) return Error(at.status());
    if (at->type != fs::FileType::kDirectory) return Error(ENOTDIR, "'" + name + "' is not a directory");
  }
  out_.reply.volume = {v->id, v->record_bytes, ToWire(*at)};
  out_.reply.mac = ToWire(d_.handle_key().Mac({v->id, at->ino, at->gen, at->snap, at->ino, {}}));
  return true;
}

bool Exec::SetAttr() {
  fs::Attr a;
  if (!Load(r_.h, a)) return false;
  fs::SetAttr s = FromWire(r_.set, fs::Now());
  if (!Deny(CheckSetAttr(a, r_.creds, r_.set.mask, s), "change attributes")) return false;
  if ((r_.set.mask & proto::kSetSize) && !Uncontended(a.ino, /*write=*/true)) return false;
  // Through the cache: its dirty data first, and a truncation's cut blocks
  // out of its read cache.
  return Set(c_.SetAttrs(r_.h.volume, a.ino, s));
}

bool Exec::Open() {
  fs::Attr a;
  if (!Load(r_.h, a)) return false;
  if (a.type == fs::FileType::kDirectory && (r_.count & proto::kAccessWrite)) return Error(EISDIR, "is a directory");
  if (!Deny(CheckAccess(a, r_.creds, r_.count), "open")) return false;
  if (a.snap != 0) return Set(a);  // read-only and never removed: nothing to hold
  if (a.type == fs::FileType::kRegular && (r_.count & (proto::kAccessRead | proto::kAccessWrite)) &&
      !Uncontended(a.ino, (r_.count & proto::kAccessWrite) != 0)) {
    return false;
  }
  if (!AddOpen(a.ino)) return false;
  return Set(a);
}

bool Exec::AddOpen(uint64_t ino) {
  MutexLock l(s_.mu);
  if (s_.ended.load()) return Error(EBADF, "the session has ended (goodbye)");
  std::set<uint64_t>& ids = s_.opens[{r_.h.volume, ino}];
  if (ids.empty()) {
    if (Status s = d_.OpenFile(r_.h.volume, ino); !s.ok()) {
      s_.opens.erase({r_.h.volume, ino});
      return Error(s);
    }
  }
  ids.insert(r_.open_id);  // a resend inserts what is there
  return true;
}

bool Exec::Release() {
  if (r_.h.snap != 0) return true;  // a snapshot's opens are not held
  MutexLock l(s_.mu);
  auto it = s_.opens.find({r_.h.volume, r_.h.ino});
  if (it == s_.opens.end() || it->second.erase(r_.open_id) == 0) return true;  // a resend, or never opened
  if (!it->second.empty()) return true;
  s_.opens.erase(it);
  return Done(d_.ReleaseFile(r_.h.volume, r_.h.ino));
}

bool Exec::Read() {
  fs::Attr a;
  if (!Load(r_.h, a)) return false;
  if (a.type == fs::FileType::kDirectory) return Error(EISDIR, "is a directory");
  if (!Deny(CheckData(a, r_.creds, proto::kAccessRead), "read")) return false;
  if (a.snap != 0) {
    out_.data.resize(r_.count);
    auto n = d_.Read(r_.h.volume, a.ino, r_.offset, r_.count, out_.data.data(), a.snap);
    if (!n.ok()) return Error(n.status());
    out_.data.resize(*n);
    out_.bytes = *n;
    out_.reply.eof = r_.offset + *n >= a.size;
    return true;
  }
  if (!Uncontended(a.ino, /*write=*/false)) return false;
  out_.data.resize(r_.count);
  uint64_t size = 0;
  auto n = c_.Read(r_.h.volume, a, r_.offset, r_.count, out_.data.data(), &size);
  if (!n.ok()) return Error(n.status());
  out_.data.resize(*n);
  out_.bytes = *n;
  out_.reply.eof = r_.offset + *n >= size;
  d_.Accessed(r_.h.volume, a, fs::Now());  // the volume's atime policy
  return true;
}

bool Exec::LoadForWrite(fs::Attr& a) {
  if (!Load(r_.h, a)) return false;
  if (a.type == fs::FileType::kDirectory) return Error(EISDIR, "is a directory");
  if (!Deny(CheckData(a, r_.creds, proto::kAccessWrite), "write")) return false;
  if (!Uncontended(a.ino, /*write=*/true)) return false;
  // A write by a caller without CAP_FSETID (anyone but root) clears setuid,
  // and setgid with group execute, before the data changes, as Linux's
  // file_remove_privs does (and the change time moves).
  if (const uint32_t kill = KillPrivBits(a, r_.creds)) {
    fs::SetAttr s;
    s.set_mode = true;
    s.mode = a.mode & ~kill;
    auto killed = d_.SetAttrs(r_.h.volume, a.ino, s);
    if (!killed.ok()) return Error(killed.status());
    a = c_.Overlay(r_.h.volume, *killed);
  }
  return true;
}

bool Exec::Fallocate() {
  fs::Attr a;
  if (!LoadForWrite(a)) return false;
  if (a.type != fs::FileType::kRegular) return Error(ENODEV, "fallocate of something not a regular file");
  // Through the cache: the file's dirty data first, zeroed blocks out of
  // its read cache.
  return Set(c_.Fallocate(r_.h.volume, a.ino, r_.flags, r_.offset, r_.length));
}

bool Exec::Seek() {
  fs::Attr a;
  if (!Load(r_.h, a)) return false;
  if (a.type == fs::FileType::kDirectory) return Error(EISDIR, "is a directory");
  if (a.type != fs::FileType::kRegular) return Error(EINVAL, "seek in something not a regular file");
  if (!Deny(CheckData(a, r_.creds, proto::kAccessRead), "read")) return false;
  if (a.snap != 0) {
    // A snapshot's file is reported as all data (as lseek may): holes
    // only at its end.
    if (r_.offset >= a.size) return Error(ENXIO, "at or past the end of the file");
    out_.reply.offset = r_.flags == proto::kSeekHole ? a.size : r_.offset;
    return true;
  }
  // As a READ: data another head caches under a write lease is written
  // back first, so a hole it filled is not reported.
  if (!Uncontended(a.ino, /*write=*/false)) return false;
  auto at = c_.Seek(r_.h.volume, a.ino, r_.offset, r_.flags == proto::kSeekHole);
  if (!at.ok()) {
    if (at.status().code() == Code::kOutOfRange) return Error(ENXIO, std::string(at.status().message()));
    return Error(at.status());
  }
  out_.reply.offset = *at;
  return true;
}

bool Exec::Write() {
  fs::Attr a;
  if (!LoadForWrite(a)) return false;
  // Unstable: into the cache, answered from memory. Either sync level (or
  // the cache's strict mode): flushed with the file's other dirty data, its
  // metadata committed, before the answer, so the level reached is file_sync.
  bool durable = false;
  auto w = c_.Write(r_.h.volume, a, r_.offset, r_.data.data(), r_.data.size(), r_.stable != proto::kUnstable, &durable);
  if (!w.ok()) return Error(w.status());
  const fs::Attr& post = *w;
  const uint32_t reached = durable ? proto::kFileSync : proto::kUnstable;
  out_.bytes = r_.data.size();
  out_.reply.u32 = static_cast<uint32_t>(r_.data.size());
  out_.reply.stable = reached;
  out_.reply.verifier = verifier_;
  out_.reply.attr = ToWire(post);
  out_.reply.mac = Mint(post);
  return true;
}

// Namespaces as Linux: user.* follows the file's permissions (regular files
// and directories only); trusted.* is root's; security.* and system.* are
// changed by root or the owner.
bool Exec::Xattr() {
  fs::Attr a;
  if (!Load(r_.h, a)) return false;
  const uint32_t vol = r_.h.volume;
  const bool root = r_.creds.uid == 0, owner = r_.creds.uid == a.uid;
  const std::string& n = r_.name;
  auto starts = [&](const char* p) { return n.rfind(p, 0) == 0; };
  if (a.snap == fs::kSnapshotDir) {
    // A `.snapshot` directory has no attributes of its own (its ACL is
    // its mode: a kernel checking permission asks for it).
    if (r_.op == Op::kListXattr) return true;
    return Error(ENODATA, "no " + n);
  }
  if (n == fs::kSnapshotCreatedXattr && r_.op != Op::kListXattr) {
    // What a snapshot's objects tell of it: when it was taken.
    if (r_.op != Op::kGetXattr) return Error(EPERM, n + " is not set");
    if (a.snap == 0) return Error(ENODATA, "no " + n + ": not in a snapshot");
    auto s = d_.SnapshotById(vol, a.snap);
    if (!s.ok()) return Error(s.status());
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%lld.%09u", static_cast<long long>(s->created.sec), s->created.nsec);
    out_.reply.text = buf;
    return true;
  }
  if (r_.op == Op::kListXattr) {
    auto names = d_.ListXattr(vol, a.ino, a.snap);
    if (!names.ok()) return Error(names.status());
    for (auto& x : *names) {
      if (root || x.rfind("trusted.", 0) != 0) out_.reply.names.push_back(std::move(x));
    }
    return true;
  }
  const bool user = starts("user."), trusted = starts("trusted.");
  if (!user && !trusted && !starts("security.") && !starts("system.")) {
    return Error(EOPNOTSUPP, "unknown attribute namespace");
  }
  const bool change = r_.op != Op::kGetXattr;
  if (trusted && !root) return Error(change ? EPERM : ENODATA, "trusted attributes are root's");
  if (user) {
    if (a.type != fs::FileType::kRegular && a.type != fs::FileType::kDirectory) {
      return Error(change ? EPERM : ENODATA, "user attributes only on files and directories");
    }
    if (!Deny(CheckAccess(a, r_.creds, change ? proto::kAccessWrite : proto::kAccessRead), "attribute")) return false;
  } else if (change && !root && !owner) {
    return Error(EPERM, "only the owner changes " + n);
  }
  if (change && (n == fs::kAclAccessXattr || n == fs::kAclDefaultXattr)) return Acl(a);
  Status s;
  switch (r_.op) {
    case Op::kGetXattr: {
      auto v = d_.GetXattr(vol, a.ino, n, a.snap);
      if (!v.ok()) return Error(v.status().code() == Code::kNotFound ? ENODATA : ErrnoOf(v.status()), "no " + n);
      out_.reply.text = std::move(*v);
      return true;
    }
    case Op::kSetXattr:
      s = d_.SetXattr(vol, a.ino, n, r_.value, static_cast<int>(r_.flags));
      break;
    default:
      s = d_.RemoveXattr(vol, a.ino, n);
      break;
  }
  if (s.code() == Code::kNotFound) return Error(ENODATA, "no " + n);
  if (s.code() == Code::kNoSpace && r_.value.size() > fs::kXattrValueMax) return Error(E2BIG, s.ToString());
  return Done(s);
}

// Setting or removing a POSIX ACL (the owner or root: Xattr checked that).
// Setgid goes when the caller is neither in the file's group nor root, as
// Linux's posix_acl_update_mode; the flags (XATTR_CREATE, XATTR_REPLACE)
// do not apply to ACLs, as on Linux.
bool Exec::Acl(const fs::Attr& a) {
  if (a.type == fs::FileType::kSymlink) return Error(EOPNOTSUPP, "symbolic links have no ACLs");
  const bool is_default = r_.name == fs::kAclDefaultXattr;
  const bool clear_setgid = r_.creds.uid != 0 && !InGroup(r_.creds, a.gid);
  auto set = d_.SetAcl(r_.h.volume, a.ino, is_default, r_.op == Op::kSetXattr ? r_.value : std::string(), clear_setgid);
  if (!set.ok()) {
    if (set.status().code() == Code::kOutOfRange) return Error(E2BIG, set.status().ToString());
    return Error(set.status());
  }
  return true;
}

bool Exec::ReadDir() {
  fs::Attr dir;
  if (!LoadDir(r_.h, dir) || !Deny(CheckAccess(dir, r_.creds, proto::kAccessRead), "read directory")) return false;
  if (dir.snap == fs::kSnapshotDir) return ReadSnapshotDir(dir);
  auto page = d_.ReadDir(r_.h.volume, dir.ino, r_.offset, r_.count, dir.snap);
  if (!page.ok()) return Error(page.status());
  if (dir.snap == 0) d_.Accessed(r_.h.volume, dir, fs::Now());
  out_.reply.eof = page->size() < r_.count;
  const bool plus = (r_.flags & proto::kReadDirPlus) != 0, xattrs = (r_.flags & proto::kReadDirXattrs) != 0;
  size_t budget = proto::kReadDirXattrBudget;
  for (auto& e : *page) {
    if (plus) {
      auto a = dir.snap != 0 ? d_.GetAttr(r_.h.volume, e.ino, dir.snap)
                             : c_.Shown(r_.h.volume, [&] { return d_.GetAttr(r_.h.volume, e.ino); });
      if (!a.ok()) continue;  // removed since the listing: skip it
      out_.reply.attrs.push_back(ToWire(*a));
      out_.reply.macs.push_back(Mint(*a));
      if (xattrs) out_.reply.xattrs.push_back(EntryXattrs(*a, &budget));
    }
    out_.reply.entries.push_back(ToWire(e));
  }
  // Shown, where the export asks: `.snapshot` last, once.
  if ((r_.flags & proto::kReadDirSnapshotDir) != 0 && dir.snap == 0 && out_.reply.eof &&
      r_.offset < proto::kSnapshotDirCookie) {
    fs::Attr sd = dir;
    SnapshotDirOf(sd);
    if (plus) {
      out_.reply.attrs.push_back(ToWire(sd));
      out_.reply.macs.push_back(Mint(sd));
      if (xattrs) out_.reply.xattrs.push_back({});  // none, and so not carried: a head asking finds none
    }
    out_.reply.entries.push_back(
        ToWire(fs::DirEntry{".snapshot", dir.ino, fs::FileType::kDirectory, proto::kSnapshotDirCookie}));
  }
  return true;
}

// An entry's extended attributes for READDIR's kReadDirXattrs: carried when
// the caller could read every one of them with GETXATTR (a regular file or
// directory it may read; trusted.* only for root, as LISTXATTR shows them)
// and they fit the entry's and the reply's bounds; else not, and the head
// asks.
proto::Reply::EntryXattrs Exec::EntryXattrs(const fs::Attr& a, size_t* budget) {
  proto::Reply::EntryXattrs out;
  if ((a.type != fs::FileType::kRegular && a.type != fs::FileType::kDirectory) ||
      CheckAccess(a, r_.creds, proto::kAccessRead) != 0) {
    return out;
  }
  auto names = d_.ListXattr(r_.h.volume, a.ino, a.snap);
  if (!names.ok()) return out;
  for (auto& n : *names) {
    if (r_.creds.uid != 0 && n.rfind("trusted.", 0) == 0) continue;
    auto v = d_.GetXattr(r_.h.volume, a.ino, n, a.snap);
    if (!v.ok()) return {};  // changed meanwhile: let the head ask
    out.list.emplace_back(std::move(n), std::move(*v));
    if (proto::EntryXattrBytes(out) > proto::kReadDirXattrBytesMax) return {};
  }
  const size_t bytes = proto::EntryXattrBytes(out);
  if (bytes > *budget) return {};
  *budget -= bytes;
  out.carried = true;
  return out;
}

proto::LockInfo Describe(const HeldLock& h) {
  proto::LockInfo l;
  l.type = h.range.type;
  l.start = h.range.start;
  l.length = proto::LockLength(h.range);
  l.session = h.who.session;
  l.owner = h.who.owner;
  return l;
}

// LOCK and TESTLOCK: regular files only; the caller needs read permission
// or ownership, whatever the lock type (as knfsd asks of NLM requests).
bool Exec::Lock() {
  fs::Attr a;
  if (!Load(r_.h, a)) return false;
  if (a.type != fs::FileType::kRegular) return Error(EINVAL, "byte-range locks are for regular files only");
  if (!Deny(CheckData(a, r_.creds, proto::kAccessRead), "lock")) return false;
  proto::LockRange want{r_.offset, 0, r_.lock_type};
  if (!proto::LockRangeEnd(r_.offset, r_.length, &want.end)) return Error(EINVAL, "lock range beyond 2^64 - 1");
  // A snapshot's file never changes: a read lock on it conflicts with
  // nothing and needs no keeping (a write lock was EROFS).
  if (a.snap != 0) return true;
  const LockFile file{r_.h.volume, a.ino};
  const LockOwner who{s_.serial, r_.owner};
  HeldLock conflict;
  if (r_.op == Op::kTestLock) {
    if (locks_.Test(file, who, want, &conflict)) out_.reply.lock = Describe(conflict);
    return true;
  }
  switch (locks_.Lock(file, who, want, &conflict, (r_.flags & proto::kLockReclaim) != 0)) {
    case LockResult::kOk:
      break;
    case LockResult::kConflict:
      out_.reply.lock = Describe(conflict);
      return Error(EAGAIN, "conflicts with a " +
                               std::string(conflict.range.type == proto::kLockWrite ? "write" : "read") +
                               " lock of session " + std::to_string(conflict.who.session) + " owner " +
                               std::to_string(conflict.who.owner));
    case LockResult::kNoLocks:
      return Error(ENOLCK, "too many byte-range locks (head.max_locks, head.max_locks_per_session)");
  }
  return StillInSession();
}

// UNLOCK does not look the handle up (as RELEASE): a lock on a file deleted
// since can still be released.
bool Exec::Unlock() {
  if (r_.h.snap != 0) return true;  // nothing was kept (Lock)
  uint64_t end = 0;
  if (!proto::LockRangeEnd(r_.offset, r_.length, &end)) return Error(EINVAL, "lock range beyond 2^64 - 1");
  switch (locks_.Unlock({r_.h.volume, r_.h.ino}, {s_.serial, r_.owner}, r_.offset, end)) {
    case LockResult::kOk:
    case LockResult::kConflict:
      return true;
    case LockResult::kNoLocks:
      return Error(ENOLCK,
                   "the unlock would split a lock past the lock limits (head.max_locks, head.max_locks_per_session)");
  }
  return true;
}

std::string ShareBits(uint32_t bits) {
  std::string out;
  if (bits & proto::kShareRead) out += "r";
  if (bits & proto::kShareWrite) out += "w";
  if (bits & proto::kShareDelete) out += "d";
  return out.empty() ? "-" : out;
}

// A release (access 0, deny 0) does not look the handle up (as UNLOCK): a
// reservation on a file deleted since can still be released. Setting one
// asks for the access it names: read data for kShareRead, write data for
// kShareWrite (delete is the directory's permission, checked by the head).
bool Exec::Share() {
  const LockFile file{r_.h.volume, r_.h.ino};
  const LockOwner who{s_.serial, r_.owner};
  if (r_.h.snap != 0) {
    // Read access to what never changes: granted, nothing kept (a deny of
    // reading or writing is met by every snapshot reader anyway).
    fs::Attr a;
    if (r_.share_access == 0 && r_.share_deny == 0) return true;
    if (!Load(r_.h, a)) return false;
    if (a.type != fs::FileType::kRegular) return Error(EINVAL, "share reservations are for regular files only");
    return Deny(CheckData(a, r_.creds, proto::kAccessRead), "share (read)");
  }
  if (r_.share_access == 0 && r_.share_deny == 0) {
    locks_.Share(file, who, {}, nullptr);
    return true;
  }
  fs::Attr a;
  if (!Load(r_.h, a)) return false;
  if (a.type != fs::FileType::kRegular) return Error(EINVAL, "share reservations are for regular files only");
  if ((r_.share_access & proto::kShareRead) && !Deny(CheckData(a, r_.creds, proto::kAccessRead), "share (read)")) {
    return false;
  }
  if ((r_.share_access & proto::kShareWrite) && !Deny(CheckData(a, r_.creds, proto::kAccessWrite), "share (write)")) {
    return false;
  }
  if ((r_.share_access & (proto::kShareRead | proto::kShareWrite)) &&
      !Uncontended(a.ino, (r_.share_access & proto::kShareWrite) != 0)) {
    return false;
  }
  HeldShare conflict;
  switch (locks_.Share(file, who, {r_.share_access, r_.share_deny}, &conflict)) {
    case LockResult::kOk:
      break;
    case LockResult::kConflict:
      return Error(EBUSY, "share reservation conflict: session " + std::to_string(conflict.who.session) + " owner " +
                              std::to_string(conflict.who.owner) + " holds access " + ShareBits(conflict.mode.access) +
                              " deny " + ShareBits(conflict.mode.deny));
    case LockResult::kNoLocks:
      return Error(ENOLCK, "too many locks and share reservations (head.max_locks, head.max_locks_per_session)");
  }
  return StillInSession();
}

std::string LeaseName(uint32_t type) {
  return type == 0 ? "none" : (type & proto::kLeaseWrite) ? "read-write" : "read";
}

bool Exec::Uncontended(uint64_t ino, bool write) {
  if (locks_.LeaseCount() == 0) return true;
  std::vector<RecallNote> recall;
  std::vector<HeldLease> revoked;
  const bool wait = locks_.Contend({r_.h.volume, ino}, s_.domain, write, MonotonicNanos(), &recall, &revoked);
  for (const HeldLease& l : revoked) {
    NASGW_LOG(kWarn, "head") << "lease revoked: its holder did not give it back in time" << Kv("volume", r_.h.volume)
                             << Kv("ino", ino) << Kv("session", l.who.session) << Kv("owner", l.who.owner)
                             << Kv("domain", l.domain) << Kv("type", LeaseName(l.type));
  }
  for (const RecallNote& n : recall) {
    proto::Recall note{r_.h.volume, ino, n.who.owner, n.break_to};
    const bool sent = recaller_ && recaller_(n.who.session, note);
    NASGW_LOG(kDebug, "head") << "lease recalled" << Kv("volume", r_.h.volume) << Kv("ino", ino)
                              << Kv("session", n.who.session) << Kv("owner", n.who.owner)
                              << Kv("break_to", LeaseName(n.break_to)) << Kv("sent", sent) << Kv("for", s_.domain);
  }
  if (!wait) return true;
  return Error(EINPROGRESS, std::string("a lease of another head on this file is being recalled (") +
                                (write ? "write" : "read") + " by " + s_.domain + "): retry");
}

// A release (type 0) does not look the handle up, as UNLOCK.
bool Exec::Lease() {
  const LockFile file{r_.h.volume, r_.h.ino};
  const LockOwner who{s_.serial, r_.owner};
  if (r_.lease == 0 && r_.h.snap != 0) return true;  // nothing was kept
  if (r_.lease == 0) {
    locks_.SetLease(file, who, s_.domain, 0, nullptr);
    return true;
  }
  fs::Attr a;
  if (!Load(r_.h, a)) return false;
  if (a.type != fs::FileType::kRegular) return Error(EINVAL, "leases are for regular files only");
  if (!Deny(CheckData(a, r_.creds, proto::kAccessRead), "lease (read)")) return false;
  if (a.snap != 0) return true;  // a read lease on what never changes: never recalled, nothing kept
  if ((r_.lease & proto::kLeaseWrite) && !Deny(CheckData(a, r_.creds, proto::kAccessWrite), "lease (write)")) {
    return false;
  }
  HeldLease conflict;
  switch (locks_.SetLease(file, who, s_.domain, r_.lease, &conflict)) {
    case LockResult::kOk:
      break;
    case LockResult::kConflict:
      return Error(EAGAIN, "conflicts with a " + LeaseName(conflict.type) + " lease of " + conflict.domain +
                               " (session " + std::to_string(conflict.who.session) + ")");
    case LockResult::kNoLocks:
      return Error(ENOLCK,
                   "too many locks, share reservations and leases (head.max_locks, "
                   "head.max_locks_per_session)");
  }
  return StillInSession();
}

bool Exec::StillInSession() {
  // EndSession may have run meanwhile: it set `ended` before releasing the
  // session's locks, share reservations and leases, so either it released
  // what was just taken or we see the flag.
  if (s_.ended.load()) {
    locks_.ReleaseSession(s_.serial);
    return Error(EBADF, "the session has ended (goodbye)");
  }
  return true;
}

}  // namespace

Result<bool> DirParents::Within(fs::Domain& d, uint32_t vol, uint64_t dir, uint64_t scope) {
  uint64_t at = dir;
  for (int depth = 0; depth <= kDepthMax; depth++) {
    if (at == scope) return true;
    if (at == fs::kRootIno) return false;
    uint64_t epoch = 0;
    {
      MutexLock l(mu_);
      auto it = parent_.find({vol, at});
      if (it != parent_.end()) {
        at = it->second;
        continue;
      }
      epoch = epoch_;
    }
    auto p = d.Lookup(vol, at, "..");
    if (!p.ok()) return p.status();
    {
      MutexLock l(mu_);
      if (epoch_ == epoch) {  // no directory moved since the read
        if (parent_.size() >= kEntriesMax) parent_.clear();
        parent_[{vol, at}] = p->ino;
      }
    }
    at = p->ino;
  }
  return Status::Corruption("directory " + std::to_string(dir) + ": parent chain longer than " +
                            std::to_string(kDepthMax));
}

void DirParents::Moved() {
  MutexLock l(mu_);
  epoch_++;
  parent_.clear();
}

size_t DirParents::size() const {
  MutexLock l(mu_);
  return parent_.size();
}

HeadSession::HeadSession()
    : serial([] {
        static std::atomic<uint64_t> next{1};
        return next.fetch_add(1);
      }()) {}

HeadOutcome HeadService::Execute(HeadSession& session, const proto::Request& r) {
  HeadOutcome out;
  out.volume = r.h.volume;
  if (r.reject != 0) {
    out.err = r.reject;
    out.why = r.reject_why;
    return out;
  }
  if (r.op == Op::kGoodbye) {  // needs no domain
    EndSession(session);
    return out;
  }
  HeadDomain d = domain_();
  auto unserved = [&out](std::string why, bool resend = false) {
    const uint32_t volume = out.volume;
    out = HeadOutcome();
    out.volume = volume;
    out.err = EHOSTUNREACH;
    out.why = std::move(why);
    out.unserved = true;
    out.resend = resend;
  };
  if (d.domain == nullptr) {
    unserved("the reserve is not online");
    return out;
  }
  if (d.lease != nullptr) {
    if (auto held = d.lease->Check(); !held.ok()) {
      unserved("this node no longer holds the reserve: " + held.ToString(), /*resend=*/true);
      return out;
    }
  }
  // The domain of the handle's volume; MOUNT names its volume instead.
  uint32_t id = fs::VolumeDomain(r.h.volume);
  if (r.op == Op::kMount && d.count() > 1) {
    for (uint32_t each = 0; each < d.count(); each++) {
      const std::shared_ptr<fs::Domain>& e = d.Of(each);  // (null: the partner's)
      if (e && e->FindVolume(r.name).ok()) id = each;     // names are unique across domains (Node)
    }
  } else if ((r.op == Op::kLink || r.op == Op::kRename) && fs::VolumeDomain(r.h2.volume) != id) {
    // Each handle checked first, with its own domain's key (as Exec::Verify
    // does within one): a forged one is EBADMSG wherever it points.
    for (const proto::Handle* h : {&r.h, &r.h2}) {
      const std::shared_ptr<fs::Domain>& hd = d.Of(fs::VolumeDomain(h->volume));
      if (hd == nullptr || !hd->handle_key().Verify(FromWire(*h))) {
        out.err = EBADMSG;
        out.why = "bad handle: not issued by this reserve's nasgwd in this scope";
        return out;
      }
    }
    out.err = EXDEV;
    out.why = "the two handles are of different volumes";
    return out;
  }
  const std::shared_ptr<fs::Domain>& dom = d.Of(id);
  if (dom == nullptr && d.domains && id < d.domains->size()) {
    // A domain of the reserve the partner serves (active/active): the
    // client's address moves here with it, or its call goes there.
    unserved("domain " + std::to_string(id) + " is served by the partner", /*resend=*/true);
    return out;
  }
  if (dom == nullptr) {
    if (r.op == Op::kStatfs) {
      // It names a volume without a MAC: one of no domain here is gone, as
      // a deleted volume's is.
      out.err = ESTALE;
      out.why = "volume " + std::to_string(r.h.volume) + " does not exist";
    } else {
      out.err = EBADMSG;  // as for a handle whose MAC no domain here issued (Exec::Verify)
      out.why = "bad handle: not issued by this reserve's nasgwd in this scope";
    }
    return out;
  }
  std::shared_ptr<cache::DataCache> c = CacheFor(d, id);
  Exec(*dom, *c, d.write_verifier, locks_, recaller_, parents_, session, r, out).Run();
  // An unstable write's reply (answered from the cache's memory) is no
  // change on the array: checked like a read.
  const bool through_gate =
      out.err == 0 && ChangesTheArray(r.op) && !(r.op == Op::kWrite && out.reply.stable == proto::kUnstable);
  if (d.lease != nullptr && !through_gate) {
    // It ran while this node held the lease, but may answer after it ran
    // out (the node hung between the two): what it read may be stale.
    if (auto held = d.lease->Check(); !held.ok()) {
      unserved("this node's lease on the reserve ran out while the request ran: " + held.ToString(), /*resend=*/true);
    }
  }
  if (!out.unserved && served_) served_(r.op);
  return out;
}

bool ChangesFiles(Op op) {
  switch (op) {
    case Op::kSetAttr:
    case Op::kCreate:
    case Op::kLink:
    case Op::kUnlink:
    case Op::kRmdir:
    case Op::kRename:
    case Op::kWrite:
    case Op::kFallocate:
    case Op::kSetXattr:
    case Op::kRemoveXattr:
      return true;
    default:
      return false;
  }
}

bool ChangesTheArray(Op op) {
  return ChangesFiles(op) || op == Op::kFsync || op == Op::kRelease || op == Op::kUnlock;
}

const std::shared_ptr<fs::Domain>& HeadDomain::Of(uint32_t id) const {
  static const std::shared_ptr<fs::Domain> kNone;
  if (domains) return id < domains->size() ? (*domains)[id] : kNone;
  return id == 0 ? domain : kNone;
}

std::shared_ptr<cache::DataCache> HeadService::CacheFor(const HeadDomain& d, uint32_t id) {
  // A new cache's options (only then: not on every request): each domain's
  // share of the cache's memory (DataCacheOptions' minimums still hold: a
  // cache smaller than them would not work).
  auto options = [&d, this](bool write_through) {
    cache::DataCacheOptions o = cache_options_;
    if (d.count() > 1) {
      o.memory_bytes = std::max(o.memory_bytes / d.count(), limits::kCacheMemoryBytesMin);
      o.dirty_bytes = std::max(o.dirty_bytes / d.count(), limits::kCacheDirtyBytesMin);
    }
    o.write_through |= write_through;
    return o;
  };
  std::vector<std::shared_ptr<cache::DataCache>> old;
  MutexLock l(cache_mu_);
  if (caches_.size() <= id) caches_.resize(id + 1);
  CacheSlot& slot = caches_[id];
  if (!(slot.cache != nullptr && slot.verifier == d.write_verifier) && domain_().write_verifier != d.write_verifier) {
    // A request that took its opening before the domain was opened again:
    // not the current opening, so it must not replace the current caches.
    // Written through, by a cache of its own for this request.
    auto once = std::make_shared<cache::DataCache>(d.Of(id), options(/*write_through=*/true));
    once->Close().IgnoreError();  // empty: stops its flusher; writes go through
    return once;
  }
  if (slot.cache == nullptr || slot.verifier != d.write_verifier || slot.domain != d.Of(id).get()) {
    // A new opening: what the old caches held went with the old one (their
    // flushes find the domain closed, or fail at its closed gate). Every
    // domain's: the verifier is the node's, one for all of them; and the
    // slots of domains this opening does not have (a format with fewer).
    for (size_t other = 0; other < caches_.size(); other++) {
      CacheSlot& o = caches_[other];
      if (o.cache != nullptr && (other == id || other >= d.count() || o.verifier != d.write_verifier)) {
        old.push_back(std::move(o.cache));
        o = CacheSlot();
      }
    }
    caches_.resize(std::max<size_t>(d.count(), id + 1));
    CacheSlot& fresh = caches_[id];
    fresh.cache = std::make_shared<cache::DataCache>(d.Of(id), options(/*write_through=*/false));
    fresh.verifier = d.write_verifier;
    fresh.domain = d.Of(id).get();
    if (closed_) fresh.cache->Close().IgnoreError();  // nothing in it yet
  }
  std::shared_ptr<cache::DataCache> c = caches_[id].cache;
  l.Unlock();
  old.clear();  // outside cache_mu_: closing flushes what it can
  return c;
}

std::vector<std::shared_ptr<cache::DataCache>> HeadService::Caches() const {
  std::vector<std::shared_ptr<cache::DataCache>> all;
  MutexLock l(cache_mu_);
  for (const CacheSlot& slot : caches_) all.push_back(slot.cache);
  return all;
}

namespace {

// Every field summed: one added to the stats must be added here (the sizes
// say so).
static_assert(sizeof(cache::ReadCacheStats) == 10 * sizeof(uint64_t));
static_assert(sizeof(cache::DataCacheStats) == 18 * sizeof(uint64_t) + sizeof(cache::ReadCacheStats));

void Add(cache::ReadCacheStats& a, const cache::ReadCacheStats& b) {
  a.bytes += b.bytes;
  a.protected_bytes += b.protected_bytes;
  a.capacity += b.capacity;
  a.hit_bytes += b.hit_bytes;
  a.miss_bytes += b.miss_bytes;
  a.prefetched_bytes += b.prefetched_bytes;
  a.prefetch_hit_bytes += b.prefetch_hit_bytes;
  a.evicted_bytes += b.evicted_bytes;
  a.refused_fills += b.refused_fills;
  a.ahead_waits += b.ahead_waits;
}

void Add(cache::DataCacheStats& a, const cache::DataCacheStats& b) {
  a.dirty_bytes += b.dirty_bytes;
  a.dirty_files += b.dirty_files;
  a.writes_cached += b.writes_cached;
  a.writes_stable += b.writes_stable;
  a.writes_logged += b.writes_logged;
  a.writes_log_slow += b.writes_log_slow;
  a.commits_logged += b.commits_logged;
  a.commits_flushed += b.commits_flushed;
  a.bytes_written += b.bytes_written;
  a.read_bytes_dirty += b.read_bytes_dirty;
  a.flushes += b.flushes;
  a.flush_bytes += b.flush_bytes;
  a.flush_errors += b.flush_errors;
  a.flush_dropped += b.flush_dropped;
  a.stalls += b.stalls;
  a.stall_timeouts += b.stall_timeouts;
  a.no_space += b.no_space;
  a.flush_nanos_total += b.flush_nanos_total;
  Add(a.read, b.read);
}

}  // namespace

cache::DataCacheStats HeadService::CacheStats() const {
  cache::DataCacheStats sum;
  for (const auto& c : Caches()) {
    if (c != nullptr) Add(sum, c->stats());
  }
  return sum;
}

Status HeadService::FlushCache() {
  const HeadDomain d = domain_();
  const uint64_t verifier = d.write_verifier;
  if (verifier == 0) return Status();
  std::vector<std::shared_ptr<cache::DataCache>> current, gone;
  {
    MutexLock l(cache_mu_);
    // No cache of this opening yet: no write was answered through it.
    for (size_t id = 0; id < caches_.size(); id++) {
      CacheSlot& slot = caches_[id];
      if (slot.cache == nullptr || slot.verifier != verifier) continue;
      if (d.domains && slot.domain != d.Of(static_cast<uint32_t>(id)).get()) {
        // A domain no longer served here (active/active: given back):
        // its cache goes, flushed as it closes, before the node closes
        // the domain (it waits for nothing to hold it).
        gone.push_back(std::move(slot.cache));
        slot = CacheSlot();
        continue;
      }
      current.push_back(slot.cache);
    }
  }
  gone.clear();  // outside cache_mu_: closing flushes what it can
  Status first;
  for (const auto& c : current) {
    Status s = c->FlushAll();  // outside cache_mu_: it waits for the array
    if (first.ok()) first = s;
  }
  return first;
}

uint64_t HeadService::ForgetVolume(uint32_t vol) {
  // A directory may have another parent now (or none): the scope checks
  // walk the chains again.
  parents_.Moved();
  std::shared_ptr<cache::DataCache> c;
  {
    MutexLock l(cache_mu_);
    const uint32_t id = fs::VolumeDomain(vol);
    if (id < caches_.size()) c = caches_[id].cache;
  }
  return c == nullptr ? 0 : c->ForgetVolume(vol);
}

Status HeadService::Close() {
  {
    MutexLock l(cache_mu_);
    closed_ = true;
  }
  Status first;
  for (const auto& c : Caches()) {
    if (c == nullptr) continue;
    Status s = c->Close();
    if (first.ok()) first = s;
  }
  return first;
}

HeadService::~HeadService() {
  Close().IgnoreError();  // logged by the cache
}

uint64_t HeadService::WriteVerifier() const {
  return domain_().write_verifier;
}

void HeadService::EndSession(HeadSession& session) {
  const HeadDomain d = domain_();
  {
    MutexLock l(session.mu);
    session.ended = true;
    if (d.domain != nullptr) {
      for (const auto& [file, ids] : session.opens) {
        if (const auto& dom = d.Of(fs::VolumeDomain(file.first)); dom != nullptr) {
          dom->ReleaseFile(file.first, file.second).IgnoreError();
        }
      }
    }
    session.opens.clear();
  }
  // After `ended` is set: a LOCK racing this sees the flag or is released here.
  locks_.ReleaseSession(session.serial);
}

}  // namespace nasgw::daemon
