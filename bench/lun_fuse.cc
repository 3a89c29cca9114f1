// nasgw-lun-fuse: one iSCSI LUN as a single regular file, through FUSE, so
// that a stock Linux stack (a loop device, XFS, Ganesha's FSAL_VFS) can sit
// on a LUN of the lab array on a kernel without an iSCSI initiator. The NFS
// benchmark's "same-SAN peer" (bench/nfs_bench.py, target san-vfs) is built
// on it: a Linux NAS head on the same SAN, as users would build one.
//
//   nasgw-lun-fuse --url iscsi://HOST/IQN/LUN [--initiator IQN]
//                  [--queue-depth N] [--name lun] MOUNTPOINT
//
// The mount holds one file, MOUNTPOINT/<name>, as large as the LUN. read and
// write become READ and WRITE on the LUN (block/iscsi_device.h, the
// project's block layer), fsync and flush (close) become SYNCHRONIZE CACHE.
// Nothing is cached here: the file is opened with direct_io, so the kernel
// sends every read and write to us, and the only RAM cache above the LUN is
// the page cache of whatever file system sits on it, as with a real iSCSI
// disk. Requests are asynchronous: a handler submits to the device and the
// device's completion replies to the kernel, so up to --queue-depth commands
// are on the wire (the kernel's async direct I/O, which a loop device with
// direct I/O uses, keeps several requests in flight).
//
// Aligned requests (offset and length whole blocks of the LUN, as a loop
// device sends) go straight through. Unaligned reads are rounded out to
// blocks; unaligned writes are read-modify-write, one at a time, and are not
// atomic against a concurrent aligned write to the same block (a tool that
// writes bytes into a disk image gets what it asked for; a block device
// above never sends them).
//
// Runs in the foreground; prints "ready <bytes> <block size>" on stdout once
// mounted. SIGTERM, SIGINT or an unmount end it: in-flight requests drain,
// the mount goes, and it prints one JSON line of its I/O counts on stderr.
// Run it in the network namespace from which the array is reached
// (`nsenter --net=...`, not `ip netns exec`, which would hide the mount in a
// mount namespace of its own).
#define FUSE_USE_VERSION 312

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "block/iscsi_device.h"

#include <sys/prctl.h>
#include <sys/stat.h>

#ifndef PR_SET_IO_FLUSHER
#define PR_SET_IO_FLUSHER 57
#endif

namespace nasgw::lunfuse {
namespace {

constexpr fuse_ino_t kFileIno = 2;
constexpr size_t kMaxIo = 1 << 20;  // largest FUSE read/write we ask the kernel for

struct Lun {
  std::unique_ptr<block::BlockDevice> dev;
  std::string name;
  uint64_t size = 0;
  uint32_t bs = 0;
  uint64_t chunk = 0;  // largest single device request, in bytes
  Mutex rmw_mu;        // unaligned writes, one at a time
  std::atomic<uint64_t> reads{0}, writes{0}, flushes{0}, read_bytes{0}, write_bytes{0}, errors{0};
};

Lun* L(fuse_req_t req) {
  return static_cast<Lun*>(fuse_req_userdata(req));
}

void FillStat(const Lun& l, fuse_ino_t ino, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  st->st_uid = 0;
  st->st_gid = 0;
  if (ino == FUSE_ROOT_ID) {
    st->st_mode = S_IFDIR | 0755;
    st->st_nlink = 2;
  } else {
    st->st_mode = S_IFREG | 0600;
    st->st_nlink = 1;
    st->st_size = static_cast<off_t>(l.size);
    st->st_blksize = static_cast<blksize_t>(l.bs);
    st->st_blocks = static_cast<blkcnt_t>(l.size / 512);
  }
}

// One FUSE request split over one or more device requests; the last
// completion replies.
struct Pending {
  fuse_req_t req;
  Lun* lun;
  std::unique_ptr<uint8_t[]> buf;  // the device-side bytes (whole blocks)
  size_t head = 0;                 // read: where the caller's bytes start in buf
  size_t len = 0;                  // the caller's byte count
  bool is_read = true;
  std::atomic<int> left{0};
  std::atomic<int> err{0};

