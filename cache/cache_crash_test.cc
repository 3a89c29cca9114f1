// The write-back cache under power cuts: unstable and stable (logged)
// writes, COMMITs (logged, or flushed when large), truncations and removals
// of a few files, with the flusher putting logged writes in place
// meanwhile; the array stops taking writes
// after a random one, loses what was not durable, and the domain is opened
// again. After each of a thousand cuts fsck is clean and every file holds,
// at every byte, what its last durable write put there or what a write
// after it (not yet durable) did: a stable write answered is never lost,
// and a logged write never comes back over a newer flush, a truncation or a
// removal.
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cache/data_cache.h"
#include "fs/testing/power_cut_rig.h"

namespace nasgw::cache {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kFileBytes = 96 << 10;  // where writes land

// One file as the clients were told: per byte, the values it may hold
// after a cut (the last durable one and every later one).
struct FileModel {
  uint64_t ino = 0;
  std::string latest;                   // what a client reads now
  std::vector<std::string> may;         // per byte: the values allowed after a cut
  uint64_t min_size = 0, max_size = 0;  // the size after a cut
  bool maybe_absent = false;            // a removal or creation was cut
  std::string history;                  // the operations since the last cut, for a failure's message
  void Durable() {
    may.assign(latest.size(), std::string());
    for (size_t i = 0; i < latest.size(); i++) may[i] = std::string(1, latest[i]);
    min_size = max_size = latest.size();
  }
  // Bytes [off, off+n) got `c`: certainly (a stable write answered) or maybe.
  void Wrote(uint64_t off, uint64_t n, char c, bool durable) {
    if (latest.size() < off + n) latest.resize(off + n, '\0');
    if (may.size() < off + n) may.resize(off + n, std::string(1, '\0'));
    for (uint64_t i = off; i < off + n; i++) {
      latest[i] = c;
      if (durable) {
        may[i] = std::string(1, c);
      } else if (may[i].find(c) == std::string::npos) {
        may[i].push_back(c);
      }
    }
    max_size = std::max<uint64_t>(max_size, off + n);
    if (durable) min_size = std::max<uint64_t>(min_size, off + n);
  }
};

class CacheCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    vol_ = rig_.Create();
    ASSERT_NE(vol_, 0u);
  }
  static fs::DomainOptions Options() {
    fs::DomainOptions o;
    o.store.write_buffer_bytes = 128 << 10;
    o.store.block_cache_bytes = 1 << 20;
    o.store.error_pause_ms = 1;
    o.metafs.log_compact_bytes = 256 << 10;
    o.log_bytes = fs::IntentLog::kMinBytes;  // logged writes fill it: pressure, checkpoints, wrap-around
    o.txg_interval_ms = 15;
    return o;
  }
  void StartCache() {
    DataCacheOptions o;
    o.flush_after_ms = 10;  // the flusher puts logged writes in place between operations
    o.dirty_bytes = limits::kCacheDirtyBytesMin;
    o.flush_bytes_max = 32 << 10;  // flushes of several transactions
    o.log_slow_ms = 0;             // stable writes always logged, however slow a sanitizer makes the log
    cache_ = std::make_unique<DataCache>(dom_, o);
  }

  fs::testing::PowerCutRig rig_{2, 48 * kMiB, Options()};
  std::shared_ptr<fs::Domain>& dom_ = rig_.domain();
  std::unique_ptr<DataCache> cache_;
  uint32_t vol_ = 0;
};

