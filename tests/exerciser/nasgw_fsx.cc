// nasgw-fsx: a model-checking file-system exerciser (in the spirit of fsx and
// RocksDB's db_map_fuzzer). Seeded random namespace and data operations are
// applied both to a file system and to a simple in-memory model; every
// result, error and byte read is compared after each step, the whole tree is
// compared every few hundred steps, and again after the file system is
// remounted every --remount-every ops.
//
// The file system is either a directory (a mounted volume; remounted by
// running --remount-cmd):
//
//   nasgw-fsx --dir DIR --seed N --ops N [--remount-every N --remount-cmd CMD] [--max-file BYTES]
//
// or, with --mem, an fs::Domain in this process on memory LUNs (remounted by
// reopening the domain, and checked with its fsck at every remount and at
// the end). There --read-faults PCT makes PCT% of the steps run with device
// reads failing (each read of the step's thread with probability 1/4, data
// and metadata alike, so Gets and scans of the metadata store fail too;
// RocksDB's own threads are left alone). Such a step may fail with EIO and
// must then have changed nothing; anything it reports as done must be right:
// a read returns the model's bytes, never zeros, and a directory that holds
// entries is never removed. The store runs without a block cache and with a
// small memtable so that reads reach the LUNs.
//
//   nasgw-fsx --mem --seed N --ops N [--remount-every N] [--read-faults PCT] [--max-file BYTES] [--snapshots]
//
// With --snapshots (--mem only) the steps also take, read, delete and roll
// back to snapshots of the volume, and clone them: every snapshot's tree
// (read through `.snapshot/NAME/...`) and every clone's must equal the model
// copied when the snapshot was taken, at once and at every tree check; a
// rollback makes the live tree the newest snapshot's model again.
//
// Prints the failing step and its seed on the first mismatch and exits 1.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "block/mem_device.h"
#include "fs/domain.h"

#include <sys/stat.h>
#include <sys/xattr.h>

namespace {

using nasgw::Code;
using nasgw::Status;
namespace fs = nasgw::fs;

// ---- the file system under test --------------------------------------------------
// Paths are relative to the volume's root ("" is the root). Every call returns
// 0 or an errno.
class Target {
 public:
  virtual ~Target() = default;
  virtual int Open(const std::string& p, int flags, mode_t mode, int* fd) = 0;
  virtual int Close(int fd) = 0;
  virtual int Pwrite(int fd, const void* buf, size_t n, uint64_t off, size_t* done) = 0;
  virtual int Pread(int fd, void* buf, size_t n, uint64_t off, size_t* done) = 0;
  virtual int Fsync(int fd) = 0;
  virtual int Mkdir(const std::string& p, mode_t mode) = 0;
  virtual int Truncate(const std::string& p, uint64_t size) = 0;
  virtual int Stat(const std::string& p, struct stat* st) = 0;  // follows a final symlink
  virtual int Lstat(const std::string& p, struct stat* st) = 0;
  virtual int Rename(const std::string& from, const std::string& to) = 0;
  virtual int Link(const std::string& from, const std::string& to) = 0;
  virtual int Unlink(const std::string& p) = 0;
  virtual int Rmdir(const std::string& p) = 0;
  virtual int Symlink(const std::string& target, const std::string& p) = 0;
  virtual int Readlink(const std::string& p, std::string* out) = 0;
  virtual int Chmod(const std::string& p, mode_t mode) = 0;
  virtual int SetXattr(const std::string& p, const std::string& name, const std::string& value) = 0;
  virtual int GetXattr(const std::string& p, const std::string& name, std::string* out) = 0;
  virtual int RemoveXattr(const std::string& p, const std::string& name) = 0;
  virtual int List(const std::string& p, std::vector<std::string>* names) = 0;  // without . and ..
  // True if a device read failed (was made to fail) during the last call.
  virtual bool faulted() const { return false; }
  // Remounts; false (with why in *err) if that failed.
  virtual bool Remount(std::string* err) = 0;
  // Snapshots of the volume: `op` is "create", "delete", "rollback" (to
  // snapshot `name`), "clone" (a volume from it) or "unclone" (that volume
  // deleted); 0 or an errno, ENOTSUP where the target takes none. A
  // snapshot's tree is read at ".snapshot/NAME/<path>", a clone's at
  // ".clone/NAME/<path>", with the calls above.
  virtual int SnapshotOp(const std::string& /*op*/, const std::string& /*name*/) { return ENOTSUP; }
  // Problems an fsck finds (empty: clean, or not available).
  virtual std::vector<std::string> Check() { return {}; }
};

// A mounted directory, through system calls.
class PosixTarget : public Target {
 public:
  PosixTarget(std::string root, std::string remount_cmd)
      : root_(std::move(root)), remount_cmd_(std::move(remount_cmd)) {}
  int Open(const std::string& p, int flags, mode_t mode, int* fd) override {
    *fd = open(Full(p).c_str(), flags, mode);
    return Err(*fd);
  }
  int Close(int fd) override { return Err(close(fd)); }
  int Pwrite(int fd, const void* buf, size_t n, uint64_t off, size_t* done) override {
    ssize_t w = pwrite(fd, buf, n, static_cast<off_t>(off));
    *done = w > 0 ? static_cast<size_t>(w) : 0;
    return w < 0 ? errno : 0;
  }
  int Pread(int fd, void* buf, size_t n, uint64_t off, size_t* done) override {
    ssize_t r = pread(fd, buf, n, static_cast<off_t>(off));
    *done = r > 0 ? static_cast<size_t>(r) : 0;
    return r < 0 ? errno : 0;
  }
  int Fsync(int fd) override { return Err(fsync(fd)); }
  int Mkdir(const std::string& p, mode_t mode) override { return Err(mkdir(Full(p).c_str(), mode)); }
  int Truncate(const std::string& p, uint64_t size) override {
    return Err(truncate(Full(p).c_str(), static_cast<off_t>(size)));
  }
  int Stat(const std::string& p, struct stat* st) override { return Err(stat(Full(p).c_str(), st)); }
  int Lstat(const std::string& p, struct stat* st) override { return Err(lstat(Full(p).c_str(), st)); }
  int Rename(const std::string& from, const std::string& to) override {
    return Err(rename(Full(from).c_str(), Full(to).c_str()));
  }
  int Link(const std::string& from, const std::string& to) override {
    return Err(link(Full(from).c_str(), Full(to).c_str()));
  }
  int Unlink(const std::string& p) override { return Err(unlink(Full(p).c_str())); }
  int Rmdir(const std::string& p) override { return Err(rmdir(Full(p).c_str())); }
  int Symlink(const std::string& target, const std::string& p) override {
    return Err(symlink(target.c_str(), Full(p).c_str()));
  }
  int Readlink(const std::string& p, std::string* out) override {
    char buf[4096];
    ssize_t len = readlink(Full(p).c_str(), buf, sizeof(buf));
    if (len < 0) return errno;
    out->assign(buf, static_cast<size_t>(len));
    return 0;
  }
  int Chmod(const std::string& p, mode_t mode) override { return Err(chmod(Full(p).c_str(), mode)); }
  int SetXattr(const std::string& p, const std::string& name, const std::string& value) override {
    return Err(setxattr(Full(p).c_str(), name.c_str(), value.data(), value.size(), 0));
  }
  int GetXattr(const std::string& p, const std::string& name, std::string* out) override {
    out->assign(70000, 0);
    ssize_t len = getxattr(Full(p).c_str(), name.c_str(), out->data(), out->size());
    if (len < 0) return errno;
    out->resize(static_cast<size_t>(len));
    return 0;
  }
  int RemoveXattr(const std::string& p, const std::string& name) override {
    return Err(removexattr(Full(p).c_str(), name.c_str()));
  }
  int List(const std::string& p, std::vector<std::string>* names) override {
    DIR* d = opendir(Full(p).c_str());
    if (d == nullptr) return errno;
    names->clear();
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names->push_back(name);
    }
    closedir(d);
    return 0;
  }
  bool Remount(std::string* err) override {
    if (std::system(remount_cmd_.c_str()) == 0) return true;
    *err = "remount command failed";
    return false;
  }