  void Done(const Status& s) {
    if (!s.ok()) {
      int e = s.ToErrno();
      int expected = 0;
      err.compare_exchange_strong(expected, e != 0 ? e : EIO);
    }
    if (left.fetch_sub(1) != 1) return;
    Finish();
  }
  void Finish() {
    int e = err.load();
    if (e != 0) {
      lun->errors++;
      fuse_reply_err(req, e);
    } else if (is_read) {
      lun->reads++;
      lun->read_bytes += len;
      fuse_reply_buf(req, reinterpret_cast<const char*>(buf.get() + head), len);
    } else {
      lun->writes++;
      lun->write_bytes += len;
      fuse_reply_write(req, len);
    }
    delete this;
  }
};

// Submits `bytes` (whole blocks) at byte offset `off` in `chunk`-sized pieces.
// On a submission error the pieces already submitted still complete; the
// reply waits for them.
void SubmitChunks(Pending* p, uint64_t off, size_t bytes) {
  Lun& l = *p->lun;
  const int n = static_cast<int>((bytes + l.chunk - 1) / l.chunk);
  p->left.store(n + 1);  // +1: ours, dropped once everything is submitted
  for (int i = 0; i < n; i++) {
    const uint64_t at = static_cast<uint64_t>(i) * l.chunk;
    const size_t len = static_cast<size_t>(std::min<uint64_t>(l.chunk, bytes - at));
    block::IoVec v{p->buf.get() + at, len};
    const uint64_t lba = (off + at) / l.bs;
    auto done = [p](const Status& s) { p->Done(s); };
    Status s = p->is_read ? l.dev->Read(lba, {&v, 1}, done) : l.dev->Write(lba, {&v, 1}, false, done);
    if (!s.ok()) {
      // Not submitted: never calls back. Count this piece and the rest as done.
      for (int k = i; k < n; k++) p->Done(s);
      break;
    }
  }
  p->Done(Status());
}

void Init(void* userdata, fuse_conn_info* conn) {
  // No write-back cache in the kernel: every write comes here.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  if (conn->capable & FUSE_CAP_ASYNC_DIO) conn->want |= FUSE_CAP_ASYNC_DIO;
  conn->max_write = kMaxIo;
  conn->max_readahead = 0;
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Lun& l = *L(req);
  if (parent != FUSE_ROOT_ID || l.name != name) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_entry_param e{};
  e.ino = kFileIno;
  e.attr_timeout = 3600;
  e.entry_timeout = 3600;
  FillStat(l, kFileIno, &e.attr);
  fuse_reply_entry(req, &e);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  if (ino != FUSE_ROOT_ID && ino != kFileIno) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct stat st;
  FillStat(*L(req), ino, &st);
  fuse_reply_attr(req, &st, 3600);
}

void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  Lun& l = *L(req);
  // A disk has a size: truncating to it (O_TRUNC aside, which we refuse in
  // open) is a no-op; anything else is refused. Modes and times are fixed.
  if ((to_set & FUSE_SET_ATTR_SIZE) && (ino != kFileIno || static_cast<uint64_t>(attr->st_size) != l.size)) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  struct stat st;
  FillStat(l, ino, &st);
  fuse_reply_attr(req, &st, 3600);
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (ino != kFileIno) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if (fi->flags & O_TRUNC) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  fi->direct_io = 1;  // no page cache for this file: every read and write comes here
  fi->keep_cache = 0;
  fuse_reply_open(req, fi);
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  Lun& l = *L(req);
  const uint64_t uoff = static_cast<uint64_t>(off);
  if (uoff >= l.size || size == 0) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  size = static_cast<size_t>(std::min<uint64_t>(size, l.size - uoff));
  const uint64_t start = uoff / l.bs * l.bs;
  const uint64_t end = (uoff + size + l.bs - 1) / l.bs * l.bs;
  auto* p = new Pending;
  p->req = req;
  p->lun = &l;
  p->buf.reset(new uint8_t[end - start]);
  p->head = static_cast<size_t>(uoff - start);
  p->len = size;
  p->is_read = true;
  SubmitChunks(p, start, static_cast<size_t>(end - start));
}

void Write(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t off, fuse_file_info*) {
  Lun& l = *L(req);
  const uint64_t uoff = static_cast<uint64_t>(off);
  if (uoff >= l.size || size > l.size - uoff) {
    fuse_reply_err(req, uoff >= l.size ? ENOSPC : EFBIG);
    return;
  }
  if (size == 0) {
    fuse_reply_write(req, 0);
    return;
  }
  if (uoff % l.bs == 0 && size % l.bs == 0) {
    auto* p = new Pending;
    p->req = req;
    p->lun = &l;
    p->buf.reset(new uint8_t[size]);
    std::memcpy(p->buf.get(), data, size);  // the kernel's buffer is ours only until we return
    p->len = size;
    p->is_read = false;
    SubmitChunks(p, uoff, size);
    return;
  }
  // Unaligned: read the blocks around it, patch, write them back.
  const uint64_t start = uoff / l.bs * l.bs;
  const uint64_t end = (uoff + size + l.bs - 1) / l.bs * l.bs;
  std::vector<uint8_t> buf(end - start);
  MutexLock lock(l.rmw_mu);
  Status s;
  for (uint64_t at = 0; s.ok() && at < buf.size(); at += l.chunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(l.chunk, buf.size() - at));
    s = block::ReadSync(*l.dev, (start + at) / l.bs, buf.data() + at, n);
  }
  if (s.ok()) std::memcpy(buf.data() + (uoff - start), data, size);
  for (uint64_t at = 0; s.ok() && at < buf.size(); at += l.chunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(l.chunk, buf.size() - at));
    s = block::WriteSync(*l.dev, (start + at) / l.bs, buf.data() + at, n);
  }
  if (!s.ok()) {
    l.errors++;
    fuse_reply_err(req, s.ToErrno() != 0 ? s.ToErrno() : EIO);
    return;
  }
  l.writes++;
  l.write_bytes += size;
  fuse_reply_write(req, size);
}

