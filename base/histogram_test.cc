#include "base/histogram.h"

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace nasgw {
namespace {

TEST(Histogram, BucketsAreContiguousAndMonotonic) {
  for (int b = 0; b + 1 < kHistogramBuckets; b++) {
    ASSERT_EQ(HistogramBucketHigh(b) + 1, HistogramBucketLow(b + 1)) << b;
    ASSERT_LE(HistogramBucketLow(b), HistogramBucketHigh(b)) << b;
  }
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100000; i++) {
    uint64_t v = rng() >> (rng() % 64);
    int b = HistogramBucketOf(v);
    ASSERT_LE(HistogramBucketLow(b), v);
    ASSERT_GE(HistogramBucketHigh(b), v);
  }
  EXPECT_EQ(HistogramBucketOf(UINT64_MAX), kHistogramBuckets - 1);
}

TEST(Histogram, PercentilesWithinBucketPrecision) {
  HistogramData h;
  std::vector<uint64_t> values;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; i++) {
    uint64_t v = 1000 + rng() % 1'000'000;
    values.push_back(v);
    h.Record(v);
  }
  std::sort(values.begin(), values.end());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    uint64_t exact = values[static_cast<size_t>(q * values.size() + 0.999999) - 1];
    uint64_t got = h.Percentile(q);
    EXPECT_GE(got, exact) << q;
    EXPECT_LE(static_cast<double>(got), static_cast<double>(exact) * 1.0625 + 1) << q;
  }
  EXPECT_EQ(h.Percentile(1.0), values.back());
  EXPECT_EQ(h.min, values.front());
}

TEST(Histogram, EmptyIsZero) {
  HistogramData h;
  EXPECT_EQ(h.Percentile(0.99), 0u);
  EXPECT_EQ(h.Mean(), 0.0);
}

TEST(Histogram, ConcurrentRecordAndMerge) {
  Histogram h;
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 10000; i++) h.Record(static_cast<uint64_t>(t) * 10000 + i);
    });
  }
  for (auto& t : threads) t.join();
  HistogramData d = h.Snapshot();
  EXPECT_EQ(d.count, 40000u);
  EXPECT_EQ(d.min, 0u);
  EXPECT_EQ(d.max, 39999u);
  HistogramData twice = d;
  twice.Merge(d);
  EXPECT_EQ(twice.count, 80000u);
  EXPECT_EQ(twice.Percentile(0.5), d.Percentile(0.5));
}

}  // namespace
}  // namespace nasgw
