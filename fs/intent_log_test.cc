#include "fs/intent_log.h"

#include <atomic>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "base/mutex.h"
#include "block/mem_device.h"
#include "fs/testing/holding_device.h"

namespace nasgw::fs {
namespace {

using testing::HoldingDevice;

constexpr uint64_t kMiB = 1 << 20;

class IntentLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    luns_.clear();
    salt_++;  // a new log (Format takes a random salt in use)
    for (int i = 0; i < 2; i++) {
      luns_.push_back(std::make_shared<block::MemLun>(512, 64 * kMiB / 512, "mem." + std::to_string(i)));
    }
    Attach();
    // Two extents on two LUNs, the first with the superblocks.
    extents_ = {{0, 1 * kMiB, 3 * kMiB}, {1, 2 * kMiB, 2 * kMiB + 8192}};
    ASSERT_TRUE(IntentLog::Format(Devices(), extents_, salt_).ok());
  }

  // New initiators over the same media (a restarted node).
  void Attach() {
    devs_.clear();
    for (auto& l : luns_) devs_.push_back(std::make_shared<block::MemDevice>(l));
  }
  IntentLog::DeviceFn Devices() {
    return [this](uint32_t lun) -> std::shared_ptr<block::BlockDevice> {
      return lun < devs_.size() ? devs_[lun] : nullptr;
    };
  }

  // Opens the log, collecting the replayed entries.
  std::unique_ptr<IntentLog> Open(std::vector<std::pair<uint64_t, std::string>>* replayed,
                                  const IntentLogOptions& o = {}) {
    replayed->clear();
    auto log = IntentLog::Open(
        Devices(), extents_, salt_,
        [&](uint64_t lsn, std::string_view e) {
          replayed->emplace_back(lsn, std::string(e));
          return Status();
        },
        o);
    EXPECT_TRUE(log.ok()) << log.status().ToString();
    return log.ok() ? std::move(log.value()) : nullptr;
  }

  // The log over devices that hold writes when told to (`*held`, one a LUN).
  std::unique_ptr<IntentLog> OpenHeld(std::vector<std::shared_ptr<HoldingDevice>>* held) {
    for (auto& d : devs_) held->push_back(std::make_shared<HoldingDevice>(d));
    auto opened = IntentLog::Open(
        [held](uint32_t lun) -> std::shared_ptr<block::BlockDevice> {
          return lun < held->size() ? (*held)[lun] : nullptr;
        },
        extents_, salt_, [](uint64_t, std::string_view) { return Status(); });
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    return opened.ok() ? std::move(opened.value()) : nullptr;
  }
  // Lets every held write go when it leaves scope.
  struct LetGo {
    std::vector<std::shared_ptr<HoldingDevice>>& held;
    ~LetGo() {
      for (auto& h : held) h->ReleaseAll();
    }
  };

  // A partner's copy of this log: entries `lsns` (Entry(i), after `prefix`)
  // appended by opening `session`.
  std::shared_ptr<LogTail> TailOf(uint64_t session, std::initializer_list<uint64_t> lsns,
                                  const std::string& prefix = "") {
    auto t = std::make_shared<LogTail>();
    t->salt = salt_;
    t->session = session;
    for (uint64_t i : lsns) t->entries.emplace_back(i, prefix + Entry(i));
    return t;
  }
  // Opens the log with `tail` as a partner's copy.
  std::unique_ptr<IntentLog> OpenWithTail(std::vector<std::pair<uint64_t, std::string>>* replayed,
                                          std::shared_ptr<const LogTail> tail) {
    IntentLogOptions o;
    o.tail = std::move(tail);
    return Open(replayed, o);
  }

  static std::string Entry(uint64_t i, size_t n = 100) {
    std::string s = "entry-" + std::to_string(i) + "-";
    while (s.size() < n) s += static_cast<char>('a' + (s.size() + i) % 26);
    return s;
  }

  // The bytes of a record holding one entry of `n` bytes: whole sectors.
  static uint64_t RecordOf(size_t n) {
    const uint64_t b = kLogRecordHeaderBytes + kLogEntryHeaderBytes + n;
    return (b + kLogSectorBytes - 1) / kLogSectorBytes * kLogSectorBytes;
  }

  uint64_t AppendDurable(IntentLog& log, const std::string& e) {
    EXPECT_TRUE(log.Reserve(e.size()).ok());
    const uint64_t lsn = log.Append(e);
    EXPECT_TRUE(log.WaitDurable(lsn).ok());
    return lsn;
  }

