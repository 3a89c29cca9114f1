#include "base/histogram.h"

#include <bit>

#include "base/assert.h"

namespace nasgw {

static_assert(kHistogramBuckets == 976);

int HistogramBucketOf(uint64_t value) {
  constexpr uint64_t kLinear = 2u << kHistogramSubBits;  // values below are exact
  if (value < kLinear) return static_cast<int>(value);
  const int msb = 63 - std::countl_zero(value);
  const int e = msb - kHistogramSubBits;
  const uint64_t sub = (value >> e) & ((1u << kHistogramSubBits) - 1);
  return (e + 1) * (1 << kHistogramSubBits) + static_cast<int>(sub);
}

uint64_t HistogramBucketLow(int bucket) {
  constexpr int kLinear = 2 << kHistogramSubBits;
  if (bucket < kLinear) return static_cast<uint64_t>(bucket);
  const int e = bucket / (1 << kHistogramSubBits) - 1;
  const uint64_t m = static_cast<uint64_t>(bucket % (1 << kHistogramSubBits)) + (1u << kHistogramSubBits);
  return m << e;
}

uint64_t HistogramBucketHigh(int bucket) {
  if (bucket + 1 >= kHistogramBuckets) return UINT64_MAX;
  return HistogramBucketLow(bucket + 1) - 1;
}

void HistogramData::Record(uint64_t value) {
  buckets[HistogramBucketOf(value)]++;
  count++;
  sum += value;
  if (value < min) min = value;
  if (value > max) max = value;
}

void HistogramData::Merge(const HistogramData& other) {
  for (int i = 0; i < kHistogramBuckets; i++) buckets[i] += other.buckets[i];
  count += other.count;
  sum += other.sum;
  if (other.min < min) min = other.min;
  if (other.max > max) max = other.max;
}

uint64_t HistogramData::Percentile(double q) const {
  if (count == 0) return 0;
  if (q <= 0) return min;
  // Rank of the wanted sample, 1-based, rounded up: p99 of 100 samples is the 99th.
  uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(count) + 0.999999);
  if (rank < 1) rank = 1;
  if (rank > count) rank = count;
  uint64_t seen = 0;
  for (int i = 0; i < kHistogramBuckets; i++) {
    seen += buckets[i];
    if (seen >= rank) {
      uint64_t high = HistogramBucketHigh(i);
      return high < max ? high : max;
    }
  }
  return max;
}

void Histogram::Record(uint64_t value) {
  buckets_[HistogramBucketOf(value)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
  uint64_t cur = min_.load(std::memory_order_relaxed);
  while (value < cur && !min_.compare_exchange_weak(cur, value, std::memory_order_relaxed)) {
  }
  cur = max_.load(std::memory_order_relaxed);
  while (value > cur && !max_.compare_exchange_weak(cur, value, std::memory_order_relaxed)) {
  }
}

HistogramData Histogram::Snapshot() const {
  HistogramData d;
  for (int i = 0; i < kHistogramBuckets; i++) d.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  d.count = 0;
  for (uint64_t b : d.buckets) d.count += b;  // consistent with the buckets we copied
  d.sum = sum_.load(std::memory_order_relaxed);
  d.min = min_.load(std::memory_order_relaxed);
  d.max = max_.load(std::memory_order_relaxed);
  return d;
}

}  // namespace nasgw
