#include "daemon/locks.h"

#include <atomic>
#include <random>
#include <thread>

#include <gtest/gtest.h>

namespace nasgw::daemon {
namespace {

using proto::kLockEnd;
using proto::LockRange;
constexpr uint32_t R = proto::kLockRead, W = proto::kLockWrite;
const LockFile kFile{1, 42};
const LockOwner kA{1, 7}, kA2{1, 8}, kB{2, 7};

std::vector<LockRange> Of(const LockTable& t, const LockOwner& who, const LockFile& file = kFile) {
  std::vector<LockRange> out;
  for (const HeldLock& h : t.Locks(file)) {
    if (h.who == who) out.push_back(h.range);
  }
  return out;
}

TEST(LockTable, OneOwnerSplitsMergesUpgradesDowngrades) {
  LockTable t;
  ASSERT_EQ(t.Lock(kFile, kA, {0, 99, R}, nullptr), LockResult::kOk);
  ASSERT_EQ(t.Lock(kFile, kA, {100, 199, R}, nullptr), LockResult::kOk);
  EXPECT_EQ(Of(t, kA), (std::vector<LockRange>{{0, 199, R}}));          // adjacent: merged
  ASSERT_EQ(t.Lock(kFile, kA, {50, 59, W}, nullptr), LockResult::kOk);  // upgrade splits
  EXPECT_EQ(Of(t, kA), (std::vector<LockRange>{{0, 49, R}, {50, 59, W}, {60, 199, R}}));
  EXPECT_EQ(t.size(), 3u);
  ASSERT_EQ(t.Lock(kFile, kA, {50, 59, R}, nullptr), LockResult::kOk);  // downgrade merges back
  EXPECT_EQ(Of(t, kA), (std::vector<LockRange>{{0, 199, R}}));
  ASSERT_EQ(t.Lock(kFile, kA, {0, 199, R}, nullptr), LockResult::kOk);  // again: a no-op
  EXPECT_EQ(t.size(), 1u);
  ASSERT_EQ(t.Unlock(kFile, kA, 10, 19), LockResult::kOk);  // unlock splits
  EXPECT_EQ(Of(t, kA), (std::vector<LockRange>{{0, 9, R}, {20, 199, R}}));
  ASSERT_EQ(t.Unlock(kFile, kA, 10, 19), LockResult::kOk);  // unlocking nothing is fine
  ASSERT_EQ(t.Unlock(kFile, kB, 0, kLockEnd), LockResult::kOk);
  ASSERT_EQ(t.Unlock(LockFile{1, 43}, kA, 0, kLockEnd), LockResult::kOk);
  EXPECT_EQ(t.size(), 2u);
  ASSERT_EQ(t.Unlock(kFile, kA, 0, kLockEnd), LockResult::kOk);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.SessionSize(kA.session), 0u);
  EXPECT_TRUE(t.Locks(kFile).empty());
}

TEST(LockTable, ConflictsBetweenOwners) {
  LockTable t;
  ASSERT_EQ(t.Lock(kFile, kA, {100, 199, R}, nullptr), LockResult::kOk);
  // Readers share.
  ASSERT_EQ(t.Lock(kFile, kB, {150, 299, R}, nullptr), LockResult::kOk);
  // A writer conflicts with both; the lowest start is reported.
  HeldLock c;
  EXPECT_EQ(t.Lock(kFile, kA2, {0, kLockEnd, W}, &c), LockResult::kConflict);
  EXPECT_EQ(c.who, kA);
  EXPECT_EQ(c.range, (LockRange{100, 199, R}));
  EXPECT_EQ(t.Lock(kFile, kA2, {250, 260, W}, &c), LockResult::kConflict);
  EXPECT_EQ(c.who, kB);
  // Another owner of the same session conflicts too: owners, not sessions,
  // hold locks.
  EXPECT_TRUE(t.Test(kFile, kA2, {120, 120, W}, &c));
  // Nothing changed by the refusals.
  EXPECT_EQ(t.size(), 2u);
  // Writes beside the locks are fine; an owner never conflicts with itself.
  EXPECT_EQ(t.Lock(kFile, kA2, {0, 99, W}, nullptr), LockResult::kOk);
  EXPECT_EQ(t.Lock(kFile, kA2, {300, kLockEnd, W}, nullptr), LockResult::kOk);
  EXPECT_TRUE(t.Test(kFile, kA, {0, 199, W}, &c));
  EXPECT_EQ(c.who, kA2);
  EXPECT_EQ(t.Lock(kFile, kB, {150, 299, W}, nullptr), LockResult::kConflict);  // A reads 150..199
  // kA upgrades where only it reads.
  EXPECT_EQ(t.Lock(kFile, kA, {100, 149, W}, nullptr), LockResult::kOk);
  EXPECT_EQ(t.Lock(kFile, kA, {100, 150, W}, &c), LockResult::kConflict);
  EXPECT_EQ(c.who, kB);
  // Other files are independent.
  EXPECT_EQ(t.Lock(LockFile{1, 43}, kB, {0, kLockEnd, W}, nullptr), LockResult::kOk);
  EXPECT_EQ(t.Lock(LockFile{2, 42}, kB, {0, kLockEnd, W}, nullptr), LockResult::kOk);
  EXPECT_FALSE(t.Test(LockFile{9, 9}, kA, {0, kLockEnd, W}, &c));
}

TEST(LockTable, SessionEndReleasesEverything) {
  LockTable t;
  for (uint64_t ino = 1; ino <= 10; ino++) {
    ASSERT_EQ(t.Lock({1, ino}, kA, {0, 9, W}, nullptr), LockResult::kOk);
    ASSERT_EQ(t.Lock({1, ino}, kA2, {20, 29, W}, nullptr), LockResult::kOk);
    ASSERT_EQ(t.Lock({1, ino}, kB, {40, 49, W}, nullptr), LockResult::kOk);
  }
  EXPECT_EQ(t.SessionSize(1), 20u);
  EXPECT_EQ(t.SessionSize(2), 10u);
  EXPECT_EQ(t.Lock({1, 5}, kB, {0, 0, R}, nullptr), LockResult::kConflict);
  t.ReleaseSession(1);
  EXPECT_EQ(t.size(), 10u);
  EXPECT_EQ(t.SessionSize(1), 0u);
  EXPECT_EQ(t.Lock({1, 5}, kB, {0, kLockEnd, W}, nullptr), LockResult::kOk);  // merges its 40..49
  EXPECT_EQ(Of(t, kB, {1, 5}), (std::vector<LockRange>{{0, kLockEnd, W}}));
  t.ReleaseSession(1);  // again: nothing
  t.ReleaseSession(2);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_TRUE(t.Locks({1, 5}).empty());
}

TEST(LockTable, LimitsGiveNoLocksAndChangeNothing) {
  LockTable t(LockLimits{/*total=*/5, /*per_session=*/3});
  ASSERT_EQ(t.Lock(kFile, kA, {0, 9, W}, nullptr), LockResult::kOk);
  ASSERT_EQ(t.Lock(kFile, kA, {20, 29, W}, nullptr), LockResult::kOk);
  ASSERT_EQ(t.Lock(kFile, kA2, {40, 49, W}, nullptr), LockResult::kOk);
  EXPECT_EQ(t.Lock({1, 1}, kA, {0, 9, W}, nullptr), LockResult::kNoLocks);  // session 1 holds 3
  // An unlock that would split a range is refused too (as fcntl's ENOLCK).
  EXPECT_EQ(t.Unlock(kFile, kA, 3, 5), LockResult::kNoLocks);
  EXPECT_EQ(Of(t, kA), (std::vector<LockRange>{{0, 9, W}, {20, 29, W}}));
  // What does not add a range is allowed at the limit: a merge, a re-lock,
  // an unlock of a whole range or of an end.
  EXPECT_EQ(t.Lock(kFile, kA, {10, 19, W}, nullptr), LockResult::kOk);  // merges into 0..29
  EXPECT_EQ(t.SessionSize(1), 2u);
  EXPECT_EQ(t.Lock(kFile, kA, {5, 6, W}, nullptr), LockResult::kOk);
  EXPECT_EQ(t.Unlock(kFile, kA, 0, 4), LockResult::kOk);
  // The total: session 2 gets 2 more, then none.
  EXPECT_EQ(t.Lock(kFile, kB, {100, 109, R}, nullptr), LockResult::kOk);
  EXPECT_EQ(t.Lock(kFile, kB, {200, 209, R}, nullptr), LockResult::kOk);
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(t.Lock(kFile, kA, {300, 309, R}, nullptr), LockResult::kOk);       // session 1's third
  EXPECT_EQ(t.Lock(kFile, kB, {400, 409, R}, nullptr), LockResult::kNoLocks);  // total 5
  EXPECT_EQ(t.Lock(LockFile{1, 99}, LockOwner{3, 1}, {0, 0, R}, nullptr), LockResult::kNoLocks);
  EXPECT_TRUE(t.Locks({1, 99}).empty());
  EXPECT_EQ(t.SessionSize(3), 0u);
  t.ReleaseSession(1);
  EXPECT_EQ(t.Lock(kFile, kB, {400, 409, R}, nullptr), LockResult::kOk);
}

// Random operations by a few owners on a few small files, against a model
// that keeps each byte's holders: conflicts, grants and the table's
// contents must agree, and the counts must add up.
constexpr uint32_t SR = proto::kShareRead, SW = proto::kShareWrite, SD = proto::kShareDelete;

// Share reservations: access meets deny either way (Windows' rule, NFSv4's).
TEST(LockTable, AReclaimTakesRangesFromDetachedSessionsOnly) {
  LockTable t;
  const LockFile f{1, 7};
  const LockOwner dead{1, 10}, live{2, 20}, reclaimer{3, 30};
  ASSERT_EQ(t.Lock(f, dead, LockRange{0, 99, W}, nullptr), LockResult::kOk);
  ASSERT_EQ(t.Lock(f, dead, LockRange{500, 599, W}, nullptr), LockResult::kOk);
  ASSERT_EQ(t.Lock(f, live, LockRange{200, 299, R}, nullptr), LockResult::kOk);
  // While the dead head's session is attached, a reclaim is a lock like any.
  HeldLock c;
  EXPECT_EQ(t.Lock(f, reclaimer, LockRange{50, 149, W}, &c, true), LockResult::kConflict);
  EXPECT_EQ(c.who, dead);
  // Its connections gone (its session waits out its grace): the reclaim
  // takes the overlap from it, and only that.
  t.SetAttached(dead.session, false);
  EXPECT_EQ(t.Lock(f, reclaimer, LockRange{50, 149, W}, nullptr), LockResult::kConflict) << "not a reclaim";
  ASSERT_EQ(t.Lock(f, reclaimer, LockRange{50, 149, W}, &c, true), LockResult::kOk);
  auto held = t.Locks(f);
  ASSERT_EQ(held.size(), 4u);
  EXPECT_EQ(held[0].who, dead);
  EXPECT_EQ(held[0].range.start, 0u);
  EXPECT_EQ(held[0].range.end, 49u);
  EXPECT_EQ(held[1].who, dead);
  EXPECT_EQ(held[1].range.start, 500u);
  EXPECT_EQ(held[2].who, live);
  EXPECT_EQ(held[3].who, reclaimer);
  // An attached session's lock refuses the reclaim, and then nothing
  // changed: the detached session keeps what overlaps too.
  EXPECT_EQ(t.Lock(f, reclaimer, LockRange{250, 550, W}, &c, true), LockResult::kConflict);
  EXPECT_EQ(c.who, live);
  EXPECT_EQ(t.Locks(f).size(), 4u);
  // Attached again (it reconnected): it keeps what is left.
  t.SetAttached(dead.session, true);
  EXPECT_EQ(t.Lock(f, reclaimer, LockRange{500, 500, W}, &c, true), LockResult::kConflict);
  // The detached owner's last range taken: it holds nothing in the file.
  t.SetAttached(dead.session, false);
  ASSERT_EQ(t.Lock(f, reclaimer, LockRange{0, 49, W}, nullptr, true), LockResult::kOk);
  ASSERT_EQ(t.Lock(f, reclaimer, LockRange{500, 599, W}, nullptr, true), LockResult::kOk);
  for (const HeldLock& h : t.Locks(f)) EXPECT_NE(h.who, dead);
  EXPECT_EQ(t.SessionSize(dead.session), 0u);
  t.ReleaseSession(dead.session);
  t.ReleaseSession(reclaimer.session);
  t.ReleaseSession(live.session);
  EXPECT_EQ(t.size(), 0u);
}

TEST(LockTable, ShareReservationsConflictBothWays) {
  LockTable t;
  HeldShare c;
  // A reads and denies writers.
  ASSERT_EQ(t.Share(kFile, kA, {SR, SW}, nullptr), LockResult::kOk);
  EXPECT_EQ(t.Share(kFile, kB, {SR | SW, 0}, &c), LockResult::kConflict);  // a writer: refused
  EXPECT_EQ(c.who, kA);
  EXPECT_EQ(c.mode, (ShareMode{SR, SW}));
  EXPECT_EQ(t.Share(kFile, kA2, {SW, 0}, nullptr), LockResult::kConflict);   // another owner of A's session too
  EXPECT_EQ(t.Share(kFile, kB, {SR, SR}, nullptr), LockResult::kConflict);   // denies what A does
  ASSERT_EQ(t.Share(kFile, kB, {SR, SW | SD}, nullptr), LockResult::kOk);    // readers denying writers agree
  EXPECT_EQ(t.Share(kFile, kA2, {SD, 0}, nullptr), LockResult::kConflict);   // B denies delete
  EXPECT_EQ(t.Share({1, 43}, kA2, {SW | SD, 0}, nullptr), LockResult::kOk);  // another file: free
  EXPECT_EQ(t.Shares(kFile).size(), 2u);
  // An owner's own reservation is replaced (OPEN_UPGRADE / OPEN_DOWNGRADE),
  // never in conflict with itself; the replacement is checked.
  EXPECT_EQ(t.Share(kFile, kA, {SR | SW, 0}, &c), LockResult::kConflict);  // B denies write
  EXPECT_EQ(c.who, kB);
  ASSERT_EQ(t.Share(kFile, kA, {SR, SW | SR}, nullptr), LockResult::kConflict);  // B reads
  ASSERT_EQ(t.Share(kFile, kA, {SR, 0}, nullptr), LockResult::kOk);              // downgrade
  ASSERT_EQ(t.Share(kFile, kB, {0, 0}, nullptr), LockResult::kOk);               // release
  ASSERT_EQ(t.Share(kFile, kB, {0, 0}, nullptr), LockResult::kOk);               // again: nothing held is fine
  ASSERT_EQ(t.Share(kFile, kA2, {SW, 0}, nullptr), LockResult::kOk);             // nothing denies writers now
  EXPECT_EQ(t.size(), 3u);                                                       // A and A2 on kFile, A2 on 43
  // Deny-only reservations (an NFSv4 or SMB open with no data access does
  // not reach nasgwd, but the table holds whatever it is given).
  EXPECT_EQ(t.Share(kFile, kB, {0, SW}, nullptr), LockResult::kConflict);  // A2 writes
  // The session's end releases its reservations with its locks.
  ASSERT_EQ(t.Lock(kFile, kA, {0, 9, W}, nullptr), LockResult::kOk);
  t.ReleaseSession(1);
  EXPECT_TRUE(t.Shares(kFile).empty());
  EXPECT_TRUE(t.Shares({1, 43}).empty());
  EXPECT_TRUE(t.Locks(kFile).empty());
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.SessionSize(1), 0u);
  ASSERT_EQ(t.Share(kFile, kB, {SR | SW, SR | SW | SD}, nullptr), LockResult::kOk);
}

