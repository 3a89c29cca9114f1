// nasgw-fuse: mounts one NAS volume through FUSE (low-level API), so that
// standard tools exercise the file system. A translator only: every call
// goes to nasgwd over fsal/client; it holds no file-system state beyond the
// kernel's open-file references. It is a head like Ganesha's FSAL: every
// call goes through the client library to nasgwd, with the caller's
// credentials (nasgwd checks permissions; the kernel checks them too, with
// default_permissions, so its attribute cache stays consistent).
//
// Handles: FUSE names files by node id (we use the inode number), nasgwd by
// handles it issued (fs/handle.h: a MAC only nasgwd can make; no wildcard
// generation). So nasgw-fuse keeps the handle of every node the kernel
// knows: the root's from MOUNT, each other's from the reply (LOOKUP, CREATE,
// LINK...) that gave the kernel its entry, counted as the kernel counts
// lookups, and dropped when the kernel forgets the node. A node id it does
// not know (never given out) is ESTALE. Nothing lets nasgw-fuse, which may
// run as an unprivileged user, name a file it was not given a handle for.
//
// Durability: writes are unstable (nasgwd may hold them in memory), fsync
// is nasgwd's FSYNC (NFS COMMIT). nasgw-fuse keeps no copy of what it
// wrote, so it cannot write again what nasgwd lost in a crash, as an NFS
// client does: it remembers, per file, the write verifier its unstable
// writes were answered with, and an fsync whose verifier differs (nasgwd
// restarted, or crashed, in between) fails with EIO, as a local file
// system's fsync does when write-back failed.
//
//   nasgw-fuse [--socket PATH] --volume NAME [-o OPTIONS] [--allow-other] [-f] MOUNTPOINT
#define FUSE_USE_VERSION 312

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <syslog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/log.h"
#include "base/mutex.h"
#include "fsal/client/nasgw_client.h"

#include <sys/stat.h>
#include <sys/xattr.h>

