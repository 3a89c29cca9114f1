#include "cache/data_cache.h"

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "base/clock.h"
#include "block/mem_device.h"

namespace nasgw::cache {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class DataCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<fs::Reserve::Device> devs;
    for (int i = 0; i < 2; i++) {
      media_.push_back(std::make_shared<block::MemLun>(512, 96 * kMiB / 512, "naa.cache" + std::to_string(i)));
      devs_.push_back(std::make_shared<block::MemDevice>(media_.back()));
      devs.push_back(devs_.back());
    }
    fs::ReserveOptions o;
    o.name = "cache";
    o.ag_bytes = 4 * kMiB;
    reserve_ = std::move(fs::Reserve::Format(devs, o).value());
    auto d = fs::Domain::Create(reserve_, 0, DomainOptions());
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dom_ = std::move(d.value());
    auto v = dom_->CreateVolume("vol1", 16 << 10);  // small records: flushes span several
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    vol_ = v->id;
  }
  void TearDown() override {
    cache_.reset();
    dom_.reset();
  }
  static fs::DomainOptions DomainOptions() {
    fs::DomainOptions o;
    o.store.write_buffer_bytes = 256 << 10;
    o.store.block_cache_bytes = 1 << 20;
    o.metafs.log_compact_bytes = 512 << 10;
    // No timed transaction group during a test: one that writes the intent
    // log while a test fails array writes would fail the log for good.
    o.txg_interval_ms = 600'000;
    return o;
  }
  void StartCache(DataCacheOptions o = {}) {
    ASSERT_TRUE(o.Validate().ok()) << o.Validate().ToString();
    cache_.reset();
    cache_ = std::make_unique<DataCache>(dom_, o);
  }
  // Drops the cache without flushing what it holds (as a crash does), then
  // cuts the power and opens the domain again.
  void Crash() {
    for (auto& d : devs_) d->SetFault([](const block::IoRequest&) { return Status::IoError("crashed"); });
    cache_.reset();
    dom_.reset();
    for (auto& m : media_) m->PowerCut();
    devs_.clear();
    std::vector<fs::Reserve::Device> devs;
    for (auto& m : media_) {
      devs_.push_back(std::make_shared<block::MemDevice>(m));
      devs.push_back(devs_.back());
    }
    auto r = fs::Reserve::Open(devs);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    reserve_ = std::move(r.value());
    auto d = fs::Domain::Open(reserve_, 0, DomainOptions());
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dom_ = std::move(d.value());
  }
  fs::Attr Mk(const std::string& name) {
    auto a = dom_->Create(vol_, fs::kRootIno, name, fs::FileType::kRegular, 0644, 0, 0);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? *a : fs::Attr{};
  }
  fs::Attr Committed(uint64_t ino) {
    auto a = dom_->GetAttr(vol_, ino);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? *a : fs::Attr{};
  }
  // What the domain holds (no cache).
  std::string OnSan(uint64_t ino) {
    const fs::Attr a = Committed(ino);
    std::string s(a.size, 0);
    auto n = dom_->Read(vol_, ino, 0, s.size(), s.data());
    EXPECT_TRUE(n.ok());
    s.resize(n.ok() ? *n : 0);
    return s;
  }
  // n bytes at off as a client reads them (through the cache).
  std::string SeenAt(uint64_t ino, uint64_t off, size_t n) {
    std::string s(n, 'x');
    uint64_t size = 0;
    auto got = cache_->Read(vol_, Committed(ino), off, n, s.data(), &size);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    s.resize(got.ok() ? *got : 0);
    return s;
  }
  // Counts the bytes read from the array from now on (read_bytes_).
  void CountReads() {
    read_bytes_ = 0;
    for (auto& d : devs_) {
      d->SetFault([this](const block::IoRequest& r) {
        if (r.op == block::Op::kRead) read_bytes_ += r.blocks * 512;
        return Status();
      });
    }
  }
  // What a client reads (through the cache).
  std::string Seen(uint64_t ino) {
    const fs::Attr a = cache_->Overlay(vol_, Committed(ino));
    std::string s(a.size + 100, 'x');
    uint64_t size = 0;
    auto n = cache_->Read(vol_, Committed(ino), 0, s.size(), s.data(), &size);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(size, a.size);
    s.resize(n.ok() ? *n : 0);
    return s;
  }
  fs::Attr Write(const fs::Attr& f, uint64_t off, const std::string& data, bool stable = false) {
    bool st = false;
    auto w = cache_->Write(vol_, Committed(f.ino), off, data.data(), data.size(), stable, &st);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_EQ(st, stable || opts_.write_through);
    return w.ok() ? *w : fs::Attr{};
  }
  static void Put(std::string& model, uint64_t off, const std::string& data) {
    if (model.size() < off + data.size()) model.resize(off + data.size(), '\0');
    model.replace(off, data.size(), data);
  }

  // A volume with the default record size (128 KiB), used from then on.
  void UseDefaultVolume() {
    auto v = dom_->CreateVolume("defaults");
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    ASSERT_EQ(v->record_bytes, fs::kRecordBytesDefault);
    vol_ = v->id;
  }
  // fsck finds nothing.
  void ExpectFsckClean() {
    auto problems = dom_->Check();
    ASSERT_TRUE(problems.ok()) << problems.status().ToString();
    EXPECT_TRUE(problems->empty()) << problems->front();
  }
  // fsck finds nothing; after a crash the file holds `model`.
  void CleanAndKeptAcrossACrash(uint64_t ino, const std::string& model) {
    ExpectFsckClean();
    Crash();
    EXPECT_EQ(OnSan(ino), model);
  }
  // Counts the writes that reach the array, and fails them while failing_.
  void InjectFaults() {
    for (auto& d : devs_) {
      d->SetFault([this](const block::IoRequest& r) {
        if (r.op != block::Op::kWrite) return Status();
        writes_++;
        write_bytes_ += r.blocks * 512;
        return failing_ ? Status::IoError("injected") : Status();
      });
    }
  }

  std::atomic<int> writes_{0};
  std::atomic<uint64_t> write_bytes_{0};  // everything written: data, intent log, metadata
  std::atomic<uint64_t> read_bytes_{0};
  std::atomic<bool> failing_{false};
  std::vector<std::shared_ptr<block::MemLun>> media_;
  std::vector<std::shared_ptr<block::MemDevice>> devs_;
  std::shared_ptr<fs::Reserve> reserve_;
  std::shared_ptr<fs::Domain> dom_;
  std::unique_ptr<DataCache> cache_;
  DataCacheOptions opts_;
  uint32_t vol_ = 0;
};

