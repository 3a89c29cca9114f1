// nasgw-bench fs / posix: the file-system workloads, run against the
// in-process fs API (fs) or any mounted directory (posix: a nasgw FUSE mount,
// or ext4 as the baseline), so that the figures are comparable line by line.
//
// The client target runs them through fsal/client and nasgwd (the heads'
// path) so that the cost of the head protocol is measured against the
// in-process API on the same LUNs.
//
//   nasgw-bench fs     --lun URL [--lun URL ...] --test meta|randrw|getattr [options]
//   nasgw-bench client --socket PATH --volume NAME --test meta|randrw|getattr [options]
//   nasgw-bench posix  --dir DIR --test meta|randrw|getattr|append|overwrite [options]
//   nasgw-bench uds    [--ops N]    the machine's Unix-socket round trip (the floor)
//     meta:    --files N           create N empty files, stat each, unlink each
//     randrw:  --file-mib N --bs 8k --rwmix 70 --threads N --seconds S
//     getattr: --ops N             attributes of one file, one at a time (round-trip latency)
//     append, overwrite (posix only): --write-bytes N --files N --seconds S [--file-mib N]
//              one thread of small writes with no fsync, as an application
//              that logs or updates records would: appends (O_APPEND) to
//              --files files in turn, or overwrites at random aligned
//              offsets in --files files of --file-mib MiB each (written and
//              fsynced first). Then one fsync per file, timed apart (what
//              the writes left to do), and the data checked (sizes, and the
//              last writes read back).
//     fs only: --record-kib N (the volume's record size)
//
// Every operation is timed; the JSON gives ops/s and p50/p99 per phase and
// a top-level "iops" (randrw) or "creates_per_sec" (meta).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/histogram.h"
#include "base/mutex.h"
#include "block/iscsi_device.h"
#include "fs/domain.h"
#include "fsal/client/nasgw_client.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

namespace nasgw::bench {

namespace {

// The operations a workload needs, over either target.
class Target {
 public:
  virtual ~Target() = default;
  virtual Status Create(const std::string& name) = 0;
  virtual Status Stat(const std::string& name) = 0;
  virtual Status Unlink(const std::string& name) = 0;
  virtual Status Prepare(const std::string& name, uint64_t bytes) = 0;  // the randrw file
  virtual Status ReadAt(uint64_t off, void* buf, size_t n) = 0;
  virtual Status WriteAt(uint64_t off, const void* buf, size_t n) = 0;
  virtual Status GetAttr() = 0;  // of the prepared file
};

Status Errno(const char* what) {
  return Status(Code::kIoError, std::string(what) + ": " + std::strerror(errno));
}

class PosixTarget : public Target {
 public:
  explicit PosixTarget(std::string dir) : dir_(std::move(dir)) {}
  ~PosixTarget() override {
    if (fd_ >= 0) close(fd_);
  }
  Status Create(const std::string& n) override {
    int fd = open((dir_ + "/" + n).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) return Errno("create");
    close(fd);
    return Status();
  }
  Status Stat(const std::string& n) override {
    struct stat st;
    return stat((dir_ + "/" + n).c_str(), &st) == 0 ? Status() : Errno("stat");
  }
  Status Unlink(const std::string& n) override {
    return unlink((dir_ + "/" + n).c_str()) == 0 ? Status() : Errno("unlink");
  }
  Status Prepare(const std::string& n, uint64_t bytes) override {
    fd_ = open((dir_ + "/" + n).c_str(), O_CREAT | O_RDWR, 0644);
    if (fd_ < 0) return Errno("open");
    std::vector<char> buf(1 << 20, 'p');
    for (uint64_t off = 0; off < bytes; off += buf.size()) {
      if (pwrite(fd_, buf.data(), buf.size(), static_cast<off_t>(off)) != static_cast<ssize_t>(buf.size())) {
        return Errno("fill");
      }
    }
    return fsync(fd_) == 0 ? Status() : Errno("fsync");
  }
  Status ReadAt(uint64_t off, void* buf, size_t n) override {
    return pread(fd_, buf, n, static_cast<off_t>(off)) == static_cast<ssize_t>(n) ? Status() : Errno("pread");
  }
  // Each write is made stable before it counts, as the fs API's are: O_DSYNC
  // semantics via fdatasync, so the baseline promises what nasgw promises.
  Status WriteAt(uint64_t off, const void* buf, size_t n) override {
    if (pwrite(fd_, buf, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) return Errno("pwrite");
    return fdatasync(fd_) == 0 ? Status() : Errno("fdatasync");
  }
  Status GetAttr() override {
    struct stat st;
    return fstat(fd_, &st) == 0 ? Status() : Errno("fstat");
  }

 private:
  std::string dir_;
  int fd_ = -1;
};

class DomainTarget : public Target {
 public:
  DomainTarget(std::shared_ptr<fs::Reserve> r, std::unique_ptr<fs::Domain> d, uint32_t vol)
      : reserve_(std::move(r)), dom_(std::move(d)), vol_(vol) {}
  Status Create(const std::string& n) override {
    return dom_->Create(vol_, fs::kRootIno, n, fs::FileType::kRegular, 0644, 0, 0).status();
  }
  Status Stat(const std::string& n) override { return dom_->Lookup(vol_, fs::kRootIno, n).status(); }
  Status Unlink(const std::string& n) override { return dom_->Unlink(vol_, fs::kRootIno, n); }
  Status Prepare(const std::string& n, uint64_t bytes) override {
    auto a = dom_->Create(vol_, fs::kRootIno, n, fs::FileType::kRegular, 0644, 0, 0);
    if (!a.ok()) return a.status();
    ino_ = a->ino;
    std::vector<char> buf(1 << 20, 'p');
    for (uint64_t off = 0; off < bytes; off += buf.size()) {
      NASGW_RETURN_IF_ERROR(dom_->Write(vol_, ino_, off, buf.data(), buf.size()).status());
    }
    return Status();
  }
  Status ReadAt(uint64_t off, void* buf, size_t n) override { return dom_->Read(vol_, ino_, off, n, buf).status(); }
  Status WriteAt(uint64_t off, const void* buf, size_t n) override {
    return dom_->Write(vol_, ino_, off, buf, n).status();
  }
  Status GetAttr() override { return dom_->GetAttr(vol_, ino_).status(); }