namespace nasgw::fuse {
namespace {

struct Mount {
  nasgw_client* client = nullptr;
  uint32_t vol = 0;
  double timeout = 1.0;    // seconds the kernel may cache names and attributes
  bool writeback = false;  // the kernel's write-back cache (Init)
  bool posix_acl = false;  // the kernel checks and caches POSIX ACLs (Init)
  // The handle of every node the kernel holds, with the kernel's lookup count.
  // Writes answered unstable since the last fsync (see Durability above).
  struct Unstable {
    uint64_t verifier = 0;  // the latest such write's
    bool lost = false;      // they carried different verifiers
    uint64_t writes = 0;    // how many were noted: an fsync clears only what it covered
  };
  struct Node {
    nasgw_handle handle;
    uint64_t lookups = 0;
    Unstable unstable;
    // Until when "security.capability" is known absent (NoCapsKnown).
    std::chrono::steady_clock::time_point no_caps_until{};
  };
  Mutex mu;
  std::unordered_map<uint64_t, Node> nodes GUARDED_BY(mu);  // by inode (= node id)
  nasgw_handle root{};                                      // from MOUNT
};

Mount* M(fuse_req_t req) {
  return static_cast<Mount*>(fuse_req_userdata(req));
}

// The caller's credentials, as the kernel gives them, for nasgwd's checks.
struct Cred {
  explicit Cred(fuse_req_t req) {
    const fuse_ctx* c = fuse_req_ctx(req);
    // All of the caller's groups, up to the protocol's limit.
    std::vector<gid_t> g(64);
    int n = fuse_req_getgroups(req, static_cast<int>(g.size()), g.data());
    if (n > static_cast<int>(g.size())) {
      g.resize(std::min(n, 1024));
      n = fuse_req_getgroups(req, static_cast<int>(g.size()), g.data());
    }
    for (int i = 0; i < std::min(n, static_cast<int>(g.size())); i++) groups.push_back(g[i]);
    cred = {c->uid, c->gid, static_cast<uint32_t>(groups.size()), groups.data()};
  }
  std::vector<uint32_t> groups;
  nasgw_cred cred;
  const nasgw_cred* operator&() const { return &cred; }
};

// The kernel's own requests under the write-back cache (Read, SetAttr):
// root, as its write-back WRITEs come.
const nasgw_cred kKernel{0, 0, 0, nullptr};

// The kernel's node id (and st_ino) of an object: nasgw_shown_ino, so that
// the same file in the live volume and in each snapshot is a node of its own.
uint64_t NodeId(const nasgw_handle& h) {
  return nasgw_shown_ino(&h);
}

// The handle of node `ino`: the root's, or one an entry reply gave the
// kernel. False for a node we never gave out.
bool H(fuse_req_t req, fuse_ino_t ino, nasgw_handle* out) {
  Mount* m = M(req);
  if (ino == FUSE_ROOT_ID) {
    *out = m->root;
    return true;
  }
  MutexLock l(m->mu);
  auto it = m->nodes.find(ino);
  if (it == m->nodes.end()) return false;
  *out = it->second.handle;
  return true;
}

// An entry reply gives the kernel one more lookup of the node.
void Remember(Mount* m, const nasgw_attr& a) {
  if (NodeId(a.handle) == FUSE_ROOT_ID) return;
  MutexLock l(m->mu);
  auto& n = m->nodes[NodeId(a.handle)];
  n.handle = a.handle;
  n.lookups++;
}

// A write nasgwd answered: unstable ones wait for an fsync.
void NoteWrite(Mount* m, fuse_ino_t ino, const nasgw_write_result& r) {
  if (r.stable != NASGW_UNSTABLE) return;
  MutexLock l(m->mu);
  auto it = m->nodes.find(ino);
  if (it == m->nodes.end()) return;
  Mount::Unstable& u = it->second.unstable;
  if (u.verifier != 0 && u.verifier != r.verifier) u.lost = true;
  u.verifier = r.verifier;
  u.writes++;
}

Mount::Unstable UnstableOf(Mount* m, fuse_ino_t ino) {
  MutexLock l(m->mu);
  auto it = m->nodes.find(ino);
  return it == m->nodes.end() ? Mount::Unstable{} : it->second.unstable;
}

// An fsync covered (and answered for) the unstable writes noted in
// `covered`; those noted while it ran wait for the next one.
void Committed(Mount* m, fuse_ino_t ino, const Mount::Unstable& covered) {
  MutexLock l(m->mu);
  auto it = m->nodes.find(ino);
  if (it == m->nodes.end()) return;
  Mount::Unstable& u = it->second.unstable;
  if (u.writes == covered.writes) {
    u = {};
  } else {
    u.lost = false;
  }
}

void Forget(Mount* m, fuse_ino_t ino, uint64_t nlookup) {
  MutexLock l(m->mu);
  auto it = m->nodes.find(ino);
  if (it == m->nodes.end()) return;
  if (it->second.lookups <= nlookup) {
    m->nodes.erase(it);
  } else {
    it->second.lookups -= nlookup;
  }
}

#define HANDLE_OR_STALE(req, ino, h) \
  nasgw_handle h;                    \
  if (!H(req, ino, &(h))) return (void)fuse_reply_err(req, ESTALE)

mode_t TypeBits(uint32_t t) {
  switch (t) {
    case NASGW_TYPE_REG:
      return S_IFREG;
    case NASGW_TYPE_DIR:
      return S_IFDIR;
    case NASGW_TYPE_LNK:
      return S_IFLNK;
    case NASGW_TYPE_FIFO:
      return S_IFIFO;
    case NASGW_TYPE_SOCK:
      return S_IFSOCK;
    case NASGW_TYPE_CHR:
      return S_IFCHR;
    case NASGW_TYPE_BLK:
      return S_IFBLK;
  }
  return 0;
}

uint32_t TypeOf(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return NASGW_TYPE_REG;
    case S_IFDIR:
      return NASGW_TYPE_DIR;
    case S_IFLNK:
      return NASGW_TYPE_LNK;
    case S_IFIFO:
      return NASGW_TYPE_FIFO;
    case S_IFSOCK:
      return NASGW_TYPE_SOCK;
    case S_IFCHR:
      return NASGW_TYPE_CHR;
    case S_IFBLK:
      return NASGW_TYPE_BLK;
  }
  return 0;
}

struct stat Stat(const nasgw_attr& a) {
  struct stat st {};
  st.st_ino = NodeId(a.handle);
  st.st_mode = TypeBits(a.type) | a.mode;
  st.st_nlink = a.nlink;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_size = static_cast<off_t>(a.size);
  st.st_blocks = static_cast<blkcnt_t>(a.blocks);
  st.st_blksize = 4096;
  st.st_rdev = a.rdev;
  st.st_atim = {a.atime.sec, a.atime.nsec};
  st.st_mtim = {a.mtime.sec, a.mtime.nsec};
  st.st_ctim = {a.ctime.sec, a.ctime.nsec};
  return st;
}

fuse_entry_param Entry(fuse_req_t req, const nasgw_attr& a) {
  fuse_entry_param e{};
  e.ino = NodeId(a.handle);
  e.generation = a.handle.gen;
  e.attr = Stat(a);
  e.attr_timeout = M(req)->timeout;
  e.entry_timeout = M(req)->timeout;
  return e;
}

// Remembered before the reply: the kernel may use the node at once. A reply
// the kernel does not take (an interrupted request) costs one extra count,
// so the handle stays until the mount ends: harmless.
void ReplyEntry(fuse_req_t req, int rc, const nasgw_attr& a) {
  if (rc != 0) return (void)fuse_reply_err(req, -rc);
  Remember(M(req), a);
  fuse_entry_param e = Entry(req, a);
  fuse_reply_entry(req, &e);
}

void ReplyAttr(fuse_req_t req, int rc, const nasgw_attr& a) {
  if (rc != 0) return (void)fuse_reply_err(req, -rc);
  struct stat st = Stat(a);
  fuse_reply_attr(req, &st, M(req)->timeout);
}

void ReplyStatus(fuse_req_t req, int rc) {
  fuse_reply_err(req, -rc);
}

nasgw_time Ts(const struct timespec& t) {
  return {t.tv_sec, static_cast<uint32_t>(t.tv_nsec)};
}

// ---- operations ----------------------------------------------------------------

// Also how the kernel turns a file handle back into a node it no longer
// has (export_support, Init: open_by_handle_at(2), an NFS re-export): it
// asks for "." (and, for a directory's parent, "..") of the node id, which
// is the inode number. A node we gave out is answered from its handle;
// another is found by number in the mount's scope (nasgwd allows that to
// a privileged head only; otherwise, as for a deleted one, ESTALE).
void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Cred c(req);
  Mount* m = M(req);
  nasgw_handle d;
  nasgw_attr a{};
  if (!H(req, parent, &d)) {
    const bool self = std::strcmp(name, ".") == 0;
    if (!self && std::strcmp(name, "..") != 0) return (void)fuse_reply_err(req, ESTALE);
    int rc = nasgw_get_inode(m->client, &c, &m->root, parent, &a);
    if (rc != 0) return (void)fuse_reply_err(req, rc == -EPERM || rc == -ENOENT ? ESTALE : -rc);
    if (self) return ReplyEntry(req, 0, a);
    d = a.handle;
  }
  ReplyEntry(req, nasgw_lookup(m->client, &c, &d, name, &a), a);
}