DataCacheOptions NoFlusher() {
  DataCacheOptions o;
  o.flush_after_ms = limits::kCacheFlushAfterMsMax;  // nothing is due during a test
  return o;
}

TEST_F(DataCacheTest, UnstableWritesAreAnsweredFromMemoryUntilFlushed) {
  StartCache(NoFlusher());
  const fs::Attr f = Mk("f");
  InjectFaults();
  const fs::Attr shown = Write(f, 100, "hello cache");
  EXPECT_EQ(shown.size, 111u);
  EXPECT_EQ(writes_.load(), 0) << "an unstable write reached the SAN";
  EXPECT_EQ(Committed(f.ino).size, 0u);
  EXPECT_EQ(Seen(f.ino), std::string(100, '\0') + "hello cache");
  EXPECT_EQ(cache_->stats().dirty_bytes, 11u);
  EXPECT_EQ(cache_->stats().writes_cached, 1u);

  ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok());
  EXPECT_EQ(OnSan(f.ino), std::string(100, '\0') + "hello cache");
  const fs::Attr after = Committed(f.ino);
  EXPECT_EQ(after.size, 111u);
  EXPECT_EQ(after.mtime, shown.mtime) << "the flush keeps the time of the write";
  EXPECT_EQ(cache_->stats().dirty_bytes, 0u);
  EXPECT_EQ(cache_->stats().dirty_files, 0u);
  EXPECT_EQ(cache_->stats().flushes, 1u);
}

// Strict mode for one volume (`nasgw volume set --write-through on`): an
// UNSTABLE write to it is answered once in its place, never from memory or
// the log; the setting is in the volume record, so it holds after a crash,
// and turned off the volume's writes are cached again.
TEST_F(DataCacheTest, AVolumeInStrictModeHasEveryWriteInPlaceBeforeItsAnswer) {
  StartCache(NoFlusher());
  auto on = dom_->SetVolumeWriteThrough("vol1", true);
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->write_through);
  const fs::Attr f = Mk("f");
  auto write = [&](const std::string& data, bool* stable) {
    auto w = cache_->Write(vol_, Committed(f.ino), 0, data.data(), data.size(), false, stable);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
  };
  bool stable = false;
  write("strict", &stable);
  EXPECT_TRUE(stable) << "an UNSTABLE write to a strict volume is answered FILE_SYNC";
  EXPECT_EQ(cache_->stats().dirty_bytes, 0u);
  EXPECT_EQ(cache_->stats().writes_stable, 1u);
  EXPECT_EQ(cache_->stats().writes_logged + cache_->stats().writes_cached, 0u);
  Crash();
  EXPECT_EQ(OnSan(f.ino), "strict");
  EXPECT_TRUE(dom_->VolumeWriteThrough(vol_)) << "strict mode is kept in the volume record";
  StartCache(NoFlusher());
  write("STRICT", &stable);
  EXPECT_TRUE(stable);
  auto off = dom_->SetVolumeWriteThrough("vol1", false);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->write_through);
  write("cached", &stable);
  EXPECT_FALSE(stable) << "back to write-back";
  EXPECT_EQ(cache_->stats().dirty_bytes, 6u);
  EXPECT_EQ(dom_->SetVolumeWriteThrough("nope", true).status().code(), Code::kNotFound);
}

// While the intent log's records are slow to reach the array (they queue
// behind a saturated array link), a stable write goes to its place instead
// of the log, so its bytes cross the link once, not twice; once the log is
// quick again, stable writes are logged again. Every one of them is on the
// SAN when answered.
TEST_F(DataCacheTest, StableWritesGoToTheirPlaceWhileTheLogIsSlow) {
  DataCacheOptions o = NoFlusher();
  o.log_slow_ms = 5;
  StartCache(o);
  const fs::Attr f = Mk("f");
  std::string model;
  auto stable_write = [&](int i) {
    const std::string d(8192, static_cast<char>('a' + i % 26));
    Write(f, uint64_t(i % 8) * 8192, d, /*stable=*/true);
    Put(model, uint64_t(i % 8) * 8192, d);
  };
  int i = 0;
  stable_write(i++);
  EXPECT_EQ(cache_->stats().writes_logged, 1u);
  // A slow array: every write takes 20 ms (the log's records among them).
  std::atomic<bool> slow{true};
  for (auto& d : devs_) {
    d->SetFault([&slow](const block::IoRequest& r) {
      if (r.op == block::Op::kWrite && slow) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return Status();
    });
  }
  while (cache_->stats().writes_log_slow == 0 && i < 30) stable_write(i++);
  ASSERT_GT(cache_->stats().writes_log_slow, 0u) << "stable writes kept going to a slow log";
  EXPECT_GE(dom_->log_recent_write_ns(), 5'000'000u);
  // The one that went to its place is there now, with no flush.
  EXPECT_EQ(OnSan(f.ino), model);
  const uint64_t logged = cache_->stats().writes_logged;
  slow = false;
  while (cache_->stats().writes_logged == logged && i < 60) stable_write(i++);
  EXPECT_GT(cache_->stats().writes_logged, logged) << "stable writes never went back to the log";
  for (auto& d : devs_) d->SetFault(nullptr);
  CleanAndKeptAcrossACrash(f.ino, model);
}

TEST_F(DataCacheTest, TheChangeAttributeCountsCachedWritesAndNeverGoesBack) {
  DataCacheOptions o = NoFlusher();
  o.flush_bytes_max = 64 << 10;  // the flush below takes several transactions
  StartCache(o);
  const fs::Attr f = Mk("f");
  uint64_t last = Committed(f.ino).change;
  for (int i = 0; i < 20; i++) {
    const fs::Attr shown = Write(f, uint64_t(i) * 50'000, std::string(50'000, 'c'));
    EXPECT_GT(shown.change, last) << "write " << i;
    last = shown.change;
  }
  ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok());
  EXPECT_GT(cache_->stats().flushes, 1u);
  EXPECT_GE(Committed(f.ino).change, last) << "the flush took the change attribute back";
  EXPECT_EQ(cache_->Overlay(vol_, Committed(f.ino)).change, Committed(f.ino).change);
  // As the head writes: with the attributes it showed (dirty data laid
  // over), logged and unstable writes mixed, a flush between. The change
  // attribute goes up by one per write, also across the flush.
  last = Committed(f.ino).change;
  for (int i = 0; i < 20; i++) {
    auto seen = cache_->Shown(vol_, [&] { return dom_->GetAttr(vol_, f.ino); });
    ASSERT_TRUE(seen.ok());
    EXPECT_EQ(seen->change, last) << "before write " << i;
    bool st = false;
    auto w = cache_->Write(vol_, *seen, uint64_t(i) * 8192, std::string(8192, 'h').data(), 8192, i % 2 == 0, &st);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_EQ(w->change, last + 1) << "write " << i;
    last = w->change;
    if (i == 10) {
      ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok());
    }
  }
}

