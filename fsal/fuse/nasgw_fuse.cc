// nasgw-fuse: mounts one NAS volume through FUSE (low-level API), so that
// standard tools exercise the file system. A translator only: every call
// maps onto fs::Domain; it holds no file-system state of its own beyond the
// kernel's open-file references. (The daemon issue moves it onto the client
// library; until then it opens the reserve itself.)
//
//   nasgw-fuse --lun URL [--lun URL ...] --volume NAME [--format NAME [--force]] [--create-volume]
//              [--ag-mib N] [--record-kib N] [--initiator IQN] [-f] MOUNTPOINT
#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "block/iscsi_device.h"
#include "fs/domain.h"

namespace nasgw::fuse {
namespace {

using fs::Attr;
using fs::Domain;
using fs::FileType;

struct Mount {
  std::unique_ptr<Domain> domain;
  uint32_t vol = 0;
  double timeout = 1.0;  // seconds the kernel may cache names and attributes
};

Mount* M(fuse_req_t req) { return static_cast<Mount*>(fuse_req_userdata(req)); }

int Errno(const Status& s) {
  if (s.code() == Code::kInvalidArgument && s.message().find("longer than 255") != std::string_view::npos) {
    return ENAMETOOLONG;
  }
  return s.ToErrno();
}

mode_t TypeBits(FileType t) {
  switch (t) {
    case FileType::kRegular: return S_IFREG;
    case FileType::kDirectory: return S_IFDIR;
    case FileType::kSymlink: return S_IFLNK;
    case FileType::kFifo: return S_IFIFO;
    case FileType::kSocket: return S_IFSOCK;
    case FileType::kCharDevice: return S_IFCHR;
    case FileType::kBlockDevice: return S_IFBLK;
    case FileType::kNone: break;
  }
  return 0;
}

FileType TypeOf(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return FileType::kRegular;
    case S_IFDIR: return FileType::kDirectory;
    case S_IFLNK: return FileType::kSymlink;
    case S_IFIFO: return FileType::kFifo;
    case S_IFSOCK: return FileType::kSocket;
    case S_IFCHR: return FileType::kCharDevice;
    case S_IFBLK: return FileType::kBlockDevice;
  }
  return FileType::kNone;
}

struct stat Stat(const Attr& a) {
  struct stat st {};
  st.st_ino = a.ino;
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

fuse_entry_param Entry(fuse_req_t req, const Attr& a) {
  fuse_entry_param e{};
  e.ino = a.ino;
  e.generation = a.gen;
  e.attr = Stat(a);
  e.attr_timeout = M(req)->timeout;
  e.entry_timeout = M(req)->timeout;
  return e;
}

void ReplyEntry(fuse_req_t req, const Result<Attr>& a) {
  if (!a.ok()) {
    fuse_reply_err(req, Errno(a.status()));
    return;
  }
  fuse_entry_param e = Entry(req, *a);
  fuse_reply_entry(req, &e);
}

void ReplyAttr(fuse_req_t req, const Result<Attr>& a) {
  if (!a.ok()) {
    fuse_reply_err(req, Errno(a.status()));
    return;
  }
  struct stat st = Stat(*a);
  fuse_reply_attr(req, &st, M(req)->timeout);
}

void ReplyStatus(fuse_req_t req, const Status& s) { fuse_reply_err(req, s.ok() ? 0 : Errno(s)); }

fs::Timespec Ts(const struct timespec& t) { return {t.tv_sec, static_cast<uint32_t>(t.tv_nsec)}; }

fs::Timespec NowTs() {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return Ts(t);
}

// ---- operations ----------------------------------------------------------------

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  ReplyEntry(req, M(req)->domain->Lookup(M(req)->vol, parent, name));
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  ReplyAttr(req, M(req)->domain->GetAttr(M(req)->vol, ino));
}

void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  fs::SetAttr s;
  if (to_set & FUSE_SET_ATTR_MODE) {
    s.set_mode = true;
    s.mode = attr->st_mode & 07777;
  }
  if (to_set & FUSE_SET_ATTR_UID) {
    s.set_uid = true;
    s.uid = attr->st_uid;
  }
  if (to_set & FUSE_SET_ATTR_GID) {
    s.set_gid = true;
    s.gid = attr->st_gid;
  }
  if (to_set & FUSE_SET_ATTR_SIZE) {
    s.set_size = true;
    s.size = static_cast<uint64_t>(attr->st_size);
  }
  if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW)) {
    s.set_atime = true;
    s.atime = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? NowTs() : Ts(attr->st_atim);
  }
  if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
    s.set_mtime = true;
    s.mtime = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? NowTs() : Ts(attr->st_mtim);
  }
  ReplyAttr(req, M(req)->domain->SetAttrs(M(req)->vol, ino, s));
}