void ForgetOne(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Forget(M(req), ino, nlookup);
  fuse_reply_none(req);
}

void ForgetMany(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; i++) Forget(M(req), forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  nasgw_attr a{};
  ReplyAttr(req, nasgw_getattr(M(req)->client, &c, &h, &a), a);
}

void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  nasgw_sattr s{};
  if (to_set & FUSE_SET_ATTR_MODE) {
    s.mask |= NASGW_SET_MODE;
    s.mode = attr->st_mode & 07777;
  }
  if (to_set & FUSE_SET_ATTR_UID) {
    s.mask |= NASGW_SET_UID;
    s.uid = attr->st_uid;
  }
  if (to_set & FUSE_SET_ATTR_GID) {
    s.mask |= NASGW_SET_GID;
    s.gid = attr->st_gid;
  }
  if (to_set & FUSE_SET_ATTR_SIZE) {
    s.mask |= NASGW_SET_SIZE;
    s.size = static_cast<uint64_t>(attr->st_size);
  }
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
    s.mask |= NASGW_SET_ATIME_NOW;
  } else if (to_set & FUSE_SET_ATTR_ATIME) {
    s.mask |= NASGW_SET_ATIME, s.atime = Ts(attr->st_atim);
  }
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
    s.mask |= NASGW_SET_MTIME_NOW;
  } else if (to_set & FUSE_SET_ATTR_MTIME) {
    s.mask |= NASGW_SET_MTIME, s.mtime = Ts(attr->st_mtim);
  }
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  nasgw_attr a{};
  // With the write-back cache the kernel keeps a written file's times and
  // sends them (mtime with ctime, nothing else) from write-back or from the
  // writer's close: its own update for a write it allowed, so asked as
  // root, as the write-back's WRITEs are. (A utimensat(2) looks the same;
  // the kernel checked it: default_permissions.)
  const bool times = M(req)->writeback && (to_set & FUSE_SET_ATTR_CTIME) != 0 &&
                     (to_set & ~(FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_CTIME)) == 0;
  // A truncation comes with the kernel's own mtime too: the caller may
  // change the size, not necessarily set a time, so nasgwd takes it as now.
  if (M(req)->writeback && (s.mask & NASGW_SET_SIZE) && (s.mask & NASGW_SET_MTIME)) {
    s.mask = (s.mask & ~NASGW_SET_MTIME) | NASGW_SET_MTIME_NOW;
  }
  ReplyAttr(req, nasgw_setattr(M(req)->client, times ? &kKernel : &c, &h, &s, &a), a);
}

void ReadLink(fuse_req_t req, fuse_ino_t ino) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  std::vector<char> buf(4097);
  int rc = nasgw_readlink(M(req)->client, &c, &h, buf.data(), buf.size());
  if (rc < 0) return (void)fuse_reply_err(req, -rc);
  fuse_reply_readlink(req, buf.data());
}

void MakeAny(fuse_req_t req, fuse_ino_t parent, const char* name, uint32_t type, mode_t mode, dev_t rdev,
             const char* link, uint32_t flags, fuse_file_info* fi) {
  Cred c(req);
  HANDLE_OR_STALE(req, parent, d);
  nasgw_attr a{};
  const mode_t umask = type == NASGW_TYPE_LNK ? 0 : fuse_req_ctx(req)->umask;
  int rc = M(req)->posix_acl
               ? nasgw_create(M(req)->client, &c, &d, name, type, mode & 07777, rdev, link,
                              flags | NASGW_CREATE_UMASK(umask), &a)
               : nasgw_create(M(req)->client, &c, &d, name, type, mode & 07777 & ~umask, rdev, link, flags, &a);
  if (fi == nullptr || rc != 0) return ReplyEntry(req, rc, a);
  Remember(M(req), a);
  fuse_entry_param e = Entry(req, a);
  fuse_reply_create(req, &e, fi);
}

void MakeNode(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  const uint32_t t = TypeOf(mode);
  if (t == 0 || t == NASGW_TYPE_DIR || t == NASGW_TYPE_LNK) return (void)fuse_reply_err(req, EINVAL);
  MakeAny(req, parent, name, t, mode, rdev, nullptr, 0, nullptr);
}

void MakeDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  MakeAny(req, parent, name, NASGW_TYPE_DIR, mode, 0, nullptr, 0, nullptr);
}

void Symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  MakeAny(req, parent, name, NASGW_TYPE_LNK, 0777, 0, link, 0, nullptr);
}

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  MakeAny(req, parent, name, NASGW_TYPE_REG, mode, 0, nullptr, NASGW_CREATE_OPEN, fi);
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Cred c(req);
  HANDLE_OR_STALE(req, parent, d);
  ReplyStatus(req, nasgw_unlink(M(req)->client, &c, &d, name));
}

void Rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Cred c(req);
  HANDLE_OR_STALE(req, parent, d);
  ReplyStatus(req, nasgw_rmdir(M(req)->client, &c, &d, name));
}

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
            unsigned int flags) {
  // RENAME_WHITEOUT (overlayfs's: leave a whiteout device in the old
  // name's place) is not supported: EINVAL, as file systems without it say.
  if (flags & ~static_cast<unsigned int>(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
    return (void)fuse_reply_err(req, EINVAL);
  }
  Cred c(req);
  HANDLE_OR_STALE(req, parent, from);
  HANDLE_OR_STALE(req, newparent, to);
  const uint32_t f = ((flags & RENAME_NOREPLACE) ? NASGW_RENAME_NOREPLACE : 0) |
                     ((flags & RENAME_EXCHANGE) ? NASGW_RENAME_EXCHANGE : 0);
  ReplyStatus(req, nasgw_rename(M(req)->client, &c, &from, name, &to, newname, f));
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  HANDLE_OR_STALE(req, newparent, d);
  nasgw_attr a{};
  ReplyEntry(req, nasgw_link(M(req)->client, &c, &h, &d, newname, &a), a);
}

// The kernel's open flag for a program about to be run (its __FMODE_EXEC,
// which FUSE passes on): opened to execute, not to read, so a user who may
// execute but not read the file can run it (its pages are then read:
// nasgwd lets who may execute a file read it).
constexpr int kOpenForExec = 040;

uint32_t AccessOf(int flags) {
  if ((flags & O_ACCMODE) == O_RDONLY && (flags & kOpenForExec)) return NASGW_ACCESS_EXEC;
  switch (flags & O_ACCMODE) {
    case O_RDONLY:
      return NASGW_ACCESS_READ;
    case O_WRONLY:
      return NASGW_ACCESS_WRITE;
    default:
      return NASGW_ACCESS_READ | NASGW_ACCESS_WRITE;
  }
}

// The kernel sends O_TRUNC with the open (atomic_o_trunc, Init): the file
// is cut to 0 and, as open(2) does for O_TRUNC, its modification and change
// times set to now, even when it was empty already; by the opener, so that
// nasgwd's rules apply (write permission; setuid/setgid dropped for a
// caller other than root).
void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  nasgw_client* client = M(req)->client;
  int rc = nasgw_open(client, &c, &h, AccessOf(fi->flags), nullptr);
  if (rc != 0) return (void)fuse_reply_err(req, -rc);
  if (fi->flags & O_TRUNC) {
    nasgw_sattr s{};
    s.mask = NASGW_SET_SIZE | NASGW_SET_MTIME_NOW;
    nasgw_attr a{};
    rc = nasgw_setattr(client, &c, &h, &s, &a);
    if (rc != 0) {
      nasgw_release(client, &c, &h);
      return (void)fuse_reply_err(req, -rc);
    }
  }
  fuse_reply_open(req, fi);
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  // With the write-back cache, the kernel reads the rest of a page a
  // partial write lands in, through the writer's descriptor, which may be
  // write-only: a fill of its cache for a file it let that caller open for
  // writing, asked as root (nasgw-fuse is then a privileged head, Init).
  const bool fill = M(req)->writeback && fi != nullptr && (fi->flags & O_ACCMODE) == O_WRONLY;
  std::vector<char> buf(std::min<size_t>(size, NASGW_IO_MAX));
  int64_t n = nasgw_read(M(req)->client, fill ? &kKernel : &c, &h, static_cast<uint64_t>(off), buf.data(),
                         static_cast<uint32_t>(buf.size()), nullptr);
  if (n < 0) return (void)fuse_reply_err(req, static_cast<int>(-n));
  fuse_reply_buf(req, buf.data(), static_cast<size_t>(n));
}

// Writes are unstable, as a local file system's page cache is: durable at
// fsync (FUSE_FSYNC, also what the kernel sends after a write to an O_SYNC
// or O_DSYNC file).
void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off, fuse_file_info*) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  size_t done = 0;
  while (done < size) {
    const auto chunk = static_cast<uint32_t>(std::min<size_t>(size - done, NASGW_IO_MAX));
    nasgw_write_result r{};
    int64_t n =
        nasgw_write(M(req)->client, &c, &h, static_cast<uint64_t>(off) + done, buf + done, chunk, NASGW_UNSTABLE, &r);
    if (n < 0) {
      NASGW_LOG(kWarn, "fuse") << "write failed" << Kv("ino", ino) << Kv("offset", off + done)
                               << Kv("error", std::strerror(static_cast<int>(-n)))
                               << Kv("why", nasgw_client_last_message());
      return (void)fuse_reply_err(req, static_cast<int>(-n));
    }
    NoteWrite(M(req), ino, r);
    done += static_cast<size_t>(n);
  }
  fuse_reply_write(req, size);
}

void Flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  fuse_reply_err(req, 0);
}

void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  ReplyStatus(req, nasgw_release(M(req)->client, &c, &h));
}

// fsync and fdatasync alike: nasgwd's FSYNC (NFS COMMIT) makes the file's
// data and metadata durable; EIO when unstable writes since the last fsync
// may have been lost (their verifier is not the one FSYNC answers with).
void Fsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  Mount* m = M(req);
  const Mount::Unstable before = UnstableOf(m, ino);
  uint64_t verifier = 0;
  int rc = nasgw_fsync(m->client, &c, &h, &verifier);
  if (rc != 0) {
    NASGW_LOG(kWarn, "fuse") << "fsync failed" << Kv("ino", ino) << Kv("error", std::strerror(-rc))
                             << Kv("why", nasgw_client_last_message());
    return ReplyStatus(req, rc);
  }
  Committed(m, ino, before);
  if (before.lost || (before.verifier != 0 && before.verifier != verifier)) {
    NASGW_LOG(kWarn, "fuse") << "fsync: writes since the last fsync may have been lost (nasgwd restarted)"
                             << Kv("ino", ino) << Kv("writes", before.writes);
    return (void)fuse_reply_err(req, EIO);
  }
  fuse_reply_err(req, 0);
}

// fallocate(2): the kernel passes Linux's mode bits, which are nasgwd's,
// and writes its dirty pages of a range before punching it.
void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, fuse_file_info*) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  if (off < 0 || len <= 0) return (void)fuse_reply_err(req, EINVAL);
  ReplyStatus(req, nasgw_fallocate(M(req)->client, &c, &h, static_cast<uint32_t>(mode), static_cast<uint64_t>(off),
                                   static_cast<uint64_t>(len), nullptr));
}

// lseek's SEEK_DATA and SEEK_HOLE (the kernel answers the other whences).
// With the kernel's write-back cache, written data may still be only in
// its page cache, which it does not write back before asking: ENOSYS, and
// the kernel answers these itself from then on (all data, no holes), as
// it must not report a hole over data nasgwd has not seen.
void Lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, fuse_file_info*) {
  if (M(req)->writeback) return (void)fuse_reply_err(req, ENOSYS);
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  if ((whence != SEEK_DATA && whence != SEEK_HOLE) || off < 0) return (void)fuse_reply_err(req, EINVAL);
  uint64_t at = 0;
  int rc = nasgw_seek(M(req)->client, &c, &h, static_cast<uint64_t>(off), whence == SEEK_HOLE, &at);
  if (rc != 0) return ReplyStatus(req, rc);
  fuse_reply_lseek(req, static_cast<off_t>(at));
}

// An open directory is held open in nasgwd, as a file is: removed or
// renamed over meanwhile, it lives (nlink 0, fstat answers) until
// releasedir. The kernel checked the caller's permission to open it.
void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  nasgw_attr a{};
  int rc = nasgw_open(M(req)->client, &c, &h, 0, &a);
  if (rc != 0) return (void)fuse_reply_err(req, -rc);
  if (a.type != NASGW_TYPE_DIR) {
    nasgw_release(M(req)->client, &c, &h);
    return (void)fuse_reply_err(req, ENOTDIR);
  }
  fuse_reply_open(req, fi);
}

// FUSE offsets: 1 after ".", 2 after "..", cookie + 2 after an entry.
void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  std::vector<char> buf(size);
  size_t used = 0;
  auto add = [&](const char* name, uint64_t child, uint32_t t, off_t next) {
    struct stat st {};
    st.st_ino = child;
    st.st_mode = TypeBits(t);
    size_t need = fuse_add_direntry(req, buf.data() + used, size - used, name, &st, next);
    if (need > size - used) return false;
    used += need;
    return true;
  };
  if (off < 1 && !add(".", ino, NASGW_TYPE_DIR, 1)) return (void)fuse_reply_buf(req, buf.data(), used);
  if (off < 2) {
    nasgw_attr parent{};
    int rc = nasgw_lookup(M(req)->client, &c, &h, "..", &parent);
    if (!add("..", rc == 0 ? NodeId(parent.handle) : ino, NASGW_TYPE_DIR, 2)) {
      return (void)fuse_reply_buf(req, buf.data(), used);
    }
  }
  uint64_t cookie = off > 2 ? static_cast<uint64_t>(off) - 2 : 0;
  std::vector<nasgw_dirent> ents(64);
  for (int eof = 0; !eof;) {
    uint32_t n = 0;
    int rc = nasgw_readdir(M(req)->client, &c, &h, cookie, 64, 0, ents.data(), nullptr, &n, &eof);
    if (rc != 0) {
      if (used == 0) return (void)fuse_reply_err(req, -rc);
      break;
    }
    for (uint32_t i = 0; i < n; i++) {
      nasgw_handle child = h;  // its node id: the directory's snapshot, the entry's inode
      child.ino = ents[i].ino;
      if (!add(ents[i].name, NodeId(child), ents[i].type, static_cast<off_t>(ents[i].cookie + 2))) {
        return (void)fuse_reply_buf(req, buf.data(), used);
      }
      cookie = ents[i].cookie;
    }
  }
  fuse_reply_buf(req, buf.data(), used);
}