TEST_F(DataCacheTest, OverwritesAndNeighboursCoalesceIntoOneFlush) {
  StartCache(NoFlusher());
  const fs::Attr f = Mk("f");
  std::string model;
  // 64 sequential 4 KiB writes, then overwrites inside and across them.
  for (int i = 0; i < 64; i++) {
    const std::string d(4096, static_cast<char>('a' + i % 26));
    Write(f, uint64_t(i) * 4096, d);
    Put(model, uint64_t(i) * 4096, d);
  }
  for (uint64_t off : {100ull, 4000ull, 65536ull, 200000ull}) {
    const std::string d(9000, 'Z');
    Write(f, off, d);
    Put(model, off, d);
  }
  EXPECT_EQ(cache_->stats().dirty_bytes, model.size()) << "overwritten bytes are held once";
  EXPECT_EQ(Seen(f.ino), model);
  ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok());
  EXPECT_EQ(cache_->stats().flushes, 1u);
  EXPECT_EQ(OnSan(f.ino), model);
}

TEST_F(DataCacheTest, StableWritesAndFlushSurviveACrashAndUnstableOnesMayNot) {
  StartCache(NoFlusher());
  const fs::Attr f = Mk("f"), g = Mk("g"), h = Mk("h");
  Write(f, 0, "unstable then committed");
  ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok());
  Write(g, 0, std::string(5000, 'g'), /*stable=*/true);
  Write(h, 0, "never committed");
  Crash();
  EXPECT_EQ(OnSan(f.ino), "unstable then committed");
  EXPECT_EQ(OnSan(g.ino), std::string(5000, 'g'));
  EXPECT_EQ(Committed(h.ino).size, 0u) << "an unstable write was on the SAN without a flush";
  ExpectFsckClean();
}

// A stable write small enough for the intent log costs one log write,
// shared by every stable write waiting at that moment (group commit); its
// data reaches its place later, with the file's other dirty data.
TEST_F(DataCacheTest, StableWritesShareLogWritesAndReachTheirPlaceLater) {
  DataCacheOptions o = NoFlusher();
  o.log_slow_ms = 0;  // the held first record must not send the others to their place
  StartCache(o);
  constexpr int kThreads = 16, kEach = 6;  // well inside the small test log
  std::vector<fs::Attr> files;
  files.reserve(kThreads);
  for (int t = 0; t < kThreads; t++) files.push_back(Mk("s" + std::to_string(t)));
  // The array holds the first write until every writer has begun, so the
  // others' entries wait behind it (as they do behind a slow array).
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  bool held = false;
  for (auto& d : devs_) {
    d->SetFault([&](const block::IoRequest& r) {
      if (r.op != block::Op::kWrite) return Status();
      write_bytes_ += r.blocks * 512;
      std::unique_lock<std::mutex> l(mu);
      if (!held) {
        held = true;
        cv.wait_for(l, std::chrono::seconds(10), [&] { return started == kThreads; });
      }
      return Status();
    });
  }
  const fs::IntentLogStats before = dom_->LogStats();
  write_bytes_ = 0;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      {
        std::lock_guard<std::mutex> l(mu);
        started++;
        cv.notify_all();
      }
      for (int i = 0; i < kEach; i++) Write(files[t], i * 8192ull, std::string(8192, static_cast<char>('a' + t)), true);
    });
  }
  for (auto& th : threads) th.join();
  for (auto& d : devs_) d->SetFault(nullptr);
  const fs::IntentLogStats after = dom_->LogStats();
  const uint64_t records = after.records - before.records;
  EXPECT_EQ(cache_->stats().writes_logged, uint64_t{kThreads} * kEach);
  // The log's records and a few superblock and store writes (36 KiB seen
  // under TSan): no data (768 KiB).
  EXPECT_LE(write_bytes_.load(), after.bytes_written - before.bytes_written + (128u << 10))
      << "a logged write wrote more than the log";
  EXPECT_LT(records, uint64_t{kThreads} * kEach) << "no two stable writes shared a log write";
  RecordProperty("log_records", static_cast<int>(records));
  for (int t = 0; t < kThreads; t++) EXPECT_EQ(Committed(files[t].ino).size, 0u) << "data reached its place early";
  // After a crash before any flush, every stable write is there.
  Crash();
  for (int t = 0; t < kThreads; t++) {
    EXPECT_EQ(OnSan(files[t].ino), std::string(8192ull * kEach, static_cast<char>('a' + t))) << "file " << t;
  }
  ExpectFsckClean();
}

// A flush that carries newer (unstable) bytes over a logged write tells the
// log so: after a crash the newer bytes stay, the logged ones do not come
// back over them; a file removed after its logged write stays removed.
TEST_F(DataCacheTest, AReplayNeverWritesALoggedWriteOverNewerData) {
  StartCache(NoFlusher());
  const fs::Attr f = Mk("f"), g = Mk("g");
  Write(f, 0, std::string(8192, 'L'), /*stable=*/true);
  Write(f, 0, std::string(8192, 'N'));
  ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok());
  Write(g, 0, std::string(4096, 'G'), /*stable=*/true);
  ASSERT_TRUE(dom_->Unlink(vol_, fs::kRootIno, "g").ok());
  const fs::Attr g2 = Mk("g");
  Crash();
  EXPECT_EQ(OnSan(f.ino), std::string(8192, 'N'));
  EXPECT_FALSE(dom_->GetAttr(vol_, g.ino).ok()) << "a removed file came back";
  EXPECT_EQ(Committed(g2.ino).size, 0u);
  ExpectFsckClean();
  EXPECT_EQ(dom_->oldest_logged_write(), 0u) << "the replay left logged writes pinned";
}