  uint64_t salt_ = 0x1234abcd5678ef01ull;
  std::vector<std::shared_ptr<block::MemLun>> luns_;
  std::vector<std::shared_ptr<block::MemDevice>> devs_;
  std::vector<Extent> extents_;
};

TEST_F(IntentLogTest, ReplaysEveryDurableEntryInOrder) {
  std::vector<std::pair<uint64_t, std::string>> r;
  {
    auto log = Open(&r);
    ASSERT_TRUE(log);
    EXPECT_TRUE(r.empty());
    for (uint64_t i = 1; i <= 50; i++) EXPECT_EQ(AppendDurable(*log, Entry(i, 10 + i * 37)), i);
    EXPECT_EQ(log->durable_lsn(), 50u);
  }
  luns_[0]->PowerCut();  // every record was written with FUA
  luns_[1]->PowerCut();
  Attach();
  auto log = Open(&r);
  ASSERT_TRUE(log);
  ASSERT_EQ(r.size(), 50u);
  for (uint64_t i = 1; i <= 50; i++) {
    EXPECT_EQ(r[i - 1].first, i);
    EXPECT_EQ(r[i - 1].second, Entry(i, 10 + i * 37));
  }
  EXPECT_EQ(log->replayed(), 50u);
  // Appends continue the sequence.
  EXPECT_EQ(AppendDurable(*log, "next"), 51u);
}

TEST_F(IntentLogTest, CheckpointDropsWhatTheStoreHolds) {
  std::vector<std::pair<uint64_t, std::string>> r;
  {
    auto log = Open(&r);
    for (uint64_t i = 1; i <= 20; i++) AppendDurable(*log, Entry(i));
    ASSERT_TRUE(log->Checkpoint(12).ok());
    for (uint64_t i = 21; i <= 25; i++) AppendDurable(*log, Entry(i));
  }
  Attach();
  auto log = Open(&r);
  ASSERT_EQ(r.size(), 13u);  // 13..25: each entry its own record here
  EXPECT_EQ(r.front().first, 13u);
  EXPECT_EQ(r.back().first, 25u);
  EXPECT_EQ(r.back().second, Entry(25));
}

TEST_F(IntentLogTest, GroupCommitSharesOneWrite) {
  std::vector<std::pair<uint64_t, std::string>> r;
  auto log = Open(&r);
  // A slow array: each write takes a while, so appends pile up behind it.
  devs_[1]->SetFault([](const block::IoRequest& req) {
    if (req.op == block::Op::kWrite) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return Status();
  });
  devs_[0]->SetFault([](const block::IoRequest& req) {
    if (req.op == block::Op::kWrite) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return Status();
  });
  constexpr int kThreads = 16, kEach = 20;
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  ts.reserve(kThreads);
  for (int t = 0; t < kThreads; t++) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kEach; i++) {
        const std::string e = Entry(t * 1000 + i);
        if (!log->Reserve(e.size()).ok()) failures++;
        if (!log->WaitDurable(log->Append(e)).ok()) failures++;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  const auto st = log->Stats();
  EXPECT_EQ(st.entries, static_cast<uint64_t>(kThreads) * kEach);
  EXPECT_LT(st.records * 3, st.entries) << "records " << st.records;  // several entries per write
  EXPECT_GT(st.group_entries.max, 1u);
}

TEST_F(IntentLogTest, WrapsAroundWithCheckpoints) {
  std::vector<std::pair<uint64_t, std::string>> r;
  std::atomic<bool> want{false};
  IntentLogOptions o;
  o.want_checkpoint = [&] { want = true; };
  uint64_t last = 0, checkpointed = 0;
  {
    auto log = Open(&r, o);
    const uint64_t capacity = log->Stats().capacity_bytes;
    uint64_t written = 0;
    // Five laps of the ring, entries of many sizes (records skip to the
    // next extent when they do not fit).
    std::mt19937 rng(7);
    while (written < 5 * capacity) {
      const size_t n = 1 + rng() % 200000;
      last = AppendDurable(*log, Entry(last + 1, n));
      written += IntentLog::Cost(n);
      if (want.exchange(false)) {
        checkpointed = last - 3;  // the store holds all but the last three
        ASSERT_TRUE(log->Checkpoint(checkpointed).ok());
      }
    }
    EXPECT_GT(log->Stats().checkpoints, 5u);
  }
  Attach();
  auto log = Open(&r);
  ASSERT_FALSE(r.empty());
  EXPECT_LE(r.front().first, checkpointed + 1);
  EXPECT_EQ(r.back().first, last);
  for (size_t i = 1; i < r.size(); i++) ASSERT_EQ(r[i].first, r[i - 1].first + 1);
}