void StatFs(fuse_req_t req, fuse_ino_t) {
  Cred c(req);
  nasgw_fs_stats s{};
  int rc = nasgw_statfs(M(req)->client, &c, M(req)->vol, &s);
  if (rc != 0) return (void)fuse_reply_err(req, -rc);
  struct statvfs v {};
  v.f_bsize = 4096;
  v.f_frsize = 4096;
  v.f_blocks = s.total_bytes / 4096;
  v.f_bfree = s.free_bytes / 4096;
  v.f_bavail = s.free_bytes / 4096;
  v.f_files = s.files + (1ull << 32);
  v.f_ffree = 1ull << 32;
  v.f_favail = 1ull << 32;
  v.f_namemax = NASGW_NAME_MAX;
  fuse_reply_statfs(req, &v);
}

// Before every write(2) the kernel asks for "security.capability", to
// drop file capabilities as it drops setuid (file_remove_privs: libfuse
// 3.14 cannot negotiate handle_killpriv_v2, which would let it remember the
// answer). nasgw-fuse remembers that a node has none for as long as the
// kernel may cache its attributes, so that small writes (with the
// write-back cache, each otherwise a page-cache copy) do not each cross to
// nasgwd; a change of the node's attributes through this mount forgets it.
constexpr const char* kCapsName = "security.capability";

bool NoCapsKnown(Mount* m, fuse_ino_t ino) {
  MutexLock l(m->mu);
  auto it = m->nodes.find(ino);
  return it != m->nodes.end() && std::chrono::steady_clock::now() < it->second.no_caps_until;
}

// `none`: nasgwd said there are none (remember it); else forget.
void NoteCaps(Mount* m, fuse_ino_t ino, bool none) {
  MutexLock l(m->mu);
  auto it = m->nodes.find(ino);
  if (it == m->nodes.end()) return;
  it->second.no_caps_until =
      none ? std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                    std::chrono::duration<double>(m->timeout))
           : std::chrono::steady_clock::time_point{};
}

void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  NoteCaps(M(req), ino, false);
  ReplyStatus(req, nasgw_setxattr(M(req)->client, &c, &h, name, value, size, static_cast<uint32_t>(flags) & 3));
}

void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  const bool caps = std::strcmp(name, kCapsName) == 0;
  if (caps && NoCapsKnown(M(req), ino)) return (void)fuse_reply_err(req, ENODATA);
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  std::vector<char> buf(64 << 10);
  int64_t n = nasgw_getxattr(M(req)->client, &c, &h, name, buf.data(), buf.size());
  if (caps) NoteCaps(M(req), ino, n == -ENODATA);
  if (n < 0) return (void)fuse_reply_err(req, static_cast<int>(-n));
  if (size == 0) return (void)fuse_reply_xattr(req, static_cast<size_t>(n));
  if (size < static_cast<size_t>(n)) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, buf.data(), static_cast<size_t>(n));
}

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  int64_t need = nasgw_listxattr(M(req)->client, &c, &h, nullptr, 0);
  if (need < 0) return (void)fuse_reply_err(req, static_cast<int>(-need));
  if (size == 0) return (void)fuse_reply_xattr(req, static_cast<size_t>(need));
  std::vector<char> buf(static_cast<size_t>(need) + 1);
  int64_t n = nasgw_listxattr(M(req)->client, &c, &h, buf.data(), buf.size());
  if (n < 0) return (void)fuse_reply_err(req, static_cast<int>(-n));
  if (size < static_cast<size_t>(n)) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, buf.data(), static_cast<size_t>(n));
}

void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  Cred c(req);
  HANDLE_OR_STALE(req, ino, h);
  NoteCaps(M(req), ino, false);
  ReplyStatus(req, nasgw_removexattr(M(req)->client, &c, &h, name));
}