// A COMMIT of a little dirty data logs it, as a stable write would (one
// log write, not the data's blocks and then a log record), and the data
// reaches its place later; a second COMMIT with nothing new logs nothing.
// After a crash before any flush the committed bytes are there and what
// was written after the COMMIT is not.
TEST_F(DataCacheTest, ACommitLogsALittleDirtyDataAndACrashKeepsIt) {
  DataCacheOptions o = NoFlusher();
  o.log_slow_ms = 0;
  StartCache(o);
  const fs::Attr f = Mk("f");
  std::string model;
  for (uint64_t i = 0; i < 5; i++) {
    const std::string d(4000, static_cast<char>('a' + i));
    Write(f, i * 6000, d);
    Put(model, i * 6000, d);
  }
  const fs::IntentLogStats before = dom_->LogStats();
  ASSERT_TRUE(cache_->Commit(vol_, f.ino).ok());
  const fs::IntentLogStats logged = dom_->LogStats();
  EXPECT_EQ(cache_->stats().commits_logged, 1u);
  EXPECT_EQ(cache_->stats().commits_flushed, 0u);
  EXPECT_EQ(logged.appended_lsn - before.appended_lsn, 5u) << "one log entry for each dirty range";
  EXPECT_EQ(Committed(f.ino).size, 0u) << "the data went to its place before the answer";
  ASSERT_TRUE(cache_->Commit(vol_, f.ino).ok());
  EXPECT_EQ(dom_->LogStats().appended_lsn, logged.appended_lsn) << "a COMMIT with nothing new logged again";
  EXPECT_EQ(cache_->stats().commits_logged, 2u);
  // The next COMMIT logs only what was written since (the logged bytes are
  // still dirty, waiting for the flusher).
  Write(f, 40000, "next");
  Put(model, 40000, "next");
  ASSERT_TRUE(cache_->Commit(vol_, f.ino).ok());
  EXPECT_EQ(dom_->LogStats().appended_lsn, logged.appended_lsn + 1) << "a COMMIT logged again what one before had";
  Write(f, 100000, "after the commit");
  Crash();
  EXPECT_EQ(OnSan(f.ino), model);
  ExpectFsckClean();
  EXPECT_EQ(dom_->oldest_logged_write(), 0u) << "the replay left logged writes pinned";
}

// More dirty data than a COMMIT logs without a partner's mirror (a stable
// write's limit) goes to its place before the answer; with log_commits off,
// any.
TEST_F(DataCacheTest, ACommitOfMoreThanItLogsFlushesInPlace) {
  DataCacheOptions o = NoFlusher();
  o.log_slow_ms = 0;
  StartCache(o);
  const fs::Attr f = Mk("f");
  const std::string big(limits::kLogWriteBytesMax + 4096, 'b');
  Write(f, 0, big);
  const uint64_t lsn = dom_->LogStats().appended_lsn;
  ASSERT_TRUE(cache_->Commit(vol_, f.ino).ok());
  EXPECT_EQ(cache_->stats().commits_flushed, 1u);
  EXPECT_EQ(cache_->stats().commits_logged, 0u);
  EXPECT_EQ(OnSan(f.ino), big);
  EXPECT_LE(dom_->LogStats().appended_lsn - lsn, 1u) << "the data went to the log (only the flush's batch may)";
  // log_commits off: a small one goes to its place too.
  o.log_commits = false;
  StartCache(o);
  Write(f, 0, "small");
  ASSERT_TRUE(cache_->Commit(vol_, f.ino).ok());
  EXPECT_EQ(cache_->stats().commits_flushed, 1u);
  EXPECT_EQ(cache_->stats().commits_logged, 0u);
  EXPECT_EQ(OnSan(f.ino).substr(0, 5), "small");
}

// A partner's mirror of the intent log in memory: it holds every entry and
// acknowledges from its own thread (as cluster/mirror.cc's stream does).
class AckingMirror : public fs::LogMirror {
 public:
  ~AckingMirror() override { Stop(); }
  void Start(std::shared_ptr<fs::MirrorAcks> acks) {
    acks_ = std::move(acks);
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> l(mu_);
      for (;;) {
        cv_.wait(l, [&] { return stop_ || last_ > acked_; });
        if (stop_) return;
        acked_ = last_;
        const uint64_t lsn = acked_;
        l.unlock();
        acks_->Acked(lsn);
        l.lock();
      }
    });
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void Mirror(uint64_t lsn, std::string_view entry) override {
    std::lock_guard<std::mutex> l(mu_);
    bytes_ += entry.size();
    last_ = lsn;
    cv_.notify_all();
  }
  void Durable(uint64_t) override {}
  uint64_t bytes() {
    std::lock_guard<std::mutex> l(mu_);
    return bytes_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t bytes_ = 0, last_ = 0, acked_ = 0;
  bool stop_ = false;
  std::shared_ptr<fs::MirrorAcks> acks_;
  std::thread thread_;
};