 private:
  std::string Full(const std::string& p) const { return p.empty() ? root_ : root_ + "/" + p; }
  static int Err(int rc) { return rc < 0 ? errno : 0; }

  std::string root_;
  std::string remount_cmd_;
};

// An fs::Domain on memory LUNs in this process, with injected read errors.
class DomainTarget : public Target {
 public:
  static constexpr uint64_t kMiB = 1 << 20;
  static constexpr uint64_t kAgBytes = 4 * kMiB;

  explicit DomainTarget(uint64_t seed) : fault_rng_(seed ^ 0x5eedfa17) {}

  // Formats two LUNs and creates volume "fsx"; false with why on failure.
  bool Start(std::string* err) {
    main_ = std::this_thread::get_id();
    std::vector<fs::Reserve::Device> devs;
    for (int i = 0; i < 2; i++) {
      auto lun = std::make_shared<nasgw::block::MemLun>(512, 128 * kMiB / 512, "naa.fsx" + std::to_string(i));
      auto dev = std::make_shared<nasgw::block::MemDevice>(lun);
      dev->SetFault([this, bs = dev->info().block_size](const nasgw::block::IoRequest& req) { return Fault(req, bs); });
      devs.push_back(dev);
    }
    fs::ReserveOptions o;
    o.name = "fsx";
    o.ag_bytes = kAgBytes;
    auto r = fs::Reserve::Format(devs, o);
    if (!r.ok()) return Failed(r.status(), err);
    reserve_ = std::move(r.value());
    auto d = fs::Domain::Create(reserve_, 0, Options());
    if (!d.ok()) return Failed(d.status(), err);
    dom_ = std::move(d.value());
    auto v = dom_->CreateVolume("fsx", 16 << 10);  // small records: most I/O spans several
    if (!v.ok()) return Failed(v.status(), err);
    vol_ = v->id;
    return true;
  }

  // Device reads of this thread fail (each with probability 1/4) while armed.
  void Arm(bool on) { armed_ = on; }
  bool faulted() const override { return call_hits_ > 0; }
  uint64_t reads_failed() const { return reads_failed_; }
  uint64_t meta_reads_failed() const { return meta_reads_failed_; }

