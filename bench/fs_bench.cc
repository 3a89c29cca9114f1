// nasgw-bench fs / posix: the file-system workloads, run against the
// in-process fs API (fs) or any mounted directory (posix: a nasgw FUSE mount,
// or ext4 as the baseline), so that the figures are comparable line by line.
//
//   nasgw-bench fs    --lun URL [--lun URL ...] --test meta|randrw [options]
//   nasgw-bench posix --dir DIR --test meta|randrw [options]
//     meta:   --files N           create N empty files, stat each, unlink each
//     randrw: --file-mib N --bs 8k --rwmix 70 --threads N --seconds S
//     fs only: --record-kib N (the volume's record size)
//
// Every operation is timed; the JSON gives ops/s and p50/p99 per phase and
// a top-level "iops" (randrw) or "creates_per_sec" (meta).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/histogram.h"
#include "block/iscsi_device.h"
#include "fs/domain.h"

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
};

Status Errno(const char* what) { return Status(Code::kIoError, std::string(what) + ": " + std::strerror(errno)); }

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

 private:
  std::shared_ptr<fs::Reserve> reserve_;
  std::unique_ptr<fs::Domain> dom_;
  uint32_t vol_;
  uint64_t ino_ = 0;
};

struct Args {
  std::string mode, dir, test = "meta", bs_s = "8k";
  std::vector<std::string> luns;
  uint64_t files = 10000, file_mib = 256, bs = 8192;
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
  // randrw
  const uint64_t bytes = a.file_mib << 20;
  Status p = t.Prepare("randrw.dat", bytes);
  if (!p.ok()) {
    std::fprintf(stderr, "nasgw-bench: prepare: %s\n", p.ToString().c_str());
    return 1;
  }
  std::mutex mu;
  HistogramData reads, writes;
  std::atomic<bool> stop{false};
  Status error;
  std::vector<std::thread> threads;
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
          std::lock_guard<std::mutex> l(mu);
          if (error.ok()) error = st;
          stop = true;
          break;
        }
        (rd ? r : w).Record(MonotonicNanos() - s);
      }
      std::lock_guard<std::mutex> l(mu);
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
  std::printf("{\"target\": \"%s\", \"test\": \"randrw\", \"bs\": %llu, \"rwmix_read\": %d, \"threads\": %d, "
              "\"iops\": %.1f, \"lat_p50_us\": %.1f, \"lat_p99_us\": %.1f, %s, %s}\n",
              a.mode.c_str(), static_cast<unsigned long long>(a.bs), a.rwmix, a.threads, all.count / secs,
              all.Percentile(0.5) / 1e3, all.Percentile(0.99) / 1e3, Phase("read", reads, secs).c_str(),
              Phase("write", writes, secs).c_str());
  return 0;
}

}  // namespace

int FsMain(int argc, char** argv) {
  Args a;
  a.mode = argv[1];
  for (int i = 2; i < argc; i++) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage(s + " needs a value");
      return argv[++i];
    };
    if (s == "--lun") a.luns.push_back(next());
    else if (s == "--dir") a.dir = next();
    else if (s == "--test") a.test = next();
    else if (s == "--files") a.files = std::strtoull(next().c_str(), nullptr, 10);
    else if (s == "--file-mib") a.file_mib = std::strtoull(next().c_str(), nullptr, 10);
    else if (s == "--bs") a.bs = std::strtoull(next().c_str(), nullptr, 10) * 1024;  // in KiB: "8" or "8k"
    else if (s == "--rwmix") a.rwmix = std::atoi(next().c_str());
    else if (s == "--threads") a.threads = std::atoi(next().c_str());
    else if (s == "--seconds") a.seconds = std::atof(next().c_str());
    else if (s == "--record-kib") a.record_kib = static_cast<uint32_t>(std::strtoul(next().c_str(), nullptr, 10));
    else if (s == "--json") {
    } else Usage("unknown option " + s);
  }
  if (a.test != "meta" && a.test != "randrw") Usage("--test is meta or randrw");
  if (a.bs == 0 || a.threads < 1 || a.rwmix < 0 || a.rwmix > 100) Usage("bad --bs, --threads or --rwmix");
  if (a.mode == "posix") {
    if (a.dir.empty()) Usage("posix needs --dir");
    PosixTarget t(a.dir);
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