// With a partner's mirror answering for the log, a COMMIT logs up to
// kCommitLogBytesMax of dirty data and is answered from the partner's
// memory while the array has none of it; after a crash it is all there.
TEST_F(DataCacheTest, WithAMirrorACommitIsAnsweredByThePartnersMemory) {
  DataCacheOptions o = NoFlusher();
  o.log_slow_ms = 0;
  StartCache(o);
  const fs::Attr f = Mk("f");
  ASSERT_TRUE(dom_->SyncTxg().ok());
  auto mirror = std::make_shared<AckingMirror>();
  auto start = dom_->AttachLogMirror(mirror);
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  mirror->Start(start->acks);
  std::string model;
  for (uint64_t i = 0; i < 8; i++) {
    const std::string d(64 << 10, static_cast<char>('m' + i));
    Write(f, i * d.size(), d);
    Put(model, i * d.size(), d);
  }
  static_assert(uint64_t{8} * (64 << 10) > limits::kLogWriteBytesMax &&
                uint64_t{8} * (64 << 10) <= limits::kCommitLogBytesMax);
  // The array takes no write until the COMMIT is answered (or, should it
  // wait for the array, for 8 s: then it fails, and does not hang).
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  for (auto& d : devs_) {
    d->SetFault([&](const block::IoRequest& r) {
      if (r.op != block::Op::kWrite) return Status();
      std::unique_lock<std::mutex> l(mu);
      cv.wait_until(l, deadline, [&] { return release; });
      return Status();
    });
  }
  const uint64_t t0 = MonotonicNanos();
  const Status committed = cache_->Commit(vol_, f.ino);
  const uint64_t took_ms = (MonotonicNanos() - t0) / 1'000'000;
  {
    std::lock_guard<std::mutex> l(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(committed.ok()) << committed.ToString();
  EXPECT_LT(took_ms, 4'000u) << "the COMMIT waited for the array";
  EXPECT_EQ(cache_->stats().commits_logged, 1u);
  EXPECT_GE(mirror->bytes(), model.size()) << "the partner does not hold the data";
  EXPECT_GE(dom_->LogStats().mirror_acks, 1u);
  EXPECT_EQ(Committed(f.ino).size, 0u) << "the data went to its place before the answer";
  for (auto& d : devs_) d->SetFault(nullptr);
  // Every record reaches the array too (the mirror is the second copy):
  // once it has, a crash of this node keeps the data.
  dom_->DetachLogMirror(mirror.get());
  mirror->Stop();
  ASSERT_TRUE(dom_->WaitLogged(dom_->LogStats().appended_lsn).ok());
  Crash();
  EXPECT_EQ(OnSan(f.ino), model);
  ExpectFsckClean();
}

TEST_F(DataCacheTest, TheFlusherWritesDueFilesInTheBackground) {
  DataCacheOptions o;
  o.flush_after_ms = 20;
  StartCache(o);
  const fs::Attr f = Mk("f");
  Write(f, 0, "background");
  // Nobody but the flusher writes it; wait for that (bounded).
  ASSERT_TRUE(cache_->WaitClean(10'000)) << "the flusher never wrote the file";
  EXPECT_EQ(cache_->stats().flushes, 1u);
  EXPECT_EQ(OnSan(f.ino), "background");
}

TEST_F(DataCacheTest, AFailingArrayKeepsTheDataDirtyAndStallsWritersThenRecovers) {
  DataCacheOptions o;
  o.dirty_bytes = limits::kCacheDirtyBytesMin;
  o.stall_timeout_ms = 200;
  o.flush_after_ms = 10;
  StartCache(o);
  const fs::Attr f = Mk("f");
  failing_ = true;
  InjectFaults();
  std::string model;
  const std::string chunk(256 << 10, 'q');
  Status last;
  uint64_t off = 0;
  for (int i = 0; i < 40 && last.ok(); i++, off += chunk.size()) {
    bool st = false;
    auto w = cache_->Write(vol_, Committed(f.ino), off, chunk.data(), chunk.size(), false, &st);
    last = w.status();
    if (w.ok()) Put(model, off, chunk);
  }
  EXPECT_EQ(last.code(), Code::kBusy) << last.ToString();
  EXPECT_GE(cache_->stats().stall_timeouts, 1u);
  EXPECT_GE(cache_->stats().flush_errors, 1u);
  EXPECT_LE(cache_->stats().dirty_bytes, o.dirty_bytes + chunk.size());
  EXPECT_FALSE(cache_->Flush(vol_, f.ino).ok()) << "a COMMIT must not succeed while the array fails";
  EXPECT_EQ(Seen(f.ino), model) << "the data stays readable from the cache";
  failing_ = false;
  ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok());
  EXPECT_EQ(OnSan(f.ino), model);
  EXPECT_EQ(cache_->stats().dirty_bytes, 0u);
}

TEST_F(DataCacheTest, AFileDeletedBeforeItsFlushTakesItsDirtyDataWithIt) {
  StartCache(NoFlusher());
  const fs::Attr f = Mk("f");
  Write(f, 0, std::string(10000, 'd'));
  ASSERT_TRUE(dom_->Unlink(vol_, fs::kRootIno, "f").ok());
  EXPECT_TRUE(cache_->FlushAll().ok());
  EXPECT_EQ(cache_->stats().dirty_bytes, 0u);
  EXPECT_EQ(cache_->stats().flush_dropped, 10000u);
}

TEST_F(DataCacheTest, AFullVolumeRefusesWritesWhenAcceptedNeverAtTheirFlush) {
  StartCache(NoFlusher());
  const fs::Attr f = Mk("fill");
  const std::string chunk(1 << 20, 'n');
  std::string model;
  Status last;
  for (uint64_t off = 0; off < 1024 * kMiB && last.ok(); off += chunk.size()) {
    bool st = false;
    auto w = cache_->Write(vol_, Committed(f.ino), off, chunk.data(), chunk.size(), false, &st);
    last = w.status();
    if (w.ok()) Put(model, off, chunk);
  }
  EXPECT_EQ(last.code(), Code::kNoSpace) << last.ToString();
  EXPECT_GT(model.size(), 32 * kMiB) << "refused long before the volume was full";
  EXPECT_EQ(cache_->stats().no_space, 1u);
  EXPECT_LT(dom_->Statfs().free_bytes, 2 * kMiB) << "the reservation is not available to others";
  ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok()) << "an accepted write failed at its flush";
  EXPECT_EQ(OnSan(f.ino), model);
  ASSERT_TRUE(dom_->Unlink(vol_, fs::kRootIno, "fill").ok());
  EXPECT_GT(dom_->Statfs().free_bytes, model.size());
  ExpectFsckClean();
}

// Random unstable and stable writes, reads, flushes and truncations (flush
// first, as the head does) on several files from several threads, with the
// flusher running: what a client reads is always the model, and after the
// last flush so is the SAN.
// The bound: bytes written to the array over bytes clients wrote,
// for 8K random overwrites on a volume with default settings, at most 1.5
// (everything counted: data, intent log, metadata store).
TEST_F(DataCacheTest, EightKRandomOverwritesWriteAtMostOneAndAHalfTimesTheirBytes) {
  UseDefaultVolume();
  StartCache(NoFlusher());
  const fs::Attr f = Mk("big");
  constexpr uint64_t kFile = 32 * kMiB, kIo = 8 << 10;
  std::string model(kFile, '\0');
  std::mt19937_64 rng(12);
  for (uint64_t at = 0; at < kFile; at += kMiB) {
    for (uint64_t i = 0; i < kMiB; i++) model[at + i] = static_cast<char>(rng());
    Write(f, at, model.substr(at, kMiB));
  }
  ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok());
  const uint64_t blocks = Committed(f.ino).blocks;
  InjectFaults();
  constexpr int kWrites = 2000;
  const uint64_t free_before = dom_->Statfs().free_bytes;
  for (int i = 0; i < kWrites; i++) {
    const uint64_t at = rng() % (kFile / kIo) * kIo;
    std::string data(kIo, 0);
    for (auto& c : data) c = static_cast<char>(rng());
    model.replace(at, kIo, data);
    Write(f, at, data);
    if (i == 499) {
      // Space is set aside per block written, not per record.
      const uint64_t reserved = free_before - dom_->Statfs().free_bytes;
      EXPECT_GT(reserved, 0u);
      EXPECT_LE(reserved, 500 * kIo);
    }
    if (i % 500 == 499) {
      ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok());  // four flushes
    }
  }
  ASSERT_TRUE(dom_->SyncTxg().ok());  // the metadata at its final place too
  const double amp = static_cast<double>(write_bytes_.load()) / (kWrites * kIo);
  RecordProperty("write_amplification", std::to_string(amp));
  EXPECT_LE(amp, 1.5) << write_bytes_.load() << " bytes reached the array for " << kWrites * kIo;
  EXPECT_GE(amp, 0.5) << "the writes did not all reach the array";
  // Overwrites replace blocks: the file holds what it held.
  EXPECT_EQ(Committed(f.ino).blocks, blocks);
  EXPECT_EQ(OnSan(f.ino), model);
  CleanAndKeptAcrossACrash(f.ino, model);
}

// Writes that cover blocks in part keep the rest of each block; truncation
// zeroes what lies past the end, so a file grown again reads zeros there.
TEST_F(DataCacheTest, PartialBlocksAndTruncationKeepTheBytesAround) {
  UseDefaultVolume();
  StartCache(NoFlusher());
  const fs::Attr f = Mk("f");
  std::string model(300 << 10, 'a');
  Write(f, 0, model, /*stable=*/true);
  auto put = [&](uint64_t at, const std::string& d) {
    if (model.size() < at + d.size()) model.resize(at + d.size(), '\0');
    model.replace(at, d.size(), d);
    Write(f, at, d);
  };
  put(100, "x");                        // inside one block
  put(4090, std::string(20, 'y'));      // across a block boundary
  put(130000, std::string(5000, 'z'));  // across a record boundary (128 KiB)
  put(8192, std::string(4096, 'w'));    // exactly a block
  ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok());
  EXPECT_EQ(OnSan(f.ino), model);
  // Truncate into the middle of a block, then grow: zeros past the cut.
  fs::SetAttr s;
  s.set_size = true;
  s.size = 131072 + 1000;
  ASSERT_TRUE(cache_->SetAttrs(vol_, f.ino, s).ok());
  model.resize(s.size);
  s.size = 200 << 10;
  ASSERT_TRUE(cache_->SetAttrs(vol_, f.ino, s).ok());
  model.resize(s.size, '\0');
  EXPECT_EQ(OnSan(f.ino), model);
  EXPECT_TRUE(Seen(f.ino) == model) << "the read cache kept bytes a truncation cut";
  put(150000, "tail");  // a write past the old end, in the cut record
  ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok());
  EXPECT_EQ(OnSan(f.ino), model);
  EXPECT_TRUE(Seen(f.ino) == model);
  CleanAndKeptAcrossACrash(f.ino, model);
}