// Several records are on their way at once, and an entry is durable only
// once its record and every record before it are written, whatever order
// the array completes them in.
TEST_F(IntentLogTest, RecordsGoTogetherAndAreDurableInOrder) {
  std::vector<std::pair<uint64_t, std::string>> r;
  std::vector<std::shared_ptr<HoldingDevice>> held;
  auto log = OpenHeld(&held);
  ASSERT_TRUE(log);
  LetGo let_go{held};  // before the log closes (it waits for its writes), even if the test fails
  for (auto& h : held) h->Hold();
  // Each entry waits for its record to be on its way before the next is
  // appended: three records, all held at once.
  for (uint64_t i = 1; i <= 3; i++) {
    ASSERT_TRUE(log->Reserve(100).ok());
    ASSERT_EQ(log->Append(Entry(i)), i);
    ASSERT_TRUE(held[0]->WaitHeld(i)) << "record " << i << " is not on its way while " << i - 1 << " are";
  }
  EXPECT_EQ(log->durable_lsn(), 0u);
  held[0]->Release(2);
  held[0]->Release(1);
  ASSERT_TRUE(held[0]->WaitCompleted(2));
  // Records 2 and 3 are written, record 1 is not: nothing is durable.
  EXPECT_EQ(log->durable_lsn(), 0u);
  held[0]->Release(0);
  ASSERT_TRUE(log->WaitDurable(3).ok());
  EXPECT_EQ(log->durable_lsn(), 3u);
  EXPECT_EQ(log->Stats().records, 3u);
  log.reset();
  Attach();
  log = Open(&r);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r.back().second, Entry(3));
}

// A record written before a crash after one that never was stays on the
// array past where the replay stops. The next opening writes its own
// records from there; when one ends just where the stale record begins,
// with the LSN before it, the stale record still is not replayed: it is of
// an earlier session.
TEST_F(IntentLogTest, AStaleRecordAfterAGapIsNeverReplayed) {
  std::vector<std::pair<uint64_t, std::string>> r;
  {
    auto log = Open(&r);
    for (uint64_t i = 1; i <= 3; i++) AppendDurable(*log, Entry(i));  // a record each
  }
  // Record 2 never reached the array; record 3 did.
  const uint64_t rec2 = extents_[0].offset + kLogSuperBytes + RecordOf(Entry(1).size());
  std::vector<uint8_t> zeros(RecordOf(Entry(2).size()), 0);
  ASSERT_TRUE(block::WriteSync(*devs_[0], rec2 / 512, zeros.data(), zeros.size(), true).ok());
  {
    Attach();
    auto log = Open(&r);
    ASSERT_EQ(r.size(), 1u);
    // Entry 2 again, otherwise: a record of the same size in record 2's
    // place, ending where the stale record 3 begins.
    std::string other = Entry(2);
    other[0] = 'E';
    EXPECT_EQ(AppendDurable(*log, other), 2u);
  }
  Attach();
  IntentLogOptions ro;
  ro.read_only = true;
  auto log = Open(&r, ro);
  ASSERT_EQ(r.size(), 2u) << "the stale record of the earlier session was replayed";
  EXPECT_EQ(r.back().second[0], 'E');
}