 private:
  std::shared_ptr<fs::Reserve> reserve_;
  std::unique_ptr<fs::Domain> dom_;
  uint32_t vol_;
  uint64_t ino_ = 0;
};

// Through the client library to nasgwd, as root (a trusted head).
class ClientTarget : public Target {
 public:
  ClientTarget(nasgw_client* c, const nasgw_attr& root) : c_(c), root_(root.handle) {}
  ~ClientTarget() override { nasgw_client_close(c_); }
  Status Create(const std::string& n) override {
    return Rc(nasgw_create(c_, &cred_, &root_, n.c_str(), NASGW_TYPE_REG, 0644, 0, nullptr, 0, nullptr), "create");
  }
  Status Stat(const std::string& n) override {
    nasgw_attr a;
    return Rc(nasgw_lookup(c_, &cred_, &root_, n.c_str(), &a), "lookup");
  }
  Status Unlink(const std::string& n) override { return Rc(nasgw_unlink(c_, &cred_, &root_, n.c_str()), "unlink"); }
  Status Prepare(const std::string& n, uint64_t bytes) override {
    nasgw_attr a;
    NASGW_RETURN_IF_ERROR(
        Rc(nasgw_create(c_, &cred_, &root_, n.c_str(), NASGW_TYPE_REG, 0644, 0, nullptr, 0, &a), "create"));
    file_ = a.handle;
    std::vector<char> buf(1 << 20, 'p');
    for (uint64_t off = 0; off < bytes; off += buf.size()) {
      NASGW_RETURN_IF_ERROR(WriteAt(off, buf.data(), buf.size()));
    }
    return Status();
  }
  Status ReadAt(uint64_t off, void* buf, size_t n) override {
    int64_t r = nasgw_read(c_, &cred_, &file_, off, buf, static_cast<uint32_t>(n), nullptr);
    return r == static_cast<int64_t>(n) ? Status() : Rc(r < 0 ? static_cast<int>(r) : -EIO, "read");
  }
  Status WriteAt(uint64_t off, const void* buf, size_t n) override {
    int64_t r = nasgw_write(c_, &cred_, &file_, off, buf, static_cast<uint32_t>(n), NASGW_WRITE_STABLE, nullptr);
    return r == static_cast<int64_t>(n) ? Status() : Rc(r < 0 ? static_cast<int>(r) : -EIO, "write");
  }
  Status GetAttr() override {
    nasgw_attr a;
    return Rc(nasgw_getattr(c_, &cred_, &file_, &a), "getattr");
  }

