#include "proto/lock_range.h"

#include <random>

#include <gtest/gtest.h>

namespace nasgw::proto {
namespace {

using Ranges = std::vector<LockRange>;
constexpr uint32_t R = kLockRead, W = kLockWrite;

Ranges Add(Ranges r, LockRange l) {
  AddLockRange(r, l);
  EXPECT_TRUE(LockRangesValid(r));
  return r;
}
Ranges Remove(Ranges r, uint64_t s, uint64_t e) {
  RemoveLockRange(r, s, e);
  EXPECT_TRUE(LockRangesValid(r));
  return r;
}

TEST(LockRange, RangeEnds) {
  uint64_t end = 0;
  EXPECT_TRUE(LockRangeEnd(0, 0, &end));
  EXPECT_EQ(end, kLockEnd);
  EXPECT_TRUE(LockRangeEnd(10, 5, &end));
  EXPECT_EQ(end, 14u);
  EXPECT_TRUE(LockRangeEnd(kLockEnd, 1, &end));  // the last byte alone
  EXPECT_EQ(end, kLockEnd);
  EXPECT_FALSE(LockRangeEnd(kLockEnd, 2, &end));
  EXPECT_TRUE(LockRangeEnd(1, kLockEnd, &end));
  EXPECT_FALSE(LockRangeEnd(2, kLockEnd, &end));
  EXPECT_EQ(LockLength({5, kLockEnd, R}), 0u);
  EXPECT_EQ(LockLength({5, 9, R}), 5u);
}

TEST(LockRange, MergeSplitUpgradeDowngrade) {
  // Adjacent and overlapping ranges of one type merge.
  Ranges r = Add({}, {0, 9, R});
  r = Add(r, {10, 19, R});
  EXPECT_EQ(r, (Ranges{{0, 19, R}}));
  r = Add(r, {5, 30, R});
  EXPECT_EQ(r, (Ranges{{0, 30, R}}));
  // Re-locking what is held changes nothing.
  EXPECT_EQ(Add(r, {3, 7, R}), r);
  // An upgrade in the middle splits the read lock.
  r = Add(r, {10, 19, W});
  EXPECT_EQ(r, (Ranges{{0, 9, R}, {10, 19, W}, {20, 30, R}}));
  // Adjacent ranges of another type stay apart.
  EXPECT_EQ(Add(r, {31, 40, W}), (Ranges{{0, 9, R}, {10, 19, W}, {20, 30, R}, {31, 40, W}}));
  // A downgrade of the whole write range merges the three.
  EXPECT_EQ(Add(r, {10, 19, R}), (Ranges{{0, 30, R}}));
  // A write lock over everything replaces all.
  EXPECT_EQ(Add(r, {0, kLockEnd, W}), (Ranges{{0, kLockEnd, W}}));
  // An unlock in the middle splits; unlocking nothing is fine.
  r = Add({}, {0, kLockEnd, W});
  r = Remove(r, 100, 199);
  EXPECT_EQ(r, (Ranges{{0, 99, W}, {200, kLockEnd, W}}));
  EXPECT_EQ(Remove(r, 100, 199), r);
  EXPECT_EQ(Remove(r, 50, 250), (Ranges{{0, 49, W}, {251, kLockEnd, W}}));
  EXPECT_EQ(Remove(r, 0, kLockEnd), Ranges{});
  // Locks at the very end of the offset space.
  r = Add({}, {kLockEnd, kLockEnd, R});
  r = Add(r, {kLockEnd - 1, kLockEnd - 1, R});
  EXPECT_EQ(r, (Ranges{{kLockEnd - 1, kLockEnd, R}}));
  EXPECT_EQ(Remove(r, kLockEnd, kLockEnd), (Ranges{{kLockEnd - 1, kLockEnd - 1, R}}));
}

TEST(LockRange, Conflicts) {
  EXPECT_FALSE(Conflicts({0, 9, R}, {5, 15, R}));
  EXPECT_TRUE(Conflicts({0, 9, R}, {5, 15, W}));
  EXPECT_TRUE(Conflicts({0, 9, W}, {9, 9, R}));
  EXPECT_FALSE(Conflicts({0, 9, W}, {10, 20, W}));
}

// Random locks and unlocks on a small file against a model that records
// each byte's lock type: the ranges always describe exactly the model and
// stay canonical.
TEST(LockRange, AgreesWithAByteModel) {
  constexpr uint64_t kBytes = 48;
  std::mt19937_64 rng(11);
  for (int round = 0; round < 200; round++) {
    Ranges r;
    std::vector<uint32_t> model(kBytes, 0);
    for (int step = 0; step < 60; step++) {
      const uint64_t s = rng() % kBytes;
      const uint64_t e = s + rng() % (kBytes - s);
      if (rng() % 3 == 0) {
        RemoveLockRange(r, s, e);
        for (uint64_t i = s; i <= e; i++) model[i] = 0;
      } else {
        const uint32_t t = rng() % 2 ? R : W;
        AddLockRange(r, {s, e, t});
        for (uint64_t i = s; i <= e; i++) model[i] = t;
      }
      ASSERT_TRUE(LockRangesValid(r));
      std::vector<uint32_t> seen(kBytes, 0);
      for (const auto& x : r) {
        ASSERT_LT(x.end, kBytes);
        for (uint64_t i = x.start; i <= x.end; i++) seen[i] = x.type;
      }
      ASSERT_EQ(seen, model) << "round " << round << " step " << step;
    }
  }
}

}  // namespace
}  // namespace nasgw::proto