TEST_F(IntentLogTest, TornTailIsIgnoredAndOverwritten) {
  std::vector<std::pair<uint64_t, std::string>> r;
  {
    auto log = Open(&r);
    for (uint64_t i = 1; i <= 10; i++) AppendDurable(*log, Entry(i, 6000));
    // The 11th record's write is torn: only its first 512-byte sector lands.
    devs_[0]->SetFault([](const block::IoRequest& req) {
      return req.op == block::Op::kWrite ? Status::IoError("power lost") : Status();
    });
    const std::string e = Entry(11, 6000);
    ASSERT_TRUE(log->Reserve(e.size()).ok());
    EXPECT_FALSE(log->WaitDurable(log->Append(e)).ok());
    EXPECT_FALSE(log->health().ok());
    // A failed log refuses new entries.
    EXPECT_FALSE(log->Reserve(10).ok());
  }
  // Reopened, the log goes on from the failed entry's LSN.
  {
    Attach();
    auto log = Open(&r);
    ASSERT_EQ(r.size(), 10u);
    EXPECT_EQ(AppendDurable(*log, Entry(11, 6000)), 11u);
    EXPECT_EQ(AppendDurable(*log, Entry(12, 6000)), 12u);
  }
  // Tear record 12: zero its second half.
  const uint64_t rec = RecordOf(6000);
  std::vector<uint8_t> zeros(rec / 2, 0);
  {
    Attach();
    auto log = Open(&r);
    ASSERT_EQ(r.size(), 12u);
  }
  // Find record 12's place: 11 records of 6 KiB after the superblocks.
  const uint64_t rec12 = extents_[0].offset + kLogSuperBytes + 11 * rec;
  ASSERT_TRUE(block::WriteSync(*devs_[0], (rec12 + rec / 2) / 512, zeros.data(), zeros.size(), true).ok());
  Attach();
  auto log = Open(&r);
  ASSERT_EQ(r.size(), 11u);
  EXPECT_EQ(r.back().first, 11u);
  // The sequence continues from the torn record's LSN, in its place.
  EXPECT_EQ(AppendDurable(*log, "after"), 12u);
  log.reset();
  Attach();
  log = Open(&r);
  ASSERT_EQ(r.size(), 12u);
  EXPECT_EQ(r.back().second, "after");
}

// Power cut after the k-th write of the array, for many k: what a replay
// returns is a prefix of what was appended, it holds every entry that was
// acknowledged durable, and the log keeps working after it.
TEST_F(IntentLogTest, PowerCutsKeepEveryAcknowledgedEntry) {
  std::mt19937 rng(11);
  int cuts = 0;
  for (int round = 0; round < 60; round++) {
    SetUp();  // fresh media and log
    std::atomic<int> writes{0};
    const int cut_after = 1 + static_cast<int>(rng() % 40);
    std::atomic<bool> dead{false};
    auto fault = [&](const block::IoRequest& req) {
      if (req.op != block::Op::kWrite && req.op != block::Op::kFlush) return Status();
      if (dead || ++writes > cut_after) {
        dead = true;
        return Status::IoError("power cut");
      }
      return Status();
    };
    for (auto& d : devs_) d->SetFault(fault);
    std::vector<std::pair<uint64_t, std::string>> r;
    std::map<uint64_t, std::string> appended;
    std::set<uint64_t> acked;
    uint64_t checkpointed = 0;
    Mutex mu;
    {
      IntentLogOptions o;
      o.reserve_timeout_ms = 2000;
      auto log = Open(&r, o);
      ASSERT_TRUE(log);
      std::vector<std::thread> ts;
      ts.reserve(4);
      for (int t = 0; t < 4; t++) {
        ts.emplace_back([&, t] {
          for (int i = 0; i < 30; i++) {
            const std::string e = Entry(t * 100 + i, 50 + (t * 7919 + i * 104729) % 30000);
            if (!log->Reserve(e.size()).ok()) return;
            uint64_t lsn;
            {
              MutexLock l(mu);
              lsn = log->Append(e);
              appended[lsn] = e;
            }
            if (!log->WaitDurable(lsn).ok()) return;
            MutexLock l(mu);
            acked.insert(lsn);
          }
        });
      }
      for (auto& t : ts) t.join();
      if (round % 3 == 0 && log->health().ok()) {
        const uint64_t c = log->durable_lsn() / 2;
        if (log->Checkpoint(c).ok()) checkpointed = c;
      }
    }
    for (auto& l : luns_) l->PowerCut();
    Attach();
    auto log = Open(&r);
    ASSERT_TRUE(log);
    std::set<uint64_t> seen;
    for (const auto& [lsn, e] : r) {
      ASSERT_TRUE(appended.count(lsn)) << "replayed an entry never appended: " << lsn;
      EXPECT_EQ(appended[lsn], e);
      seen.insert(lsn);
    }
    for (size_t i = 1; i < r.size(); i++) ASSERT_EQ(r[i].first, r[i - 1].first + 1);
    // Every acknowledged entry after the checkpoint is replayed.
    for (uint64_t lsn : acked) {
      if (lsn > checkpointed) {
        EXPECT_TRUE(seen.count(lsn)) << "acknowledged entry " << lsn << " lost";
      }
    }
    if (!r.empty()) {
      EXPECT_LE(r.front().first, checkpointed + 1);
    }
    // After the replay the log takes appends again.
    const uint64_t next = AppendDurable(*log, "alive");
    EXPECT_EQ(next, r.empty() ? log->durable_lsn() : r.back().first + 1);
    cuts++;
  }
  EXPECT_EQ(cuts, 60);
}