  int Open(const std::string& p, int flags, mode_t mode, int* fd) override {
    Begin();
    *fd = -1;
    File f;
    f.vol = vol_;
    if (flags & O_CREAT) {
      // Created and not counted as open: the exerciser closes it at once and
      // never unlinks it meanwhile, and a create then a failing open would
      // leave a file the caller was told is not there.
      std::string name;
      auto dir = Parent(p, &name);
      if (!dir.ok()) return Errno(dir.status());
      auto a = dom_->Create(vol_, dir->ino, name, fs::FileType::kRegular, mode, 0, 0);
      if (!a.ok()) return Errno(a.status());
      f.ino = a->ino;
    } else {
      auto a = Resolve(p);
      if (!a.ok()) return Errno(a.status());
      if (a->type == fs::FileType::kDirectory && (flags & O_ACCMODE) != O_RDONLY) return EISDIR;
      f.vol = rvol_;
      f.ino = a->ino;
      f.snap = a->snap;
      if (a->snap == 0) {  // a snapshot's files are read-only and kept: nothing to count
        Status s = dom_->OpenFile(rvol_, a->ino);
        if (!s.ok()) return Errno(s);
        f.counted = true;
      }
    }
    *fd = next_fd_++;
    files_[*fd] = f;
    return 0;
  }
  int Close(int fd) override {
    Begin();
    auto it = files_.find(fd);
    if (it == files_.end()) return EBADF;
    File f = it->second;
    files_.erase(it);
    return f.counted ? Errno(dom_->ReleaseFile(f.vol, f.ino)) : 0;
  }
  int Pwrite(int fd, const void* buf, size_t n, uint64_t off, size_t* done) override {
    Begin();
    *done = 0;
    auto it = files_.find(fd);
    if (it == files_.end()) return EBADF;
    auto a = dom_->Write(it->second.vol, it->second.ino, off, buf, n);
    if (!a.ok()) return Errno(a.status());
    *done = n;
    return 0;
  }
  int Pread(int fd, void* buf, size_t n, uint64_t off, size_t* done) override {
    Begin();
    *done = 0;
    auto it = files_.find(fd);
    if (it == files_.end()) return EBADF;
    auto r = dom_->Read(it->second.vol, it->second.ino, off, n, buf, it->second.snap);
    if (!r.ok()) return Errno(r.status());
    *done = *r;
    return 0;
  }
  int Fsync(int fd) override {
    Begin();
    auto it = files_.find(fd);
    if (it == files_.end()) return EBADF;
    return Errno(dom_->Fsync(it->second.vol, it->second.ino));
  }
  int Mkdir(const std::string& p, mode_t mode) override { return Make(p, fs::FileType::kDirectory, mode, {}); }
  int Truncate(const std::string& p, uint64_t size) override {
    fs::SetAttr s;
    s.set_size = true;
    s.size = size;
    return Change(p, s);
  }
  int Chmod(const std::string& p, mode_t mode) override {
    fs::SetAttr s;
    s.set_mode = true;
    s.mode = mode;
    return Change(p, s);
  }
  int Stat(const std::string& p, struct stat* st) override {
    Begin();
    auto a = Resolve(p);
    if (a.ok() && a->type == fs::FileType::kSymlink) {
      // One level, relative to the link's directory (all the exerciser makes).
      auto target = dom_->ReadLink(rvol_, a->ino, a->snap);
      if (!target.ok()) return Errno(target.status());
      const auto slash = p.rfind('/');
      a = Resolve((slash == std::string::npos ? "" : p.substr(0, slash + 1)) + *target);
      if (a.ok() && a->type == fs::FileType::kSymlink) return ELOOP;
    }
    if (!a.ok()) return Errno(a.status());
    Fill(*a, st);
    return 0;
  }
  int Lstat(const std::string& p, struct stat* st) override {
    Begin();
    auto a = Resolve(p);
    if (!a.ok()) return Errno(a.status());
    Fill(*a, st);
    return 0;
  }
  int Rename(const std::string& from, const std::string& to) override {
    Begin();
    // What Linux's VFS answers before the file system is asked.
    if (from.rfind(to + "/", 0) == 0) return ENOTEMPTY;  // onto an ancestor
    std::string fname, tname;
    auto fdir = Parent(from, &fname);
    if (!fdir.ok()) return Errno(fdir.status());
    auto tdir = Parent(to, &tname);
    if (!tdir.ok()) return Errno(tdir.status());
    return Errno(dom_->Rename(vol_, fdir->ino, fname, tdir->ino, tname));
  }
  int Link(const std::string& from, const std::string& to) override {
    Begin();
    auto a = Resolve(from);
    if (!a.ok()) return Errno(a.status());
    std::string name;
    auto dir = Parent(to, &name);
    if (!dir.ok()) return Errno(dir.status());
    return Errno(dom_->Link(vol_, a->ino, dir->ino, name).status());
  }
  int Unlink(const std::string& p) override {
    Begin();
    std::string name;
    auto dir = Parent(p, &name);
    if (!dir.ok()) return Errno(dir.status());
    return Errno(dom_->Unlink(vol_, dir->ino, name));
  }
  int Rmdir(const std::string& p) override {
    Begin();
    std::string name;
    auto dir = Parent(p, &name);
    if (!dir.ok()) return Errno(dir.status());
    return Errno(dom_->Rmdir(vol_, dir->ino, name));
  }
  int Symlink(const std::string& target, const std::string& p) override {
    return Make(p, fs::FileType::kSymlink, 0777, target);
  }
  int Readlink(const std::string& p, std::string* out) override {
    Begin();
    auto a = Resolve(p);
    if (!a.ok()) return Errno(a.status());
    auto t = dom_->ReadLink(rvol_, a->ino, a->snap);
    if (!t.ok()) return Errno(t.status());
    *out = *t;
    return 0;
  }
  int SetXattr(const std::string& p, const std::string& name, const std::string& value) override {
    Begin();
    auto a = Resolve(p);
    if (!a.ok()) return Errno(a.status());
    return Errno(dom_->SetXattr(vol_, a->ino, name, value, 0));
  }
  int GetXattr(const std::string& p, const std::string& name, std::string* out) override {
    Begin();
    auto a = Resolve(p);
    if (!a.ok()) return Errno(a.status());
    auto v = dom_->GetXattr(rvol_, a->ino, name, a->snap);
    if (!v.ok()) return v.status().code() == Code::kNotFound ? ENODATA : Errno(v.status());
    *out = *v;
    return 0;
  }
  int RemoveXattr(const std::string& p, const std::string& name) override {
    Begin();
    auto a = Resolve(p);
    if (!a.ok()) return Errno(a.status());
    Status s = dom_->RemoveXattr(vol_, a->ino, name);
    return s.code() == Code::kNotFound ? ENODATA : Errno(s);
  }
  int List(const std::string& p, std::vector<std::string>* names) override {
    Begin();
    auto a = Resolve(p);
    if (!a.ok()) return Errno(a.status());
    names->clear();
    for (uint64_t cookie = 0;;) {
      auto e = dom_->ReadDir(rvol_, a->ino, cookie, 64, a->snap);
      if (!e.ok()) return Errno(e.status());
      if (e->empty()) return 0;
      for (const auto& x : *e) names->push_back(x.name);
      cookie = e->back().cookie;
    }
  }
  bool Remount(std::string* err) override {
    if (!files_.empty()) {
      *err = "remount with files open";
      return false;
    }
    dom_.reset();
    auto d = fs::Domain::Open(reserve_, 0, Options());
    if (!d.ok()) return Failed(d.status(), err);
    dom_ = std::move(d.value());
    return true;
  }
  int SnapshotOp(const std::string& op, const std::string& name) override {
    Begin();
    if (op == "create") return Errno(dom_->CreateSnapshot("fsx", name).status());
    if (op == "delete") return Errno(dom_->DeleteSnapshot("fsx", name).status());
    if (op == "rollback") return Errno(dom_->RollbackSnapshot("fsx", name).status());
    if (op == "clone") return Errno(dom_->CloneSnapshot("fsx", name, "clone-" + name).status());
    if (op == "unclone") return Errno(dom_->DeleteVolume("clone-" + name, /*force=*/true));
    return EINVAL;
  }
  std::vector<std::string> Check() override {
    auto p = dom_->Check();
    if (!p.ok()) return {"fsck: " + p.status().ToString()};
    return *p;
  }

 private:
  struct File {
    uint32_t vol = 0;
    uint64_t ino = 0;
    uint32_t snap = 0;     // read at a snapshot
    bool counted = false;  // OpenFile'd: ReleaseFile at close
  };

  static fs::DomainOptions Options() {
    fs::DomainOptions o;
    o.meta_groups = 2;                       // group 0 of each LUN
    o.store.block_cache_bytes = 0;           // every table read reaches the LUNs
    o.store.write_buffer_bytes = 256 << 10;  // flushes happen during the run
    o.metafs.log_compact_bytes = 1 << 20;
    return o;
  }