// A punched hole takes dirty data with it and cached clean blocks leave the
// read cache; SEEK_DATA finds data that is still only in memory.
TEST_F(DataCacheTest, FallocateAndSeekSeeTheDirtyData) {
  UseDefaultVolume();
  StartCache(NoFlusher());
  const fs::Attr f = Mk("f");
  std::string model(256 << 10, 'a');
  Write(f, 0, model, /*stable=*/true);
  EXPECT_TRUE(Seen(f.ino) == model);  // now in the read cache
  std::string dirty(8192, 'd');
  Write(f, 512 << 10, dirty);  // unstable: only in memory, past a hole
  model.resize(512 << 10, '\0');
  model += dirty;
  auto d = cache_->Seek(vol_, f.ino, 300 << 10, false);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, 512u << 10) << "the dirty data counts as data";
  Write(f, 1000, std::string(3000, 'x'));  // dirty, inside the range punched next
  auto a = cache_->Fallocate(vol_, f.ino, fs::kFallocPunchHole | fs::kFallocKeepSize, 100, 70000);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->size, model.size());
  std::fill_n(model.begin() + 100, 70000, '\0');
  EXPECT_TRUE(Seen(f.ino) == model) << "the read cache or the dirty data kept punched bytes";
  EXPECT_EQ(OnSan(f.ino), model);
  auto h = cache_->Seek(vol_, f.ino, 0, true);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, 4096u) << "the first whole block punched is the first hole";
  CleanAndKeptAcrossACrash(f.ino, model);
}

// Holds every write of 64 KiB or more (a flush's data, not the metadata's
// small writes) in the array until LetGo(), which the destructor calls too,
// whatever failed.
class StuckArray {
 public:
  explicit StuckArray(std::vector<std::shared_ptr<block::MemDevice>> devs) : devs_(std::move(devs)) {
    for (auto& d : devs_) {
      d->SetFault([st = st_](const block::IoRequest& r) {
        if (r.op != block::Op::kWrite || r.blocks * 512 < (64u << 10)) return Status();
        std::unique_lock<std::mutex> l(st->mu);
        st->stuck = true;
        st->cv.notify_all();
        st->cv.wait(l, [&] { return st->release; });
        return Status();
      });
    }
  }
  ~StuckArray() {
    LetGo();
    for (auto& d : devs_) d->SetFault(nullptr);
  }
  bool WaitStuck() {
    std::unique_lock<std::mutex> l(st_->mu);
    return st_->cv.wait_for(l, std::chrono::seconds(30), [this] { return st_->stuck; });
  }
  void LetGo() {
    std::lock_guard<std::mutex> l(st_->mu);
    st_->release = true;
    st_->cv.notify_all();
  }

 private:
  struct State {  // shared with the fault handlers, which may outlive this
    std::mutex mu;
    std::condition_variable cv;
    bool stuck = false, release = false;
  };
  std::shared_ptr<State> st_ = std::make_shared<State>();
  std::vector<std::shared_ptr<block::MemDevice>> devs_;
};