// A record is whole sectors of its LUNs, not whole 4 KiB blocks: a logged
// 8 KiB write (8,254 bytes with its header) takes 8.5 KiB of the log and of
// the array link, not 12. On LUNs of 4 KiB blocks, whole blocks.
TEST_F(IntentLogTest, RecordsAreWholeSectorsOfTheirLuns) {
  const std::string write = Entry(1, 8192 + 62);
  for (const uint32_t block : {512u, 4096u}) {
    SCOPED_TRACE("LUN blocks of " + std::to_string(block) + " bytes");
    luns_.clear();
    for (int i = 0; i < 2; i++) {
      luns_.push_back(std::make_shared<block::MemLun>(block, 64 * kMiB / block, "mem." + std::to_string(i)));
    }
    Attach();
    ASSERT_TRUE(IntentLog::Format(Devices(), extents_, salt_).ok());
    std::vector<std::pair<uint64_t, std::string>> r;
    {
      auto log = Open(&r);
      ASSERT_TRUE(log);
      AppendDurable(*log, write);
      AppendDurable(*log, Entry(2));
      const uint64_t want = block == 512 ? 8704 + 512 : 12288 + 4096;
      EXPECT_EQ(log->Stats().bytes_written, want);
    }
    Attach();
    auto log = Open(&r);
    ASSERT_TRUE(log);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].second, write);
    EXPECT_EQ(r[1].second, Entry(2));
    EXPECT_EQ(AppendDurable(*log, Entry(3)), 3u);
  }
}

TEST_F(IntentLogTest, RefusesWhatDoesNotFit) {
  std::vector<std::pair<uint64_t, std::string>> r;
  IntentLogOptions o;
  o.reserve_timeout_ms = 200;
  auto log = Open(&r, o);
  EXPECT_EQ(log->Reserve(log->max_entry_bytes() + 1).code(), Code::kInvalidArgument);
  // Nobody checkpoints: the log fills and Reserve times out.
  Status s;
  int n = 0;
  while ((s = log->Reserve(100000)).ok()) {
    log->WaitDurable(log->Append(Entry(n++, 100000))).IgnoreError();
    ASSERT_LT(n, 1000);
  }
  EXPECT_EQ(s.code(), Code::kTimedOut);
  EXPECT_GT(log->Stats().reserve_waits, 0u);
  // A checkpoint frees the space.
  ASSERT_TRUE(log->Checkpoint(log->durable_lsn()).ok());
  EXPECT_TRUE(log->Reserve(100000).ok());
  log->Unreserve(100000);
}

TEST_F(IntentLogTest, SuperblockCopiesAndSalt) {
  std::vector<std::pair<uint64_t, std::string>> r;
  {
    auto log = Open(&r);
    for (uint64_t i = 1; i <= 6; i++) AppendDurable(*log, Entry(i));
    ASSERT_TRUE(log->Checkpoint(2).ok());  // copy A or B, the other older
    ASSERT_TRUE(log->Checkpoint(4).ok());
  }
  IntentLogOptions ro;
  ro.read_only = true;  // writes no superblock of its own
  {
    Attach();
    auto log = Open(&r, ro);
    ASSERT_EQ(r.front().first, 5u);
  }
  // Format wrote seq 1 in copy A; the opening seq 2 in A again (seq % 2),
  // Checkpoint(2) seq 3 in B, Checkpoint(4) seq 4 in A. Wreck A, the
  // newer: B (checkpoint at 2) is used.
  std::vector<uint8_t> junk(4096, 0x5a);
  ASSERT_TRUE(block::WriteSync(*devs_[0], extents_[0].offset / 512, junk.data(), junk.size(), true).ok());
  Attach();
  {
    auto log = Open(&r, ro);
    ASSERT_FALSE(r.empty());
    EXPECT_EQ(r.front().first, 3u);
    EXPECT_EQ(r.back().first, 6u);
  }
  ASSERT_TRUE(block::WriteSync(*devs_[0], (extents_[0].offset + 4096) / 512, junk.data(), junk.size(), true).ok());
  Attach();
  auto bad = IntentLog::Open(Devices(), extents_, salt_, [](uint64_t, std::string_view) { return Status(); });
  EXPECT_EQ(bad.status().code(), Code::kCorruption);
  // Another salt (another log) never verifies.
  ASSERT_TRUE(IntentLog::Format(Devices(), extents_, salt_).ok());
  auto other = IntentLog::Open(Devices(), extents_, salt_ + 1, [](uint64_t, std::string_view) { return Status(); });
  EXPECT_EQ(other.status().code(), Code::kCorruption);
  // Extents other than those formatted are refused.
  auto moved = extents_;
  moved[1].offset += 4096;
  auto wrong = IntentLog::Open(Devices(), moved, salt_, [](uint64_t, std::string_view) { return Status(); });
  EXPECT_EQ(wrong.status().code(), Code::kCorruption);
}

