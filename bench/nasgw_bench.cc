// nasgw-bench: the project's benchmark program.
//
//   nasgw-bench block --url URL [--url URL2 ...] --workload randread|randwrite|randrw|seqread|seqwrite
//               [--bs 8k] [--rwmix 70] [--qd 32] [--clients 1] [--seconds 20] [--ramp 1]
//               [--size BYTES] [--json]
//
// Each client is its own IscsiDevice (its own iSCSI sessions, like a separate
// block client) keeping `qd` requests in flight in a closed loop: every
// completion submits the next request from the device's I/O thread, as an
// asynchronous engine such as fio's does. Latency is measured per request
// from submission to completion. Results after the ramp-up are reported as
// IOPS, MB/s and latency percentiles, overall and per direction; with --json,
// one JSON object whose top-level "iops" is the headline figure.
//
// The file-system targets (fs: the in-process API; posix: any mounted
// directory) are in bench/fs_bench.cc; nfs joins later.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

namespace nasgw::bench {
namespace {

using block::IoVec;
using block::IscsiDevice;
using block::IscsiOptions;

struct Config {
  std::vector<std::string> urls;
  std::string workload = "randread";
  uint64_t bs = 8192;
  int rwmix = 70;  // percent reads, for randrw
  uint32_t qd = 32;
  int clients = 1;
  double seconds = 20;
  double ramp = 1;
  uint64_t size = 0;  // bytes of the LUN to use; 0 = all
  bool json = false;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "nasgw-bench: %s\n"
               "usage: nasgw-bench block --url URL [--url URL2 ...] --workload "
               "randread|randwrite|randrw|seqread|seqwrite\n"
               "         [--bs 8k] [--rwmix 70] [--qd 32] [--clients 1] [--seconds 20] [--ramp 1]\n"
               "         [--size BYTES] [--json]\n",
               why.c_str());
  std::exit(2);
}

uint64_t ParseBytes(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str()) Usage("bad size '" + s + "'");
  std::string unit(end);
  if (unit == "k" || unit == "K") {
    v <<= 10;
  } else if (unit == "m" || unit == "M") {
    v <<= 20;
  } else if (unit == "g" || unit == "G") {
    v <<= 30;
  } else if (!unit.empty()) {
    Usage("bad size unit in '" + s + "'");
  }
  return v;
}

double ParseNumber(const std::string& s, double lo, double hi, const char* what) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || v < lo || v > hi) {
    Usage(std::string(what) + " must be a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

Config ParseArgs(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) != "block") Usage("the only target so far is 'block'");
  Config c;
  for (int i = 2; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--url") {
      c.urls.push_back(next());
    } else if (a == "--workload") {
      c.workload = next();
    } else if (a == "--bs") {
      c.bs = ParseBytes(next());
    } else if (a == "--rwmix") {
      c.rwmix = static_cast<int>(ParseNumber(next(), 0, 100, "--rwmix"));
    } else if (a == "--qd") {
      c.qd = static_cast<uint32_t>(ParseNumber(next(), 1, limits::kQueueDepthMax, "--qd"));
    } else if (a == "--clients") {
      c.clients = static_cast<int>(ParseNumber(next(), 1, 64, "--clients"));
    } else if (a == "--seconds") {
      c.seconds = ParseNumber(next(), 0.1, 86400, "--seconds");
    } else if (a == "--ramp") {
      c.ramp = ParseNumber(next(), 0, 600, "--ramp");
    } else if (a == "--size") {
      c.size = ParseBytes(next());
    } else if (a == "--json") {
      c.json = true;
    } else {
      Usage("unknown option " + a);
    }
  }
  if (c.urls.empty()) Usage("--url is required");
  const std::string w = c.workload;
  if (w != "randread" && w != "randwrite" && w != "randrw" && w != "seqread" && w != "seqwrite") {
    Usage("unknown workload " + w);
  }
  if (w == "randread" || w == "seqread") c.rwmix = 100;
  if (w == "randwrite" || w == "seqwrite") c.rwmix = 0;
  if (c.bs == 0 || c.bs > limits::kIoBytesMax) Usage("--bs must be 1 byte .. 8 MiB");
  return c;
}