// A flush moves its data with no domain-wide lock held: while its array
// write hangs, other files are created, written through, read and looked
// up, and the flushing file's own data reads right.
TEST_F(DataCacheTest, AFlushStuckInTheArrayHoldsUpNoOtherOperation) {
  UseDefaultVolume();  // 128 KiB records: the flush writes 128 KiB at a time
  StartCache(NoFlusher());
  const fs::Attr a = Mk("a");
  const fs::Attr b = Mk("b");
  Write(b, 0, "bee", /*stable=*/true);
  const std::string data(512 << 10, 'a');
  Write(a, 0, data);
  // The array holds the flush's 512 KiB writes until released.
  StuckArray array(devs_);
  auto flush = std::async(std::launch::async, [&] { return cache_->Flush(vol_, a.ino); });
  ASSERT_TRUE(array.WaitStuck()) << "the flush never wrote";
  auto others = std::async(std::launch::async, [&] {
    const fs::Attr c = Mk("c");
    Write(c, 0, "sea", /*stable=*/true);  // a logged write: through the intent log
    EXPECT_EQ(Seen(c.ino), "sea");
    EXPECT_EQ(Seen(b.ino), "bee");
    EXPECT_TRUE(cache_->Flush(vol_, b.ino).ok());  // a flush of another file, to its place
    EXPECT_EQ(OnSan(b.ino), "bee");
    EXPECT_TRUE(dom_->Lookup(vol_, fs::kRootIno, "b").ok());
    EXPECT_EQ(Seen(a.ino), data);
  });
  const bool done = others.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  array.LetGo();
  EXPECT_TRUE(done) << "other files waited for the stuck flush";
  others.get();
  ASSERT_TRUE(flush.get().ok());
  for (auto& d : devs_) d->SetFault(nullptr);
  EXPECT_EQ(OnSan(a.ino), data);
}

// Over half its budget, the cache flushes several files at once: one whose
// flush is stuck in the array holds up no other file's (a single flusher
// thread would wait behind it, and sequential streams of several files
// would take turns).
TEST_F(DataCacheTest, AFullCacheFlushesOtherFilesWhileOneFlushIsStuck) {
  UseDefaultVolume();
  DataCacheOptions o;
  o.flush_after_ms = 10;
  o.dirty_bytes = limits::kCacheDirtyBytesMin;  // 4 MiB: pressed from 2 MiB
  StartCache(o);
  const fs::Attr a = Mk("a");
  const fs::Attr b = Mk("b");
  StuckArray array(devs_);
  const std::string data(3 << 20, 'a');
  Write(a, 0, data);  // its flush (128 KiB writes) gets stuck, and fills the cache past half
  ASSERT_TRUE(array.WaitStuck()) << "the flusher never wrote a";
  Write(b, 0, "bee");  // due 10 ms later, while a's flush is stuck
  // Nothing tells when the flusher has written b but its counters: wait
  // (bounded) for b on the SAN, with a's flush still stuck.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (OnSan(b.ino) != "bee" && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(OnSan(b.ino), "bee") << "b waited for a's stuck flush";
  array.LetGo();
  ASSERT_TRUE(cache_->Flush(vol_, a.ino).ok());
  for (auto& d : devs_) d->SetFault(nullptr);
  EXPECT_EQ(OnSan(a.ino), data);
}

TEST_F(DataCacheTest, RandomLoadMatchesTheModel) {
  DataCacheOptions o;
  o.flush_after_ms = 10;
  o.dirty_bytes = limits::kCacheDirtyBytesMin;
  o.flush_bytes_max = 64 << 10;  // several transactions per flush
  StartCache(o);
  constexpr int kThreads = 4;
  std::vector<fs::Attr> files;
  files.reserve(kThreads);
  for (int t = 0; t < kThreads; t++) files.push_back(Mk("f" + std::to_string(t)));
  std::vector<std::string> models(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1234 + t);
      std::string& model = models[t];
      const uint64_t ino = files[t].ino;
      for (int op = 0; op < 300 && failures == 0; op++) {
        const int kind = static_cast<int>(rng() % 10);
        auto committed = dom_->GetAttr(vol_, ino);
        if (!committed.ok()) {
          failures++;
          break;
        }
        if (kind < 6) {
          const uint64_t off = rng() % (400 << 10);
          std::string d(1 + rng() % (40 << 10), static_cast<char>('A' + rng() % 26));
          bool st = false;
          auto w = cache_->Write(vol_, *committed, off, d.data(), d.size(), kind == 0, &st);
          if (!w.ok()) {
            ADD_FAILURE() << w.status().ToString();
            failures++;
            break;
          }
          Put(model, off, d);
          if (w->size != model.size()) {
            ADD_FAILURE() << "size shown " << w->size << " model " << model.size();
            failures++;
          }
        } else if (kind < 8) {
          const uint64_t off = rng() % (model.size() + 1);
          const size_t len = 1 + rng() % (64 << 10);
          std::string got(len, 'x');
          uint64_t size = 0;
          // As a head reads: with the attributes it shows (Shown), which a
          // flush ending since cannot make stale.
          auto shown = cache_->Shown(vol_, [&] { return dom_->GetAttr(vol_, ino); });
          if (!shown.ok()) {
            failures++;
            break;
          }
          auto n = cache_->Read(vol_, *shown, off, got.size(), got.data(), &size);
          if (!n.ok()) {
            ADD_FAILURE() << n.status().ToString();
            failures++;
            break;
          }
          got.resize(*n);
          const size_t expect_n = off >= model.size() ? 0 : std::min<size_t>(len, model.size() - off);
          if (size != model.size() || *n != expect_n || got != model.substr(off, expect_n)) {
            ADD_FAILURE() << "thread " << t << " op " << op << ": read at " << off << " differs (size " << size
                          << " model " << model.size() << ", n " << *n << " want " << expect_n << ")";
            failures++;
          }
        } else if (kind == 8) {
          if (!cache_->Flush(vol_, ino).ok()) failures++;
        } else {
          // Truncation: the head flushes the file first.
          if (!cache_->Flush(vol_, ino).ok()) failures++;
          fs::SetAttr s;
          s.set_size = true;
          s.size = rng() % (model.size() + 1);
          if (!cache_->SetAttrs(vol_, ino, s).ok()) failures++;
          model.resize(s.size);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures, 0);
  ASSERT_TRUE(cache_->FlushAll().ok());
  for (int t = 0; t < kThreads; t++) EXPECT_EQ(OnSan(files[t].ino), models[t]) << "file " << t;
  EXPECT_EQ(cache_->stats().dirty_bytes, 0u);
  ExpectFsckClean();
}

// Reads of the clean data: the first from the SAN, the next from memory;
// data just flushed is read from memory too.
TEST_F(DataCacheTest, ReadsAfterTheFirstComeFromMemory) {
  StartCache(NoFlusher());
  const fs::Attr f = Mk("f");
  std::string model(1 << 20, 0);
  for (size_t i = 0; i < model.size(); i++) model[i] = static_cast<char>(i * 13 / 4096 + i);
  Write(f, 0, model);
  ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok());
  CountReads();
  EXPECT_EQ(Seen(f.ino), model);
  EXPECT_EQ(read_bytes_, 0u) << "flushed data was read back from the SAN";
  StartCache(NoFlusher());  // cold
  EXPECT_EQ(Seen(f.ino), model);
  EXPECT_GE(read_bytes_, model.size());
  const uint64_t first = read_bytes_;
  for (uint64_t off = 0; off < model.size(); off += 8192) EXPECT_EQ(SeenAt(f.ino, off, 8192), model.substr(off, 8192));
  EXPECT_EQ(read_bytes_, first);
  const auto st = cache_->stats().read;
  EXPECT_EQ(st.hit_bytes, model.size());
  EXPECT_EQ(st.bytes, model.size());
}