TEST_F(IntentLogTest, ReplayErrorStopsOpen) {
  std::vector<std::pair<uint64_t, std::string>> r;
  {
    auto log = Open(&r);
    AppendDurable(*log, "x");
  }
  Attach();
  auto log = IntentLog::Open(Devices(), extents_, salt_,
                             [](uint64_t, std::string_view) { return Status::Corruption("bad entry"); });
  EXPECT_EQ(log.status().code(), Code::kCorruption);
}

// ---- the partner's mirror (LogMirror, LogTail)

// What a partner's memory holds: every entry it was given.
class TestMirror final : public LogMirror {
 public:
  void Mirror(uint64_t lsn, std::string_view entry) override {
    MutexLock l(mu_);
    got_.emplace_back(lsn, std::string(entry));
  }
  void Durable(uint64_t lsn) override { durable = lsn; }
  std::atomic<uint64_t> durable{0};
  std::shared_ptr<LogTail> Tail(const IntentLog& log) {
    auto t = std::make_shared<LogTail>();
    t->salt = log.salt();
    t->session = log.session();
    MutexLock l(mu_);
    t->entries = got_;
    return t;
  }

 private:
  Mutex mu_;
  std::vector<std::pair<uint64_t, std::string>> got_ GUARDED_BY(mu_);
};

// With a mirror attached, an entry is answered once the mirror holds it,
// before its record reaches the array; a node that opens the log after a
// crash with the mirror's entries as the tail has every answered entry,
// and writes them to the log before it replays them.
TEST_F(IntentLogTest, AMirrorAnswersBeforeTheArrayAndItsTailIsReplayedAfterACrash) {
  std::vector<std::pair<uint64_t, std::string>> r;
  {
    auto log = Open(&r);
    AppendDurable(*log, Entry(1));  // on the array before the mirror
  }
  Attach();
  std::vector<std::shared_ptr<HoldingDevice>> held;
  auto log = OpenHeld(&held);
  ASSERT_TRUE(log);
  LetGo let_go{held};
  auto mirror = std::make_shared<TestMirror>();
  uint64_t first = 0;
  auto acks = log->AttachMirror(mirror, &first);
  EXPECT_EQ(first, 2u);
  EXPECT_EQ(mirror->durable.load(), 1u) << "the mirror is told how far the array's log is";
  for (auto& h : held) h->Hold();
  for (uint64_t i = 2; i <= 4; i++) {
    ASSERT_TRUE(log->Reserve(100).ok());
    ASSERT_EQ(log->Append(Entry(i)), i);
  }
  ASSERT_TRUE(held[0]->WaitHeld(1));
  // Not answered until the mirror says it holds them.
  std::atomic<bool> answered{false};
  std::thread waiter([&] {
    EXPECT_TRUE(log->WaitAcknowledged(4).ok());
    answered = true;
  });
  acks->Acked(3);
  EXPECT_TRUE(log->WaitAcknowledged(3).ok());
  EXPECT_FALSE(answered.load()) << "entry 4 answered before the mirror held it";
  acks->Acked(4);
  waiter.join();
  EXPECT_TRUE(answered.load());
  EXPECT_EQ(log->durable_lsn(), 1u) << "nothing of the mirrored entries reached the array";
  // Answers come from the mirror: how long they take is its acknowledgements'.
  EXPECT_GT(log->recent_answer_ns(), 0u);
  EXPECT_EQ(log->recent_write_ns(), 0u) << "no record of the log was written";
  EXPECT_GE(log->Stats().mirror_acks, 2u);
  auto tail = mirror->Tail(*log);
  // The node dies: its records never reach the array.
  for (auto& d : devs_) {
    d->SetFault([](const block::IoRequest& req) {
      return req.op == block::Op::kRead ? Status() : Status::IoError("node died");
    });
  }
  for (auto& h : held) h->ReleaseAll();  // and fail
  log.reset();
  acks->Acked(5);  // a late answer after the log closed: nothing (ASan would see a use after free)
  // The partner opens it with what its mirror holds.
  Attach();
  IntentLogOptions o;
  o.tail = tail;
  auto taken = Open(&r, o);
  ASSERT_TRUE(taken);
  ASSERT_EQ(r.size(), 4u);
  for (uint64_t i = 1; i <= 4; i++) {
    EXPECT_EQ(r[i - 1].first, i);
    EXPECT_EQ(r[i - 1].second, Entry(i));
  }
  EXPECT_EQ(taken->Stats().tail_replayed, 3u);
  EXPECT_EQ(taken->durable_lsn(), 4u) << "the mirror's entries were not written to the log first";
  taken.reset();
  // And they are the log's own now.
  Attach();
  auto again = Open(&r);
  ASSERT_TRUE(again);
  EXPECT_EQ(r.size(), 4u);
  EXPECT_EQ(again->Stats().tail_replayed, 0u);
}