  Status Fault(const nasgw::block::IoRequest& req, uint32_t block_size) {
    // Runs on the submitting thread (MemDevice::SetFault), so RocksDB's
    // flushes and compactions, which would poison the store, are spared.
    if (req.op != nasgw::block::Op::kRead || !armed_ || std::this_thread::get_id() != main_) return Status();
    if (fault_rng_() % 4 != 0) return Status();
    call_hits_++;
    reads_failed_++;
    // Group 0 of each LUN holds the metadata store (Options: meta_groups).
    if (req.lba * block_size < fs::Reserve::AgOffset(kAgBytes, 1)) meta_reads_failed_++;
    return Status::IoError("nasgw-fsx: injected read error");
  }

  void Begin() { call_hits_ = 0; }
  static int Errno(const Status& s) { return s.ToErrno(); }
  static bool Failed(const Status& s, std::string* err) {
    *err = s.ToString();
    return false;
  }

  // The path's attributes; rvol_ becomes the volume it is in. Paths under
  // ".snapshot/NAME/" are read at that snapshot, under ".clone/NAME/" in
  // that clone.
  nasgw::Result<fs::Attr> Resolve(const std::string& p) {
    rvol_ = vol_;
    uint32_t snap = 0;
    size_t at = 0;
    for (const char* view : {".snapshot/", ".clone/"}) {
      const std::string v = view;
      if (p.rfind(v, 0) != 0) continue;
      size_t end = p.find('/', v.size());
      if (end == std::string::npos) end = p.size();
      const std::string name = p.substr(v.size(), end - v.size());
      if (v == ".snapshot/") {
        auto s = dom_->SnapshotOf(vol_, name);
        if (!s.ok()) return s.status();
        snap = s->id;
      } else {
        auto c = dom_->FindVolume("clone-" + name);
        if (!c.ok()) return c.status();
        rvol_ = c->id;
      }
      at = end + 1;
    }
    auto a = dom_->GetAttr(rvol_, fs::kRootIno, snap);
    while (a.ok() && at < p.size()) {
      size_t end = p.find('/', at);
      if (end == std::string::npos) end = p.size();
      a = dom_->Lookup(rvol_, a->ino, p.substr(at, end - at), snap);
      at = end + 1;
    }
    return a;
  }
  nasgw::Result<fs::Attr> Parent(const std::string& p, std::string* name) {
    const auto slash = p.rfind('/');
    *name = slash == std::string::npos ? p : p.substr(slash + 1);
    return Resolve(slash == std::string::npos ? "" : p.substr(0, slash));
  }
  int Make(const std::string& p, fs::FileType type, mode_t mode, const std::string& symlink) {
    Begin();
    std::string name;
    auto dir = Parent(p, &name);
    if (!dir.ok()) return Errno(dir.status());
    return Errno(dom_->Create(vol_, dir->ino, name, type, mode, 0, 0, 0, symlink).status());
  }
  int Change(const std::string& p, const fs::SetAttr& s) {
    Begin();
    auto a = Resolve(p);
    if (!a.ok()) return Errno(a.status());
    return Errno(dom_->SetAttrs(vol_, a->ino, s).status());
  }
  static void Fill(const fs::Attr& a, struct stat* st) {
    *st = {};
    st->st_ino = a.ino;
    st->st_nlink = a.nlink;
    st->st_size = static_cast<off_t>(a.size);
    mode_t type = 0;
    switch (a.type) {
      case fs::FileType::kRegular:
        type = S_IFREG;
        break;
      case fs::FileType::kDirectory:
        type = S_IFDIR;
        break;
      case fs::FileType::kSymlink:
        type = S_IFLNK;
        break;
      case fs::FileType::kFifo:
        type = S_IFIFO;
        break;
      case fs::FileType::kSocket:
        type = S_IFSOCK;
        break;
      case fs::FileType::kCharDevice:
        type = S_IFCHR;
        break;
      case fs::FileType::kBlockDevice:
        type = S_IFBLK;
        break;
      case fs::FileType::kNone:
        break;
    }
    st->st_mode = type | (a.mode & 07777);
  }

  std::shared_ptr<fs::Reserve> reserve_;
  std::unique_ptr<fs::Domain> dom_;
  uint32_t vol_ = 0;
  uint32_t rvol_ = 0;  // the volume of the path Resolve resolved last
  std::map<int, File> files_;
  int next_fd_ = 3;
  std::thread::id main_;
  std::atomic<bool> armed_{false};
  std::mt19937_64 fault_rng_;       // used on main_ only
  int call_hits_ = 0;               // main_ only
  uint64_t reads_failed_ = 0;       // main_ only
  uint64_t meta_reads_failed_ = 0;  // main_ only
};

struct Node {
  enum Kind { kFile, kDir, kLink } kind = kFile;
  std::string data;  // file content, or symlink target
  mode_t mode = 0644;
  std::map<std::string, std::string> xattrs;
};
using NodeRef = std::shared_ptr<Node>;

struct Fail {
  std::string what;
};

class Fsx {
 public:
  Fsx(Target* fs, uint64_t seed, size_t max_file, bool snapshots)
      : fs_(fs), rng_(seed), max_file_(max_file), snapshots_(snapshots) {
    paths_[""] = std::make_shared<Node>();
    paths_[""]->kind = Node::kDir;
  }

  void Step(uint64_t n) {
    step_ = n;
    switch (rng_() % 20) {
      case 0:
      case 1:
        Create();
        break;
      case 2:
        Mkdir();
        break;
      case 3:
      case 4:
      case 5:
        Write();
        break;
      case 6:
        Truncate();
        break;
      case 7:
      case 8:
        Read();
        break;
      case 9:
        Rename();
        break;
      case 10:
        Link();
        break;
      case 11:
        Unlink();
        break;
      case 12:
        Rmdir();
        break;
      case 13:
        Symlink();
        break;
      case 14:
        Chmod();
        break;
      case 15:
        Xattr();
        break;
      case 16:
        Stat();
        break;
      case 17:
        OpenUnlinked();
        break;
      case 18:
        if (snapshots_) {
          Snapshot();
          break;
        }
        [[fallthrough]];
      default:
        Write();
        break;
    }
  }

  void CheckTree() {
    // Every model path exists with its type and content; nothing else does.
    CheckTreeAt("", paths_);
    // And every snapshot and clone as it was taken.
    for (const auto& [name, m] : snaps_) {
      CheckTreeAt(".snapshot/" + name, m);
      if (clones_.contains(name)) CheckTreeAt(".clone/" + name, m);
    }
  }