 private:
  static Status Rc(int rc, const char* what) {
    if (rc == 0) return Status();
    return Status(Code::kIoError, std::string(what) + ": " + std::strerror(-rc) + ": " + nasgw_client_last_message());
  }
  nasgw_client* c_;
  nasgw_handle root_;
  nasgw_handle file_{};
  const nasgw_cred cred_{0, 0, 0, nullptr};
};

struct Args {
  std::string mode, dir, test = "meta", bs_s = "8k", socket = "/run/nasgw/head.sock", volume = "bench";
  uint64_t ops = 20000;
  uint32_t connections = 4;
  std::vector<std::string> luns;
  uint64_t files = 10000, file_mib = 256, bs = 8192, write_bytes = 4;
  uint32_t record_kib = fs::kRecordBytesDefault >> 10;
  int rwmix = 70, threads = 4;
  double seconds = 10;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr, "nasgw-bench %s\nsee bench/fs_bench.cc for the options\n", why.c_str());
  std::exit(2);
}

std::string Phase(const char* name, const HistogramData& h, double secs) {
  char b[256];
  std::snprintf(b, sizeof(b), "\"%s\": {\"ops\": %llu, \"per_sec\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f}", name,
                static_cast<unsigned long long>(h.count), h.count / secs, h.Percentile(0.5) / 1e3,
                h.Percentile(0.99) / 1e3);
  return b;
}

// Small writes through a mounted directory (--test append|overwrite).
int SmallWrites(const Args& a) {
  const bool append = a.test == "append";
  const uint64_t file_bytes = append ? 0 : a.file_mib << 20;
  if (a.write_bytes == 0 || a.files == 0 || (!append && file_bytes < a.write_bytes)) {
    Usage("bad --write-bytes, --files or --file-mib");
  }
  std::vector<int> fds;
  auto close_all = [&] {
    for (int fd : fds) close(fd);
  };
  std::vector<char> fill(1 << 20, 'p');
  for (uint64_t i = 0; i < a.files; i++) {
    const std::string path = a.dir + "/small" + std::to_string(i);
    int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR | (append ? O_APPEND : 0), 0644);
    if (fd < 0) {
      std::fprintf(stderr, "nasgw-bench: open %s: %s\n", path.c_str(), std::strerror(errno));
      close_all();
      return 1;
    }
    fds.push_back(fd);
    for (uint64_t off = 0; off < file_bytes; off += fill.size()) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(fill.size(), file_bytes - off));
      if (pwrite(fd, fill.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
        std::fprintf(stderr, "nasgw-bench: fill: %s\n", std::strerror(errno));
        close_all();
        return 1;
      }
    }
    if (!append && fsync(fd) != 0) {
      std::fprintf(stderr, "nasgw-bench: fsync: %s\n", std::strerror(errno));
      close_all();
      return 1;
    }
  }
  // The bytes of write i: its number, repeated, so that what is read back
  // says which write it was.
  std::vector<char> buf(a.write_bytes);
  auto pattern = [&](uint64_t i) {
    for (size_t b = 0; b < buf.size(); b++) buf[b] = static_cast<char>('a' + (i + b) % 26);
  };
  std::mt19937_64 rng(42);
  const uint64_t slots = append ? 0 : file_bytes / a.write_bytes;
  std::vector<std::pair<uint64_t, uint64_t>> last(a.files, {UINT64_MAX, 0});  // per file: (offset, write number)
  HistogramData h;
  const uint64_t t0 = MonotonicNanos(), end = t0 + static_cast<uint64_t>(a.seconds * 1e9);
  uint64_t i = 0;
  for (; MonotonicNanos() < end; i++) {
    const uint64_t f = i % a.files;
    pattern(i);
    const uint64_t off = append ? (i / a.files) * a.write_bytes : (rng() % slots) * a.write_bytes;
    const uint64_t s = MonotonicNanos();
    const ssize_t n = append ? write(fds[f], buf.data(), buf.size())
                             : pwrite(fds[f], buf.data(), buf.size(), static_cast<off_t>(off));
    h.Record(MonotonicNanos() - s);
    if (n != static_cast<ssize_t>(buf.size())) {
      std::fprintf(stderr, "nasgw-bench: write %llu: %s\n", static_cast<unsigned long long>(i), std::strerror(errno));
      close_all();
      return 1;
    }
    last[f] = {off, i};
  }
  const double secs = (MonotonicNanos() - t0) / 1e9;
  const uint64_t s0 = MonotonicNanos();
  for (int fd : fds) {
    if (fsync(fd) != 0) {
      std::fprintf(stderr, "nasgw-bench: fsync: %s\n", std::strerror(errno));
      close_all();
      return 1;
    }
  }
  const double sync_secs = (MonotonicNanos() - s0) / 1e9;
  // Check: every append landed (sizes), and each file's last write reads back.
  std::vector<char> got(a.write_bytes);
  for (uint64_t f = 0; f < a.files && f < i; f++) {
    struct stat st;
    const uint64_t writes = i / a.files + (f < i % a.files ? 1 : 0);
    if (fstat(fds[f], &st) != 0 || (append && static_cast<uint64_t>(st.st_size) != writes * a.write_bytes) ||
        (!append && static_cast<uint64_t>(st.st_size) != file_bytes)) {
      std::fprintf(stderr, "nasgw-bench: file %llu has %lld bytes after %llu writes\n",
                   static_cast<unsigned long long>(f), static_cast<long long>(st.st_size),
                   static_cast<unsigned long long>(writes));
      close_all();
      return 1;
    }
    pattern(last[f].second);
    if (pread(fds[f], got.data(), got.size(), static_cast<off_t>(last[f].first)) != static_cast<ssize_t>(got.size()) ||
        got != buf) {
      std::fprintf(stderr, "nasgw-bench: file %llu: its last write does not read back\n",
                   static_cast<unsigned long long>(f));
      close_all();
      return 1;
    }
  }
  close_all();
  std::printf(
      "{\"target\": \"posix\", \"test\": \"%s\", \"write_bytes\": %llu, \"files\": %llu, \"writes\": %llu, "
      "\"per_sec\": %.1f, \"p50_us\": %.2f, \"p99_us\": %.2f, \"p999_us\": %.2f, \"fsync_secs\": %.3f}\n",
      a.test.c_str(), static_cast<unsigned long long>(a.write_bytes), static_cast<unsigned long long>(a.files),
      static_cast<unsigned long long>(i), i / secs, h.Percentile(0.5) / 1e3, h.Percentile(0.99) / 1e3,
      h.Percentile(0.999) / 1e3, sync_secs);
  return 0;
}