// One client: a device and `qd` slots, each slot always has one request in
// flight until the run ends.
class Client {
 public:
  Client(const Config& cfg, std::unique_ptr<IscsiDevice> dev, uint64_t seed)
      : cfg_(cfg), dev_(std::move(dev)), rng_(seed) {
    const uint32_t block = dev_->info().block_size;
    if (cfg_.bs % block != 0) Fail("--bs must be a multiple of the block size " + std::to_string(block));
    blocks_per_io_ = cfg_.bs / block;
    uint64_t bytes = cfg_.size ? std::min(cfg_.size, dev_->info().size_bytes()) : dev_->info().size_bytes();
    region_ios_ = bytes / cfg_.bs;
    if (region_ios_ == 0) Fail("LUN smaller than one request");
    random_ = cfg_.workload.rfind("rand", 0) == 0;
    buffers_.resize(cfg_.qd);
    for (auto& b : buffers_) {
      b.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, (cfg_.bs + 4095) / 4096 * 4096)));
      std::memset(b.get(), 0x5a, cfg_.bs);
    }
    seq_next_ = (seed % region_ios_);
  }

  void Start() {
    for (uint32_t s = 0; s < cfg_.qd; s++) Issue(s);
  }

  // Stops issuing new requests and waits for the in-flight ones.
  void Stop() {
    stopping_.store(true);
    MutexLock lock(mu_);
    while (in_flight_ != 0) cv_.Wait(mu_);
  }

  void BeginMeasuring() {
    MutexLock lock(mu_);
    read_ = HistogramData();
    write_ = HistogramData();
    measuring_ = true;
  }
  void EndMeasuring() {
    MutexLock lock(mu_);
    measuring_ = false;
  }
  HistogramData reads() {
    MutexLock lock(mu_);
    return read_;
  }
  HistogramData writes() {
    MutexLock lock(mu_);
    return write_;
  }
  Status error() const {
    MutexLock lock(mu_);
    return error_;
  }

 private:
  [[noreturn]] static void Fail(const std::string& why) {
    std::fprintf(stderr, "nasgw-bench: %s\n", why.c_str());
    std::exit(1);
  }

  void Issue(uint32_t slot) {
    if (stopping_.load()) return;
    uint64_t io;
    bool read;
    {
      MutexLock lock(mu_);
      io = random_ ? rng_() % region_ios_ : (seq_next_++ % region_ios_);
      read = static_cast<int>(rng_() % 100) < cfg_.rwmix;
      in_flight_++;
    }
    const uint64_t lba = io * blocks_per_io_;
    IoVec v{buffers_[slot].get(), cfg_.bs};
    const uint64_t start = MonotonicNanos();
    auto done = [this, slot, read, start](const Status& s) {
      const uint64_t lat = MonotonicNanos() - start;
      {
        MutexLock lock(mu_);
        in_flight_--;
        if (!s.ok()) {
          if (error_.ok()) error_ = s;
          stopping_.store(true);
        } else if (measuring_) {
          (read ? read_ : write_).Record(lat);
        }
        cv_.NotifyAll();
      }
      Issue(slot);
    };
    Status s = read ? dev_->Read(lba, {&v, 1}, done) : dev_->Write(lba, {&v, 1}, false, done);
    if (!s.ok()) {
      MutexLock lock(mu_);
      in_flight_--;
      if (error_.ok()) error_ = s;
      stopping_.store(true);
      cv_.NotifyAll();
    }
  }

  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };

  const Config& cfg_;
  std::unique_ptr<IscsiDevice> dev_;
  std::mt19937_64 rng_ GUARDED_BY(mu_);
  uint64_t blocks_per_io_ = 0;
  uint64_t region_ios_ = 0;
  bool random_ = true;
  uint64_t seq_next_ GUARDED_BY(mu_) = 0;
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> buffers_;
  std::atomic<bool> stopping_{false};
  mutable Mutex mu_;
  CondVar cv_;
  uint32_t in_flight_ GUARDED_BY(mu_) = 0;
  bool measuring_ GUARDED_BY(mu_) = false;
  HistogramData read_ GUARDED_BY(mu_), write_ GUARDED_BY(mu_);
  Status error_ GUARDED_BY(mu_);
};

std::string OpJson(const char* name, const HistogramData& h, double secs, uint64_t bs) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "\"%s\": {\"ops\": %llu, \"iops\": %.1f, \"mbps\": %.2f, \"lat_mean_us\": %.1f, "
                "\"lat_p50_us\": %.1f, \"lat_p99_us\": %.1f, \"lat_p999_us\": %.1f, \"lat_max_us\": %.1f}",
                name, static_cast<unsigned long long>(h.count), h.count / secs, h.count * bs / secs / 1e6,
                h.Mean() / 1e3, h.Percentile(0.50) / 1e3, h.Percentile(0.99) / 1e3, h.Percentile(0.999) / 1e3,
                h.max / 1e3);
  return buf;
}

