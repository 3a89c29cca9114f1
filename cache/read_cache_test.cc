#include "cache/read_cache.h"

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace nasgw::cache {
namespace {

constexpr uint64_t kB = ReadCache::kBlock;
constexpr uint64_t kGen = 7;

// A block's bytes: which file and block, so a wrong block is seen.
std::vector<uint8_t> Bytes(uint64_t ino, uint64_t index, uint64_t blocks = 1, uint8_t salt = 0) {
  std::vector<uint8_t> v(blocks * kB);
  for (uint64_t i = 0; i < v.size(); i++) {
    v[i] = static_cast<uint8_t>((ino * 131 + (index + i / kB) * 7 + salt) ^ (i % kB));
  }
  return v;
}

class ReadCacheTest : public ::testing::Test {
 protected:
  // Reads [off, off+n) as DataCache does: what the cache holds, the rest
  // "from the SAN" (Bytes) and inserted. Returns the blocks fetched.
  uint64_t Read(ReadCache& rc, uint64_t ino, uint64_t off, uint64_t n, uint8_t salt = 0) {
    std::vector<uint8_t> out(n);
    ReadCache::Fill fill;
    auto [first, end] = rc.Get({1, 0, ino}, kGen, off, n, out.data(), &fill);
    if (first != end) {
      auto san = Bytes(ino, first / kB, (end - first) / kB, salt);
      rc.Insert(fill, kGen, first, san.data(), san.size(), false);
      for (uint64_t i = std::max(off, first); i < std::min(off + n, end); i++) out[i - off] = san[i - first];
    }
    auto want = Bytes(ino, off / kB, (off + n + kB - 1) / kB - off / kB, salt);
    EXPECT_TRUE(std::equal(out.begin(), out.end(), want.begin() + static_cast<std::ptrdiff_t>(off % kB)))
        << "ino " << ino << " at " << off;
    return (end - first) / kB;
  }
  // A read as DataCache makes it: its blocks, then what to read ahead.
  ReadCache::Ahead ReadOn(ReadCache& rc, uint64_t ino, uint64_t off, uint64_t n, uint64_t size) {
    Read(rc, ino, off, n);
    return rc.Sequential({1, 0, ino}, kGen, off, n, size);
  }
};

TEST_F(ReadCacheTest, ASecondReadIsAHit) {
  ReadCache rc(1 << 20, 0, nullptr);
  EXPECT_EQ(Read(rc, 1, 0, 3 * kB), 3u);
  EXPECT_EQ(Read(rc, 1, 100, kB), 0u);  // unaligned, inside what is held
  EXPECT_EQ(Read(rc, 1, 2 * kB, 2 * kB), 1u);
  const auto s = rc.stats();
  EXPECT_EQ(s.bytes, 4 * kB);
  EXPECT_EQ(s.miss_bytes, 4 * kB);
  EXPECT_EQ(s.hit_bytes, kB + kB);
}

// The point of the segmented policy: a hot working set read twice stays
// while a scan many times the cache's size passes through.
TEST_F(ReadCacheTest, ASequentialScanLeavesTheHotSetAlone) {
  constexpr uint64_t kCap = 1 << 20;  // 256 blocks
  ReadCache rc(kCap, 0, nullptr);
  constexpr uint64_t kHot = 128;  // half the capacity
  for (int pass = 0; pass < 2; pass++) {
    for (uint64_t b = 0; b < kHot; b++) Read(rc, 1, b * kB, kB);
  }
  EXPECT_EQ(rc.stats().protected_bytes, kHot * kB);
  for (uint64_t b = 0; b < 16 * kCap / kB; b++) Read(rc, 2, b * kB, kB);  // 16x the cache, once
  uint64_t fetched = 0;
  for (uint64_t b = 0; b < kHot; b++) fetched += Read(rc, 1, b * kB, kB);
  EXPECT_EQ(fetched, 0u) << "the scan evicted hot blocks";
  EXPECT_LE(rc.stats().bytes, kCap);
}

// A working set larger than probation but within the capacity is learnt
// from the ghost list: blocks evicted from probation and read again come
// back protected, so after a few passes every read hits.
TEST_F(ReadCacheTest, AWorkingSetLargerThanProbationIsLearnt) {
  constexpr uint64_t kCap = 1 << 20;
  ReadCache rc(kCap, 0, nullptr);
  constexpr uint64_t kSet = 200;  // 78% of the capacity
  for (int pass = 0; pass < 3; pass++) {
    for (uint64_t b = 0; b < kSet; b++) Read(rc, 1, b * kB, kB);
  }
  uint64_t fetched = 0;
  for (uint64_t b = 0; b < kSet; b++) fetched += Read(rc, 1, b * kB, kB);
  EXPECT_LE(fetched, kSet / 10);
}

TEST_F(ReadCacheTest, AFillBegunBeforeAChangeIsRefused) {
  ReadCache rc(1 << 20, 0, nullptr);
  std::vector<uint8_t> out(kB);
  ReadCache::Fill fill;
  auto [first, end] = rc.Get({1, 0, 5}, kGen, 0, kB, out.data(), &fill);
  ASSERT_EQ(end - first, kB);
  // A flush puts new bytes in place while the old ones are in flight.
  auto fresh = Bytes(5, 0, 1, 99);
  rc.Update({1, 0, 5}, kGen, 0, fresh.data(), kB);
  auto old = Bytes(5, 0);
  rc.Insert(fill, kGen, 0, old.data(), kB, false);
  EXPECT_EQ(rc.stats().refused_fills, 1u);
  ReadCache::Fill again;
  auto [f2, e2] = rc.Get({1, 0, 5}, kGen, 0, kB, out.data(), &again);
  EXPECT_EQ(f2, e2);
  EXPECT_EQ(out, fresh);
  // A truncation drops everything and refuses fills begun before it.
  ReadCache::Fill third;
  rc.Get({1, 0, 5}, kGen, kB, kB, out.data(), &third);
  rc.Drop({1, 0, 5});
  rc.Insert(third, kGen, kB, old.data(), kB, false);
  EXPECT_EQ(rc.stats().bytes, 0u);
  // A partly written block leaves (its other bytes are not in the update).
  Read(rc, 6, 0, 2 * kB);
  rc.Update({1, 0, 6}, kGen, 10, fresh.data(), kB);
  ReadCache::Fill fourth;
  auto [f4, e4] = rc.Get({1, 0, 6}, kGen, 0, 2 * kB, out.data(), &fourth);
  EXPECT_EQ(f4, 0u);
  EXPECT_EQ(e4, 2 * kB);
}

// A rollback of a volume (DataCache::ForgetVolume): every block of its
// files goes, fills begun before are refused, other volumes keep theirs.
TEST_F(ReadCacheTest, DroppingAVolumeDropsItsFilesOnly) {
  ReadCache rc(1 << 20, 0, nullptr);
  Read(rc, 1, 0, 2 * kB);  // volume 1
  Read(rc, 2, 0, kB);
  std::vector<uint8_t> out(kB);
  auto other = Bytes(1, 0);
  for (uint32_t vol : {0u, 2u}) {
    ReadCache::Fill f;
    rc.Get({vol, 0, 1}, kGen, 0, kB, out.data(), &f);
    rc.Insert(f, kGen, 0, other.data(), kB, false);
  }
  ASSERT_EQ(rc.stats().bytes, 5 * kB);
  ReadCache::Fill inflight;  // a read of volume 1 fetching from the SAN
  auto [first, end] = rc.Get({1, 0, 3}, kGen, 0, kB, out.data(), &inflight);
  ASSERT_EQ(end - first, kB);
  EXPECT_EQ(rc.DropVolume(1), 3 * kB);
  auto old = Bytes(3, 0);
  rc.Insert(inflight, kGen, 0, old.data(), kB, false);
  EXPECT_EQ(rc.stats().refused_fills, 1u) << "read before the rollback, cached after it";
  EXPECT_EQ(rc.stats().bytes, 2 * kB) << "volumes 0 and 2 keep theirs";
  EXPECT_EQ(Read(rc, 1, 0, 2 * kB), 2u) << "fetched again";
  for (uint32_t vol : {0u, 2u}) {
    ReadCache::Fill f;
    auto [f2, e2] = rc.Get({vol, 0, 1}, kGen, 0, kB, out.data(), &f);
    EXPECT_EQ(f2, e2) << "volume " << vol;
  }
  EXPECT_EQ(rc.DropVolume(9), 0u);
}

TEST_F(ReadCacheTest, AnotherGenerationFindsNothing) {
  ReadCache rc(1 << 20, 0, nullptr);
  Read(rc, 1, 0, kB);
  std::vector<uint8_t> out(kB);
  ReadCache::Fill fill;
  auto [first, end] = rc.Get({1, 0, 1}, kGen + 1, 0, kB, out.data(), &fill);
  EXPECT_EQ(end - first, kB);
  // The old generation's fill, had one been in flight, is refused too.
  auto v = Bytes(1, 0);
  rc.Insert(fill, kGen, 0, v.data(), kB, false);
  EXPECT_EQ(rc.stats().refused_fills, 1u);
}

TEST_F(ReadCacheTest, TheCacheGivesWayToDirtyData) {
  std::atomic<uint64_t> dirty{0};
  ReadCache rc(1 << 20, 0, [&] { return dirty.load(); });
  for (uint64_t b = 0; b < 256; b++) Read(rc, 1, b * kB, kB);
  EXPECT_EQ(rc.stats().bytes, 1u << 20);
  dirty = 768 << 10;
  rc.Trim();
  EXPECT_EQ(rc.stats().bytes, 256u << 10);
  EXPECT_EQ(rc.stats().capacity, 256u << 10);
  dirty = 2 << 20;  // more than the budget: nothing clean is held
  rc.Trim();
  EXPECT_EQ(rc.stats().bytes, 0u);
}

TEST_F(ReadCacheTest, AStreamIsReadAheadWithAGrowingWindow) {
  constexpr uint64_t kMax = 1 << 20, kSize = 64 << 20, kRead = 64 << 10;
  ReadCache rc(32 << 20, kMax, nullptr);
  uint64_t ahead_to = 0, largest = 0;
  int asked = 0;
  for (uint64_t off = 0; off < 8 << 20; off += kRead) {
    ReadCache::Ahead a = ReadOn(rc, 1, off, kRead, kSize);
    if (a.first == a.end) continue;
    asked++;
    EXPECT_EQ(a.first, std::max(ahead_to, off + kRead)) << "gap or overlap in read-ahead";
    EXPECT_GT(a.end, off + kRead);
    EXPECT_LE(a.end, off + kRead + kMax);
    largest = std::max(largest, a.end - a.first);
    ahead_to = a.end;
    auto v = Bytes(1, a.first / kB, (a.end - a.first) / kB);  // as a read-ahead thread does
    rc.Insert(a.fill, kGen, a.first, v.data(), v.size(), true);
    rc.AheadDone({1, 0, 1}, a.first, a.end);
  }
  EXPECT_GE(asked, 8);
  EXPECT_GE(largest, kMax / 2);
  // Reads a little out of order (a client's concurrent ones) still follow.
  ReadCache::Ahead a = ReadOn(rc, 1, (8 << 20) + kRead, kRead, kSize);
  rc.AheadDone({1, 0, 1}, a.first, a.end);
  // A random read ends the stream.
  EXPECT_EQ(ReadOn(rc, 1, 40 << 20, kRead, kSize).end, 0u);
  EXPECT_EQ(ReadOn(rc, 1, 3 << 20, kRead, kSize).end, 0u);
  // Never past the end of the file.
  EXPECT_EQ(ReadOn(rc, 2, 0, 32 << 10, 100 << 10).end, 0u);  // one read is no stream
  ReadCache::Ahead tail = ReadOn(rc, 2, 32 << 10, 32 << 10, 100 << 10);
  EXPECT_EQ(tail.end, 100u << 10);
  rc.AheadDone({1, 0, 2}, tail.first, tail.end);
  // Off: nothing.
  ReadCache none(32 << 20, 0, nullptr);
  EXPECT_EQ(none.Sequential({1, 0, 1}, kGen, 0, kRead, kSize).end, 0u);
}

// Random 8 KiB reads over small files (the FS7500 file set: 1 MiB each),
// four in flight, are not read ahead: a read that lands just after the one
// before now and then is no stream. (Before, any read within 512 KiB of the
// last one's end counted: half of them here, and each fetched 128 KiB or
// more it never read.) A stream of the same reads in order, four in flight
// and reordered among themselves, is.
TEST_F(ReadCacheTest, RandomReadsOfSmallFilesAreNotReadAhead) {
  constexpr uint64_t kFile = 1 << 20, kRead = 8 << 10;
  ReadCache rc(64 << 20, 4 << 20, nullptr);
  std::mt19937_64 rng(7);
  uint64_t ahead = 0, reads = 0;
  for (int i = 0; i < 20000; i++) {
    const uint64_t ino = 1 + rng() % 16, off = rng() % (kFile / kRead) * kRead;
    ReadCache::Ahead a = ReadOn(rc, ino, off, kRead, kFile);
    ahead += a.end - a.first;
    reads += kRead;
    if (a.first != a.end) rc.AheadDone({1, 0, ino}, a.first, a.end);
  }
  EXPECT_LT(ahead, reads / 20) << "random reads were read ahead";
  // In order, four at a time arriving in reverse: a stream.
  ahead = 0;
  for (uint64_t off = 0; off < kFile; off += 4 * kRead) {
    for (int k = 3; k >= 0; k--) {
      ReadCache::Ahead a = ReadOn(rc, 99, off + k * kRead, kRead, kFile);
      ahead += a.end - a.first;
      if (a.first != a.end) rc.AheadDone({1, 0, 99}, a.first, a.end);
    }
  }
  EXPECT_GE(ahead, kFile / 2) << "a stream read a little out of order was not read ahead";
}

TEST_F(ReadCacheTest, AReadWaitsForTheReadAheadFetchingItsBlocks) {
  ReadCache rc(32 << 20, 1 << 20, nullptr);
  ASSERT_EQ(ReadOn(rc, 1, 0, 64 << 10, 8 << 20).end, 0u);
  ReadCache::Ahead a = ReadOn(rc, 1, 64 << 10, 64 << 10, 8 << 20);
  ASSERT_LT(a.first, a.end);
  std::atomic<bool> done{false};
  std::thread fetcher([&] {
    auto v = Bytes(1, a.first / kB, (a.end - a.first) / kB);
    // The reader below must be waiting before this ends: it is, or it
    // would have returned false having found nothing in flight.
    while (rc.stats().ahead_waits == 0) std::this_thread::yield();
    rc.Insert(a.fill, kGen, a.first, v.data(), v.size(), true);
    done = true;
    rc.AheadDone({1, 0, 1}, a.first, a.end);
  });
  EXPECT_TRUE(rc.WaitAhead({1, 0, 1}, a.first, a.first + kB, 60'000));
  EXPECT_TRUE(done);
  fetcher.join();
  // Its blocks are there, read ahead: the first read of one is not a second.
  EXPECT_EQ(Read(rc, 1, a.first, kB), 0u);
  EXPECT_EQ(rc.stats().prefetch_hit_bytes, kB);
  EXPECT_EQ(rc.stats().protected_bytes, 0u);
  // Nothing in flight: no wait.
  EXPECT_FALSE(rc.WaitAhead({1, 0, 1}, 0, kB, 60'000));
}

TEST_F(ReadCacheTest, ManyThreadsReadAndChangeFilesConsistently) {
  ReadCache rc(256 << 10, 256 << 10, nullptr);  // small: constant eviction
  std::vector<std::thread> ts;
  ts.reserve(4);
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; t++) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 3000; i++) {
        const uint64_t ino = 1 + (i + t) % 5, b = (i * 7 + t) % 100;
        std::vector<uint8_t> out(kB);
        ReadCache::Fill fill;
        auto [first, end] = rc.Get({1, 0, ino}, kGen, b * kB, kB, out.data(), &fill);
        if (first == end && out != Bytes(ino, b)) bad++;
        if (first != end) {
          auto v = Bytes(ino, b);
          rc.Insert(fill, kGen, first, v.data(), kB, i % 3 == 0);
        }
        if (i % 50 == 0) {
          auto v = Bytes(ino, b);  // same bytes: an update that changes nothing
          rc.Update({1, 0, ino}, kGen, b * kB, v.data(), kB);
        }
        if (i % 97 == 0) rc.Drop({1, 0, ino});
        auto a = rc.Sequential({1, 0, ino}, kGen, b * kB, kB, 1 << 20);
        if (a.first != a.end) rc.AheadDone({1, 0, ino}, a.first, a.end);
      }
    });
  }
  for (auto& th : ts) th.join();
  EXPECT_EQ(bad, 0);
  EXPECT_LE(rc.stats().bytes, 256u << 10);
}

}  // namespace
}  // namespace nasgw::cache