  void CheckTreeAt(const std::string& at, const std::map<std::string, NodeRef>& model) {
    std::set<std::string> seen;
    if (!Walk(at, model, "", &seen)) return;
    for (const auto& [p, n] : model) {
      if (!seen.contains(p)) throw Fail{"'" + Join(at, p) + "' missing from the file system"};
    }
  }

  uint64_t snapshots_taken = 0, rollbacks = 0, clones = 0;

  uint64_t ops_ok = 0, ops_err = 0;
  uint64_t ops_faulted = 0;        // failed with EIO over an injected read error
  uint64_t ops_through_fault = 0;  // succeeded, and were right, although a read failed

 private:
  std::vector<std::string> Of(Node::Kind k) const {
    std::vector<std::string> v;
    for (const auto& [p, n] : paths_) {
      if (n->kind == k) v.push_back(p);
    }
    return v;
  }
  std::string Pick(const std::vector<std::string>& v) { return v[rng_() % v.size()]; }
  std::string NewName(const std::string& dir) {
    std::string n = "n" + std::to_string(rng_() % 40);
    return dir.empty() ? n : dir + "/" + n;
  }
  static std::string Parent(const std::string& p) {
    auto s = p.rfind('/');
    return s == std::string::npos ? "" : p.substr(0, s);
  }

  // Compares the outcome of the call just made with the model's
  // expectation. True: it did what the model says (apply its effect to the
  // model). False: it failed with EIO because a device read failed during
  // it, which is allowed only then, and it must have changed nothing (the
  // model stays; later steps and tree checks hold it to that).
  bool Expect(const char* op, const std::string& path, int got_errno, int want_errno) {
    const bool faulted = fs_->faulted();
    if (got_errno == want_errno) {
      (want_errno ? ops_err : ops_ok)++;
      if (faulted) ops_through_fault++;
      return true;
    }
    if (faulted && got_errno == EIO) {
      ops_faulted++;
      return false;
    }
    throw Fail{std::string(op) + " '" + path + "': errno " + std::to_string(got_errno) + " (" +
               std::strerror(got_errno) + "), model expects " + std::to_string(want_errno) + " (" +
               std::strerror(want_errno) + ")" + (faulted ? " (a device read failed during it)" : "")};
  }

  bool Exists(const std::string& p) const { return paths_.contains(p); }

  void Create() {
    std::string p = NewName(Pick(Of(Node::kDir)));
    int fd = -1;
    int e = fs_->Open(p, O_CREAT | O_EXCL | O_WRONLY, 0644, &fd);
    const bool as_modelled = Expect("create", p, e, Exists(p) ? EEXIST : 0);
    if (e == 0) {
      fs_->Close(fd);
      if (as_modelled) paths_[p] = std::make_shared<Node>();
    }
  }

  void Mkdir() {
    std::string p = NewName(Pick(Of(Node::kDir)));
    if (std::count(p.begin(), p.end(), '/') > 5) return;
    int rc = fs_->Mkdir(p, 0755);
    if (Expect("mkdir", p, rc, Exists(p) ? EEXIST : 0) && rc == 0) {
      auto n = std::make_shared<Node>();
      n->kind = Node::kDir;
      n->mode = 0755;
      paths_[p] = n;
    }
  }

  void Write() {
    auto files = Of(Node::kFile);
    if (files.empty()) return Create();
    std::string p = Pick(files);
    NodeRef n = paths_[p];
    size_t off = rng_() % max_file_;
    size_t len = 1 + rng_() % std::min<size_t>(max_file_ - off, rng_() % 2 ? 4096 : 65536);
    std::string buf(len, 0);
    for (auto& c : buf) c = static_cast<char>(rng_());
    int fd = -1;
    if (!Expect("open", p, fs_->Open(p, O_WRONLY, 0, &fd), 0)) return;
    size_t w = 0;
    const bool written = Expect("write", p, fs_->Pwrite(fd, buf.data(), buf.size(), off, &w), 0);
    if (rng_() % 8 == 0) fs_->Fsync(fd);
    fs_->Close(fd);
    if (!written) return;
    if (w != len) throw Fail{"short write to '" + p + "'"};
    if (n->data.size() < off + len) n->data.resize(off + len, '\0');
    n->data.replace(off, len, buf);
    CheckContent(p, n);
  }

  void Truncate() {
    auto files = Of(Node::kFile);
    if (files.empty()) return;
    std::string p = Pick(files);
    size_t size = rng_() % max_file_;
    if (!Expect("truncate", p, fs_->Truncate(p, size), 0)) return;
    paths_[p]->data.resize(size, '\0');
    CheckContent(p, paths_[p]);
  }

  void Read() {
    auto files = Of(Node::kFile);
    if (files.empty()) return;
    std::string p = Pick(files);
    CheckContent(p, paths_[p]);
  }

  // A read that succeeds must return the model's bytes; one that fails may
  // do so only with EIO over an injected fault.
  void CheckContent(const std::string& p, const NodeRef& n) {
    struct stat st;
    if (!Expect("stat", p, fs_->Stat(p, &st), 0)) return;
    if (static_cast<size_t>(st.st_size) != n->data.size()) {
      throw Fail{"'" + p + "' size " + std::to_string(st.st_size) + ", model " + std::to_string(n->data.size())};
    }
    int fd = -1;
    if (!Expect("open", p, fs_->Open(p, O_RDONLY, 0, &fd), 0)) return;
    std::string got(n->data.size() + 10, 'Z');
    size_t at = 0;
    while (at < got.size()) {
      size_t r = 0;
      int e = fs_->Pread(fd, got.data() + at, got.size() - at, at, &r);
      if (!Expect("read", p, e, 0)) {
        fs_->Close(fd);
        return;
      }
      if (r == 0) break;
      at += r;
    }
    fs_->Close(fd);
    got.resize(at);
    if (got != n->data) {
      size_t i = 0;
      while (i < got.size() && i < n->data.size() && got[i] == n->data[i]) i++;
      throw Fail{"'" + p + "' content differs at byte " + std::to_string(i) + " (read " + std::to_string(got.size()) +
                 " bytes, model " + std::to_string(n->data.size()) + ")"};
    }
  }