int Run(Target& t, const Args& a) {
  if (a.test == "meta") {
    HistogramData h[3];
    double secs[3];
    const char* names[3] = {"create", "stat", "unlink"};
    for (int phase = 0; phase < 3; phase++) {
      const uint64_t t0 = MonotonicNanos();
      for (uint64_t i = 0; i < a.files; i++) {
        const std::string n = "f" + std::to_string(i);
        const uint64_t s = MonotonicNanos();
        Status st = phase == 0 ? t.Create(n) : phase == 1 ? t.Stat(n) : t.Unlink(n);
        if (!st.ok()) {
          std::fprintf(stderr, "nasgw-bench: %s %s: %s\n", names[phase], n.c_str(), st.ToString().c_str());
          return 1;
        }
        h[phase].Record(MonotonicNanos() - s);
      }
      secs[phase] = (MonotonicNanos() - t0) / 1e9;
    }
    std::printf("{\"target\": \"%s\", \"test\": \"meta\", \"files\": %llu, \"creates_per_sec\": %.1f, %s, %s, %s}\n",
                a.mode.c_str(), static_cast<unsigned long long>(a.files), h[0].count / secs[0],
                Phase("create", h[0], secs[0]).c_str(), Phase("stat", h[1], secs[1]).c_str(),
                Phase("unlink", h[2], secs[2]).c_str());
    return 0;
  }
  if (a.test == "getattr") {
    Status p = t.Prepare("getattr.dat", 0);
    if (!p.ok()) {
      std::fprintf(stderr, "nasgw-bench: prepare: %s\n", p.ToString().c_str());
      return 1;
    }
    HistogramData h;
    const uint64_t t0 = MonotonicNanos();
    for (uint64_t i = 0; i < a.ops; i++) {
      const uint64_t s = MonotonicNanos();
      Status st = t.GetAttr();
      if (!st.ok()) {
        std::fprintf(stderr, "nasgw-bench: getattr: %s\n", st.ToString().c_str());
        return 1;
      }
      h.Record(MonotonicNanos() - s);
    }
    const double secs = (MonotonicNanos() - t0) / 1e9;
    std::printf(
        "{\"target\": \"%s\", \"test\": \"getattr\", \"ops\": %llu, \"p50_us\": %.2f, \"p99_us\": %.2f, "
        "\"per_sec\": %.1f}\n",
        a.mode.c_str(), static_cast<unsigned long long>(h.count), h.Percentile(0.5) / 1e3, h.Percentile(0.99) / 1e3,
        h.count / secs);
    return 0;
  }
  // randrw
  const uint64_t bytes = a.file_mib << 20;
  Status p = t.Prepare("randrw.dat", bytes);
  if (!p.ok()) {
    std::fprintf(stderr, "nasgw-bench: prepare: %s\n", p.ToString().c_str());
    return 1;
  }
  Mutex mu;
  HistogramData reads, writes;
  std::atomic<bool> stop{false};
  Status error;
  std::vector<std::thread> threads;
  threads.reserve(a.threads);
  for (int i = 0; i < a.threads; i++) {
    threads.emplace_back([&, i] {
      std::mt19937_64 rng(42 + i);
      std::vector<char> buf(a.bs, 'w');
      HistogramData r, w;
      while (!stop.load()) {
        const uint64_t off = (rng() % (bytes / a.bs)) * a.bs;
        const bool rd = static_cast<int>(rng() % 100) < a.rwmix;
        const uint64_t s = MonotonicNanos();
        Status st = rd ? t.ReadAt(off, buf.data(), buf.size()) : t.WriteAt(off, buf.data(), buf.size());
        if (!st.ok()) {
          MutexLock l(mu);
          if (error.ok()) error = st;
          stop = true;
          break;
        }
        (rd ? r : w).Record(MonotonicNanos() - s);
      }
      MutexLock l(mu);
      reads.Merge(r);
      writes.Merge(w);
    });
  }
  const uint64_t t0 = MonotonicNanos();
  std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));  // a run length, not a sync
  stop = true;
  for (auto& th : threads) th.join();
  const double secs = (MonotonicNanos() - t0) / 1e9;
  if (!error.ok()) {
    std::fprintf(stderr, "nasgw-bench: %s\n", error.ToString().c_str());
    return 1;
  }
  HistogramData all = reads;
  all.Merge(writes);
  std::printf(
      "{\"target\": \"%s\", \"test\": \"randrw\", \"bs\": %llu, \"rwmix_read\": %d, \"threads\": %d, "
      "\"iops\": %.1f, \"lat_p50_us\": %.1f, \"lat_p99_us\": %.1f, %s, %s}\n",
      a.mode.c_str(), static_cast<unsigned long long>(a.bs), a.rwmix, a.threads, all.count / secs,
      all.Percentile(0.5) / 1e3, all.Percentile(0.99) / 1e3, Phase("read", reads, secs).c_str(),
      Phase("write", writes, secs).c_str());
  return 0;
}

}  // namespace

