// Allocator: free space of the allocation groups one domain owns.
//
// Space is handed out as extents (LUN, byte offset, length), in multiples of
// the allocation unit. Successive allocations rotate over the LUNs that have
// room, so consecutive records of a file land on different LUNs and are read
// and written in parallel (striping); within a LUN an allocation prefers one
// contiguous extent and splits only when free space is fragmented.
//
// The allocator is in memory only. Its state is derived: the metadata store
// records which extents are in use and the domain rebuilds the allocator from
// that when it opens (MarkUsed), so the free map itself never needs to be
// crash-consistent.
//
// Space can be reserved ahead (Reserve) so that a flush that has started can
// always finish: an allocation against a reservation never fails with
// NoSpace. Freed space becomes available at once.
//
// Thread-safety: all methods are safe to call concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"

namespace nasgw::fs {

struct Extent {
  uint32_t lun = 0;
  uint64_t offset = 0;  // bytes from the start of the LUN
  uint64_t length = 0;  // bytes
  uint64_t end() const { return offset + length; }
  bool operator==(const Extent&) const = default;
};

struct AgId {
  uint32_t lun = 0;
  uint32_t index = 0;
  auto operator<=>(const AgId&) const =
      default;  // NOLINT(modernize-use-nullptr): clang-tidy 14 misreads a defaulted <=>
};

class Allocator {
 public:
  // REQUIRES: unit is a power of two >= 512; ag_bytes a multiple of it.
  Allocator(uint64_t ag_bytes, uint64_t unit);

  // Adds a whole allocation group, all free, starting at `offset` on its LUN.
  Status AddGroup(AgId ag, uint64_t offset);

  // Allocates `bytes` (rounded up to the unit) as one or more extents.
  // NoSpace, changing nothing, if that much is not free (less reservations).
  Result<std::vector<Extent>> Allocate(uint64_t bytes);
  // The same against space reserved before; never NoSpace for what was
  // reserved. REQUIRES: bytes <= the reservation left.
  Result<std::vector<Extent>> AllocateReserved(uint64_t bytes);

  // Returns an extent. Corruption if any part of it is already free or lies
  // outside every group (a double free: the metadata is inconsistent).
  Status Free(const Extent& e);
  // Marks an extent in use while the domain is rebuilt from its metadata.
  // Corruption if any part of it is not free (two owners of one block).
  Status MarkUsed(const Extent& e);

  // Sets space aside for a later AllocateReserved; NoSpace if not available.
  Status Reserve(uint64_t bytes);
  void Unreserve(uint64_t bytes);

  uint64_t unit() const { return unit_; }
  uint64_t total_bytes() const;
  uint64_t free_bytes() const;       // not allocated (includes reserved)
  uint64_t available_bytes() const;  // free and not reserved
  uint64_t reserved_bytes() const;
  size_t fragments() const;  // free extents, a measure of fragmentation

 private:
  struct Group {
    uint64_t start = 0;                 // byte offset of the group on its LUN
    uint64_t cursor = 0;                // next-fit position, bytes from start
    std::map<uint64_t, uint64_t> free;  // offset -> length, coalesced
  };

  uint64_t RoundUp(uint64_t b) const { return (b + unit_ - 1) / unit_ * unit_; }
  Result<std::vector<Extent>> AllocateLocked(uint64_t bytes) REQUIRES(mu_);
  // Takes want - *got bytes from g: as one extent if one fits, else (when
  // `fragments`) as many pieces as it has. True when the request is met.
  bool TakeFromGroup(AgId id, Group& g, uint64_t want, std::vector<Extent>* out, uint64_t* got, bool fragments)
      REQUIRES(mu_);
  Group* FindGroup(const Extent& e, AgId* id) REQUIRES(mu_);

  const uint64_t ag_bytes_;
  const uint64_t unit_;
  mutable Mutex mu_;
  std::map<AgId, Group> groups_ GUARDED_BY(mu_);
  std::map<uint32_t, uint64_t> lun_free_ GUARDED_BY(mu_);  // free bytes per LUN
  uint64_t total_ GUARDED_BY(mu_) = 0;
  uint64_t free_ GUARDED_BY(mu_) = 0;
  uint64_t reserved_ GUARDED_BY(mu_) = 0;
  uint32_t next_lun_ GUARDED_BY(mu_) = 0;  // striping rotor
};

}  // namespace nasgw::fs