  void Rename() {
    if (paths_.size() < 2) return;
    std::vector<std::string> all;
    for (const auto& [p, n] : paths_) {
      if (!p.empty()) all.push_back(p);
    }
    if (all.empty()) return;
    std::string from = Pick(all);
    std::string to = rng_() % 3 == 0 && all.size() > 1 ? Pick(all) : NewName(Pick(Of(Node::kDir)));
    NodeRef src = paths_[from];
    int want = 0;
    auto tgt = paths_.find(to);
    if (src->kind == Node::kDir && to != from && to.rfind(from + "/", 0) == 0) {
      want = EINVAL;  // into its own subtree
    } else if (from.rfind(to + "/", 0) == 0) {
      want = ENOTEMPTY;  // onto one of its ancestors (Linux checks this first)
    } else if (tgt != paths_.end() && to != from) {
      if (tgt->second == src) {
        want = 0;  // two names of one file: POSIX says nothing happens
      } else if (src->kind == Node::kDir && tgt->second->kind != Node::kDir) {
        want = ENOTDIR;
      } else if (src->kind != Node::kDir && tgt->second->kind == Node::kDir) {
        want = EISDIR;
      } else if (tgt->second->kind == Node::kDir && HasChildren(to)) {
        want = ENOTEMPTY;
      }
    }
    int rc = fs_->Rename(from, to);
    if (!Expect("rename", from + " -> " + to, rc, want)) return;
    if (rc != 0 || to == from) return;
    if (tgt != paths_.end() && tgt->second == src) return;
    // Move the subtree.
    std::map<std::string, NodeRef> moved;
    for (auto it = paths_.begin(); it != paths_.end();) {
      if (it->first == from || it->first.rfind(from + "/", 0) == 0) {
        moved[to + it->first.substr(from.size())] = it->second;
        it = paths_.erase(it);
      } else {
        ++it;
      }
    }
    paths_.erase(to);
    for (auto& [p, n] : moved) paths_[p] = n;
  }

  bool HasChildren(const std::string& dir) const {
    auto it = paths_.upper_bound(dir + "/");
    return it != paths_.end() && it->first.rfind(dir + "/", 0) == 0;
  }

  void Link() {
    auto files = Of(Node::kFile);
    if (files.empty()) return;
    std::string from = Pick(files);
    std::string to = NewName(Pick(Of(Node::kDir)));
    int rc = fs_->Link(from, to);
    if (Expect("link", from + " -> " + to, rc, Exists(to) ? EEXIST : 0) && rc == 0) {
      paths_[to] = paths_[from];
      Nlink(to);
    }
  }

  void Nlink(const std::string& p) {
    struct stat st;
    if (!Expect("stat", p, fs_->Lstat(p, &st), 0)) return;
    size_t links = 0;
    for (const auto& [q, n] : paths_) links += n == paths_[p];
    if (st.st_nlink != links) {
      throw Fail{"'" + p + "' nlink " + std::to_string(st.st_nlink) + ", model " + std::to_string(links)};
    }
  }

  void Unlink() {
    std::vector<std::string> v = Of(Node::kFile);
    auto links = Of(Node::kLink);
    v.insert(v.end(), links.begin(), links.end());
    if (v.empty()) return;
    std::string p = Pick(v);
    if (Expect("unlink", p, fs_->Unlink(p), 0)) paths_.erase(p);
  }

  void Rmdir() {
    auto dirs = Of(Node::kDir);
    dirs.erase(std::remove(dirs.begin(), dirs.end(), ""), dirs.end());
    if (dirs.empty()) return;
    std::string p = Pick(dirs);
    int rc = fs_->Rmdir(p);
    if (Expect("rmdir", p, rc, HasChildren(p) ? ENOTEMPTY : 0) && rc == 0) paths_.erase(p);
  }

  void Symlink() {
    std::string p = NewName(Pick(Of(Node::kDir)));
    std::string target = "target-" + std::to_string(rng_() % 1000);
    int rc = fs_->Symlink(target, p);
    if (Expect("symlink", p, rc, Exists(p) ? EEXIST : 0) && rc == 0) {
      auto n = std::make_shared<Node>();
      n->kind = Node::kLink;
      n->data = target;
      paths_[p] = n;
    }
  }

  void Chmod() {
    auto files = Of(Node::kFile);
    if (files.empty()) return;
    std::string p = Pick(files);
    mode_t m = 0600 | (rng_() % 0100);
    if (!Expect("chmod", p, fs_->Chmod(p, m), 0)) return;
    paths_[p]->mode = m;
    struct stat st;
    if (!Expect("stat", p, fs_->Stat(p, &st), 0)) return;
    if ((st.st_mode & 07777) != m) throw Fail{"'" + p + "' mode differs after chmod"};
  }

  void Xattr() {
    auto files = Of(Node::kFile);
    if (files.empty()) return;
    std::string p = Pick(files);
    NodeRef n = paths_[p];
    std::string name = "user.k" + std::to_string(rng_() % 4);
    if (rng_() % 3 == 0) {
      if (Expect("removexattr", p, fs_->RemoveXattr(p, name), n->xattrs.contains(name) ? 0 : ENODATA)) {
        n->xattrs.erase(name);
      }
    } else {
      std::string v(rng_() % 300, static_cast<char>('a' + rng_() % 26));
      if (Expect("setxattr", p, fs_->SetXattr(p, name, v), 0)) n->xattrs[name] = v;
    }
    for (const auto& [k, v] : n->xattrs) {
      std::string got;
      if (!Expect("getxattr", p, fs_->GetXattr(p, k, &got), 0)) continue;
      if (got != v) throw Fail{"'" + p + "' xattr " + k + " differs"};
    }
  }

  void Stat() {
    std::vector<std::string> all;
    for (const auto& [p, n] : paths_) all.push_back(p);
    std::string p = Pick(all);
    struct stat st;
    if (!Expect("lstat", p, fs_->Lstat(p, &st), 0)) return;
    const NodeRef& n = paths_[p];
    const bool type_ok = (n->kind == Node::kFile && S_ISREG(st.st_mode)) ||
                         (n->kind == Node::kDir && S_ISDIR(st.st_mode)) ||
                         (n->kind == Node::kLink && S_ISLNK(st.st_mode));
    if (!type_ok) throw Fail{"'" + p + "' has the wrong type"};
    if (n->kind == Node::kLink) {
      std::string target;
      if (Expect("readlink", p, fs_->Readlink(p, &target), 0) && target != n->data) {
        throw Fail{"'" + p + "' readlink differs"};
      }
    }
    if (n->kind == Node::kFile) Nlink(p);
  }

