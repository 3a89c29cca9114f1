#include "fs/read_fence.h"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

namespace nasgw::fs {
namespace {

TEST(ReadFenceTest, FreesAtOnceWhenNobodyReads) {
  std::vector<Extent> freed;
  ReadFence f([&](const std::vector<Extent>& e) { freed.insert(freed.end(), e.begin(), e.end()); });
  f.Retire({{0, 4096, 4096}});
  EXPECT_EQ(freed.size(), 1u);
  EXPECT_EQ(f.waiting(), 0u);
}

TEST(ReadFenceTest, WaitsForReadsThatBeganBeforeAndNotForLaterOnes) {
  std::vector<Extent> freed;
  ReadFence f([&](const std::vector<Extent>& e) { freed.insert(freed.end(), e.begin(), e.end()); });
  const uint64_t early = f.Enter();
  f.Retire({{0, 0, 4096}});
  const uint64_t late = f.Enter();  // sees the new maps: not waited for
  f.Retire({{1, 0, 4096}});
  EXPECT_TRUE(freed.empty());
  EXPECT_EQ(f.waiting(), 2u);
  f.Exit(early);
  // The first was retired while only `early` could read it; the second
  // also while `late` was in flight.
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0].lun, 0u);
  f.Exit(late);
  ASSERT_EQ(freed.size(), 2u);
  EXPECT_EQ(freed[1].lun, 1u);
  EXPECT_EQ(f.waiting(), 0u);
}

TEST(ReadFenceTest, ConcurrentReadersNeverSeeTheirSpaceFreed) {
  // A "file" whose map names one block at a time: the writer publishes a
  // new block, then retires the old one. Readers enter, look up the block
  // and read it for a while. A block freed while a reader is on it is a
  // read of reused space.
  constexpr int kBlocks = 20000;
  std::vector<std::atomic<int>> reading(kBlocks + 1);
  std::atomic<uint64_t> current{0};
  std::atomic<int> violations{0};
  std::atomic<int> freed{0};
  ReadFence f([&](const std::vector<Extent>& e) {
    for (const Extent& x : e) {
      if (reading[x.offset].load() != 0) violations++;
      freed++;
    }
  });
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  readers.reserve(3);
  for (int i = 0; i < 3; i++) {
    readers.emplace_back([&] {
      while (!stop) {
        ReadFence::Reader r(f);
        const uint64_t b = current.load();  // the map, loaded after Enter
        reading[b]++;
        std::this_thread::yield();
        reading[b]--;
      }
    });
  }
  for (uint64_t i = 1; i <= kBlocks; i++) {
    const uint64_t old = current.exchange(i);  // the new map is committed
    f.Retire({{0, old, 1}});
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(freed.load(), kBlocks) << "everything retired is freed once the reads are done";
  EXPECT_EQ(f.waiting(), 0u);
}

}  // namespace
}  // namespace nasgw::fs