void ReadLink(fuse_req_t req, fuse_ino_t ino) {
  auto t = M(req)->domain->ReadLink(M(req)->vol, ino);
  if (!t.ok()) {
    fuse_reply_err(req, Errno(t.status()));
    return;
  }
  fuse_reply_readlink(req, t->c_str());
}

void MakeNode(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  const fuse_ctx* c = fuse_req_ctx(req);
  FileType t = TypeOf(mode);
  if (t == FileType::kNone || t == FileType::kDirectory || t == FileType::kSymlink) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  ReplyEntry(req, M(req)->domain->Create(M(req)->vol, parent, name, t, mode & ~c->umask, c->uid, c->gid, rdev));
}

void MakeDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  const fuse_ctx* c = fuse_req_ctx(req);
  ReplyEntry(req, M(req)->domain->Create(M(req)->vol, parent, name, FileType::kDirectory, mode & ~c->umask, c->uid,
                                         c->gid));
}

void Symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  const fuse_ctx* c = fuse_req_ctx(req);
  ReplyEntry(req, M(req)->domain->Create(M(req)->vol, parent, name, FileType::kSymlink, 0777, c->uid, c->gid, 0, link));
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  ReplyStatus(req, M(req)->domain->Unlink(M(req)->vol, parent, name));
}

void Rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  ReplyStatus(req, M(req)->domain->Rmdir(M(req)->vol, parent, name));
}

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
            unsigned int flags) {
  if (flags & RENAME_EXCHANGE) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  if ((flags & RENAME_NOREPLACE) && M(req)->domain->Lookup(M(req)->vol, newparent, newname).ok()) {
    fuse_reply_err(req, EEXIST);
    return;
  }
  ReplyStatus(req, M(req)->domain->Rename(M(req)->vol, parent, name, newparent, newname));
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  ReplyEntry(req, M(req)->domain->Link(M(req)->vol, ino, newparent, newname));
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Status s = M(req)->domain->OpenFile(M(req)->vol, ino);
  if (!s.ok()) {
    fuse_reply_err(req, Errno(s));
    return;
  }
  fuse_reply_open(req, fi);
}

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  const fuse_ctx* c = fuse_req_ctx(req);
  auto a = M(req)->domain->Create(M(req)->vol, parent, name, FileType::kRegular, mode & ~c->umask, c->uid, c->gid);
  if (!a.ok()) {
    fuse_reply_err(req, Errno(a.status()));
    return;
  }
  Status s = M(req)->domain->OpenFile(M(req)->vol, a->ino);
  if (!s.ok()) {
    fuse_reply_err(req, Errno(s));
    return;
  }
  fuse_entry_param e = Entry(req, *a);
  fuse_reply_create(req, &e, fi);
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  std::vector<char> buf(size);
  auto n = M(req)->domain->Read(M(req)->vol, ino, static_cast<uint64_t>(off), size, buf.data());
  if (!n.ok()) {
    fuse_reply_err(req, Errno(n.status()));
    return;
  }
  fuse_reply_buf(req, buf.data(), *n);
}

void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off, fuse_file_info*) {
  auto a = M(req)->domain->Write(M(req)->vol, ino, static_cast<uint64_t>(off), buf, size);
  if (!a.ok()) {
    fuse_reply_err(req, Errno(a.status()));
    return;
  }
  fuse_reply_write(req, size);
}

void Flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  ReplyStatus(req, M(req)->domain->ReleaseFile(M(req)->vol, ino));
}

void Fsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  ReplyStatus(req, M(req)->domain->Fsync(M(req)->vol, ino));
}

void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto a = M(req)->domain->GetAttr(M(req)->vol, ino);
  if (!a.ok()) {
    fuse_reply_err(req, Errno(a.status()));
    return;
  }
  if (a->type != FileType::kDirectory) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  fuse_reply_open(req, fi);
}

// FUSE offsets: 1 after ".", 2 after "..", cookie + 2 after an entry.
void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  std::vector<char> buf(size);
  size_t used = 0;
  auto add = [&](const char* name, uint64_t child, FileType t, off_t next) {
    struct stat st {};
    st.st_ino = child;
    st.st_mode = TypeBits(t);
    size_t need = fuse_add_direntry(req, buf.data() + used, size - used, name, &st, next);
    if (need > size - used) return false;
    used += need;
    return true;
  };
  if (off < 1 && !add(".", ino, FileType::kDirectory, 1)) return (void)fuse_reply_buf(req, buf.data(), used);
  if (off < 2) {
    auto parent = M(req)->domain->Lookup(M(req)->vol, ino, "..");
    if (!add("..", parent.ok() ? parent->ino : ino, FileType::kDirectory, 2)) {
      return (void)fuse_reply_buf(req, buf.data(), used);
    }
  }
  uint64_t cookie = off > 2 ? static_cast<uint64_t>(off) - 2 : 0;
  for (;;) {
    auto page = M(req)->domain->ReadDir(M(req)->vol, ino, cookie, 64);
    if (!page.ok()) {
      if (used == 0) return (void)fuse_reply_err(req, Errno(page.status()));
      break;
    }
    if (page->empty()) break;
    for (const auto& e : *page) {
      if (!add(e.name.c_str(), e.ino, e.type, static_cast<off_t>(e.cookie + 2))) {
        return (void)fuse_reply_buf(req, buf.data(), used);
      }
      cookie = e.cookie;
    }
  }
  fuse_reply_buf(req, buf.data(), used);
}

void StatFs(fuse_req_t req, fuse_ino_t) {
  fs::StatFs s = M(req)->domain->Statfs();
  struct statvfs v {};
  v.f_bsize = 4096;
  v.f_frsize = 4096;
  v.f_blocks = s.total_bytes / 4096;
  v.f_bfree = s.free_bytes / 4096;
  v.f_bavail = s.free_bytes / 4096;
  v.f_files = s.files + (1ull << 32);
  v.f_ffree = 1ull << 32;
  v.f_favail = 1ull << 32;
  v.f_namemax = fs::kNameMax;
  fuse_reply_statfs(req, &v);
}

void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  Status s = M(req)->domain->SetXattr(M(req)->vol, ino, name, std::string(value, size), flags);
  if (s.code() == Code::kNotFound && (flags & XATTR_REPLACE)) return (void)fuse_reply_err(req, ENODATA);
  ReplyStatus(req, s);
}

void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  auto v = M(req)->domain->GetXattr(M(req)->vol, ino, name);
  if (!v.ok()) return (void)fuse_reply_err(req, v.status().code() == Code::kNotFound ? ENODATA : Errno(v.status()));
  if (size == 0) return (void)fuse_reply_xattr(req, v->size());
  if (size < v->size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, v->data(), v->size());
}

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  auto names = M(req)->domain->ListXattr(M(req)->vol, ino);
  if (!names.ok()) return (void)fuse_reply_err(req, Errno(names.status()));
  std::string all;
  for (const auto& n : *names) {
    all += n;
    all += '\0';
  }
  if (size == 0) return (void)fuse_reply_xattr(req, all.size());
  if (size < all.size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, all.data(), all.size());
}

void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  Status s = M(req)->domain->RemoveXattr(M(req)->vol, ino, name);
  if (s.code() == Code::kNotFound) return (void)fuse_reply_err(req, ENODATA);
  ReplyStatus(req, s);
}

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "nasgw-fuse: %s\n"
               "usage: nasgw-fuse --lun URL [--lun URL ...] --volume NAME [--format RESERVE-NAME [--force]]\n"
               "                  [--create-volume] [--ag-mib N] [--record-kib N] [--initiator IQN] [-f] MOUNTPOINT\n",
               why.c_str());
  std::exit(2);
}