  // Unlink a file while it is open: its data stays reachable through the
  // descriptor until close.
  void OpenUnlinked() {
    auto files = Of(Node::kFile);
    if (files.empty()) return;
    std::string p = Pick(files);
    NodeRef n = paths_[p];
    int fd = -1;
    if (!Expect("open", p, fs_->Open(p, O_RDWR, 0, &fd), 0)) return;
    if (!Expect("unlink", p, fs_->Unlink(p), 0)) {
      fs_->Close(fd);
      return;
    }
    paths_.erase(p);
    std::string more = "after-unlink";
    size_t w = 0;
    if (!Expect("write-unlinked", p, fs_->Pwrite(fd, more.data(), more.size(), 0, &w), 0)) {
      fs_->Close(fd);
      return;
    }
    if (n->data.size() < more.size()) n->data.resize(more.size(), '\0');
    n->data.replace(0, more.size(), more);
    std::string got(n->data.size(), 0);
    size_t r = 0;
    const bool read = Expect("read-unlinked", p, fs_->Pread(fd, got.data(), got.size(), 0, &r), 0);
    fs_->Close(fd);
    if (read && (r != got.size() || got != n->data)) throw Fail{"'" + p + "' unreadable after unlink"};
    // Other names, if any, keep the data (checked by the tree walk).
  }

  static std::string Join(const std::string& a, const std::string& b) {
    return a.empty() ? b : (b.empty() ? a : a + "/" + b);
  }

  // The tree under `at` (the live root: "") against `model`; false if a
  // failed read cut it short.
  bool Walk(const std::string& at, const std::map<std::string, NodeRef>& model, const std::string& dir,
            std::set<std::string>* seen) {
    std::vector<std::string> names;
    // A read that failed during a step (reads failing) cuts the walk short.
    if (!Expect("list", Join(at, dir), fs_->List(Join(at, dir), &names), 0)) return false;
    seen->insert(dir);
    std::set<std::string> unique(names.begin(), names.end());
    if (unique.size() != names.size()) throw Fail{"directory '" + Join(at, dir) + "' lists a name twice"};
    for (const auto& name : names) {
      std::string p = dir.empty() ? name : dir + "/" + name;
      auto it = model.find(p);
      if (it == model.end()) throw Fail{"'" + Join(at, p) + "' exists but the model has no such path"};
      seen->insert(p);
      if (it->second->kind == Node::kDir) {
        if (!Walk(at, model, p, seen)) return false;
      } else if (it->second->kind == Node::kFile) {
        CheckContent(Join(at, p), it->second);
      } else {
        std::string target;
        if (Expect("readlink", Join(at, p), fs_->Readlink(Join(at, p), &target), 0) && target != it->second->data) {
          throw Fail{"'" + Join(at, p) + "' readlink differs"};
        }
      }
    }
    return true;
  }

  // The model as it stands, copied (names of one file share one copy).
  std::map<std::string, NodeRef> Copy(const std::map<std::string, NodeRef>& from) const {
    std::map<const Node*, NodeRef> made;
    std::map<std::string, NodeRef> out;
    for (const auto& [p, n] : from) {
      NodeRef& c = made[n.get()];
      if (!c) c = std::make_shared<Node>(*n);
      out[p] = c;
    }
    return out;
  }

  // Snapshots: take one, read one, delete one, roll back, clone.
  void Snapshot() {
    // A deletion a failed read cut short has made the snapshot gone to
    // readers; it is finished by deleting again (or is done: ENOENT).
    while (!unfinished_.empty()) {
      const std::string name = *unfinished_.begin();
      const int rc = fs_->SnapshotOp("delete", name);
      if (!Expect("snapshot delete again", name, rc, rc == ENOENT ? ENOENT : 0)) return;
      unfinished_.erase(name);
    }
    std::vector<std::string> names;
    for (const auto& [n, m] : snaps_) names.push_back(n);
    const uint64_t what = rng_() % 10;
    if (names.empty() || (what < 4 && names.size() < 8)) {
      const std::string name = "s" + std::to_string(step_);
      if (Expect("snapshot create", name, fs_->SnapshotOp("create", name), 0)) {
        snaps_[name] = Copy(paths_);
        order_.push_back(name);
        snapshots_taken++;
        CheckTreeAt(".snapshot/" + name, snaps_[name]);
      }
      return;
    }
    const std::string name = Pick(names);
    if (what < 6) {
      // A snapshot a clone needs stays.
      const bool deleted =
          Expect("snapshot delete", name, fs_->SnapshotOp("delete", name), clones_.contains(name) ? EPERM : 0);
      if (!deleted && !clones_.contains(name)) {
        // Failed part way: gone to readers already (deletion marks it
        // first), or not begun; either way deleting again finishes it.
        snaps_.erase(name);
        order_.erase(std::find(order_.begin(), order_.end(), name));
        unfinished_.insert(name);
      } else if (deleted && !clones_.contains(name)) {
        snaps_.erase(name);
        order_.erase(std::find(order_.begin(), order_.end(), name));
        std::vector<std::string> unused;
        if (fs_->List(".snapshot/" + name, &unused) != ENOENT) throw Fail{"deleted snapshot '" + name + "' is there"};
      }
    } else if (what < 8) {
      CheckTreeAt(".snapshot/" + name, snaps_[name]);
    } else if (what == 8) {
      // Only to the newest; an older one is refused and changes nothing.
      const std::string& to = rng_() % 2 ? order_.back() : name;
      const bool newest = to == order_.back();
      if (Expect("snapshot rollback", to, fs_->SnapshotOp("rollback", to), newest ? 0 : EPERM) && newest) {
        paths_ = Copy(snaps_[to]);
        rollbacks++;
        CheckTreeAt("", paths_);
      }
    } else if (!clones_.contains(name)) {
      if (Expect("snapshot clone", name, fs_->SnapshotOp("clone", name), 0)) {
        clones_.insert(name);
        clones++;
        CheckTreeAt(".clone/" + name, snaps_[name]);
      }
    } else if (Expect("clone delete", name, fs_->SnapshotOp("unclone", name), 0)) {
      clones_.erase(name);
    }
  }