// The floor under any head-protocol round trip on this machine: a 64-byte
// ping-pong over a Unix socket between two processes.
int UdsPingPong(uint64_t ops) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);  // else the parent's close never reads as EOF here
    char b[64];
    while (read(sv[1], b, sizeof(b)) == static_cast<ssize_t>(sizeof(b))) {
      if (write(sv[1], b, sizeof(b)) != static_cast<ssize_t>(sizeof(b))) break;
    }
    _exit(0);
  }
  close(sv[1]);
  char b[64] = {};
  HistogramData h;
  for (uint64_t i = 0; i < ops; i++) {
    const uint64_t s = MonotonicNanos();
    if (write(sv[0], b, sizeof(b)) != static_cast<ssize_t>(sizeof(b)) ||
        read(sv[0], b, sizeof(b)) != static_cast<ssize_t>(sizeof(b))) {
      return 1;
    }
    h.Record(MonotonicNanos() - s);
  }
  close(sv[0]);
  waitpid(pid, nullptr, 0);
  std::printf("{\"target\": \"uds\", \"test\": \"pingpong\", \"ops\": %llu, \"p50_us\": %.2f, \"p99_us\": %.2f}\n",
              static_cast<unsigned long long>(h.count), h.Percentile(0.5) / 1e3, h.Percentile(0.99) / 1e3);
  return 0;
}

