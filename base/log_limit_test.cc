#include "base/log_limit.h"

#include <thread>

#include <gtest/gtest.h>

namespace nasgw {
namespace {

constexpr uint64_t kSec = 1'000'000'000;

TEST(LogLimiter, FirstEventAtOnceThenOnePerIntervalWithTheCount) {
  LogLimiter lim(10 * kSec);
  auto r = lim.Add("uid=1000", 100 * kSec, "bad magic");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->key, "uid=1000");
  EXPECT_EQ(r->count, 1u);
  EXPECT_EQ(r->note, "bad magic");
  for (int i = 0; i < 99; i++) EXPECT_FALSE(lim.Add("uid=1000", 100 * kSec + i * kSec / 10, "n" + std::to_string(i)));
  // Another key is independent.
  EXPECT_TRUE(lim.Add("uid=0", 101 * kSec).has_value());
  // The interval passed: the next event reports what was held, itself included.
  r = lim.Add("uid=1000", 110 * kSec, "last");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->count, 100u);
  EXPECT_EQ(r->note, "last");
  EXPECT_FALSE(lim.Add("uid=1000", 111 * kSec));
}

TEST(LogLimiter, DueReportsHeldEventsWhenTheirIntervalPassed) {
  LogLimiter lim(10 * kSec);
  ASSERT_TRUE(lim.Add("a", 0));
  EXPECT_FALSE(lim.Add("a", 1 * kSec, "x"));
  EXPECT_FALSE(lim.Add("a", 2 * kSec, "y"));
  EXPECT_TRUE(lim.Due(9 * kSec).empty());
  auto due = lim.Due(10 * kSec);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].key, "a");
  EXPECT_EQ(due[0].count, 2u);
  EXPECT_EQ(due[0].note, "y");
  // Reported at 10 s: an event at 15 s is held, at 20 s it is due.
  EXPECT_FALSE(lim.Add("a", 15 * kSec));
  EXPECT_TRUE(lim.Due(19 * kSec).empty());
  EXPECT_EQ(lim.Due(20 * kSec).size(), 1u);
  // Quiet for an interval: the key is forgotten, its next event reports at once.
  EXPECT_TRUE(lim.Due(30 * kSec).empty());
  EXPECT_TRUE(lim.Add("a", 31 * kSec).has_value());
}

TEST(LogLimiter, DrainReportsEverythingHeld) {
  LogLimiter lim(10 * kSec);
  ASSERT_TRUE(lim.Add("a", 0));
  ASSERT_TRUE(lim.Add("b", 0));
  EXPECT_FALSE(lim.Add("a", 1));
  EXPECT_FALSE(lim.Add("a", 2));
  auto all = lim.Drain();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].key, "a");
  EXPECT_EQ(all[0].count, 2u);
  EXPECT_TRUE(lim.Drain().empty());
  EXPECT_TRUE(lim.Add("a", 3).has_value()) << "forgotten after a drain";
}

TEST(LogLimiter, KeysAreBounded) {
  LogLimiter lim(10 * kSec, 4);
  int reports = 0;
  uint64_t counted = 0;
  for (int i = 0; i < 100; i++) {
    if (auto r = lim.Add("k" + std::to_string(i), 0)) {
      reports++;
      counted += r->count;
    }
  }
  EXPECT_EQ(reports, 4) << "three keys, then one for the others";
  for (const auto& r : lim.Drain()) {
    EXPECT_EQ(r.key, LogLimiter::kOtherKey);
    counted += r.count;
  }
  EXPECT_EQ(counted, 100u);
}

// Concurrent events: the reports' counts add up to the events.
TEST(LogLimiter, CountsAddUpUnderThreads) {
  LogLimiter lim(kSec / 1000);
  std::atomic<uint64_t> counted{0};
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 10'000; i++) {
        if (auto r = lim.Add("k" + std::to_string(t % 2), i * 1000)) counted += r->count;
        if (i % 100 == 0) {
          for (const auto& d : lim.Due(i * 1000)) counted += d.count;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : lim.Drain()) counted += r.count;
  EXPECT_EQ(counted.load(), 40'000u);
}

}  // namespace
}  // namespace nasgw