// 250 power cuts in make test (under ASan a cut costs about half a second
// of a loaded machine: a thousand took 377 to 541 s, past ctest's 300 s);
// NASGW_POWER_CUTS=1000 for the long run.
TEST_F(CacheCrashTest, PowerCutsLoseNoLoggedWriteAndResurrectNothing) {
  const char* env = std::getenv("NASGW_POWER_CUTS");
  const int kCuts = env != nullptr && std::atoi(env) > 0 ? std::atoi(env) : 250;
  constexpr int kFiles = 3;
  std::mt19937_64 rng(20261125);
  std::vector<FileModel> files(kFiles);
  auto name = [](int i) { return "f" + std::to_string(i); };
  for (int i = 0; i < kFiles; i++) {
    auto a = dom_->Create(vol_, fs::kRootIno, name(i), fs::FileType::kRegular, 0644, 0, 0);
    ASSERT_TRUE(a.ok());
    files[i].ino = a->ino;
  }
  StartCache();
  int cuts = 0;
  uint64_t logged = 0, commits_logged = 0;
  while (cuts < kCuts) {
    rig_.CutAfter(1 + static_cast<int64_t>(rng() % 100));
    for (int op = 0; op < 100 && !rig_.dead(); op++) {
      const int i = static_cast<int>(rng() % kFiles);
      FileModel& m = files[i];
      if (m.maybe_absent) break;  // settled by the cut
      // As the head loads them: with the dirty data, loaded again across a flush.
      auto committed = cache_->Shown(vol_, [&] { return dom_->GetAttr(vol_, m.ino); });
      if (!committed.ok()) {
        ASSERT_TRUE(rig_.dead()) << committed.status().ToString();
        break;
      }
      ASSERT_EQ(committed->size, m.latest.size()) << "before op " << op << ":" << m.history;
      const int kind = static_cast<int>(rng() % 20);
      Status s;
      if (kind < 12) {
        // A write: stable (logged) or unstable.
        const bool stable = kind < 6;
        const uint64_t off = rng() % kFileBytes;
        const uint64_t n = 1 + rng() % (16 << 10);
        const char c = static_cast<char>('A' + rng() % 26);
        const std::string data(n, c);
        bool st = false;
        auto w = cache_->Write(vol_, *committed, off, data.data(), n, stable, &st);
        s = w.status();
        // Answered stable: durable. Anything else may or may not be there.
        m.Wrote(off, n, c, s.ok() && st);
        m.history += (stable ? " stable" : " write") + std::to_string(off) + "+" + std::to_string(n) +
                     (st ? "(st)" : "") + (w.ok() ? "=" + std::to_string(w->size) : "");
      } else if (kind < 15) {
        // A read sees the latest writes.
        std::string got(kFileBytes + (32 << 10), 'x');  // past the largest a write can make it
        uint64_t size = 0;
        auto n = cache_->Read(vol_, *committed, 0, got.size(), got.data(), &size);
        s = n.status();
        if (n.ok()) {
          got.resize(*n);
          ASSERT_TRUE(got == m.latest) << "read of " << name(i) << " before cut " << cuts << ": " << got.size()
                                       << " bytes (size " << size << ", shown " << committed->size << "), "
                                       << m.latest.size() << " written:" << m.history;
        }
      } else if (kind < 17) {
        s = cache_->Commit(vol_, m.ino);  // COMMIT: logged when the dirty data is small, else in place
        m.history += " commit";
        if (s.ok()) m.Durable();
      } else if (kind < 19) {
        // Truncation: the head flushes the file first.
        s = cache_->Flush(vol_, m.ino);
        if (s.ok()) m.Durable();
        if (s.ok()) {
          fs::SetAttr sa;
          sa.set_size = true;
          sa.size = rng() % (m.latest.size() + 1);
          s = cache_->SetAttrs(vol_, m.ino, sa).status();
          m.history += " truncate" + std::to_string(sa.size);
          m.latest.resize(sa.size);
          if (s.ok()) {
            m.Durable();
          } else {
            // Cut or not: the bytes past the new end are gone or as they were.
            m.min_size = std::min<uint64_t>(m.min_size, sa.size);
          }
        }
      } else {
        // Removed and made again: nothing of the old file may come back.
        s = dom_->Unlink(vol_, fs::kRootIno, name(i));
        if (s.ok()) {
          auto a = dom_->Create(vol_, fs::kRootIno, name(i), fs::FileType::kRegular, 0644, 0, 0);
          s = a.status();
          m = FileModel{};
          if (a.ok()) {
            m.ino = a->ino;
          } else {
            m.maybe_absent = true;
          }
        } else {
          m.maybe_absent = true;
        }
      }
      if (!s.ok()) {
        ASSERT_TRUE(rig_.dead()) << "an operation failed with the array up: " << s.ToString();
        break;
      }
    }
    if (!rig_.dead()) continue;  // the operations ran out before the cut
    logged += cache_->stats().writes_logged;
    commits_logged += cache_->stats().commits_logged;
    cache_.reset();  // what it held is lost with the power
    rig_.CutAndReopen();
    cuts++;
    auto problems = dom_->Check();
    ASSERT_TRUE(problems.ok()) << problems.status().ToString();
    ASSERT_TRUE(problems->empty()) << "fsck after cut " << cuts << ": " << problems->front();
    for (int i = 0; i < kFiles; i++) {
      FileModel& m = files[i];
      auto e = dom_->Lookup(vol_, fs::kRootIno, name(i));
      if (!e.ok()) {
        ASSERT_TRUE(m.maybe_absent) << "cut " << cuts << ": " << name(i) << " lost";
        auto a = dom_->Create(vol_, fs::kRootIno, name(i), fs::FileType::kRegular, 0644, 0, 0);
        ASSERT_TRUE(a.ok());
        m = FileModel{};
        m.ino = a->ino;
        continue;
      }
      if (m.maybe_absent && e->ino != m.ino) {
        // The removal was cut: the old file (its model) or a new empty one.
        m = FileModel{};
        m.ino = e->ino;
      }
      ASSERT_EQ(e->ino, m.ino) << "cut " << cuts << ": " << name(i) << " is another file";
      std::string got(e->size, '\0');
      auto n = dom_->Read(vol_, m.ino, 0, got.size(), got.data());
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      got.resize(*n);
      ASSERT_GE(got.size(), m.min_size) << "cut " << cuts << ": " << name(i) << " lost durable bytes";
      ASSERT_LE(got.size(), std::max<uint64_t>(m.max_size, m.may.size())) << "cut " << cuts << ": " << name(i);
      for (size_t b = 0; b < got.size(); b++) {
        const std::string& may = b < m.may.size() ? m.may[b] : std::string(1, '\0');
        ASSERT_NE(may.find(got[b]), std::string::npos)
            << "cut " << cuts << ": " << name(i) << " byte " << b << " is '" << got[b] << "', may be '" << may << "'";
      }
      m.latest = got;
      m.Durable();
      m.maybe_absent = false;
      m.history = " reopened:" + std::to_string(got.size());
    }
    StartCache();
  }
  EXPECT_EQ(cuts, kCuts);
  RecordProperty("logged_writes", static_cast<int>(logged));
  // The paths under test were taken, many times (at 250 cuts: about 300
  // logged stable writes and 16 logged COMMITs; a thousand cuts gave over
  // 1000 and 100).
  EXPECT_GT(logged, static_cast<uint64_t>(kCuts)) << "stable writes did not go through the intent log";
  EXPECT_GE(commits_logged, static_cast<uint64_t>(kCuts / 25)) << "COMMITs did not go through the intent log";
}

}  // namespace
}  // namespace nasgw::cache