// A reservation counts as a range against the limits; a refused one
// changes nothing, and replacing or releasing one needs no room.
TEST(LockTable, ShareReservationsCountAgainstTheLimits) {
  LockTable t(LockLimits{3, 2});
  ASSERT_EQ(t.Lock(kFile, kA, {0, 9, R}, nullptr), LockResult::kOk);
  ASSERT_EQ(t.Share(kFile, kA, {SR, 0}, nullptr), LockResult::kOk);
  EXPECT_EQ(t.Share({1, 43}, kA, {SR, 0}, nullptr), LockResult::kNoLocks);  // per session
  EXPECT_EQ(t.SessionSize(1), 2u);
  ASSERT_EQ(t.Share(kFile, kA, {SR | SW, SD}, nullptr), LockResult::kOk);  // a replacement: no room needed
  ASSERT_EQ(t.Share(kFile, kB, {SR, 0}, nullptr), LockResult::kOk);
  EXPECT_EQ(t.Share(kFile, LockOwner{2, 8}, {SR, 0}, nullptr), LockResult::kNoLocks);  // total
  EXPECT_EQ(t.Shares(kFile).size(), 2u);
  ASSERT_EQ(t.Share(kFile, kA, {0, 0}, nullptr), LockResult::kOk);
  ASSERT_EQ(t.Share({1, 43}, kA, {SR, 0}, nullptr), LockResult::kOk);  // room again
  EXPECT_EQ(t.size(), 3u);
}

