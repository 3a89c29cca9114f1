// Latency histogram with log-linear buckets: 16 sub-buckets per power of two,
// so any recorded value is reported within 1/16 (6.25%) of its true value,
// from 1 ns to 2^64 ns, in 976 fixed buckets (no allocation when recording).
//
// Histogram is safe to Record() from one thread while others Snapshot();
// several recording threads are also safe (relaxed atomics), merely slower.
// HistogramData is a plain copy for percentiles and merging.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace nasgw {

constexpr int kHistogramSubBits = 4;
constexpr int kHistogramBuckets = (64 - kHistogramSubBits + 1) * (1 << kHistogramSubBits);

int HistogramBucketOf(uint64_t value);
// Smallest and largest value that fall into a bucket.
uint64_t HistogramBucketLow(int bucket);
uint64_t HistogramBucketHigh(int bucket);

struct HistogramData {
  std::array<uint64_t, kHistogramBuckets> buckets{};
  uint64_t count = 0;
  uint64_t sum = 0;
  uint64_t min = UINT64_MAX;
  uint64_t max = 0;

  void Record(uint64_t value);
  void Merge(const HistogramData& other);
  // Value at quantile q in [0,1]: the upper bound of the bucket that holds it,
  // clipped to the largest value seen. 0 when empty.
  uint64_t Percentile(double q) const;
  double Mean() const { return count ? static_cast<double>(sum) / static_cast<double>(count) : 0.0; }
};

class Histogram {
 public:
  void Record(uint64_t value);
  HistogramData Snapshot() const;

 private:
  std::array<std::atomic<uint64_t>, kHistogramBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_{0};
  std::atomic<uint64_t> min_{UINT64_MAX};
  std::atomic<uint64_t> max_{0};
};

}  // namespace nasgw