// A tail is taken only where it continues the log: this log's salt, an
// opening no older than the last record's, dense from at most the first
// LSN the log lacks. Entries the array has are not taken twice.
TEST_F(IntentLogTest, AMirrorTailIsTakenOnlyWhereItContinuesTheLog) {
  std::vector<std::pair<uint64_t, std::string>> r;
  uint64_t first_session = 0, second_session = 0;
  // Each case on a log of its own: two openings, entries 1-2 and 3.
  auto prepare = [&] {
    SetUp();
    {
      auto log = Open(&r);
      first_session = log->session();
      AppendDurable(*log, Entry(1));
      AppendDurable(*log, Entry(2));
    }
    Attach();
    auto log = Open(&r);
    second_session = log->session();
    ASSERT_GT(second_session, first_session);
    AppendDurable(*log, Entry(3));
  };
  struct Case {
    const char* what;
    std::function<std::shared_ptr<LogTail>()> tail;
    size_t replayed, taken;
  };
  const Case cases[] = {
      {"an earlier opening's",
       [&] {
         return TailOf(first_session, {4, 5});
       },
       3, 0},
      {"another log's",
       [&] {
         auto t = TailOf(second_session, {4, 5});
         t->salt++;
         return t;
       },
       3, 0},
      {"after a gap",
       [&] {
         return TailOf(second_session, {5, 6});
       },
       3, 0},
      {"on the array already",
       [&] {
         return TailOf(second_session, {2, 3});
       },
       3, 0},
      // Overlapping the array and continuing it: only what the array lacks.
      {"continuing it",
       [&] {
         return TailOf(second_session, {2, 3, 4, 5});
       },
       5, 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    prepare();
    Attach();
    auto log = OpenWithTail(&r, c.tail());
    ASSERT_TRUE(log);
    EXPECT_EQ(r.size(), c.replayed);
    EXPECT_EQ(log->Stats().tail_replayed, c.taken);
    if (c.taken > 0) {
      EXPECT_EQ(r.back(), (std::pair<uint64_t, std::string>{5, Entry(5)}));
    }
  }
}

// A node that opened the log without the partner's copy (it could not
// reach it) wrote entries of its own under the same LSNs and checkpointed
// them away: no record is left to say so, but its superblock does, and the
// earlier opening's copy is refused.
TEST_F(IntentLogTest, AnEarlierOpeningsTailIsRefusedAfterALaterOneCheckpointedItsOwn) {
  std::vector<std::pair<uint64_t, std::string>> r;
  uint64_t first_session = 0;
  {
    auto log = Open(&r);
    first_session = log->session();
    AppendDurable(*log, Entry(1));
  }
  // What the partner held of the first opening: 2..5, which the array lacks.
  auto stale = TailOf(first_session, {2, 3, 4, 5}, "stale-");
  {
    Attach();
    auto log = Open(&r);
    AppendDurable(*log, Entry(2));
    AppendDurable(*log, Entry(3));
    ASSERT_TRUE(log->Checkpoint(3).ok());
  }
  Attach();
  auto log = OpenWithTail(&r, stale);
  ASSERT_TRUE(log);
  EXPECT_TRUE(r.empty()) << r.size() << " entries replayed, the first " << r.front().second;
  EXPECT_EQ(log->Stats().tail_replayed, 0u);
  EXPECT_EQ(log->appended_lsn(), 3u);
}

// A takeover whose opening adopted the partner's copy, wrote its
// superblock and then failed (its log records never reached the array: the
// domain did not open) leaves a superblock newer than the copy. The next
// opening takes the same copy all the same: the superblock says which copy
// the failed one adopted. Without that it would be refused as older than
// the log's last opening, and the answered entries lost.
TEST_F(IntentLogTest, ACopyAdoptedByAnOpeningThatFailedIsTakenByTheNext) {
  std::vector<std::pair<uint64_t, std::string>> r;
  uint64_t first_session = 0;
  {
    auto log = Open(&r);
    first_session = log->session();
    AppendDurable(*log, Entry(1));
  }
  auto copy = TailOf(first_session, {2, 3, 4});
  Attach();
  // Its superblock (the first write) reaches the array; nothing after it.
  auto writes = std::make_shared<std::atomic<int>>(0);
  for (auto& d : devs_) {
    d->SetFault([writes](const block::IoRequest& req) {
      return req.op != block::Op::kRead && writes->fetch_add(1) > 0 ? Status::IoError("SAN path died") : Status();
    });
  }
  {
    IntentLogOptions o;
    o.tail = copy;
    auto failed = IntentLog::Open(
        Devices(), extents_, salt_, [](uint64_t, std::string_view) { return Status(); }, o);
    ASSERT_FALSE(failed.ok()) << "the copy's records cannot be written";
  }
  ASSERT_GE(writes->load(), 2) << "the superblock was written, then a record tried";
  Attach();
  auto log = OpenWithTail(&r, copy);
  ASSERT_TRUE(log);
  ASSERT_EQ(r.size(), 4u) << "the answered entries 2-4 are replayed";
  for (uint64_t i = 1; i <= 4; i++) EXPECT_EQ(r[i - 1], (std::pair<uint64_t, std::string>{i, Entry(i)}));
  EXPECT_EQ(log->Stats().tail_replayed, 3u);
  // A copy of another opening than the one adopted is still refused after
  // it, though it would continue the log.
  log.reset();
  Attach();
  ASSERT_GT(first_session, 1u);
  auto other = OpenWithTail(&r, TailOf(first_session - 1, {5, 6}, "stale-"));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->Stats().tail_replayed, 0u);
  EXPECT_EQ(r.size(), 4u);
}