  Target* fs_;
  std::mt19937_64 rng_;
  size_t max_file_;
  bool snapshots_;
  uint64_t step_ = 0;
  std::map<std::string, NodeRef> paths_;                         // "" is the root
  std::map<std::string, std::map<std::string, NodeRef>> snaps_;  // the model when each was taken
  std::vector<std::string> order_;                               // snapshot names, oldest first
  std::set<std::string> clones_;                                 // snapshots with a clone
  std::set<std::string> unfinished_;                             // deletions a failed read cut short
};

void Usage() {
  std::fprintf(stderr,
               "usage: nasgw-fsx --dir DIR --seed N --ops N [--remount-every N --remount-cmd CMD] [--max-file BYTES]\n"
               "       nasgw-fsx --mem --seed N --ops N [--remount-every N] [--read-faults PCT] [--max-file BYTES] "
               "[--snapshots]\n");
}

}  // namespace

// An exception other than Fail is a bug of the exerciser: it aborts, with a core.
int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape)
  std::string dir, remount_cmd;
  bool mem = false, snapshots = false;
  int read_faults = 0;
  uint64_t seed = 1, ops = 10000, remount_every = 0, check_every = 500;
  size_t max_file = 300 << 10;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--dir") {
      dir = next();
    } else if (a == "--mem") {
      mem = true;
    } else if (a == "--snapshots") {
      snapshots = true;
    } else if (a == "--read-faults") {
      read_faults = std::atoi(next().c_str());
    } else if (a == "--seed") {
      seed = std::strtoull(next().c_str(), nullptr, 10);
    } else if (a == "--ops") {
      ops = std::strtoull(next().c_str(), nullptr, 10);
    } else if (a == "--remount-every") {
      remount_every = std::strtoull(next().c_str(), nullptr, 10);
    } else if (a == "--remount-cmd") {
      remount_cmd = next();
    } else if (a == "--check-every") {
      check_every = std::strtoull(next().c_str(), nullptr, 10);
    } else if (a == "--max-file") {
      max_file = std::strtoull(next().c_str(), nullptr, 10);
    } else {
      Usage();
      return 2;
    }
  }
  if (mem == !dir.empty() || (!mem && remount_every && remount_cmd.empty()) || (!mem && (read_faults || snapshots)) ||
      read_faults < 0 || read_faults > 100 || max_file == 0) {
    std::fprintf(stderr,
                 "nasgw-fsx: give --dir or --mem; --remount-every on a directory needs --remount-cmd; "
                 "--read-faults (0-100) and --snapshots need --mem\n");
    Usage();
    return 2;
  }
  std::unique_ptr<Target> target;
  DomainTarget* domain = nullptr;
  if (mem) {
    auto d = std::make_unique<DomainTarget>(seed);
    std::string err;
    if (!d->Start(&err)) {
      std::fprintf(stderr, "nasgw-fsx: cannot make the in-memory domain: %s\n", err.c_str());
      return 1;
    }
    domain = d.get();
    target = std::move(d);
  } else {
    target = std::make_unique<PosixTarget>(dir, remount_cmd);
  }
  std::mt19937_64 fault_steps(seed * 31 + 7);  // apart from the model's generator
  Fsx fsx(target.get(), seed, max_file, snapshots);
  uint64_t remounts = 0, faulted_steps = 0;
  auto fsck = [&](const char* when) {
    auto problems = target->Check();
    if (!problems.empty()) throw Fail{std::string("fsck ") + when + ": " + problems.front()};
  };
  try {
    for (uint64_t n = 1; n <= ops; n++) {
      const bool faults = domain != nullptr && read_faults > 0 && static_cast<int>(fault_steps() % 100) < read_faults;
      if (faults) {
        faulted_steps++;
        domain->Arm(true);
      }
      try {
        fsx.Step(n);
      } catch (const Fail& f) {
        if (domain) domain->Arm(false);
        throw Fail{"step " + std::to_string(n) + (faults ? " (reads failing)" : "") + ": " + f.what};
      }
      if (domain) domain->Arm(false);
      if (check_every && n % check_every == 0) fsx.CheckTree();
      if (remount_every && n % remount_every == 0) {
        std::string err;
        if (!target->Remount(&err)) {
          std::fprintf(stderr, "nasgw-fsx: remount failed at step %llu: %s\n", static_cast<unsigned long long>(n),
                       err.c_str());
          return 1;
        }
        remounts++;
        fsx.CheckTree();
        fsck("after a remount");
      }
    }
    fsx.CheckTree();
    fsck("at the end");
  } catch (const Fail& f) {
    std::fprintf(stderr, "nasgw-fsx: seed %llu: MISMATCH: %s\n", static_cast<unsigned long long>(seed), f.what.c_str());
    return 1;
  }
  std::printf(
      "nasgw-fsx: seed %llu: %llu operations (%llu ok, %llu expected errors), %llu remounts: model and file system "
      "agree\n",
      static_cast<unsigned long long>(seed), static_cast<unsigned long long>(ops),
      static_cast<unsigned long long>(fsx.ops_ok), static_cast<unsigned long long>(fsx.ops_err),
      static_cast<unsigned long long>(remounts));
  if (snapshots) {
    std::printf("nasgw-fsx: %llu snapshots taken, %llu rollbacks, %llu clones, each read as its model\n",
                static_cast<unsigned long long>(fsx.snapshots_taken), static_cast<unsigned long long>(fsx.rollbacks),
                static_cast<unsigned long long>(fsx.clones));
    if (fsx.snapshots_taken == 0 || fsx.rollbacks == 0 || fsx.clones == 0) {
      std::fprintf(stderr, "nasgw-fsx: --snapshots took no snapshot, rollback or clone: run more --ops\n");
      return 1;
    }
  }
  if (domain && read_faults) {
    std::printf(
        "nasgw-fsx: %llu steps with reads failing, %llu reads failed (%llu of metadata): %llu calls failed "
        "with EIO and changed nothing, %llu succeeded correctly regardless\n",
        static_cast<unsigned long long>(faulted_steps), static_cast<unsigned long long>(domain->reads_failed()),
        static_cast<unsigned long long>(domain->meta_reads_failed()), static_cast<unsigned long long>(fsx.ops_faulted),
        static_cast<unsigned long long>(fsx.ops_through_fault));
    if (domain->meta_reads_failed() == 0 || domain->reads_failed() == domain->meta_reads_failed() ||
        fsx.ops_faulted == 0) {
      std::fprintf(stderr,
                   "nasgw-fsx: injected read errors missed the metadata or the data, or every operation: "
                   "the fault mode did not test what it is for\n");
      return 1;
    }
  }
  return 0;
}