// SYNCHRONIZE CACHE, answered when the array has answered.
void SyncCache(fuse_req_t req) {
  Lun& l = *L(req);
  Status s = l.dev->Flush([req, &l](const Status& st) {
    if (st.ok()) {
      l.flushes++;
    } else {
      l.errors++;
    }
    fuse_reply_err(req, st.ok() ? 0 : (st.ToErrno() != 0 ? st.ToErrno() : EIO));
  });
  if (!s.ok()) {
    l.errors++;
    fuse_reply_err(req, s.ToErrno() != 0 ? s.ToErrno() : EIO);
  }
}

void Flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  SyncCache(req);
}

void Fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) {
  SyncCache(req);
}

void Release(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  fuse_reply_err(req, 0);
}

void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (ino != FUSE_ROOT_ID) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  fuse_reply_open(req, fi);
}

void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  Lun& l = *L(req);
  std::vector<char> buf(size);
  size_t used = 0;
  const char* names[] = {".", "..", l.name.c_str()};
  const fuse_ino_t inos[] = {FUSE_ROOT_ID, FUSE_ROOT_ID, kFileIno};
  for (off_t i = off; i < 3; i++) {
    struct stat st;
    FillStat(l, inos[i], &st);
    size_t n = fuse_add_direntry(req, buf.data() + used, size - used, names[i], &st, i + 1);
    if (n > size - used) break;
    used += n;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void StatFs(fuse_req_t req, fuse_ino_t) {
  Lun& l = *L(req);
  struct statvfs sv {};
  sv.f_bsize = l.bs;
  sv.f_frsize = l.bs;
  sv.f_blocks = l.size / l.bs;
  sv.f_files = 1;
  sv.f_namemax = 255;
  fuse_reply_statfs(req, &sv);
}

int Usage() {
  std::fprintf(stderr,
               "usage: nasgw-lun-fuse --url iscsi://HOST[:PORT]/IQN/LUN [--initiator IQN] [--queue-depth N] "
               "[--name NAME] MOUNTPOINT\n");
  return 2;
}

int Main(int argc, char** argv) {
  block::IscsiOptions opt;
  std::string mountpoint, name = "lun";
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--url" && (v = value())) {
      opt.urls.push_back(v);
    } else if (a == "--initiator" && (v = value())) {
      opt.initiator_name = v;
    } else if (a == "--queue-depth" && (v = value())) {
      opt.queue_depth = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (a == "--name" && (v = value())) {
      name = v;
    } else if (!a.empty() && a[0] != '-' && mountpoint.empty()) {
      mountpoint = a;
    } else {
      return Usage();
    }
  }
  if (opt.urls.empty() || mountpoint.empty() || name.empty() || name.find('/') != std::string::npos) {
    return Usage();
  }
  if (Status s = opt.Validate(); !s.ok()) {
    std::fprintf(stderr, "nasgw-lun-fuse: %s\n", s.ToString().c_str());
    return 2;
  }
  // We serve a block device's writeback: do not let our own allocations
  // wait on that writeback (the kernel's rule for userspace block drivers).
  if (prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) != 0) {
    std::fprintf(stderr, "nasgw-lun-fuse: PR_SET_IO_FLUSHER: %s (continuing)\n", std::strerror(errno));
  }
  auto dev = block::IscsiDevice::Open(opt);
  if (!dev.ok()) {
    std::fprintf(stderr, "nasgw-lun-fuse: %s\n", dev.status().ToString().c_str());
    return 1;
  }
  Lun lun;
  lun.dev = std::move(*dev);
  lun.name = name;
  const block::DeviceInfo& info = lun.dev->info();
  lun.size = info.size_bytes();
  lun.bs = info.block_size;
  uint64_t chunk = kMaxIo;
  if (info.max_transfer_blocks != 0) chunk = std::min<uint64_t>(chunk, uint64_t{info.max_transfer_blocks} * lun.bs);
  lun.chunk = std::max<uint64_t>(chunk / lun.bs * lun.bs, lun.bs);

  fuse_lowlevel_ops ops{};
  ops.init = Init;
  ops.lookup = Lookup;
  ops.getattr = GetAttr;
  ops.setattr = SetAttr;
  ops.open = Open;
  ops.read = Read;
  ops.write = Write;
  ops.flush = Flush;
  ops.fsync = Fsync;
  ops.release = Release;
  ops.opendir = OpenDir;
  ops.readdir = ReadDir;
  ops.statfs = StatFs;

  std::vector<std::string> fargs_s = {"nasgw-lun-fuse", "-o",
                                      "default_permissions,fsname=nasgw-lun:" + info.name + ",subtype=nasgw-lun"};
  std::vector<char*> fargv;
  fargv.reserve(fargs_s.size());
  for (auto& s : fargs_s) fargv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(fargv.size()), fargv.data());
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &lun);
  fuse_opt_free_args(&args);
  if (se == nullptr || fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, mountpoint.c_str()) != 0) {
    if (se != nullptr) fuse_session_destroy(se);
    std::fprintf(stderr, "nasgw-lun-fuse: cannot mount on %s\n", mountpoint.c_str());
    return 1;
  }
  std::printf("ready %llu %u\n", static_cast<unsigned long long>(lun.size), lun.bs);
  std::fflush(stdout);
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 0);
  fuse_loop_cfg_set_max_threads(cfg, 8);
  int rc = fuse_session_loop_mt(se, cfg);
  fuse_loop_cfg_destroy(cfg);
  // Drains: every admitted request completes (and replies) before the
  // session goes.
  lun.dev.reset();
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  std::fprintf(
      stderr,
      "{\"reads\": %llu, \"read_bytes\": %llu, \"writes\": %llu, \"write_bytes\": %llu, \"flushes\": %llu, "
      "\"errors\": %llu}\n",
      static_cast<unsigned long long>(lun.reads.load()), static_cast<unsigned long long>(lun.read_bytes.load()),
      static_cast<unsigned long long>(lun.writes.load()), static_cast<unsigned long long>(lun.write_bytes.load()),
      static_cast<unsigned long long>(lun.flushes.load()), static_cast<unsigned long long>(lun.errors.load()));
  return rc == 0 ? 0 : 1;
}

}  // namespace
}  // namespace nasgw::lunfuse

int main(int argc, char** argv) {
  return nasgw::lunfuse::Main(argc, argv);
}