// An opening that adopted a copy and then wrote entries of its own: the
// same copy is not taken again past what was adopted (entries after its
// gap were never answered, and would land after the log's own).
TEST_F(IntentLogTest, AnAdoptedCopyIsNotTakenAgainPastTheLogsOwnEntries) {
  std::vector<std::pair<uint64_t, std::string>> r;
  uint64_t first_session = 0;
  {
    auto log = Open(&r);
    first_session = log->session();
    AppendDurable(*log, Entry(1));
  }
  // 2-4, then a gap, then 6-7: only 2-4 were answered.
  auto copy = TailOf(first_session, {2, 3, 4, 6, 7}, "copy-");
  {
    Attach();
    auto log = OpenWithTail(&r, copy);
    ASSERT_TRUE(log);
    EXPECT_EQ(log->Stats().tail_replayed, 3u);
    AppendDurable(*log, Entry(5));  // its own, at LSN 5
  }
  Attach();
  auto log = OpenWithTail(&r, copy);
  ASSERT_TRUE(log);
  EXPECT_EQ(log->Stats().tail_replayed, 0u);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r.back(), (std::pair<uint64_t, std::string>{5, Entry(5)})) << "no entry of the copy after the log's own";
}

// Past a gap in the copy nothing was answered: the dense run from the
// first entry the array lacks is taken, the rest left.
TEST_F(IntentLogTest, AMirrorTailIsTakenUpToItsFirstGap) {
  std::vector<std::pair<uint64_t, std::string>> r;
  uint64_t session = 0;
  {
    auto log = Open(&r);
    session = log->session();
    AppendDurable(*log, Entry(1));
  }
  Attach();
  auto log = OpenWithTail(&r, TailOf(session, {2, 3, 6, 7}));
  ASSERT_TRUE(log);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r.back(), (std::pair<uint64_t, std::string>{3, Entry(3)}));
  EXPECT_EQ(log->Stats().tail_replayed, 2u);
}

}  // namespace
}  // namespace nasgw::fs
