#include "daemon/access.h"

#include <algorithm>
#include <cerrno>

#include "fs/acl.h"

namespace nasgw::daemon {

namespace {
constexpr uint32_t kSuid = 04000, kSgid = 02000, kSticky = 01000, kGroupExec = 010;
}

bool InGroup(const proto::Creds& c, uint32_t gid) {
  return c.gid == gid || std::find(c.groups.begin(), c.groups.end(), gid) != c.groups.end();
}

namespace {
bool AclGrants(const fs::Acl& acl, const fs::Attr& a, const proto::Creds& c, uint32_t want) {
  return fs::AclPermits(
      acl, a.uid, a.gid, c.uid, [&](uint32_t g) { return InGroup(c, g); }, want);
}
}  // namespace

uint32_t Granted(const fs::Attr& a, const proto::Creds& c, uint32_t want) {
  want &= 7;
  if (c.uid == 0) {
    uint32_t g = want;
    if ((want & proto::kAccessExec) && a.type != fs::FileType::kDirectory && (a.mode & 0111) == 0) {
      g &= ~proto::kAccessExec;
    }
    return g;
  }
  if (!a.acl_access.empty()) {  // each bit on its own, as knfsd's ACCESS asks
    const fs::Acl acl = fs::DecodeKeptAcl(a.acl_access);
    uint32_t g = 0;
    for (uint32_t bit : {proto::kAccessRead, proto::kAccessWrite, proto::kAccessExec}) {
      if ((want & bit) && AclGrants(acl, a, c, bit)) g |= bit;
    }
    return g;
  }
  uint32_t bits;
  if (c.uid == a.uid) {
    bits = (a.mode >> 6) & 7;
  } else if (InGroup(c, a.gid)) {
    bits = (a.mode >> 3) & 7;
  } else {
    bits = a.mode & 7;
  }
  return want & bits;
}

int CheckAccess(const fs::Attr& a, const proto::Creds& c, uint32_t want) {
  if (c.uid != 0 && !a.acl_access.empty()) {  // all of `want` by one entry (posix_acl_permission)
    return AclGrants(fs::DecodeKeptAcl(a.acl_access), a, c, want & 7) ? 0 : EACCES;
  }
  return Granted(a, c, want) == (want & 7) ? 0 : EACCES;
}

int CheckData(const fs::Attr& a, const proto::Creds& c, uint32_t want) {
  if (c.uid == a.uid) return 0;
  // Reading a program to run it: the kernel pages an executable in with
  // reads, so execute permission lets a regular file be read (knfsd's
  // NFSD_MAY_READ_IF_EXEC; Ganesha's NFS READ checks the same).
  if ((want & 7) == proto::kAccessRead && a.type == fs::FileType::kRegular && Granted(a, c, proto::kAccessExec) != 0) {
    return 0;
  }
  return CheckAccess(a, c, want);
}

int CheckRemove(const fs::Attr& dir, const fs::Attr& victim, const proto::Creds& c) {
  if (int e = CheckAccess(dir, c, proto::kAccessWrite | proto::kAccessExec)) return e;
  if ((dir.mode & kSticky) && c.uid != 0 && c.uid != dir.uid && c.uid != victim.uid) return EPERM;
  return 0;
}

uint32_t KillPrivBits(const fs::Attr& a, const proto::Creds& c) {
  if (c.uid == 0 || a.type != fs::FileType::kRegular) return 0;
  uint32_t kill = a.mode & kSuid;
  if ((a.mode & kSgid) && (a.mode & kGroupExec)) kill |= kSgid;
  return kill;
}

int CheckSetAttr(const fs::Attr& a, const proto::Creds& c, uint32_t mask, fs::SetAttr& s) {
  const bool root = c.uid == 0;
  const bool owner = c.uid == a.uid;
  if ((mask & proto::kSetUid) && s.uid != a.uid && !root) return EPERM;
  if ((mask & proto::kSetGid) && s.gid != a.gid && !root && !(owner && InGroup(c, s.gid))) return EPERM;
  if ((mask & proto::kSetMode) && !root && !owner) {
    const uint32_t privs = kSuid | kSgid;
    const bool clears_privs_only =
        s.mode != a.mode && (s.mode & ~privs) == (a.mode & ~privs) && (s.mode & ~a.mode) == 0;
    if (!clears_privs_only || CheckData(a, c, proto::kAccessWrite) != 0) return EPERM;
  }
  if ((mask & (proto::kSetAtime | proto::kSetMtime)) && !root && !owner) return EPERM;
  if ((mask & (proto::kSetAtimeNow | proto::kSetMtimeNow)) && !root && !owner &&
      CheckAccess(a, c, proto::kAccessWrite) != 0) {
    return EACCES;
  }
  if ((mask & proto::kSetSize) && CheckData(a, c, proto::kAccessWrite) != 0) return EACCES;
  if (mask & proto::kSetMode) {
    const uint32_t gid = (mask & proto::kSetGid) ? s.gid : a.gid;
    if (!root && !InGroup(c, gid)) s.mode &= ~kSgid;
  }
  const bool owner_change = ((mask & proto::kSetUid) && s.uid != a.uid) || ((mask & proto::kSetGid) && s.gid != a.gid);
  if (owner_change && a.type != fs::FileType::kDirectory) {
    uint32_t mode = (mask & proto::kSetMode) ? s.mode : a.mode;
    uint32_t kill = kSuid;
    if (mode & kGroupExec) kill |= kSgid;
    if (mode & kill) {
      s.set_mode = true;
      s.mode = mode & ~kill;
    }
  }
  // A truncation (even to the same size, as truncate(2) and O_TRUNC) by a
  // caller without CAP_FSETID; a mode given with it is the caller's word.
  if ((mask & proto::kSetSize) && !(mask & proto::kSetMode)) {
    if (const uint32_t kill = KillPrivBits(a, c)) {
      const uint32_t mode = s.set_mode ? s.mode : a.mode;
      s.set_mode = true;
      s.mode = mode & ~kill;
    }
  }
  return 0;
}

void NewOwner(const fs::Attr& dir, const proto::Creds& c, fs::FileType type, uint32_t& mode, uint32_t& uid,
              uint32_t& gid) {
  uid = c.uid;
  if (dir.mode & kSgid) {
    gid = dir.gid;
    if (type == fs::FileType::kDirectory) mode |= kSgid;
  } else {
    gid = c.gid;
  }
  if (type != fs::FileType::kDirectory && (mode & kSgid) && (mode & kGroupExec) && c.uid != 0 && !InGroup(c, gid)) {
    mode &= ~kSgid;
  }
}

}  // namespace nasgw::daemon