constexpr uint32_t LR = proto::kLeaseRead, LW = proto::kLeaseRead | proto::kLeaseWrite;

// Leases: an operation of another domain contends (a write with any lease,
// a read with a write lease); each lease is recalled once; the operation
// waits until the holder gives back what it needs.
TEST(LockTable, LeasesAreRecalledForOtherDomainsOnly) {
  LockTable t(LockLimits{100, 100, 1000});
  std::vector<RecallNote> recall;
  std::vector<HeldLease> revoked;
  ASSERT_EQ(t.SetLease(kFile, kA, "smbd", LW, nullptr), LockResult::kOk);
  EXPECT_EQ(t.LeaseCount(), 1u);
  // The holder's domain (another smbd process, kB) is its head's business.
  EXPECT_FALSE(t.Contend(kFile, "smbd", true, 1, &recall, &revoked));
  EXPECT_TRUE(recall.empty());
  // Another domain's read contends with a write lease: recalled to read.
  EXPECT_TRUE(t.Contend(kFile, "ganesha", false, 10, &recall, &revoked));
  ASSERT_EQ(recall.size(), 1u);
  EXPECT_EQ(recall[0].who, kA);
  EXPECT_EQ(recall[0].break_to, LR);
  recall.clear();
  // Asked again: still waiting, recalled only once.
  EXPECT_TRUE(t.Contend(kFile, "ganesha", false, 20, &recall, &revoked));
  EXPECT_TRUE(recall.empty());
  // The holder downgrades to read: the read goes on, a write still waits
  // (the recall now asks for everything: no second note, the same recall).
  ASSERT_EQ(t.SetLease(kFile, kA, "smbd", LR, nullptr), LockResult::kOk);
  EXPECT_FALSE(t.Contend(kFile, "ganesha", false, 30, &recall, &revoked));
  EXPECT_TRUE(t.Contend(kFile, "ganesha", true, 40, &recall, &revoked));
  ASSERT_EQ(recall.size(), 1u) << "a read lease met by a write is recalled anew";
  EXPECT_EQ(recall[0].break_to, 0u);
  recall.clear();
  ASSERT_EQ(t.SetLease(kFile, kA, "smbd", 0, nullptr), LockResult::kOk);
  EXPECT_FALSE(t.Contend(kFile, "ganesha", true, 50, &recall, &revoked));
  EXPECT_EQ(t.LeaseCount(), 0u);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_TRUE(revoked.empty());
  // Read leases of two domains agree; a write lease meets both.
  ASSERT_EQ(t.SetLease(kFile, kA, "smbd", LR, nullptr), LockResult::kOk);
  ASSERT_EQ(t.SetLease(kFile, kB, "ganesha", LR, nullptr), LockResult::kOk);
  HeldLease c;
  EXPECT_EQ(t.SetLease(kFile, kA2, "smbd", LW, &c), LockResult::kConflict);
  EXPECT_EQ(c.who, kB);
  EXPECT_EQ(c.domain, "ganesha");
  EXPECT_EQ(t.Leases(kFile).size(), 2u);
  t.ReleaseSession(1);
  t.ReleaseSession(2);
  EXPECT_EQ(t.LeaseCount(), 0u);
  EXPECT_TRUE(t.Leases(kFile).empty());
}