// A sequential scan many times the read cache's share of the budget does
// not push out a working set that was read twice.
TEST_F(DataCacheTest, AScanDoesNotEvictTheHotSet) {
  DataCacheOptions o = NoFlusher();
  o.memory_bytes = 16 * kMiB;
  o.dirty_bytes = 4 * kMiB;
  o.read_ahead_bytes = 0;
  StartCache(o);
  const fs::Attr hot = Mk("hot"), scan = Mk("scan");
  const std::string hot_data(4 * kMiB, 'h');
  for (uint64_t off = 0; off < hot_data.size(); off += kMiB) Write(hot, off, hot_data.substr(off, kMiB));
  ASSERT_TRUE(cache_->Flush(vol_, hot.ino).ok());
  for (uint64_t off = 0; off < 64 * kMiB; off += kMiB) {
    Write(scan, off, std::string(kMiB, static_cast<char>('a' + off / kMiB % 26)));
    if (off % (4 * kMiB) == 0) {
      ASSERT_TRUE(cache_->Flush(vol_, scan.ino).ok());
    }
  }
  ASSERT_TRUE(cache_->Flush(vol_, scan.ino).ok());
  StartCache(o);  // cold: what follows decides what is held
  std::mt19937_64 rng(5);
  for (int pass = 0; pass < 2; pass++) {
    for (uint64_t b = 0; b < hot_data.size() / 8192; b++) SeenAt(hot.ino, (rng() % 512) * 8192, 8192);
    for (uint64_t off = 0; off < hot_data.size(); off += 8192) SeenAt(hot.ino, off, 8192);
  }
  CountReads();
  for (uint64_t off = 0; off < 64 * kMiB; off += 128 << 10) SeenAt(scan.ino, off, 128 << 10);
  const uint64_t scanned = read_bytes_;
  EXPECT_GE(scanned, 64 * kMiB);
  for (uint64_t off = 0; off < hot_data.size(); off += 8192)
    ASSERT_EQ(SeenAt(hot.ino, off, 8192), hot_data.substr(off, 8192));
  EXPECT_LE(read_bytes_ - scanned, hot_data.size() / 10) << "the scan evicted the hot set";
  // Dirty data takes its share of the budget back from the clean blocks.
  for (uint64_t off = 0; off < 3 * kMiB; off += kMiB) Write(hot, off, std::string(kMiB, 'd'));
  const auto st = cache_->stats();
  EXPECT_LE(st.read.bytes + st.dirty_bytes, o.memory_bytes);
  EXPECT_GE(st.dirty_bytes, 3 * kMiB);
}

// A cold sequential read is read ahead: the stream's reads find their
// blocks in memory, and each block crosses the array link once.
TEST_F(DataCacheTest, ASequentialReadIsReadAheadOnce) {
  StartCache(NoFlusher());
  const fs::Attr f = Mk("stream");
  std::string model(8 * kMiB, 0);
  for (size_t i = 0; i < model.size(); i++) model[i] = static_cast<char>(i / 4096 * 31 + i % 251);
  for (uint64_t off = 0; off < model.size(); off += kMiB) Write(f, off, model.substr(off, kMiB));
  ASSERT_TRUE(cache_->Flush(vol_, f.ino).ok());
  StartCache(NoFlusher());  // cold
  CountReads();
  for (uint64_t off = 0; off < model.size(); off += 128 << 10) {
    ASSERT_EQ(SeenAt(f.ino, off, 128 << 10), model.substr(off, 128 << 10)) << off;
  }
  const auto st = cache_->stats().read;
  EXPECT_GE(st.prefetch_hit_bytes, model.size() * 3 / 4);
  // Metadata reads come on top of the data; each data block once.
  EXPECT_LE(read_bytes_, model.size() + model.size() / 8);
}

TEST_F(DataCacheTest, OptionsOutsideTheirRangesAreRefused) {
  DataCacheOptions o;
  o.dirty_bytes = 1;
  EXPECT_FALSE(o.Validate().ok());
  o = {};
  o.flush_after_ms = 0;
  EXPECT_FALSE(o.Validate().ok());
  o = {};
  o.stall_timeout_ms = 1;
  EXPECT_FALSE(o.Validate().ok());
  o = {};
  o.flush_bytes_max = 0;
  EXPECT_FALSE(o.Validate().ok());
  o = {};
  o.memory_bytes = limits::kCacheMemoryBytesMin - 1;
  EXPECT_FALSE(o.Validate().ok());
  o = {};
  o.memory_bytes = 2 * o.dirty_bytes - 1;  // dirty data may take at most half
  EXPECT_FALSE(o.Validate().ok());
  o = {};
  o.read_ahead_bytes = limits::kReadAheadBytesMax + 1;
  EXPECT_FALSE(o.Validate().ok());
  o = {};
  o.log_slow_ms = limits::kLogSlowMsMax + 1;
  EXPECT_FALSE(o.Validate().ok());
  EXPECT_TRUE(DataCacheOptions{}.Validate().ok());
}

}  // namespace
}  // namespace nasgw::cache
