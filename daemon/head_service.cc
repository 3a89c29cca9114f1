#include "daemon/head_service.h"

#include <cerrno>
#include <ctime>

#include "daemon/access.h"

namespace nasgw::daemon {

using proto::Op;

int ErrnoOf(const Status& s) {
  if (s.code() == Code::kInvalidArgument && s.message().find("longer than 255") != std::string_view::npos) {
    return ENAMETOOLONG;
  }
  return s.ToErrno();
}

namespace {

fs::Timespec Now() {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return {t.tv_sec, static_cast<uint32_t>(t.tv_nsec)};
}

struct Fail {
  int err;
  std::string why;
};

// One request's execution: helpers return false after filling `out` with
// the error, so each op reads as a straight line of checks.
class Exec {
 public:
  Exec(fs::Domain& d, LockTable& locks, HeadSession& s, const proto::Request& r, HeadOutcome& out)
      : d_(d), locks_(locks), s_(s), r_(r), out_(out) {
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

  // The object a handle names. A generation of 0 means "any" (FUSE, which
  // names inodes by number only); a handle to a deleted object is ESTALE.
  bool Load(const fs::Handle& h, fs::Attr& a) {
    Result<fs::Attr> got = h.gen == 0 ? d_.GetAttr(h.volume, h.ino) : d_.GetAttr(h);
    if (!got.ok()) {
      if (got.status().code() == Code::kNotFound) return Error(ESTALE, got.status().ToString());
      return Error(got.status());
    }
    a = *got;
    return true;
  }
  bool LoadDir(const fs::Handle& h, fs::Attr& a) {
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
    out_.reply.attr = *a;
    return true;
  }
  bool Done(const Status& s) { return s.ok() || Error(s); }

  bool Run();

 private:
  bool Create();
  bool Rename();
  bool SetAttr();
  bool Read();
  bool Write();
  bool Xattr();
  bool Open();
  bool AddOpen(uint64_t ino);
  bool Release();
  bool ReadDir();
  bool Lock();
  bool Unlock();

  fs::Domain& d_;
  LockTable& locks_;
  HeadSession& s_;
  const proto::Request& r_;
  HeadOutcome& out_;
};

bool Exec::Run() {
  const uint32_t vol = r_.h.volume;
  fs::Attr a, dir;
  switch (r_.op) {
    case Op::kHello:
      return Error(EPROTO, "hello is answered by the transport");
    case Op::kGoodbye:
      return Error(EPROTO, "goodbye is answered before the domain is needed");
    case Op::kMount: {
      auto v = d_.FindVolume(r_.name);
      if (!v.ok()) return Error(v.status());
      auto root = d_.GetAttr(v->id, fs::kRootIno);
      if (!root.ok()) return Error(root.status());
      out_.volume = v->id;
      out_.reply.volume = {v->id, v->record_bytes, *root};
      return true;
    }
    case Op::kStatfs:
      if (!Load(r_.h, a)) return false;  // the volume's root: the volume exists
      out_.reply.statfs = d_.Statfs();
      return true;
    case Op::kLookup:
      if (!LoadDir(r_.h, dir) || !Deny(CheckAccess(dir, r_.creds, proto::kAccessExec), "search directory")) {
        return false;
      }
      return Set(d_.Lookup(vol, dir.ino, r_.name));
    case Op::kGetAttr:
      if (!Load(r_.h, a)) return false;
      out_.reply.attr = a;
      return true;
    case Op::kSetAttr:
      return SetAttr();
    case Op::kAccess:
      if (!Load(r_.h, a)) return false;
      out_.reply.u32 = Granted(a, r_.creds, r_.count);
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
      return Done(r_.op == Op::kUnlink ? d_.Unlink(vol, dir.ino, r_.name) : d_.Rmdir(vol, dir.ino, r_.name));
    case Op::kRename:
      return Rename();
    case Op::kReadLink: {
      if (!Load(r_.h, a)) return false;
      auto t = d_.ReadLink(vol, a.ino);
      if (!t.ok()) return Error(t.status());
      out_.reply.text = *t;
      return true;
    }
    case Op::kReadDir:
      return ReadDir();
    case Op::kFindCaseless: {
      if (!LoadDir(r_.h, dir) || !Deny(CheckAccess(dir, r_.creds, proto::kAccessExec), "search directory")) {
        return false;
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
      return Load(r_.h, a) && Done(d_.Fsync(vol, a.ino));
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
  }
  return Error(ENOSYS, "unknown op");
}

bool Exec::Create() {
  fs::Attr dir;
  if (!LoadDir(r_.h, dir) ||
      !Deny(CheckAccess(dir, r_.creds, proto::kAccessWrite | proto::kAccessExec), "write directory")) {
    return false;
  }
  uint32_t mode = r_.mode, uid = 0, gid = 0;
  NewOwner(dir, r_.creds, r_.type, mode, uid, gid);
  auto made = d_.Create(r_.h.volume, dir.ino, r_.name, r_.type, mode, uid, gid, r_.offset, r_.name2);
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
  fs::Attr from_dir, to_dir, victim, target;
  if (r_.h2.volume != vol) return Error(EXDEV, "rename across volumes");
  if (!LoadDir(r_.h, from_dir) || !LoadDir(r_.h2, to_dir) ||
      !Deny(CheckAccess(from_dir, r_.creds, proto::kAccessExec), "search directory") ||
      !Deny(CheckAccess(to_dir, r_.creds, proto::kAccessExec), "search directory") ||
      !Child(from_dir, r_.name, victim) || !Deny(CheckRemove(from_dir, victim, r_.creds), "move out of directory")) {
    return false;
  }
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
  return Done(d_.Rename(vol, from_dir.ino, r_.name, to_dir.ino, r_.name2));
}

bool Exec::SetAttr() {
  fs::Attr a;
  if (!Load(r_.h, a)) return false;
  fs::SetAttr s = r_.set;
  const uint32_t m = r_.set_mask;
  if (!Deny(CheckSetAttr(a, r_.creds, m, s), "change attributes")) return false;
  s.set_mode = s.set_mode || (m & proto::kSetMode);
  s.set_uid = (m & proto::kSetUid) != 0;
  s.set_gid = (m & proto::kSetGid) != 0;
  s.set_size = (m & proto::kSetSize) != 0;
  s.set_atime = (m & (proto::kSetAtime | proto::kSetAtimeNow)) != 0;
  s.set_mtime = (m & (proto::kSetMtime | proto::kSetMtimeNow)) != 0;
  const fs::Timespec now = Now();
  if (m & proto::kSetAtimeNow) s.atime = now;
  if (m & proto::kSetMtimeNow) s.mtime = now;
  return Set(d_.SetAttrs(r_.h.volume, a.ino, s));
}

bool Exec::Open() {
  fs::Attr a;
  if (!Load(r_.h, a)) return false;
  if (a.type == fs::FileType::kDirectory && (r_.count & proto::kAccessWrite)) return Error(EISDIR, "is a directory");
  if (!Deny(CheckAccess(a, r_.creds, r_.count), "open")) return false;
  if (!AddOpen(a.ino)) return false;
  out_.reply.attr = a;
  return true;
}

bool Exec::AddOpen(uint64_t ino) {
  std::lock_guard<std::mutex> l(s_.mu);
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
  std::lock_guard<std::mutex> l(s_.mu);
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
  out_.data.resize(r_.count);
  auto n = d_.Read(r_.h.volume, a.ino, r_.offset, r_.count, out_.data.data());
  if (!n.ok()) return Error(n.status());
  out_.data.resize(*n);
  out_.bytes = *n;
  out_.reply.eof = r_.offset + *n >= a.size;
  return true;
}

bool Exec::Write() {
  fs::Attr a;
  if (!Load(r_.h, a)) return false;
  if (a.type == fs::FileType::kDirectory) return Error(EISDIR, "is a directory");
  if (!Deny(CheckData(a, r_.creds, proto::kAccessWrite), "write")) return false;
  auto w = d_.Write(r_.h.volume, a.ino, r_.offset, r_.data.data(), r_.data.size());
  if (!w.ok()) return Error(w.status());
  out_.bytes = r_.data.size();
  out_.reply.u32 = static_cast<uint32_t>(r_.data.size());
  out_.reply.attr = *w;
  // A write by anyone but root drops setuid (and setgid with group execute).
  const uint32_t kill = 04000 | ((w->mode & 010) ? 02000u : 0u);
  if (r_.creds.uid != 0 && (w->mode & kill)) {
    fs::SetAttr s;
    s.set_mode = true;
    s.mode = w->mode & ~kill;
    return Set(d_.SetAttrs(r_.h.volume, a.ino, s));
  }
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
  if (r_.op == Op::kListXattr) {
    auto names = d_.ListXattr(vol, a.ino);
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
  Status s;
  switch (r_.op) {
    case Op::kGetXattr: {
      auto v = d_.GetXattr(vol, a.ino, n);
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

bool Exec::ReadDir() {
  fs::Attr dir;
  if (!LoadDir(r_.h, dir) || !Deny(CheckAccess(dir, r_.creds, proto::kAccessRead), "read directory")) return false;
  auto page = d_.ReadDir(r_.h.volume, dir.ino, r_.offset, r_.count);
  if (!page.ok()) return Error(page.status());
  out_.reply.eof = page->size() < r_.count;
  const bool plus = (r_.flags & proto::kReadDirPlus) != 0;
  for (auto& e : *page) {
    if (plus) {
      auto a = d_.GetAttr(r_.h.volume, e.ino);
      if (!a.ok()) continue;  // removed since the listing: skip it
      out_.reply.attrs.push_back(*a);
    }
    out_.reply.entries.push_back(std::move(e));
  }
  return true;
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
  const LockFile file{r_.h.volume, a.ino};
  const LockOwner who{s_.serial, r_.owner};
  HeldLock conflict;
  if (r_.op == Op::kTestLock) {
    if (locks_.Test(file, who, want, &conflict)) out_.reply.lock = Describe(conflict);
    return true;
  }
  switch (locks_.Lock(file, who, want, &conflict)) {
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
  // EndSession may have run meanwhile: it set `ended` before releasing the
  // session's locks, so either it released this one or we see the flag.
  if (s_.ended.load()) {
    locks_.ReleaseSession(s_.serial);
    return Error(EBADF, "the session has ended (goodbye)");
  }
  return true;
}

// UNLOCK does not look the handle up (as RELEASE): a lock on a file deleted
// since can still be released.
bool Exec::Unlock() {
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

}  // namespace

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
  std::shared_ptr<fs::Domain> d = domain_();
  if (d == nullptr) {
    out.err = EHOSTUNREACH;
    out.why = "the reserve is not online";
    return out;
  }
  Exec(*d, locks_, session, r, out).Run();
  return out;
}

void HeadService::EndSession(HeadSession& session) {
  std::shared_ptr<fs::Domain> d = domain_();
  {
    std::lock_guard<std::mutex> l(session.mu);
    session.ended = true;
    if (d != nullptr) {
      for (const auto& [file, ids] : session.opens) d->ReleaseFile(file.first, file.second).IgnoreError();
    }
    session.opens.clear();
  }
  // After `ended` is set: a LOCK racing this sees the flag or is released here.
  locks_.ReleaseSession(session.serial);
}

}  // namespace nasgw::daemon