int Main(int argc, char** argv) {
  Config cfg = ParseArgs(argc, argv);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < cfg.clients; i++) {
    IscsiOptions o;
    o.urls = cfg.urls;
    o.queue_depth = cfg.qd;
    o.initiator_name = "iqn.2026-11.org.nasgw:bench-" + std::to_string(getpid()) + "-" + std::to_string(i);
    auto dev = IscsiDevice::Open(o);
    if (!dev.ok()) {
      std::fprintf(stderr, "nasgw-bench: %s\n", dev.status().ToString().c_str());
      return 1;
    }
    clients.push_back(std::make_unique<Client>(cfg, std::move(dev.value()), 0x5eed + i * 7919));
  }
  for (auto& c : clients) c->Start();
  std::this_thread::sleep_for(std::chrono::duration<double>(cfg.ramp));  // ramp-up is a duration, not a sync
  for (auto& c : clients) c->BeginMeasuring();
  const uint64_t t0 = MonotonicNanos();
  std::this_thread::sleep_for(std::chrono::duration<double>(cfg.seconds));
  for (auto& c : clients) c->EndMeasuring();
  const double secs = (MonotonicNanos() - t0) / 1e9;
  for (auto& c : clients) c->Stop();

  HistogramData reads, writes, all;
  for (auto& c : clients) {
    if (!c->error().ok()) {
      std::fprintf(stderr, "nasgw-bench: I/O failed: %s\n", c->error().ToString().c_str());
      return 1;
    }
    reads.Merge(c->reads());
    writes.Merge(c->writes());
  }
  all = reads;
  all.Merge(writes);
  const double iops = all.count / secs;
  const double mbps = all.count * cfg.bs / secs / 1e6;
  if (cfg.json) {
    std::printf(
        "{\"target\": \"block\", \"workload\": \"%s\", \"bs\": %llu, \"rwmix_read\": %d, \"qd\": %u, "
        "\"clients\": %d, \"seconds\": %.3f, \"iops\": %.1f, \"mbps\": %.2f, \"lat_p50_us\": %.1f, "
        "\"lat_p99_us\": %.1f, %s, %s}\n",
        cfg.workload.c_str(), static_cast<unsigned long long>(cfg.bs), cfg.rwmix, cfg.qd, cfg.clients, secs, iops, mbps,
        all.Percentile(0.5) / 1e3, all.Percentile(0.99) / 1e3, OpJson("read", reads, secs, cfg.bs).c_str(),
        OpJson("write", writes, secs, cfg.bs).c_str());
  } else {
    std::printf("block %s bs=%llu qd=%u clients=%d: %.0f IOPS, %.1f MB/s, p50 %.0f us, p99 %.0f us\n",
                cfg.workload.c_str(), static_cast<unsigned long long>(cfg.bs), cfg.qd, cfg.clients, iops, mbps,
                all.Percentile(0.5) / 1e3, all.Percentile(0.99) / 1e3);
    if (reads.count && writes.count) {
      std::printf("  read  %.0f IOPS p50 %.0f us p99 %.0f us\n  write %.0f IOPS p50 %.0f us p99 %.0f us\n",
                  reads.count / secs, reads.Percentile(0.5) / 1e3, reads.Percentile(0.99) / 1e3, writes.count / secs,
                  writes.Percentile(0.5) / 1e3, writes.Percentile(0.99) / 1e3);
    }
  }
  return 0;
}

}  // namespace
}  // namespace nasgw::bench

namespace nasgw::bench {
int FsMain(int argc, char** argv);        // bench/fs_bench.cc
int SnapshotMain(int argc, char** argv);  // bench/snapshot_bench.cc
}  // namespace nasgw::bench

int main(int argc, char** argv) {
  if (argc >= 2 && (std::string(argv[1]) == "fs" || std::string(argv[1]) == "posix" ||
                    std::string(argv[1]) == "client" || std::string(argv[1]) == "uds")) {
    return nasgw::bench::FsMain(argc, argv);
  }
  if (argc >= 2 && std::string(argv[1]) == "snapshots") return nasgw::bench::SnapshotMain(argc, argv);
  return nasgw::bench::Main(argc, argv);
}