int Main(int argc, char** argv) {
  std::vector<std::string> luns;
  std::string volume, format, initiator, mountpoint;
  bool create_volume = false, foreground = false, force = false;
  uint64_t ag_mib = 1024;
  uint32_t record_kib = fs::kRecordBytesDefault >> 10;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--lun") luns.push_back(next());
    else if (a == "--volume") volume = next();
    else if (a == "--format") format = next();
    else if (a == "--create-volume") create_volume = true;
    else if (a == "--force") force = true;
    else if (a == "--ag-mib") ag_mib = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--record-kib") record_kib = static_cast<uint32_t>(std::strtoul(next().c_str(), nullptr, 10));
    else if (a == "--initiator") initiator = next();
    else if (a == "-f") foreground = true;
    else if (!a.empty() && a[0] != '-' && mountpoint.empty()) mountpoint = a;
    else Usage("unknown argument " + a);
  }
  if (luns.empty() || volume.empty() || mountpoint.empty()) Usage("--lun, --volume and a mount point are required");

  auto opened = block::OpenLuns(luns, initiator);
  if (!opened.ok()) {
    std::fprintf(stderr, "nasgw-fuse: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  const std::vector<fs::Reserve::Device>& devs = *opened;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "nasgw-fuse: %s\n", s.ToString().c_str());
    return 1;
  };
  Mount m;
  std::shared_ptr<fs::Reserve> reserve;
  if (!format.empty()) {
    fs::ReserveOptions ro;
    ro.name = format;
    ro.ag_bytes = ag_mib << 20;
    ro.force = force;
    auto r = fs::Reserve::Format(devs, ro);
    if (!r.ok()) return fail(r.status());
    reserve = std::move(r.value());
    auto d = Domain::Create(reserve, 0);
    if (!d.ok()) return fail(d.status());
    m.domain = std::move(d.value());
  } else {
    auto r = fs::Reserve::Open(devs);
    if (!r.ok()) return fail(r.status());
    reserve = std::move(r.value());
    auto d = Domain::Open(reserve, 0);
    if (!d.ok()) return fail(d.status());
    m.domain = std::move(d.value());
  }
  auto v = m.domain->FindVolume(volume);
  if (!v.ok() && create_volume) v = m.domain->CreateVolume(volume, record_kib << 10);
  if (!v.ok()) return fail(v.status());
  m.vol = v->id;

  fuse_lowlevel_ops ops{};
  ops.lookup = Lookup;
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
  ops.opendir = OpenDir;
  ops.readdir = ReadDir;
  ops.statfs = StatFs;
  ops.setxattr = SetXattr;
  ops.getxattr = GetXattr;
  ops.listxattr = ListXattr;
  ops.removexattr = RemoveXattr;

  std::vector<std::string> fargs_s = {"nasgw-fuse", "-o", "default_permissions,fsname=nasgw:" + volume + ",subtype=nasgw"};
  std::vector<char*> fargv;
  for (auto& s : fargs_s) fargv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(fargv.size()), fargv.data());
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &m);
  fuse_opt_free_args(&args);
  if (se == nullptr) return fail(Status::IoError("fuse_session_new failed"));
  if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, mountpoint.c_str()) != 0) {
    fuse_session_destroy(se);
    return fail(Status::IoError("cannot mount on " + mountpoint));
  }
  NASGW_LOG(kInfo, "fuse") << "mounted" << Kv("volume", volume) << Kv("at", mountpoint);
  if (!foreground) fuse_daemonize(0);
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 0);
  fuse_loop_cfg_set_max_threads(cfg, 8);
  int rc = fuse_session_loop_mt(se, cfg);
  fuse_loop_cfg_destroy(cfg);
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  m.domain.reset();  // clean shutdown: RocksDB flushed and closed
  NASGW_LOG(kInfo, "fuse") << "unmounted" << Kv("volume", volume);
  return rc == 0 ? 0 : 1;
}

}  // namespace
}  // namespace nasgw::fuse

int main(int argc, char** argv) { return nasgw::fuse::Main(argc, argv); }