// What nasgw-fuse asks of the kernel, whatever libfuse's defaults:
// atomic_o_trunc, so that O_TRUNC comes with the open (Open truncates, and
// sets the times as open(2) does; without it the kernel sends a size change
// without the times); export_support, so that file handles (node id and
// generation) stay valid after the kernel forgets the node (Lookup).
//
// The write-back cache (writeback_cache) with --writeback-cache (root
// only): writes land in the kernel's page cache, as on a local file
// system, and reach nasgwd in large WRITEs at write-back, fsync or close;
// the kernel keeps size, mtime and ctime meanwhile and sends the times with
// a SETATTR (SetAttr). Write-back WRITEs come with the kernel's
// credentials (root), which nasgwd accepts only from a privileged head; the
// kernel checked the writer's permission at open. What an unstable write
// promised is unchanged: durable at fsync, and an fsync whose data nasgwd
// may have lost is EIO (NoteWrite counts the WRITEs the kernel sends). The
// price, as on an NFS client: an error nasgwd answers a write-back with
// (ENOSPC, EDQUOT, EIO) comes back at fsync or close, not at write(2); and
// other heads see such writes once they are written back. So it is not the
// default.
//
// setuid and setgid: before a write or a truncation by a caller without
// CAP_FSETID, the kernel clears them itself, with a SETATTR of the mode
// sent as that caller (seen on Linux 6.18 with libfuse 3.14 even when
// handle_killpriv is negotiated); nasgwd accepts such a change from anyone
// who may write the file, and clears them on WRITE and truncation too (for
// NFS, and whatever the kernel does).
void Init(void* userdata, fuse_conn_info* conn) {
  Mount* m = static_cast<Mount*>(userdata);
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  if (conn->capable & FUSE_CAP_EXPORT_SUPPORT) conn->want |= FUSE_CAP_EXPORT_SUPPORT;
  // POSIX ACLs: the kernel reads them (GETXATTR system.posix_acl_*), caches
  // them and checks with them (default_permissions); it no longer applies
  // the umask, which creates send to nasgwd (NASGW_CREATE_UMASK) to apply
  // when the directory has no default ACL.
  if ((conn->capable & FUSE_CAP_POSIX_ACL) && (conn->capable & FUSE_CAP_DONT_MASK)) {
    conn->want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
    m->posix_acl = true;
  }
  if (m->writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE)) {
    conn->want |= FUSE_CAP_WRITEBACK_CACHE;
  } else {
    m->writeback = false;
  }
}

const char* kUsage =
    "usage: nasgw-fuse [--socket PATH] --volume NAME [-o OPT[,OPT...]] [--allow-other] [--writeback-cache]\n"
    "                  [--log FILE] [-f] MOUNTPOINT\n"
    "  --socket PATH  nasgwd's head socket (default /run/nasgw/head.sock)\n"
    "  -o OPTIONS     mount options, comma separated, as mount(8) takes them: ro, rw,\n"
    "                 allow_other, allow_root, auto_unmount, noatime, nodev, nosuid, noexec,\n"
    "                 sync, dirsync and FUSE's own (max_read=N...); an option FUSE does\n"
    "                 not know is refused. -o may be given more than once\n"
    "  --log FILE     in the background, log there (appended); without it, to syslog\n"
    "  -f             stay in the foreground, logging to stderr\n"
    "  --allow-other  the same as -o allow_other: other users may use the mount too (nasgwd\n"
    "                 checks each caller's credentials); a mount by another user than root\n"
    "                 needs user_allow_other in /etc/fuse.conf. Without it the kernel refuses\n"
    "                 every user but the one who mounted\n"
    "  --writeback-cache  writes gather in the kernel's page cache until write-back, fsync or\n"
    "                 close (small writes at page-cache speed); errors such as ENOSPC then\n"
    "                 come back at fsync or close, not at write(2), as on NFS. Root only.\n"
    "                 Without it every write(2) goes to nasgwd as it is made\n"
    "  -h, --help     this help\n";

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr, "nasgw-fuse: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

