// Clocks. Monotonic time is what every timeout and latency in nasgw uses;
// wall time only ever goes into records a human reads.
#pragma once

#include <cstdint>
#include <ctime>

namespace nasgw {

inline uint64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// CLOCK_BOOTTIME: monotonic, and unlike CLOCK_MONOTONIC it goes on counting
// while the machine is suspended (a paused VM, a laptop lid). What a node
// counts of its own lease uses it: other nodes' clocks ran meanwhile.
inline uint64_t BootNanos() {
  timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t WallNanos() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

constexpr uint64_t kNanosPerMilli = 1'000'000;

}  // namespace nasgw
