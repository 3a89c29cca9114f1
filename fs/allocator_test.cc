#include "fs/allocator.h"

#include <random>
#include <set>

#include <gtest/gtest.h>

namespace nasgw::fs {
namespace {

constexpr uint64_t kUnit = 4096;
constexpr uint64_t kAg = 1 << 20;

std::unique_ptr<Allocator> Make(int luns, int groups_per_lun) {
  auto a = std::make_unique<Allocator>(kAg, kUnit);
  for (int l = 0; l < luns; l++) {
    for (int g = 0; g < groups_per_lun; g++) {
      EXPECT_TRUE(a->AddGroup({static_cast<uint32_t>(l), static_cast<uint32_t>(g)}, (1 << 20) + g * kAg).ok());
    }
  }
  return a;
}

uint64_t Sum(const std::vector<Extent>& v) {
  uint64_t n = 0;
  for (const auto& e : v) n += e.length;
  return n;
}

TEST(Allocator, StripesConsecutiveAllocationsOverLuns) {
  auto owner = Make(3, 2);
  Allocator& a = *owner;
  std::vector<uint32_t> luns;
  for (int i = 0; i < 6; i++) {
    auto r = a.Allocate(128 << 10);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), 1u) << "a fitting request is one extent";
    luns.push_back((*r)[0].lun);
  }
  EXPECT_EQ(luns, (std::vector<uint32_t>{0, 1, 2, 0, 1, 2}));
}

TEST(Allocator, RoundsToTheUnitAndAccounts) {
  auto owner = Make(1, 1);
  Allocator& a = *owner;
  EXPECT_EQ(a.total_bytes(), kAg);
  auto r = a.Allocate(1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Sum(*r), kUnit);
  EXPECT_EQ(a.free_bytes(), kAg - kUnit);
  ASSERT_TRUE(a.Free((*r)[0]).ok());
  EXPECT_EQ(a.free_bytes(), kAg);
  EXPECT_EQ(a.fragments(), 1u) << "freed space coalesces";
}

TEST(Allocator, NoSpaceChangesNothingAndRecoversAfterFree) {
  auto owner = Make(2, 1);
  Allocator& a = *owner;
  auto all = a.Allocate(2 * kAg);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(a.free_bytes(), 0u);
  auto none = a.Allocate(kUnit);
  EXPECT_EQ(none.status().code(), Code::kNoSpace);
  EXPECT_EQ(a.free_bytes(), 0u);
  ASSERT_TRUE(a.Free((*all)[0]).ok());
  EXPECT_TRUE(a.Allocate(kUnit).ok());
}

TEST(Allocator, ReservationsGuaranteeSpace) {
  auto owner = Make(1, 1);
  Allocator& a = *owner;
  ASSERT_TRUE(a.Reserve(kAg / 2).ok());
  EXPECT_EQ(a.available_bytes(), kAg / 2);
  EXPECT_EQ(a.Allocate(kAg / 2 + kUnit).status().code(), Code::kNoSpace) << "reserved space is not for others";
  ASSERT_TRUE(a.Allocate(kAg / 2).ok());
  EXPECT_EQ(a.Reserve(kUnit).code(), Code::kNoSpace);
  auto mine = a.AllocateReserved(kAg / 2);
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(a.free_bytes(), 0u);
  EXPECT_EQ(a.reserved_bytes(), 0u);
}

TEST(Allocator, DoubleFreeAndDoubleUseAreCorruption) {
  auto owner = Make(1, 2);
  Allocator& a = *owner;
  auto r = a.Allocate(64 << 10);
  ASSERT_TRUE(r.ok());
  Extent e = (*r)[0];
  ASSERT_TRUE(a.Free(e).ok());
  EXPECT_EQ(a.Free(e).code(), Code::kCorruption);
  EXPECT_EQ(a.Free({0, e.offset + kUnit, kUnit}).code(), Code::kCorruption) << "part of a free extent";
  EXPECT_EQ(a.Free({0, 0, kUnit}).code(), Code::kCorruption) << "outside every group";
  EXPECT_EQ(a.Free({0, e.offset + 1, kUnit}).code(), Code::kCorruption) << "unaligned";
  EXPECT_EQ(a.Free({0, (1 << 20) + kAg - kUnit, 2 * kUnit}).code(), Code::kCorruption) << "spans two groups";
  ASSERT_TRUE(a.MarkUsed({0, (1 << 20) + 8 * kUnit, 4 * kUnit}).ok());
  EXPECT_EQ(a.MarkUsed({0, (1 << 20) + 10 * kUnit, 4 * kUnit}).code(), Code::kCorruption);
}

// Random allocations and frees against a bitmap model: no block is ever
// handed out twice, accounting always matches, and rebuilding a fresh
// allocator from the used extents (as a domain does at open) gives the same
// free space.
TEST(Allocator, RandomAgainstModel) {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    std::mt19937_64 rng(seed);
    auto owner = Make(3, 4);
    Allocator& a = *owner;
    const uint64_t units_per_lun = (1 << 20) / kUnit + 4 * kAg / kUnit;
    std::vector<std::vector<bool>> used(3, std::vector<bool>(units_per_lun, false));
    std::vector<Extent> live;
    uint64_t used_bytes = 0;
    for (int step = 0; step < 5000; step++) {
      if (live.empty() || rng() % 100 < 55) {
        uint64_t want = (1 + rng() % 64) * kUnit - rng() % kUnit;
        auto r = a.Allocate(want);
        if (!r.ok()) {
          ASSERT_EQ(r.status().code(), Code::kNoSpace);
          ASSERT_LT(a.available_bytes(), (want + kUnit - 1) / kUnit * kUnit);
          continue;
        }
        ASSERT_EQ(Sum(*r), (want + kUnit - 1) / kUnit * kUnit);
        for (const Extent& e : *r) {
          for (uint64_t u = e.offset / kUnit; u < e.end() / kUnit; u++) {
            ASSERT_FALSE(used[e.lun][u]) << "seed " << seed << " step " << step << ": block handed out twice";
            used[e.lun][u] = true;
          }
          live.push_back(e);
          used_bytes += e.length;
        }
      } else {
        size_t i = rng() % live.size();
        Extent e = live[i];
        // Free a random sub-range sometimes, the whole extent otherwise.
        if (e.length > kUnit && rng() % 2) {
          uint64_t cut = (1 + rng() % (e.length / kUnit - 1)) * kUnit;
          live[i] = {e.lun, e.offset + cut, e.length - cut};
          e.length = cut;
        } else {
          live[i] = live.back();
          live.pop_back();
        }
        ASSERT_TRUE(a.Free(e).ok());
        for (uint64_t u = e.offset / kUnit; u < e.end() / kUnit; u++) used[e.lun][u] = false;
        used_bytes -= e.length;
      }
      ASSERT_EQ(a.total_bytes() - a.free_bytes(), used_bytes);
    }
    auto rebuilt_owner = Make(3, 4);
    Allocator& rebuilt = *rebuilt_owner;
    for (const Extent& e : live) ASSERT_TRUE(rebuilt.MarkUsed(e).ok());
    EXPECT_EQ(rebuilt.free_bytes(), a.free_bytes());
  }
}

}  // namespace
}  // namespace nasgw::fs