// A recalled lease not given back within lease_break_ms is revoked: the
// operation goes on, and the revocation is reported once.
TEST(LockTable, AnUnansweredRecallRevokesTheLease) {
  LockTable t(LockLimits{100, 100, 1000});
  std::vector<RecallNote> recall;
  std::vector<HeldLease> revoked;
  ASSERT_EQ(t.SetLease(kFile, kA, "smbd", LR, nullptr), LockResult::kOk);
  const uint64_t ms = 1'000'000;
  EXPECT_TRUE(t.Contend(kFile, "fuse", true, 5 * ms, &recall, &revoked));
  EXPECT_EQ(recall.size(), 1u);
  EXPECT_TRUE(t.Contend(kFile, "fuse", true, 1005 * ms, &recall, &revoked)) << "1000 ms: not past yet";
  EXPECT_TRUE(revoked.empty());
  EXPECT_FALSE(t.Contend(kFile, "fuse", true, 1006 * ms, &recall, &revoked));
  ASSERT_EQ(revoked.size(), 1u);
  EXPECT_EQ(revoked[0].who, kA);
  EXPECT_TRUE(t.Leases(kFile).empty());
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.SessionSize(1), 0u);
  EXPECT_EQ(t.LeaseCount(), 0u);
}

TEST(LockTable, AgreesWithAByteModel) {
  constexpr uint64_t kBytes = 32;
  const LockOwner owners[] = {{1, 1}, {1, 2}, {2, 1}, {3, 9}};
  struct Model {
    std::map<LockOwner, uint32_t> holders[kBytes];  // byte -> owner -> type
  };
  std::mt19937_64 rng(5);
  for (int round = 0; round < 40; round++) {
    LockTable t;
    std::map<LockFile, Model> model;
    for (int step = 0; step < 300; step++) {
      const LockFile file{1, 1 + rng() % 3};
      const LockOwner who = owners[rng() % 4];
      const uint64_t s = rng() % kBytes, e = s + rng() % (kBytes - s);
      Model& m = model[file];
      const int what = static_cast<int>(rng() % 10);
      if (what == 0) {
        t.ReleaseSession(who.session);
        for (auto& [f, mm] : model) {
          for (auto& b : mm.holders) std::erase_if(b, [&](const auto& x) { return x.first.session == who.session; });
        }
      } else if (what < 4) {
        ASSERT_EQ(t.Unlock(file, who, s, e), LockResult::kOk);
        for (uint64_t i = s; i <= e; i++) m.holders[i].erase(who);
      } else {
        const uint32_t type = rng() % 2 ? R : W;
        bool conflict = false;
        for (uint64_t i = s; i <= e; i++) {
          for (const auto& [o, ty] : m.holders[i]) conflict |= o != who && (ty == W || type == W);
        }
        HeldLock c;
        EXPECT_EQ(t.Test(file, who, {s, e, type}, &c), conflict);
        const LockResult got = t.Lock(file, who, {s, e, type}, &c);
        ASSERT_EQ(got, conflict ? LockResult::kConflict : LockResult::kOk) << "round " << round << " step " << step;
        if (conflict) {
          ASSERT_NE(c.who, who);
          ASSERT_TRUE(proto::Conflicts(c.range, {s, e, type}));
        } else {
          for (uint64_t i = s; i <= e; i++) m.holders[i][who] = type;
        }
      }
      // The table holds exactly the model.
      size_t total = 0;
      for (auto& [f, mm] : model) {
        std::map<LockOwner, std::vector<uint32_t>> seen;
        const auto held = t.Locks(f);
        total += held.size();
        for (const HeldLock& h : held) {
          auto& v = seen[h.who];
          v.resize(kBytes, 0);
          ASSERT_LT(h.range.end, kBytes);
          for (uint64_t i = h.range.start; i <= h.range.end; i++) v[i] = h.range.type;
        }
        for (const LockOwner& o : owners) {
          std::vector<uint32_t> want(kBytes, 0);
          for (uint64_t i = 0; i < kBytes; i++) {
            auto it = mm.holders[i].find(o);
            if (it != mm.holders[i].end()) want[i] = it->second;
          }
          std::vector<uint32_t> got = seen.contains(o) ? seen[o] : std::vector<uint32_t>(kBytes, 0);
          ASSERT_EQ(got, want) << "round " << round << " step " << step;
          std::vector<LockRange> mine = Of(t, o, f);
          ASSERT_TRUE(proto::LockRangesValid(mine));
        }
      }
      ASSERT_EQ(t.size(), total);
      ASSERT_EQ(t.SessionSize(1) + t.SessionSize(2) + t.SessionSize(3), total);
    }
  }
}

// Many threads locking and unlocking at once (ThreadSanitizer runs this):
// each owner's exclusive lock on its own byte is always granted, and the
// shared byte is held by one writer at a time.
TEST(LockTable, ConcurrentOwners) {
  LockTable t;
  constexpr int kThreads = 4, kOps = 2000;
  std::atomic<int> writers{0}, bad{0};
  std::vector<std::thread> ths;
  ths.reserve(kThreads);
  for (int i = 0; i < kThreads; i++) {
    ths.emplace_back([&, i] {
      const LockOwner me{static_cast<uint64_t>(i + 1), 1};
      for (int k = 0; k < kOps; k++) {
        if (t.Lock(kFile, me, {static_cast<uint64_t>(100 + i), static_cast<uint64_t>(100 + i), W}, nullptr) !=
            LockResult::kOk) {
          bad++;
        }
        if (t.Lock(kFile, me, {0, 0, W}, nullptr) == LockResult::kOk) {
          if (writers.fetch_add(1) != 0) bad++;
          writers.fetch_sub(1);
          (void)t.Unlock(kFile, me, 0, 0);
        }
        if (k % 100 == 0) t.ReleaseSession(me.session);
      }
    });
  }
  for (auto& th : ths) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace nasgw::daemon