int FsMain(int argc, char** argv) {
  Args a;
  a.mode = argv[1];
  for (int i = 2; i < argc; i++) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage(s + " needs a value");
      return argv[++i];
    };
    if (s == "--lun") {
      a.luns.push_back(next());
    } else if (s == "--dir") {
      a.dir = next();
    } else if (s == "--test") {
      a.test = next();
    } else if (s == "--files") {
      a.files = std::strtoull(next().c_str(), nullptr, 10);
    } else if (s == "--file-mib") {
      a.file_mib = std::strtoull(next().c_str(), nullptr, 10);
    } else if (s == "--bs") {
      a.bs = std::strtoull(next().c_str(), nullptr, 10) * 1024;  // in KiB: "8" or "8k"
    } else if (s == "--rwmix") {
      a.rwmix = std::atoi(next().c_str());
    } else if (s == "--threads") {
      a.threads = std::atoi(next().c_str());
    } else if (s == "--seconds") {
      a.seconds = std::atof(next().c_str());
    } else if (s == "--record-kib") {
      a.record_kib = static_cast<uint32_t>(std::strtoul(next().c_str(), nullptr, 10));
    } else if (s == "--socket") {
      a.socket = next();
    } else if (s == "--volume") {
      a.volume = next();
    } else if (s == "--ops") {
      a.ops = std::strtoull(next().c_str(), nullptr, 10);
    } else if (s == "--connections") {
      a.connections = static_cast<uint32_t>(std::strtoul(next().c_str(), nullptr, 10));
    } else if (s == "--write-bytes") {
      a.write_bytes = std::strtoull(next().c_str(), nullptr, 10);
    } else if (s == "--json") {
    } else
      Usage("unknown option " + s);
  }
  if (a.mode == "uds") return UdsPingPong(a.ops);
  if (a.test == "append" || a.test == "overwrite") {
    if (a.mode != "posix" || a.dir.empty()) Usage("--test append and overwrite are posix --dir DIR only");
    return SmallWrites(a);
  }
  if (a.test != "meta" && a.test != "randrw" && a.test != "getattr") {
    Usage("--test is meta, randrw, getattr, append or overwrite");
  }
  if (a.bs == 0 || a.threads < 1 || a.rwmix < 0 || a.rwmix > 100) Usage("bad --bs, --threads or --rwmix");
  if (a.mode == "posix") {
    if (a.dir.empty()) Usage("posix needs --dir");
    PosixTarget t(a.dir);
    return Run(t, a);
  }
  if (a.mode == "client") {
    nasgw_client_options co{};
    co.socket_path = a.socket.c_str();
    co.client_name = "nasgw-bench";
    co.connections = a.connections;
    nasgw_client* c = nullptr;
    if (nasgw_client_open(&co, &c) != 0) {
      std::fprintf(stderr, "nasgw-bench: %s\n", nasgw_client_last_message());
      return 1;
    }
    const nasgw_cred root{0, 0, 0, nullptr};
    nasgw_attr r{};
    if (nasgw_mount(c, &root, a.volume.c_str(), &r) != 0) {
      std::fprintf(stderr, "nasgw-bench: volume %s: %s\n", a.volume.c_str(), nasgw_client_last_message());
      nasgw_client_close(c);
      return 1;
    }
    ClientTarget t(c, r);
    return Run(t, a);
  }
  if (a.luns.empty()) Usage("fs needs --lun");
  auto devs = block::OpenLuns(a.luns);
  if (!devs.ok()) {
    std::fprintf(stderr, "nasgw-bench: %s\n", devs.status().ToString().c_str());
    return 1;
  }
  fs::ReserveOptions ro;
  ro.name = "bench";
  ro.ag_bytes = 64ull << 20;
  ro.force = true;
  auto r = fs::Reserve::Format(*devs, ro);
  if (!r.ok()) {
    std::fprintf(stderr, "nasgw-bench: %s\n", r.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<fs::Reserve> reserve = std::move(r.value());
  auto d = fs::Domain::Create(reserve, 0);
  if (!d.ok()) {
    std::fprintf(stderr, "nasgw-bench: %s\n", d.status().ToString().c_str());
    return 1;
  }
  auto v = (*d)->CreateVolume("bench", a.record_kib << 10);
  if (!v.ok()) return 1;
  DomainTarget t(reserve, std::move(d.value()), v->id);
  return Run(t, a);
}

}  // namespace nasgw::bench
