#include "proto/lock_range.h"

#include <algorithm>

#include "base/assert.h"

namespace nasgw::proto {

namespace {

// b begins right after a ends.
bool Touches(const LockRange& a, const LockRange& b) {
  return a.end != kLockEnd && a.end + 1 == b.start;
}

}  // namespace

void AddLockRange(std::vector<LockRange>& ranges, const LockRange& lock) {
  NASGW_ASSERT(lock.start <= lock.end);
  std::vector<LockRange> out;
  out.reserve(ranges.size() + 2);
  LockRange merged = lock;
  for (const LockRange& m : ranges) {
    const bool overlap = Overlaps(m, lock.start, lock.end);
    if (m.type == lock.type && (overlap || Touches(m, lock) || Touches(lock, m))) {
      // Same type: absorbed. (A range of this type next to the one absorbed
      // cannot exist: it would have been merged with it already.)
      merged.start = std::min(merged.start, m.start);
      merged.end = std::max(merged.end, m.end);
    } else if (!overlap) {
      out.push_back(m);
    } else {
      // The other type: the new lock replaces it where they overlap.
      if (m.start < lock.start) out.push_back({m.start, lock.start - 1, m.type});
      if (m.end > lock.end) out.push_back({lock.end + 1, m.end, m.type});
    }
  }
  out.push_back(merged);
  std::sort(out.begin(), out.end(), [](const LockRange& a, const LockRange& b) { return a.start < b.start; });
  ranges.swap(out);
}

void RemoveLockRange(std::vector<LockRange>& ranges, uint64_t start, uint64_t end) {
  NASGW_ASSERT(start <= end);
  std::vector<LockRange> out;
  out.reserve(ranges.size() + 1);
  for (const LockRange& m : ranges) {
    if (!Overlaps(m, start, end)) {
      out.push_back(m);
      continue;
    }
    if (m.start < start) out.push_back({m.start, start - 1, m.type});
    if (m.end > end) out.push_back({end + 1, m.end, m.type});
  }
  ranges.swap(out);
}

bool LockRangesValid(const std::vector<LockRange>& ranges) {
  for (size_t i = 0; i < ranges.size(); i++) {
    const LockRange& r = ranges[i];
    if (r.start > r.end || (r.type != kLockRead && r.type != kLockWrite)) return false;
    if (i == 0) continue;
    const LockRange& p = ranges[i - 1];
    if (p.end >= r.start) return false;                   // overlap, or out of order
    if (Touches(p, r) && p.type == r.type) return false;  // not merged
  }
  return true;
}

}  // namespace nasgw::proto
