// Byte-range lock arithmetic for one lock owner, as POSIX fcntl() does it.
// nasgwd's lock table (daemon/locks.h) keeps each owner's locks on a file
// this way, and the client library (fsal/client) keeps the same record of
// the locks it holds, to take them again on a nasgwd that lost its session;
// one implementation keeps the two in step.
//
// An owner's ranges on one file are kept sorted by start, never overlap, and
// two adjacent ranges (one ends where the next begins) are never of the same
// type: they are merged. A new lock replaces whatever the owner held in its
// range (an upgrade, a downgrade, or a split of a larger range) and merges
// with the owner's ranges of its type that it overlaps or touches; an unlock
// removes the range, splitting a lock that extends beyond it. Ranges are
// inclusive [start, end]; a lock "to the end of the file" ends at
// proto::kLockEnd (2^64 - 1).
#pragma once

#include <cstdint>
#include <vector>

#include "proto/head.h"

namespace nasgw::proto {

struct LockRange {
  uint64_t start = 0;
  uint64_t end = 0;   // inclusive; kLockEnd: to the end of the file
  uint32_t type = 0;  // kLockRead or kLockWrite
  bool operator==(const LockRange&) const = default;
};

inline bool Overlaps(const LockRange& a, uint64_t start, uint64_t end) {
  return a.start <= end && start <= a.end;
}
// Whether two locks of different owners cannot both be held.
inline bool Conflicts(const LockRange& a, const LockRange& b) {
  return Overlaps(a, b.start, b.end) && (a.type == kLockWrite || b.type == kLockWrite);
}
// The protocol's length of a range: 0 when it reaches kLockEnd.
inline uint64_t LockLength(const LockRange& r) {
  return r.end == kLockEnd ? 0 : r.end - r.start + 1;
}

// Applies a lock to an owner's ranges (kept as described above).
// REQUIRES: lock.start <= lock.end, lock.type is kLockRead or kLockWrite.
void AddLockRange(std::vector<LockRange>& ranges, const LockRange& lock);
// Removes [start, end] from an owner's ranges. REQUIRES: start <= end.
void RemoveLockRange(std::vector<LockRange>& ranges, uint64_t start, uint64_t end);
// Whether `ranges` is in the canonical form (sorted, disjoint, merged).
bool LockRangesValid(const std::vector<LockRange>& ranges);

}  // namespace nasgw::proto