int Main(int argc, char** argv) {
  std::string socket = "/run/nasgw/head.sock", volume, mountpoint, log_path;
  bool foreground = false, allow_other = false, writeback = false;
  std::string options;  // -o, joined: FUSE's and the kernel's to parse
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--socket") {
      socket = next();
    } else if (a == "--volume") {
      volume = next();
    } else if (a == "--log") {
      log_path = next();
    } else if (a == "-f") {
      foreground = true;
    } else if (a == "--allow-other") {
      allow_other = true;
    } else if (a == "--writeback-cache") {
      writeback = true;
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-o" || (a.size() > 2 && a.compare(0, 2, "-o") == 0)) {
      const std::string o = a == "-o" ? next() : a.substr(2);
      if (o.empty() || o.front() == ',' || o.back() == ',' || o.find(",,") != std::string::npos) {
        Usage("-o takes options separated by single commas, not '" + o + "'");
      }
      options += "," + o;
    } else if (!a.empty() && a[0] != '-' && mountpoint.empty()) {
      mountpoint = a;
    } else {
      Usage("unknown argument " + a);
    }
  }
  if (volume.empty() || mountpoint.empty()) Usage("--volume and a mount point are required");
  if (writeback && ::geteuid() != 0) {
    Usage("--writeback-cache needs nasgw-fuse to run as root (the kernel writes back as root)");
  }
  // In the background nasgw-fuse connects again after fuse_daemonize(),
  // which changes to "/": relative paths must be made absolute now.
  for (std::string* path : {&socket, &log_path}) {
    if (path->empty() || (*path)[0] == '/') continue;
    char* cwd = ::getcwd(nullptr, 0);
    if (cwd == nullptr) {
      std::fprintf(stderr, "nasgw-fuse: cannot make %s absolute: %s\n", path->c_str(), std::strerror(errno));
      return 2;
    }
    *path = std::string(cwd) + (cwd[1] != '\0' ? "/" : "") + *path;
    std::free(cwd);
  }
  // fuse_daemonize() points stderr at /dev/null: what nasgw-fuse says after
  // it goes to --log's file (opened now, so a bad path is told at once) or,
  // without one, to syslog.
  int log_fd = -1;
  if (!log_path.empty()) {
    log_fd = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (log_fd < 0) {
      std::fprintf(stderr, "nasgw-fuse: --log %s: %s\n", log_path.c_str(), std::strerror(errno));
      return 2;
    }
  }
  bool daemonized = false;
  auto say = [&](const std::string& what) {
    if (daemonized) {
      NASGW_LOG(kError, "fuse") << what;
    } else {
      std::fprintf(stderr, "nasgw-fuse: %s\n", what.c_str());
    }
  };

  Mount m;
  m.writeback = writeback;
  // Connect and find the volume now, so that errors reach the terminal; in
  // the background case connect again after fuse_daemonize(), because the
  // client library's threads do not survive its fork.
  auto connect = [&]() -> bool {
    nasgw_client_options co{};
    co.socket_path = socket.c_str();
    co.client_name = "fuse";
    co.connections = 4;
    // A write that meets another head's lease (an SMB client's) waits while
    // nasgwd recalls it: longer than nasgwd takes to revoke one (40 s).
    co.recall_wait_ms = 60000;
    if (int rc = nasgw_client_open(&co, &m.client); rc != 0) {
      say(std::string(nasgw_client_last_message()) + " (" + std::strerror(-rc) + ")");
      return false;
    }
    // Finding the volume needs no permission; ask as ourselves, which is
    // what nasgwd accepts from an unprivileged head.
    const nasgw_cred self{::getuid(), ::getgid(), 0, nullptr};
    nasgw_attr r{};
    if (nasgw_mount(m.client, &self, volume.c_str(), &r) != 0) {
      say("volume " + volume + ": " + nasgw_client_last_message());
      nasgw_client_close(m.client);
      m.client = nullptr;
      return false;
    }
    m.vol = r.handle.volume;
    m.root = r.handle;
    return true;
  };
  if (!connect()) return 1;
  if (!foreground) {
    nasgw_client_close(m.client);
    m.client = nullptr;
  }

  fuse_lowlevel_ops ops{};
  ops.init = Init;
  ops.lookup = Lookup;
  ops.forget = ForgetOne;
  ops.forget_multi = ForgetMany;
  ops.getattr = GetAttr;
  ops.setattr = SetAttr;
  ops.readlink = ReadLink;
  ops.mknod = MakeNode;
  ops.mkdir = MakeDir;
  ops.symlink = Symlink;
  ops.unlink = Unlink;
  ops.rmdir = Rmdir;
  ops.rename = Rename;
  ops.link = Link;
  ops.open = Open;
  ops.create = Create;
  ops.read = Read;
  ops.write = Write;
  ops.flush = Flush;
  ops.release = Release;
  ops.fsync = Fsync;
  ops.fallocate = Fallocate;
  ops.lseek = Lseek;
  ops.opendir = OpenDir;
  ops.readdir = ReadDir;
  ops.releasedir = Release;
  ops.statfs = StatFs;
  ops.setxattr = SetXattr;
  ops.getxattr = GetXattr;
  ops.listxattr = ListXattr;
  ops.removexattr = RemoveXattr;

  // default_permissions: the kernel checks the mode bits and ACLs nasgwd
  // reports (nasgwd checks them again with the caller's credentials).
  std::vector<std::string> fargs_s = {"nasgw-fuse", "-o",
                                      std::string("default_permissions,") + (allow_other ? "allow_other," : "") +
                                          "fsname=nasgw:" + volume + ",subtype=nasgw" + options};
  std::vector<char*> fargv;
  fargv.reserve(fargs_s.size());
  for (auto& s : fargs_s) fargv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(fargv.size()), fargv.data());
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &m);
  fuse_opt_free_args(&args);
  if (se == nullptr || fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, mountpoint.c_str()) != 0) {
    if (se != nullptr) fuse_session_destroy(se);
    nasgw_client_close(m.client);
    std::fprintf(stderr, "nasgw-fuse: cannot mount on %s\n", mountpoint.c_str());
    return 1;
  }
  NASGW_LOG(kInfo, "fuse") << "mounted" << Kv("volume", volume) << Kv("at", mountpoint);
  if (!foreground) {
    fuse_daemonize(0);
    daemonized = true;
    if (log_fd >= 0) {
      ::dup2(log_fd, STDERR_FILENO);
    } else {
      ::openlog("nasgw-fuse", LOG_PID, LOG_DAEMON);
      SetLogSink([](std::string_view line) {
        if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
        ::syslog(LOG_NOTICE, "%.*s", static_cast<int>(line.size()), line.data());
      });
    }
    NASGW_LOG(kInfo, "fuse") << "in the background" << Kv("pid", ::getpid());
    if (!connect()) {
      fuse_session_unmount(se);
      fuse_remove_signal_handlers(se);
      fuse_session_destroy(se);
      return 1;
    }
  }
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 0);
  fuse_loop_cfg_set_max_threads(cfg, 8);
  int rc = fuse_session_loop_mt(se, cfg);
  fuse_loop_cfg_destroy(cfg);
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  nasgw_client_close(m.client);
  NASGW_LOG(kInfo, "fuse") << "unmounted" << Kv("volume", volume);
  return rc == 0 ? 0 : 1;
}

}  // namespace
}  // namespace nasgw::fuse

int main(int argc, char** argv) {
  return nasgw::fuse::Main(argc, argv);
}
