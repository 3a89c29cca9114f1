#include "base/byte_budget.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace nasgw {
namespace {

// Spins until `cond` holds (another thread has reached a state the
// budget's own counts show: no timing involved), at most 10 s.
template <class F>
bool AwaitTrue(F cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(ByteBudgetTest, TakesWhatIsFreeAtOnce) {
  ByteBudget b(10);
  EXPECT_EQ(b.Acquire(4), 4u);
  EXPECT_EQ(b.Acquire(6), 6u);
  EXPECT_EQ(b.used(), 10u);
  b.Release(4);
  b.Release(6);
  EXPECT_EQ(b.used(), 0u);
  EXPECT_EQ(b.waits(), 0u);
}

TEST(ByteBudgetTest, MoreThanTheCapacityTakesAllOfItAlone) {
  ByteBudget b(10);
  EXPECT_EQ(b.Acquire(25), 10u);
  EXPECT_EQ(b.used(), 10u);
  b.Release(10);
  EXPECT_EQ(b.used(), 0u);
}

// A waiter for more than is free blocks, and a later small request that
// would fit queues behind it: served in arrival order once room comes.
TEST(ByteBudgetTest, WaitersAreServedInArrivalOrder) {
  ByteBudget b(10);
  ASSERT_EQ(b.Acquire(8), 8u);
  std::thread big([&] { EXPECT_EQ(b.Acquire(6), 6u); });
  ASSERT_TRUE(AwaitTrue([&] { return b.waiting() == 1; }));
  std::thread small([&] { EXPECT_EQ(b.Acquire(1), 1u); });
  ASSERT_TRUE(AwaitTrue([&] { return b.waiting() == 2; }));
  // 3 free: enough for the small one, not the big one, which came first.
  b.Release(1);
  // 6 free: the big one goes, and the small one, behind it, finds none
  // left. Had the small one gone first, the big one would still wait.
  b.Release(3);
  ASSERT_TRUE(AwaitTrue([&] { return b.used() == 10 && b.waiting() == 1; }))
      << "used " << b.used() << ", waiting " << b.waiting();
  big.join();
  b.Release(6);
  small.join();
  EXPECT_EQ(b.used(), 5u);
  EXPECT_EQ(b.waits(), 2u);
}

TEST(ByteBudgetTest, StopReleasesEveryWaiterWithNothingTaken) {
  ByteBudget b(10);
  ASSERT_EQ(b.Acquire(10), 10u);
  std::atomic<int> stopped{0};
  std::vector<std::thread> ts;
  ts.reserve(3);
  for (int i = 0; i < 3; i++) {
    ts.emplace_back([&] {
      if (b.Acquire(5) == ByteBudget::kStopped) stopped++;
    });
  }
  ASSERT_TRUE(AwaitTrue([&] { return b.waiting() == 3; }));
  b.Stop();
  for (auto& t : ts) t.join();
  EXPECT_EQ(stopped.load(), 3);
  EXPECT_EQ(b.used(), 10u);
  EXPECT_EQ(b.Acquire(1), ByteBudget::kStopped);
}

// Many threads taking and giving back never hold more than the capacity.
TEST(ByteBudgetTest, NeverMoreThanTheCapacityHeld) {
  ByteBudget b(100);
  std::atomic<uint64_t> held{0}, most{0};
  std::vector<std::thread> ts;
  ts.reserve(8);
  for (int t = 0; t < 8; t++) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 2000; i++) {
        const uint64_t n = b.Acquire(1 + (i * 7 + t * 13) % 60);
        const uint64_t now = held += n;
        uint64_t m = most.load();
        while (now > m && !most.compare_exchange_weak(m, now)) {
        }
        held -= n;
        b.Release(n);
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_LE(most.load(), 100u);
  EXPECT_EQ(b.used(), 0u);
}

}  // namespace
}  // namespace nasgw
